"""End-to-end test DAG: two deferrable sensors on one known job (``dag_run.conf``), one started in the
triggerer (the default on Airflow 3.3+), one whose first poke runs in a worker
(``start_from_trigger=False``, as before)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

JOB_ID = "{{ dag_run.conf['job_id'] }}"

with DAG(
    dag_id="workflowsvc_e2e_sensor_slots",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    in_triggerer = WorkflowJobSensor(task_id="in_triggerer", job_id=JOB_ID, deferrable=True, poke_interval=2)
    from_worker = WorkflowJobSensor(
        task_id="from_worker", job_id=JOB_ID, deferrable=True, poke_interval=2, start_from_trigger=False
    )
