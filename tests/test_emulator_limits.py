"""Unit tests of the emulator's account limits (``emulator/limits.py``): the running cap's queue and the
checks' answers, on jobs built in memory with exact times."""

from __future__ import annotations

import math

import pytest

from airflow_provider_workflowsvc.emulator.config import EmulatorConfig
from airflow_provider_workflowsvc.emulator.errors import ApiError, InvalidRequest
from airflow_provider_workflowsvc.emulator.jobs import JobFile, JobNode, JobRecord
from airflow_provider_workflowsvc.emulator.limits import (
    admit,
    check_file_limits,
    check_launch_gap,
    check_quota,
)
from airflow_provider_workflowsvc.emulator.schema import JobState

NODE = JobNode("n1", "Partitioner", "partition", "unstructured_api")


def on_demand(name: str, created_at: float, files: int = 1, delay: float = 10.0) -> JobRecord:
    """An on-demand job of ``files`` files through one node: it runs ``(files + 1) * delay`` once admitted."""
    return JobRecord(
        id=name,
        workflow_id=f"wf-{name}",
        workflow_name=f"job-{name}",
        created_at=created_at,
        delay=delay,
        nodes=[NODE],
        files=[JobFile(f"{name}{i}.txt", f"{name}-{i}") for i in range(files)],
        local_source=True,
        local_destination=True,
        on_demand=True,
    )


def starts(jobs: list[JobRecord]) -> list[float | None]:
    return [j.started_at for j in jobs]


def test_jobs_within_the_cap_start_when_launched() -> None:
    jobs = [on_demand("a", 0.0), on_demand("b", 1.0)]
    admitted, watched = admit(jobs, cap=2, now=1.0)
    assert starts(jobs) == [0.0, 1.0]
    assert admitted == watched == jobs
    assert [j.status(1.0) for j in jobs] == [JobState.SCHEDULED, JobState.SCHEDULED]
    assert jobs[0].status(10.0) is JobState.IN_PROGRESS


def test_beyond_the_cap_a_job_starts_when_the_first_running_one_ends() -> None:
    a, b, c = on_demand("a", 0.0, files=3), on_demand("b", 1.0), on_demand("c", 2.0)  # a ends 40, b 21
    admit([a, b, c], cap=2, now=2.0)
    assert starts([a, b, c]) == [0.0, 1.0, None]
    assert c.status(20.0) is JobState.SCHEDULED
    admitted, watched = admit([a, b, c], cap=2, now=100.0)  # one late look admits it at the right time
    assert admitted == [c]
    assert c.started_at == b.ends_at() == 21.0
    assert watched == []  # all ended by now


def test_first_come_first_served_even_when_a_later_job_is_shorter() -> None:
    jobs = [on_demand("a", 0.0), on_demand("b", 1.0, files=5), on_demand("c", 2.0)]
    admit(jobs, cap=1, now=1000.0)
    assert starts(jobs) == [0.0, 20.0, 80.0]


def test_a_job_cancelled_while_queued_never_takes_a_place() -> None:
    a, b, c = on_demand("a", 0.0), on_demand("b", 1.0), on_demand("c", 2.0)
    admit([a, b, c], cap=1, now=5.0)
    b.stopped_at = 5.0
    admit([a, b, c], cap=1, now=100.0)
    assert starts([a, b, c]) == [0.0, None, 20.0]
    assert b.status(100.0) is JobState.STOPPED


def test_cancelling_a_running_job_frees_its_place_at_once() -> None:
    a, b = on_demand("a", 0.0), on_demand("b", 1.0)
    admit([a, b], cap=1, now=5.0)
    a.stopped_at = 5.0
    admit([a, b], cap=1, now=6.0)
    assert b.started_at == 5.0


def test_no_admission_before_the_settings_changed() -> None:
    a, b = on_demand("a", 0.0), on_demand("b", 1.0)
    admit([a, b], cap=1, now=5.0)
    admit([a, b], cap=2, now=6.0, not_before=5.5)
    assert b.started_at == 5.5


def test_the_jobs_still_to_watch() -> None:
    a, b = on_demand("a", 0.0), on_demand("b", 1.0)
    assert admit([a, b], cap=1, now=5.0)[1] == [a, b]
    assert admit([a, b], cap=1, now=25.0)[1] == [b]  # a ended at 20; b runs from 20 to 40
    assert admit([a, b], cap=1, now=40.0)[1] == []
    assert math.isinf(on_demand("q", 0.0).ends_at())  # queued: holds nothing yet, ends never


def test_the_checks_answer_with_the_documented_words() -> None:
    config = EmulatorConfig()
    check_file_limits([("a.pdf", 10_000_000)] * 10, config)
    with pytest.raises(InvalidRequest, match="limited to 10 files; this request has 11"):
        check_file_limits([("a.pdf", 1)] * 11, config)
    with pytest.raises(ApiError, match=r"limited to 10 MB in size; 'b\.pdf' has 10,000,001 bytes") as big:
        check_file_limits([("a.pdf", 1), ("b.pdf", 10_000_001)], config)
    assert big.value.status_code == 413
    check_quota(config)
    with pytest.raises(ApiError, match=r"^Insufficient API quota$") as quota:
        check_quota(EmulatorConfig(quota_exhausted=True))
    assert quota.value.status_code == 402
    check_launch_gap(None, 0.0, config)
    check_launch_gap(10.0, 11.0, config)
    with pytest.raises(ApiError, match="between on-demand job launch requests") as soon:
        check_launch_gap(10.0, 10.2, config)
    assert (soon.value.status_code, soon.value.headers) == (429, {"retry-after": "1"})
    with pytest.raises(ApiError) as later:
        check_launch_gap(10.0, 11.0, EmulatorConfig(on_demand_launch_interval=60))
    assert later.value.headers == {"retry-after": "59"}
