"""A job's per-node progress is logged when it changed, at most once a minute per status (issue #17)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import details_json

from airflow_provider_workflowsvc.models import JobDetails
from airflow_provider_workflowsvc.wait import watch
from airflow_provider_workflowsvc.wait.watch import PROGRESS_LOG_EVERY, JobWatch


class Lines:
    """A logger that keeps the progress lines it is given."""

    def __init__(self) -> None:
        self.progress: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        if "progress" in message:
            self.progress.append(message % args)

    warning = info


def details(status: str, done: int) -> JobDetails:
    return JobDetails.model_validate(details_json("j1", status, nodes=(("partition", 9 - done, 1, done, 0),)))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1_000_000.0]
    monkeypatch.setattr(watch.time, "time", lambda: now[0])
    return now


def test_changing_progress_is_logged_once_per_interval(clock: list[float]) -> None:
    log = Lines()
    job = JobWatch("j1", log)
    for done in range(20):  # a poll every 4 s, progress changes at each
        job.observe(details("in progress", done))
        clock[0] += 4
    # t = 0 (first), then the first poll at least PROGRESS_LOG_EVERY later: t = 60 (done = 15)
    assert len(log.progress) == 2
    assert "success 0" in log.progress[0]
    assert "success 15" in log.progress[1]
    assert PROGRESS_LOG_EVERY == 60


def test_a_status_change_logs_the_progress_at_once_but_the_end_is_left_to_the_summary(
    clock: list[float],
) -> None:
    log = Lines()
    job = JobWatch("j1", log)
    job.observe(details("scheduled", 0))
    clock[0] += 4
    job.observe(details("in progress", 1))
    clock[0] += 4
    job.observe(details("in progress", 2))
    clock[0] += 4
    assert job.observe(details("completed", 3))
    assert [line.split("success ")[1][0] for line in log.progress] == ["0", "1"]
    assert job.ended


def test_unchanged_progress_is_not_logged_again(clock: list[float]) -> None:
    log = Lines()
    job = JobWatch("j1", log)
    for _ in range(5):
        job.observe(details("in progress", 1))
        clock[0] += PROGRESS_LOG_EVERY
    assert len(log.progress) == 1
