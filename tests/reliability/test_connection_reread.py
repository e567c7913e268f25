"""
A failed read of the connection never ends a wait (issue #31, item 1).

A wait reads its Airflow connection again every ``SETTINGS_TTL`` seconds (rotated credentials). When
that read fails (the secrets backend times out once, the connection is briefly absent or empty while
it is deleted and added again), the wait keeps the settings that worked, warns, and reads again later;
only the service's own refusal, after a read that worked, may end it. Over loopback against the
emulator, with the job held until the test lets it finish, in the three ways a job is waited for: the
trigger (async hook), a sync wait (``RunWorkflowOperator`` without deferral), and a sensor's pokes.

Every step waits for an event (a poll the emulator logged, a read the connection store counted); the
cache's clock is the test's, so a minute of settings lifetime passes at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc.hooks._settings import SETTINGS_CACHE, SETTINGS_RETRY, SETTINGS_TTL
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

from ._helpers import task_context

CONN_ID = "rereading"
SLOW = 3600.0
"""Emulator seconds per file per node: the job runs until the test moves the emulator's clock."""
ROTATED = "tok-rotated-5be2a7"
MODES = ("trigger", "sync", "poke")
FAILURES = ("timeout", "absent", "empty")


class Clock:
    """The settings cache's clock (monotonic seconds), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class Connections:
    """
    Airflow's connection store for one connection to the emulator: it can fail (``failing``), and it
    counts the reads that worked and those that failed.
    """

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.token, self.api_key = emulator.token, emulator.api_key
        self.failing: str | None = None
        self.reads = self.failed = 0
        self._lock = threading.Lock()

    def connection(self, conn_id: str) -> Any:
        from airflow.sdk import Connection
        from airflow.sdk.exceptions import AirflowNotFoundException

        with self._lock:
            failing = self.failing
            if failing is None:
                self.reads += 1
            else:
                self.failed += 1
        if failing == "timeout":
            raise TimeoutError("the secrets backend did not answer within 5 s")
        if failing == "absent":
            raise AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
        extra = json.dumps({"api_key": self.api_key, "retry_wait": 0.05})
        host = "" if failing == "empty" else self.emulator.base_url
        return Connection(
            conn_id=conn_id, conn_type="workflowsvc", host=host, password=self.token, extra=extra
        )

    async def aconnection(self, hook: Any) -> Any:
        await asyncio.sleep(0)
        return self.connection(hook.workflowsvc_conn_id)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(SETTINGS_CACHE, "_clock", clock)
    return clock


@pytest.fixture
def store(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Connections]:
    store = Connections(emulator)
    monkeypatch.setattr(WorkflowServiceAsyncHook, "_aget_connection", lambda hook: store.aconnection(hook))
    monkeypatch.setattr(
        WorkflowServiceHook, "get_connection", lambda self, conn_id: store.connection(conn_id)
    )
    yield store
    emulator.configure(api_token=None)


def held_job(emulator: Any, settings: Any, tmp_path: Path) -> str:
    """A job that stays scheduled until the emulator's clock moves by ``SLOW``."""
    emulator.configure(processing_delay=SLOW)
    (tmp_path / "a.txt").write_text("one")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow(f"wf-{time.time_ns()}", "basic")
        job = hook.run_workflow(str(workflow.id), files=[tmp_path / "a.txt"])
    assert job is not None
    return str(job.id)


