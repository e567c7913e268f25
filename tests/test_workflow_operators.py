"""Workflow operators: requests sent (respx), if_exists by name, validation at parse and run time."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from airflow.sdk.exceptions import AirflowFailException
from structlog.testing import capture_logs

from airflow_provider_workflowsvc.exceptions import (
    ExistingResourceError,
    InvalidTaskInputError,
    WorkflowServiceInputError,
    WorkflowServiceNotFoundError,
)
from airflow_provider_workflowsvc.models import Schedule, WorkflowNode, WorkflowType
from airflow_provider_workflowsvc.operators import workflows as ops

WF_ID = "0b6f3c2a-1d4e-4f5a-9b8c-7d6e5f4a3b2c"
OTHER_ID = "1c7a4d3b-2e5f-4a6b-8c9d-0e1f2a3b4c5d"
SRC_ID = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
DST_ID = "5b0e4c1a-7d2f-4e8b-9a6c-3f1d2e4b5c6d"
NODES: list[dict[str, Any]] = [
    {"name": "partition", "type": "partition", "subtype": "fast"},
    {"name": "embed", "type": "embed", "subtype": "openai", "settings": {"api_key": "sk-node-SECRET-7788"}},
]


def workflow(wid: str = WF_ID, name: str = "nightly", **fields: Any) -> dict[str, Any]:
    data = {
        "id": wid,
        "name": name,
        "workflow_type": "custom",
        "sources": [SRC_ID],
        "destinations": [DST_ID],
        "workflow_nodes": [{k: v for k, v in n.items() if k != "settings"} for n in NODES],
        "schedule": {"crontab_entries": [{"cron_expression": "0 0 * * *"}]},
        "status": "active",
    }
    return {**data, **fields}


def create_op(**kwargs: Any) -> ops.CreateWorkflowOperator:
    args = {
        "task_id": "create",
        "name": "nightly",
        "workflow_type": "custom",
        "source_id": SRC_ID,
        "destination_id": DST_ID,
        "workflow_nodes": [dict(n) for n in NODES],
        "schedule": "daily",
    }
    return ops.CreateWorkflowOperator(**{**args, **kwargs})


class Listing:
    """``GET /workflows/``: ``items`` on page 1, nothing after (tests change ``items`` as they go)."""

    def __init__(self, router: Any, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.route = router.get("/workflows/").mock(side_effect=self)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        first = request.url.params.get("page", "1") == "1"
        return httpx.Response(200, json=self.items if first else [])


def methods(router: Any) -> list[str]:
    """Request methods sent; a lookup (all pages of ``GET /workflows/``) counts as one ``LIST``."""
    sent = []
    for call in router.calls:
        request = call.request
        if request.method == "GET" and request.url.path.endswith("/workflows/"):
            if request.url.params.get("page", "1") == "1":
                sent.append("LIST")
        else:
            sent.append(request.method)
    return sent


def body(router: Any, index: int = -1) -> Any:
    return json.loads(router.calls[index].request.content)


# --------------------------------------------------------------------------------------------------
# Create


def test_create_looks_the_name_up_then_creates(mock_service: Any) -> None:
    listing = Listing(mock_service, [workflow(OTHER_ID, name="nightly-copy")])
    mock_service.post("/workflows/").respond(json=workflow())

    assert create_op(reprocess_all=True).execute({}) == WF_ID

    assert methods(mock_service) == ["LIST", "POST"]
    assert listing.route.calls[0].request.url.params["name"] == "nightly"
    sent = body(mock_service)
    assert sent == {
        "name": "nightly",
        "workflow_type": "custom",
        "source_id": SRC_ID,
        "destination_id": DST_ID,
        "workflow_nodes": NODES,
        "schedule": "daily",
        "reprocess_all": True,
    }


def test_reuse_returns_the_existing_id_and_warns_about_differences(mock_service: Any) -> None:
    Listing(mock_service, [workflow(sources=[OTHER_ID])])

    with capture_logs() as logs:
        assert create_op(schedule="every hour").execute({}) == WF_ID

    assert methods(mock_service) == ["LIST"]
    warnings = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1
    assert "differs from the task's settings in 2 setting(s), NOT changed" in warnings[0]
    assert f"source_id: the service has '{OTHER_ID}', the task sets '{SRC_ID}'" in warnings[0]
    assert "schedule: the service has '0 0 * * *', the task sets '0 * * * *'" in warnings[0]


def test_reuse_names_each_changed_node_setting_with_both_values(mock_service: Any) -> None:
    served = [dict(n) for n in workflow()["workflow_nodes"]]
    served[0]["settings"] = {"chunk_size": 500, "strategy": "fast"}
    Listing(mock_service, [workflow(workflow_nodes=served)])
    nodes = [dict(n) for n in NODES]
    nodes[0]["settings"] = {"chunk_size": 1000, "strategy": "fast", "overlap": 20}

    with capture_logs() as logs:
        assert create_op(workflow_nodes=nodes).execute({}) == WF_ID

    assert methods(mock_service) == ["LIST"]
    (warning,) = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert "in 2 setting(s)" in warning
    assert "workflow_nodes[partition].settings.chunk_size: the service has 500, the task sets 1000" in warning
    assert (
        "workflow_nodes[partition].settings.overlap: the service has (not set), the task sets 20" in warning
    )
    assert "sk-node-SECRET" not in warning  # secret settings are not compared, never logged


def test_update_sends_the_changed_node_settings(mock_service: Any) -> None:
    served = [dict(n) for n in workflow()["workflow_nodes"]]
    served[0]["settings"] = {"chunk_size": 500}
    Listing(mock_service, [workflow(workflow_nodes=served)])
    nodes = [dict(n) for n in NODES]
    nodes[0]["settings"] = {"chunk_size": 1000}
    applied = [dict(n) for n in served]
    applied[0]["settings"] = {"chunk_size": 1000}
    put = mock_service.put(f"/workflows/{WF_ID}").respond(json=workflow(workflow_nodes=applied))

    create_op(workflow_nodes=nodes, if_exists="update").execute({})

    sent = json.loads(put.calls.last.request.content)
    assert sent["workflow_nodes"][0]["settings"] == {"chunk_size": 1000}


def test_reuse_of_an_identical_workflow_warns_nothing(mock_service: Any) -> None:
    Listing(mock_service, [workflow()])

    with capture_logs() as logs:
        create_op().execute({})
    assert not [e for e in logs if e["log_level"] == "warning"]


def test_update_puts_the_settings_on_the_existing_workflow(mock_service: Any) -> None:
    Listing(mock_service, [workflow(workflow_type="basic")])
    weekly = {"crontab_entries": [{"cron_expression": Schedule("weekly").cron_expression}]}
    mock_service.put(f"/workflows/{WF_ID}").respond(json=workflow(schedule=weekly))

    assert create_op(if_exists="update", schedule="weekly").execute({}) == WF_ID

    assert methods(mock_service) == ["LIST", "PUT"]
    assert body(mock_service)["schedule"] == "weekly"
    assert body(mock_service)["workflow_type"] == "custom"


def test_update_applies_every_declared_setting_none_included_one_line_per_difference(
    mock_service: Any,
) -> None:
    Listing(mock_service, [workflow(workflow_type="basic", reprocess_all=True)])
    declared = workflow(workflow_type="basic", sources=[], schedule=None, reprocess_all=False)
    mock_service.put(f"/workflows/{WF_ID}").respond(json=declared)
    op = create_op(
        workflow_type="basic", source_id=None, workflow_nodes=None, schedule=None, if_exists="update"
    )

    with capture_logs() as logs:
        assert op.execute({}) == WF_ID

    assert methods(mock_service) == ["LIST", "PUT"]
    assert body(mock_service) == {
        "name": "nightly",
        "workflow_type": "basic",
        "source_id": None,
        "destination_id": DST_ID,
        "workflow_nodes": None,
        "schedule": None,
        "reprocess_all": None,
    }
    before, after = [e["event"] for e in logs if e["log_level"] == "info"][-2:]
    for line in (
        f"  source_id: '{SRC_ID}' → None",
        "  schedule: '0 0 * * *' → None",
        "  reprocess_all: True → False",
    ):
        assert line in before.splitlines()
        assert line in after.splitlines()
    assert "3 difference(s)" in before
    assert "now as declared" in after
    assert "destination_id" not in before  # the same on both sides: no line


def test_update_fails_when_the_service_keeps_a_difference(mock_service: Any) -> None:
    Listing(mock_service, [workflow()])
    mock_service.put(f"/workflows/{WF_ID}").respond(json=workflow())  # the source is still there

    with pytest.raises(ExistingResourceError, match="still differs") as raised:
        create_op(source_id=None, if_exists="update").execute({})

    assert f"source_id: the service has '{SRC_ID}', the task sets None" in str(raised.value)


def test_update_without_a_source_removes_it_in_the_emulator(workflowsvc_conn: Any, settings: Any) -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    with WorkflowServiceHook(settings=settings) as hook:
        source = hook.create_source(name="s3-in", type="s3", config={"remote_url": "s3://in/"})
        first = create_op(source_id=str(source.id), destination_id=None, schedule="daily")
        workflow_id = first.execute({})
        assert [str(s) for s in hook.get_workflow(workflow_id).sources] == [str(source.id)]

        again = create_op(source_id=None, destination_id=None, schedule=None, if_exists="update")
        assert again.execute({}) == workflow_id
        updated = hook.get_workflow(workflow_id)
    assert updated.sources == []
    assert updated.schedule is None or not updated.schedule.crontab_entries


def test_reuse_warns_about_a_source_declared_none(mock_service: Any) -> None:
    Listing(mock_service, [workflow()])

    with capture_logs() as logs:
        create_op(source_id=None).execute({})

    (warning,) = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert f"source_id: the service has '{SRC_ID}', the task sets None" in warning


def test_fail_refuses_an_existing_name(mock_service: Any) -> None:
    Listing(mock_service, [workflow()])

    with pytest.raises(AirflowFailException, match=r"workflow 'nightly' .* if_exists='fail'"):
        create_op(if_exists="fail").execute({})
    assert methods(mock_service) == ["LIST"]


def test_reuse_refuses_a_workflow_of_another_type(mock_service: Any) -> None:
    Listing(mock_service, [workflow(workflow_type="basic")])

    with pytest.raises(AirflowFailException, match="workflow_type is 'basic', not 'custom'"):
        create_op().execute({})


def test_conflict_and_ambiguous_failure_on_create_look_up_again(mock_service: Any) -> None:
    listing = Listing(mock_service, [])

    def conflict(request: httpx.Request) -> httpx.Response:
        listing.items = [workflow()]  # another run created it just before us
        return httpx.Response(409, json={"detail": "duplicate name"})

    mock_service.post("/workflows/").mock(side_effect=conflict)
    assert create_op().execute({}) == WF_ID

    def created_then_dropped(request: httpx.Request) -> httpx.Response:
        listing.items = [workflow()]
        raise httpx.RemoteProtocolError("server hung up")

    listing.items = []
    mock_service.post("/workflows/").mock(side_effect=created_then_dropped)
    assert create_op(if_exists="fail").execute({}) == WF_ID  # found: our own create, not a clash
    assert methods(mock_service) == ["LIST", "POST", "LIST"] * 2


def test_workflow_node_models_are_accepted(mock_service: Any) -> None:
    Listing(mock_service, [])
    mock_service.post("/workflows/").respond(json=workflow())
    nodes = [WorkflowNode(name="partition", type="partition", subtype="fast")]

    create_op(workflow_nodes=nodes, schedule=Schedule.EVERY_HOUR, workflow_type=WorkflowType.CUSTOM).execute(
        {}
    )

    assert body(mock_service)["workflow_nodes"] == [
        {"name": "partition", "type": "partition", "subtype": "fast"}
    ]
    assert body(mock_service)["schedule"] == "every hour"


# --------------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schedule": "hourly"}, "unknown schedule 'hourly'; expected one of: every 15 minutes"),
        ({"schedule": 15}, "schedule must be a string"),
        ({"workflow_type": "gold"}, "unknown workflow_type 'gold'"),
        ({"workflow_nodes": None}, "a custom workflow needs at least one node"),
        ({"workflow_nodes": []}, "a custom workflow needs at least one node"),
        ({"workflow_nodes": {"name": "x"}}, "workflow_nodes must be a list"),
        ({"workflow_nodes": [{"name": "a", "type": "t"}]}, r"workflow_nodes\[0\]: subtype is missing"),
        ({"workflow_nodes": [{"name": "a", "type": "t", "subtype": 3}]}, "subtype must be a string"),
        ({"workflow_nodes": [NODES[0], "embed"]}, r"workflow_nodes\[1\] must be a dict"),
        ({"workflow_nodes": [NODES[0], NODES[0]]}, "node names must be unique, repeated: partition"),
        ({"workflow_nodes": [{**NODES[0], "settings": "x"}]}, "settings must be a dict"),
        ({"source_id": "src-1"}, "source_id must be a UUID"),
        ({"name": ""}, "name must not be empty"),
        ({"if_exists": "overwrite"}, "if_exists must be one of"),
    ],
)
def test_invalid_values_known_at_parse_time_fail_the_constructor(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(WorkflowServiceInputError, match=message):
        create_op(**kwargs)


@pytest.mark.parametrize("schedule", ["Every Hour", "every_hour", "EVERY-15-MINUTES", Schedule.DAILY])
def test_schedule_spellings_the_service_models_accept_pass(schedule: Any) -> None:
    assert create_op(schedule=schedule).schedule == schedule  # kept as given: normalised when sent


def test_templated_values_are_not_checked_at_parse_time() -> None:
    templated = {
        "schedule": "{{ params.schedule }}",
        "workflow_type": "{{ params.type }}",
        "workflow_nodes": "{{ params.nodes }}",
        "source_id": "{{ ti.xcom_pull('src') }}",
    }
    op = create_op(**templated)
    assert {field: getattr(op, field) for field in templated} == templated
    assert set(templated) <= set(op.template_fields)  # rendered (then checked) when the task runs
    node = {"name": "{{ params.n }}", "type": "t", "subtype": "s"}
    assert create_op(workflow_nodes=[NODES[0], node]).workflow_nodes[1] == node


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schedule", "fortnightly", "schedule"),
        ("workflow_type", "gold", "workflow_type"),
        ("workflow_nodes", [{"name": "a"}], "workflow_nodes.0.type: Field required"),
        ("workflow_nodes", [{"name": "a", "type": "t", "subtype": "s", "colour": "x"}], "unknown field"),
        ("destination_id", "dst-1", "destination_id"),
    ],
)
def test_invalid_rendered_values_fail_before_any_request_without_retry(
    mock_service: Any, field: str, value: Any, message: str
) -> None:
    op = create_op()
    setattr(op, field, value)  # as rendered from a template

    with pytest.raises(InvalidTaskInputError, match=message):
        op.execute({})
    assert not mock_service.calls


def test_node_settings_secrets_are_masked() -> None:
    from airflow.sdk import DAG
    from airflow.sdk._shared.secrets_masker import redact

    with DAG("wf_secrets", schedule=None):
        op = create_op(workflow_nodes=[NODES[0], {**NODES[1], "settings": {"api_key": "{{ params.k }}"}}])
    op.render_template_fields({"params": {"k": "sk-rendered-11223344"}})

    assert op.workflow_nodes[1]["settings"]["api_key"] == "sk-rendered-11223344"
    assert redact("key sk-rendered-11223344") == "key ***"


# --------------------------------------------------------------------------------------------------
# Update and delete


def test_update_sends_only_the_given_settings(mock_service: Any) -> None:
    mock_service.put(f"/workflows/{WF_ID}").respond(json=workflow())

    op = ops.UpdateWorkflowOperator(
        task_id="u", workflow_id=WF_ID, schedule="every 4 hours", reprocess_all=False
    )
    assert op.execute({}) == WF_ID

    assert methods(mock_service) == ["PUT"]
    assert body(mock_service) == {"schedule": "every 4 hours", "reprocess_all": False}


def test_update_validation() -> None:
    with pytest.raises(WorkflowServiceInputError, match="at least one setting"):
        ops.UpdateWorkflowOperator(task_id="u", workflow_id=WF_ID)
    with pytest.raises(WorkflowServiceInputError, match="unknown schedule"):
        ops.UpdateWorkflowOperator(task_id="u", workflow_id=WF_ID, schedule="sometimes")
    with pytest.raises(WorkflowServiceInputError, match="workflow_id must be a UUID"):
        ops.UpdateWorkflowOperator(task_id="u", workflow_id="wf-1", schedule="daily")


def test_update_with_an_invalid_rendered_value_sends_nothing(mock_service: Any) -> None:
    op = ops.UpdateWorkflowOperator(task_id="u", workflow_id=WF_ID, schedule="{{ params.s }}")
    op.schedule = "every 3 hours"

    with pytest.raises(InvalidTaskInputError, match="schedule"):
        op.execute({})
    assert not mock_service.calls


def test_delete_and_missing_ok(mock_service: Any) -> None:
    route = mock_service.delete(f"/workflows/{WF_ID}")
    route.respond(204)
    ops.DeleteWorkflowOperator(task_id="d", workflow_id=WF_ID).execute({})

    route.respond(404, json={"detail": "no such workflow"})
    ops.DeleteWorkflowOperator(task_id="d", workflow_id=WF_ID).execute({})
    mock_service.get(f"/workflows/{WF_ID}").respond(404, json={"detail": "no such workflow"})
    with pytest.raises(WorkflowServiceNotFoundError, match="no such workflow"):
        ops.DeleteWorkflowOperator(task_id="d", workflow_id=WF_ID, missing_ok=False).execute({})
    assert route.call_count == 2, "missing_ok=False reads the workflow first: no DELETE of a missing one"


# --------------------------------------------------------------------------------------------------
# Module contract


def test_choice_lists_match_the_models() -> None:
    assert tuple(s.value for s in Schedule) == ops.SCHEDULES
    assert tuple(t.value for t in WorkflowType) == ops.WORKFLOW_TYPES


RENDERED: dict[str, Any] = {
    "workflow_id": WF_ID,
    "template_id": "tpl-rendered-1",
    "name": "weekly-rendered",
    "workflow_type": "custom",
    "workflow_nodes": NODES[:1],
    "schedule": "weekly",
    "source_id": OTHER_ID,
    "destination_id": DST_ID,
    "reprocess_all": False,
}
"""A rendered value for each field a user may template."""


def rendered(operator: type[Any], **kwargs: Any) -> Any:
    """The operator with every template field given as a template, rendered as the task runs."""
    from airflow.sdk import DAG

    fields = operator.template_fields
    untested = sorted(set(fields) - set(RENDERED) - {"workflowsvc_conn_id"})
    assert not untested, f"{operator.__name__} templates {untested}: add a rendered value to RENDERED"
    templates = {field: f"{{{{ params.{field} }}}}" for field in fields if field in RENDERED}
    with DAG(f"templated_{operator.__name__}", schedule=None, render_template_as_native_obj=True):
        task = operator(task_id="t", **templates, **kwargs)
    task.render_template_fields({"params": RENDERED})
    return task


def test_every_templated_field_reaches_the_request(mock_service: Any) -> None:
    Listing(mock_service, [])
    mock_service.post("/workflows/").respond(json=workflow())
    mock_service.put(f"/workflows/{WF_ID}").respond(json=workflow())
    mock_service.delete(f"/workflows/{WF_ID}").respond(204)
    settings = {field: value for field, value in RENDERED.items() if field != "workflow_id"}

    assert rendered(ops.CreateWorkflowOperator).execute({}) == WF_ID
    assert body(mock_service) == settings, "a setting missing here is not rendered: add it to template_fields"
    assert rendered(ops.UpdateWorkflowOperator).execute({}) == WF_ID
    assert body(mock_service) == settings, "a setting missing here is not rendered: add it to template_fields"
    rendered(ops.DeleteWorkflowOperator).execute({})
    assert mock_service.calls.last.request.method == "DELETE"


PARSE_TIME_IMPORTS = {"__future__", "collections.abc", "contextlib", "dataclasses", "functools", "inspect",
                      "re", "time", "typing", "urllib.parse", "uuid", "airflow.sdk", "airflow.sdk.exceptions",
                      "airflow_provider_workflowsvc._tasks.base",
                      "airflow_provider_workflowsvc.hooks",  # the package's constants, not the hook
                      "airflow_provider_workflowsvc.exceptions",  # stdlib only; pydantic is lazy there
                      "airflow_provider_workflowsvc._compat"}  # fmt: skip


@pytest.mark.parametrize(
    "module",
    ["_tasks.base", "_tasks.target", "operators._lifecycle", "operators.connectors", "operators.workflows"],
)
def test_operator_modules_import_only_the_sdk_and_stdlib_at_parse_time(module: str) -> None:
    """Hooks, models and pydantic are imported when a task runs, never when a DAG file is parsed."""
    import ast
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec(f"airflow_provider_workflowsvc.{module}")
    assert spec is not None, module
    assert spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text())
    imported: set[str] = set()
    for node in tree.body:  # module level only; `if TYPE_CHECKING:` blocks are not run
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= PARSE_TIME_IMPORTS, imported - PARSE_TIME_IMPORTS


# --------------------------------------------------------------------------------------------------
# Airflow runs against the emulator (dag.test)

WIKI_TOKEN = "wiki-api-token-7Hq2ZpX9"
ASTRA_TOKEN = "AstraCS:tok-4f8e2a91c3"
LLM_KEY = "llm-key-Zr81Kd0q"  # under "openai_key": masked by this provider only, not by Airflow's key names


def pipeline_dag() -> Any:
    """Source + destination + custom workflow, both connections checked before the workflow."""
    from airflow.sdk import DAG

    from airflow_provider_workflowsvc.models import ConfluenceSourceConfig
    from airflow_provider_workflowsvc.operators.connectors import (
        CreateDestinationConnectorOperator,
        CreateSourceConnectorOperator,
        DestinationConnectionCheckOperator,
        SourceConnectionCheckOperator,
    )

    with DAG("wfsvc_pipeline", schedule=None) as dag:
        source = CreateSourceConnectorOperator(
            task_id="create_source",
            name="wiki",
            connector_type="confluence",
            config=ConfluenceSourceConfig(
                url="https://wiki.example.com",
                username="bot@example.com",
                token="{{ var.value.wiki_cred }}",
                spaces=["ENG"],
                cloud=True,
            ),
        )
        destination = CreateDestinationConnectorOperator(
            task_id="create_destination",
            name="vectors",
            connector_type="astradb",
            config={
                "collection_name": "docs",
                "keyspace": "default",
                "api_endpoint": "https://astra.example.com",
                "token": "{{ var.value.astra_cred }}",
            },
        )
        checks = [
            cls(task_id=f"check_{kind}", connector_id=created.output, poll_interval=0.05, timeout=30)
            for cls, kind, created in (
                (SourceConnectionCheckOperator, "source", source),
                (DestinationConnectionCheckOperator, "destination", destination),
            )
        ]
        ops.CreateWorkflowOperator(
            task_id="create_workflow",
            name="wiki-to-astra",
            workflow_type="custom",
            source_id=checks[0].output,
            destination_id=checks[1].output,
            workflow_nodes=[NODES[0], {**NODES[1], "settings": {"openai_key": "{{ var.value.llm_cred }}"}}],
            schedule="daily",
        )
    return dag


def _rendered_fields_rows(dr: Any) -> list[tuple[str, int, Any]]:
    """(task_id, map_index, rendered fields) stored for a DAG run."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(RenderedTaskInstanceFields).filter_by(dag_id=dr.dag_id, run_id=dr.run_id).all()
        return [(row.task_id, row.map_index, row.rendered_fields) for row in rows]


