"""End-to-end test DAG: four deferrable runs of one workflow in an Airflow pool of two slots that counts
deferred tasks (``include_deferred=True``, created by the test): at most two jobs are in flight.

One retry: on a busy machine Airflow has failed a task resuming after its trigger's success event (its
worker part never ran); the retry goes on with the job in the task state store, sending no second run
while that job may still deliver, which the test checks (a try failed while deferred has its job
cancelled: its retry runs the workflow anew).

A task whose wait ended goes back to ``scheduled`` and needs a slot again to finish; Airflow hands free
slots out by priority, not by who held one before. The runs' weights fall with their index so that a
task finishing usually goes before one not yet started; the test does not rest on it (a finishing task
whose trigger fires late can find its slot taken by a new task: the cap holds all the same)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

POOL = "workflowsvc_e2e_jobs"
RUNS = 4

with DAG(
    dag_id="workflowsvc_e2e_pool_cap",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    workflow = CreateWorkflowOperator(
        task_id="create_workflow", name="e2e-pool-cap", workflow_type="basic", if_exists="reuse"
    )
    for index in range(RUNS):
        RunWorkflowOperator(
            task_id=f"run_{index}",
            workflow_id=workflow.output,
            files=str(Path(__file__).resolve().parent / "long_job_input.txt"),
            deferrable=True,
            poll_interval=2,
            timeout=600,
            pool=POOL,
            priority_weight=RUNS - index,
            weight_rule="absolute",
            retries=1,
            retry_delay=timedelta(seconds=1),
        )
