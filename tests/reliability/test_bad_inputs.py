"""Item 5: bad inputs and bad answers, one table.

Each case builds a task (or a connection) the way a DAG author might get it wrong, or makes the
service answer badly, and runs it. Every case must fail with one of the provider's exceptions (an
``AirflowException``, never a bare traceback from a library) whose message names the field or the
resource at fault. Cases the client can refuse on its own (``client_side``) must not send a single
request: the emulator's request log stays empty.

Cases marked ``mocked`` need answers the emulator never gives (403, a non-JSON or truncated body, a
status nobody knows): they run against respx and check its call list instead.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators import connectors as conn_ops, workflows as wf_ops
from airflow_provider_workflowsvc.operators.jobs import (
    CancelJobOperator,
    DownloadJobOutputOperator,
    RunWorkflowOperator,
)
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

from ._helpers import task_context, use_connection

UNKNOWN_ID = "5f0c3a52-8d4e-4b7a-9a31-0c2f7e6d1b90"


@dataclass
class World:
    """What a case can use: the emulator, a local and a remote-source workflow, files, respx."""

    emulator: Any
    tmp: Path
    local_workflow: str = ""
    remote_workflow: str = ""
    source_id: str = ""
    router: Any = None
    monkeypatch: pytest.MonkeyPatch | None = None

    def file(self, name: str, text: str = "some text") -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)


@dataclass
class Case:
    id: str
    run: Callable[[World], Any]
    match: str
    """A regex the error message must contain: it names the field or the resource."""
    client_side: bool = True
    mocked: bool = False


def execute(task: Any, params: dict[str, Any] | None = None) -> Any:
    """Render the task's templates (with ``params``), then run it with a minimal context."""
    context = task_context()
    if params is not None:
        task.render_template_fields({**context, "params": params})
    return task.execute(context)


def run_op(workflow_id: str, **kwargs: Any) -> Any:
    return RunWorkflowOperator(task_id="run", workflow_id=workflow_id, **{"poll_interval": 0.05, **kwargs})


def create_source(connector_type: str = "confluence", config: Any = None, **kwargs: Any) -> Any:
    return conn_ops.CreateSourceConnectorOperator(
        task_id="create", connector_type=connector_type, config=config or {}, **{"name": "wiki", **kwargs}
    )


def create_workflow(**kwargs: Any) -> Any:
    return wf_ops.CreateWorkflowOperator(task_id="wf", **{"name": "wf", "workflow_type": "basic", **kwargs})


def hook_with(world: World, **conn: Any) -> Any:
    """A call through a hook whose Airflow connection is ``conn`` (AIRFLOW_CONN_... JSON)."""
    assert world.monkeypatch is not None
    world.monkeypatch.setenv("AIRFLOW_CONN_BROKEN", json.dumps({"conn_type": "workflowsvc", **conn}))
    with WorkflowServiceHook("broken") as hook:
        return hook.list_jobs()


def unreadable(world: World) -> str:
    path = world.file("secret.txt")
    os.chmod(path, 0)
    if os.access(path, os.R_OK):  # root reads anything: pretend, as for another user
        assert world.monkeypatch is not None
        real = os.access
        world.monkeypatch.setattr(os, "access", lambda p, mode, **kw: str(p) != path and real(p, mode, **kw))
    return path


def fifo(world: World) -> str:
    path = world.tmp / "pipe"
    os.mkfifo(path)
    return str(path)


def not_utf8_name(world: World) -> str:
    raw = os.fsencode(world.tmp) + b"/caf\xe9.txt"  # Latin-1, as an old archive may name files
    with open(raw, "wb") as fh:
        fh.write(b"text")
    return os.fsdecode(raw)


def broken_link(world: World) -> str:
    link = world.tmp / "dangling.txt"
    link.symlink_to(world.tmp / "gone.txt")
    return str(link)


