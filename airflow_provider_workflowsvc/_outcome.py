"""
What a finished (or abandoned) wait for a job means: one place for operator, sensor and trigger.

* :class:`JobOutcome` is the trigger event payload and the source of the task's XCom summary. It is
  validated strictly when it comes back from the triggerer: anything unexpected fails the task.
* :func:`failure_for` turns an outcome into the exception that fails the task (or ``None``).
* :class:`JobWatch` remembers what was seen of one job and logs only what changed (status transitions,
  per-node progress, an unknown status once).
* :class:`PollSchedule` decides when to poll: every ``interval`` seconds, with one last poll just
  before the deadline, none after it, and the wait ending at the deadline.

This module is imported lazily (inside methods), never at DAG-parse time.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_provider_workflowsvc.exceptions import (  # re-exported: raised here
    InvalidJobEventError,
    WorkflowJobError,
    WorkflowJobFailedError,
    WorkflowJobTimeoutError,
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    WorkflowServiceServerError,
    format_validation_errors,
)
from airflow_provider_workflowsvc.models import JobStatus

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.models import FailedFile, Job, JobDetails, NodeStats

OutcomeStatus = Literal["success", "failed", "stopped", "timeout", "error", "found"]
"""``found``: a trigger waiting for a workflow's job found it (the sensor pins it and waits for it)."""
FAILED_FILES_IN_MESSAGE = 5
FINAL_POLL_RESERVE = 5.0
"""Seconds a wait that starts past its deadline gives its one poll."""
FINAL_POLL_LEAD = 1.0
"""Seconds before the deadline the last poll starts (at most one interval); its requests are cut at
the deadline, and the wait ends at the deadline."""

_STATUS_OUTCOME: dict[JobStatus, OutcomeStatus] = {
    JobStatus.COMPLETED: "success",
    JobStatus.COMPLETED_WITH_ERRORS: "success",
    JobStatus.FAILED: "failed",
    JobStatus.STOPPED: "stopped",
}


# --------------------------------------------------------------------------------------------------
# The outcome (trigger event payload)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class NodeProgress(_Strict):
    node_name: str | None = None
    node_type: str | None = None
    node_subtype: str | None = None
    ready: int = 0
    in_progress: int = 0
    success: int = 0
    failure: int = 0


class FailedDocument(_Strict):
    document: str
    error: str = ""


class OutputFile(_Strict):
    file_id: str
    node_id: str


class JobOutcome(_Strict):
    """How a wait for a job ended. ``status`` is the verdict; ``job_status`` the job's last status."""

    status: OutcomeStatus
    job_id: str | None = Field(min_length=1)
    workflow_id: str | None = None
    job_status: str | None = None
    message: str = ""
    node_stats: list[NodeProgress] = Field(default_factory=list)
    failed_files: list[FailedDocument] = Field(default_factory=list)
    output_files: list[OutputFile] = Field(default_factory=list)
    elapsed: float | None = None

    def to_event(self) -> dict[str, Any]:
        """The JSON-serializable trigger event payload."""
        return self.model_dump(mode="json")

    def verdict(self, *, fail_on_failed_files: bool) -> str:
        """The task's verdict: ``status``, or ``failed_files`` when failed files fail a completed job."""
        if self.status == "success" and self.failed_files and fail_on_failed_files:
            return "failed_files"
        return self.status

    def summary(self, *, fail_on_failed_files: bool, workflow_id: str | None = None) -> dict[str, Any]:
        """
        The task's XCom return value: JSON-serializable, no secrets.

        ``outcome`` is the task's :meth:`verdict` (the job's own status is ``status``);
        ``workflow_id`` fills in the workflow when the wait ended before the job record was read.
        """
        return {
            "job_id": self.job_id,
            "workflow_id": self.workflow_id or workflow_id,
            "status": self.job_status,
            "outcome": self.verdict(fail_on_failed_files=fail_on_failed_files),
            "message": self.message,
            "node_stats": [n.model_dump() for n in self.node_stats],
            "failed_file_count": len(self.failed_files),
            "failed_files": [f.model_dump() for f in self.failed_files],
            "output_files": [f.model_dump() for f in self.output_files],
            "elapsed_seconds": None if self.elapsed is None else round(self.elapsed, 1),
        }


