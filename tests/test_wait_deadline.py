"""The deadline of a wait: the operator's ``timeout``, or what is left of Airflow's ``execution_timeout``
counted from the try's start (``ti.start_date``, kept across deferrals) — issue #24."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from airflow_provider_workflowsvc._compat import AirflowTaskTimeout
from airflow_provider_workflowsvc._tasks.deadline import timeout_failure, wait_deadline
from airflow_provider_workflowsvc.exceptions import WorkflowJobTimeoutError


def context_started(seconds_ago: float, naive: bool = False) -> dict[str, object]:
    start = datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)
    return {"ti": SimpleNamespace(start_date=start.replace(tzinfo=None) if naive else start)}


def test_without_execution_timeout_the_operator_timeout_decides() -> None:
    assert wait_deadline(context_started(100), 1000.0, 60.0, None) == 1060.0


def test_what_is_left_of_execution_timeout_counts_from_the_try_start_across_deferrals() -> None:
    now = time.time()
    # The try started 100 s ago (an earlier deferral); execution_timeout 120 s leaves ~20 s.
    deadline = wait_deadline(context_started(100), now, 3600.0, timedelta(seconds=120))
    assert abs(deadline - (now + 20)) < 1
    naive = wait_deadline(context_started(100, naive=True), now, 3600.0, timedelta(seconds=120))
    assert abs(naive - deadline) < 1  # a naive start date is UTC


def test_the_operator_timeout_wins_when_it_is_earlier() -> None:
    now = time.time()
    assert round(wait_deadline(context_started(0), now, 30.0, timedelta(hours=1)) - now) == 30


def test_without_a_start_date_the_wait_start_is_the_try_start() -> None:
    assert wait_deadline({}, 1000.0, 3600.0, timedelta(seconds=10)) == 1010.0


def test_a_wait_ended_by_execution_timeout_fails_as_airflow_task_timeout() -> None:
    error = WorkflowJobTimeoutError("job j did not finish in time")
    failure = timeout_failure(context_started(30), error, timedelta(seconds=30))
    assert isinstance(failure, AirflowTaskTimeout)
    assert "execution_timeout (30 s) reached while waiting: job j did not finish in time" in str(failure)
    assert failure.__cause__ is error
    # The operator's own timeout ended it (execution_timeout still far): its own error stays.
    assert timeout_failure(context_started(30), error, timedelta(seconds=300)) is error
    assert timeout_failure(context_started(30), error, None) is error
    assert timeout_failure({}, error, timedelta(seconds=1)) is error
