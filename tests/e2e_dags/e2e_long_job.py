"""End-to-end test DAG: a job that runs until the deferred task is marked failed (the test's emulator
is set to a very long processing delay), so the trigger's ``on_kill`` must cancel it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

with DAG(
    dag_id="workflowsvc_e2e_long_job",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    workflow = CreateWorkflowOperator(
        task_id="create_workflow", name="e2e-long-job", workflow_type="basic", if_exists="reuse"
    )
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        files=str(Path(__file__).resolve().parent / "long_job_input.txt"),
        deferrable=True,
        poll_interval=2,
        timeout=600,
        cancel_on_kill=True,
    )
