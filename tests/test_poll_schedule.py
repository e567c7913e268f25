"""The poll schedule: jittered first pause, fixed interval after, one last poll before the deadline."""

from __future__ import annotations

import time

from airflow_provider_workflowsvc._outcome import FINAL_POLL_RESERVE, PollSchedule


def test_first_pause_is_jittered_then_the_interval_is_kept() -> None:
    firsts = set()
    for _ in range(50):
        schedule = PollSchedule(time.time() + 3600, 30.0)
        first = schedule.next_pause()
        assert first is not None and 30.0 <= first <= 36.0
        firsts.add(round(first, 3))
        assert schedule.next_pause() == 30.0
    assert len(firsts) > 1, "many waits started together must not poll in lockstep"


def test_last_poll_comes_before_the_deadline_and_none_after() -> None:
    schedule = PollSchedule(time.time() + 20, 30.0)
    last = schedule.next_pause()
    assert last is not None and last <= 20 - FINAL_POLL_RESERVE + 0.1
    assert schedule.next_pause() is None


def test_a_wait_that_starts_past_its_deadline_polls_once_at_once() -> None:
    """A trigger picked up after its deadline (a triggerer backlog) polls once, with time for the
    poll's requests, before it reports a timeout."""
    schedule = PollSchedule(time.time() - 30, interval=10)
    assert schedule.next_pause() == 0.0
    assert FINAL_POLL_RESERVE - 0.5 < schedule.time_left() <= FINAL_POLL_RESERVE
    assert schedule.next_pause() is None


def test_a_wait_within_its_deadline_has_no_extra_poll() -> None:
    schedule = PollSchedule(time.time() + 0.05, interval=10)
    assert schedule.next_pause() is not None and schedule.cutoff == schedule.deadline
    assert schedule.next_pause() is None
