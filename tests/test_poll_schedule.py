"""The poll schedule: jittered first pause, fixed interval after, one last poll before the deadline."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from helpers import details_json, failed_json, job_json

from airflow_provider_workflowsvc.models import Job, JobDetails, JobFailedFiles
from airflow_provider_workflowsvc.wait.poll import await_job, wait_for_job
from airflow_provider_workflowsvc.wait.watch import (
    END_READ_RESERVE,
    FINAL_POLL_LEAD,
    FINAL_POLL_RESERVE,
    JobWatch,
    PollSchedule,
)


def test_first_pause_is_jittered_then_the_interval_is_kept() -> None:
    firsts = set()
    for _ in range(50):
        schedule = PollSchedule(time.time() + 3600, 30.0)
        first = schedule.next_pause()
        assert first is not None
        assert 30.0 <= first <= 36.0
        firsts.add(round(first, 3))
        second = schedule.next_pause()
        assert second is not None
        assert second == 30.0
    assert len(firsts) > 1, "many waits started together must not poll in lockstep"


def test_last_poll_comes_just_before_the_deadline_and_none_after() -> None:
    schedule = PollSchedule(time.time() + 20, 30.0)
    last = schedule.next_pause()
    assert last is not None
    assert 20 - FINAL_POLL_LEAD - 0.1 <= last <= 20 - FINAL_POLL_LEAD
    assert schedule.cutoff == schedule.deadline, "no request outlives the deadline"
    assert schedule.next_pause() is None
    assert FINAL_POLL_LEAD - 0.1 <= schedule.rest() - last <= FINAL_POLL_LEAD + 0.1, "then waits to the end"


@pytest.mark.parametrize(("timeout", "interval"), [(4, 1), (4, 30), (10, 3), (2.5, 0.5), (3, 0.1)])
def test_the_wait_lasts_the_timeout(timeout: float, interval: float) -> None:
    """``timeout=4`` waits 4 s (issue #15: it gave up after 3.0 s), whatever the interval: the pauses
    and the rest after the last poll add up to the timeout, and the last poll is at most one interval
    (or ``FINAL_POLL_LEAD``) before the deadline."""
    clock = [1000.0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: clock[0])
        schedule = PollSchedule(clock[0] + timeout, interval)
        pauses = []
        while (pause := schedule.next_pause()) is not None:
            pauses.append(pause)
            clock[0] += pause
        last_poll_at = clock[0] - 1000.0
        rest = schedule.rest()
    assert sum(pauses) + rest == pytest.approx(timeout)
    assert timeout - min(interval, FINAL_POLL_LEAD) - 1e-9 <= last_poll_at
    assert all(p <= interval * 1.2 for p in pauses)


def test_a_wait_that_starts_past_its_deadline_polls_once_at_once() -> None:
    """A trigger picked up after its deadline (a triggerer backlog) polls once, with time for the
    poll's requests, before it reports a timeout."""
    schedule = PollSchedule(time.time() - 30, interval=10)
    assert schedule.next_pause() == 0.0
    assert FINAL_POLL_RESERVE - 0.5 < schedule.cutoff - time.time() <= FINAL_POLL_RESERVE
    assert schedule.next_pause() is None


def test_a_wait_within_its_deadline_has_no_extra_poll() -> None:
    schedule = PollSchedule(time.time() + 0.05, interval=10)
    assert schedule.next_pause() is not None
    assert schedule.cutoff == schedule.deadline
    assert schedule.next_pause() is None


class _SlowEndHook:
    """A service whose details say the job ended, and whose first ``failing`` reads of the record fail
    (the first cut by the wait's deadline, as a pool busy reading other jobs' ends cuts it; the next as
    a pool whose every lane holds a slow answer fails them); later reads answer (issue #43)."""

    def __init__(self, failing: int = 1) -> None:
        self.record_reads, self.failing = 0, failing

    def get_job_details(self, job_id: str) -> JobDetails:
        return JobDetails.model_validate(details_json(job_id, "COMPLETED"))

    def get_job(self, job_id: str) -> Job:
        self.record_reads += 1
        if self.record_reads <= self.failing:
            raise TimeoutError(
                "the deadline has passed" if self.record_reads == 1 else "no lane free in time"
            )
        return Job.model_validate(job_json(job_id, "COMPLETED"))

    def get_job_failed_files(self, job_id: str) -> JobFailedFiles:
        return JobFailedFiles.model_validate(failed_json())


class _AsyncSlowEndHook(_SlowEndHook):
    async def get_job_details(self, job_id: str) -> JobDetails:  # type: ignore[override]
        return super().get_job_details(job_id)

    async def get_job(self, job_id: str) -> Job:  # type: ignore[override]
        return super().get_job(job_id)

    async def get_job_failed_files(self, job_id: str) -> JobFailedFiles:  # type: ignore[override]
        return super().get_job_failed_files(job_id)


@pytest.mark.parametrize("failing", [1, 3], ids=["cut-by-the-deadline", "then-failing-twice-more"])
def test_a_job_seen_ended_before_the_deadline_is_reported_not_timed_out(failing: int) -> None:
    """The details said the job ended; the deadline cut the reads of its end: they are made again, past
    the deadline (``END_READ_RESERVE``), an interval after each transient failure, in the sync wait and
    its awaited twin."""
    hook, watch = _SlowEndHook(failing), JobWatch("j1", logging.getLogger(__name__))
    outcome = wait_for_job(hook, watch, PollSchedule(time.time() + 0.05, 1.0), sleep=lambda _: None)  # type: ignore[arg-type]
    assert (outcome.status, outcome.job_status, hook.record_reads) == ("success", "completed", failing + 1)
    ahook, awatch = _AsyncSlowEndHook(failing), JobWatch("j1", logging.getLogger(__name__))
    aoutcome = asyncio.run(await_job(ahook, awatch, PollSchedule(time.time() + 0.05, 1.0)))  # type: ignore[arg-type]
    assert (aoutcome.status, aoutcome.job_status, ahook.record_reads) == ("success", "completed", failing + 1)
    assert PollSchedule(time.time(), 1.0).end_cutoff() > time.time() + END_READ_RESERVE - 1
