"""Connector-driven runs for the lineage tests: S3 → Astra DB, and an unknown type (Box) → S3.

Secrets come from Variables (``LINEAGE_SECRET_*``) under key names no rule knows (``client_cred``,
``box_app_config``, ``aws_secret``), and in URLs (``user:password@``, a SAS-like query): none may reach
an OpenLineage event.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from airflow_provider_workflowsvc.assets import destination_asset
from airflow_provider_workflowsvc.operators.connectors import (
    CreateDestinationConnectorOperator,
    CreateSourceConnectorOperator,
)
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

ASTRA = {
    "api_endpoint": "https://db-1234-eu.apps.astra.datastax.com",
    "collection_name": "handbook",
    "keyspace": "docs_ks",
}
S3_OUT = {"remote_url": "s3://lineage-out/processed/"}


@dag(dag_id="lineage_s3_to_astradb", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def lineage_s3_to_astradb() -> None:
    source = CreateSourceConnectorOperator(
        task_id="create_source",
        name="lineage-s3-in",
        connector_type="s3",
        config={
            "remote_url": "s3://{{ var.value.lineage_bucket_user }}:{{ var.value.lineage_secret_a }}"
            "@lineage-in/handbook/?sig={{ var.value.lineage_secret_b }}",
            "client_cred": "{{ var.value.lineage_secret_c }}",
            "emulator_documents": 3,
        },
        if_exists="update",
    )
    destination = CreateDestinationConnectorOperator(
        task_id="create_destination",
        name="lineage-astra",
        connector_type="astradb",
        config={**ASTRA, "token": "{{ var.value.lineage_secret_d }}"},
        if_exists="update",
    )
    workflow = CreateWorkflowOperator(
        task_id="create_workflow",
        name="lineage-s3-to-astradb",
        workflow_type="basic",
        source_id=source.output,
        destination_id=destination.output,
        if_exists="update",
    )
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow.output,
        poll_interval=0.1,
        deferrable=True,
        outlets=[destination_asset("astradb", ASTRA)],
    )


@dag(dag_id="lineage_box_to_s3", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def lineage_box_to_s3() -> None:
    source = CreateSourceConnectorOperator(
        task_id="create_source",
        name="lineage-box",
        connector_type="box",
        config={
            "remote_url": "box://lineage",
            "box_app_config": "{{ var.value.lineage_secret_e }}",
            "emulator_documents": 2,
        },
        if_exists="update",
    )
    destination = CreateDestinationConnectorOperator(
        task_id="create_destination",
        name="lineage-s3-out",
        connector_type="s3",
        config={**S3_OUT, "aws_secret": "{{ var.value.lineage_secret_f }}"},
        if_exists="update",
    )
    workflow = CreateWorkflowOperator(
        task_id="create_workflow",
        name="lineage-box-to-s3",
        workflow_type="basic",
        source_id=source.output,
        destination_id=destination.output,
        if_exists="update",
    )
    RunWorkflowOperator(task_id="run_workflow", workflow_id=workflow.output, poll_interval=0.1)


lineage_s3_to_astradb()
lineage_box_to_s3()