def empty_dir(world: World) -> str:
    (world.tmp / "nothing" / ".hidden").mkdir(parents=True)
    (world.tmp / "nothing" / ".hidden" / "x.txt").write_text("hidden files do not count")
    return str(world.tmp / "nothing")


def wrong_token(world: World) -> Any:
    assert world.monkeypatch is not None
    use_connection(world.monkeypatch, world.emulator, max_retries=0)
    conn = json.loads(os.environ["AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"])
    if world.emulator.dialect == "platform":  # the live service takes the API key alone: make it wrong too
        conn["extra"]["api_key"] = "not-the-key"
    world.monkeypatch.setenv(
        "AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps({**conn, "password": "not-the-token"})
    )
    return execute(run_op(world.local_workflow, files=world.file("a.txt")))


def wrong_api_key(world: World) -> Any:
    assert world.monkeypatch is not None
    use_connection(world.monkeypatch, world.emulator)
    conn = json.loads(os.environ["AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"])
    conn["extra"]["api_key"] = "not-the-key"
    world.monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))
    return execute(CancelJobOperator(task_id="cancel", job_id=UNKNOWN_ID))


def connector_in_use(world: World) -> Any:
    task = conn_ops.DeleteSourceConnectorOperator(task_id="delete", connector_id=world.source_id)
    return execute(task)


def rename_to_taken_name(world: World) -> Any:
    task = wf_ops.UpdateWorkflowOperator(task_id="update", workflow_id=world.local_workflow, name="remote")
    return execute(task)


def never_finishes(world: World) -> Any:
    world.emulator.configure(processing_delay=1000)
    return execute(run_op(world.local_workflow, files=world.file("a.txt"), timeout=0.5))


def mocked(router: Any, path: str, response: httpx.Response, method: str = "GET") -> None:
    """Answer ``method path`` (a full path, ``/api/v1/...``) with ``response``."""
    router.route(method=method, path=path.removeprefix("/api/v1")).mock(return_value=response)


def answer_403(world: World) -> Any:
    mocked(world.router, "/api/v1/jobs/j1", httpx.Response(403, json={"detail": "workspace not allowed"}))
    return execute(CancelJobOperator(task_id="cancel", job_id="j1"))


def answer_not_json(world: World) -> Any:
    body = b"<html><body>Gateway login</body></html>"
    mocked(
        world.router,
        "/api/v1/jobs/j1",
        httpx.Response(200, content=body, headers={"content-type": "text/html"}),
    )
    return execute(CancelJobOperator(task_id="cancel", job_id="j1"))


def answer_truncated(world: World) -> Any:
    mocked(world.router, "/api/v1/jobs/", httpx.Response(200, content=b'[{"id": "j1", "status": "comp'))
    return execute(run_op(UNKNOWN_ID))


def answer_wrong_shape(world: World) -> Any:
    mocked(world.router, "/api/v1/jobs/j1", httpx.Response(200, json=[{"id": "j1"}]))
    return execute(CancelJobOperator(task_id="cancel", job_id="j1"))


def answer_500_on_create(world: World) -> Any:
    mocked(world.router, "/api/v1/sources/", httpx.Response(200, json=[]))
    mocked(world.router, "/api/v1/sources/", httpx.Response(500, json={"detail": "boom"}), "POST")
    config = {"url": "https://wiki.example", "token": "tok-3e5d9", "cloud": False}
    return execute(create_source(config=config))


def unknown_status(world: World) -> Any:
    job = {"id": "j1", "status": "exploded", "workflow_id": UNKNOWN_ID, "output_node_files": []}
    mocked(world.router, "/api/v1/jobs/", httpx.Response(200, json=[]))
    mocked(world.router, f"/api/v1/workflows/{UNKNOWN_ID}/run", httpx.Response(200, json=job), "POST")
    details = {"id": "j1", "processing_status": "EXPLODED", "message": "", "node_stats": []}
    mocked(world.router, "/api/v1/jobs/j1/details", httpx.Response(200, json=details))
    mocked(world.router, "/api/v1/jobs/j1", httpx.Response(200, json=job))
    mocked(world.router, "/api/v1/jobs/j1/cancel", httpx.Response(200, json={}), "POST")
    return execute(run_op(UNKNOWN_ID, timeout=0.4, poll_interval=0.1))