def parse_event(event: Any) -> JobOutcome:
    """Validate a trigger event; any surprise (missing, unknown status, wrong types) is an error."""
    if not isinstance(event, dict):
        raise InvalidJobEventError(f"expected a job event from the trigger, got {type(event).__name__}")
    try:
        return JobOutcome.model_validate(event)
    except ValidationError as exc:
        details = format_validation_errors(exc.errors(include_input=False, include_url=False))
        raise InvalidJobEventError(f"invalid job event from the trigger: {details}") from None


# --------------------------------------------------------------------------------------------------
# Failure semantics


def describe_failed_files(files: list[FailedDocument], limit: int = FAILED_FILES_IN_MESSAGE) -> str:
    """``- document: error`` lines for the first ``limit`` files, then ``... and N more``."""
    lines = [f"  - {f.document}: {f.error or 'no error given'}" for f in files[:limit]]
    if len(files) > limit:
        lines.append(f"  ... and {len(files) - limit} more (all are in the task log and the XCom)")
    return "\n".join(lines)


def failure_for(
    outcome: JobOutcome, *, fail_on_failed_files: bool = True, timeout_note: str = ""
) -> WorkflowJobError | None:
    """The error that fails the task for ``outcome``, or None when the task succeeds."""
    job = f"Workflow Service job {outcome.job_id}" if outcome.job_id else "Workflow Service job"
    message = outcome.message or "the service gave no message"
    if outcome.status == "success":
        if not (outcome.failed_files and fail_on_failed_files):
            return None
        text = (
            f"{job} completed, but {len(outcome.failed_files)} file(s) failed:\n"
            f"{describe_failed_files(outcome.failed_files)}"
        )
        return WorkflowJobFailedError(text, outcome)
    if outcome.status in ("failed", "stopped"):
        verb = "failed" if outcome.status == "failed" else "was stopped before it finished"
        text = f"{job} {verb}: {message}"
        if outcome.failed_files:
            text += f"\nFailed files:\n{describe_failed_files(outcome.failed_files)}"
        return WorkflowJobFailedError(text, outcome)
    if outcome.status == "timeout" and not outcome.job_id:
        return WorkflowJobTimeoutError(f"{message} within {_seconds(outcome.elapsed)} s", outcome)
    if outcome.status == "timeout":
        text = (
            f"{job} did not finish in time: {_seconds(outcome.elapsed)} s elapsed, last status "
            f"{outcome.job_status or 'unknown'}"
        )
        return WorkflowJobTimeoutError(text + (f"; {timeout_note}" if timeout_note else ""), outcome)
    return WorkflowJobError(f"Waiting for {job} failed: {message}", outcome)


def _seconds(value: float | None) -> str:
    """Seconds for a message: one decimal below 10 s (a 0.5 s timeout is not "0 s")."""
    value = value or 0.0
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def log_outcome(outcome: JobOutcome, log: logging.Logger | Any, *, fail_on_failed_files: bool) -> None:
    """
    The final summary line (with the task's verdict), and the full failed-file list (the exception
    only shows the first few).
    """
    log.info(
        "Job %s finished waiting: %s (job status %s) after %.1f s; %d output file(s), %d failed file(s)%s",
        outcome.job_id,
        outcome.verdict(fail_on_failed_files=fail_on_failed_files),
        outcome.job_status,
        outcome.elapsed or 0,
        len(outcome.output_files),
        len(outcome.failed_files),
        f"; message: {outcome.message}" if outcome.message else "",
    )
    if outcome.failed_files:
        log.warning(
            "Job %s: %d failed file(s):\n%s",
            outcome.job_id,
            len(outcome.failed_files),
            describe_failed_files(outcome.failed_files, limit=len(outcome.failed_files)),
        )


def is_transient(exc: BaseException) -> bool:
    """
    Whether a failed status request is worth trying again later (the wait goes on).

    An unreadable or unexpected 2xx answer counts, like a 503: the job goes on whatever one answer
    said, and failing the wait would leave it running, untracked. A refused connection counts (the
    service may be restarting); a TLS mismatch or an unknown host name does not.
    """
    if isinstance(exc, WorkflowServiceResponseError):
        return 200 <= exc.status_code < 300
    if isinstance(exc, WorkflowServiceConnectionError) and exc.permanent:
        return False  # a TLS or certificate mismatch, an unknown host: polling again will not help
    transient = (
        WorkflowServiceConnectionError,
        WorkflowServiceRateLimitError,
        WorkflowServiceServerError,
        asyncio.TimeoutError,
        TimeoutError,
    )
    return isinstance(exc, transient)