def _rendered_fields(dr: Any) -> dict[str, Any]:
    return {task_id: fields for task_id, _, fields in _rendered_fields_rows(dr)}


def _xcom_values(dr: Any) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dr.dag_id, run_id=dr.run_id).all()
        return {f"{row.task_id}.{row.key}": row.value for row in rows}


def test_pipeline_dag_twice_creates_each_resource_once_and_never_shows_secrets(
    dag_runner: Any,
    workflowsvc_conn: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    for name, value in (("WIKI_CRED", WIKI_TOKEN), ("ASTRA_CRED", ASTRA_TOKEN), ("LLM_CRED", LLM_KEY)):
        monkeypatch.setenv(f"AIRFLOW_VAR_{name}", value)
    dag = pipeline_dag()

    first = dag_runner(dag)
    second = dag_runner(dag)

    for dr in (first, second):
        states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
        assert set(states.values()) == {"success"}, states
    posts = [r["path"].rstrip("/") for r in workflowsvc_conn.requests(method="POST")]
    for collection in ("sources", "destinations", "workflows"):
        assert posts.count(f"/api/v1/{collection}") == 1, posts  # created by the first run only
    with WorkflowServiceHook(settings=settings) as hook:
        assert [c.name for c in hook.list_sources()] == ["wiki"]
        assert [c.name for c in hook.list_destinations()] == ["vectors"]
        workflows = list(hook.iter_workflows())
        assert [w.name for w in workflows] == ["wiki-to-astra"]
        assert [n.name for n in workflows[0].workflow_nodes] == ["partition", "embed"]
        assert workflows[0].schedule is not None
    assert first.run_id != second.run_id
    second_ids = _xcom_values(second)
    assert second_ids == _xcom_values(first)  # the same ids: reused, not recreated

    rendered = _rendered_fields(first)
    assert rendered["create_source"]["config"]["url"] == "https://wiki.example.com"
    assert rendered["create_workflow"]["workflow_nodes"][1]["settings"] == {"openai_key": "***"}
    output = capfd.readouterr()
    assert "reusing it as is" in output.out
    for where in (
        json.dumps(rendered),
        json.dumps(_rendered_fields(second)),
        json.dumps(second_ids),
        output.out,
        output.err,
    ):
        for secret in (WIKI_TOKEN, ASTRA_TOKEN, LLM_KEY):
            assert secret not in where
