"""Item 8: every request has a connect and a read timeout, and no wait outlives its deadline.

* The HTTP clients of both hooks carry connect, read, write and pool timeouts, and the provider
  makes no HTTP client any other way.
* A black-holed port on 127.0.0.1 (a raw socket server started here): one that accepts the
  connection and never answers ends in a read timeout; one whose accept queue is full never
  completes the TCP handshake and ends in a connect timeout (a request that provably never left).
* A service that accepts status requests and never answers (the emulator's latency fault) cannot
  hold a sync wait or a trigger past its deadline by more than a small margin, with the connection's
  default timeouts (60 s read, 5 retries). Before the fix the sync wait was bounded only by
  60 s x 6 tries plus backoff, whatever the task's ``timeout``.
"""

from __future__ import annotations

import ast
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import airflow_provider_workflowsvc
from airflow_provider_workflowsvc.exceptions import WorkflowJobTimeoutError, WorkflowServiceConnectionError
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

from ._helpers import record_sent, task_context

# Timeouts and deadlines cut requests whatever their shapes: proven against the dialect real users meet.
pytestmark = [pytest.mark.timeout(120), pytest.mark.dialect("platform", reason="timeouts, not the wire")]
HANG = {"latency": 3600}  # accepts the request, never answers (until the faults change)
"""Nothing here answers, so what ends a request is the timeout it was sent with (recorded as httpx got it:
``record_sent``), and a wait that ends at all ended by them. The tests prove the timeouts cut, not the
seconds they took, which a busy 2-core machine stretches (3.7 s past a deadline seen at load 24): they
rule out a read left to its own timeout (60 s by default) and a hung request holding the wait until the
test's own 120 s limit. The seconds are kept as figures."""


async def test_every_client_has_connect_read_write_and_pool_timeouts() -> None:
    settings = ConnectionSettings(base_url="https://svc.test/api/v1", token="t")
    with WorkflowServiceHook(settings=settings) as hook:
        sync_timeout = hook.get_conn().timeout
    async with WorkflowServiceAsyncHook(settings=settings) as ahook:
        async_timeout = (await ahook.get_async_conn()).timeout
    for timeout in (sync_timeout, async_timeout):
        assert timeout.connect == 10.0
        assert timeout.read == timeout.write == timeout.pool == 60.0


