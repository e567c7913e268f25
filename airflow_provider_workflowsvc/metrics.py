"""
The provider's metrics: each name (under ``workflowsvc.``), kind and tags declared once here
(:data:`METRICS`; what each means: docs/provider/metrics.rst), sent through Airflow's ``Stats`` as the
deployment's ``[metrics]`` says. Call sites report what happened through the functions below, which
pick the metric. A tag value is one of a few per deployment (never a job id or a file name), reduced
to the characters every backend takes; emitting never fails a task (a failure is logged once).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_workflowsvc._compat import airflow_stats
from airflow_provider_workflowsvc.exceptions import WorkflowServiceApiError, WorkflowServiceConnectionError

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

PREFIX = "workflowsvc"
Kind = Literal["counter", "timer"]

_log = logging.getLogger(__name__)


TASK_TAGS = ("dag_id", "task_id")


@dataclass(frozen=True)
class Metric:
    """One metric: its full name (under :data:`PREFIX`), kind and tags (in this order)."""

    name: str
    kind: Kind
    tags: tuple[str, ...]

    @property
    def per_task(self) -> bool:
        """Whether it belongs to a task: tagged :data:`TASK_TAGS`, also sent under a name holding them."""
        return self.tags[-len(TASK_TAGS) :] == TASK_TAGS

    def emit(self, value: float = 1, /, **tags: Any) -> None:
        """
        Count ``value`` (a counter) or record ``value`` seconds (a timer), with exactly its own tags; one of
        a task first under its name with the task's (as Airflow sends ``ti.finish.<dag_id>.<task_id>``).
        """
        labels = {tag: _tag_value(tags.get(tag)) for tag in self.tags}
        sends = [(self.name, labels)]
        try:
            if tags.get("dag_id") and tags.get("task_id") and self.per_task and _legacy_names():
                rest = {tag: label for tag, label in labels.items() if tag not in TASK_TAGS}
                sends.insert(0, (".".join([self.name, *(_name_part(tags[tag]) for tag in TASK_TAGS)]), rest))
            stats = _stats()
            for name, sent in sends:
                if self.kind == "counter":
                    stats.incr(name, int(value), tags=sent)
                else:
                    stats.timing(name, timedelta(seconds=max(float(value), 0.0)), tags=sent)
        except Exception as exc:  # a metrics backend never fails the task
            _failed_once(exc)


_DECLARED: list[Metric] = []


def _metric(name: str, kind: Kind, tags: tuple[str, ...]) -> Metric:
    metric = Metric(f"{PREFIX}.{name}", kind, tags)
    _DECLARED.append(metric)
    return metric


REQUEST_TAGS = ("operation", "conn_id")
WORKFLOW_TAGS = ("workflow", "conn_id")
RUN_TAGS = (*WORKFLOW_TAGS, *TASK_TAGS)

STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
REQUESTS = {
    status_class: _metric(f"request.{status_class}", "counter", REQUEST_TAGS)
    for status_class in STATUS_CLASSES
}
NO_ANSWER = _metric("request.no_answer", "counter", REQUEST_TAGS)
THROTTLED = _metric("request.throttled", "counter", REQUEST_TAGS)
RETRIED = _metric("request.retried", "counter", (*REQUEST_TAGS, "reason"))
RETRY_AFTER = _metric("request.retry_after", "timer", REQUEST_TAGS)

RUN_ADOPTED = _metric("run.adopted", "counter", RUN_TAGS)
RUN_FAILED_CLOSED = _metric("run.failed_closed", "counter", RUN_TAGS)
RUN_FOUND_RUNNING = _metric("run.found_running", "counter", (*WORKFLOW_TAGS, "if_running", *TASK_TAGS))

JOB_OUTCOMES = ("completed", "completed_with_failed_files", "failed", "stopped", "timed_out", "wait_failed")
JOBS = {outcome: _metric(f"job.{outcome}", "counter", RUN_TAGS) for outcome in JOB_OUTCOMES}
FAILED_DOCUMENTS = _metric("job.failed_documents", "counter", RUN_TAGS)
WAIT_TIME = _metric("job.wait_time", "timer", RUN_TAGS)
RUN_TIME = _metric("job.run_time", "timer", RUN_TAGS)

SHARED_LISTINGS = _metric("shared_poll.listings", "counter", WORKFLOW_TAGS)
SHARED_SERVED = _metric("shared_poll.polls_served", "counter", WORKFLOW_TAGS)
SHARED_FAILED = _metric("shared_poll.listing_failed", "counter", WORKFLOW_TAGS)

LANE_RETIRED = _metric("pool.lane_retired", "counter", ())
OVERFLOWED = _metric("pool.overflowed", "counter", ())
OVERFLOW_FULL = _metric("pool.overflow_full", "counter", ())

REREAD = _metric("connection.reread", "counter", ("conn_id",))
REREAD_FAILED = _metric("connection.reread_failed", "counter", ("conn_id",))

WATCHER_LISTINGS = _metric("watcher.listings", "counter", WORKFLOW_TAGS)
WATCHER_LISTING_FAILED = _metric("watcher.listing_failed", "counter", WORKFLOW_TAGS)
WATCHER_EVENTS = _metric("watcher.events", "counter", WORKFLOW_TAGS)
WATCHER_LAG = _metric("watcher.lag", "timer", WORKFLOW_TAGS)

METRICS: tuple[Metric, ...] = tuple(_DECLARED)
"""Every metric the provider can emit, in the order declared here: the docs' table's."""

ON_DEMAND = "on-demand"
"""The ``workflow`` of on-demand jobs: each runs on a temporary workflow (never a tag value of its own)."""


# --------------------------------------------------------------------------------------------------
# What happened, reported by the places it happens


def answered(operation: str, conn_id: str, status: int) -> None:
    """Count an answer of ``status`` to ``operation`` (and a 429 as throttled)."""
    metric = REQUESTS.get(f"{status // 100}xx")
    if metric is not None:
        metric.emit(operation=operation, conn_id=conn_id)
    if status == 429:
        THROTTLED.emit(operation=operation, conn_id=conn_id)


def no_answer(operation: str, conn_id: str) -> None:
    """Count a request that got no answer."""
    NO_ANSWER.emit(operation=operation, conn_id=conn_id)


def retrying(operation: str, conn_id: str, exc: BaseException, pause: float) -> None:
    """Count a request sent again after ``exc`` in ``pause`` seconds (as ``Retry-After`` asked, if it did)."""
    RETRIED.emit(operation=operation, conn_id=conn_id, reason=retry_reason(exc))
    if getattr(exc, "retry_after", None) is not None:
        RETRY_AFTER.emit(pause, operation=operation, conn_id=conn_id)


def retry_reason(exc: BaseException | None) -> str:
    """Why a request is sent again: the answer's status, the kind of connection failure, else its type."""
    if isinstance(exc, WorkflowServiceConnectionError):
        return exc.kind or "connection"
    if isinstance(exc, WorkflowServiceApiError):
        return str(exc.status_code)
    return type(exc).__name__


