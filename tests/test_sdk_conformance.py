"""The emulator checked by a client nobody here wrote: the service's public SDK (``unstructured-client``).

The SDK is generated from the live service's OpenAPI document, so it validates every answer against
the live service's shapes and status codes. In the ``platform`` dialect every one of the SDK's 29
operations must be accepted (the spec's 26, templates and on-demand jobs); in the ``spec`` dialect the
SDK must reject exactly the answers that differ from the live service (lower-case statuses, 200 instead
of 202) and the three operations the spec does not have, so a change in either dialect shows up here.
"""

from __future__ import annotations

import email.parser
import email.policy
import inspect
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import respx
from unstructured_client import (
    UnstructuredClient,
    destinations as sdk_destinations,
    jobs as sdk_jobs,
    sources as sdk_sources,
    templates as sdk_templates,
    workflows as sdk_workflows,
)
from unstructured_client.models import errors, shared
from unstructured_client.utils import BackoffStrategy, RetryConfig

from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle, running_emulator

# The SDK's open enums keep a connector type as a plain string, which its own serializer then warns about.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

TOKEN = "tok-sdk-5c2e19"
API_KEY = "key-sdk-83d0f4"
NO_RETRIES = RetryConfig("none", BackoffStrategy(1, 1, 1.0, 1), False)
SDK_RESOURCE_CLASSES = (
    sdk_sources.Sources,
    sdk_destinations.Destinations,
    sdk_workflows.Workflows,
    sdk_jobs.Jobs,
    sdk_templates.Templates,
)
PLATFORM_ONLY = {
    "create_job": "POST /api/v1/jobs/ (an on-demand job: a template or nodes given inline)",
    "list_templates": "GET /api/v1/templates/",
    "get_template": "GET /api/v1/templates/{template_id}",
}
"""The live service's operations the spec (and so the spec dialect) does not have."""
SPEC_DIALECT_REJECTED = {
    # not served: 405 (POST /jobs/, whose path GET serves) and 404 (the templates)
    **dict.fromkeys(PLATFORM_ONLY, "SDKError"),
    # 200 where the SDK requires 202 ("Unexpected response received")
    "create_connection_check_sources": "SDKError",
    "create_connection_check_destinations": "SDKError",
    "run_workflow": "SDKError",
    # lower-case statuses (and, for jobs, no job_type) where the SDK requires the live service's values
    "get_connection_check_sources": "ResponseValidationError",
    "get_connection_check_destinations": "ResponseValidationError",
    "list_jobs": "ResponseValidationError",
    "get_job": "ResponseValidationError",
    "get_job_details": "ResponseValidationError",
}


def sdk_operations() -> dict[str, tuple[str, str]]:
    """Every operation of the SDK's source, destination, workflow, job and template resources: name →
    (method, path)."""
    found = {}
    for cls in SDK_RESOURCE_CLASSES:
        for name, function in vars(cls).items():  # its own operations, not the base class's helpers
            if not inspect.isfunction(function) or name.startswith("_") or name.endswith("_async"):
                continue
            source = inspect.getsource(function)
            method = re.search(r'method="(\w+)"', source)
            path = re.search(r'path="([^"]+)"', source)
            assert method, f"cannot read the request of SDK operation {name}"
            assert path, f"cannot read the request of SDK operation {name}"
            found[name] = (method.group(1), path.group(1))
    return found


# --------------------------------------------------------------------------------------------------
# What each operation is called with


@dataclass
class World:
    """Resources made beforehand with plain HTTP, so each SDK call stands alone."""

    sdk: UnstructuredClient
    headers: dict[str, str]
    source_id: str
    destination_id: str
    workflow_id: str
    completed_job: dict[str, Any]
    running_job_id: str
    deletable: dict[str, str] = field(default_factory=dict)

    def call(self, operation: Callable[..., Any], **request: Any) -> Any:
        if not self.headers:
            return operation(request=request)
        return operation(request=request, http_headers=self.headers)


