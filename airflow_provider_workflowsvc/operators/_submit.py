"""
Run a workflow once, and report only a job this task can prove it created.

The hook never retries the run POST once it may have reached the server. What the answer proves
decides what happens next:

* a job in a 2xx answer: the run's job;
* a refusal (429, 503, any 4xx, a request never sent, an error before sending): no job was created;
  the run is sent again after the pause (429 and 503 only, at most ``attempts`` times in all);
* an ambiguous failure (a read timeout, a connection dropped after the body was sent, 500, 502, 504,
  an unreadable 2xx) or a 2xx that does not name its job: the workflow's job list is re-read for a
  grace period (a delayed request may still be processed) before anything is sent again.

A job found in the list is this task's only with positive evidence (:func:`own_job`): it is new (not
in the snapshot taken before sending), it was created inside the send window (from the moment the
request left to the moment it was last looked for, widened by ``CLOCK_SKEW``), and its record lists
exactly this run's file names (``input_file_ids``, platform dialect). A job without that evidence
(the spec dialect's records do not list files; a run without files) is never adopted: the task fails
with :class:`AmbiguousRunError` naming the candidates and saying what to do.

With a :class:`RunJournal` (durable execution: the task state store) a pending-run record is written
just before each run request leaves and removed whenever no run happened; a worker that dies after
sending leaves it behind, and the retry looks for the job of that run (same evidence) instead of
running again. A record expires after ``PENDING_RUN_TTL`` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_workflowsvc.exceptions import (
    AmbiguousRunError,  # re-exported: raised here
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    WorkflowServiceServerError,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks._calls import LocalFile
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job

Log = logging.Logger | Any

CLOCK_SKEW = 5.0
"""Seconds the service's clock (a job's ``created_at``) may differ from this worker's clock."""
RUN_GRACE = 30.0
"""Seconds the job list is re-read after an ambiguous run failure before the run is sent again: the
service may process a request it received late (after the client gave up waiting)."""
PENDING_RUN_TTL = 6 * 3600.0
"""Seconds after which a pending-run record no longer stops a new run (a stale record never blocks a
task for ever)."""
GRACE_PAUSES = (0.5, 1.0, 2.0, 4.0)
"""Pauses between job listings while looking for a run's job (the last one repeats)."""
_now = time.time
"""This worker's clock (tests replace the module's ``time.sleep``, never the clock)."""
REFUSED_STATUS = frozenset({429, 503})
"""Answers that prove the service did not process the request: the run may be sent again."""


# --------------------------------------------------------------------------------------------------
# What a failed run request proves


def is_ambiguous(exc: BaseException) -> bool:
    """Tell whether the service may or may not have created the job before this failure."""
    if isinstance(exc, WorkflowServiceConnectionError):
        return exc.sent
    if isinstance(exc, WorkflowServiceResponseError):
        return True  # a 2xx (or other answer) whose body cannot be read
    if isinstance(exc, WorkflowServiceServerError):
        return exc.status_code not in REFUSED_STATUS
    return False


def may_retry_refused(exc: BaseException) -> bool:
    """Tell whether a refusal is worth sending the run again for (service busy, or request never left)."""
    if isinstance(exc, WorkflowServiceConnectionError):
        return not exc.sent
    return isinstance(exc, (WorkflowServiceRateLimitError, WorkflowServiceServerError)) and (
        exc.status_code in REFUSED_STATUS
    )


def _backoff(exc: BaseException, attempt: int, base: float) -> float:
    """
    Return the pause before sending a refused run again: the server's ``Retry-After`` (429, 503), else
    exponential; at most 60 s.
    """
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        return min(float(retry_after), 60.0)
    return min(base * 2 ** (attempt - 1), 60.0)


# --------------------------------------------------------------------------------------------------
# The evidence


