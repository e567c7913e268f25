"""The live service's language through hook, operators and emulator, in both dialects (issue #23).

Its auth (the API key alone, as ``unstructured-api-key``), the connector types its docs list beyond the
spec, ``template_id`` and a download without ``node_id``: the provider sends them all (a name it does
not know passes with a warning); the platform dialect accepts them, the spec dialect answers 422.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from airflow_provider_workflowsvc.exceptions import WorkflowServiceAuthError, WorkflowServiceValidationError
from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
from airflow_provider_workflowsvc.operators import connectors as conn_ops, workflows as wf_ops

OPENSEARCH = {
    "hosts": ["https://search.example.com:9200"],
    "index_name": "docs",
    "username": "u",
    "password": "pw-os",
}
AZURE_OUT = {"remote_url": "az://container/out", "account_name": "acct", "account_key": "acct-key-1"}
TERADATA = {"host": "td.example.com", "table_name": "t", "user": "u", "password": "pw-td"}


def live_only(emulator: Any, action: Any) -> Any:
    """Run ``action``: its result on the platform; on the spec dialect, the 422 the spec's service gives."""
    if emulator.dialect == "platform":
        return action()
    with pytest.raises(WorkflowServiceValidationError):
        action()
    return None


@pytest.fixture
def key_only_hook(emulator: Any) -> Iterator[WorkflowServiceHook]:
    """A hook with the connection's API key and no token: what a user of the live service holds."""
    settings = ConnectionSettings(base_url=emulator.base_url, api_key=emulator.api_key, retry_wait=0.05)
    with WorkflowServiceHook(settings=settings) as hook:
        yield hook


@pytest.fixture
def hook(settings: ConnectionSettings) -> Iterator[WorkflowServiceHook]:
    with WorkflowServiceHook(settings=settings) as hook:
        yield hook


def test_an_api_key_alone_authenticates_on_the_platform(
    emulator: Any, key_only_hook: WorkflowServiceHook
) -> None:
    if emulator.dialect == "platform":
        assert key_only_hook.list_jobs() == []
        sent = emulator.requests()[-1]
        assert sent["status"] == 200
    else:  # the spec asks for the bearer token
        with pytest.raises(WorkflowServiceAuthError):
            key_only_hook.list_jobs()


def test_a_wrong_api_key_is_refused_on_the_platform(emulator: Any) -> None:
    settings = ConnectionSettings(base_url=emulator.base_url, api_key="key-wrong-0", max_retries=0)
    with WorkflowServiceHook(settings=settings) as hook, pytest.raises(WorkflowServiceAuthError) as raised:
        hook.list_jobs()
    assert raised.value.status_code == 401
    assert "key-wrong-0" not in str(raised.value)


def test_the_live_docs_connector_types_through_the_hook(emulator: Any, hook: WorkflowServiceHook) -> None:
    source = live_only(emulator, lambda: hook.create_source("search-in", "opensearch", OPENSEARCH))
    azure = live_only(emulator, lambda: hook.create_destination("blob-out", "azure", AZURE_OUT))
    teradata = live_only(emulator, lambda: hook.create_destination("td-out", "teradata", TERADATA))
    listed = live_only(emulator, lambda: hook.list_sources(source_type="opensearch"))
    if emulator.dialect == "spec":
        return
    assert [s.id for s in listed] == [source.id]
    assert isinstance(source.config["password"], SecretStr)  # secret by the docs' knowledge
    assert isinstance(azure.config["account_key"], SecretStr)
    assert "acct-key-1" not in repr(azure)
    updated = hook.update_destination(teradata.id, {**TERADATA, "database": "db1"}, "teradata")
    assert (updated.id, updated.type) == (teradata.id, "teradata")
    assert [d.type for d in hook.list_destinations(destination_type="azure")] == ["azure"]


