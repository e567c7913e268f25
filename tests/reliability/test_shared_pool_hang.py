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

INTERVAL = 0.1
HANG = 8.0
HUNG_WAIT = 4.0
LATE = 1.0
"""How much later than ``INTERVAL`` a poll may start on a loaded 2-core machine and still be "on time"."""


def _jobs(settings: Any, tmp_path: Path, count: int) -> list[str]:
    data = tmp_path / "doc.txt"
    data.write_text("a document")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow(f"hang-{time.time_ns()}", "basic")
        jobs = [hook.run_workflow(str(workflow.id), files=[data]) for _ in range(count)]
    return [job.id for job in jobs if job is not None]


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
    emulator.configure(processing_delay=0.2)
    hung, *others = _jobs(settings, tmp_path, 5)
    emulator.set_faults(method="GET", path=f"*/jobs/{hung}/details", latency=HANG)
    polls: dict[str, list[float]] = {job: [] for job in others}
    send_once = WorkflowServiceAsyncHook._send_once

    async def recorded(self: WorkflowServiceAsyncHook, call: Any) -> Any:
        job = call.path.split("/")[2]
        if job in polls and call.path.endswith("/details"):
            polls[job].append(time.monotonic())
        return await send_once(self, call)

    monkeypatch.setattr(WorkflowServiceAsyncHook, "_send_once", recorded)
    started = time.monotonic()
    ended: dict[str, float] = {}

    async def wait(job: str, seconds: float) -> dict[str, Any]:
        trigger = WorkflowJobTrigger(job_id=job, deadline=time.time() + seconds, poll_interval=INTERVAL)
        event = await anext(trigger.run())
        ended[job] = time.monotonic() - started
        return dict(event.payload)

    events = await asyncio.gather(wait(hung, HUNG_WAIT), *(wait(job, 30.0) for job in others))

    assert events[0]["status"] == "timeout", events[0]
    assert [e["status"] for e in events[1:]] == ["success"] * len(others), events[1:]
    assert max(ended[job] for job in others) < ended[hung]
    gaps = [b - a for times in polls.values() for a, b in itertools.pairwise(times)]
    assert all(len(times) >= 2 for times in polls.values()), polls
    assert max(gaps) <= INTERVAL + LATE, sorted(gaps)[-5:]
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
