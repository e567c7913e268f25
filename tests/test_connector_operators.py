"""Connector operators: requests sent (respx), if_exists, robust create, validation, secrets, checks."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from airflow.sdk.exceptions import AirflowFailException
from structlog.testing import capture_logs

from airflow_provider_workflowsvc.exceptions import (
    InvalidTaskInputError,
    WorkflowServiceConflictError,
    WorkflowServiceInputError,
    WorkflowServiceNotFoundError,
    WorkflowServiceServerError,
)
from airflow_provider_workflowsvc.models import (
    ConfluenceSourceConfig,
    DestinationType,
    GenericConfig,
    SourceType,
)
from airflow_provider_workflowsvc.operators import connectors as ops

SRC_ID = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
OTHER_ID = "9c1f0d7e-2b4a-4f6e-8a51-0d3c2e1b4a77"
DST_ID = "5b0e4c1a-7d2f-4e8b-9a6c-3f1d2e4b5c6d"
SECRET = "conf-token-SECRET-8842"
CONFLUENCE = {"url": "https://wiki.example.com", "username": "bot@example.com", "token": SECRET}


def connector(
    cid: str = SRC_ID, name: str = "wiki", type: str = "confluence", config: dict[str, Any] | None = None
) -> dict[str, Any]:
    record = {"id": cid, "name": name, "type": type, "config": config or {}}
    return {**record, "created_at": "2026-01-01T00:00:00Z"}


def create_source(**kwargs: Any) -> ops.CreateSourceConnectorOperator:
    args = {"task_id": "create", "name": "wiki", "connector_type": "confluence", "config": dict(CONFLUENCE)}
    return ops.CreateSourceConnectorOperator(**{**args, **kwargs})


def calls(router: Any, method: str | None = None) -> list[tuple[str, str]]:
    """(method, path) of every request sent, optionally of one method."""
    sent = [(c.request.method, c.request.url.path) for c in router.calls]
    return [s for s in sent if method is None or s[0] == method]


def body(router: Any, index: int = -1) -> Any:
    return json.loads(router.calls[index].request.content)


# --------------------------------------------------------------------------------------------------
# Create


def test_create_looks_the_name_up_then_creates(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[connector(OTHER_ID, name="wiki-old")])
    mock_service.post("/sources/").respond(201, json=connector())

    assert create_source().execute({}) == SRC_ID

    assert calls(mock_service) == [("GET", "/api/v1/sources/"), ("POST", "/api/v1/sources/")]
    sent = body(mock_service)
    assert sent["name"] == "wiki"
    assert sent["type"] == "confluence"
    assert sent["config"]["token"] == SECRET  # the service gets the real value
    assert sent["config"]["max_num_of_spaces"] == 500  # typed defaults are sent


def test_create_destination_uses_the_destination_endpoints(mock_service: Any) -> None:
    mock_service.get("/destinations/").respond(json=[])
    mock_service.post("/destinations/").respond(json=connector(DST_ID, "vectors", "astradb"))
    config = {"collection_name": "docs", "api_endpoint": "https://astra.example.com", "token": SECRET}

    op = ops.CreateDestinationConnectorOperator(
        task_id="d", name="vectors", connector_type=DestinationType.ASTRADB, config=config
    )

    assert op.execute({}) == DST_ID
    assert calls(mock_service, "POST") == [("POST", "/api/v1/destinations/")]


def test_create_accepts_a_typed_config_model(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[])
    mock_service.post("/sources/").respond(json=connector())
    config = ConfluenceSourceConfig(url="https://wiki.example.com", token=SECRET, max_num_of_spaces=3)

    create_source(config=config, connector_type=SourceType.CONFLUENCE).execute({})

    assert body(mock_service)["config"]["token"] == SECRET
    assert body(mock_service)["config"]["max_num_of_spaces"] == 3


def test_reuse_returns_the_existing_id_and_writes_nothing(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[connector(OTHER_ID, "wiki2"), connector()])

    with capture_logs() as logs:
        assert create_source(if_exists="reuse").execute({}) == SRC_ID

    assert calls(mock_service) == [("GET", "/api/v1/sources/")]
    assert any("reusing it" in entry["event"] and SRC_ID in entry["event"] for entry in logs)


def test_reuse_names_each_setting_it_leaves_with_both_values_and_secrets_unshown(mock_service: Any) -> None:
    """Issue #32: a reused connector whose settings differ from the task's: each difference is named
    with both values; the declared secret (the service masks it) is named as not compared, never
    shown; a setting the task does not declare is not compared."""
    served = connector(config={"url": "https://old.example.com", "username": "bot@example.com"})
    served["config"].update(token="**********", cloud=False)
    mock_service.get("/sources/").respond(json=[served])
    config = {**CONFLUENCE, "max_num_of_spaces": 3}

    with capture_logs() as logs:
        assert create_source(config=config).execute({}) == SRC_ID

    assert calls(mock_service) == [("GET", "/api/v1/sources/")], "reuse writes nothing"
    (warning,) = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert "differs from the task's settings in 2 setting(s), NOT changed (if_exists='reuse'" in warning
    assert (
        "url: the service has 'https://old.example.com', the task sets 'https://wiki.example.com'" in warning
    )
    assert "max_num_of_spaces: the service has (not set), the task sets 3" in warning
    assert "username" not in warning
    assert "cloud" not in warning
    (secrets,) = [e["event"] for e in logs if "cannot be compared" in e["event"]]
    assert "secret setting(s) token cannot be compared" in secrets
    assert SECRET not in json.dumps([e["event"] for e in logs])


def test_reuse_shows_the_credentials_of_a_url_setting_as_stars(mock_service: Any) -> None:
    """A plain setting holding a URL with credentials is compared and shown as the service shows it
    (user info and query masked): the same location masked by the service is no difference."""
    url = "s3://AKIAEXAMPLE:pw-77665544@reports/in/?X-Amz-Signature=abcdef0123456789abcdef"
    masked = "s3://**********@reports/in/?**********"
    same = connector(type="s3", config={"remote_url": masked, "anonymous": True})
    mock_service.get("/sources/").respond(json=[same])
    config = {"remote_url": url, "anonymous": True}
    with capture_logs() as logs:
        create_source(connector_type="s3", config=config).execute({})
    assert not [e for e in logs if "differs" in e["event"]], "the same location: no difference"

    moved = connector(type="s3", config={"remote_url": "s3://archive/", "anonymous": True})
    mock_service.get("/sources/").respond(json=[moved])
    with capture_logs() as logs:
        create_source(connector_type="s3", config=config).execute({})
    (warning,) = [e["event"] for e in logs if "differs" in e["event"]]
    assert "remote_url: the service has 's3://archive/', the task sets 's3://***@reports/in/?***'" in warning
    assert "pw-77665544" not in warning
    assert "AKIAEXAMPLE" not in warning
    assert "abcdef0123" not in warning


def test_update_logs_each_difference_and_trusts_the_answer(mock_service: Any) -> None:
    """``update`` sends every declared setting and logs the differences it saw; a connector's answer
    is not compared again (the service masks secrets and may give settings back normalised)."""
    mock_service.get("/sources/").respond(json=[connector(config={"url": "https://old.example.com"})])
    mock_service.put(f"/sources/{SRC_ID}").respond(json=connector())

    with capture_logs() as logs:
        assert create_source(if_exists="update").execute({}) == SRC_ID

    (updating,) = [e["event"] for e in logs if "updating it to the task's settings" in e["event"]]
    assert "url: 'https://old.example.com' → 'https://wiki.example.com'" in updating
    assert "username: (not set) → 'bot@example.com'" in updating
    assert SECRET not in updating
    assert "token" not in updating
    assert body(mock_service)["config"]["token"] == SECRET


def test_update_puts_the_new_config_on_the_existing_connector(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[connector()])
    mock_service.put(f"/sources/{SRC_ID}").respond(json=connector())

    assert create_source(if_exists="update").execute({}) == SRC_ID

    assert calls(mock_service) == [("GET", "/api/v1/sources/"), ("PUT", f"/api/v1/sources/{SRC_ID}")]
    assert body(mock_service)["config"]["token"] == SECRET


def test_fail_refuses_an_existing_name(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[connector()])

    with pytest.raises(AirflowFailException, match=r"'wiki' \(3fa85f64.*already exists and if_exists='fail'"):
        create_source(if_exists="fail").execute({})
    assert calls(mock_service, "POST") == []


@pytest.mark.parametrize("if_exists", ["reuse", "update", "fail"])
def test_an_existing_connector_of_another_type_fails_clearly(mock_service: Any, if_exists: str) -> None:
    mock_service.get("/sources/").respond(json=[connector(type="s3")])

    with pytest.raises(AirflowFailException, match="its type is 's3', not 'confluence'") as info:
        create_source(if_exists=if_exists).execute({})
    assert SECRET not in str(info.value)
    assert calls(mock_service) == [("GET", "/api/v1/sources/")]


def test_two_connectors_with_the_name_is_an_error(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[connector(), connector(OTHER_ID)])

    with pytest.raises(AirflowFailException, match="2 source connectors are named 'wiki'"):
        create_source().execute({})


@pytest.mark.parametrize(("if_exists", "method"), [("reuse", None), ("update", "PUT")])
def test_conflict_on_create_looks_up_again_and_applies_if_exists(
    mock_service: Any, if_exists: str, method: str | None
) -> None:
    mock_service.get("/sources/").mock(
        side_effect=[httpx.Response(200, json=[]), httpx.Response(200, json=[connector()])]
    )
    mock_service.post("/sources/").respond(409, json={"detail": "name already in use"})
    mock_service.put(f"/sources/{SRC_ID}").respond(json=connector())

    assert create_source(if_exists=if_exists).execute({}) == SRC_ID
    assert [m for m, _ in calls(mock_service)] == ["GET", "POST", "GET"] + ([method] if method else [])


def test_conflict_with_fail_fails_and_unexplained_conflict_is_raised(mock_service: Any) -> None:
    mock_service.get("/sources/").mock(
        side_effect=[httpx.Response(200, json=[]), httpx.Response(200, json=[connector()])]
    )
    mock_service.post("/sources/").respond(409, json={"detail": "name already in use"})
    with pytest.raises(AirflowFailException, match="already exists and if_exists='fail'"):
        create_source(if_exists="fail").execute({})

    mock_service.get("/sources/").mock(side_effect=None, return_value=httpx.Response(200, json=[]))
    with pytest.raises(WorkflowServiceConflictError):
        create_source().execute({})


@pytest.mark.parametrize(
    "failure",
    [httpx.Response(500, json={"detail": "boom"}), httpx.ReadError("connection dropped")],
    ids=["500", "dropped"],
)
def test_ambiguous_create_failure_finds_the_created_connector(mock_service: Any, failure: Any) -> None:
    mock_service.get("/sources/").mock(
        side_effect=[httpx.Response(200, json=[]), httpx.Response(200, json=[connector()])]
    )
    mock_service.post("/sources/").mock(side_effect=[failure])

    with capture_logs() as logs:
        assert create_source(if_exists="fail").execute({}) == SRC_ID  # our own create, not a clash
    assert [m for m, _ in calls(mock_service)] == ["GET", "POST", "GET"]  # the POST is never re-sent
    assert any("taking it as the one created" in entry["event"] for entry in logs)


def test_ambiguous_create_failure_with_nothing_found_raises_the_failure(mock_service: Any) -> None:
    mock_service.get("/sources/").respond(json=[])
    mock_service.post("/sources/").respond(500, json={"detail": "boom"})

    with pytest.raises(WorkflowServiceServerError, match="500"):
        create_source().execute({})
    assert [m for m, _ in calls(mock_service)] == ["GET", "POST", "GET"]


# --------------------------------------------------------------------------------------------------
# Validation before any request


def test_invalid_values_known_at_parse_time_fail_the_constructor() -> None:
    with pytest.raises(WorkflowServiceInputError, match="source connector type must be a non-empty string"):
        create_source(connector_type=" ")
    with pytest.raises(WorkflowServiceInputError, match="'s3': missing required setting 'remote_url'"):
        create_source(connector_type="s3", config={"bucket": "b"})
    with pytest.raises(WorkflowServiceInputError, match="'s3': setting 'remote_url' must be a URL"):
        create_source(connector_type="s3", config={"remote_url": "not-a-url", "anonymous": True})
    with pytest.raises(WorkflowServiceInputError, match="if_exists must be one of"):
        create_source(if_exists="replace")
    with pytest.raises(WorkflowServiceInputError, match="name must not be empty"):
        create_source(name="  ")
    with pytest.raises(WorkflowServiceInputError, match="config must be a dict or a config model"):
        create_source(config=["url"])
    with pytest.raises(WorkflowServiceInputError, match="connector_id must be a UUID"):
        ops.DeleteSourceConnectorOperator(task_id="d", connector_id="not-a-uuid")
    with pytest.raises(WorkflowServiceInputError, match="destination connector type must be a non-empty"):
        ops.UpdateDestinationConnectorOperator(task_id="u", connector_id=DST_ID, connector_type=3, config={})
    with pytest.raises(WorkflowServiceInputError, match="positive"):
        ops.SourceConnectionCheckOperator(task_id="c", connector_id=SRC_ID, poll_interval=0)


def test_names_the_provider_does_not_know_pass_at_parse_time_with_a_warning(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    create_source(connector_type="confluenc")
    ops.UpdateDestinationConnectorOperator(
        task_id="u", connector_id=DST_ID, connector_type="lakehouse", config={"a": "b"}
    )
    create_source(connector_type="s3", config={"remote_url": "s3://b", "anonymus": True})
    said = capfd.readouterr().out + caplog.text
    assert "source connector type 'confluenc' is not one the provider knows; it is sent as given" in said
    assert "did you mean 'confluence'?" in said
    assert "destination connector type 'lakehouse' is not one the provider knows" in said
    assert (
        "setting 'anonymus' is not one the provider knows (sent as given); did you mean 'anonymous'?" in said
    )


def test_templated_values_are_checked_when_the_task_runs() -> None:
    op = create_source(
        connector_type="{{ params.kind }}", name="{{ params.name }}", config="{{ var.json.cfg }}"
    )
    assert op.connector_type == "{{ params.kind }}"
    ops.DeleteSourceConnectorOperator(task_id="d", connector_id="{{ ti.xcom_pull('create') }}")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"config": {"url": "https://wiki.example.com", "token": SECRET, "cloud": True}}, "cloud=false"),
        ({"config": {"username": "u", "token": SECRET}}, "config.url: Field required"),
        ({"config": {**CONFLUENCE, "colour": "blue"}}, "colour: Extra inputs are not permitted"),
    ],
)
def test_invalid_input_at_run_time_fails_before_any_request_without_retry(
    mock_service: Any, kwargs: dict[str, Any], message: str
) -> None:
    op = create_source(connector_type="confluence")
    for key, value in kwargs.items():
        setattr(op, key, value)  # as rendered from templates

    with pytest.raises(InvalidTaskInputError, match=message) as info:
        op.execute({})
    assert isinstance(info.value, AirflowFailException)
    assert isinstance(info.value, WorkflowServiceInputError)
    assert SECRET not in str(info.value)
    assert not mock_service.calls


# --------------------------------------------------------------------------------------------------
# Secrets and templates


def _rendered(op: Any, **params: Any) -> Any:
    from airflow.sdk import DAG

    with DAG("secrets_dag", schedule=None):
        op = op()
    op.render_template_fields({"params": params})
    return op


def test_rendering_masks_secret_config_values_before_they_are_stored() -> None:
    from airflow.sdk._shared.secrets_masker import redact
    from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

    config = {
        "remote_url": "az://container",
        "account_key": "{{ params.key }}",  # not a sensitive key name for Airflow itself
        "nested": {"credentials": ["cred-99887766"]},
    }
    op = _rendered(lambda: create_source(config=config, connector_type="azure"), key="acct-key-44556677")

    assert op.config["account_key"] == "acct-key-44556677"  # the task itself sees the real value
    stored = _serialize_rendered_fields(op)  # what the task runner sends to be stored, right after rendering
    assert stored["config"] == {
        "remote_url": "az://container",
        "account_key": "***",
        "nested": {"credentials": ["***"]},
    }
    assert redact("log line acct-key-44556677 and cred-99887766") == "log line *** and ***"


def test_templates_inside_a_typed_config_render_and_stay_secret(mock_service: Any) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    model = ConfluenceSourceConfig(url="https://wiki.example.com", token="{{ params.tok }}")
    op = _rendered(lambda: create_source(config=model), tok="pat-from-connection-1234")
    assert isinstance(op.config, dict)
    assert op.config["token"] == "pat-from-connection-1234"
    assert "pat-from-connection-1234" not in redact(json.dumps(op.config))

    mock_service.get("/sources/").respond(json=[])
    mock_service.post("/sources/").respond(json=connector())
    op.execute({})
    assert body(mock_service)["config"]["token"] == "pat-from-connection-1234"


def test_generic_config_secrets_are_masked_at_execute(mock_service: Any) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    mock_service.get("/sources/").respond(json=[])
    mock_service.post("/sources/").respond(json=connector(type="s3"))
    config = GenericConfig.model_validate(
        {"remote_url": "s3://b", "secret_access_key": "aws-secret-55443322"}
    )

    create_source(connector_type="s3", config=config).execute({})

    assert body(mock_service)["config"]["secret_access_key"] == "aws-secret-55443322"
    assert redact("aws-secret-55443322") == "***"


# --------------------------------------------------------------------------------------------------
# Update and delete


def test_update_with_a_type_sends_only_the_put(mock_service: Any) -> None:
    mock_service.put(f"/sources/{SRC_ID}").respond(json=connector())
    op = ops.UpdateSourceConnectorOperator(
        task_id="u", connector_id=SRC_ID, connector_type="confluence", config=dict(CONFLUENCE)
    )

    assert op.execute({}) == SRC_ID
    assert calls(mock_service) == [("PUT", f"/api/v1/sources/{SRC_ID}")]
    assert body(mock_service)["config"]["extract_images"] is False  # every setting is sent


def test_update_without_a_type_reads_it_first_and_validates_before_the_put(mock_service: Any) -> None:
    mock_service.get(f"/sources/{SRC_ID}").respond(json=connector())
    mock_service.put(f"/sources/{SRC_ID}").respond(json=connector())

    op = ops.UpdateSourceConnectorOperator(task_id="u", connector_id=SRC_ID, config=dict(CONFLUENCE))
    assert op.execute({}) == SRC_ID
    assert [m for m, _ in calls(mock_service)] == ["GET", "PUT"]

    bad = ops.UpdateSourceConnectorOperator(task_id="u", connector_id=SRC_ID, config={"url": "https://w"})
    with pytest.raises(InvalidTaskInputError, match="no authentication"):
        bad.execute({})
    assert [m for m, _ in calls(mock_service)] == ["GET", "PUT", "GET"]


def test_update_with_an_invalid_config_sends_nothing(mock_service: Any) -> None:
    with pytest.raises(WorkflowServiceInputError, match="missing required setting 'api_endpoint'"):
        ops.UpdateDestinationConnectorOperator(  # the live docs' settings, at DAG parse time
            task_id="u", connector_id=DST_ID, connector_type="astradb", config={"collection_name": "c"}
        )
    op = ops.UpdateDestinationConnectorOperator(
        task_id="u", connector_id=DST_ID, connector_type="{{ params.kind }}", config={"collection_name": "c"}
    )
    op.connector_type = "astradb"  # rendered: the spec's typed schema, when the task runs
    with pytest.raises(InvalidTaskInputError, match="api_endpoint"):
        op.execute({})
    assert not mock_service.calls


@pytest.mark.parametrize("kind", ["source", "destination"])
def test_delete(mock_service: Any, kind: str) -> None:
    route = mock_service.delete(f"/{kind}s/{SRC_ID}").respond(204)
    cls = ops.DeleteSourceConnectorOperator if kind == "source" else ops.DeleteDestinationConnectorOperator

    cls(task_id="d", connector_id=SRC_ID).execute({})

    assert route.call_count == 1


def test_delete_of_a_missing_connector_succeeds_unless_missing_ok_is_false(mock_service: Any) -> None:
    mock_service.delete(f"/sources/{SRC_ID}").respond(404, json={"detail": "not found"})

    with capture_logs() as logs:
        ops.DeleteSourceConnectorOperator(task_id="d", connector_id=SRC_ID).execute({})
    assert any("does not exist" in entry["event"] for entry in logs)

    mock_service.get(f"/sources/{SRC_ID}").respond(404, json={"detail": "not found"})
    with pytest.raises(WorkflowServiceNotFoundError):
        ops.DeleteSourceConnectorOperator(task_id="d", connector_id=SRC_ID, missing_ok=False).execute({})


# --------------------------------------------------------------------------------------------------
# Connection checks


def check(status: str, check_id: str | None = "chk-2", reason: str | None = None) -> dict[str, Any]:
    return {"id": check_id, "status": status, "reason": reason}


def check_op(kind: str = "source", **kwargs: Any) -> Any:
    cls = ops.SourceConnectionCheckOperator if kind == "source" else ops.DestinationConnectionCheckOperator
    return cls(**{"task_id": "check", "connector_id": SRC_ID, "poll_interval": 0.01, "timeout": 5, **kwargs})


@pytest.mark.parametrize("kind", ["source", "destination"])
def test_check_waits_for_success(mock_service: Any, kind: str) -> None:
    path = f"/{kind}s/{SRC_ID}/connection-check"
    mock_service.post(path).respond(json=check("scheduled"))
    mock_service.get(path).mock(
        side_effect=[httpx.Response(200, json=check("scheduled")), httpx.Response(200, json=check("success"))]
    )

    assert check_op(kind).execute({}) == SRC_ID
    assert [m for m, _ in calls(mock_service)] == ["POST", "GET", "GET"]


def test_check_failure_fails_the_task_with_the_services_reason(mock_service: Any) -> None:
    path = f"/sources/{SRC_ID}/connection-check"
    mock_service.post(path).respond(json=check("scheduled"))
    mock_service.get(path).respond(json=check("failure", reason="401 from wiki.example.com: bad token"))

    with pytest.raises(
        ops.ConnectionCheckFailedError, match=r"failed: 401 from wiki\.example\.com: bad token"
    ) as info:
        check_op().execute({})
    assert info.value.reason == "401 from wiki.example.com: bad token"
    assert not isinstance(info.value, AirflowFailException)  # retries apply (the remote may be down)


def test_check_result_in_the_start_answer_needs_no_poll(mock_service: Any) -> None:
    mock_service.post(f"/sources/{SRC_ID}/connection-check").respond(json=check("success"))

    assert check_op().execute({}) == SRC_ID
    assert [m for m, _ in calls(mock_service)] == ["POST"]


def test_a_previous_checks_result_is_not_taken_for_the_new_one(mock_service: Any) -> None:
    path = f"/sources/{SRC_ID}/connection-check"
    mock_service.post(path).respond(json=check("scheduled", check_id="chk-2"))
    mock_service.get(path).mock(
        side_effect=[
            httpx.Response(200, json=check("success", check_id="chk-1")),
            httpx.Response(200, json=check("failure", reason="dns")),
        ]
    )

    with pytest.raises(ops.ConnectionCheckFailedError, match="dns"):
        check_op().execute({})


@pytest.mark.parametrize("status", ["scheduled", "ok-ish", "SUCCEEDED_PARTIALLY"])
def test_pending_and_unknown_statuses_never_count_as_success(mock_service: Any, status: str) -> None:
    path = f"/sources/{SRC_ID}/connection-check"
    mock_service.post(path).respond(200)  # empty start answer
    mock_service.get(path).respond(json=check(status))

    from airflow_provider_workflowsvc.hooks import workflowsvc  # noqa: F401 - loaded before the clock runs

    # The timeout counts from the task's start: on a busy machine, 2 s still leave time for polls
    with pytest.raises(ops.ConnectionCheckFailedError, match=r"gave no result within 2 s \(last status: "):
        check_op(timeout=2).execute({})
    assert calls(mock_service, "GET")  # the statuses were read, and none counted as a result


# --------------------------------------------------------------------------------------------------
# Module contract


RENDERED: dict[str, dict[str, Any]] = {
    "source": {"connector_id": SRC_ID, "name": "wiki", "connector_type": "confluence", "config": CONFLUENCE},
    "destination": {
        "connector_id": DST_ID,
        "name": "vectors",
        "connector_type": "astradb",
        "config": {"collection_name": "docs", "api_endpoint": "https://astra.example.com", "token": SECRET},
    },
}
"""Per kind, a rendered value for each field a user may template."""


def rendered(kind: str, operator_name: str, **kwargs: Any) -> Any:
    """The public operator ``operator_name`` (``{Kind}`` for the kind), every template field given as a
    template and rendered as the task runs."""
    from airflow.sdk import DAG

    operator = getattr(ops, operator_name.format(Kind=kind.title()))
    values = RENDERED[kind]
    untested = sorted(set(operator.template_fields) - set(values) - {"workflowsvc_conn_id"})
    assert not untested, f"{operator.__name__} templates {untested}: add a rendered value to RENDERED"
    templates = {field: f"{{{{ params.{field} }}}}" for field in operator.template_fields if field in values}
    with DAG(f"templated_{operator.__name__}", schedule=None, render_template_as_native_obj=True):
        task = operator(task_id="t", **templates, **kwargs)
    task.render_template_fields({"params": values})
    return task


@pytest.mark.parametrize("kind", ["source", "destination"])
def test_every_templated_field_reaches_the_request(mock_service: Any, kind: str) -> None:
    values = RENDERED[kind]
    path = f"/{kind}s/{values['connector_id']}"
    mock_service.get(f"/{kind}s/").respond(json=[])
    mock_service.post(f"/{kind}s/").respond(json=connector(values["connector_id"], values["name"]))
    mock_service.put(path).respond(json=connector(values["connector_id"], values["name"]))
    mock_service.get(path).respond(json=connector(values["connector_id"], values["name"]))
    mock_service.delete(path).respond(204)
    mock_service.post(f"{path}/connection-check").respond(json=check("scheduled"))
    mock_service.get(f"{path}/connection-check").respond(json=check("success"))
    not_rendered = "a value missing here is not rendered: add its field to template_fields"

    assert rendered(kind, "Create{Kind}ConnectorOperator").execute({}) == values["connector_id"]
    sent = body(mock_service)
    assert (sent["name"], sent["type"]) == (values["name"], values["connector_type"]), not_rendered
    assert values["config"].items() <= sent["config"].items(), not_rendered
    assert rendered(kind, "Update{Kind}ConnectorOperator").execute({}) == values["connector_id"]
    assert values["config"].items() <= body(mock_service)["config"].items(), not_rendered
    rendered(kind, "Delete{Kind}ConnectorOperator", missing_ok=False).execute({})  # reads it first
    assert rendered(kind, "{Kind}ConnectionCheckOperator").execute({}) == values["connector_id"]
    check_path = f"{path}/connection-check"
    # every endpoint of the kind, and only of the kind: list, create, update, get, delete, both checks
    assert calls(mock_service) == [
        ("GET", f"/api/v1/{kind}s/"),
        ("POST", f"/api/v1/{kind}s/"),
        ("PUT", f"/api/v1{path}"),
        ("GET", f"/api/v1{path}"),
        ("DELETE", f"/api/v1{path}"),
        ("POST", f"/api/v1{check_path}"),
        ("GET", f"/api/v1{check_path}"),
    ]


# --------------------------------------------------------------------------------------------------
# Airflow run against the emulator (dag.test)


def test_a_failing_connection_check_fails_the_task_with_the_reason(
    dag_runner: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk import DAG

    with DAG("wfsvc_check_fails", schedule=None) as dag:
        source = ops.CreateSourceConnectorOperator(
            task_id="create_source",
            name="broken-wiki",
            connector_type="confluence",
            config={"url": "https://wiki.example.invalid", "token": "pat-broken-wiki-5521"},
        )
        ops.SourceConnectionCheckOperator(
            task_id="check_source", connector_id=source.output, poll_interval=0.05, timeout=30
        )

    dr = dag_runner(dag)

    assert dr.state == "failed"
    assert dr.get_task_instance("create_source").state == "success"
    assert dr.get_task_instance("check_source").state == "failed"
    out = capfd.readouterr().out
    assert "failed: connection failed: the host in config field 'url' could not be resolved" in out
    assert "pat-broken-wiki-5521" not in out


def test_mapped_create_tasks_mask_their_secrets_too(dag_runner: Any) -> None:
    from airflow.sdk import DAG

    keys = ["acct-key-mapped-0001", "acct-key-mapped-0002"]
    with DAG("wfsvc_mapped_sources", schedule=None) as dag:
        ops.CreateSourceConnectorOperator.partial(task_id="create", connector_type="azure").expand_kwargs(
            [
                {"name": f"blob-{i}", "config": {"remote_url": "az://c", "account_key": key}}
                for i, key in enumerate(keys)
            ]
        )

    dr = dag_runner(dag)

    assert [ti.state for ti in dr.get_task_instances()] == ["success", "success"]
    from test_workflow_operators import _rendered_fields_rows

    stored = json.dumps(_rendered_fields_rows(dr))
    assert '"account_key": "***"' in stored
    assert not any(key in stored for key in keys)


def test_check_failure_error_survives_pickling() -> None:
    import pickle

    error = ops.ConnectionCheckFailedError("check failed: dns", connector_id=SRC_ID, reason="dns")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.connector_id, copy.reason) == ("check failed: dns", SRC_ID, "dns")


def test_url_secrets_are_the_user_info_and_the_query_not_the_location() -> None:
    """Issue #24: what of a URL is registered with the masker."""
    from airflow_provider_workflowsvc._tasks.secrets import config_secrets
    from airflow_provider_workflowsvc._url_secrets import url_secrets

    sig = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA%3D%3D"
    sas = f"https://acct.blob.core.windows.net/c/docs?sv=2022-11-02&sp=rl&sig={sig}"
    found = url_secrets(sas)
    assert f"sv=2022-11-02&sp=rl&sig={sig}" in found  # the whole query
    assert sig in found  # as written
    assert "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==" in found  # and decoded
    assert "rl" not in found  # short values alone are no secret
    assert "2022-11-02" not in found
    assert not any("acct.blob.core.windows.net" in s for s in found)  # the location stays readable
    assert url_secrets("https://wiki.example.com/?token=abc123") == ["token=abc123", "abc123"]
    assert url_secrets("https://bot:pw-9@astra.example.com") == ["bot:pw-9", "pw-9"]
    assert url_secrets("abfss://container@acct.dfs.core.windows.net/path") == []  # a container, not a user
    assert url_secrets("no url here ?token=x") == []
    # Under a key known to hold no secret, the URL's query is a secret all the same.
    secrets = config_secrets({"remote_url": sas, "recursive": True}, "azure")
    assert sig in secrets
    assert sas not in secrets


