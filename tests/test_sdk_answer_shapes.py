"""Every answer shape the public SDK's models accept is read by the hook (issue #23).

The shapes are generated from the SDK's own pydantic models (``unstructured-client``, generated from the
live service's OpenAPI document), never hand-picked: a valid answer is built by walking each model's
fields, then every field is varied in turn (left out where optional, null where nullable, an empty
string, a non-UUID id, each enum value and a new one, other date spellings, an empty list, an unknown
field at every level). A variant counts only if the SDK's model accepts it; each such variant is then
sent to the hook over HTTP (respx) and must be read. A listing with one item nobody can read keeps
the others and names the one it skipped.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Callable, Iterator
from datetime import datetime
from enum import Enum
from typing import Any

import httpx
import pytest
import respx
from pydantic import BaseModel, ValidationError
from unstructured_client.models import shared

from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

BASE = "https://sdk-shapes.example.test/api/v1"
ID = "6f1d3c4e-0000-4000-8000-000000000001"
NEW_WORD = "SOMETHING_NEW"
DATE_SPELLINGS = (
    "2024-05-01T12:00:00+00:00",
    "2024-05-01 12:00:00",
    "2024-05-01T12:00:00.123456Z",
    1714564800,
)
CONFIG_CANDIDATES: tuple[dict[str, Any], ...] = (
    {"remote_url": "s3://bucket/in", "anonymous": True},
    {"url": "https://wiki.example.com", "username": "u", "token": "t", "cloud": True},
    {},
)

# --------------------------------------------------------------------------------------------------
# Walking the SDK's models


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without its optional/nullable wrapper, and whether null is allowed."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if getattr(origin, "__name__", "") in ("OptionalNullable", "Nullable"):
        return _unwrap(args[0])[0], True
    if origin is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True  # noqa: UP007
    return annotation, False


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _key(name: str, field: Any) -> str:
    return str(field.alias or name)


def sample(annotation: Any) -> Any:
    """A value the SDK accepts for ``annotation`` (nested models filled in, every field given)."""
    tp, _ = _unwrap(annotation)
    origin = typing.get_origin(tp)
    if tp is str:
        return ID
    if tp is bool:
        return True
    if tp is int:
        return 1
    if tp is float:
        return 1.5
    if tp is datetime:
        return "2024-05-01T12:00:00Z"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return next(iter(tp)).value
    if origin in (list, typing.List):  # noqa: UP006
        return [sample(typing.get_args(tp)[0])]
    if origin in (dict, typing.Dict):  # noqa: UP006
        return {"key": "value"}
    if _is_model(tp):
        return {_key(n, f): sample(f.annotation) for n, f in tp.model_fields.items()}
    return CONFIG_CANDIDATES[0]  # a union of the SDK's connector config models


def variants(model: type[BaseModel], base: dict[str, Any], where: str = "") -> Iterator[tuple[str, Any]]:
    """Every one-field change of ``base`` (a valid ``model`` answer), with a label saying what changed."""
    yield f"{where}+unknown field", {**base, "field_added_later": {"nested": [1, "two"]}}
    for name, field in model.model_fields.items():
        key, label = _key(name, field), f"{where}{_key(name, field)}"
        tp, nullable = _unwrap(field.annotation)
        others = {k: v for k, v in base.items() if k != key}
        if not field.is_required():
            yield f"{label} left out", others
        if nullable:
            yield f"{label}=null", {**others, key: None}
        for value_label, value in _values(tp):
            yield f"{label}={value_label}", {**others, key: value}
        for sub_label, sub in _nested(tp, base.get(key), label):
            yield sub_label, {**others, key: sub}


def _values(tp: Any) -> Iterator[tuple[str, Any]]:
    origin = typing.get_origin(tp)
    if tp is str:
        yield from (("empty", ""), ("not a UUID", "id-42"), ("spaces", "  a name  "))
    elif tp is datetime:
        yield from ((repr(d), d) for d in DATE_SPELLINGS)
    elif isinstance(tp, type) and issubclass(tp, Enum):
        yield from ((str(m.value), m.value) for m in tp)
        yield NEW_WORD, NEW_WORD
    elif origin in (list, typing.List):  # noqa: UP006
        yield "[]", []
        if _unwrap(typing.get_args(tp)[0])[0] is str:
            yield "[not a UUID, empty]", ["id-42", ""]
    elif tp is int:
        yield "0", 0
    elif not _is_model(tp) and origin not in (dict, typing.Dict):  # noqa: UP006
        yield from ((f"config {i}", c) for i, c in enumerate(CONFIG_CANDIDATES))


def _nested(tp: Any, value: Any, label: str) -> Iterator[tuple[str, Any]]:
    origin = typing.get_origin(tp)
    if _is_model(tp) and isinstance(value, dict):
        yield from variants(tp, value, f"{label}.")
    elif origin in (list, typing.List) and value:  # noqa: UP006
        item = _unwrap(typing.get_args(tp)[0])[0]
        if _is_model(item):
            for sub_label, sub in variants(item, value[0], f"{label}[0]."):
                yield sub_label, [sub]


def sdk_accepts(model: type[BaseModel], payload: Any) -> bool:
    try:
        model.model_validate(payload)
    except (ValidationError, TypeError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Which hook call reads which SDK model


HookCall = Callable[[WorkflowServiceHook], Any]
ONE: dict[str, tuple[type[BaseModel], str, str, HookCall]] = {
    "get_job": (shared.JobInformation, "GET", f"/jobs/{ID}", lambda h: h.get_job(ID)),
    "get_job_details": (shared.JobDetails, "GET", f"/jobs/{ID}/details", lambda h: h.get_job_details(ID)),
    "get_job_failed_files": (
        shared.JobFailedFiles,
        "GET",
        f"/jobs/{ID}/failed-files",
        lambda h: h.get_job_failed_files(ID),
    ),
    "get_workflow": (shared.WorkflowInformation, "GET", f"/workflows/{ID}", lambda h: h.get_workflow(ID)),
    "get_source": (shared.SourceConnectorInformation, "GET", f"/sources/{ID}", lambda h: h.get_source(ID)),
    "get_destination": (
        shared.DestinationConnectorInformation,
        "GET",
        f"/destinations/{ID}",
        lambda h: h.get_destination(ID),
    ),
    "run_workflow": (shared.JobInformation, "POST", f"/workflows/{ID}/run", lambda h: h.run_workflow(ID)),
    "start_destination_connection_check": (
        shared.DagNodeConnectionCheck,
        "POST",
        f"/destinations/{ID}/connection-check",
        lambda h: h.start_destination_connection_check(ID),
    ),
    "get_source_connection_check": (
        shared.DagNodeConnectionCheck,
        "GET",
        f"/sources/{ID}/connection-check",
        lambda h: h.get_source_connection_check(ID),
    ),
}
LISTINGS: dict[str, tuple[type[BaseModel], str, HookCall]] = {
    "list_jobs": (shared.JobInformation, "/jobs/", lambda h: h.list_jobs()),
    "list_workflows": (shared.WorkflowInformation, "/workflows/", lambda h: h.list_workflows()),
    "list_sources": (shared.SourceConnectorInformation, "/sources/", lambda h: h.list_sources()),
    "list_destinations": (
        shared.DestinationConnectorInformation,
        "/destinations/",
        lambda h: h.list_destinations(),
    ),
}


def sdk_valid_answers(model: type[BaseModel]) -> list[tuple[str, Any]]:
    base = sample(model)
    assert sdk_accepts(model, base), f"the generated answer of {model.__name__} is not valid for the SDK"
    return [
        ("as generated", base),
        *((label, v) for label, v in variants(model, base) if sdk_accepts(model, v)),
    ]


@pytest.fixture
def hook() -> Iterator[WorkflowServiceHook]:
    settings = ConnectionSettings(base_url=BASE, api_key="key-shapes-1", max_retries=0)
    with WorkflowServiceHook(settings=settings) as hook:
        yield hook


def _answer(router: respx.MockRouter, method: str, path: str, body: Any) -> None:
    router.route(method=method, url=BASE + path).mock(return_value=httpx.Response(200, json=body))


@pytest.mark.parametrize("name", sorted(ONE))
def test_every_answer_the_sdk_accepts_is_read_by_the_hook(hook: WorkflowServiceHook, name: str) -> None:
    model, method, path, call = ONE[name]
    answers = sdk_valid_answers(model)
    tried = sum(1 for _ in variants(model, sample(model))) + 1
    unread = []
    for label, answer in answers:
        with respx.mock(assert_all_called=True) as router:
            _answer(router, method, path, answer)
            try:
                call(hook)
            except Exception as exc:  # every failure is reported with its shape
                unread.append(f"{label}: {type(exc).__name__}: {exc}")
    print(
        f"\n{name}: {len(answers) - len(unread)}/{len(answers)} SDK-valid answers read ({tried} shapes tried)"
    )
    assert len(answers) >= 10, "too few shapes: the generator no longer walks this model"
    assert unread == []


@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_every_item_the_sdk_accepts_is_read_in_a_listing(hook: WorkflowServiceHook, name: str) -> None:
    model, path, call = LISTINGS[name]
    answers = sdk_valid_answers(model)
    with respx.mock(assert_all_called=True) as router:
        _answer(router, "GET", path, [answer for _, answer in answers])
        listing = call(hook)
    print(f"\n{name}: {len(listing)}/{len(answers)} SDK-valid items read")
    assert len(listing) == len(answers)
    assert listing.skipped == []


UNREADABLE: dict[str, Any] = {
    "a string": "not a record",
    "no id": {"name": "orphan", "status": "SCHEDULED"},
    "an id that is an object": {"id": {"nested": 1}, "name": "odd"},
    "a null id": {"id": None, "name": "no-id-yet", "status": "SCHEDULED"},
}


@pytest.mark.parametrize("odd", sorted(UNREADABLE))
@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_one_unreadable_item_never_fails_a_listing(
    hook: WorkflowServiceHook, name: str, odd: str, caplog: pytest.LogCaptureFixture
) -> None:
    model, path, call = LISTINGS[name]
    good = sample(model)
    with respx.mock(assert_all_called=True) as router, caplog.at_level(logging.WARNING):
        _answer(router, "GET", path, [good, UNREADABLE[odd], {**good, "name": "second"}])
        listing = call(hook)
    assert len(listing) == 2
    assert listing.skipped == [UNREADABLE[odd]]
    assert "Skipped item 1 of a" in caplog.text
    if isinstance(UNREADABLE[odd], dict):
        assert repr(UNREADABLE[odd]["name"]) in caplog.text  # the warning names the item


@pytest.mark.parametrize("odd_name", ["wanted", "someone-else"])
def test_get_or_create_fails_closed_only_for_an_unreadable_item_of_its_name(
    mock_service: Any, odd_name: str
) -> None:
    from airflow_provider_workflowsvc.exceptions import ExistingResourceError
    from airflow_provider_workflowsvc.operators.connectors import CreateSourceConnectorOperator

    good = sample(shared.SourceConnectorInformation)
    odd = {"id": {"not": "a string"}, "name": odd_name, "type": "s3"}
    mock_service.get("/sources/").respond(json=[{**good, "name": "other"}, odd])
    created = mock_service.post("/sources/").respond(json={**good, "name": "wanted"})
    operator = CreateSourceConnectorOperator(
        task_id="create",
        name="wanted",
        connector_type="s3",
        config={"remote_url": "s3://b", "anonymous": True},
    )
    if odd_name == "wanted":
        with pytest.raises(
            ExistingResourceError, match="named 'wanted' exists but the provider cannot read it"
        ):
            operator.execute({})
        assert not created.called
    else:
        assert operator.execute({}) == good["id"]
        assert created.called


def test_a_page_of_unreadable_workflows_neither_ends_the_paging_nor_hides_a_name(mock_service: Any) -> None:
    """Page 1 holds only an unreadable workflow named 'wanted'; page 2 a readable one of another name. The
    paging goes on past page 1, and CreateWorkflowOperator fails closed instead of creating 'wanted'."""
    from airflow_provider_workflowsvc.exceptions import ExistingResourceError
    from airflow_provider_workflowsvc.hooks.workflowsvc import all_workflows
    from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

    good = sample(shared.WorkflowInformation)
    odd = {"id": {"not": "a string"}, "name": "wanted"}
    pages = mock_service.get("/workflows/").mock(
        side_effect=[
            httpx.Response(200, json=[odd]),
            httpx.Response(200, json=[{**good, "name": "other"}]),
            httpx.Response(200, json=[]),
        ]
    )
    created = mock_service.post("/workflows/").respond(json={**good, "name": "wanted"})
    with WorkflowServiceHook() as hook:
        found = all_workflows(hook, page_size=1)
    assert [w.name for w in found] == ["other"]
    assert found.skipped == [odd]
    assert pages.call_count == 3
    pages.reset()
    pages.side_effect = [httpx.Response(200, json=[odd]), httpx.Response(200, json=[])]
    operator = CreateWorkflowOperator(task_id="create", name="wanted", workflow_type="basic")
    with pytest.raises(ExistingResourceError, match="named 'wanted' exists but the provider cannot read it"):
        operator.execute({})
    assert not created.called


# --------------------------------------------------------------------------------------------------
# The platform's own operations (templates, on-demand jobs): every answer the emulator gives them, in
# every state an on-demand job passes through, is a shape the SDK's models accept. (The hook reads the
# SDK's shapes of these operations once it calls them: issue #34, item 1.)

STEP = 100.0


def _emulator_platform_answers(emulator: Any, api: httpx.Client) -> list[tuple[str, type[BaseModel], Any]]:
    """The emulator's answers to the platform's own operations, labelled with the SDK model of each."""
    answers: list[tuple[str, type[BaseModel], Any]] = []
    for item in api.get("/templates/").json():
        answers.append(("list_templates", shared.TemplateListItem, item))
        answers.append(("get_template", shared.TemplateDetail, api.get(f"/templates/{item['id']}").json()))
    nodes = [{"name": "Partitioner", "type": "partition", "subtype": "unstructured_api", "settings": None}]
    launches = [
        ({"template_id": "hi_res_partition"}, [("a.txt", b"Text."), ("bad.txt", b"")]),
        ({"template_id": "hi_res_and_enrichment"}, [("b.txt", b"Text.")]),
        ({"job_nodes": nodes}, []),
        ({"job_nodes": nodes}, [("c.txt", b"\x00")]),
        ({"template_id": "hi_res_partition"}, [("d.txt", b"Text.")]),
    ]
    jobs = []
    for request_data, files in launches:
        parts = [("input_files[]", (name, data, "text/plain")) for name, data in files]
        created = api.post("/jobs/", data={"request_data": json.dumps(request_data)}, files=parts or None)
        assert created.status_code == 200, created.text
        answers.append(("create_job", shared.JobInformation, created.json()))
        jobs.append(created.json()["id"])
    api.post(f"/jobs/{jobs[-1]}/cancel")
    for step in (0, 1.5 * STEP, 2 * STEP, 3 * STEP, 10 * STEP):
        emulator.advance_clock(step)
        answers += [("list_jobs", shared.JobInformation, item) for item in api.get("/jobs/").json()]
        for job_id in jobs:
            answers.append(("get_job", shared.JobInformation, api.get(f"/jobs/{job_id}").json()))
            answers.append(("get_job_details", shared.JobDetails, api.get(f"/jobs/{job_id}/details").json()))
            failed = api.get(f"/jobs/{job_id}/failed-files").json()
            answers.append(("get_job_failed_files", shared.JobFailedFiles, failed))
    return answers


def test_the_emulators_answers_to_the_platforms_own_operations_are_sdk_shapes() -> None:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    with (
        running_emulator(dialect="platform", processing_delay=STEP) as emulator,
        emulator.api_client() as api,
    ):
        emulator.configure(on_demand_max_running=2, on_demand_launch_interval=0)
        answers = _emulator_platform_answers(emulator, api)
    refused = [f"{label}: {answer}" for label, model, answer in answers if not sdk_accepts(model, answer)]
    assert refused == []
    statuses = {a["status"] for label, _, a in answers if label in ("get_job", "list_jobs", "create_job")}
    details = {a["processing_status"] for label, _, a in answers if label == "get_job_details"}
    job_types = {a["job_type"] for label, _, a in answers if label == "get_job"}
    assert statuses == {"SCHEDULED", "IN_PROGRESS", "COMPLETED", "FAILED", "STOPPED"}
    assert details == {"SCHEDULED", "IN_PROGRESS", "SUCCESS", "COMPLETED_WITH_ERRORS", "FAILED", "STOPPED"}
    assert job_types == {"template", "ephemeral"}
    print(f"\n{len(answers)} emulator answers to the platform's own operations, all valid for the SDK")
