"""End-to-end test DAGs of long waits (issue #24): a connection stored in Airflow's metadata DB whose
token the test rotates while the task is deferred; Airflow's ``execution_timeout`` bounding a deferred
wait (the job, with the test's long processing delay, would run far longer)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

INPUT = str(Path(__file__).resolve().parent / "long_job_input.txt")

with DAG(
    dag_id="workflowsvc_e2e_rotation",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    workflow = CreateWorkflowOperator(
        task_id="create_workflow",
        name="e2e-rotation",
        workflow_type="basic",
        if_exists="reuse",
        workflowsvc_conn_id="workflowsvc_rotating",
    )
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        files=INPUT,
        workflowsvc_conn_id="workflowsvc_rotating",
        deferrable=True,
        poll_interval=1,
        timeout=600,
    )

with DAG(
    dag_id="workflowsvc_e2e_execution_timeout",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    workflow = CreateWorkflowOperator(
        task_id="create_workflow", name="e2e-execution-timeout", workflow_type="basic", if_exists="reuse"
    )
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        files=INPUT,
        deferrable=True,
        poll_interval=1,
        timeout=3600,
        execution_timeout=timedelta(seconds=15),
        cancel_on_timeout=True,
    )
