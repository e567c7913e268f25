"""
Wait for the job a workflow's own schedule starts in the service, then use its result.

A workflow with a ``schedule`` (``daily``, ``every hour``, ...) creates its jobs inside the service,
not from Airflow. This DAG runs daily and waits, in the triggerer (deferrable), for the first job of
that workflow created after the DAG run was due, then hands the job summary to a downstream task. The
sensor only watches: it never cancels the job.

Set the workflow to watch as an Airflow Variable, e.g. the workflow of
``example_connectors_pipeline.py``::

    AIRFLOW_VAR_WORKFLOWSVC_SCHEDULED_WORKFLOW_ID=<workflow id>

The DAG is paused when it first appears: unpause it once the Variable is set.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor


@dag(
    dag_id="workflowsvc_example_sensor",
    schedule="@daily",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    is_paused_upon_creation=True,  # needs the Variable above first
    tags=["workflowsvc", "example"],
    doc_md=__doc__,
)
def workflowsvc_example_sensor() -> None:
    # [START howto_sensor_workflowsvc_job]
    job = WorkflowJobSensor(
        task_id="wait_for_scheduled_job",
        workflow_id="{{ var.value.workflowsvc_scheduled_workflow_id }}",
        created_after="{{ dag_run.run_after }}",  # only a job started after this run was due
        pick="earliest",  # the next job, not the newest one
        deferrable=True,
        poke_interval=60,
        timeout=timedelta(hours=6).total_seconds(),
        fail_on_failed_files=False,
    )
    # [END howto_sensor_workflowsvc_job]

    @task
    def report(result: dict[str, Any]) -> None:
        print(f"Job {result['job_id']} of workflow {result['workflow_id']}: {result['status']}")
        for failed in result["failed_files"]:
            print(f"  failed document {failed['document']}: {failed['error']}")

    report(job.output)


workflowsvc_example_sensor()