CONFLUENCE = {"url": "https://wiki.example.com"}

CASES = [
    # -- ids -------------------------------------------------------------------------------------
    Case(
        "run-workflow-id-not-uuid", lambda w: run_op("wf-1234"), r"workflow_id must be a UUID, got 'wf-1234'"
    ),
    Case(
        "run-workflow-id-template-renders-empty",
        lambda w: execute(run_op("{{ params.wf }}", files=w.file("a.txt")), {"wf": ""}),
        r"workflow_id must be a UUID, got ''",
    ),
    Case(
        "update-source-id-not-uuid",
        lambda w: conn_ops.UpdateSourceConnectorOperator(task_id="u", connector_id="src-1", config={}),
        r"connector_id must be a UUID, got 'src-1'",
    ),
    Case(
        "delete-destination-id-not-uuid",
        lambda w: conn_ops.DeleteDestinationConnectorOperator(task_id="d", connector_id="12345"),
        r"connector_id must be a UUID",
    ),
    Case(
        "workflow-source-id-not-uuid",
        lambda w: create_workflow(source_id="my-source"),
        r"source_id must be a UUID, got 'my-source'",
    ),
    Case(
        "sensor-job-id-with-slash",
        lambda w: WorkflowJobSensor(task_id="s", job_id="../jobs", poke_interval=0.1).poke(task_context()),
        r"job_id must be a non-empty job id, got '\.\./jobs'",
    ),
    Case(
        "cancel-job-id-empty",
        lambda w: execute(CancelJobOperator(task_id="c", job_id="  ")),
        r"job_id is empty",
    ),
    # -- connector types and configs -----------------------------------------------------------------
    # (a type the provider does not know is sent with a warning: tests/test_live_vocabulary.py)
    Case(
        "empty-source-type", lambda w: create_source("  ", {}), r"source connector type must be a non-empty"
    ),
    Case(
        "destination-type-not-text",
        lambda w: conn_ops.CreateDestinationConnectorOperator(
            task_id="c", name="d", connector_type=["pinecone"], config={}
        ),
        r"destination connector type must be a non-empty string",
    ),
    Case(
        "s3-config-without-remote-url",
        lambda w: create_source("s3", {"bucket": "docs", "anonymous": True}),
        r"'s3': missing required setting 'remote_url'",
    ),
    Case(
        "s3-remote-url-not-a-url",
        lambda w: create_source("s3", {"remote_url": "docs-bucket", "anonymous": True}),
        r"'s3': setting 'remote_url' must be a URL",
    ),
    Case(
        "confluence-no-auth",
        lambda w: execute(create_source(config=CONFLUENCE)),
        r"config.*(username|token|password)",
    ),
    Case(
        "confluence-mixed-auth",
        lambda w: execute(
            create_source(config={**CONFLUENCE, "username": "u", "token": "t1x", "password": "p2y"})
        ),
        r"config: confluence config mixes authentication variants",
    ),
    Case(
        "confluence-pat-with-cloud",
        lambda w: execute(create_source(config={**CONFLUENCE, "token": "t1x", "cloud": True})),
        r"config.*cloud",
    ),
    Case(
        "azure-config-typo",
        lambda w: execute(create_source("azure", {"remote_url": "az://c", "acount_key": "k"})),
        r"config\.acount_key",
    ),
    Case(
        "astradb-config-wrong-type",
        lambda w: execute(
            conn_ops.CreateDestinationConnectorOperator(
                task_id="c",
                name="d",
                connector_type="astradb",
                config={"batch_size": "many", "token": "t", "api_endpoint": "https://a.example.com"},
            )
        ),
        r"config\.batch_size",
    ),
    Case(
        "connector-name-empty",
        lambda w: create_source(config=CONFLUENCE, name=" "),
        r"name must not be empty",
    ),
    Case(
        "check-poll-interval-negative",
        lambda w: conn_ops.SourceConnectionCheckOperator(
            task_id="c", connector_id=UNKNOWN_ID, poll_interval=-1
        ),
        r"poll_interval",
    ),
    # -- workflows -------------------------------------------------------------------------------
    Case(
        "bad-schedule",
        lambda w: create_workflow(schedule="every 3 hours"),
        r"unknown schedule 'every 3 hours'",
    ),
    Case(
        "bad-schedule-from-template",
        lambda w: execute(create_workflow(schedule="{{ params.s }}"), {"s": "hourly-ish"}),
        r"schedule",
    ),
    Case(
        "unknown-workflow-type",
        lambda w: create_workflow(workflow_type="premium"),
        r"unknown workflow_type 'premium'",
    ),
    Case("custom-without-nodes", lambda w: create_workflow(workflow_type="custom"), r"workflow_nodes"),
    Case(
        "duplicate-node-names",
        lambda w: create_workflow(
            workflow_type="custom",
            workflow_nodes=[{"name": "p", "type": "partition", "subtype": "fast"}] * 2,
        ),
        r"workflow_nodes: node names must be unique, repeated: p",
    ),
    Case(
        "workflow-name-template-renders-empty",
        lambda w: execute(create_workflow(name="{{ params.name }}"), {"name": ""}),
        r"name",
    ),
    Case(
        "update-workflow-nothing-to-change",
        lambda w: wf_ops.UpdateWorkflowOperator(task_id="u", workflow_id=UNKNOWN_ID),
        r"at least one setting",
    ),
    # -- files -----------------------------------------------------------------------------------
    Case(
        "missing-file",
        lambda w: execute(run_op(w.local_workflow, files=str(w.tmp / "nope.pdf"))),
        r"files: '.*nope\.pdf' does not exist",
    ),
    Case(
        "unreadable-file",
        lambda w: execute(run_op(w.local_workflow, files=unreadable(w))),
        r"files: '.*secret\.txt' is not readable",
    ),
    Case(
        "not-a-regular-file",
        lambda w: execute(run_op(w.local_workflow, files=fifo(w))),
        r"files: '.*pipe' is not a regular file",
    ),
    Case(
        "file-name-not-utf8",
        lambda w: execute(run_op(w.local_workflow, files=not_utf8_name(w))),
        r"input file '.*caf\\xe9\.txt': its name is not valid UTF-8",
    ),
    Case(
        "file-broken-symlink",
        lambda w: execute(run_op(w.local_workflow, files=broken_link(w))),
        r"files: '.*dangling\.txt' is a broken symbolic link",
    ),
    Case(
        "empty-file-list", lambda w: execute(run_op(w.local_workflow, files=[])), r"files rendered to nothing"
    ),
    Case(
        "directory-without-files",
        lambda w: execute(run_op(w.local_workflow, files=empty_dir(w))),
        r"files: the directory '.*nothing' contains no files",
    ),
    Case(
        "glob-without-matches",
        lambda w: execute(run_op(w.local_workflow, files=str(w.tmp / "*.pdf"))),
        r"files: the pattern '.*\*\.pdf' matches no files",
    ),
    Case(
        "files-template-renders-empty",
        lambda w: execute(run_op(w.local_workflow, files="{{ params.files }}"), {"files": ""}),
        r"files rendered to nothing",
    ),
    Case(
        "download-into-a-file",
        lambda w: execute(DownloadJobOutputOperator(task_id="d", job_id=UNKNOWN_ID, output_dir=w.file("f"))),
        r"output_dir '.*f' exists and is not a directory",
    ),
    # -- waiting -----------------------------------------------------------------------------------
    Case(
        "poll-interval-zero",
        lambda w: run_op(UNKNOWN_ID, poll_interval=0),
        r"poll_interval must be a positive number of seconds, at least",
    ),
    Case("timeout-negative", lambda w: run_op(UNKNOWN_ID, timeout=-5), r"timeout must be positive"),
    Case(
        "sensor-job-and-workflow",
        lambda w: WorkflowJobSensor(task_id="s", job_id="j", workflow_id=UNKNOWN_ID),
        r"exactly one of job_id and workflow_id",
    ),
    Case(
        "sensor-created-after-not-a-date",
        lambda w: WorkflowJobSensor(task_id="s", workflow_id=UNKNOWN_ID, created_after="yesterday").poke(
            task_context()
        ),
        r"created_after must be an ISO-8601 date-time, got 'yesterday'",
    ),
    # -- the connection ------------------------------------------------------------------------------
    Case(
        "connection-host-empty",
        lambda w: hook_with(w, host=""),
        r"connection 'broken' is misconfigured: host",
    ),
    Case(
        "connection-url-with-credentials",
        lambda w: hook_with(w, host="https://user:pw@svc.test/api/v1"),
        r"connection 'broken' is misconfigured: base_url: .*credentials",
    ),
    Case(
        "connection-ca-bundle-missing",
        lambda w: hook_with(w, host="https://svc.test/api/v1", extra={"verify": "/no/such/ca.pem"}),
        r"connection 'broken' is misconfigured: verify",
    ),
    Case(
        "connection-token-with-line-feed",
        lambda w: hook_with(w, host=w.emulator.base_url, password="tok-8c1e\nX-Injected: yes"),
        r"connection 'broken' is misconfigured: token: the connection's password \(token\) contains a "
        r"line feed \(LF\)",
    ),
    Case(
        "connection-token-with-carriage-return",
        lambda w: hook_with(w, host=w.emulator.base_url, password="tok-8c1e\r\nX: y"),
        r"password \(token\) contains a carriage return \(CR\)",
    ),
    Case(
        "connection-api-key-with-nul",
        lambda w: hook_with(w, host=w.emulator.base_url, extra={"api_key": "key-51f0\x00tail"}),
        r"api_key: the connection's api_key contains a NUL character",
    ),
    Case(
        "connection-response-cap-too-small",
        lambda w: hook_with(w, host=w.emulator.base_url, extra={"max_response_bytes": 100}),
        r"max_response_bytes: .*1024",
    ),
    # -- the server refuses ------------------------------------------------------------------------
    Case(
        "401-wrong-token",
        wrong_token,
        r"GET /api/v1/workflows/\S+ → 401 .*(bearer token|unstructured-api-key)",
        client_side=False,
    ),
    Case(
        "401-wrong-api-key",
        wrong_api_key,
        r"/api/v1/jobs/.* → 401 .*(service-api-key|unstructured-api-key)",
        client_side=False,
    ),
    Case("403-forbidden", answer_403, r"GET /api/v1/jobs/j1 → 403 .*workspace not allowed", False, True),
    Case(
        "404-unknown-job",
        lambda w: execute(CancelJobOperator(task_id="c", job_id=UNKNOWN_ID)),
        rf"GET /api/v1/jobs/{UNKNOWN_ID} → 404",
        client_side=False,
    ),
    Case(
        "404-unknown-workflow",
        lambda w: execute(run_op(UNKNOWN_ID, files=w.file("a.txt"))),
        rf"GET /api/v1/workflows/{UNKNOWN_ID} → 404",  # read before any upload
        client_side=False,
    ),
    Case(
        "404-delete-missing-connector",
        lambda w: execute(
            conn_ops.DeleteSourceConnectorOperator(task_id="d", connector_id=UNKNOWN_ID, missing_ok=False)
        ),
        rf"GET /api/v1/sources/{UNKNOWN_ID} → 404",  # missing_ok=False reads it before deleting
        client_side=False,
    ),
    Case("409-connector-in-use", connector_in_use, r"DELETE /api/v1/sources/.* → 409", client_side=False),
    Case(
        "409-workflow-name-taken", rename_to_taken_name, r"PUT /api/v1/workflows/.* → 409", client_side=False
    ),
    Case(
        "422-local-workflow-without-files",
        lambda w: execute(run_op(w.local_workflow)),
        r"workflow 'local' .* has no source connector .*give files=",  # the 422 explained
        client_side=False,
    ),
    Case(
        "remote-workflow-with-files-before-upload",
        lambda w: execute(run_op(w.remote_workflow, files=w.file("a.txt"))),
        r"local files cannot be run on workflow 'remote' .*source connector 'wiki' .*source_id=None",
        client_side=False,
    ),
    Case("500-on-create", answer_500_on_create, r"POST /api/v1/sources/ → 500 .*boom", False, True),
    # -- the server answers badly -------------------------------------------------------------------
    Case("body-not-json", answer_not_json, r"GET /api/v1/jobs/j1 returned 200 .*not JSON", False, True),
    Case("body-truncated", answer_truncated, r"GET /api/v1/jobs/ returned 200 .*not JSON", False, True),
    Case(
        "body-wrong-shape",
        answer_wrong_shape,
        r"GET /api/v1/jobs/j1 returned 200 with an unexpected body",
        False,
        True,
    ),
    Case(
        "unknown-job-status",
        unknown_status,
        r"job j1 did not finish in time.*last status exploded",
        False,
        True,
    ),
    Case(
        "never-finishes",
        never_finishes,
        r"did not finish in time: .*last status scheduled",
        client_side=False,
    ),
]


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Any]:
    return {}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    emulator_server: Any,  # named so each case runs on both dialects (mocked ones too: they are cheap)
) -> None:
    world = World(emulator=None, tmp=tmp_path, monkeypatch=monkeypatch)
    if case.mocked:
        world.router = request.getfixturevalue("mock_service")
    else:
        world.emulator = request.getfixturevalue("workflowsvc_conn")
        _prepare(world)
        world.emulator.clear_requests()
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        case.run(world)
    error = caught.value
    message = str(error)
    assert isinstance(error, AirflowException), f"{type(error).__module__}.{type(error).__name__}: {message}"
    assert type(error).__module__.startswith(("airflow_provider_workflowsvc", "airflow.")), type(error)
    assert re.search(case.match, message, re.S), message
    sent = list(world.router.calls) if case.mocked else world.emulator.requests()
    _record(case, error, len(sent), time.monotonic() - started)
    if case.client_side:
        assert not sent, f"the client could have refused this itself, but sent {sent}"


