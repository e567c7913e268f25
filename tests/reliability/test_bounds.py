"""Issue #12, bounds: connection checks end by their timeout, poll intervals have a floor, answers a cap.

The misbehaving servers here are real HTTP servers on loopback sockets (``http.server`` in a thread):
one that never answers, one that always answers 503 with a long ``Retry-After``, one whose body never
ends, one that declares a body of 10 GiB. The emulator cannot misbehave like that on purpose.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError, WorkflowServiceResponseError
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    DEFAULT_MAX_RESPONSE_BYTES,
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.operators import connectors as conn_ops
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

from ._helpers import Behaviour, LoopbackServer

CONNECTOR_ID = "5f0c3a52-8d4e-4b7a-9a31-0c2f7e6d1b90"
WORKFLOW_ID = "0b8f3c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b"
MIB = 1024 * 1024
NEVER = 3600
"""Seconds no answer comes in (a hung handler, a ``Retry-After``, the client's read timeout): far past
pytest-timeout's limit, so a test that waits for one fails there; ending at all, with its error, proves
what cut the wait."""


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], LoopbackServer]]:
    servers: list[LoopbackServer] = []

    def start(behaviour: Behaviour) -> LoopbackServer:
        servers.append(LoopbackServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def connect(monkeypatch: pytest.MonkeyPatch, server: LoopbackServer, **extra: Any) -> None:
    conn = {"conn_type": "workflowsvc", "host": server.url, "password": "bounds-token", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))


def never_answer(handler: Any) -> None:
    time.sleep(NEVER)  # the request was read; no answer comes (daemon thread, not waited for)


def unavailable(handler: Any) -> None:
    body = b'{"detail": "maintenance"}'
    handler.send_response(503)
    handler.send_header("retry-after", str(NEVER))
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.send(body)


def endless_json(handler: Any) -> None:
    """A JSON list that never ends, sent in 64 KiB chunks (chunked transfer encoding)."""
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()
    item = b'{"id": "job", "status": "RUNNING"}, '
    chunk = b"[" + item * (64 * 1024 // len(item))
    while True:
        handler.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        chunk = item * (64 * 1024 // len(item))


def declares_10_gib(handler: Any) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(10 * 1024 * MIB))
    handler.end_headers()
    handler.send(b"[")
    time.sleep(NEVER)  # the rest never comes: a client that waits for it hangs


def download_of(size: int) -> Behaviour:
    def behaviour(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(size))
        handler.end_headers()
        block = b" " * 65536
        left = size
        while left:
            handler.send(block[: min(left, len(block))])
            left -= min(left, len(block))

    return behaviour


# --------------------------------------------------------------------------------------------------
# Connection checks end by their timeout


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (never_answer, r"ConnectionCheckFailedError: .* gave no result within 2 s"),
        # A retry that could not start before the deadline is not waited for: the 503 is the answer.
        (unavailable, r"WorkflowServiceServerError: .* 503 Service Unavailable: maintenance"),
    ],
    ids=["never-answers", "always-503-retry-after-an-hour"],
)
@pytest.mark.parametrize("kind", ["source", "destination"])
def test_connection_check_ends_by_its_timeout(
    figures: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    serve: Callable[[Behaviour], LoopbackServer],
    behaviour: Behaviour,
    expected: str,
    kind: str,
) -> None:
    """``timeout=2`` used to take 27 s (and about 6 minutes with the defaults): each request waited its
    full read timeout and every retry its backoff. Now the deadline bounds them all: here the read
    timeout, the backoff and the ``Retry-After`` are an hour, so only the deadline can end the check."""
    server = serve(behaviour)
    connect(monkeypatch, server, timeout=NEVER, retry_wait=1, retry_max_wait=NEVER)
    cls = (
        conn_ops.SourceConnectionCheckOperator
        if kind == "source"
        else conn_ops.DestinationConnectionCheckOperator
    )
    task = cls(task_id="check", connector_id=CONNECTOR_ID, poll_interval=1, timeout=2)

    started = time.monotonic()
    with pytest.raises(AirflowException) as caught:
        task.execute({})
    elapsed = time.monotonic() - started

    assert re.search(expected, f"{type(caught.value).__name__}: {caught.value}"), caught.value
    assert server.requests, "the check never reached the server"
    figures.update(timeout_seconds=2, elapsed_seconds=round(elapsed, 2), requests=len(server.requests))


def test_connection_check_failure_before_its_timeout_is_reported_as_is(
    monkeypatch: pytest.MonkeyPatch, serve: Callable[[Behaviour], LoopbackServer]
) -> None:
    """Only the deadline turns a failed request into "no result": an earlier failure keeps its error."""

    def not_found(handler: Any) -> None:
        body = b'{"detail": "Source not found"}'
        handler.send_response(404)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.send(body)

    connect(monkeypatch, serve(not_found))
    task = conn_ops.SourceConnectionCheckOperator(task_id="c", connector_id=CONNECTOR_ID, timeout=30)
    with pytest.raises(Exception, match="404") as caught:
        task.execute({})
    assert not isinstance(caught.value, conn_ops.ConnectionCheckFailedError)


# --------------------------------------------------------------------------------------------------
# Poll and poke intervals have a floor


def refused_intervals() -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("run-0", lambda: RunWorkflowOperator(task_id="r", workflow_id=WORKFLOW_ID, poll_interval=0)),
        ("run-0.5", lambda: RunWorkflowOperator(task_id="r", workflow_id=WORKFLOW_ID, poll_interval=0.5)),
        (
            "run-200ms",
            lambda: RunWorkflowOperator(
                task_id="r", workflow_id=WORKFLOW_ID, poll_interval=timedelta(milliseconds=200)
            ),
        ),
        ("sensor-0", lambda: WorkflowJobSensor(task_id="s", job_id="j", poke_interval=0)),
        ("sensor-0.5", lambda: WorkflowJobSensor(task_id="s", job_id="j", poke_interval=0.5)),
        (
            "check-0.2",
            lambda: conn_ops.SourceConnectionCheckOperator(
                task_id="c", connector_id=CONNECTOR_ID, poll_interval=0.2
            ),
        ),
        (
            "trigger-0.1",
            lambda: WorkflowJobTrigger(job_id="j", deadline=time.time() + 60, poll_interval=0.1),
        ),
    ]


@pytest.mark.parametrize(("case", "build"), refused_intervals(), ids=[c for c, _ in refused_intervals()])
def test_intervals_under_the_floor_are_refused_when_the_dag_is_parsed(
    monkeypatch: pytest.MonkeyPatch, case: str, build: Callable[[], Any]
) -> None:
    monkeypatch.delenv("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL")  # the deployed default: 1 s
    with pytest.raises(
        WorkflowServiceInputError,
        match=r"_interval must be a positive number of seconds, at least 1 s .*min_poll_interval",
    ):
        build()


def test_the_floor_is_a_deployment_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL")
    assert RunWorkflowOperator(task_id="r", workflow_id=WORKFLOW_ID, poll_interval=1).poll_interval == 1
    assert WorkflowJobSensor(task_id="s", job_id="j", poke_interval=timedelta(seconds=1)).poke_interval == 1
    monkeypatch.setenv("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL", "10")
    with pytest.raises(WorkflowServiceInputError, match="at least 10 s"):
        RunWorkflowOperator(task_id="r", workflow_id=WORKFLOW_ID, poll_interval=5)
    monkeypatch.setenv("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL", "0.2")
    assert WorkflowJobSensor(task_id="s", job_id="j", poke_interval=0.5).poke_interval == 0.5


def test_the_floor_is_checked_without_importing_the_hook_or_models(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor\n"
        "try:\n"
        "    WorkflowJobSensor(task_id='s', job_id='j', poke_interval=0)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
        # the hooks package itself holds only constants (DEFAULT_CONN_ID); its modules hold the hook
        "print(sorted(m for m in sys.modules if m.startswith('airflow_provider_workflowsvc.'"
        " ) and m.split('.')[1] in ('hooks', 'models') and m != 'airflow_provider_workflowsvc.hooks'))\n"
    )
    env = {**__import__("os").environ, "AIRFLOW_HOME": str(tmp_path)}
    env.pop("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.splitlines()[-2:] == ["WorkflowServiceInputError", "[]"], out.stdout + out.stderr


# --------------------------------------------------------------------------------------------------
# Answers have a size cap


def test_the_cap_is_a_connection_extra_with_a_generous_default(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "workflowsvc", "host": "https://svc.test/api/v1", "password": "x" * 8}
    monkeypatch.setenv("AIRFLOW_CONN_CAPPED", json.dumps({**conn, "extra": {"max_response_bytes": "2048"}}))
    monkeypatch.setenv("AIRFLOW_CONN_PLAIN", json.dumps(conn))
    assert WorkflowServiceHook("capped").settings.max_response_bytes == 2048
    assert WorkflowServiceHook("plain").settings.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES >= 64 * MIB
    monkeypatch.setenv("AIRFLOW_CONN_TINY", json.dumps({**conn, "extra": {"max_response_bytes": 10}}))
    with pytest.raises(WorkflowServiceInputError, match="max_response_bytes"):
        WorkflowServiceHook("tiny").settings  # noqa: B018


def test_an_endless_answer_is_cut_at_the_cap(
    figures: dict[str, Any], serve: Callable[[Behaviour], LoopbackServer]
) -> None:
    """A 512 MiB answer added 1.5 GiB of memory: the body was read whole before anything looked at it.
    Now it is read chunk by chunk and reading stops at the cap, so even a body that never ends fails."""
    server = serve(endless_json)
    settings = ConnectionSettings(base_url=server.url, token="bounds-token", max_response_bytes=MIB)
    tracemalloc.start()
    try:
        with (
            WorkflowServiceHook(settings=settings) as hook,
            pytest.raises(WorkflowServiceResponseError) as caught,
        ):
            hook.list_jobs()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "max_response_bytes" in str(caught.value)
    assert "GET /api/v1/jobs/" in str(caught.value)
    assert peak < 4 * MIB, f"reading a capped answer used {peak / MIB:.1f} MiB"
    assert server.requests == ["GET /api/v1/jobs/"]  # not retried: the same answer would come again
    figures.update(
        cap_bytes=MIB, peak_memory_mib=round(peak / MIB, 2), server_sent_mib=round(server.sent / MIB, 1)
    )


def test_the_async_hook_cuts_an_endless_answer_too(serve: Callable[[Behaviour], LoopbackServer]) -> None:
    server = serve(endless_json)
    settings = ConnectionSettings(base_url=server.url, token="bounds-token", max_response_bytes=MIB)

    async def call() -> None:
        async with WorkflowServiceAsyncHook(settings=settings) as hook:
            await hook.get_job_details("job")

    with pytest.raises(WorkflowServiceResponseError, match="max_response_bytes"):
        asyncio.run(asyncio.wait_for(call(), timeout=10))


def test_a_declared_length_over_the_cap_fails_before_reading(
    serve: Callable[[Behaviour], LoopbackServer],
) -> None:
    server = serve(declares_10_gib)
    settings = ConnectionSettings(
        base_url=server.url, token="bounds-token", max_response_bytes=MIB, timeout=NEVER
    )
    with (
        WorkflowServiceHook(settings=settings) as hook,
        pytest.raises(
            WorkflowServiceResponseError, match=r"declares 10737418240 bytes, more than max_response_bytes"
        ),
    ):
        hook.get_job("job")  # it ends: the body (which never comes, nor a read timeout) was not waited for
    assert server.requests == ["GET /api/v1/jobs/job"]  # not retried: the same answer would come again


def test_downloads_to_a_file_stay_streamed_and_uncapped(
    tmp_path: Path, serve: Callable[[Behaviour], LoopbackServer]
) -> None:
    server = serve(download_of(3 * MIB))
    settings = ConnectionSettings(base_url=server.url, token="bounds-token", max_response_bytes=MIB)
    target = tmp_path / "out.json"
    with WorkflowServiceHook(settings=settings) as hook:
        assert hook.download_job_output("job", "file", "node", path=target) == target
        with pytest.raises(WorkflowServiceResponseError, match="max_response_bytes"):
            hook.download_job_output("job", "file", "node")  # parsed in memory: capped
    assert target.stat().st_size == 3 * MIB
