"""
Event-driven scheduling: a DAG that runs once for each job a workflow's own schedule starts.

A workflow with a ``schedule`` (``daily``, ``every hour``, ...) creates its jobs inside the service. The
asset ``workflowsvc-scheduled-jobs`` is *watched* by a ``WorkflowJobEventTrigger`` in the triggerer: each
job of the workflow that reaches a final status gives one asset event, whose ``extra["payload"]`` is
the job's summary, and the scheduler starts a run of ``workflowsvc_example_job_events`` for it. No task
waits on a clock guessed to come after the job, and no sensor holds a worker slot.

A watcher's arguments are fixed when the DAG file is parsed (they are not templated): put the id of
your scheduled workflow in ``SCHEDULED_WORKFLOW_ID``, e.g. the workflow of
``example_connectors_pipeline.py``. On Airflow 3.3+ the trigger remembers which jobs it reported in the
asset's state store: jobs that end while the triggerer is down are reported when it is back, none twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Asset, AssetWatcher, dag, task

from airflow_provider_workflowsvc import WorkflowJobEventTrigger

SCHEDULED_WORKFLOW_ID = "6f1c3a52-6a4e-4c8e-9d0b-2f7e1c9a5b10"
"""The workflow the service runs on its own schedule (replace it with yours)."""
POLL_INTERVAL = 60
"""Seconds between two listings of the workflow's jobs (one request for every watcher of it)."""

# [START howto_trigger_workflowsvc_job_events]
SCHEDULED_JOBS = Asset(
    "workflowsvc-scheduled-jobs",
    watchers=[
        AssetWatcher(
            name="workflowsvc_scheduled_jobs",
            trigger=WorkflowJobEventTrigger(
                workflow_id=SCHEDULED_WORKFLOW_ID,
                poll_interval=POLL_INTERVAL,
                # statuses=["failed", "stopped"],  # e.g. only the jobs that did not complete
            ),
        )
    ],
)


@dag(
    dag_id="workflowsvc_example_job_events",
    schedule=[SCHEDULED_JOBS],
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "example"],
    doc_md=__doc__,
)
def workflowsvc_example_job_events() -> None:
    @task
    def report_jobs(*, triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """Log each job that started this run; the return value (XCom) lists their summaries."""
        jobs = [dict(event.extra["payload"]) for event in triggering_asset_events[SCHEDULED_JOBS]]
        for job in jobs:
            print(
                f"Job {job['job_id']} of workflow {job['workflow_name']} ended {job['status']}: "
                f"{job['documents_written']} document(s) written, {job['failed_count']} failed"
            )
        return jobs

    report_jobs()


# [END howto_trigger_workflowsvc_job_events]

workflowsvc_example_job_events()
