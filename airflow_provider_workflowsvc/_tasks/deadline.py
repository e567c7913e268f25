"""The deadline of a wait: its own timeout, or what is left of the task's ``execution_timeout``."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any


def wait_deadline(context: Any, started: float, timeout: float, execution_timeout: timedelta | None) -> float:
    """
    Return when a wait must end (epoch seconds): the earlier of ``started + timeout`` and the end of
    ``execution_timeout`` from the try's start (``ti.start_date``, kept across deferrals; else ``started``).
    Airflow applies ``execution_timeout`` to ``execute()`` only, so the wait carries it in both modes.
    """
    own = started + timeout
    if not execution_timeout:
        return own
    return min(own, (try_started(context) or started) + execution_timeout.total_seconds())


def try_started(context: Any) -> float | None:
    """Epoch seconds the running try started (``ti.start_date``; a naive date is UTC), else None."""
    ti = context.get("ti") if hasattr(context, "get") else None
    start = getattr(ti, "start_date", None)
    if not isinstance(start, datetime):
        return None
    return (start if start.tzinfo else start.replace(tzinfo=timezone.utc)).timestamp()


EXECUTION_TIMEOUT_SLACK = 1.0
"""Seconds before the end of ``execution_timeout`` a timed-out wait is taken to have been ended by it."""


def timeout_failure(context: Any, error: BaseException, execution_timeout: timedelta | None) -> BaseException:
    """
    Return the failure of a timed-out wait: Airflow's task timeout when the task's ``execution_timeout`` ended
    it (as the worker fails a task it runs too long), else ``error`` (the wait's own ``timeout``).
    """
    from airflow_provider_workflowsvc._compat import AirflowTaskTimeout

    started = try_started(context)
    if not execution_timeout or started is None:
        return error
    seconds = execution_timeout.total_seconds()
    if time.time() < started + seconds - EXECUTION_TIMEOUT_SLACK:
        return error
    timeout = AirflowTaskTimeout(f"execution_timeout ({seconds:g} s) reached while waiting: {error}")
    timeout.__cause__ = error
    return timeout
