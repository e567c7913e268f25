"""
What a failed run (or launch) request proves, and the search for the job it may have created: the
rules :mod:`.submit` follows (:func:`proves_refused`, :func:`own_job`, :func:`await_own_job`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.exceptions import (
    AmbiguousRunError,  # re-exported: raised here
    InputReadError,
    WorkflowServiceApiError,
    WorkflowServiceConnectionError,
    WorkflowServiceInputError,
    WorkflowServiceQuotaError,
    WorkflowServiceResponseError,
)
from airflow_provider_workflowsvc.models import ACTIVE_JOB_STATUSES, JobStatus

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job

Log = logging.Logger | Any

CLOCK_ALLOWANCE = 5.0
"""Seconds allowed for the service's clock between its readings (``created_at`` to the second, a
job written a moment after the newest one listed) when placing a job in the send window."""
PENDING_RUN_TTL = 6 * 3600.0
"""Seconds after which a pending-run record no longer stops a new run (a stale record never blocks a
task for ever)."""
GRACE_PAUSES = (0.5, 1.0, 2.0, 4.0)
"""Pauses between job listings while looking for a run's job (the last one repeats)."""
now = time.time
"""This worker's clock (tests replace the module's ``time.sleep``, never the clock)."""
REFUSED_STATUS = frozenset({429, 503})
"""Answers that prove the service did not process the request and ask to be tried again."""
ACTIVE = ACTIVE_JOB_STATUSES
"""The statuses of the active jobs, in the order listed (the hook spells each filter as the service does)."""
ENDED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED)
"""The statuses of the ended jobs (the workflow's history)."""
PROOF_READS = 6
"""Job records (``GET /jobs/{id}``) of jobs not listed active one search reads at most when the listing
leaves ``input_file_ids`` out; past it the search fails closed (docs/decisions/runs.md, "The search after
a lost answer")."""


# --------------------------------------------------------------------------------------------------
# What a failed run request proves


def proves_refused(exc: BaseException) -> bool:
    """
    Tell whether any exception the run request can raise proves the service did not process it: only a
    complete non-2xx answer below 500 (or a 503), or an error before anything was sent. Anything else (an
    unreadable answer, a connection lost after sending, a 5xx, an unknown exception): a job may exist.
    """
    if isinstance(exc, WorkflowServiceInputError):
        return True  # raised before the request was built: nothing was sent
    if isinstance(exc, InputReadError):
        # An input failed while its body was being sent: the request was aborted before its declared
        # length, and a server acts on no incomplete HTTP request (a truncated multipart body is not a run).
        return True
    if isinstance(exc, WorkflowServiceConnectionError):
        return not exc.sent
    if isinstance(exc, WorkflowServiceApiError):
        return exc.status_code in REFUSED_STATUS or 400 <= exc.status_code < 500
    return False  # an answer whose body cannot be read (a 2xx among them), anything unknown


def may_retry_refused(exc: BaseException) -> bool:
    """
    Tell whether a refusal is worth sending the run again for (service busy, or request never left);
    never a used-up quota (a 402, or a 429 saying so).
    """
    if isinstance(exc, WorkflowServiceConnectionError):
        return not (exc.sent or exc.unreached)
    if isinstance(exc, WorkflowServiceQuotaError):
        return False
    return isinstance(exc, WorkflowServiceApiError) and exc.status_code in REFUSED_STATUS


# --------------------------------------------------------------------------------------------------
# The evidence


@dataclass(frozen=True)
class SentRun:
    """One run request (or on-demand launch): what identifies its job among the jobs listed."""

    workflow_id: str | None
    """The workflow run; None for an on-demand launch (its job is looked for among all jobs)."""
    sent_at: float
    """Epoch seconds (the sending worker's clock) just before the request left."""
    files: tuple[str, ...] | None
    """The file names sent (with the marker, if any), None for a run without a body."""
    marker: str | None = None
    """The marker every sent name carries; None for unmarked names or a run without files."""
    recorded: str | None = None
    """The job id the task state store already holds (an earlier try's job): never an unproven
    candidate of this run."""
    failed_closed: bool = False
    """A try already failed with AmbiguousRunError on this run (a new try then comes from a person
    clearing the task: no automatic retry follows that error)."""
    answered_at: float | None = None
    """Epoch seconds (the sending worker's clock) the request's failure came back: a job the service
    made before answering was made just before (None: not known, an earlier try's run)."""
    record_key: str = "workflowsvc_pending_run"
    """The task state key of its pending record (the messages say how to send it again)."""

    @property
    def is_launch(self) -> bool:
        """An on-demand job's launch: its job belongs to no workflow, and is looked for among all jobs."""
        return self.workflow_id is None

    @property
    def what(self) -> str:
        """This request in words: ``run of workflow …`` or ``launch of an on-demand job``."""
        return "launch of an on-demand job" if self.is_launch else f"run of workflow {self.workflow_id}"

    @property
    def request(self) -> str:
        """The request in words: ``run request`` or ``launch request``."""
        return "launch request" if self.is_launch else "run request"

    @property
    def where(self) -> str:
        """Where its job is looked for: the workflow's jobs, or (a launch) all the account's jobs."""
        return "the account's jobs" if self.is_launch else "the workflow's jobs"

    def carried_by(self, job: Job) -> bool | None:
        """
        Whether the job's record lists a name carrying this run's marker; None when it cannot tell. Without a
        marker, a record listing none of the names sent (compared without folders) is another's: False.
        """
        if job.input_file_ids is None or not self.files:
            return None
        if self.marker is not None:
            return any(self.marker in name for name in job.input_file_ids)
        listed = {base_name(name) for name in job.input_file_ids}
        return None if listed & {base_name(name) for name in self.files} else False

    def lists_these_files(self, job: Job) -> bool:
        """Tell whether the job's record lists exactly the names sent (a hint for a person, never proof)."""
        names = job.input_file_ids
        return bool(self.files) and names is not None and sorted(names) == sorted(self.files or ())


