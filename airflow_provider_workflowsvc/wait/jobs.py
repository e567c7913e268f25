"""Many jobs waited for at once (an on-demand task's batches): each a wait of its own, the polls shared."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.wait.outcome import JobOutcome
from airflow_provider_workflowsvc.wait.poll import acancel_quietly, await_batch_job
from airflow_provider_workflowsvc.wait.source import watching
from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook

Log = logging.Logger | Any


async def await_jobs(
    hook: WorkflowServiceAsyncHook,
    job_ids: Sequence[str],
    *,
    deadline: float,
    interval: float,
    started_at: float,
    log: Log,
    share: bool,
    on_end: Callable[[JobOutcome], None] | None = None,
) -> list[JobOutcome]:
    """
    Wait until every job of ``job_ids`` has ended or the deadline passes; the outcomes, in that order.

    Each job is a wait of its own (:func:`~.poll.await_job`), told by the connection's source with
    ``share``; each end is logged at once (``on_end`` hears of it); a wait that fails is its job's ``error``.
    """
    ended = 0

    def report(done: asyncio.Future[JobOutcome]) -> None:
        nonlocal ended
        if done.cancelled():
            return
        outcome = done.result()
        ended += 1
        log.info(
            "Job %s ended waiting: %s (job status %s, %d failed file(s)); %d of %d jobs done",
            outcome.job_id,
            outcome.status,
            outcome.job_status,
            len(outcome.failed_files),
            ended,
            len(job_ids),
        )
        if on_end is not None:
            on_end(outcome)

    waits = []
    for job_id in job_ids:  # each a task of its own: its polls' suspensions wake only its own frames
        watch, schedule = JobWatch(job_id, log, started_at), PollSchedule(deadline, interval)
        shared = watching(hook, watch, interval) if share else None
        waits.append(asyncio.ensure_future(await_batch_job(hook, watch, schedule, shared)))
        waits[-1].add_done_callback(report)
    return list(await asyncio.gather(*waits))


async def acancel_all(
    hook: WorkflowServiceAsyncHook, job_ids: Sequence[str], log: Log, within: float
) -> None:
    """Ask the service to stop each of ``job_ids`` at once, within ``within`` seconds; failures logged."""

    async def cancel(job_id: str) -> None:
        try:
            await acancel_quietly(hook, job_id, log, within=within)
        except Exception as exc:
            log.warning("Could not cancel job %s: %s", job_id, exc)

    await asyncio.gather(*(cancel(job_id) for job_id in job_ids))
