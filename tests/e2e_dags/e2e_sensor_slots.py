"""End-to-end test DAG: two deferrable sensors on one job, one started in the triggerer (the default on
Airflow 3.3+), one whose first poke runs in a worker (``start_from_trigger=False``, as before)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

JOB_ID = "{{ ti.xcom_pull(task_ids='run_workflow', key='job_id') }}"

with DAG(
    dag_id="workflowsvc_e2e_sensor_slots",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    workflow = CreateWorkflowOperator(
        task_id="create_workflow", name="e2e-sensor-slots", workflow_type="basic", if_exists="reuse"
    )
    run = RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        files=str(Path(__file__).resolve().parent / "long_job_input.txt"),
        wait_for_completion=False,
    )
    in_triggerer = WorkflowJobSensor(task_id="in_triggerer", job_id=JOB_ID, deferrable=True, poke_interval=2)
    from_worker = WorkflowJobSensor(
        task_id="from_worker", job_id=JOB_ID, deferrable=True, poke_interval=2, start_from_trigger=False
    )
    run >> [in_triggerer, from_worker]