def base_name(name: str) -> str:
    """Return a sent name without its folders (what a service that keeps only base names shows)."""
    return name.rsplit("/", 1)[-1]


def _created(job: Job, log: Log | None = None) -> datetime | None:
    """
    Return the job's ``created_at``; None when absent or written without a zone (never read as UTC: a
    warning says so when ``log`` is given).
    """
    created = job.created_at
    if created is None or created.tzinfo is not None:
        return created
    if log is not None:
        log.warning(
            "Job %s has a creation time without a time zone (%s): it is not placed in time",
            job.id,
            created.isoformat(),
        )
    return None


def own_job(found: Sequence[Job], run: SentRun) -> Job | None:
    """
    Return this run's job among its candidates ``found``, None when there is none yet; AmbiguousRunError
    when one cannot be proven (no file names listed or sent, no marker, or several carry its marker).
    """
    mine = [job for job in found if run.carried_by(job)]
    unproven = [job for job in found if run.carried_by(job) is None and job.id != run.recorded]
    if len(mine) == 1:
        return mine[0]
    if len(mine) > 1:
        raise _ambiguous(
            run,
            mine,
            "each lists a file name carrying this run's marker: the service "
            "created several jobs for the one request (a gateway may have sent it twice)",
        )
    if unproven:
        reason = (
            "this run sent no files, so nothing in a job record can show which run created it"
            if not run.files
            else "the files were uploaded under their own names (mark_uploads=False, the default), so "
            "nothing shows which run created a job: another run of the same files looks the same"
            if run.marker is None
            else "the service's job records do not list their input files (no input_file_ids), so "
            "nothing shows which run created them"
        )
        raise _ambiguous(run, unproven, reason)
    return None


def _ambiguous(run: SentRun, jobs: Sequence[Job], reason: str) -> AmbiguousRunError:
    ids = ", ".join(sorted(job.id for job in jobs))
    same = sorted(job.id for job in jobs if run.marker is None and run.lists_these_files(job))
    hint = f" (job(s) {', '.join(same)} list exactly this run's file names)" if same else ""
    return AmbiguousRunError(
        f"cannot prove which job this task's {run.what} created: job(s) {ids} appeared while its "
        f"{run.request} was in flight{hint}, but {reason}. Nothing was sent again. What to do: check "
        f"job(s) {ids} in the service; {_how_to_send_again(run)}"
    )


def _how_to_send_again(run: SentRun) -> str:
    again = "launch those files" if run.is_launch else "run the workflow"
    record = (
        f"(the pending record, task state key '{run.record_key}', expires {PENDING_RUN_TTL / 3600:g} h "
        "after it was written)"
    )
    if run.marker is None:
        follow = (
            " A job of this run you find can be followed with WorkflowJobSensor(job_id=...)."
            if not run.is_launch
            else ""
        )
        return (
            f"to {again} again, clear this task: nothing can prove which job this request created, so a "
            f"try after a clear sends it again {record}.{follow}"
        )
    return (
        f"to {again} again, clear this task: its next try looks once more for this request's job and "
        f"sends it again only when none carries the request's marker {record}."
    )


def unfound(run: SentRun, looked: float, why: str, ended_read: bool) -> AmbiguousRunError:
    where = run.where if ended_read else f"{run.where[:-4]}active jobs (the ended ones could not be read)"
    return AmbiguousRunError(
        f"{why}, and no job of this task's {run.what} appeared in {where} within {looked:.0f} s. Not "
        f"finding it does not prove the request was not processed, so it is not sent again. What to do: "
        f"look in the service for a job{'' if run.is_launch else ' of this workflow'} "
        f"{_listing(run)}; {_how_to_send_again(run)}"
    )


def _listing(run: SentRun, shown: int = 3) -> str:
    """Which job to look for: one whose input files carry the marker, or list the request's files."""
    if run.marker is not None:
        return f"whose input files carry {run.marker}"
    if not run.files:
        return "created at that time (the run sent no files)"
    more = f" and {len(run.files) - shown} more" if len(run.files) > shown else ""
    return f"listing {', '.join(run.files[:shown])}{more}"


