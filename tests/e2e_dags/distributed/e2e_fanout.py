"""Distributed end-to-end DAGs: many deferred waits at once, and one non-deferrable durable wait.

``workflowsvc_e2e_fanout``: 20 ``RunWorkflowOperator`` tasks, each running the workflow at its place in
the run's conf (``workflows``; the test gives two workflows ten tasks each, whose waits share status
polls), all deferred to the triggerers while the emulator keeps the jobs busy.
``workflowsvc_e2e_durable``: one task waiting in the worker (``deferrable=False``) with a retry, so a
killed worker's retry must reattach to the job stored in the task state store (Airflow 3.3+).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

FANOUT_TASKS = 20
INPUT = "s3://dist_s3@dist-inputs/input.txt"
"""In the test's bucket (moto's S3 server; connection ``dist_s3``): the workers share no disk."""

with DAG(
    dag_id="workflowsvc_e2e_fanout",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_tasks=FANOUT_TASKS,
    tags=["workflowsvc", "e2e"],
):
    for n in range(FANOUT_TASKS):
        RunWorkflowOperator(
            task_id=f"run_{n:02d}",
            workflow_id=f"{{{{ dag_run.conf['workflows'][{n}] }}}}",
            files=INPUT,
            deferrable=True,
            poll_interval=2,
            timeout=900,
        )

with DAG(
    dag_id="workflowsvc_e2e_durable",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):
    RunWorkflowOperator(
        task_id="run_in_worker",
        workflow_id="{{ dag_run.conf['workflow'] }}",
        files=INPUT,
        deferrable=False,
        poll_interval=1,
        timeout=900,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
