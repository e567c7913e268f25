"""Distributed end-to-end DAG: one non-deferrable durable wait (the failover waits' DAG is the failover
benchmark's, written by the test: benchmarks/bench_failover.py).

``workflowsvc_e2e_durable``: one task waiting in the worker (``deferrable=False``) with a retry, so a
killed worker's retry must reattach to the job stored in the task state store (Airflow 3.3+).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

INPUT = "s3://dist_s3@dist-inputs/input.txt"
"""In the test's bucket (moto's S3 server; connection ``dist_s3``): the workers share no disk."""

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
