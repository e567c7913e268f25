"""
The requests behind a wait, sync (operator, sensor) and async (trigger); the meaning is in :mod:`.outcome`.

No request of a wait outlives its deadline (:func:`~.hooks.workflowsvc.deadline`) but the reads of an end
seen before it (``END_READ_RESERVE``); a cancel sent as a task ends gets ``CANCEL_BUDGET`` seconds. A poll
is one request (its details), a job's end three and one per output file: docs/decisions/waits.md, "One
wait". The steps both hooks share are written once (:func:`_drive`, :func:`_adrive`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceAuthUnconfirmedError,
    WorkflowServiceConflictError,
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceNotFoundError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    WorkflowServiceServerError,
)
from airflow_provider_workflowsvc.hooks._pool import wait_at_most
from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
from airflow_provider_workflowsvc.models import JobStatus

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome
    from airflow_provider_workflowsvc.wait.source import Subscription
    from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule

Log = logging.Logger | Any

A = TypeVar("A")
B = TypeVar("B")

CANCEL_BUDGET = 5.0
"""Seconds a cancel sent as a task ends (timeout, kill) may take, retries included: the task is going
away (a killed worker is SIGKILLed ~5 s after SIGTERM), so it is sent and not waited for longer."""


def _within(seconds: float | None) -> float | None:
    return None if seconds is None else time.time() + seconds


Steps = Generator[Any, Any, A]
"""Requests written once for both hooks: each yields the hook's call and is sent its result."""


def _drive(steps: Steps[A]) -> A:
    """Run ``steps`` with the sync hook: each call has run (or raised in ``steps``) as it was made."""
    value: Any = None
    while True:
        try:
            value = steps.send(value)
        except StopIteration as done:
            return done.value


async def _adrive(steps: Steps[A]) -> A:
    """Run ``steps`` with the async hook: each call is awaited, its error raised in ``steps``."""
    value: Any = None
    failed: Exception | None = None
    while True:
        try:
            call = steps.send(value) if failed is None else steps.throw(failed)
        except StopIteration as done:
            return done.value
        try:
            value, failed = await call, None
        except Exception as exc:
            value, failed = None, exc
        except BaseException:  # cancelled: its blocks end here, in this task's context
            steps.close()
            raise


# --------------------------------------------------------------------------------------------------
# Which failures a wait survives


