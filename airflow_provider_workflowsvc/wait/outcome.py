"""
What a finished (or abandoned) wait for a job means: :class:`JobOutcome` (the event payload, validated
strictly by :func:`parse_event`), :func:`failure_for` (the task's failure and whether retries apply) and
:func:`log_outcome`. It needs neither the hook nor the rest of :mod:`.wait`; imported lazily.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from airflow_provider_workflowsvc._compat import AirflowFailException, AirflowSensorTimeout
from airflow_provider_workflowsvc._url_secrets import mask_url_secrets
from airflow_provider_workflowsvc.exceptions import (
    InvalidJobEventError,
    WorkflowJobError,
    WorkflowJobFailedError,
    WorkflowJobTimeoutError,
    WorkflowJobWaitError,
    format_validation_errors,
)
from airflow_provider_workflowsvc.models import JobStatus, NodeCounts

OutcomeStatus = Literal["success", "failed", "stopped", "timeout", "error", "found"]
"""``found``: a trigger waiting for a workflow's job found it (the sensor pins it and waits for it)."""
FAILED_FILES_IN_MESSAGE = 5

STATUS_OUTCOME: dict[JobStatus, OutcomeStatus] = {
    JobStatus.COMPLETED: "success",
    JobStatus.COMPLETED_WITH_ERRORS: "success",
    JobStatus.FAILED: "failed",
    JobStatus.STOPPED: "stopped",
}
"""The outcome of a wait that saw its job end in each final status (any other: ``error``)."""

ServiceText = Annotated[str, AfterValidator(mask_url_secrets)]
"""Text the service wrote (its job message, failed-file names and errors, what ended a wait), masked as it
enters the outcome: what its URLs may carry as credentials never reaches the event, the XCom, the
exception or the log (the same rule as operator fields)."""


# --------------------------------------------------------------------------------------------------
# The outcome (trigger event payload)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def to_event(self) -> dict[str, Any]:
        """Return the JSON-serializable trigger event payload."""
        return self.model_dump(mode="json")


class NodeProgress(_Strict, NodeCounts):
    """Per-node document counts of the job, as the wait last saw them."""


class FailedDocument(_Strict):
    """A document the job could not process, with the service's error."""

    document: ServiceText
    error: ServiceText = ""


class OutputFile(_Strict):
    """
    An output of the job (local destinations): the file, the node that wrote it, and the document it
    was made from (the user's own file name, as the output names it; None when unknown).
    """

    file_id: str
    node_id: str
    document: str | None = None


class JobOutcome(_Strict):
    """How a wait for a job ended. ``status`` is the verdict; ``job_status`` the job's last status."""

    status: OutcomeStatus
    job_id: str | None = Field(min_length=1)
    workflow_id: str | None = None
    workflow_name: str | None = None
    """The workflow's name, where the job record gives it (the live service's does)."""
    job_status: str | None = None
    message: ServiceText = ""
    node_stats: list[NodeProgress] = Field(default_factory=list)
    failed_files: list[FailedDocument] = Field(default_factory=list)
    output_files: list[OutputFile] = Field(default_factory=list)
    elapsed: float | None = None
    """How long the wait lasted (not the job: it may have started before the wait, or ended before
    the poll that saw it end)."""
    job_seconds: float | None = None
    """The job's own run time, where its record gives it: ``runtime`` (platform dialect), else from
    its ``created_at`` to the read that found it ended; ``job_seconds_from`` says which."""
    job_seconds_from: Literal["runtime", "created_at"] | None = None

    @property
    def observed(self) -> bool:
        """Whether the wait observed its job to its end or its own deadline (not ``error``)."""
        return self.status != "error"

    def verdict(self, *, fail_on_failed_files: bool) -> str:
        """Return the task's verdict: ``status``, or ``failed_files`` when they fail a completed job."""
        if self.status == "success" and self.failed_files and fail_on_failed_files:
            return "failed_files"
        return self.status

    def summary(self, *, fail_on_failed_files: bool, workflow_id: str | None = None) -> dict[str, Any]:
        """Return the task's XCom value (JSON, no secrets): ``outcome`` is the task's :meth:`verdict`."""
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
            "job_seconds": None if self.job_seconds is None else round(self.job_seconds, 1),
            "job_seconds_from": self.job_seconds_from,
        }

    def durations(self) -> str:
        """Both times, each named: the job's own (where its record gives it) and the wait's."""
        wait = f"the wait took {_seconds(self.elapsed)} s"
        if self.job_seconds is None:
            return wait
        ran = _seconds(self.job_seconds)
        if self.job_seconds_from == "runtime":
            return f"the job ran {ran} s (its runtime), {wait}"
        return f"the job ran at most {ran} s (its created_at to the read that saw it end), {wait}"