def run_adopted(workflow_id: str | None, conn_id: str) -> None:
    RUN_ADOPTED.emit(workflow=workflow_id or ON_DEMAND, conn_id=conn_id, **_task())


def run_failed_closed(workflow_id: str | None, conn_id: str) -> None:
    RUN_FAILED_CLOSED.emit(workflow=workflow_id or ON_DEMAND, conn_id=conn_id, **_task())


def found_running(workflow_id: str, conn_id: str, if_running: str) -> None:
    RUN_FOUND_RUNNING.emit(workflow=workflow_id, conn_id=conn_id, if_running=if_running, **_task())


def job_ended(outcome: JobOutcome, conn_id: str, workflow: str | None, task: Any = None) -> None:
    """
    Count how a wait for a job ended, its failed documents, and time the wait and the job; ``workflow``:
    the tag (:func:`workflow_of`, or :data:`ON_DEMAND`); ``task``: the task instance it ended for (a
    trigger's; by default the task running in this process).
    """
    tags = {"workflow": workflow, "conn_id": conn_id, **_task(task)}
    JOBS[_outcome_name(outcome)].emit(**tags)
    if outcome.failed_files:
        FAILED_DOCUMENTS.emit(len(outcome.failed_files), **tags)
    if outcome.elapsed is not None:
        WAIT_TIME.emit(outcome.elapsed, **tags)
    if outcome.job_seconds is not None:
        RUN_TIME.emit(outcome.job_seconds, **tags)