def survive_transient(exc: Exception, log: logging.Logger | Any, what: str, retry: str = "next poll") -> None:
    """
    Log that ``what`` failed transiently and will be tried again at the ``retry``; re-raise any
    other error (the one place deciding which failures a wait survives).
    """
    if not is_transient(exc):
        raise exc
    log.warning("%s failed (%s); trying again at the %s", what, exc, retry)


# --------------------------------------------------------------------------------------------------
# Watching one job


class JobWatch:
    """What has been seen of one job; logs transitions and per-node progress only when they change."""

    def __init__(self, job_id: str, log: logging.Logger | Any, started_at: float | None = None) -> None:
        self.job_id = job_id
        self.log = log
        self.started_at = time.time() if started_at is None else started_at
        self.status: JobStatus | None = None
        self.raw_status: str | None = None
        self.details: JobDetails | None = None
        self._progress: tuple[Any, ...] | None = None
        self._warned: set[str] = set()

    @property
    def elapsed(self) -> float:
        return max(0.0, time.time() - self.started_at)

    def observe(self, details: JobDetails | None, job: Job | None = None) -> bool:
        """Record a poll (details, and the job record when fetched); True once the job is terminal."""
        if details is not None:
            self.details = details
            self._log_progress(details.node_stats)
        status, raw = self._status_of(details, job)
        if status is JobStatus.UNKNOWN and raw not in self._warned:
            self._warned.add(raw)
            self.log.warning(
                "Job %s reports status %r, which this provider does not know; it is not treated as "
                "finished, the wait goes on until the job reports a known final status or times out",
                self.job_id,
                raw,
            )
        if status is not self.status:
            self.log.info(
                "Job %s: %s → %s (%.0f s)", self.job_id, self.status or "submitted", raw, self.elapsed
            )
        self.status, self.raw_status = status, raw
        return status.is_terminal

    @staticmethod
    def _status_of(details: JobDetails | None, job: Job | None) -> tuple[JobStatus, str]:
        """The job record's status wins when known; then the details' ``processing_status``."""
        if job is not None and job.status is not JobStatus.UNKNOWN:
            return job.status, job.status.value
        if details is not None and details.processing_status is not JobStatus.UNKNOWN:
            return details.processing_status, details.processing_status.value
        return JobStatus.UNKNOWN, (job.raw_status if job is not None else None) or "unknown"

    def confirmed_by(self, job: Job) -> bool:
        """
        Whether the job record, read after the details said terminal, agrees that the job has ended.

        A record in a known non-terminal status means the details ran ahead (or disagree): the wait
        goes on. A record whose status this provider does not know does not contradict the details.
        """
        if job.status is JobStatus.UNKNOWN or job.status.is_terminal:
            return True
        self.log.warning(
            "Job %s: the details say %s but the job record says %s; not finished yet, the wait goes on",
            self.job_id,
            self.raw_status,
            job.raw_status or job.status.value,
        )
        self.status, self.raw_status = job.status, job.status.value
        return False

    def _log_progress(self, stats: list[NodeStats]) -> None:
        key = tuple((n.node_name, n.ready, n.in_progress, n.success, n.failure) for n in stats)
        if not stats or key == self._progress:
            return
        self._progress = key
        nodes = "; ".join(
            f"{n.node_name or n.node_type or '?'}: ready {n.ready}, in progress {n.in_progress}, "
            f"success {n.success}, failure {n.failure}"
            for n in stats
        )
        self.log.info("Job %s progress: %s", self.job_id, nodes)

    def outcome(self, job: Job, failed: list[FailedFile]) -> JobOutcome:
        """The outcome of a terminal job (status from the job record when it is terminal there)."""
        status = job.status if job.status.is_terminal else (self.status or JobStatus.UNKNOWN)
        details = self.details
        return JobOutcome(
            status=_STATUS_OUTCOME.get(status, "error"),
            job_id=self.job_id,
            workflow_id=job.workflow_id,
            job_status=status.value,
            message=(details.message if details is not None else None) or "",
            node_stats=self._node_stats(),
            failed_files=[FailedDocument(document=f.document, error=f.error or "") for f in failed],
            output_files=[OutputFile(file_id=o.file_id, node_id=o.node_id) for o in job.output_node_files],
            elapsed=self.elapsed,
        )

    def _node_stats(self) -> list[NodeProgress]:
        stats = self.details.node_stats if self.details is not None else []
        fields = NodeProgress.model_fields
        return [NodeProgress(**{k: v for k, v in n.model_dump().items() if k in fields}) for n in stats]

    def timed_out(self) -> JobOutcome:
        return self._unfinished("timeout", "")

    def error(self, message: str) -> JobOutcome:
        return self._unfinished("error", message)

    def _unfinished(self, status: OutcomeStatus, message: str) -> JobOutcome:
        return JobOutcome(
            status=status,
            job_id=self.job_id,
            job_status=self.raw_status,
            message=message,
            node_stats=self._node_stats(),
            elapsed=self.elapsed,
        )


