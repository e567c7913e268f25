"""Run a workflow exactly once, even when the run request fails ambiguously.

The hook never retries the run POST once it may have reached the server. When it fails in a way that
leaves unknown whether the service created a job (5xx, 429, a dropped connection or read timeout), or
succeeds without naming the job, the job is found by comparing the workflow's job ids with a snapshot
taken before the request:

* exactly one new job → it is the run's job, adopted;
* none (after a failure) → the run did not happen; it is sent again, at most ``attempts`` times in all,
  with exponential backoff;
* several → another run started at the same time (a schedule, another client): refuse to guess.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

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


def submit_run(
    hook: WorkflowServiceHook,
    workflow_id: str,
    files: Sequence[str] | None,
    log: Log,
    *,
    attempts: int = 3,
    backoff: float = 2.0,
    sleep: Callable[[float], None] | None = None,
) -> Job:
    """Run ``workflow_id`` once (with ``files``, or no body) and return the job it created."""
    sleep = sleep or time.sleep
    before = {job.id for job in hook.list_jobs(workflow_id=workflow_id)}
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