def await_own_job(
    hook: WorkflowServiceHook, run: SentRun, until: float, log: Log, sleep: Callable[[float], None]
) -> tuple[Job | None, bool]:
    """
    Re-read the workflow's active jobs until this run's job is proven or ``until`` (epoch seconds, reached
    by adding up the pauses slept) passes, then its ended jobs once; at least one listing. Return the job
    (None when not found) and whether the ended jobs could be read (False: the search was inconclusive).
    """
    waited, pauses = 0.0, list(GRACE_PAUSES)
    budget = max(until - now(), 0.0)
    search = _Search(hook, run, log)
    while True:
        job = own_job(search.listed(ACTIVE), run)
        if job is not None:
            return job, True
        if waited >= budget:
            break
        pause = min(pauses.pop(0) if len(pauses) > 1 else pauses[0], budget - waited)
        log.info("No job of this run yet; looking again in %.1f s (%.0f s left)", pause, budget - waited)
        sleep(pause)
        waited += pause
    try:
        ended = search.listed(ENDED)
    except WorkflowServiceResponseError as exc:
        log.warning("Could not read the workflow's ended jobs (%s): the search is inconclusive", exc)
        return None, False
    return own_job(ended, run), True


class _Search:
    """
    One search for a run's job: the service's clock as its listings read it, and the job records it reads
    when a listing leaves out ``input_file_ids``: each at most once; of jobs not listed active,
    ``PROOF_READS`` at most.
    """

    def __init__(self, hook: WorkflowServiceHook, run: SentRun, log: Log) -> None:
        self.hook, self.run, self.log = hook, run, log
        self.read: dict[str, Job] = {}
        self.inactive_reads = 0
        """Records read of jobs never listed active: ``PROOF_READS`` at most."""
        self.ahead: float | None = None
        """Seconds the service's clock is ahead of this worker's at least, as its listings showed."""

    def listed(self, statuses: Sequence[JobStatus]) -> list[Job]:
        """
        Return the run's candidates (:meth:`candidates`) among the workflow's (None: the account's) jobs in
        each of ``statuses``; a status the service refuses as a filter (400, 422) is skipped.
        """
        found: dict[str, Job] = {}
        for status in statuses:
            try:
                listed = self.hook.list_jobs(workflow_id=self.run.workflow_id, status=status)
            except WorkflowServiceApiError as exc:
                if exc.status_code not in (400, 422):
                    raise
                continue
            self._clock_reading(listed)
            for job in listed:
                found.setdefault(job.id, job)
        return self.candidates(list(found.values()))

    def _clock_reading(self, listed: Sequence[Job]) -> None:
        """Take a listing just answered as a reading of the service's clock (its newest job is older)."""
        times = [t for t in (_created(job, self.log) for job in listed) if t is not None]
        if times:
            ahead = max(times).timestamp() - now()
            self.ahead = ahead if self.ahead is None else max(self.ahead, ahead)

    def candidates(self, listed: Sequence[Job]) -> list[Job]:
        """
        Return the jobs of ``listed`` the run could have created (in the send window, not another run's), each
        with its record when the listing left its files out: read nearest to the run's making first until one
        carries its marker; every job listed active, and ``PROOF_READS`` others at most (the rest stay
        unproven).
        """
        run = self.run
        found = [job for job in listed if self._in_window(job) and run.carried_by(job) is not False]
        if not run.files or run.marker is None:
            return found  # a record can prove nothing of a run without a marker
        unread = [job for job in found if job.input_file_ids is None and job.id not in self.read]
        for job in self._closest_to_making(unread):
            active = job.status in ACTIVE
            if not active and self.inactive_reads == PROOF_READS:
                continue
            self.inactive_reads += not active
            self.read[job.id] = record = self.hook.get_job(job.id)
            if run.carried_by(record):
                break
        return [self.read.get(job.id, job) for job in found]

    def _in_window(self, job: Job) -> bool:
        """
        Whether ``job`` was made after the run's sending, on the service's clock (:attr:`ahead`, a lower
        bound: the run's job is never left out), less ``CLOCK_ALLOWANCE``; a job without a usable
        ``created_at`` is in.
        """
        created = _created(job)
        if self.ahead is None or created is None:
            return True
        return created.timestamp() >= self.ahead + min(self.run.sent_at, now()) - CLOCK_ALLOWANCE

    def _closest_to_making(self, jobs: list[Job]) -> list[Job]:
        """
        Return ``jobs`` nearest first to when this run's job was most likely made: just before its failed
        answer came back (else when it was sent), on the service's clock. An order that only saves reads.
        """
        if self.ahead is None:
            return jobs
        made = (self.run.answered_at or self.run.sent_at) + self.ahead

        def distance(job: Job) -> float:
            created = _created(job)
            return abs(created.timestamp() - made) if created is not None else 0.0

        return sorted(jobs, key=distance)


def utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)
