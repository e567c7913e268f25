"""
Run a workflow (or launch an on-demand job) once; report only a job this task can prove it created.

What a failed request proves, and the search for the job it may have created: :mod:`.evidence`; the
pending-run record a retry goes on from: :class:`StoredRunJournal`. The rules and their whys:
docs/decisions/runs.md ("Never a second run", "The search after a lost answer").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc._tasks.evidence import (
    PENDING_RUN_TTL,
    SentRun,
    await_own_job,
    may_retry_refused,
    now,
    proves_refused,
    unfound,
    utc,
)
from airflow_provider_workflowsvc.exceptions import (
    AmbiguousRunError,  # re-exported: raised here
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks._calls import LocalFile
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job

Log = logging.Logger | Any

RUN_GRACE = 30.0
"""Seconds the active jobs are re-read after an ambiguous run failure: the service may process a
request it received late (after the client gave up waiting)."""


Send = Callable[["WorkflowServiceHook", list[tuple[Any, str]] | None], "Job | None"]
"""Sends the request with the files as named (``None``: no body) and returns the job its answer names."""


@dataclass(frozen=True)
class Sending:
    """What is sent: a workflow's run (:meth:`run`) or an on-demand job's launch (no ``workflow_id``)."""

    workflow_id: str | None
    """The workflow run; None for a launch (:attr:`SentRun.is_launch`)."""
    send: Send

    @classmethod
    def run(cls, workflow_id: str) -> Sending:
        """Return the sending of a run of ``workflow_id``."""
        return cls(workflow_id, lambda hook, files: hook.run_workflow(workflow_id, files=files))


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
# The pending-run record


class StoredRunJournal:
    """
    Where a run being sent is recorded across task tries: the task state store, under ``key``. ``known``:
    the job id the store already holds (an earlier try's); a pending run that is that job is stale. A record
    older than ``PENDING_RUN_TTL``, or in a format this version does not write, is ignored (and removed).
    """

    def __init__(self, store: Any, key: str, known: str | None = None, log: Log | None = None) -> None:
        self.store, self.key, self.known = store, key, known
        self.log = log or logging.getLogger(__name__)

    def record(self) -> Any:
        """Return the pending-run record as stored (anything: it is checked when read)."""
        return self.store.get(self.key)

    def write_record(self, value: dict[str, Any]) -> None:
        """Store ``value`` as the pending-run record."""
        self.store.set(self.key, value)

    def pending(self, workflow_id: str | None) -> SentRun | None:
        """Return the run of ``workflow_id`` (None: a launch) an earlier try sent and never resolved."""
        value = self.record()
        if not isinstance(value, dict) or value.get("workflow_id") != workflow_id:
            return None
        try:
            run = SentRun(
                workflow_id=workflow_id,
                sent_at=float(value["sent_at"]),
                files=None if value.get("files") is None else tuple(str(f) for f in value["files"]),
                marker=None if value["marker"] is None else str(value["marker"]),
                recorded=None if self.known is None else str(self.known),
                failed_closed=value.get("failed_closed") is True,
                record_key=self.key,
            )
        except (KeyError, TypeError, ValueError):
            self.log.warning("Ignoring a pending-run record this version cannot read: %r", value)
            self.clear()
            return None
        age = now() - run.sent_at
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
        """Record that ``run`` is about to be sent."""
        files = None if run.files is None else list(run.files)
        self.write_record(
            {"workflow_id": run.workflow_id, "sent_at": run.sent_at, "files": files, "marker": run.marker}
        )

    def failed_closed(self) -> None:
        """Mark the record: a try failed with AmbiguousRunError on its run (the record stays)."""
        value = self.record()
        if isinstance(value, dict):
            self.write_record({**value, "failed_closed": True})

    def clear(self) -> None:
        """Remove the record: no run is pending (none happened, or its job is known)."""
        try:
            self.store.delete(self.key)
        except Exception as exc:
            self.log.warning("Could not remove %s from the task state store: %s", self.key, exc)


# --------------------------------------------------------------------------------------------------
# Sending the run


def named_files(files: Sequence[LocalFile] | None, marker: str | None) -> list[tuple[Any, str]] | None:
    """
    Return ``files`` as ``(source, name sent)``: the name given with each (else its base name),
    carrying ``marker`` when one is given. The hook checks each file as it sends them, once.
    """
    if files is None:
        return None
    from airflow_provider_workflowsvc._marker import with_marker

    named = [item if isinstance(item, tuple) else (item, None) for item in files]
    names = [
        (source, name or getattr(source, "name", None) or os.path.basename(source)) for source, name in named
    ]
    return [(source, name if marker is None else with_marker(name, marker)) for source, name in names]


def submit(
    hook: WorkflowServiceHook,
    sending: Sending,
    files: Sequence[LocalFile] | None,
    log: Log,
    *,
    attempts: int = 3,
    backoff: float = 2.0,
    grace: float = RUN_GRACE,
    sleep: Callable[[float], None] | None = None,
    journal: StoredRunJournal | None = None,
    mark: bool = False,
) -> Job:
    """
    Send a run (or a launch) once, with ``files`` or no body, and return the job it created.

    With a ``journal``, the job of a request an earlier try sent (and never recorded) is looked for
    first, and adopted with the same evidence, instead of sending it again.
    """
    from airflow_provider_workflowsvc._marker import new_marker

    sleep = sleep or time.sleep
    with failing_closed(journal, sending.workflow_id, hook.workflowsvc_conn_id):
        if journal is not None:
            earlier = journal.pending(sending.workflow_id)
            if earlier is not None:
                job = job_of_earlier_try(hook, earlier, grace, log, sleep)
                if job is not None:
                    return job
                journal.clear()
        what = f"{len(files)} file(s)" if files is not None else "no files"
        for attempt in range(1, attempts + 1):
            marker = new_marker() if files is not None and mark else None
            sent = named_files(files, marker)
            run = SentRun(
                sending.workflow_id, now(), None if sent is None else tuple(n for _, n in sent), marker
            )
            if journal is not None:
                journal.sending(run)
            log.info("Sending the %s with %s (attempt %d of %d)", run.what, what, attempt, attempts)
            try:
                job = sending.send(hook, sent)
            except Exception as exc:
                run = replace(run, answered_at=now())
                if proves_refused(exc):
                    if journal is not None:
                        journal.clear()  # the service refused it, or it never left: nothing happened
                    if not may_retry_refused(exc) or attempt == attempts:
                        raise
                    pause = _backoff(exc, attempt, backoff)
                    operation = "create_job" if run.is_launch else "run_workflow"
                    metrics.retrying(operation, hook.workflowsvc_conn_id, exc, pause)
                    log.warning(
                        "The service did not take the %s (%s); sending it again in %.1f s",
                        run.what,
                        exc,
                        pause,
                    )
                    sleep(pause)
                    continue
                log.warning(
                    "The %s failed (%s): it may or may not have created a job. Looking for its job for up to "
                    "%g s; it is not sent again",
                    run.what,
                    exc,
                    grace,
                )
                return _find_or_fail(hook, run, grace, log, sleep, f"the {run.what} failed ({exc})", exc)
            if job is not None:
                return job
            log.info("The answer did not name its job; looking for it among %s", run.where)
            return _find_or_fail(
                hook, run, grace, log, sleep, "the service accepted it but did not name its job"
            )
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def failing_closed(journal: StoredRunJournal | None, workflow_id: str | None, conn_id: str) -> Iterator[None]:
    """
    Fail closed when the block cannot prove a run's (or a launch's) job: AmbiguousRunError (no retry)
    marks its record, so a person's clear decides, and counts the run failed closed. Any other failure
    (a search cut short) leaves the record as it was: the task's retry looks again.
    """
    try:
        yield
    except AmbiguousRunError:
        if journal is not None:
            journal.failed_closed()
        metrics.run_failed_closed(workflow_id, conn_id)
        raise


def _find_or_fail(
    hook: WorkflowServiceHook,
    run: SentRun,
    grace: float,
    log: Log,
    sleep: Callable[[float], None],
    why: str,
    cause: BaseException | None = None,
) -> Job:
    """Return the run's job, proven; AmbiguousRunError when it cannot be (the record stays)."""
    found, ended_read = await_own_job(hook, run, now() + grace, log, sleep)
    if found is None:
        raise unfound(run, grace, why, ended_read) from cause
    # only a marked request's job is ever found: an unmarked one fails closed above
    return _adopt(
        hook, run, found, log, "The %s created job %s; adopting it (its input files carry %s)", run.marker
    )


