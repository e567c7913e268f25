"""
A Confluence → custom workflow → Astra DB pipeline, built and run from Airflow.

1. Create (or reuse, by name) a Confluence source connector and an Astra DB destination connector.
2. Check both connections (the task fails with the service's reason when a check fails).
3. Create (or update) a custom workflow: partition → chunk → embed, running daily in the service.
4. Run it now and wait in the triggerer (deferrable) for the job.

Nothing secret is written here: the settings come from Airflow Variables, which can be set in the UI,
with ``airflow variables set``, or as environment variables (``AIRFLOW_VAR_<NAME>``)::

    AIRFLOW_VAR_WORKFLOWSVC_CONFLUENCE_URL=https://example.atlassian.net/wiki
    AIRFLOW_VAR_WORKFLOWSVC_CONFLUENCE_USER=me@example.com
    AIRFLOW_VAR_WORKFLOWSVC_CONFLUENCE_TOKEN=<Confluence API token>        (secret)
    AIRFLOW_VAR_WORKFLOWSVC_ASTRA_ENDPOINT=https://<db id>-<region>.apps.astra.datastax.com
    AIRFLOW_VAR_WORKFLOWSVC_ASTRA_TOKEN=<Astra DB application token>       (secret)

Variable names containing ``token`` are masked in logs by Airflow, and the operators mask every secret
config field (``token``, ``password``, ...) in logs and rendered templates. Confluence offers three
ways to authenticate (API token + user, personal access token, user + password); this example uses an
API token on a cloud instance. The DAG is paused when it first appears: unpause it once the Variables
are set.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag

from airflow_provider_workflowsvc.operators.connectors import (
    CreateDestinationConnectorOperator,
    CreateSourceConnectorOperator,
    DestinationConnectionCheckOperator,
    SourceConnectionCheckOperator,
)
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

WORKFLOW_NODES = [
    {"name": "Partitioner", "type": "partition", "subtype": "hi_res", "settings": {"strategy": "hi_res"}},
    {
        "name": "Chunker",
        "type": "chunk",
        "subtype": "chunk_by_title",
        "settings": {"max_characters": 1500, "overlap": 150},
    },
    {"name": "Embedder", "type": "embed", "subtype": "text-embedding-3-small", "settings": {}},
]


@dag(
    dag_id="workflowsvc_example_connectors_pipeline",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    is_paused_upon_creation=True,  # needs the Variables above first
    tags=["workflowsvc", "example"],
    doc_md=__doc__,
)
def workflowsvc_example_connectors_pipeline() -> None:
    # [START howto_operator_workflowsvc_create_source_connector]
    source = CreateSourceConnectorOperator(
        task_id="create_confluence_source",
        name="airflow-example-confluence",
        connector_type="confluence",
        config={
            "url": "{{ var.value.workflowsvc_confluence_url }}",
            # API-token authentication on a cloud instance: username + token, cloud=True.
            "username": "{{ var.value.workflowsvc_confluence_user }}",
            "token": "{{ var.value.workflowsvc_confluence_token }}",
            "cloud": True,
            "spaces": ["ENG", "SALES"],
            "max_num_of_docs_from_each_space": 50,
        },
        if_exists="update",  # keep the stored config in step with this DAG
    )
    # [END howto_operator_workflowsvc_create_source_connector]
    # [START howto_operator_workflowsvc_create_destination_connector]
    destination = CreateDestinationConnectorOperator(
        task_id="create_astradb_destination",
        name="airflow-example-astradb",
        connector_type="astradb",
        config={
            "api_endpoint": "{{ var.value.workflowsvc_astra_endpoint }}",
            "token": "{{ var.value.workflowsvc_astra_token }}",
            "collection_name": "confluence_pages",
            "keyspace": "default_keyspace",
            "batch_size": 20,
            "flatten_metadata": False,
        },
        if_exists="update",
    )
    # [END howto_operator_workflowsvc_create_destination_connector]

    # [START howto_operator_workflowsvc_connection_check]
    source_id = SourceConnectionCheckOperator(
        task_id="check_source", connector_id=source.output, poll_interval=2, timeout=300
    ).output
    destination_id = DestinationConnectionCheckOperator(
        task_id="check_destination", connector_id=destination.output, poll_interval=2, timeout=300
    ).output
    # [END howto_operator_workflowsvc_connection_check]

    # [START howto_operator_workflowsvc_create_custom_workflow]
    workflow_id = CreateWorkflowOperator(
        task_id="create_workflow",
        name="airflow-example-confluence-to-astradb",
        workflow_type="custom",
        source_id=source_id,
        destination_id=destination_id,
        workflow_nodes=WORKFLOW_NODES,
        schedule="daily",  # the service also runs it every day on its own (see example_sensor.py)
        if_exists="update",
    ).output
    # [END howto_operator_workflowsvc_create_custom_workflow]

    # [START howto_operator_workflowsvc_run_workflow_connector_source]
    RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow_id,
        deferrable=True,
        poll_interval=30,
        timeout=6 * 3600,
    )
    # [END howto_operator_workflowsvc_run_workflow_connector_source]


workflowsvc_example_connectors_pipeline()