def _post(api: httpx.Client, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
    response = api.post(path, json=body, **kwargs) if body is not None else api.post(path, **kwargs)
    assert response.is_success, response.text
    result: dict[str, Any] = response.json()
    return result


def build_world(emulator: EmulatorHandle) -> World:
    emulator.reset()
    with emulator.api_client() as api:

        def connector(kind: str, name: str) -> str:
            config = {"remote_url": f"s3://bucket/{name}", "key": "AKIA-sdk-test", "secret": "s3-secret-sdk"}
            return str(_post(api, f"/{kind}/", {"name": name, "type": "s3", "config": config})["id"])

        def workflow(name: str) -> str:
            return str(_post(api, "/workflows/", {"name": name, "workflow_type": "basic"})["id"])

        def run(workflow_id: str) -> dict[str, Any]:
            files = [("input_files", ("report.txt", b"Title\n\nSome text to partition.", "text/plain"))]
            return _post(api, f"/workflows/{workflow_id}/run", files=files)

        source_id, destination_id = connector("sources", "sdk-source"), connector("destinations", "sdk-dest")
        for kind, connector_id in (("sources", source_id), ("destinations", destination_id)):
            _post(api, f"/{kind}/{connector_id}/connection-check")
        workflow_id = workflow("sdk-local")
        completed = run(workflow_id)
        emulator.advance_clock(60)
        completed_job = api.get(f"/jobs/{completed['id']}").json()
        emulator.configure(processing_delay=3600)
        running = run(workflow_id)
        deletable = {
            "source": connector("sources", "sdk-source-gone"),
            "destination": connector("destinations", "sdk-dest-gone"),
            "workflow": workflow("sdk-gone"),
        }
    if emulator.dialect == "platform":  # the SDK's own security scheme, nothing injected
        sdk = UnstructuredClient(server_url=emulator.root_url, retry_config=NO_RETRIES, api_key_auth=API_KEY)
        headers: dict[str, str] = {}
    else:
        sdk = UnstructuredClient(server_url=emulator.root_url, retry_config=NO_RETRIES)
        headers = {"Authorization": f"Bearer {emulator.token}", "service-api-key": str(emulator.api_key)}
    return World(
        sdk, headers, source_id, destination_id, workflow_id, completed_job, running["id"], deletable
    )


def _connector_body(name: str, connector_type: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": connector_type,
        "config": {"remote_url": "s3://bucket/new", "anonymous": True},
    }


def _upload() -> dict[str, Any]:
    return {
        "input_files": [
            {"file_name": "notes.md", "content": b"# Notes\n\nText.", "content_type": "text/markdown"}
        ]
    }


OPERATIONS: dict[str, Callable[[World], Any]] = {
    "create_source": lambda w: w.call(
        w.sdk.sources.create_source,
        create_source_connector=_connector_body("new-src", shared.SourceConnectorType.S3),
    ),
    "list_sources": lambda w: w.call(w.sdk.sources.list_sources, source_type=shared.SourceConnectorType.S3),
    "get_source": lambda w: w.call(w.sdk.sources.get_source, source_id=w.source_id),
    "update_source": lambda w: w.call(
        w.sdk.sources.update_source,
        source_id=w.source_id,
        update_source_connector={"config": {"remote_url": "s3://bucket/other", "anonymous": True}},
    ),
    "create_connection_check_sources": lambda w: w.call(
        w.sdk.sources.create_connection_check_sources, source_id=w.source_id
    ),
    "get_connection_check_sources": lambda w: w.call(
        w.sdk.sources.get_connection_check_sources, source_id=w.source_id
    ),
    "delete_source": lambda w: w.call(w.sdk.sources.delete_source, source_id=w.deletable["source"]),
    "create_destination": lambda w: w.call(
        w.sdk.destinations.create_destination,
        create_destination_connector=_connector_body("new-dest", shared.DestinationConnectorType.S3),
    ),
    "list_destinations": lambda w: w.call(
        w.sdk.destinations.list_destinations, destination_type=shared.DestinationConnectorType.S3
    ),
    "get_destination": lambda w: w.call(w.sdk.destinations.get_destination, destination_id=w.destination_id),
    "update_destination": lambda w: w.call(
        w.sdk.destinations.update_destination,
        destination_id=w.destination_id,
        update_destination_connector={"config": {"remote_url": "s3://bucket/out", "anonymous": True}},
    ),
    "create_connection_check_destinations": lambda w: w.call(
        w.sdk.destinations.create_connection_check_destinations, destination_id=w.destination_id
    ),
    "get_connection_check_destinations": lambda w: w.call(
        w.sdk.destinations.get_connection_check_destinations, destination_id=w.destination_id
    ),
    "delete_destination": lambda w: w.call(
        w.sdk.destinations.delete_destination, destination_id=w.deletable["destination"]
    ),
    "create_workflow": lambda w: w.call(
        w.sdk.workflows.create_workflow,
        create_workflow={"name": "sdk-new", "workflow_type": "advanced", "schedule": "daily"},
    ),
    "list_workflows": lambda w: w.call(w.sdk.workflows.list_workflows, page=1, page_size=10),
    "get_workflow": lambda w: w.call(w.sdk.workflows.get_workflow, workflow_id=w.workflow_id),
    "update_workflow": lambda w: w.call(
        w.sdk.workflows.update_workflow, workflow_id=w.workflow_id, update_workflow={"reprocess_all": True}
    ),
    "run_workflow": lambda w: w.call(
        w.sdk.workflows.run_workflow, workflow_id=w.workflow_id, body_run_workflow=_upload()
    ),
    "delete_workflow": lambda w: w.call(w.sdk.workflows.delete_workflow, workflow_id=w.deletable["workflow"]),
    "list_jobs": lambda w: w.call(w.sdk.jobs.list_jobs, workflow_id=w.workflow_id),
    "get_job": lambda w: w.call(w.sdk.jobs.get_job, job_id=w.completed_job["id"]),
    "get_job_details": lambda w: w.call(w.sdk.jobs.get_job_details, job_id=w.completed_job["id"]),
    "get_job_failed_files": lambda w: w.call(w.sdk.jobs.get_job_failed_files, job_id=w.completed_job["id"]),
    "download_job_output": lambda w: w.call(
        w.sdk.jobs.download_job_output,
        job_id=w.completed_job["id"],
        file_id=w.completed_job["output_node_files"][0]["file_id"],
        node_id=w.completed_job["output_node_files"][0]["node_id"],
    ),
    "cancel_job": lambda w: w.call(w.sdk.jobs.cancel_job, job_id=w.running_job_id),
    "list_templates": lambda w: w.call(w.sdk.templates.list_templates),
    "get_template": lambda w: w.call(w.sdk.templates.get_template, template_id="hi_res_partition"),
    "create_job": lambda w: w.call(
        w.sdk.jobs.create_job,
        body_create_job={"request_data": json.dumps({"template_id": "hi_res_partition"}), **_upload()},
    ),
}


def exercise(world: World) -> dict[str, str]:
    """Call every operation once; the ones the SDK rejects, with the error class it raised."""
    rejected = {}
    for name, operation in OPERATIONS.items():
        try:
            response = operation(world)
        except (errors.SDKError, errors.ResponseValidationError) as exc:
            rejected[name] = type(exc).__name__
            continue
        assert 200 <= response.status_code < 300, name
    return rejected


# --------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module", params=["spec", "platform"])
def sdk_emulator(request: pytest.FixtureRequest) -> Iterator[EmulatorHandle]:
    with running_emulator(token=TOKEN, api_key=API_KEY, dialect=request.param) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def platform_emulator() -> Iterator[EmulatorHandle]:
    with running_emulator(token=TOKEN, api_key=API_KEY, dialect="platform") as emulator:
        yield emulator


# --------------------------------------------------------------------------------------------------
# The hook sends what the SDK sends (templates and on-demand jobs: the spec does not describe them)

ROOT = "https://wire.example.test"
WIRE_KEY = "key-wire-5f2a91"
TEMPLATE_ANSWER = {
    "id": "hi_res_partition",
    "name": "High Resolution Partition",
    "description": "d",
    "version": "1.0.0",
    "last_updated": "2025-12-01T00:00:00.000000",
}
JOB_ANSWER = {
    "id": "job-1",
    "workflow_id": "wf-1",
    "workflow_name": "job-job-1",
    "status": "SCHEDULED",
    "created_at": "2026-01-01T00:00:00Z",
    "job_type": "template",
    "input_file_ids": ["a.txt"],
    "output_node_files": [],
}
NODES = [{"name": "Partitioner", "type": "partition", "subtype": "unstructured_api"}]
COMPARED_HEADERS = ("accept", "unstructured-api-key")
"""The SDK's request headers the hook must send alike (its user agent and the hook's own extra
headers, the bearer token and the spec's ``service-api-key``, are each client's own)."""


@dataclass(frozen=True)
class Wire:
    """What one request carried: everything the service can read of it."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body_kind: str
    form: tuple[tuple[str, Any], ...]
    files: tuple[tuple[str, str | None, str, bytes], ...]


def _wire(request: httpx.Request) -> Wire:
    content_type = request.headers.get("content-type", "")
    form: list[tuple[str, Any]] = []
    files: list[tuple[str, str | None, str, bytes]] = []
    kind = content_type.split(";")[0]
    if kind == "multipart/form-data":
        raw = b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + request.content
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if part.get_filename() is None:
                form.append((name, json.loads(payload)))
            else:
                files.append((name, part.get_filename(), part.get_content_type(), payload))
    elif kind == "application/x-www-form-urlencoded":
        form = [(k, json.loads(v)) for k, v in httpx.QueryParams(request.content.decode()).multi_items()]
    return Wire(
        request.method,
        request.url.raw_path.decode().partition("?")[0],
        tuple(request.url.params.multi_items()),
        tuple((h, request.headers.get(h, "")) for h in COMPARED_HEADERS),
        kind,
        tuple(form),
        tuple(files),
    )


def _recorded(router: respx.MockRouter, call: Callable[[], Any]) -> Wire:
    before = len(router.calls)
    call()
    assert len(router.calls) == before + 1
    return _wire(router.calls.last.request)


@pytest.fixture
def wire_router() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=ROOT, assert_all_called=False) as router:
        router.get("/api/v1/templates/").respond(json=[TEMPLATE_ANSWER])
        router.get("/api/v1/templates/hi_res_partition").respond(json={**TEMPLATE_ANSWER, "nodes": []})
        router.post("/api/v1/jobs/").respond(json=JOB_ANSWER)
        yield router


@pytest.mark.parametrize(
    ("request_data", "files"),
    [
        ({"template_id": "hi_res_partition"}, [("a.txt", b"Some text.", "text/plain")]),
        (
            {"job_nodes": NODES},
            [("a.txt", b"Text.", "text/plain"), ("page.html", b"<h1>Hi</h1>", "text/html")],
        ),
        ({"template_id": "hi_res_partition"}, []),
    ],
    ids=["template-one-file", "nodes-two-files", "no-file"],
)
def test_the_hook_sends_what_the_sdk_sends(
    wire_router: respx.MockRouter, tmp_path: Any, request_data: dict[str, Any], files: list[Any]
) -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    sdk = UnstructuredClient(server_url=ROOT, retry_config=NO_RETRIES, api_key_auth=WIRE_KEY)
    hook = WorkflowServiceHook(settings=ConnectionSettings(base_url=f"{ROOT}/api/v1", api_key=WIRE_KEY))
    paths = []
    for name, content, _ in files:
        (tmp_path / name).write_bytes(content)
        paths.append(tmp_path / name)
    body: dict[str, Any] = {"request_data": json.dumps(request_data)}
    if files:
        body["input_files"] = [{"file_name": n, "content": c, "content_type": t} for n, c, t in files]
    pairs = {
        "list_templates": (lambda: sdk.templates.list_templates(request={}), hook.list_templates),
        "get_template": (
            lambda: sdk.templates.get_template(request={"template_id": "hi_res_partition"}),
            lambda: hook.get_template("hi_res_partition"),
        ),
        "create_job": (
            lambda: sdk.jobs.create_job(request={"body_create_job": body}),
            lambda: hook.create_job(**request_data, files=paths or None),
        ),
    }
    for name, (by_sdk, by_hook) in pairs.items():
        expected, sent = _recorded(wire_router, by_sdk), _recorded(wire_router, by_hook)
        assert sent == expected, name
    assert expected.files == tuple(("input_files[]", n, t, c) for n, c, t in files)
    hook.close()


# --------------------------------------------------------------------------------------------------
# Tests

SDK_TO_HOOK = {
    "list_sources": "list_sources",
    "get_source": "get_source",
    "create_source": "create_source",
    "update_source": "update_source",
    "delete_source": "delete_source",
    "create_connection_check_sources": "start_source_connection_check",
    "get_connection_check_sources": "get_source_connection_check",
    "list_destinations": "list_destinations",
    "get_destination": "get_destination",
    "create_destination": "create_destination",
    "update_destination": "update_destination",
    "delete_destination": "delete_destination",
    "create_connection_check_destinations": "start_destination_connection_check",
    "get_connection_check_destinations": "get_destination_connection_check",
    "create_workflow": "create_workflow",
    "list_workflows": "list_workflows",
    "get_workflow": "get_workflow",
    "update_workflow": "update_workflow",
    "delete_workflow": "delete_workflow",
    "run_workflow": "run_workflow",
    "list_jobs": "list_jobs",
    "get_job": "get_job",
    "get_job_details": "get_job_details",
    "get_job_failed_files": "get_job_failed_files",
    "cancel_job": "cancel_job",
    "download_job_output": "download_job_output",
    "list_templates": "list_templates",
    "get_template": "get_template",
    "create_job": "create_job",
}
"""Each SDK operation and the hook method that sends the same request."""


_CHANNEL_VERBS = ("create", "get", "update", "delete", "verify")
HOOK_ENDPOINTS_WITHOUT_AN_SDK_OPERATION = {
    "get_output_document": "reads the start of a download, whose request is the SDK's download_job_output "
    "(mapped to download_job_output): no operation of its own",
    **dict.fromkeys(
        (
            *(
                "list_notifications",
                "get_notification",
                "count_unread_notifications",
                "mark_notifications_read",
            ),
            *(f"{verb}_{level}_channel" for level in ("workflow", "workspace") for verb in _CHANNEL_VERBS),
            *(f"list_{level}_channels" for level in ("workflow", "workspace")),
        ),
        "the job events of the live service (2026-04): no released unstructured-client has these "
        "operations yet (0.46.4 is the newest); its repository generates them",
    ),
}
"""Each endpoint of the hook (``ENDPOINT_NAMES``) that no SDK operation sends, with the reason."""


def test_the_hooks_cover_every_sdk_operation() -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ENDPOINT_NAMES

    operations, endpoints = set(sdk_operations()), set(ENDPOINT_NAMES)
    unmapped = sorted(operations - set(SDK_TO_HOOK))
    assert not unmapped, (
        f"SDK operations no hook method is matched with: {unmapped}. Add each to SDK_TO_HOOK with the hook "
        "method that sends its request (a new endpoint: the method in hooks/ and its name in ENDPOINT_NAMES)."
    )
    gone = sorted(set(SDK_TO_HOOK) - operations)
    assert not gone, f"SDK_TO_HOOK names operations the installed SDK does not have: {gone}. Drop them."
    unknown = sorted(set(SDK_TO_HOOK.values()) - endpoints)
    assert not unknown, (
        f"SDK_TO_HOOK names hook methods ENDPOINT_NAMES does not list: {unknown}. Fix the names."
    )
    twice = sorted({m for m in SDK_TO_HOOK.values() if list(SDK_TO_HOOK.values()).count(m) > 1})
    assert not twice, f"hook methods matched with two SDK operations in SDK_TO_HOOK: {twice}. Keep one each."
    unchecked = sorted(endpoints - set(SDK_TO_HOOK.values()) - set(HOOK_ENDPOINTS_WITHOUT_AN_SDK_OPERATION))
    assert not unchecked, (
        f"hook endpoints no SDK operation checks: {unchecked}. Match each in SDK_TO_HOOK with the SDK "
        "operation that sends the same request, or record why it has none (the reason beside it) in "
        "HOOK_ENDPOINTS_WITHOUT_AN_SDK_OPERATION."
    )
    excluded = HOOK_ENDPOINTS_WITHOUT_AN_SDK_OPERATION
    stale = sorted(name for name in excluded if name in SDK_TO_HOOK.values() or name not in endpoints)
    assert not stale, f"drop from HOOK_ENDPOINTS_WITHOUT_AN_SDK_OPERATION (checked, or no endpoint): {stale}"


def test_the_table_covers_every_sdk_operation() -> None:
    discovered = sdk_operations()
    untried = sorted(set(discovered) - set(OPERATIONS))
    assert not untried, (
        f"SDK operations the conformance run never calls: {untried}. Add a call to OPERATIONS."
    )
    gone = sorted(set(OPERATIONS) - set(discovered))
    assert not gone, f"OPERATIONS calls SDK operations the installed SDK does not have: {gone}. Drop them."
    assert {name: discovered[name] for name in PLATFORM_ONLY} == {
        "create_job": ("POST", "/api/v1/jobs/"),
        "list_templates": ("GET", "/api/v1/templates/"),
        "get_template": ("GET", "/api/v1/templates/{template_id}"),
    }, "the SDK moved a platform-only operation: update PLATFORM_ONLY and the spec dialect's verdict"
    elsewhere = sorted(name for name, (_, path) in discovered.items() if not path.startswith("/api/v1/"))
    assert not elsewhere, f"SDK operations outside /api/v1/ (the hook's base): {elsewhere}"


def test_every_operation_in_the_dialects_verdict(sdk_emulator: EmulatorHandle) -> None:
    rejected = exercise(build_world(sdk_emulator))
    if sdk_emulator.dialect == "platform":
        assert rejected == {}, f"the SDK rejects these platform answers: fix the platform dialect: {rejected}"
    else:
        changed = {
            name: (SPEC_DIALECT_REJECTED.get(name, "accepted"), rejected.get(name, "accepted"))
            for name in set(rejected) | set(SPEC_DIALECT_REJECTED)
            if rejected.get(name) != SPEC_DIALECT_REJECTED.get(name)
        }
        assert not changed, (
            f"the spec dialect's verdict changed (operation: (expected, now)): {changed}. A difference from "
            "the live service made or removed on purpose: update SPEC_DIALECT_REJECTED and its comment; "
            "otherwise fix the spec dialect."
        )
    accepted = len(OPERATIONS) - len(rejected)
    print(f"\n{sdk_emulator.dialect} dialect: the SDK accepts {accepted}/{len(OPERATIONS)} operations")


@pytest.mark.parametrize(
    ("api_key", "status"),
    [(API_KEY, 200), ("key-sdk-wrong", 401), (TOKEN, 401)],
    ids=["key", "wrong", "token"],
)
def test_the_platform_authenticates_the_sdks_own_way(
    platform_emulator: EmulatorHandle, api_key: str, status: int
) -> None:
    sdk = UnstructuredClient(
        server_url=platform_emulator.root_url, retry_config=NO_RETRIES, api_key_auth=api_key
    )
    if status == 200:
        assert sdk.jobs.list_jobs(request={}).status_code == 200
        return
    with pytest.raises(errors.SDKError) as raised:
        sdk.jobs.list_jobs(request={})
    assert raised.value.status_code == status


def test_the_spec_dialect_keeps_the_specs_headers() -> None:
    with running_emulator(token=TOKEN, api_key=API_KEY, dialect="spec") as emulator:
        sdk = UnstructuredClient(server_url=emulator.root_url, retry_config=NO_RETRIES, api_key_auth=API_KEY)
        with pytest.raises(errors.SDKError) as raised:
            sdk.jobs.list_jobs(request={})
    assert raised.value.status_code == 401


def test_the_spec_dialect_does_not_serve_the_platforms_own_operations() -> None:
    with running_emulator(token=TOKEN, api_key=API_KEY, dialect="spec") as emulator:
        world = build_world(emulator)
        codes = {}
        for name in PLATFORM_ONLY:
            with pytest.raises(errors.SDKError) as raised:
                OPERATIONS[name](world)
            codes[name] = raised.value.status_code
    assert codes == {"create_job": 405, "list_templates": 404, "get_template": 404}


def _follow(
    read: Callable[[], Any], emulator: EmulatorHandle, *, step: float, done: Callable[[Any], bool]
) -> list[Any]:
    """Distinct values of ``read()`` while advancing the emulator clock by ``step``, until ``done``."""
    seen = [read()]
    for _ in range(100):
        if done(seen[-1]):
            return seen
        emulator.advance_clock(step)
        value = read()
        if value != seen[-1]:
            seen.append(value)
    raise AssertionError(f"never finished: {seen}")


def _run_files(world: World, files: list[tuple[str, bytes]]) -> str:
    body = {
        "input_files": [
            {"file_name": name, "content": data, "content_type": "text/plain"} for name, data in files
        ]
    }
    response = world.call(
        world.sdk.workflows.run_workflow, workflow_id=world.workflow_id, body_run_workflow=body
    )
    assert response.status_code == 202
    job = response.job_information
    assert job.status == shared.JobStatus.SCHEDULED
    assert job.job_type == shared.WorkflowJobType.EPHEMERAL
    assert job.input_file_ids == [name for name, _ in files]
    return str(job.id)


@pytest.mark.parametrize(
    ("files", "final_details"),
    [
        ([("a.txt", b"First file."), ("b.txt", b"Second file.")], shared.JobProcessingStatus.SUCCESS),
        ([("a.txt", b"Good file."), ("empty.txt", b"")], shared.JobProcessingStatus.COMPLETED_WITH_ERRORS),
    ],
    ids=["all-files-succeed", "one-file-fails"],
)
def test_a_job_followed_through_the_sdk(
    platform_emulator: EmulatorHandle, files: list[tuple[str, bytes]], final_details: Any
) -> None:
    world = build_world(platform_emulator)
    platform_emulator.configure(processing_delay=1)
    job_id = _run_files(world, files)

    def status() -> Any:
        return world.call(world.sdk.jobs.get_job, job_id=job_id).job_information.status

    def details() -> Any:
        return world.call(world.sdk.jobs.get_job_details, job_id=job_id).job_details.processing_status

    statuses = _follow(status, platform_emulator, step=0.5, done=lambda s: s == shared.JobStatus.COMPLETED)
    assert statuses == [shared.JobStatus.SCHEDULED, shared.JobStatus.IN_PROGRESS, shared.JobStatus.COMPLETED]
    assert details() == final_details

    job = world.call(world.sdk.jobs.get_job, job_id=job_id).job_information
    good = [name for name, data in files if data]
    assert len(job.output_node_files) == len(good)
    last = job.output_node_files[-1]
    assert last.node_type == "embed"
    assert last.node_subtype
    output = world.call(world.sdk.jobs.download_job_output, job_id=job_id, file_id=last.file_id)
    assert output.any[0]["metadata"]["filename"] == good[-1]  # no node_id: the last node's output


def test_a_job_details_pass_through_scheduled_and_in_progress(platform_emulator: EmulatorHandle) -> None:
    world = build_world(platform_emulator)
    platform_emulator.configure(processing_delay=1)
    job_id = _run_files(world, [("a.txt", b"Some text.")])

    def details() -> Any:
        return world.call(world.sdk.jobs.get_job_details, job_id=job_id).job_details.processing_status

    seen = _follow(
        details, platform_emulator, step=0.5, done=lambda s: s == shared.JobProcessingStatus.SUCCESS
    )
    assert seen == [
        shared.JobProcessingStatus.SCHEDULED,
        shared.JobProcessingStatus.IN_PROGRESS,
        shared.JobProcessingStatus.SUCCESS,
    ]


def _on_demand(world: World, request_data: dict[str, Any], files: list[tuple[str, bytes]]) -> Any:
    body: dict[str, Any] = {"request_data": json.dumps(request_data)}
    if files:
        body["input_files"] = [
            {"file_name": name, "content": data, "content_type": "text/plain"} for name, data in files
        ]
    response = world.call(world.sdk.jobs.create_job, body_create_job=body)
    assert response.status_code == 200
    return response.job_information


def test_an_on_demand_job_followed_through_the_sdk(platform_emulator: EmulatorHandle) -> None:
    world = build_world(platform_emulator)
    platform_emulator.configure(processing_delay=1)
    files = [("a.txt", b"Good file."), ("empty.txt", b"")]
    job = _on_demand(world, {"template_id": "hi_res_and_enrichment"}, files)
    assert (job.status, job.job_type) == (shared.JobStatus.SCHEDULED, shared.WorkflowJobType.TEMPLATE)
    assert job.input_file_ids == ["a.txt", "empty.txt"]
    job_id = str(job.id)

    def status() -> Any:
        return world.call(world.sdk.jobs.get_job, job_id=job_id).job_information.status

    statuses = _follow(status, platform_emulator, step=0.5, done=lambda s: s == shared.JobStatus.COMPLETED)
    assert statuses == [shared.JobStatus.SCHEDULED, shared.JobStatus.IN_PROGRESS, shared.JobStatus.COMPLETED]
    details = world.call(world.sdk.jobs.get_job_details, job_id=job_id).job_details
    assert details.processing_status == shared.JobProcessingStatus.COMPLETED_WITH_ERRORS
    assert len(details.node_stats) == 3
    failed = world.call(world.sdk.jobs.get_job_failed_files, job_id=job_id).job_failed_files.failed_files
    assert [f.document for f in failed] == ["empty.txt"]
    (output,) = world.call(world.sdk.jobs.get_job, job_id=job_id).job_information.output_node_files
    assert (output.node_type, output.node_subtype) == ("prompter", "openai_table_description")
    for file_id in (output.file_id, "a.txt"):  # the output's id, or the input_file_ids value (docs' way)
        downloaded = world.call(world.sdk.jobs.download_job_output, job_id=job_id, file_id=file_id)
        assert downloaded.any[0]["metadata"]["filename"] == "a.txt"


def test_a_custom_dag_job_through_the_sdk_and_its_limits(platform_emulator: EmulatorHandle) -> None:
    world = build_world(platform_emulator)
    platform_emulator.configure(on_demand_launch_interval=3600)
    nodes = [{"name": "Partitioner", "type": "partition", "subtype": "unstructured_api"}]
    job = _on_demand(world, {"job_nodes": nodes}, [("a.txt", b"Text.")])
    assert job.job_type == shared.WorkflowJobType.EPHEMERAL
    with pytest.raises(errors.SDKError) as too_soon:
        _on_demand(world, {"job_nodes": nodes}, [("b.txt", b"Text.")])
    assert too_soon.value.status_code == 429
    assert int(too_soon.value.headers["retry-after"]) > 0
    platform_emulator.configure(quota_exhausted=True)
    platform_emulator.advance_clock(3600)
    with pytest.raises(errors.SDKError) as no_quota:
        _on_demand(world, {"job_nodes": nodes}, [("b.txt", b"Text.")])
    assert (no_quota.value.status_code, json.loads(no_quota.value.body)) == (
        402,
        {"detail": "Insufficient API quota"},
    )
    with pytest.raises(errors.HTTPValidationError):
        _on_demand(world, {"template_id": "not-a-template"}, [])


def test_a_connection_check_followed_through_the_sdk(platform_emulator: EmulatorHandle) -> None:
    world = build_world(platform_emulator)
    started = world.call(world.sdk.sources.create_connection_check_sources, source_id=world.source_id)
    assert started.status_code == 202
    check = started.dag_node_connection_check
    assert check.status == shared.ConnectionCheckStatus.SCHEDULED
    assert check.reported_at is None

    def status() -> Any:
        response = world.call(world.sdk.sources.get_connection_check_sources, source_id=world.source_id)
        return response.dag_node_connection_check.status

    seen = _follow(
        status, platform_emulator, step=0.1, done=lambda s: s != shared.ConnectionCheckStatus.SCHEDULED
    )
    assert seen == [shared.ConnectionCheckStatus.SCHEDULED, shared.ConnectionCheckStatus.SUCCESS]