def test_reuse_against_the_emulator_names_what_it_leaves(workflowsvc_conn: Any, settings: Any) -> None:
    """Issue #32, against the emulator (which masks every secret it gives back its own way): a reuse
    with the same settings sees no difference; with another URL and token, the URL is named with both
    values and the token as not compared, its value nowhere in the log."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    name = f"wiki-{time.time_ns()}"
    with WorkflowServiceHook(settings=settings) as hook:
        created = hook.create_source(name, "confluence", dict(CONFLUENCE))

    with capture_logs() as logs:
        assert create_source(name=name).execute({}) == created.id
    assert not [e for e in logs if "differs" in e["event"]]

    moved = {**CONFLUENCE, "url": "https://wiki2.example.com", "token": "conf-token-NEW-5531"}
    with capture_logs() as logs:
        assert create_source(name=name, config=moved).execute({}) == created.id
    (warning,) = [e["event"] for e in logs if "differs" in e["event"]]
    assert "in 1 setting(s)" in warning
    both = "the service has 'https://wiki.example.com', the task sets 'https://wiki2.example.com'"
    assert f"url: {both}" in warning
    assert any("secret setting(s) token cannot be compared" in e["event"] for e in logs)
    shown = json.dumps([e["event"] for e in logs])
    assert "conf-token-NEW-5531" not in shown
    assert SECRET not in shown