def test_the_provider_makes_http_clients_only_from_the_connection_settings() -> None:
    """No ``httpx.Client(...)`` without the settings' timeouts, no module-level ``httpx.get(...)``."""
    package = Path(airflow_provider_workflowsvc.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if "emulator" in path.parts:
            continue  # the emulator is test tooling; its own clients have timeouts too
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "httpx":
                found.append((path.name, node.func.attr, ast.unparse(node)))
    clients = [f for f in found if f[1] in ("Client", "AsyncClient")]
    assert clients, clients
    assert all("httpx_options()" in call for _, _, call in clients), clients
    # URL parses; AsyncHTTPTransport is one connection of the shared pool (each request brings its
    # timeouts); PoolTimeout is the error of a request that found no free connection in time
    allowed = (
        "Client",
        "AsyncClient",
        "Timeout",
        "Limits",
        "create_ssl_context",
        "URL",
        "AsyncHTTPTransport",
        "PoolTimeout",
    )
    others = [f for f in found if f[1] not in allowed]
    assert not others, others


@pytest.fixture
def black_hole() -> Iterator[dict[str, int]]:
    """Two ports on 127.0.0.1: ``accepts`` completes the handshake and never answers; ``full`` has its
    accept queue filled, so a new connection never completes."""
    sockets = []
    try:
        accepts = socket.socket()
        accepts.bind(("127.0.0.1", 0))
        accepts.listen(16)
        full = socket.socket()
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        filler = socket.create_connection(full.getsockname(), timeout=2)  # the one queue slot
        sockets += [accepts, full, filler]
        yield {"accepts": accepts.getsockname()[1], "full": full.getsockname()[1]}
    finally:
        for sock in sockets:
            sock.close()


def hook_for(port: int, **options: Any) -> WorkflowServiceHook:
    settings = ConnectionSettings(
        base_url=f"http://127.0.0.1:{port}/api/v1", token="t", **{"retry_wait": 0.01, **options}
    )
    return WorkflowServiceHook(settings=settings)


def test_a_port_that_never_answers_ends_in_a_read_timeout(
    figures: dict[str, Any], black_hole: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_sent(monkeypatch)
    with hook_for(black_hole["accepts"], timeout=0.5, max_retries=1) as hook:
        started = time.monotonic()
        with pytest.raises(WorkflowServiceConnectionError, match="ReadTimeout") as caught:
            hook.get_job("j1")
        elapsed = time.monotonic() - started
    assert caught.value.sent  # it may have been processed: a run would not be re-sent
    assert [s.timeout["read"] for s in sent] == [0.5, 0.5]  # two tries, each ended by its 0.5 s read
    assert elapsed >= 1.0  # a busy machine only makes it later
    figures.update(read_timeout_seconds=0.5, tries=2, elapsed_seconds=round(elapsed, 2))


def test_a_port_that_never_completes_the_handshake_ends_in_a_connect_timeout(
    figures: dict[str, Any], black_hole: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = record_sent(monkeypatch)
    with hook_for(black_hole["full"], connect_timeout=0.5, max_retries=1) as hook:
        started = time.monotonic()
        with pytest.raises(WorkflowServiceConnectionError, match="ConnectTimeout") as caught:
            hook.get_job("j1")
        elapsed = time.monotonic() - started
    assert not caught.value.sent  # provably never left: even a run may be sent again
    assert [s.timeout["connect"] for s in sent] == [0.5, 0.5]  # two tries, each ended by its 0.5 s
    assert elapsed >= 1.0
    figures.update(connect_timeout_seconds=0.5, tries=2, elapsed_seconds=round(elapsed, 2))


def test_a_deadline_cuts_every_timeout_and_retry(
    black_hole: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside ``deadline()``, a request with a 60 s read timeout and 5 retries ends at the deadline:
    every try it sends has its timeouts cut to the time left, and none is sent once it passed."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import deadline

    sent = record_sent(monkeypatch)
    with hook_for(black_hole["accepts"]) as hook:
        with deadline(time.time() + 0.7), pytest.raises(WorkflowServiceConnectionError, match="ReadTimeout"):
            hook.get_job("j1")
        assert sent, "the request was sent"
        assert all(0 < t <= 0.7 for s in sent for t in s.timeout.values() if t is not None), sent
        tries = len(sent)
        with deadline(time.time() - 1), pytest.raises(WorkflowServiceConnectionError) as caught:
            hook.get_job("j1")  # past the deadline: not even sent
        assert not caught.value.sent
        assert len(sent) == tries
        assert "deadline" in str(caught.value)


@pytest.fixture
def workflow(settings: Any) -> str:
    with WorkflowServiceHook(settings=settings) as hook:
        return str(hook.create_workflow(f"hang-{time.time_ns()}", "basic").id)


@pytest.fixture
def input_file(tmp_path: Path) -> str:
    path = tmp_path / "doc.txt"
    path.write_text("text")
    return str(path)


@pytest.mark.parametrize("cancel_hangs", [False, True], ids=["status-hangs", "status-and-cancel-hang"])
def test_a_sync_wait_ends_at_its_deadline_when_the_service_hangs(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    settings: Any,
    workflow: str,
    input_file: str,
    monkeypatch: pytest.MonkeyPatch,
    cancel_hangs: bool,
) -> None:
    """Default connection timeouts (60 s read, 5 retries), a 2 s task timeout: the task ends ~2 s in,
    every status request cut to the time left. The cancel sent after the timeout gets its own budget
    (5 s; cut to 1 s here)."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)
    budget = 1.0
    monkeypatch.setattr("airflow_provider_workflowsvc.wait.poll.CANCEL_BUDGET", budget)
    timeout = 2.0
    task = RunWorkflowOperator(
        task_id="run",
        workflow_id=workflow,
        files=[input_file],
        poll_interval=0.5,
        timeout=timeout,
        deferrable=False,
    )
    rules = [{"method": "GET", "path": "/api/v1/jobs/*/details", **HANG}]
    if cancel_hangs:
        rules.append({"method": "POST", "path": "/api/v1/jobs/*/cancel", **HANG})
    emulator.set_faults(rules=rules)
    sent = record_sent(monkeypatch)
    started = time.monotonic()
    with pytest.raises(WorkflowJobTimeoutError, match="did not finish in time") as caught:
        task.execute(task_context())
    elapsed = time.monotonic() - started
    hung = [r for r in emulator.requests(path_contains="/details") if r["fault"]]
    unanswered = [r for r in emulator.requests(path_contains="/api/v1/jobs/") if r["status"] is None]
    emulator.clear_faults()
    overrun = elapsed - timeout
    assert hung, "no status request hung: the test did not test anything"
    assert unanswered, "a hung request was answered: what ended the wait is not known"
    # Each request of the wait had its timeouts cut to the 2 s deadline (the cancel's to its budget),
    # never left to the connection's 60 s: the hung ones can only have ended by them.
    polls = [s for s in sent if s.path.endswith("/details")]
    cancels = [s for s in sent if s.path.endswith("/cancel")]
    assert polls, sent
    assert cancels, sent
    assert all(t is not None and t <= timeout for s in polls for t in s.timeout.values()), polls
    assert all(t is not None and t <= budget for s in cancels for t in s.timeout.values()), cancels
    message = str(caught.value)
    if cancel_hangs:
        assert "cancelling it failed" in message
    else:
        assert "the job was cancelled" in message
    figures.update(
        task_timeout_seconds=timeout,
        connection_read_timeout_seconds=60,
        hung_requests=len(hung),
        ended_after_deadline_seconds=round(overrun, 2),
        cancel_budget_seconds=budget if cancel_hangs else None,
    )


async def test_a_trigger_ends_at_its_deadline_when_the_service_hangs(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    settings: Any,
    workflow: str,
    input_file: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)
    with WorkflowServiceHook(settings=settings) as hook:
        job = hook.run_workflow(workflow, files=[input_file])
    assert job is not None
    emulator.set_faults(method="GET", path="/api/v1/jobs/*/details", **HANG)
    sent = record_sent(monkeypatch)
    deadline = time.time() + 1.5
    trigger = WorkflowJobTrigger(job_id=job.id, deadline=deadline, poll_interval=0.3)
    event = await trigger.run().__anext__()
    late = time.time() - deadline
    hung = [r for r in emulator.requests(path_contains="/details") if r["status"] is None]
    emulator.clear_faults()
    assert event.payload["status"] == "timeout"
    assert hung, "no status request hung: the test did not test anything"
    polls = [s for s in sent if s.path.endswith("/details")]
    assert polls, sent
    # every poll was cut to the time left (the hung ones ended by it), none left to its 60 s
    assert all(t is not None and t <= 1.5 for s in polls for t in s.timeout.values()), polls
    figures.update(ended_after_deadline_seconds=round(late, 2))


def test_the_deadline_is_context_local() -> None:
    """Two waits in two threads (or two asyncio tasks) do not share a deadline."""
    import threading

    from airflow_provider_workflowsvc.hooks import _exchange

    seen: list[Any] = []

    def other_thread() -> None:
        seen.append(_exchange._DEADLINE.get())

    with _exchange.deadline(123.0):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert _exchange._DEADLINE.get() == 123.0
    assert seen == [None]
    assert _exchange._DEADLINE.get() is None


def test_httpx_timeouts_are_per_request_when_a_deadline_is_set(black_hole: dict[str, int]) -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import deadline

    with hook_for(black_hole["accepts"]) as hook:
        transport = hook._transport
        assert transport.request_timeout("GET", "/jobs") is httpx.USE_CLIENT_DEFAULT
        with deadline(time.time() + 2.0):
            cut = transport.request_timeout("GET", "/jobs")
        assert isinstance(cut, httpx.Timeout)
        assert 1.5 < cut.read <= 2.0
        assert 1.5 < cut.connect <= 2.0