def _prepare(world: World) -> None:
    """A local-to-local workflow, a confluence source in use by a workflow named ``remote``."""
    emu = world.emulator
    with WorkflowServiceHook(settings=_settings(emu)) as hook:
        world.local_workflow = str(hook.create_workflow("local", "basic").id)
        config = {"url": "https://wiki.example.com", "token": "t-0a9f", "cloud": False}
        world.source_id = str(hook.create_source("wiki", "confluence", config).id)
        world.remote_workflow = str(hook.create_workflow("remote", "basic", source_id=world.source_id).id)


def _settings(emulator: Any) -> Any:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    return ConnectionSettings(base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key)


_TALLY: dict[str, Any] = {"cases": 0, "client_side": 0, "server_side": 0, "requests_sent_by_client_side": 0}


def _record(case: Case, error: BaseException, sent: int, seconds: float) -> None:
    """Add the case to the figures shown at the end of the run (one entry for the whole table)."""
    from .conftest import FIGURES

    _TALLY["cases"] += 1
    _TALLY["client_side" if case.client_side else "server_side"] += 1
    if case.client_side:
        _TALLY["requests_sent_by_client_side"] += sent
    errors = _TALLY.setdefault("errors", {})
    errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1
    _TALLY["seconds"] = round(_TALLY.get("seconds", 0.0) + seconds, 1)
    FIGURES["test_bad_inputs.py::test_bad_input[*]"] = _TALLY
