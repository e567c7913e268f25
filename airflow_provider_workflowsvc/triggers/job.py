"""Trigger that waits for a Workflow Service job (and, for a sensor, first for the job to appear)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome
    from airflow_provider_workflowsvc.wait.watch import PollSchedule

DEFERRAL_BACKSTOP = 600.0
"""Seconds Airflow's own deferral timeout comes after the trigger's deadline (a backstop: the trigger
reports its own; long enough for the end's reads and the cancel of a triggerer running late)."""


def deferral_timeout(deadline: float, log: Any) -> timedelta:
    """
    Return the deferral timeout of a task deferred to a trigger with ``deadline`` (epoch seconds), and
    log where the wait goes and what it needs there (with no triggerer, nothing else is said until then).
    """
    timeout = timedelta(seconds=max(0.0, deadline - time.time()) + DEFERRAL_BACKSTOP)
    log.info(
        "Waiting in the triggerer (needs a running triggerer with this provider installed: without one the "
        "task stays deferred, without a word, until Airflow's deferral timeout in %d s; see the provider's "
        "Installation page, 'Deferrable tasks')",
        timeout.total_seconds(),
    )
    return timeout


class WorkflowJobTrigger(BaseTrigger):
    """
    Poll a job until it reaches a final status or the deadline passes; yield exactly one event.

    The event payload is a :class:`~airflow_provider_workflowsvc.wait.outcome.JobOutcome` (``status``:
    ``success``, ``failed``, ``stopped``, ``timeout`` or ``error``; the job's ids, status, message,
    progress, failed and output files, ``elapsed``); the operator decides what failed files mean. Waiting
    for a workflow's job (``job_id=None``), it ends with ``found``: the task pins that job and defers again.
    A poll (``GET /jobs/{id}/details``) is sent only when the connection's source
    (:mod:`~airflow_provider_workflowsvc.wait.source`) shows the job changed or cannot vouch that it did
    not; transient errors are tried again until the deadline, which no request outlives but the reads of
    an end seen before it.

    :param job_id: the job to wait for; ``None`` to first wait for a job of ``workflow_id``.
    :param deadline: absolute deadline, epoch seconds (a triggerer restart does not reset it); None for
        a task that starts in the triggerer: Airflow's deferral timeout less ``DEFERRAL_BACKSTOP``.
    :param poll_interval: seconds between polls.
    :param workflowsvc_conn_id: the Workflow Service connection.
    :param started_at: epoch seconds the wait began (for the elapsed time in the event and logs).
    :param cancel_on_kill: cancel the job when a user marks the deferred task failed/success or clears it.
    :param workflow_id: with ``job_id=None``: the workflow whose job to wait for (given with a job,
        it is kept for the task's metrics).
    :param created_after: with ``job_id=None``: only jobs created after this ISO-8601 date-time count.
    :param pick: with ``job_id=None``: ``latest`` or ``earliest`` of the matching jobs.
    :param end_on_success: end the task here when the job's outcome passes (a ``TaskSuccessEvent``
        carrying the XComs the task would push): no worker resumes it; any other outcome resumes the
        task. Only the sensor started in the triggerer sets it.
    :param fail_on_failed_files: with ``end_on_success``: whether failed files fail the task.
    :param push_summary: with ``end_on_success``: push the job summary as ``return_value``.
    """

    def __init__(
        self,
        *,
        job_id: str | None,
        deadline: float | None,
        poll_interval: float = 30.0,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        started_at: float | None = None,
        cancel_on_kill: bool = True,
        workflow_id: str | None = None,
        created_after: str | None = None,
        pick: str = "latest",
        end_on_success: bool = False,
        fail_on_failed_files: bool = True,
        push_summary: bool = True,
    ) -> None:
        from airflow_provider_workflowsvc._tasks.base import interval_seconds

        super().__init__()
        if job_id is None and workflow_id is None:
            raise ValueError("WorkflowJobTrigger needs a job_id, or a workflow_id to find the job of")
        self.job_id = job_id
        self.deadline = None if deadline is None else float(deadline)
        self.poll_interval = interval_seconds(poll_interval, "poll_interval")
        self.workflowsvc_conn_id = workflowsvc_conn_id
        self.started_at = float(started_at) if started_at is not None else None
        self.cancel_on_kill = cancel_on_kill
        self.workflow_id = workflow_id
        self.created_after = created_after
        self.pick = pick
        self.end_on_success = end_on_success
        self.fail_on_failed_files = fail_on_failed_files
        self.push_summary = push_summary

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "workflowsvc_conn_id": self.workflowsvc_conn_id,
                "started_at": self.started_at,
                "cancel_on_kill": self.cancel_on_kill,
                "workflow_id": self.workflow_id,
                "created_after": self.created_after,
                "pick": self.pick,
                "end_on_success": self.end_on_success,
                "fail_on_failed_files": self.fail_on_failed_files,
                "push_summary": self.push_summary,
            },
        )

    def _deadline(self) -> float:
        """Return the deadline given, or (started in the triggerer) Airflow's timeout less the backstop."""
        if self.deadline is not None:
            return self.deadline
        timeout_after = getattr(self, "timeout_after", None)
        if timeout_after is None:
            raise ValueError("WorkflowJobTrigger needs a deadline, or a deferral timeout to derive it from")
        return float(timeout_after.timestamp()) - DEFERRAL_BACKSTOP

    def _hook(self) -> WorkflowServiceAsyncHook:
        from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook

        return WorkflowServiceAsyncHook(self.workflowsvc_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_workflowsvc.wait.outcome import broken_outcome
        from airflow_provider_workflowsvc.wait.watch import PollSchedule

        started = self.started_at if self.started_at is not None else time.time()
        schedule = PollSchedule(self._deadline(), self.poll_interval)
        try:
            async with self._hook() as hook:
                outcome = await self._wait(hook, schedule, started)
        except Exception as exc:  # the task must hear about it: never end without an event
            self.log.exception("Waiting for the job failed")
            outcome = broken_outcome(exc, self.job_id, time.time() - started)
        yield self._event(outcome)

    def _event(self, outcome: JobOutcome) -> TriggerEvent:
        """
        Return the event that ends the wait: the outcome for the task to resume with, or (with
        ``end_on_success``, when the outcome passes) Airflow's ``TaskSuccessEvent``: no worker resumes it.
        """
        xcoms = self._success_xcoms(outcome) if self.end_on_success else None
        if xcoms is None:
            return TriggerEvent(outcome.to_event())
        from airflow.triggers.base import TaskSuccessEvent

        from airflow_provider_workflowsvc import metrics
        from airflow_provider_workflowsvc.wait.outcome import log_outcome

        # one line, not two: a thousand sensors ending at once block the triggerer's loop on log writes
        then = "the task ends here, without a worker"
        log_outcome(outcome, self.log, fail_on_failed_files=self.fail_on_failed_files, then=then)
        workflow = metrics.workflow_of(outcome, self.workflow_id)
        metrics.job_ended(outcome, self.workflowsvc_conn_id, workflow, self.task_instance)
        return TaskSuccessEvent(xcoms=xcoms)

    def _success_xcoms(self, outcome: JobOutcome) -> dict[str, Any] | None:
        """
        Return the XComs the sensor's ``execute_complete`` pushes when ``outcome`` passes (the job id,
        and the summary as ``return_value``), or None when the outcome fails the task (it resumes to fail).
        """
        from airflow_provider_workflowsvc._tasks.base import XCOM_JOB_ID
        from airflow_provider_workflowsvc.wait.outcome import failure_for

        passes = failure_for(outcome, fail_on_failed_files=self.fail_on_failed_files) is None
        if not (passes and outcome.job_id):
            return None
        xcoms: dict[str, Any] = {XCOM_JOB_ID: outcome.job_id}
        if self.push_summary:
            xcoms["return_value"] = outcome.summary(fail_on_failed_files=self.fail_on_failed_files)
        return xcoms

    async def _wait(
        self, hook: WorkflowServiceAsyncHook, schedule: PollSchedule, started: float
    ) -> JobOutcome:
        from airflow_provider_workflowsvc.wait.outcome import JobOutcome, unfound_outcome
        from airflow_provider_workflowsvc.wait.poll import await_job, await_new_job, parse_created_after
        from airflow_provider_workflowsvc.wait.watch import JobWatch

        job_id = self.job_id
        if job_id is None:
            assert self.workflow_id is not None
            self.log.info(
                "Waiting for a job of workflow %s created after %s", self.workflow_id, self.created_after
            )
            after = parse_created_after(self.created_after)
            job = await await_new_job(hook, self.workflow_id, after, self.pick, schedule, self.log)
            if job is None:
                return unfound_outcome(
                    "timeout",
                    f"no job of workflow {self.workflow_id} created after {self.created_after} appeared",
                    time.time() - started,
                )
            # The task pins the job before waiting for it: a triggerer restart must not re-search and
            # switch to a newer job.
            self.log.info("Found job %s (status %s)", job.id, job.raw_status or job.status)
            return JobOutcome(
                status="found",
                job_id=job.id,
                workflow_id=self.workflow_id,
                job_status=job.raw_status or job.status.value,
                elapsed=time.time() - started,
            )
        self.log.info("Waiting for job %s (polling every %.0f s)", job_id, self.poll_interval)
        from airflow_provider_workflowsvc.wait.source import watching

        watch = JobWatch(job_id, self.log, started)
        shared = watching(hook, watch, schedule.interval) if shared_status_poll() else None  # None: its own
        return await await_job(hook, watch, schedule, shared)

    async def on_kill(self) -> None:
        """Cancel the job when a user ends the deferred task (:func:`ended_by_user`)."""
        await cancel_on_kill(self, [self.job_id] if self.job_id else [], f"job {self.job_id}")


STILL_WAITING = frozenset({"deferred", "up_for_retry"})
"""Task states in which a trigger's ``on_kill`` leaves the jobs running: a try of the task still waits,
or will, for them. No user action on a deferred task leads to either: marking sets ``failed``,
``success`` or ``skipped``, clearing ``None`` (then ``scheduled`` ... as it runs again)."""


async def cancel_on_kill(trigger: Any, job_ids: list[str], jobs: str) -> None:
    """
    Cancel ``job_ids`` (``jobs``: them in words) in ``on_kill`` when the trigger's ``cancel_on_kill`` is
    set and a user ended the task (:func:`ended_by_user`); a failure is reported: the task is ending anyway.
    """
    if not (trigger.cancel_on_kill and job_ids and await ended_by_user(trigger, jobs)):
        return
    from airflow_provider_workflowsvc.wait.jobs import acancel_all
    from airflow_provider_workflowsvc.wait.poll import CANCEL_BUDGET

    try:
        async with trigger._hook() as hook:
            await acancel_all(hook, job_ids, trigger.log, within=CANCEL_BUDGET)
    except Exception as exc:
        trigger.log.warning("Could not cancel %s: %s", jobs, exc)


async def ended_by_user(trigger: BaseTrigger, jobs: str) -> bool:
    """
    Whether ``on_kill`` runs because a user ended the task, not because this triggerer lost the trigger
    (Airflow 3.3.0-3.3.2 send both, PR #73454): a lost trigger's task is still deferred. Fails closed.
    """
    try:
        state = await task_state(trigger)
    except Exception as exc:
        trigger.log.warning(
            "Left %s running: could not read the task's state (%s), so whether a user ended the task or "
            "this triggerer lost the trigger to another is unknown",
            jobs,
            str(exc) or type(exc).__name__,
        )
        return False
    if state in STILL_WAITING:
        trigger.log.info(
            "Left %s running: the task is still %s (this triggerer lost the trigger to another)", jobs, state
        )
        return False
    return True


async def task_state(trigger: BaseTrigger) -> str | None:
    """Return the current state of the trigger's task instance, asked through the triggerer's supervisor."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

    from airflow_provider_workflowsvc.hooks._pool import wait_at_most
    from airflow_provider_workflowsvc.wait.poll import CANCEL_BUDGET

    ti = trigger.task_instance
    if ti is None:
        raise LookupError("the trigger has no task instance")
    ask = GetTaskStates(dag_id=ti.dag_id, run_ids=[ti.run_id], task_ids=[ti.task_id], map_index=ti.map_index)
    answer = await wait_at_most(task_runner.SUPERVISOR_COMMS.asend(ask), CANCEL_BUDGET)
    key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
    states = answer.task_states.get(ti.run_id, {}) if isinstance(answer, TaskStatesResult) else {}
    if key not in states:
        raise LookupError(f"no state of {ti.dag_id}/{ti.run_id}/{key} in the answer {answer!r}")
    return None if states[key] is None else str(states[key])


SHARED_STATUS_POLL = True
"""Whether waits on one workflow's jobs share one status poll by default (``[workflowsvc]
shared_status_poll``; ``False`` makes every wait poll its own job)."""


def shared_status_poll() -> bool:
    """Whether waits share one status poll per workflow here: ``[workflowsvc] shared_status_poll``."""
    from airflow_provider_workflowsvc._compat import conf

    return conf.getboolean("workflowsvc", "shared_status_poll", fallback=SHARED_STATUS_POLL)
