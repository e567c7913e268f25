"""One waiting trigger's request hangs; the others, sharing its connection pool, keep polling on time."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

from ._helpers import use_connection

# The owner suite of hooks/_pool.py: run on every Airflow of the matrix (./dev), a release gate.
# Lanes of the pool hold hung reads whatever they read: proven against the dialect real users meet.
pytestmark = [pytest.mark.pool, pytest.mark.dialect("platform", reason="the pool's lanes, not the wire")]


INTERVAL = 0.1
HANG = 16.0
HUNG_WAIT = 8.0
"""The hung waits' deadline: the healthy ones must poll twice and end inside it, also on a busy machine."""
MANY_INTERVAL = 0.5
"""The poll interval of the many-hung-reads scenario: a cut read is sent again at its wait's next poll,
so the lanes the hung waits take are about (hung - overflow) x lane limit / interval."""
SLOW = 1000.0
"""Emulator seconds a job runs: the jobs end when the test moves the clock, once the healthy waits polled."""
POLLS = 2
"""Polls each healthy wait makes while a hung read is in flight before the test ends their jobs."""


@pytest.fixture(autouse=True)
def _each_wait_polls_its_own_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    The pool is under test, so every wait sends its own status reads through it: triggers given only
    their job would otherwise learn the workflow and share one listing (#37), and the healthy waits'
    own reads, whose gaps these tests measure, would not happen (the shared poll has its own suite).
    """
    from helpers import SHARED_STATUS_POLL_ENV

    monkeypatch.setenv(SHARED_STATUS_POLL_ENV, "False")


def _jobs(settings: Any, tmp_path: Path, count: int) -> list[str]:
    data = tmp_path / "doc.txt"
    data.write_text("a document")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow(f"hang-{time.time_ns()}", "basic")
        jobs = [hook.run_workflow(str(workflow.id), files=[data]) for _ in range(count)]
    return [job.id for job in jobs if job is not None]


async def _end_jobs_once_polled(
    emulator: Any, polls: dict[str, list[float]], hung_since: list[float]
) -> None:
    """Every job ends (the clock moves) once each healthy wait polled ``POLLS`` times after a read hung."""
    while not hung_since or min(sum(t > hung_since[0] for t in times) for times in polls.values()) < POLLS:
        await asyncio.sleep(0.02)
    await asyncio.to_thread(emulator.advance_clock, SLOW * 10)


async def test_a_hung_request_does_not_hold_up_the_other_triggers(
    emulator: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    figures: dict[str, Any],
) -> None:
    """Scenario: five triggers of one connection share a pool of two connections; the service never
    answers one trigger's status checks. That request holds one connection until its wait's deadline;
    the four others poll every ``INTERVAL`` through the other one, and end with their jobs' success
    before the hung trigger gives up with a timeout."""
    use_connection(monkeypatch, emulator, max_connections=2, retry_wait=0.02, retry_max_wait=0.1)
    emulator.configure(processing_delay=SLOW)
    hung, *others = _jobs(settings, tmp_path, 5)
    emulator.set_faults(method="GET", path=f"*/jobs/{hung}/details", latency=HANG)
    polls: dict[str, list[float]] = {job: [] for job in others}
    hung_since: list[float] = []
    in_flight = [0]
    send = WorkflowServiceAsyncHook._send

    async def recorded(self: WorkflowServiceAsyncHook, call: Any, **options: Any) -> Any:
        job = call.path.split("/")[2]
        if job in polls and call.path.endswith("/details"):
            polls[job].append(time.monotonic())
        if job != hung or not call.path.endswith("/details"):
            return await send(self, call, **options)
        hung_since[:] = hung_since or [time.monotonic()]
        in_flight[0] += 1
        try:
            return await send(self, call, **options)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(WorkflowServiceAsyncHook, "_send", recorded)
    started = time.monotonic()
    ended: dict[str, float] = {}
    hung_read_open_at_end: dict[str, bool] = {}

    async def wait(job: str, seconds: float) -> dict[str, Any]:
        trigger = WorkflowJobTrigger(job_id=job, deadline=time.time() + seconds, poll_interval=INTERVAL)
        event = await anext(trigger.run())
        ended[job] = time.monotonic() - started
        hung_read_open_at_end[job] = in_flight[0] > 0
        return dict(event.payload)

    events, _ = await asyncio.gather(
        asyncio.gather(wait(hung, HUNG_WAIT), *(wait(job, 60.0) for job in others)),
        _end_jobs_once_polled(emulator, polls, hung_since),
    )

    assert events[0]["status"] == "timeout", events[0]
    assert [e["status"] for e in events[1:]] == ["success"] * len(others), events[1:]
    assert all(hung_read_open_at_end[job] for job in others), "a healthy wait ended only after the hung read"
    gaps = [b - a for times in polls.values() for a, b in itertools.pairwise(times)]
    hung_requests = emulator.requests(path_contains=f"/jobs/{hung}/details")
    assert hung_requests
    assert all(r["fault"] for r in hung_requests)
    figures.update(
        triggers=len(others) + 1,
        pool_connections=2,
        polls_of_the_others=sum(len(t) for t in polls.values()),
        max_poll_gap_seconds=round(max(gaps), 2),
        others_done_after_seconds=round(max(ended[job] for job in others), 1),
        hung_event_after_seconds=round(ended[hung], 1),
    )


async def test_more_hung_reads_than_lanes_delay_only_themselves(
    emulator: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    figures: dict[str, Any],
) -> None:
    """Scenario (issue #24): five triggers whose status reads hang share a pool of two lanes with three
    healthy ones. Each hung read leaves its lane after the lane time limit (two go on in the overflow,
    the others are cut and polled again later): the healthy waits poll on time and end with success,
    every hung wait ends at its deadline, and the pool never holds more than lanes + overflow
    connections."""
    from airflow_provider_workflowsvc.hooks import _pool

    monkeypatch.setattr(_pool, "LANE_TIME_LIMIT", 0.2)
    use_connection(
        monkeypatch, emulator, max_connections=2, timeout=HANG, retry_wait=0.02, retry_max_wait=0.1
    )
    emulator.configure(processing_delay=SLOW)
    jobs = _jobs(settings, tmp_path, 8)
    hung, healthy = jobs[:5], jobs[5:]
    emulator.set_faults(
        method="GET", path_regex="|".join(f".*/jobs/{job}/details" for job in hung), latency=HANG
    )
    polls: dict[str, list[float]] = {job: [] for job in healthy}
    hung_since: list[float] = []
    send = WorkflowServiceAsyncHook._send

    async def recorded(self: WorkflowServiceAsyncHook, call: Any, **options: Any) -> Any:
        job = call.path.split("/")[2]
        if job in polls and call.path.endswith("/details"):
            polls[job].append(time.monotonic())
        if job in hung and call.path.endswith("/details"):
            hung_since[:] = hung_since or [time.monotonic()]
        return await send(self, call, **options)

    monkeypatch.setattr(WorkflowServiceAsyncHook, "_send", recorded)
    open_connections, most = [0], [0]
    new_lane, aclose = _pool._Lanes._new_lane, _pool.httpx.AsyncHTTPTransport.aclose

    def counted_lane(self: Any) -> Any:
        open_connections[0] += 1
        most[0] = max(most[0], open_connections[0])
        return new_lane(self)

    async def counted_close(self: Any) -> None:
        open_connections[0] -= 1
        await aclose(self)

    monkeypatch.setattr(_pool._Lanes, "_new_lane", counted_lane)
    monkeypatch.setattr(_pool.httpx.AsyncHTTPTransport, "aclose", counted_close)
    started = time.monotonic()
    ended: dict[str, float] = {}

    async def wait(job: str, seconds: float) -> dict[str, Any]:
        trigger = WorkflowJobTrigger(job_id=job, deadline=time.time() + seconds, poll_interval=MANY_INTERVAL)
        event = await anext(trigger.run())
        ended[job] = time.monotonic() - started
        return dict(event.payload)

    events, _ = await asyncio.gather(
        asyncio.gather(*(wait(job, HUNG_WAIT) for job in hung), *(wait(job, 60.0) for job in healthy)),
        _end_jobs_once_polled(emulator, polls, hung_since),
    )

    assert [e["status"] for e in events[: len(hung)]] == ["timeout"] * len(hung), events[: len(hung)]
    assert [e["status"] for e in events[len(hung) :]] == ["success"] * len(healthy), events[len(hung) :]
    assert max(ended[job] for job in healthy) < min(ended[job] for job in hung), "healthy waits held up"
    gaps = [b - a for times in polls.values() for a, b in itertools.pairwise(times)]
    assert most[0] <= 2 + 2, most  # lanes + overflow (the overflow is max_connections)
    hung_reads = sum(len(emulator.requests(path_contains=f"/jobs/{job}/details")) for job in hung)
    assert hung_reads > len(hung), "the cut reads were polled again"
    figures.update(
        lanes=2,
        overflow=2,
        hung_triggers=len(hung),
        healthy_triggers=len(healthy),
        max_connections_open=most[0],
        max_poll_gap_seconds=round(max(gaps), 2),
        healthy_done_after_seconds=round(max(ended[job] for job in healthy), 1),
        hung_reads=hung_reads,
    )
