"""Run a workflow exactly once, even when the run request fails ambiguously.

The hook never retries the run POST once it may have reached the server. When it fails in a way that
leaves unknown whether the service created a job (5xx, 429, a dropped connection or read timeout), or
succeeds without naming the job, the job is found by comparing the workflow's job ids with a snapshot
taken before the request:

* exactly one new job → it is the run's job, adopted;
* none (after a failure) → the run did not happen; it is sent again, at most ``attempts`` times in all,
  with exponential backoff;
* several → another run started at the same time (a schedule, another client): refuse to guess.

With a :class:`RunJournal` (durable execution: the task state store) the snapshot is saved before the
run is sent. A worker that dies after sending it but before its job id is stored (the response was
lost, or the process was killed while waiting for it) leaves the snapshot behind; the retry then
compares the workflow's jobs with it first and adopts the one new job instead of running again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    WorkflowServiceServerError,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job

Log = logging.Logger | Any

LOOKUP_WAITS = (1.0, 2.0, 4.0)
"""Pauses between job listings when a successful run response did not name its job."""


class AmbiguousRunError(WorkflowServiceError):
    """Whether (or which) job a run created cannot be told; nothing is run again."""


def _ambiguous(exc: BaseException) -> bool:
    """A failure after which the service may or may not have created the job."""
    return isinstance(
        exc, (WorkflowServiceServerError, WorkflowServiceRateLimitError, WorkflowServiceConnectionError)
    )


def _backoff(exc: BaseException, attempt: int, base: float) -> float:
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(exc, WorkflowServiceRateLimitError) and retry_after is not None:
        return min(float(retry_after), 60.0)
    return min(base * 2 ** (attempt - 1), 60.0)


class RunJournal(Protocol):
    """Where the job snapshot of a run being sent is kept across task tries (the task state store)."""

    def pending(self, workflow_id: str) -> set[str] | None:
        """The job ids of ``workflow_id`` seen before an earlier try sent a run, or None."""

    def sending(self, workflow_id: str, before: set[str]) -> None:
        """Record that a run of ``workflow_id`` is about to be sent, with the job ids seen before it."""


def submit_run(
    hook: WorkflowServiceHook,
    workflow_id: str,
    files: Sequence[str] | None,
    log: Log,
    *,
    attempts: int = 3,
    backoff: float = 2.0,
    sleep: Callable[[float], None] | None = None,
    journal: RunJournal | None = None,
) -> Job:
    """Run ``workflow_id`` once (with ``files``, or no body) and return the job it created.

    With a ``journal``, a run an earlier try sent (and whose job it never recorded) is found and
    adopted instead of running the workflow again.
    """
    sleep = sleep or time.sleep
    earlier = journal.pending(workflow_id) if journal is not None else None
    if earlier is not None:
        new = _new_jobs(hook, workflow_id, earlier)
        if len(new) == 1:
            log.warning(
                "An earlier try of this task sent a run and stopped before recording its job; that run "
                "created job %s: adopting it (no new run)",
                new[0].id,
            )
            return new[0]
        if new:
            raise _several(workflow_id, new)
        log.info("The run an earlier try of this task sent created no job; running the workflow")
    before = {job.id for job in hook.list_jobs(workflow_id=workflow_id)}
    if journal is not None:
        journal.sending(workflow_id, before)
    what = f"{len(files)} file(s)" if files is not None else "no files"
    for attempt in range(1, attempts + 1):
        log.info("Running workflow %s with %s (attempt %d of %d)", workflow_id, what, attempt, attempts)
        try:
            job = hook.run_workflow(workflow_id, files=files)
        except WorkflowServiceResponseError as exc:
            log.warning("The run was accepted but its response was unreadable (%s); looking for the job", exc)
            return _find_created_job(hook, workflow_id, before, log, sleep)
        except Exception as exc:
            if not _ambiguous(exc):
                raise
            pause = _backoff(exc, attempt, backoff)
            log.warning(
                "The run request failed (%s); it may or may not have created a job. Checking the workflow's "
                "jobs in %.1f s",
                exc,
                pause,
            )
            sleep(pause)
            new = _new_jobs(hook, workflow_id, before)
            if len(new) == 1:
                log.warning("The failed run request did create job %s; adopting it (no new run)", new[0].id)
                return new[0]
            if new:
                raise _several(workflow_id, new) from exc
            if attempt == attempts:
                raise WorkflowServiceError(
                    f"running workflow {workflow_id} failed {attempts} time(s) and no job was created: {exc}"
                ) from exc
            log.warning("No job was created by the failed request; sending the run again")
            continue
        if job is not None:
            return job
        log.info("The run response did not name its job; looking for it among the workflow's jobs")
        return _find_created_job(hook, workflow_id, before, log, sleep)
    raise AssertionError("unreachable")  # pragma: no cover


def _new_jobs(hook: WorkflowServiceHook, workflow_id: str, before: set[str]) -> list[Job]:
    return [job for job in hook.list_jobs(workflow_id=workflow_id) if job.id not in before]


def _several(workflow_id: str, jobs: list[Job]) -> AmbiguousRunError:
    ids = ", ".join(sorted(job.id for job in jobs))
    return AmbiguousRunError(
        f"several new jobs of workflow {workflow_id} appeared while it was being run ({ids}); another run "
        "started at the same time, so which one is this task's cannot be told. Nothing was run again."
    )


class StoredRunJournal:
    """A :class:`RunJournal` in the task state store, under ``key``.

    ``known`` is the job id the store already holds for the task (a job an earlier try recorded): it
    is never taken for the pending run's job.
    """

    def __init__(self, store: Any, key: str, known: str | None = None) -> None:
        self.store, self.key, self.known = store, key, known

    def pending(self, workflow_id: str) -> set[str] | None:
        value = self.store.get(self.key)
        if not isinstance(value, dict) or value.get("workflow_id") != workflow_id:
            return None
        before = value.get("before")
        if not isinstance(before, list):
            return None
        return {str(job_id) for job_id in before} | ({self.known} if self.known else set())

    def sending(self, workflow_id: str, before: set[str]) -> None:
        self.store.set(self.key, {"workflow_id": workflow_id, "before": sorted(before)})


def _find_created_job(
    hook: WorkflowServiceHook, workflow_id: str, before: set[str], log: Log, sleep: Callable[[float], None]
) -> Job:
    """The one new job of a run the service accepted (never runs again: the run did happen)."""
    for wait in (0.0, *LOOKUP_WAITS):
        sleep(wait)
        new = _new_jobs(hook, workflow_id, before)
        if len(new) == 1:
            log.info("Found the run's job: %s", new[0].id)
            return new[0]
        if new:
            raise _several(workflow_id, new)
    raise AmbiguousRunError(
        f"the service accepted the run of workflow {workflow_id}, but no new job appeared in its job list "
        f"after {sum(LOOKUP_WAITS):.0f} s; not running it again"
    )