def _adopt(hook: WorkflowServiceHook, run: SentRun, job: Job, log: Log, message: str, *more: Any) -> Job:
    """Take ``job``, proven ``run``'s, as the task's: logged (``message``: what, job, ``more``), counted."""
    log.warning(message, run.what, job.id, *more)
    metrics.run_adopted(run.workflow_id, hook.workflowsvc_conn_id)
    return job


def job_of_earlier_try(
    hook: WorkflowServiceHook, earlier: SentRun, grace: float, log: Log, sleep: Callable[[float], None]
) -> Job | None:
    """
    Return the job of the run an earlier try sent, proven; None when the record is stale (the job the store
    holds already: the workflow runs); AmbiguousRunError otherwise. The request may still be in flight: its
    job is looked for until it would have timed out, and the grace period after that.
    """
    if earlier.failed_closed:
        return _after_a_clear(hook, earlier, log, sleep)
    log.info(
        "An earlier try of this task sent a %s at %s and stopped before recording its job; looking for it",
        earlier.what,
        utc(earlier.sent_at).isoformat(timespec="seconds"),
    )
    flight = float(getattr(hook.settings, "timeout", 60.0))
    until = max(earlier.sent_at + flight + grace, now())
    found, ended_read = await_own_job(hook, earlier, until, log, sleep)
    if found is None:
        raise unfound(
            earlier,
            until - earlier.sent_at,
            f"an earlier try sent a {earlier.what} and stopped before recording its job",
            ended_read,
        )
    if found.id == earlier.recorded:
        log.info("The earlier try's request is job %s, already recorded: sending anew", found.id)
        return None
    return _adopt(
        hook, earlier, found, log, "The earlier try's %s created job %s: adopting it (nothing sent again)"
    )


def _after_a_clear(
    hook: WorkflowServiceHook, earlier: SentRun, log: Log, sleep: Callable[[float], None]
) -> Job | None:
    """
    Return the job of a run an earlier try failed as ambiguous on, when proven now (only a marked run's
    can be); None to send it: a person cleared the task, which decides what nothing proved.
    """
    found = None
    if earlier.marker is not None:
        try:
            found, _ = await_own_job(hook, earlier, now(), log, sleep)
        except AmbiguousRunError as exc:
            log.warning("Still no proof of which job the earlier run created (%s)", exc)
    if found is not None:
        message = "The earlier try's %s created job %s after all: adopting it (nothing sent again)"
        return _adopt(hook, earlier, found, log, message)
    log.warning(
        "An earlier try failed as ambiguous on its %s (sent at %s) and the task was cleared: %s, so it "
        "is sent again",
        earlier.what,
        utc(earlier.sent_at).isoformat(timespec="seconds"),
        "no job carries that run's marker"
        if earlier.marker
        else "nothing can prove which job that run created (its files were sent unmarked)",
    )
    return None
