"""An S3-fed run for the lineage tests: files listed in a bucket (moto, on loopback), outputs downloaded
into the bucket. The bucket and the Airflow connection come from Variables (``lineage_storage_*``)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

BUCKET = "s3://{{ var.value.lineage_storage_bucket }}"


@dag(dag_id="lineage_object_storage", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def lineage_object_storage() -> None:
    workflow = CreateWorkflowOperator(
        task_id="create_workflow", name="lineage-object-storage", workflow_type="basic", if_exists="reuse"
    )
    run = RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        files=f"{BUCKET}/docs/",
        files_conn_id="{{ var.value.lineage_storage_conn }}",
        poll_interval=0.05,
        timeout=120,
    )
    download = DownloadJobOutputOperator(
        task_id="download_output",
        run_task_id="run_workflow",
        output_dir=f"{BUCKET}/out/lineage",
        output_conn_id="{{ var.value.lineage_storage_conn }}",
    )
    run >> download


lineage_object_storage()