def is_transient(exc: BaseException) -> bool:
    """
    Whether a failed status request is worth trying again later (the wait goes on): a connection
    failure (a refused one too), a timeout, 429, 5xx, an unreadable or unexpected 2xx, a refusal while the
    connection could not be read again; not a TLS mismatch or an unknown host (docs/decisions/waits.md).
    """
    if isinstance(exc, WorkflowServiceResponseError):
        return 200 <= exc.status_code < 300
    if isinstance(exc, WorkflowServiceConnectionError) and exc.permanent:
        return False  # a TLS or certificate mismatch, an unknown host: polling again will not help
    transient = (
        WorkflowServiceAuthUnconfirmedError,
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
# Sync


def _polled(hook: Any, watch: JobWatch, both: Both) -> Steps[JobOutcome | None]:
    """One poll: the job's outcome when it has reached a final status (its end read), else None."""
    details = yield hook.get_job_details(watch.job_id)
    job = (yield hook.get_job(watch.job_id)) if details.processing_status is JobStatus.UNKNOWN else None
    return (yield from _end(hook, watch, job, both)) if watch.observe(details, job) else None


def poll_once(hook: WorkflowServiceHook, watch: JobWatch) -> JobOutcome | None:
    """Poll a job once; its outcome when it has reached a final status, else None."""
    return _drive(_polled(hook, watch, _read_both))


def _end(hook: Any, watch: JobWatch, job: Job | None, both: Both) -> Steps[JobOutcome | None]:
    """
    Read the end of a job its details showed terminal: its record (read now unless given), which must
    agree (else None: it goes on), then its failed files and the documents of its outputs (``both``).
    """
    job = job or (yield hook.get_job(watch.job_id))
    if not watch.confirmed_by(job):
        return None
    failed, documents = yield both(hook.get_job_failed_files(watch.job_id), _documents(hook, job, watch.log))
    return watch.outcome(job, failed.failed_files, documents)


Sleep = Callable[[float], Any]
Both = Callable[[Any, "Steps[dict[str, str | None]]"], Any]
"""How a wait makes a job's two last reads (its failed files, its outputs' documents): in turn, or at once."""


def _read_both(failed: Any, documents: Steps[dict[str, str | None]]) -> Any:
    return failed, _drive(documents)


def _documents(hook: Any, job: Job, log: Log) -> Steps[dict[str, str | None]]:
    """Read the document of each output file (its first output's start); unreadable: logged, None."""
    documents: dict[str, str | None] = {}
    for output in job.output_node_files:
        if output.file_id in documents:
            continue
        try:
            documents[output.file_id] = yield hook.get_output_document(job.id, output.file_id, output.node_id)
        except WorkflowServiceError as exc:
            log.warning(
                "Job %s: could not read which document output %s was made from: %s",
                job.id,
                output.file_id,
                exc,
            )
            documents[output.file_id] = None
    return documents


def wait_for_job(
    hook: WorkflowServiceHook,
    watch: JobWatch,
    schedule: PollSchedule,
    sleep: Callable[[float], None] = time.sleep,
) -> JobOutcome:
    """Poll until the job is terminal or the deadline passes (:func:`_phases`)."""
    for cutoff, steps in _phases(hook, watch, schedule, _read_both, sleep):
        with deadline(cutoff):
            if (outcome := _drive(steps)) is not None:
                return outcome
    sleep(schedule.rest())
    return watch.timed_out()


def _phases(
    hook: Any,
    watch: JobWatch,
    schedule: PollSchedule,
    both: Both,
    sleep: Sleep,
    told: Subscription | None = None,
) -> Iterator[tuple[float, Steps[JobOutcome | None]]]:
    """
    Yield a wait's two phases, each with the moment its requests must end; with no outcome from either,
    the wait lasts its whole timeout, then times out. A poll the source ``told`` vouches for sends nothing.
    """

    def polls() -> Steps[JobOutcome | None]:  # until the job is terminal; transient errors go on
        while (pause := schedule.next_pause()) is not None:
            yield sleep(pause)
            if told is not None and not told.due(schedule):
                continue
            try:
                outcome = yield from _polled(hook, watch, both)
            except Exception as exc:
                survive_transient(exc, watch.log, f"Job {watch.job_id}: status check")
                continue
            if outcome is not None:
                return outcome
        return None

    def end_reads(until: float) -> Steps[JobOutcome | None]:
        # The end the last poll saw, read until ``END_READ_RESERVE`` past the deadline (a slow service
        # delays the report of an end it gave in time, it does not make it a timeout), again an interval
        # after a transient failure.
        while watch.ended:
            try:
                return (yield from _end(hook, watch, None, both))
            except Exception as exc:
                if not is_transient(exc):
                    raise
                watch.log.warning(
                    "Job %s ended, but reading its end failed or took too long (%s)", watch.job_id, exc
                )
            if (pause := min(schedule.interval, until - time.time())) <= 0:
                break
            yield sleep(pause)
        return None

    yield schedule.cutoff, polls()  # the polls end by the deadline
    until = schedule.end_cutoff()  # from when they ended
    yield until, end_reads(until)


def cancel_quietly(hook: WorkflowServiceHook, job_id: str, log: Log, within: float | None = None) -> bool:
    """
    Ask the service to stop a job (within ``within`` seconds, retries included); True when it is stopped
    by now, False when it had ended. A 409 or an answer lost is checked by reading the job.
    """
    return _drive(_cancel(hook, job_id, log, within))


def _cancel(hook: Any, job_id: str, log: Log, within: float | None) -> Steps[bool]:
    try:
        with deadline(_within(within)):
            yield hook.cancel_job(job_id)
    except WorkflowServiceNotFoundError:
        log.warning("Job %s was not found; nothing to cancel", job_id)
        return False
    except Exception as exc:  # a 409, or an answer lost: read the job to know
        if not (isinstance(exc, WorkflowServiceConflictError) or is_transient(exc)):
            raise
        try:
            with deadline(_within(within)):
                job = yield hook.get_job(job_id)
        except Exception as read_exc:
            if not isinstance(exc, WorkflowServiceConflictError):
                raise exc from read_exc
            log.info("Job %s had already ended; nothing to cancel", job_id)
            return False  # a 409 still says it had ended
        if job.status is JobStatus.STOPPED:
            log.info("Job %s is stopped (the cancel answered: %s)", job.id, exc)
            return True
        if not (job.status.is_terminal or isinstance(exc, WorkflowServiceConflictError)):
            raise exc  # still going after an ambiguous failure
        ended = job.raw_status or job.status.value
        log.info("Job %s had already ended (%s); nothing to cancel", job.id, ended)
        return False
    log.info("Asked the service to cancel job %s", job_id)
    return True


def stored_job(hook: WorkflowServiceHook, job_id: str, fail_on_failed_files: bool, log: Log) -> Job | None:
    """
    Return the job a retried task stored when the task goes on with it (active, unknown, or completed
    without failing failed files); None when the workflow is to run again.
    """
    try:
        job = hook.get_job(job_id)
    except WorkflowServiceNotFoundError:
        log.warning(
            "Job %s, which an earlier try of this task started, is gone; running the workflow again", job_id
        )
        return None
    status = job.status
    if status.is_active or status is JobStatus.UNKNOWN:
        return job
    failed = status.is_success and fail_on_failed_files and hook.get_job_failed_files(job.id).failed_files
    if status.is_success and not failed:
        return job
    ended = "completed with failed files" if failed else (job.raw_status or status.value)
    log.warning(
        "Job %s, which an earlier try of this task started, ended %s; running the workflow again",
        job_id,
        ended,
    )
    return None


def find_job(
    hook: WorkflowServiceHook, workflow_id: str, created_after: datetime | None, pick: str
) -> Job | None:
    """Return the workflow's latest (or earliest) job created after ``created_after``, if any yet."""
    return pick_job(hook.list_jobs(workflow_id=workflow_id, created_since=created_after), created_after, pick)


# --------------------------------------------------------------------------------------------------
# Finding a workflow's job


def parse_created_after(value: Any) -> datetime | None:
    """Return a timezone-aware UTC datetime from a datetime or ISO-8601 string (naive means UTC)."""
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
    """Return the latest (or earliest) job created after ``created_after``; undated jobs never match."""
    dated = []
    for job in jobs:
        created = job.created_utc
        if created is None:
            continue
        if created_after is None or created > created_after:
            dated.append((created, job))
    if not dated:
        return None
    dated.sort(key=lambda item: item[0])
    return dated[-1][1] if pick == "latest" else dated[0][1]


# --------------------------------------------------------------------------------------------------
# Async (one client, never blocking the event loop)


async def apoll_once(hook: WorkflowServiceAsyncHook, watch: JobWatch) -> JobOutcome | None:
    """:func:`poll_once`, awaited (the failed files and the documents read at once)."""
    return await _adrive(_polled(hook, watch, _read_at_once))


def _read_at_once(failed: Awaitable[A], documents: Steps[B]) -> Awaitable[tuple[A, B]]:
    return _both(failed, _adrive(documents))


async def _both(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """
    Await two reads at once (the last poll's failed files and output documents: one round trip, not
    two); the first error is raised once both have ended, so no read outlives the poll.
    """
    one, two = await asyncio.gather(first, second, return_exceptions=True)
    for result in (one, two):
        if isinstance(result, BaseException):
            raise result
    return one, two  # type: ignore[return-value]


async def await_job(
    hook: WorkflowServiceAsyncHook,
    watch: JobWatch,
    schedule: PollSchedule,
    watching: AbstractAsyncContextManager[Subscription] | None = None,
) -> JobOutcome:
    """
    :func:`wait_for_job`, awaited, told by the source ``watching`` enters (:func:`~.source.watching`;
    None: it polls its own job): a poll the source vouches for sends nothing.
    """
    async with watching or contextlib.nullcontext() as told:
        for cutoff, steps in _phases(hook, watch, schedule, _read_at_once, asyncio.sleep, told):
            if (outcome := await _until(cutoff, steps)) is not None:
                return outcome
        await asyncio.sleep(schedule.rest())
        return watch.timed_out()


async def _until(cutoff: float, steps: Steps[A]) -> A | None:
    """
    Run ``steps`` with the async hook until ``cutoff`` (epoch seconds): its requests' timeouts cut to it
    (:func:`deadline`), and one timer for all of them, not one per poll (issue #45); None when it passed.
    """
    with deadline(cutoff):
        try:
            if _timeout is None:  # Python 3.10: wait_for there would lose a cancel
                return await wait_at_most(_adrive(steps), cutoff - time.time())
            async with _timeout(cutoff - time.time()):  # what wait_at_most does, without a move per step
                return await _adrive(steps)
        except asyncio.TimeoutError:  # the steps survive their requests' own: this is the cutoff's
            return None


_timeout: Any = getattr(asyncio, "timeout", None)


async def await_batch_job(
    hook: WorkflowServiceAsyncHook,
    watch: JobWatch,
    schedule: PollSchedule,
    watching: AbstractAsyncContextManager[Subscription] | None,
) -> JobOutcome:
    """
    :func:`await_job` for one job of a batch (:func:`~.jobs.await_jobs`); a wait that fails (a job that
    vanished, a refusal) is the job's ``error`` outcome.
    """
    from airflow_provider_workflowsvc.wait.outcome import broken_outcome

    try:
        return await await_job(hook, watch, schedule, watching)
    except Exception as exc:
        return broken_outcome(exc, watch.job_id, watch.elapsed)


async def await_new_job(
    hook: WorkflowServiceAsyncHook,
    workflow_id: str,
    created_after: datetime | None,
    pick: str,
    schedule: PollSchedule,
    log: Log,
) -> Job | None:
    """Poll the workflow's jobs until one created after ``created_after`` appears; None at the deadline."""
    job = await _until(schedule.cutoff, _new_job(hook, workflow_id, created_after, pick, schedule, log))
    if job is None:
        await asyncio.sleep(schedule.rest())
    return job


def _new_job(
    hook: WorkflowServiceAsyncHook,
    workflow_id: str,
    created_after: datetime | None,
    pick: str,
    schedule: PollSchedule,
    log: Log,
) -> Steps[Job | None]:
    while (pause := schedule.next_pause()) is not None:
        yield asyncio.sleep(pause)
        try:
            jobs = yield hook.list_jobs(workflow_id=workflow_id, created_since=created_after)
        except Exception as exc:
            survive_transient(exc, log, f"Listing the jobs of workflow {workflow_id}")
            continue
        if (job := pick_job(jobs, created_after, pick)) is not None:
            return job
    return None


async def acancel_quietly(
    hook: WorkflowServiceAsyncHook, job_id: str, log: Log, within: float | None = None
) -> bool:
    """:func:`cancel_quietly`, awaited."""
    return await _adrive(_cancel(hook, job_id, log, within))