def unfound_outcome(status: OutcomeStatus, message: str, elapsed: float) -> JobOutcome:
    """An outcome for a wait that never found its job (sensor waiting for a workflow's job)."""
    return JobOutcome(status=status, job_id=None, message=message, elapsed=elapsed)


# --------------------------------------------------------------------------------------------------
# When to poll


class PollSchedule:
    """
    Poll every ``interval`` s; the last poll ``FINAL_POLL_LEAD`` s (at most one interval) before the
    deadline, none after; the wait then ends at the deadline (:meth:`rest`), so it lasts the timeout
    the user set, and no request outlives it.

    The first pause is lengthened by a random part of up to a fifth of the interval, so that many waits
    deferred together (a backfill, a mapped task) do not poll the service in lockstep; lengthening, not
    shortening, so the jitter never adds a poll.
    """

    def __init__(self, deadline: float, interval: float) -> None:
        self.deadline = deadline
        self.cutoff = deadline
        """When the requests of a poll must end: the deadline, or a moment after a late first poll."""
        self.interval = max(float(interval), 0.0)
        self._lead = min(FINAL_POLL_LEAD, self.interval)
        self._final_done = False
        self._polled = False
        self._first_pause = self.interval * random.uniform(1.0, 1.2)

    def remaining(self) -> float:
        return self.deadline - time.time()

    def time_left(self) -> float:
        """Seconds the current poll's requests may still take."""
        return self.cutoff - time.time()

    def next_pause(self) -> float | None:
        """
        Seconds to sleep before the next poll, or None when the polls are over.

        A wait that starts at or past its deadline (a triggerer that picked the trigger up late) polls
        once at once, with ``FINAL_POLL_RESERVE`` seconds for it, before it reports a timeout.
        """
        remaining = self.remaining()
        first, self._polled = not self._polled, True
        if first and remaining <= 0:
            self._final_done = True
            self.cutoff = time.time() + FINAL_POLL_RESERVE
            return 0.0
        if remaining <= 0 or self._final_done:
            return None
        pause, self._first_pause = self._first_pause, self.interval
        if pause < remaining - self._lead:
            return pause
        self._final_done = True
        return max(remaining - self._lead, 0.0)

    def rest(self) -> float:
        """
        Seconds from now to the deadline, slept after the last poll: a wait that did not see its job
        end lasts its whole timeout (a last poll that answered early does not end it early).
        """
        return max(self.remaining(), 0.0)


# --------------------------------------------------------------------------------------------------
# Finding a workflow's job


def parse_created_after(value: Any) -> datetime | None:
    """A timezone-aware UTC datetime from a datetime or ISO-8601 string (naive means UTC)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise WorkflowServiceError(
                f"created_after must be an ISO-8601 date-time, got {value!r}"
            ) from None
    if not isinstance(value, datetime):
        raise WorkflowServiceError(f"created_after must be a date-time, got {type(value).__name__}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def pick_job(jobs: list[Job], created_after: datetime | None, pick: str = "latest") -> Job | None:
    """The latest (or earliest) job created after ``created_after``; jobs without a date never match."""
    dated = []
    for job in jobs:
        if job.created_at is None:
            continue
        created = job.created_at if job.created_at.tzinfo else job.created_at.replace(tzinfo=timezone.utc)
        if created_after is None or created > created_after:
            dated.append((created, job))
    if not dated:
        return None
    dated.sort(key=lambda item: item[0])
    return dated[-1][1] if pick == "latest" else dated[0][1]
