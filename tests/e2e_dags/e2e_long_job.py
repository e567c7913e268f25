"""End-to-end test DAG: a workflow's job and an on-demand job that run until their deferred tasks are
marked or cleared (the test's emulator is set to a very long processing delay), so the triggers'
``on_kill`` must cancel them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.on_demand import RunOnDemandJobOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

with DAG(
    dag_id="workflowsvc_e2e_long_job",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    INPUT = str(Path(__file__).resolve().parent / "long_job_input.txt")
    workflow = CreateWorkflowOperator(
        task_id="create_workflow", name="e2e-long-job", workflow_type="basic", if_exists="reuse"
    )
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        files=INPUT,
        deferrable=True,
        poll_interval=2,
        timeout=600,
        cancel_on_kill=True,
    )
    RunOnDemandJobOperator(
        task_id="run_on_demand",
        template_id="hi_res_partition",
        files=INPUT,
        deferrable=True,
        poll_interval=2,
        timeout=600,
        cancel_on_kill=True,
    )
