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
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from helpers import ConnectionStore, ManualClock

from airflow_provider_workflowsvc.hooks._settings import SETTINGS_RETRY, SETTINGS_TTL
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

from ._helpers import task_context

CONN_ID = "rereading"
SLOW = 3600.0
"""Emulator seconds per file per node: the job runs until the test moves the emulator's clock."""
ROTATED = "tok-rotated-5be2a7"
MODES = ("trigger", "sync", "poke")
FAILURES = ("timeout", "absent", "empty")


class Waiting(NamedTuple):
    """A wait under way for a job the emulator holds: its mode, the job, and its outcome to come."""

    mode: str
    job_id: str
    outcome: Future[dict[str, Any]]

    def until(self, happened: Callable[[], bool]) -> None:
        """Return once ``happened()`` (an event), or once the wait has ended (the test then sees how)."""
        while not happened() and not self.outcome.done():
            time.sleep(0.02)

    def polls(self, emulator: Any) -> int:
        return len(emulator.requests(method="GET", path_contains=f"/jobs/{self.job_id}/details"))

    def some_more_polls(self, emulator: Any, count: int = 2) -> None:
        seen = self.polls(emulator)
        self.until(lambda: self.polls(emulator) >= seen + count)


@pytest.fixture(params=MODES)
def waiting(
    request: pytest.FixtureRequest,
    emulator: Any,
    settings: Any,
    connection_store: ConnectionStore,
    settings_clock: ManualClock,
    tmp_path: Path,
) -> Iterator[Waiting]:
    """
    A wait (``MODES``) in a thread for a job that stays scheduled until the emulator's clock moves; its
    connection from ``connection_store``, its settings timed by ``settings_clock``.
    """
    emulator.configure(processing_delay=SLOW)
    (tmp_path / "a.txt").write_text("one")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow(f"wf-{time.time_ns()}", "basic")
        job = hook.run_workflow(str(workflow.id), files=[tmp_path / "a.txt"])
    assert job is not None
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"wait-{request.param}")
    wait = Waiting(request.param, str(job.id), pool.submit(WAITS[request.param], str(job.id)))
    try:
        wait.until(lambda: wait.polls(emulator) >= 2)  # under way
        yield wait
    finally:
        connection_store.failing = None
        emulator.advance_clock(SLOW * 10)  # whatever happened, the job ends and so does the wait
        pool.shutdown(wait=True)


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


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_reread_keeps_the_settings_and_the_wait_goes_on(
    waiting: Waiting,
    emulator: Any,
    connection_store: ConnectionStore,
    settings_clock: ManualClock,
    failure: str,
    figures: dict[str, Any],
) -> None:
    """Scenario: a minute into the wait the connection cannot be read (it times out, is absent, or is
    empty while it is added again) for a while; the job completes afterwards. The wait sees it."""
    connection_store.failing = failure
    settings_clock.now += SETTINGS_TTL  # the settings are due to be read again
    waiting.until(lambda: connection_store.failed >= 1)
    seen = waiting.polls(emulator)
    # Polling on with the settings that worked, not reading the connection at each poll instead
    waiting.until(lambda: waiting.polls(emulator) >= seen + 2 or connection_store.failed >= 3)
    assert waiting.polls(emulator) >= seen + 2, f"{connection_store.failed} failed reads, no poll in between"
    reads = connection_store.reads
    connection_store.failing = None
    settings_clock.now += SETTINGS_RETRY  # due to be tried again
    waiting.until(lambda: connection_store.reads > reads)
    waiting.some_more_polls(emulator)
    emulator.advance_clock(SLOW * 10)  # the job completes now
    outcome = waiting.outcome.result()
    figures.update(
        mode=waiting.mode, failure=failure, failed_reads=connection_store.failed, outcome=outcome["status"]
    )
    assert outcome["status"] == "success", outcome
    assert outcome["job_id"] == waiting.job_id
    assert connection_store.failed >= 1
    assert connection_store.reads >= 2


@pytest.mark.parametrize("failure", ["timeout", "absent"])
def test_a_refusal_while_the_connection_cannot_be_read_does_not_end_the_wait(
    waiting: Waiting,
    emulator: Any,
    connection_store: ConnectionStore,
    settings_clock: ManualClock,
    failure: str,
    figures: dict[str, Any],
) -> None:
    """Scenario: the credentials are rotated while the secrets backend is down: the service refuses
    the old ones, and the connection cannot be read to learn the new ones. The refusal is no verdict:
    the wait goes on, reads the connection once it can, and sees the job complete."""
    connection_store.failing = failure
    connection_store.rotate_to(ROTATED)
    emulator.configure(api_token=ROTATED)  # the old credentials are refused from now on
    waiting.until(lambda: len(refused(emulator, waiting.job_id)) >= 2)
    connection_store.failing = None
    settings_clock.now += SETTINGS_RETRY  # a remembered failed read is tried again
    waiting.some_more_polls(emulator)
    emulator.advance_clock(SLOW * 10)
    outcome = waiting.outcome.result()
    refusals = len(refused(emulator, waiting.job_id))
    figures.update(mode=waiting.mode, failure=failure, refusals=refusals, outcome=outcome["status"])
    assert outcome["status"] == "success", outcome
    assert connection_store.failed >= 1


def refused(emulator: Any, job_id: str) -> list[dict[str, Any]]:
    return [r for r in emulator.requests(path_contains=f"/jobs/{job_id}") if r["status"] == 401]


def test_a_refusal_after_a_read_that_worked_still_ends_the_wait(
    waiting: Waiting, emulator: Any, connection_store: ConnectionStore, settings_clock: ManualClock
) -> None:
    """Scenario: the token is revoked and the connection, read again without trouble, still holds it:
    the service's refusal is its word, and the wait ends with it (naming the connection)."""
    emulator.configure(api_token=ROTATED)  # revoked; the connection was never updated
    outcome = waiting.outcome.result()
    assert outcome["status"] == "error", outcome
    assert f"connection {CONN_ID!r} was read again" in outcome["message"]
    assert connection_store.failed == 0


@pytest.mark.parametrize(
    ("failure", "error"),
    [("absent", f"`{CONN_ID}` isn't defined"), ("empty", f"connection '{CONN_ID}' is misconfigured")],
)
def test_the_first_read_still_fails_naming_the_connection(
    connection_store: ConnectionStore, failure: str, error: str
) -> None:
    connection_store.failing = failure
    with pytest.raises(Exception, match=error), WorkflowServiceHook(CONN_ID) as hook:
        hook.list_workflows()


async def test_the_first_async_read_still_fails(connection_store: ConnectionStore) -> None:
    connection_store.failing = "timeout"
    with pytest.raises(TimeoutError, match="secrets backend"):
        async with WorkflowServiceAsyncHook(CONN_ID) as hook:
            await hook.list_workflows()
