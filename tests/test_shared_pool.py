"""Async hooks share one ``httpx.AsyncClient`` per event loop and connection settings (issue #17)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_workflowsvc.exceptions import WorkflowServiceApiError, WorkflowServiceConnectionError
from airflow_provider_workflowsvc.hooks._pool import _OneConnection
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
    _ClientKey,
    deadline,
    shared_client_users,
)
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

# The owner suite of hooks/_pool.py: run on every Airflow of the matrix (./dev), a release gate.
pytestmark = pytest.mark.pool


BASE = "https://svc.test/api/v1"
TOKEN = "token-one-abcdef"


def _settings(**changes: Any) -> ConnectionSettings:
    return ConnectionSettings(**{"base_url": BASE, "token": TOKEN, **changes})


@pytest.fixture
def created_clients(monkeypatch: pytest.MonkeyPatch) -> list[httpx.AsyncClient]:
    """Every ``httpx.AsyncClient`` created during the test."""
    created: list[httpx.AsyncClient] = []

    class Recorded(httpx.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            created.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", Recorded)
    return created


async def test_hooks_with_the_same_settings_share_one_client() -> None:
    async with (
        WorkflowServiceAsyncHook(settings=_settings()) as one,
        WorkflowServiceAsyncHook(settings=_settings()) as two,
    ):
        assert await one.get_async_conn() is await two.get_async_conn()
        assert shared_client_users() == [(BASE, 2)]
    assert shared_client_users() == []


async def test_the_last_user_closes_the_shared_client() -> None:
    one = WorkflowServiceAsyncHook(settings=_settings())
    two = WorkflowServiceAsyncHook(settings=_settings())
    client = await one.get_async_conn()
    await two.get_async_conn()
    await one.aclose()
    assert not client.is_closed
    await one.aclose()  # closing twice does not count a user out twice
    assert shared_client_users() == [(BASE, 1)]
    await two.aclose()
    assert client.is_closed
    async with WorkflowServiceAsyncHook(settings=_settings()) as three:
        assert await three.get_async_conn() is not client


async def test_the_pool_is_bounded_by_max_connections() -> None:
    async with (
        WorkflowServiceAsyncHook(settings=_settings()) as default,
        WorkflowServiceAsyncHook(settings=_settings(max_connections=3)) as three,
    ):
        lanes = [(await h.get_async_conn())._transport._lanes for h in (default, three)]  # type: ignore[attr-defined]
    assert [len(each) for each in lanes] == [20, 3]
    assert all(isinstance(lane._pool, _OneConnection) for each in lanes for lane in each)  # one each


@pytest.mark.parametrize(
    "change",
    [
        {"base_url": "https://other.test/api/v1"},
        {"token": "token-two-abcdef"},
        {"token": None},
        {"api_key": "key-abcdef"},
        {"timeout": 5.0},
        {"connect_timeout": 2.0},
        {"verify": False},
        {"max_connections": 4},
        {"max_response_bytes": 4096},
    ],
    ids=lambda change: next(iter(change)),
)
async def test_a_setting_that_changes_a_request_gets_its_own_client(change: dict[str, Any]) -> None:
    async with (
        WorkflowServiceAsyncHook(settings=_settings()) as one,
        WorkflowServiceAsyncHook(settings=_settings(**change)) as two,
    ):
        assert await one.get_async_conn() is not await two.get_async_conn()


async def test_a_proxy_environment_change_gets_its_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    async with WorkflowServiceAsyncHook(settings=_settings()) as one:
        await one.get_async_conn()
        monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-secret@proxy.test:3128")
        async with WorkflowServiceAsyncHook(settings=_settings()) as two:
            assert await one.get_async_conn() is not await two.get_async_conn()


def test_the_client_key_never_shows_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-secret@proxy.test:3128")
    key = _ClientKey.of(_settings(api_key="key-secret-abcdef"))
    shown = f"{key!r} {key} {[key]!r}"
    for secret in (TOKEN, "key-secret-abcdef", "proxy-secret"):
        assert secret not in shown
    assert BASE in shown


def test_each_event_loop_gets_its_own_client() -> None:
    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    hooks = [WorkflowServiceAsyncHook(settings=_settings()) for _ in loops]
    try:
        pairs = list(zip(loops, hooks, strict=True))
        clients = [loop.run_until_complete(hook.get_async_conn()) for loop, hook in pairs]
        assert clients[0] is not clients[1]
        for loop, hook in pairs:
            loop.run_until_complete(hook.aclose())
        assert all(client.is_closed for client in clients)
    finally:
        for loop in loops:
            loop.close()


def test_the_sync_hook_keeps_a_client_of_its_own() -> None:
    with WorkflowServiceHook(settings=_settings()) as one, WorkflowServiceHook(settings=_settings()) as two:
        assert one.get_conn() is not two.get_conn()


# -- over real sockets, against the emulator ---------------------------------------------------------


async def test_each_request_carries_its_own_token(emulator: Any, settings: ConnectionSettings) -> None:
    """Scenario: a wrong token and the right one, to the same service, in one loop: two clients, and
    neither request borrows the other's credentials (the wrong one keeps failing, the right one works)."""
    # (and a wrong API key: the platform dialect, like the live service, takes the key alone)
    wrong = ConnectionSettings(**{**dict(settings), "token": "not-the-token", "api_key": "not-the-key"})
    async with (
        WorkflowServiceAsyncHook(settings=settings) as good,
        WorkflowServiceAsyncHook(settings=wrong) as bad,
    ):
        for _ in range(2):
            results = await asyncio.gather(
                good.list_workflows(), bad.list_workflows(), good.list_workflows(), return_exceptions=True
            )
            assert isinstance(results[0], list), results
            assert isinstance(results[2], list), results
            assert isinstance(results[1], WorkflowServiceApiError)
            assert results[1].status_code == 401
        assert len(shared_client_users()) == 2
    assert [r["status"] for r in emulator.requests(path_contains="/workflows")].count(401) == 2