@dataclass(frozen=True)
class SentRun:
    """One run request: what identifies its job among the workflow's jobs."""

    workflow_id: str
    before: frozenset[str]
    """Job ids of the workflow seen before the request left (never this run's)."""
    sent_at: float
    """Epoch seconds (this worker's clock) just before the request left."""
    files: tuple[str, ...] | None
    """The file names sent (multipart names), None for a run without a body."""

    def window(self, until: float) -> tuple[datetime, datetime]:
        """Creation times a job of this run can have, seen from ``until`` (widened by the clock skew)."""
        return _utc(self.sent_at - CLOCK_SKEW), _utc(until + CLOCK_SKEW)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _created(job: Job) -> datetime | None:
    created = job.created_at
    if created is None:
        return None
    return created if created.tzinfo else created.replace(tzinfo=timezone.utc)


def candidates(jobs: Sequence[Job], run: SentRun, until: float) -> list[Job]:
    """
    Return the new jobs of the workflow that this run could have created (new, and inside the send window).

    A job without ``created_at`` cannot be placed outside the window, so it stays a candidate.
    """
    start, end = run.window(until)
    found = []
    for job in jobs:
        created = _created(job)
        if job.id in run.before or (created is not None and not start <= created <= end):
            continue
        found.append(job)
    return found


def carries_files_of(job: Job, run: SentRun) -> bool | None:
    """
    Whether the job's record lists exactly this run's files; None when it cannot tell (the record
    has no ``input_file_ids``, or the run sent no files).
    """
    if job.input_file_ids is None or not run.files:
        return None
    if sorted(job.input_file_ids) == sorted(run.files):
        return True
    # A service that keeps only the base name of a part's file name (``2024/a.txt`` → ``a.txt``)
    # records the same files under shorter names.
    recorded_base_names = not any("/" in name for name in job.input_file_ids)
    return recorded_base_names and sorted(job.input_file_ids) == sorted(_base_name(n) for n in run.files)