def test_a_type_the_provider_does_not_know_is_sent_with_a_warning(
    emulator: Any, hook: WorkflowServiceHook, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(WorkflowServiceValidationError) as raised:  # the emulator does not know it either
        hook.create_source("future", "lakehouse", {"path": "lh://x"})
    assert raised.value.status_code == 422
    assert (
        "source connector type 'lakehouse' is not one the provider knows; it is sent as given" in caplog.text
    )
    assert emulator.requests()[-1]["method"] == "POST"


def test_template_id_and_a_download_without_node_id(
    emulator: Any, hook: WorkflowServiceHook, tmp_path: Path
) -> None:
    created = live_only(
        emulator, lambda: hook.create_workflow("from-template", "custom", template_id="tpl-1")
    )
    if created is None:  # spec: a custom workflow needs nodes, but the template_id was refused first
        workflow = hook.create_workflow("plain", "basic")
    else:
        workflow = hook.create_workflow("plain", "basic")
        assert hook.update_workflow(workflow.id, template_id="tpl-2").id == workflow.id
    document = tmp_path / "note.txt"
    document.write_text("Heading\n\nSome text.")
    job = hook.run_workflow(workflow.id, files=[document])
    assert job is not None
    emulator.advance_clock(60)
    output = hook.get_job(job.id).output_node_files[-1]
    elements = live_only(emulator, lambda: hook.download_job_output(job.id, output.file_id))
    with_node = hook.download_job_output(job.id, output.file_id, output.node_id)
    if elements is not None:
        assert elements == with_node


def hook_types(emulator: Any) -> dict[str, str]:
    """Every connector the emulator holds, by id, with its type."""
    settings = ConnectionSettings(base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key)
    with WorkflowServiceHook(settings=settings) as hook:
        return {c.id: c.type for c in [*hook.list_sources(), *hook.list_destinations()]}


def test_the_operators_parse_and_execute_the_live_vocabulary(emulator: Any, workflowsvc_conn: Any) -> None:
    create = conn_ops.CreateSourceConnectorOperator(
        task_id="search", name="search-in", connector_type="opensearch", config=OPENSEARCH
    )
    blob = conn_ops.CreateDestinationConnectorOperator(
        task_id="blob", name="blob-out", connector_type="azure", config=AZURE_OUT
    )
    workflow = wf_ops.CreateWorkflowOperator(
        task_id="wf", name="from-template", workflow_type="basic", template_id="tpl-1"
    )
    if emulator.dialect == "spec":
        for operator in (create, blob, workflow):
            with pytest.raises(WorkflowServiceValidationError):
                operator.execute({})
        return
    source_id = create.execute({})
    destination_id = blob.execute({})
    update = conn_ops.UpdateDestinationConnectorOperator(
        task_id="update", connector_id=destination_id, config={**AZURE_OUT, "account_key": "acct-key-2"}
    )
    assert update.execute({}) == destination_id  # the type is read from the service: azure
    workflow_id = workflow.execute({})
    assert hook_types(emulator) == {source_id: "opensearch", destination_id: "azure"}
    updated = wf_ops.UpdateWorkflowOperator(task_id="u", workflow_id=workflow_id, template_id="tpl-2")
    assert updated.execute({}) == workflow_id


def test_a_dag_of_the_live_vocabulary_runs_in_airflow(
    emulator: Any, dag_runner: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """Through Airflow itself (``dag.test``): the platform runs it; the spec's service refuses each name."""
    from airflow.sdk import DAG

    with DAG("wfsvc_live_vocabulary", schedule=None) as dag:
        source = conn_ops.CreateSourceConnectorOperator(
            task_id="search", name="search-in", connector_type="opensearch", config=OPENSEARCH
        )
        destination = conn_ops.CreateDestinationConnectorOperator(
            task_id="blob", name="blob-out", connector_type="azure", config=AZURE_OUT
        )
        wf_ops.CreateWorkflowOperator(
            task_id="wf",
            name="live",
            workflow_type="custom",
            template_id="tpl-1",
            source_id=source.output,
            destination_id=destination.output,
        )

    run = dag_runner(dag)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    out = capfd.readouterr().out
    assert "pw-os" not in out
    assert "acct-key-1" not in out
    if emulator.dialect == "spec":
        assert states == {"search": "failed", "blob": "failed", "wf": "upstream_failed"}
        assert "422" in out
    else:
        assert states == {"search": "success", "blob": "success", "wf": "success"}
