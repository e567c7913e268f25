"""Trigger that waits for several Workflow Service jobs at once (an on-demand task's batches)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome


class WorkflowJobsTrigger(BaseTrigger):
    """
    Poll several jobs until each has reached a final status or the deadline passes; yield ONE event.

    The event is a :class:`~airflow_provider_workflowsvc.wait.outcome.JobsOutcome`: ``outcomes``, one
    :class:`~airflow_provider_workflowsvc.wait.outcome.JobOutcome` per job in the order of ``job_ids``, and
    ``resume_with``. Each job is logged as it ends; the waits are told by the connection's source as one
    wait is (:func:`~airflow_provider_workflowsvc.wait.jobs.await_jobs`).

    :param job_ids: the jobs to wait for.
    :param deadline: absolute deadline, epoch seconds (a triggerer restart does not reset it).
    :param poll_interval: seconds between polls.
    :param workflowsvc_conn_id: the Workflow Service connection.
    :param started_at: epoch seconds the wait began (for the elapsed times).
    :param cancel_on_kill: cancel the jobs not yet ended when a user ends the deferred task.
    :param resume_with: JSON the event carries back unchanged: what the task needs when it resumes
        (``dag.test()`` drops a deferral's own ``kwargs``).
    """

    def __init__(
        self,
        *,
        job_ids: list[str],
        deadline: float,
        poll_interval: float = 30.0,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        started_at: float | None = None,
        cancel_on_kill: bool = True,
        resume_with: dict[str, Any] | None = None,
    ) -> None:
        from airflow_provider_workflowsvc._tasks.base import interval_seconds

        super().__init__()
        if not job_ids:
            raise ValueError("WorkflowJobsTrigger needs at least one job id")
        self.job_ids = [str(job_id) for job_id in job_ids]
        self.deadline = float(deadline)
        self.poll_interval = interval_seconds(poll_interval, "poll_interval")
        self.workflowsvc_conn_id = workflowsvc_conn_id
        self.started_at = float(started_at) if started_at is not None else None
        self.cancel_on_kill = cancel_on_kill
        self.resume_with = resume_with
        self._ended: set[str] = set()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_ids": list(self.job_ids),
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "workflowsvc_conn_id": self.workflowsvc_conn_id,
                "started_at": self.started_at,
                "cancel_on_kill": self.cancel_on_kill,
                "resume_with": self.resume_with,
            },
        )

    def _hook(self) -> WorkflowServiceAsyncHook:
        from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook

        return WorkflowServiceAsyncHook(self.workflowsvc_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_workflowsvc.triggers.job import shared_status_poll
        from airflow_provider_workflowsvc.wait.jobs import await_jobs
        from airflow_provider_workflowsvc.wait.outcome import JobsOutcome, broken_outcome

        started = self.started_at if self.started_at is not None else time.time()
        self.log.info("Waiting for %d job(s) (polling every %g s)", len(self.job_ids), self.poll_interval)
        try:
            async with self._hook() as hook:
                outcomes = await await_jobs(
                    hook,
                    self.job_ids,
                    deadline=self.deadline,
                    interval=self.poll_interval,
                    started_at=started,
                    log=self.log,
                    share=shared_status_poll(),
                    on_end=self._mark_ended,
                )
        except Exception as exc:  # the task must hear about it: never end without an event
            self.log.exception("Waiting for the jobs failed")
            elapsed = time.time() - started
            outcomes = [broken_outcome(exc, job_id, elapsed) for job_id in self.job_ids]
        yield TriggerEvent(JobsOutcome(outcomes=outcomes, resume_with=self.resume_with).to_event())

    def _mark_ended(self, outcome: JobOutcome) -> None:
        if outcome.job_id:
            self._ended.add(outcome.job_id)

    async def on_kill(self) -> None:
        """Cancel the jobs not yet ended when a user ends the deferred task (:func:`~.job.ended_by_user`)."""
        from airflow_provider_workflowsvc.triggers.job import cancel_on_kill

        unfinished = [job_id for job_id in self.job_ids if job_id not in self._ended]
        await cancel_on_kill(self, unfinished, f"jobs {', '.join(unfinished)}")