def _base_name(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def own_job(jobs: Sequence[Job], run: SentRun, until: float) -> Job | None:
    """
    Return this run's job among ``jobs``, None when there is none yet; AmbiguousRunError when one cannot
    be proven (several runs with the same files, or candidates whose records do not list files).
    """
    found = candidates(jobs, run, until)
    mine = [job for job in found if carries_files_of(job, run)]
    unproven = [job for job in found if carries_files_of(job, run) is None]
    if len(mine) == 1 and not unproven:
        return mine[0]
    if len(mine) > 1:
        raise _ambiguous(run, mine, "each lists exactly this task's files: several runs sent the same files")
    if unproven:
        reason = (
            "this run sent no files, so nothing in a job record can show which run created it"
            if not run.files
            else "the service's job records do not list their input files (no input_file_ids), so "
            "nothing shows which run created them"
        )
        raise _ambiguous(run, unproven, reason)
    return None


def _ambiguous(run: SentRun, jobs: Sequence[Job], reason: str) -> AmbiguousRunError:
    ids = ", ".join(sorted(job.id for job in jobs))
    return AmbiguousRunError(
        f"cannot prove which job this task's run of workflow {run.workflow_id} created: job(s) {ids} "
        f"appeared while its run request was in flight, but {reason}. Nothing was run again. What to do: "
        f"check job(s) {ids} in the service; to run the workflow again, clear this task (a pending-run "
        f"record expires {PENDING_RUN_TTL / 3600:g} h after it was written, or delete the task state key "
        "'workflowsvc_pending_run')."
    )


def await_own_job(
    hook: WorkflowServiceHook,
    run: SentRun,
    until: float,
    log: Log,
    sleep: Callable[[float], None],
    now: Callable[[], float] | None = None,
) -> Job | None:
    """
    Re-read the workflow's jobs until this run's job is proven, or ``until`` (epoch seconds) passes.

    One listing is always made. ``until`` also ends the window of creation times a job of this run
    can have. It is reached by adding up the pauses slept (a test's fast sleep shortens the wait).
    """
    now = now or _now
    waited, pauses = 0.0, list(GRACE_PAUSES)
    budget = max(until - now(), 0.0)
    while True:
        seen = min(now(), until)
        found = candidates(hook.list_jobs(workflow_id=run.workflow_id), run, seen)
        job = own_job(_with_records(hook, found, run), run, seen)
        if job is not None or waited >= budget:
            return job
        pause = min(pauses.pop(0) if len(pauses) > 1 else pauses[0], budget - waited)
        log.info("No job of this run yet; looking again in %.1f s (%.0f s left)", pause, budget - waited)
        sleep(pause)
        waited += pause


def _with_records(hook: WorkflowServiceHook, jobs: list[Job], run: SentRun) -> list[Job]:
    """
    ``jobs``, each read in full (``GET /jobs/{id}``) when the listing left out ``input_file_ids``
    and the run sent files: a service may list only some fields of its job records.
    """
    if not run.files:
        return jobs
    return [hook.get_job(job.id) if job.input_file_ids is None else job for job in jobs]


# --------------------------------------------------------------------------------------------------
# The pending-run record


class RunJournal(Protocol):
    """Where a run being sent is recorded across task tries (the task state store)."""

    def pending(self, workflow_id: str) -> SentRun | None:
        """Return the run of ``workflow_id`` an earlier try sent and never resolved, or None."""

    def sending(self, run: SentRun) -> None:
        """Record that ``run`` is about to be sent."""

    def clear(self) -> None:
        """Remove the record: no run is pending (none happened, or its job is known)."""


class StoredRunJournal:
    """
    A :class:`RunJournal` in the task state store, under ``key``.

    ``known`` is the job id the store already holds for the task (a job an earlier try recorded): it
    is never taken for the pending run's job. A record older than ``PENDING_RUN_TTL``, or in a format
    this version does not write, is ignored (and removed).
    """

    def __init__(self, store: Any, key: str, known: str | None = None, log: Log | None = None) -> None:
        self.store, self.key, self.known = store, key, known
        self.log = log or logging.getLogger(__name__)

    def pending(self, workflow_id: str) -> SentRun | None:
        value = self.store.get(self.key)
        if not isinstance(value, dict) or value.get("workflow_id") != workflow_id:
            return None
        try:
            run = SentRun(
                workflow_id=workflow_id,
                before=frozenset(str(i) for i in value["before"]) | ({self.known} if self.known else set()),
                sent_at=float(value["sent_at"]),
                files=None if value.get("files") is None else tuple(str(f) for f in value["files"]),
            )
        except (KeyError, TypeError, ValueError):
            self.log.warning("Ignoring a pending-run record this version cannot read: %r", value)
            self.clear()
            return None
        age = _now() - run.sent_at
        if age > PENDING_RUN_TTL:
            self.log.warning(
                "Ignoring the pending-run record of a run sent %.1f h ago (it expires after %g h)",
                age / 3600,
                PENDING_RUN_TTL / 3600,
            )
            self.clear()
            return None
        return run

    def sending(self, run: SentRun) -> None:
        record = {
            "workflow_id": run.workflow_id,
            "before": sorted(run.before),
            "sent_at": run.sent_at,
            "files": None if run.files is None else list(run.files),
        }
        self.store.set(self.key, record)

    def clear(self) -> None:
        try:
            self.store.delete(self.key)
        except Exception as exc:
            self.log.warning("Could not remove %s from the task state store: %s", self.key, exc)


# --------------------------------------------------------------------------------------------------
# Sending the run


def sent_file_names(files: Sequence[LocalFile] | None) -> tuple[str, ...] | None:
    """Return the names the service will record for ``files`` (checked: each exists and is readable)."""
    if files is None:
        return None
    from airflow_provider_workflowsvc.hooks._calls import upload_files

    return tuple(upload.filename for upload in upload_files(files))


def submit_run(
    hook: WorkflowServiceHook,
    workflow_id: str,
    files: Sequence[LocalFile] | None,
    log: Log,
    *,
    attempts: int = 3,
    backoff: float = 2.0,
    grace: float = RUN_GRACE,
    sleep: Callable[[float], None] | None = None,
    journal: RunJournal | None = None,
) -> Job:
    """
    Run ``workflow_id`` once (with ``files``, or no body) and return the job it created.

    With a ``journal``, the job of a run an earlier try sent (and never recorded) is looked for
    first, and adopted with the same evidence, instead of running the workflow again.
    """
    sleep = sleep or time.sleep
    names = sent_file_names(files)
    if journal is not None:
        earlier = journal.pending(workflow_id)
        if earlier is not None:
            job = _job_of_earlier_try(hook, earlier, grace, log, sleep)
            if job is not None:
                return job
            journal.clear()
    before = frozenset(job.id for job in hook.list_jobs(workflow_id=workflow_id))
    what = f"{len(files)} file(s)" if files is not None else "no files"
    for attempt in range(1, attempts + 1):
        run = SentRun(workflow_id, before, _now(), names)
        if journal is not None:
            journal.sending(run)
        log.info("Running workflow %s with %s (attempt %d of %d)", workflow_id, what, attempt, attempts)
        try:
            job = hook.run_workflow(workflow_id, files=files)
        except Exception as exc:
            if not is_ambiguous(exc):
                if journal is not None:
                    journal.clear()  # the service refused it, or it never left: no run happened
                if not may_retry_refused(exc) or attempt == attempts:
                    raise
                pause = _backoff(exc, attempt, backoff)
                log.warning("The service did not take the run (%s); sending it again in %.1f s", exc, pause)
                sleep(pause)
                continue
            log.warning(
                "The run request failed (%s): it may or may not have created a job. Looking for this "
                "run's job for up to %g s before anything is sent again",
                exc,
                grace,
            )
            found = await_own_job(hook, run, _now() + grace, log, sleep)
            if found is not None:
                log.warning("The failed run request did create job %s; adopting it (no new run)", found.id)
                return found
            if isinstance(exc, WorkflowServiceResponseError) and 200 <= exc.status_code < 300:
                raise _accepted_but_unfound(workflow_id, grace) from exc
            if attempt == attempts:
                if journal is not None:
                    journal.clear()
                raise WorkflowServiceError(
                    f"running workflow {workflow_id} failed {attempts} time(s) and no job was created "
                    f"(none appeared within {grace:.0f} s after the last failure): {exc}"
                ) from exc
            log.warning("No job appeared for the failed request within %g s; sending the run again", grace)
            continue
        if job is not None:
            return job
        log.info("The run response did not name its job; looking for it among the workflow's jobs")
        found = await_own_job(hook, run, _now() + grace, log, sleep)
        if found is None:
            raise _accepted_but_unfound(workflow_id, grace)
        log.info("Found the run's job: %s", found.id)
        return found
    raise AssertionError("unreachable")  # pragma: no cover


def _job_of_earlier_try(
    hook: WorkflowServiceHook, earlier: SentRun, grace: float, log: Log, sleep: Callable[[float], None]
) -> Job | None:
    """
    Return the job of the run an earlier try sent, when it can be proven; None when it made none.

    The earlier request may still be in flight (or held by the service): its job is looked for until
    the request would have timed out and the grace period after it has passed.
    """
    flight = float(getattr(hook.settings, "timeout", 60.0))
    until = earlier.sent_at + flight + grace
    log.info(
        "An earlier try of this task sent a run of workflow %s at %s and stopped before recording its job; "
        "looking for that run's job",
        earlier.workflow_id,
        _utc(earlier.sent_at).isoformat(timespec="seconds"),
    )
    job = await_own_job(hook, earlier, until, log, sleep)
    if job is not None:
        log.warning("The earlier try's run created job %s: adopting it (no new run)", job.id)
        return job
    log.info("The run an earlier try sent created no job; running the workflow")
    return None


def _accepted_but_unfound(workflow_id: str, grace: float) -> AmbiguousRunError:
    return AmbiguousRunError(
        f"the service accepted the run of workflow {workflow_id} but did not name its job, and no job "
        f"of this run appeared in the workflow's job list within {grace:.0f} s; not running it again. "
        "What to do: look for the job in the service; to run the workflow again, clear this task."
    )