def wait_in_background(mode: str, job_id: str) -> tuple[Future[dict[str, Any]], ThreadPoolExecutor]:
    """Start a wait for ``job_id`` in a thread; its future holds the wait's outcome (the task's summary)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"wait-{mode}")
    return pool.submit(WAITS[mode], job_id), pool


def _by_trigger(job_id: str) -> dict[str, Any]:
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

    trigger = WorkflowJobTrigger(
        job_id=job_id, deadline=time.time() + 3600, poll_interval=0.05, workflowsvc_conn_id=CONN_ID
    )

    async def first_event() -> dict[str, Any]:
        return dict((await trigger.run().__anext__()).payload)

    return asyncio.run(first_event())


def _synchronously(job_id: str) -> dict[str, Any]:
    from airflow_provider_workflowsvc.wait.poll import wait_for_job
    from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule

    with WorkflowServiceHook(CONN_ID) as hook:
        watch = JobWatch(job_id, logging.getLogger("test.wait"))
        try:
            return wait_for_job(hook, watch, PollSchedule(time.time() + 3600, 0.05)).to_event()
        except Exception as exc:  # what ended the wait (the operator raises it)
            return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}


def _by_pokes(job_id: str) -> dict[str, Any]:
    from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

    sensor = WorkflowJobSensor(
        task_id="wait", job_id=job_id, poke_interval=0.05, timeout=3600, workflowsvc_conn_id=CONN_ID
    )
    try:
        summary = sensor.execute(task_context())
    except Exception as exc:  # the summary of a failed wait: what ended it
        return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
    return {**summary, "status": summary["outcome"]}


WAITS: dict[str, Callable[[str], dict[str, Any]]] = {
    "trigger": _by_trigger,
    "sync": _synchronously,
    "poke": _by_pokes,
}


def until(happened: Callable[[], bool], wait: Future[Any]) -> None:
    """Return once ``happened()`` (an event), or once the wait has ended (the test then sees how)."""
    while not happened() and not wait.done():
        time.sleep(0.02)


def polls(emulator: Any, job_id: str) -> int:
    return len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details"))


def some_more_polls(emulator: Any, job_id: str, wait: Future[Any], count: int = 2) -> None:
    seen = polls(emulator, job_id)
    until(lambda: polls(emulator, job_id) >= seen + count, wait)


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("mode", MODES)
def test_a_failed_reread_keeps_the_settings_and_the_wait_goes_on(
    emulator: Any,
    settings: Any,
    store: Connections,
    clock: Clock,
    tmp_path: Path,
    mode: str,
    failure: str,
    figures: dict[str, Any],
) -> None:
    """Scenario: a minute into the wait the connection cannot be read (it times out, is absent, or is
    empty while it is added again) for a while; the job completes afterwards. The wait sees it."""
    job_id = held_job(emulator, settings, tmp_path)
    wait, pool = wait_in_background(mode, job_id)
    try:
        until(lambda: polls(emulator, job_id) >= 2, wait)
        store.failing = failure
        clock.advance(SETTINGS_TTL)  # the settings are due to be read again
        until(lambda: store.failed >= 1, wait)
        seen = polls(emulator, job_id)
        # Polling on with the settings that worked, not reading the connection at each poll instead
        until(lambda: polls(emulator, job_id) >= seen + 2 or store.failed >= 3, wait)
        assert polls(emulator, job_id) >= seen + 2, f"{store.failed} failed reads, no poll in between"
        reads = store.reads
        store.failing = None
        clock.advance(SETTINGS_RETRY)  # due to be tried again
        until(lambda: store.reads > reads, wait)
        some_more_polls(emulator, job_id, wait)
        emulator.advance_clock(SLOW * 10)  # the job completes now
        outcome = wait.result()
    finally:
        store.failing = None
        emulator.advance_clock(SLOW * 10)
        pool.shutdown(wait=True)
    figures.update(mode=mode, failure=failure, failed_reads=store.failed, outcome=outcome["status"])
    assert outcome["status"] == "success", outcome
    assert outcome["job_id"] == job_id
    assert store.failed >= 1
    assert store.reads >= 2


@pytest.mark.parametrize("failure", ["timeout", "absent"])
@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_while_the_connection_cannot_be_read_does_not_end_the_wait(
    emulator: Any,
    settings: Any,
    store: Connections,
    clock: Clock,
    tmp_path: Path,
    mode: str,
    failure: str,
    figures: dict[str, Any],
) -> None:
    """Scenario: the credentials are rotated while the secrets backend is down: the service refuses
    the old ones, and the connection cannot be read to learn the new ones. The refusal is no verdict:
    the wait goes on, reads the connection once it can, and sees the job complete."""
    job_id = held_job(emulator, settings, tmp_path)
    wait, pool = wait_in_background(mode, job_id)
    try:
        until(lambda: polls(emulator, job_id) >= 2, wait)
        store.failing = failure
        store.token = store.api_key = ROTATED
        emulator.configure(api_token=ROTATED)  # the old credentials are refused from now on
        until(lambda: len(refused(emulator, job_id)) >= 2, wait)
        store.failing = None
        clock.advance(SETTINGS_RETRY)  # a remembered failed read is tried again
        some_more_polls(emulator, job_id, wait)
        emulator.advance_clock(SLOW * 10)
        outcome = wait.result()
    finally:
        store.failing = None
        emulator.advance_clock(SLOW * 10)
        pool.shutdown(wait=True)
    figures.update(
        mode=mode, failure=failure, refusals=len(refused(emulator, job_id)), outcome=outcome["status"]
    )
    assert outcome["status"] == "success", outcome
    assert store.failed >= 1


def refused(emulator: Any, job_id: str) -> list[dict[str, Any]]:
    return [r for r in emulator.requests(path_contains=f"/jobs/{job_id}") if r["status"] == 401]


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_after_a_read_that_worked_still_ends_the_wait(
    emulator: Any, settings: Any, store: Connections, clock: Clock, tmp_path: Path, mode: str
) -> None:
    """Scenario: the token is revoked and the connection, read again without trouble, still holds it:
    the service's refusal is its word, and the wait ends with it (naming the connection)."""
    job_id = held_job(emulator, settings, tmp_path)
    wait, pool = wait_in_background(mode, job_id)
    try:
        until(lambda: polls(emulator, job_id) >= 2, wait)
        emulator.configure(api_token=ROTATED)  # revoked; the connection was never updated
        outcome = wait.result()
    finally:
        emulator.advance_clock(SLOW * 10)
        pool.shutdown(wait=True)
    assert outcome["status"] == "error", outcome
    assert f"connection {CONN_ID!r} was read again" in outcome["message"]
    assert store.failed == 0


@pytest.mark.parametrize(
    ("failure", "error"),
    [("absent", f"`{CONN_ID}` isn't defined"), ("empty", f"connection '{CONN_ID}' is misconfigured")],
)
def test_the_first_read_still_fails_naming_the_connection(
    store: Connections, failure: str, error: str
) -> None:
    store.failing = failure
    with pytest.raises(Exception, match=error), WorkflowServiceHook(CONN_ID) as hook:
        hook.list_workflows()


async def test_the_first_async_read_still_fails(store: Connections) -> None:
    store.failing = "timeout"
    with pytest.raises(TimeoutError, match="secrets backend"):
        async with WorkflowServiceAsyncHook(CONN_ID) as hook:
            await hook.list_workflows()