async def test_a_hook_cancelled_mid_request_lets_go_of_the_client(
    emulator: Any, settings: ConnectionSettings
) -> None:
    emulator.set_faults(method="GET", path="*/workflows*", latency=2.0)
    async with WorkflowServiceAsyncHook(settings=settings) as other:
        client = await other.get_async_conn()

        async def hung() -> None:
            async with WorkflowServiceAsyncHook(settings=settings) as hook:
                await hook.list_workflows()

        task = asyncio.create_task(hung())
        await _until(lambda: emulator.requests(path_contains="/workflows"))
        assert shared_client_users() == [(settings.base_url, 2)]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert shared_client_users() == [(settings.base_url, 1)]
        emulator.clear_faults()
        await other.list_workflows()  # the shared client still serves the other hook
        assert not client.is_closed
    assert client.is_closed


async def _until(condition: Any, timeout: float = 10.0) -> None:
    ends = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < ends, "timed out"
        await asyncio.sleep(0.05)


def _run_jobs(settings: ConnectionSettings, tmp_path: Path, count: int) -> list[str]:
    data = tmp_path / "doc.txt"
    data.write_text("a document")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow(f"wf-{time.time_ns()}", "basic")
        jobs = [hook.run_workflow(str(workflow.id), files=[data]) for _ in range(count)]
    return [job.id for job in jobs if job is not None]


async def test_two_waiting_triggers_share_one_client(
    workflowsvc_conn: Any, settings: ConnectionSettings, tmp_path: Path, created_clients: list[Any]
) -> None:
    workflowsvc_conn.configure(processing_delay=0.2)
    jobs = _run_jobs(settings, tmp_path, 2)
    created_clients.clear()
    triggers = [WorkflowJobTrigger(job_id=job, deadline=time.time() + 20, poll_interval=0.1) for job in jobs]
    events = await asyncio.gather(*(anext(t.run()) for t in triggers))
    assert [e.payload["status"] for e in events] == ["success", "success"]
    assert len(created_clients) == 1
    assert created_clients[0].is_closed
    assert shared_client_users() == []


async def test_a_trigger_cancelled_mid_request_lets_go_of_the_client(
    workflowsvc_conn: Any, settings: ConnectionSettings, tmp_path: Path, created_clients: list[Any]
) -> None:
    """Scenario: the triggerer cancels a trigger (its task was cleared) while its poll hangs."""
    [job] = _run_jobs(settings, tmp_path, 1)
    workflowsvc_conn.set_faults(method="GET", path=f"*/jobs/{job}/details", latency=2.0)
    created_clients.clear()
    trigger = WorkflowJobTrigger(job_id=job, deadline=time.time() + 20, poll_interval=0.05)
    task = asyncio.create_task(anext(trigger.run()))
    await _until(lambda: workflowsvc_conn.requests(path_contains=f"/jobs/{job}/details"))
    assert shared_client_users() == [(settings.base_url, 1)]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert shared_client_users() == []
    assert [c.is_closed for c in created_clients] == [True]


async def test_a_request_waits_for_a_free_connection_no_longer_than_its_deadline(
    emulator: Any, settings: ConnectionSettings
) -> None:
    """Scenario: a pool of one connection, held by a request that never gets its answer; another request
    of the same pool waits for it until its deadline, then fails as never sent (so it is safe to retry).
    Had it waited longer, it would wait forever: the hung request holds the connection until the end."""
    one = ConnectionSettings(**{**dict(settings), "max_connections": 1, "max_retries": 0})
    emulator.set_faults(method="GET", path="*/workflows*", latency=3600.0)
    async with WorkflowServiceAsyncHook(settings=one) as hung, WorkflowServiceAsyncHook(settings=one) as hook:
        task = asyncio.create_task(hung.list_workflows())
        await _until(lambda: emulator.requests(path_contains="/workflows"))
        with deadline(time.time() + 0.3), pytest.raises(WorkflowServiceConnectionError) as info:
            await hook.get_job_details("job-1")
        assert info.value.sent is False
        assert not emulator.requests(path_contains="/jobs/")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("python", ["3.11+", "3.10"])
async def test_a_cancel_that_meets_the_answer_is_not_lost(
    python: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``asyncio.wait_for`` before 3.12 returns an answer that came with a cancel and drops the cancel: a
    trigger cancelled then (its task cleared, its triggerer stopping) went on waiting forever."""
    from airflow_provider_workflowsvc.hooks import _pool

    if python == "3.10":
        monkeypatch.setattr(_pool, "_async_timeout", None)
    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(_pool.wait_at_most(answer, 60))
    await asyncio.sleep(0)  # it awaits the answer
    answer.set_result(1)
    waiting.cancel()  # in the same turn of the loop as the answer
    with pytest.raises(asyncio.CancelledError):
        await waiting
    never: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(asyncio.TimeoutError):
        await _pool.wait_at_most(never, 0.01)
    assert never.cancelled()
    assert await _pool.wait_at_most(asyncio.sleep(0, "done"), None) == "done"