def workflow_of(outcome: JobOutcome, known: str | None = None) -> str | None:
    """Return the ``workflow`` tag of a job's metrics: its record's name, else its id, or ``known``."""
    return outcome.workflow_name or outcome.workflow_id or known


def _outcome_name(outcome: JobOutcome) -> str:
    if outcome.status == "success":
        return "completed_with_failed_files" if outcome.failed_files else "completed"
    if outcome.status in ("failed", "stopped"):
        return outcome.status
    return "timed_out" if outcome.status == "timeout" else "wait_failed"


def shared_listing(workflow_id: str | None, conn_id: str, failed: bool = False) -> None:
    (SHARED_FAILED if failed else SHARED_LISTINGS).emit(workflow=workflow_id or ON_DEMAND, conn_id=conn_id)


def shared_poll_served(workflow_id: str | None, conn_id: str) -> None:
    SHARED_SERVED.emit(workflow=workflow_id or ON_DEMAND, conn_id=conn_id)


def lane_retired() -> None:
    LANE_RETIRED.emit()


def read_moved_to_overflow(moved: bool) -> None:
    """Count a read that hung past the lane limit: moved to the overflow, or (overflow full) cut."""
    (OVERFLOWED if moved else OVERFLOW_FULL).emit()


def connection_reread(conn_id: str, failed: bool = False) -> None:
    (REREAD_FAILED if failed else REREAD).emit(conn_id=conn_id)


def watcher_listing(workflow_id: str | None, conn_id: str, failed: bool = False) -> None:
    metric = WATCHER_LISTING_FAILED if failed else WATCHER_LISTINGS
    metric.emit(workflow=workflow_id or "all", conn_id=conn_id)


def watcher_event(workflow_id: str | None, conn_id: str, lag: float | None) -> None:
    """Count an event of the job-event watcher; ``lag``: seconds from the job's end to the event."""
    tags = {"workflow": workflow_id or "all", "conn_id": conn_id}
    WATCHER_EVENTS.emit(**tags)
    if lag is not None:
        WATCHER_LAG.emit(lag, **tags)


# --------------------------------------------------------------------------------------------------
# Sending


def _task(ti: Any = None) -> dict[str, str]:
    """
    Return the ``dag_id`` and ``task_id`` of ``ti``, else of the task running in this process (a
    worker's; a triggerer has none: its triggers give theirs); empty when there is none (a command).
    """
    if ti is None:
        try:
            from airflow.sdk import get_current_context

            ti = get_current_context()["ti"]
        except Exception:  # no task runs here
            return {}
    return {"dag_id": ti.dag_id, "task_id": ti.task_id}


@functools.cache  # Airflow reads it once per process, as it sets up its metrics
def _legacy_names() -> bool:
    """Return ``[metrics] legacy_names_on`` (3.2+; default True; 3.0 and 3.1 always send both names)."""
    from airflow_provider_workflowsvc._compat import conf

    return conf.getboolean("metrics", "legacy_names_on", fallback=True)


def _name_part(value: Any) -> str:
    """Write a DAG or task id as part of a name: a dot (a task group's) is ``__``, as Airflow does."""
    return _UNSAFE.sub("_", str(value)).replace(".", "__")


@functools.cache  # resolved once, not at every metric
def _stats() -> Any:
    return airflow_stats()


_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-/]")
TAG_VALUE_LENGTH = 64


@functools.lru_cache(maxsize=1024)
def _tag_value(value: Any) -> str:
    """
    ``value`` in the characters every backend takes in a tag (StatsD with InfluxDB tags refuses a whole
    metric over one space, comma or equals sign), cut to :data:`TAG_VALUE_LENGTH`; "none" when empty.
    """
    text = _UNSAFE.sub("_", str(value)) if value not in (None, "") else "none"
    return text[:TAG_VALUE_LENGTH]


_FAILED: list[str] = []


def _failed_once(exc: Exception) -> None:
    if not _FAILED:
        _FAILED.append(type(exc).__name__)
        _log.warning(
            "Sending a metric failed (%s: %s); the metrics of this process may be missing",
            type(exc).__name__,
            exc,
        )