def parse_event(event: Any) -> JobOutcome:
    """Validate a trigger event; any surprise (missing, unknown status, wrong types) is an error."""
    return _validated(JobOutcome, event, "job event")


S = TypeVar("S", bound=_Strict)


def _validated(model: type[S], event: Any, what: str) -> S:
    if not isinstance(event, dict):
        raise InvalidJobEventError(f"expected a {what} from the trigger, got {type(event).__name__}")
    try:
        return model.model_validate(event)
    except ValidationError as exc:
        details = format_validation_errors(exc.errors(include_input=False, include_url=False))
        raise InvalidJobEventError(f"invalid {what} from the trigger: {details}") from None


class JobsOutcome(_Strict):
    """How a wait for several jobs ended (the one event of an on-demand task's wait): each job's outcome."""

    outcomes: list[JobOutcome] = Field(min_length=1)
    resume_with: dict[str, Any] | None = None
    """What the waiting task handed the trigger to get back (its plan), unchanged."""


def parse_jobs_event(event: Any) -> JobsOutcome:
    """Validate the event of a wait for several jobs; any surprise is an error (as :func:`parse_event`)."""
    return _validated(JobsOutcome, event, "jobs event")


# --------------------------------------------------------------------------------------------------
# Failure semantics


def describe_failed_files(files: list[FailedDocument], limit: int = FAILED_FILES_IN_MESSAGE) -> str:
    """``- document: error`` lines for the first ``limit`` files, then ``... and N more``."""
    lines = [f"  - {f.document}: {f.error or 'no error given'}" for f in files[:limit]]
    if len(files) > limit:
        lines.append(f"  ... and {len(files) - limit} more (all are in the task log and the XCom)")
    return "\n".join(lines)


def failure_for(
    outcome: JobOutcome, *, fail_on_failed_files: bool = True, timeout_note: str = "", owns_job: bool = True
) -> BaseException | None:
    """
    Return the error that fails the task for ``outcome``, or None when the task succeeds.

    A wait that could not observe its job is :class:`WorkflowJobWaitError` (retryable); a task that ran the
    job (``owns_job``) may retry whatever the job did; for a job it does not own (the sensor) the job's
    verdict and its own timeout are ``AirflowFailException`` / ``AirflowSensorTimeout`` (no retry).
    """
    error = _job_error(outcome, fail_on_failed_files, timeout_note)
    if error is None or owns_job or not outcome.observed:
        return error
    final = (
        AirflowSensorTimeout(str(error)) if outcome.status == "timeout" else AirflowFailException(str(error))
    )
    final.__cause__ = error
    return final


def _job_error(outcome: JobOutcome, fail_on_failed_files: bool, timeout_note: str) -> WorkflowJobError | None:
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
            f"{job} did not finish in time: the wait took {_seconds(outcome.elapsed)} s, last status "
            f"{outcome.job_status or 'unknown'}"
        )
        return WorkflowJobTimeoutError(text + (f"; {timeout_note}" if timeout_note else ""), outcome)
    return WorkflowJobWaitError(f"Waiting for {job} failed: {message}", outcome)


def _seconds(value: float | None) -> str:
    """Seconds for a message: one decimal below 10 s (a 0.5 s timeout is not "0 s")."""
    value = value or 0.0
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def log_outcome(
    outcome: JobOutcome, log: logging.Logger | Any, *, fail_on_failed_files: bool, then: str = ""
) -> None:
    """Log the final summary line (the task's verdict, then what follows: ``then``) and every failed file."""
    log.info(
        "Job %s finished waiting: %s (job status %s); %s; %d output file(s), %d failed file(s)%s%s",
        outcome.job_id,
        outcome.verdict(fail_on_failed_files=fail_on_failed_files),
        outcome.job_status,
        outcome.durations(),
        len(outcome.output_files),
        len(outcome.failed_files),
        f"; message: {outcome.message}" if outcome.message else "",
        f"; {then}" if then else "",
    )
    if outcome.failed_files:
        log.warning(
            "Job %s: %d failed file(s):\n%s",
            outcome.job_id,
            len(outcome.failed_files),
            describe_failed_files(outcome.failed_files, limit=len(outcome.failed_files)),
        )


def unfound_outcome(status: OutcomeStatus, message: str, elapsed: float) -> JobOutcome:
    """Build the outcome of a wait that never found its job (sensor waiting for a workflow's job)."""
    return JobOutcome(status=status, job_id=None, message=message, elapsed=elapsed)


def broken_outcome(exc: BaseException, job_id: str | None, elapsed: float) -> JobOutcome:
    """Build the outcome of a wait that could not observe its job: what stopped it (see ``failure_for``)."""
    return JobOutcome(
        status="error", job_id=job_id or None, message=f"{type(exc).__name__}: {exc}", elapsed=elapsed
    )
