"""
Data-aware scheduling: a DAG that runs when a workflow has written new documents to S3.

* ``workflowsvc_example_asset_producer`` processes the sample documents with a workflow whose
  destination is an S3 prefix. Its run task has the destination's ``Asset`` in ``outlets``: when the
  job succeeds, Airflow records an asset event whose extra holds the job (``job_id``,
  ``workflow_id``, ``status``, ``documents_written``, ``failed_count``).
* ``workflowsvc_example_asset_consumer`` is scheduled on that asset: each event starts a run, which
  reads the job from the event's extra.

``destination_asset`` builds the asset from the destination's identifying, non-secret settings (the
S3 ``remote_url``); the URI, ``s3://example-bucket/processed``, is also the output dataset that the
OpenLineage provider reports for the job. The S3 credentials come from Airflow Variables::

    AIRFLOW_VAR_WORKFLOWSVC_S3_KEY_ID=<access key id>
    AIRFLOW_VAR_WORKFLOWSVC_S3_SECRET=<secret access key>                  (secret)

The producer is paused when it first appears: unpause it once the Variables are set.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import dag, task

from airflow_provider_workflowsvc.assets import destination_asset
from airflow_provider_workflowsvc.operators.connectors import CreateDestinationConnectorOperator
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

SAMPLE_DOCS = Path(__file__).resolve().parent / "sample_docs"
# [START howto_asset_workflowsvc_destination]
S3_DESTINATION = {"remote_url": "s3://example-bucket/processed/"}
"""The identifying settings of the destination: the connector's config and the asset share them."""
PROCESSED_DOCS = destination_asset("s3", S3_DESTINATION)
# [END howto_asset_workflowsvc_destination]


@dag(
    dag_id="workflowsvc_example_asset_producer",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    is_paused_upon_creation=True,  # needs the Variables above first
    tags=["workflowsvc", "example"],
    doc_md=__doc__,
)
def workflowsvc_example_asset_producer() -> None:
    destination = CreateDestinationConnectorOperator(
        task_id="create_s3_destination",
        name="airflow-example-processed-docs",
        connector_type="s3",
        config={
            **S3_DESTINATION,
            "key": "{{ var.value.workflowsvc_s3_key_id }}",
            "secret": "{{ var.value.workflowsvc_s3_secret }}",
        },
        if_exists="update",
    )
    workflow_id = CreateWorkflowOperator(
        task_id="create_workflow",
        name="airflow-example-files-to-s3",
        workflow_type="basic",  # no source: the files are sent with the run
        destination_id=destination.output,
        if_exists="update",
    ).output
    # [START howto_operator_workflowsvc_run_workflow_outlets]
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow_id,
        files=str(SAMPLE_DOCS),
        deferrable=True,
        poll_interval=5,
        timeout=3600,
        fail_on_failed_files=False,  # empty.txt fails; the other documents are still written
        outlets=[PROCESSED_DOCS],  # an asset event (with the job in its extra) when the job succeeds
    )
    # [END howto_operator_workflowsvc_run_workflow_outlets]


@dag(
    dag_id="workflowsvc_example_asset_consumer",
    schedule=[PROCESSED_DOCS],
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "example"],
    doc_md=__doc__,
)
def workflowsvc_example_asset_consumer() -> None:
    # [START howto_asset_workflowsvc_consumer]
    @task
    def report_new_documents(*, triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """Log the jobs whose asset events started this run; the return value (XCom) lists them."""
        jobs = [dict(event.extra) for event in triggering_asset_events[PROCESSED_DOCS]]
        for job in jobs:
            print(
                f"Job {job['job_id']} of workflow {job['workflow_id']} ({job['status']}) wrote "
                f"{job['documents_written']} document(s) to {PROCESSED_DOCS.uri}; "
                f"{job['failed_count']} failed"
            )
        return jobs

    report_new_documents()
    # [END howto_asset_workflowsvc_consumer]


workflowsvc_example_asset_producer()
workflowsvc_example_asset_consumer()
