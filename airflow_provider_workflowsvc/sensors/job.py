"""Sensor that waits for a Workflow Service job: by id, or the job a workflow's schedule created."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_provider_workflowsvc._tasks.base import (
    XCOM_JOB_ID,
    WorkflowServiceTaskMixin,
    default_deferrable,
    input_error,
    interval_seconds,
    one_of,
)
from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_workflowsvc.wait.outcome import JobOutcome
    from airflow_provider_workflowsvc.wait.watch import JobWatch

PINNED_JOB_KEY = "workflowsvc_sensor_job"
"""Task state key of the job a workflow-mode sensor found and follows (never rename it)."""


def _renders_in_the_triggerer(job_id: Any) -> bool:
    """
    Whether the triggerer can render ``job_id``: a text, but not one that pulls an XCom (Airflow 3.3.2's
    triggerer cannot answer ``ti.xcom_pull``: the trigger would hang); an ``XComArg`` is the worker's too.
    """
    return isinstance(job_id, str) and "xcom" not in job_id.lower()


class WorkflowJobSensor(WorkflowServiceTaskMixin, BaseSensorOperator):
    """
    Wait for a job to finish, with the same failure rules as ``RunWorkflowOperator``.

    Give ``job_id``, or ``workflow_id`` (and usually ``created_after``) to wait for a job the service
    starts on its own schedule: the latest (or, with ``pick="earliest"``, the first) job of the workflow
    created after ``created_after``. Until such a job exists the sensor keeps waiting. The job found is
    pinned (task state store on Airflow 3.3+, and XCom ``job_id``): later pokes, reschedules, retries
    and a triggerer restart follow that job, never a newer one, and its failure fails the sensor.

    The job failing, being stopped, or completing with failed files (``fail_on_failed_files``), and the
    sensor's own timeout, fail the task without retries (``soft_fail`` skips it instead). A wait that
    could not observe its job (the service refused, or did not find it: a replica that does not have
    it yet) fails it with :class:`~airflow_provider_workflowsvc.exceptions.WorkflowJobWaitError`, and
    the task's retries apply (``soft_fail`` does not skip it): the same in every mode. Returns the job
    summary (XCom), which is also pushed before a failure. The sensor never cancels the job: it does
    not own it.

    :param job_id: the job to wait for (templated).
    :param workflow_id: instead of ``job_id``: the workflow whose job to wait for (templated).
    :param created_after: with ``workflow_id``: only jobs created after this date-time (a datetime or
        ISO-8601 string; naive means UTC) count (templated). Empty: any job of the workflow.
    :param pick: with ``workflow_id``: ``latest`` (default) or ``earliest`` of the matching jobs.
    :param fail_on_failed_files: fail when the job completed but some files failed.
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``. With a
        ``job_id`` (given, or templated without XCom) on Airflow 3.3+, the sensor starts in the
        triggerer and, when the job passes, ends there too: no worker runs it at all (a job that
        fails resumes it in a worker, to fail with the provider's error).
    :param start_from_trigger: with ``deferrable`` and a ``job_id`` that is not pulled from XCom: start
        in the triggerer (Airflow 3.3+); False: poke once in a worker first, then defer.
    :param poke_interval: seconds (or a timedelta) between checks of the job, at least
        ``[workflowsvc] min_poll_interval``.
    :param workflowsvc_conn_id: the Workflow Service connection (templated).
    """

    template_fields: Sequence[str] = ("job_id", "workflow_id", "created_after", "workflowsvc_conn_id")
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        job_id: str | None = None,
        workflow_id: str | None = None,
        created_after: Any = None,
        pick: str = "latest",
        fail_on_failed_files: bool = True,
        deferrable: bool | None = None,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        poke_interval: float | timedelta = 30.0,
        start_from_trigger: bool = True,
        **kwargs: Any,
    ) -> None:
        interval_seconds(poke_interval, "poke_interval")
        super().__init__(poke_interval=poke_interval, workflowsvc_conn_id=workflowsvc_conn_id, **kwargs)
        if (job_id is None) == (workflow_id is None):
            raise input_error("give exactly one of job_id and workflow_id")
        self.job_id = job_id
        self.workflow_id = workflow_id
        self.created_after = created_after
        self.pick = one_of(pick, ("latest", "earliest"), "pick")
        self.fail_on_failed_files = fail_on_failed_files
        self.deferrable = default_deferrable(deferrable)
        self._watch: JobWatch | None = None
        if self.deferrable and start_from_trigger and _renders_in_the_triggerer(job_id):
            self._start_in_the_triggerer()

    def _start_in_the_triggerer(self) -> None:
        """
        Let the scheduler defer the task straight to the trigger (``start_from_trigger``, Airflow 3.3+), with
        Airflow's deferral timeout (``timeout``, or less ``execution_timeout``) plus ``DEFERRAL_BACKSTOP``. A
        job that passes ends the task in the triggerer, but for a sensor with ``outlets`` (Airflow 3.3.2 emits
        asset events only when a worker ends a task).
        """
        from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_3_PLUS

        if not AIRFLOW_V_3_3_PLUS:
            return
        from airflow.triggers.base import StartTriggerArgs

        from airflow_provider_workflowsvc._tasks.deadline import wait_deadline
        from airflow_provider_workflowsvc.triggers.job import DEFERRAL_BACKSTOP, WorkflowJobTrigger

        bound = wait_deadline({}, 0.0, float(self.timeout), self.execution_timeout)  # from time 0: a length
        self.start_from_trigger = True
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{WorkflowJobTrigger.__module__}.{WorkflowJobTrigger.__qualname__}",
            next_method="execute_complete",
            trigger_kwargs={
                "job_id": self.job_id,
                "deadline": None,
                "poll_interval": interval_seconds(self.poke_interval, "poke_interval"),
                "workflowsvc_conn_id": self.workflowsvc_conn_id,
                "cancel_on_kill": False,
                "end_on_success": not self.outlets,
                "fail_on_failed_files": self.fail_on_failed_files,
                "push_summary": self.do_xcom_push,
            },
            timeout=timedelta(seconds=bound + DEFERRAL_BACKSTOP),
        )

    def execute(self, context: Context) -> Any:
        self._watch = None
        with self.closing_hook():
            if not self.deferrable:
                return super().execute(context)
            done = self._first_poke(context)
            if done:
                return done.xcom_value if isinstance(done, PokeReturnValue) else None
            self._defer(context, time.time())

    def _first_poke(self, context: Context) -> bool | PokeReturnValue:
        """One poke before deferring (a finished job needs no trigger), with soft_fail applied."""
        from airflow_provider_workflowsvc._compat import (
            AirflowFailException,
            AirflowSensorTimeout,
            AirflowSkipException,
        )

        try:
            return self.poke(context)
        except (AirflowFailException, AirflowSensorTimeout) as exc:
            if self.soft_fail or getattr(self, "never_fail", False):
                raise AirflowSkipException(f"Skipping (soft_fail): {exc}") from exc
            raise

    def _defer(self, context: Context, started: float, job_id: str | None = None) -> None:
        from airflow_provider_workflowsvc._tasks.deadline import wait_deadline
        from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger, deferral_timeout
        from airflow_provider_workflowsvc.wait.poll import parse_created_after

        job_id = job_id or (self._watch.job_id if self._watch is not None else None)
        deadline = wait_deadline(context, started, self.timeout, self.execution_timeout)
        after = parse_created_after(self.created_after) if job_id is None else None
        trigger = WorkflowJobTrigger(
            job_id=job_id,
            workflow_id=str(self.workflow_id) if self.workflow_id else None,
            created_after=after.isoformat() if after is not None else None,
            pick=self.pick,
            deadline=deadline,
            poll_interval=self.poke_interval,
            workflowsvc_conn_id=self.workflowsvc_conn_id,
            started_at=started,
            cancel_on_kill=False,
        )
        self.defer(
            trigger=trigger, method_name="execute_complete", timeout=deferral_timeout(deadline, self.log)
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        from airflow_provider_workflowsvc.wait.outcome import broken_outcome
        from airflow_provider_workflowsvc.wait.poll import is_transient, poll_once, survive_transient

        watch = self._watch or self._find(context)
        if watch is None:
            return False
        try:
            outcome = poll_once(self.hook, watch)
        except Exception as exc:
            if not is_transient(exc):  # the wait broke: it fails as the trigger's error event does (raises)
                self._finish(context, broken_outcome(exc, watch.job_id, watch.elapsed))
            survive_transient(exc, self.log, f"Job {watch.job_id}: status check", retry="next poke")
            return False
        if outcome is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._finish(context, outcome))

    def _find(self, context: Context) -> JobWatch | None:
        """Return the watch of the job to wait for (found once; later pokes keep following it)."""
        from airflow_provider_workflowsvc.wait.poll import find_job, parse_created_after
        from airflow_provider_workflowsvc.wait.watch import JobWatch

        job_id = str(self.job_id).strip() if self.job_id is not None else ""
        if self.job_id is None:
            job_id = self._pinned_job(context) or ""
            if job_id:
                self.log.info("Following job %s of workflow %s (found earlier)", job_id, self.workflow_id)
            else:
                after = parse_created_after(self.created_after)
                job = find_job(self.hook, str(self.workflow_id), after, self.pick)
                if job is None:
                    self.log.info("No job of workflow %s created after %s yet", self.workflow_id, after)
                    return None
                job_id = job.id
                self._pin(context, job_id)
                self.log.info("Waiting for job %s of workflow %s", job_id, self.workflow_id)
        if not job_id:
            from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError

            raise WorkflowServiceInputError("job_id rendered to an empty value")
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=job_id)
        self._watch = JobWatch(job_id, self.log)
        return self._watch

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """
        Resume after the trigger. A wait that could not observe its job stays a retryable failure under
        ``soft_fail`` (Airflow's sensor would skip it), as in poke mode.
        """
        from airflow_provider_workflowsvc._compat import AirflowSkipException
        from airflow_provider_workflowsvc.exceptions import WorkflowJobWaitError

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowSkipException as skipped:
            broken = skipped.__cause__
            if isinstance(broken, WorkflowJobWaitError) and not getattr(self, "never_fail", False):
                raise broken from None
            raise

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: a job found is pinned and waited for; an outcome is applied."""
        from airflow_provider_workflowsvc.wait.outcome import parse_event

        outcome = parse_event(event)
        if outcome.status == "found" and outcome.job_id and self.job_id is None:
            self._pin(context, outcome.job_id)
            self.log.info("Found job %s of workflow %s; waiting for it", outcome.job_id, self.workflow_id)
            self._defer(context, time.time() - (outcome.elapsed or 0.0), outcome.job_id)
        if outcome.job_id:
            context["ti"].xcom_push(key=XCOM_JOB_ID, value=outcome.job_id)
        return self._finish(context, outcome)

    # -- the job a workflow-mode sensor follows ------------------------------------------------------

    def _pin(self, context: Context, job_id: str) -> None:
        """Remember the job found, so that later pokes, reschedules and retries follow it."""
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=job_id)
        store = context.get("task_state_store")
        if store is not None:
            store.set(PINNED_JOB_KEY, {"workflow_id": str(self.workflow_id), "job_id": job_id})

    def _pinned_job(self, context: Context) -> str | None:
        """Return the job an earlier poke (or try) of this sensor found, if any."""
        store = context.get("task_state_store")
        if store is not None:
            value = store.get(PINNED_JOB_KEY)
            if isinstance(value, dict) and value.get("workflow_id") == str(self.workflow_id):
                return str(value.get("job_id") or "") or None
            return None
        pushed = context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_JOB_ID)
        return str(pushed) if pushed else None

    def _unpin(self, context: Context) -> None:
        store = context.get("task_state_store")
        if store is not None and self.job_id is None:
            try:
                store.delete(PINNED_JOB_KEY)
            except Exception as exc:
                self.log.warning("Could not remove %s from the task state store: %s", PINNED_JOB_KEY, exc)

    def _finish(self, context: Context, outcome: JobOutcome) -> dict[str, Any]:
        """Return the summary, or push it and fail (``failure_for`` decides whether retries apply)."""
        from airflow_provider_workflowsvc import metrics
        from airflow_provider_workflowsvc.wait.outcome import failure_for, log_outcome

        log_outcome(outcome, self.log, fail_on_failed_files=self.fail_on_failed_files)
        known = str(self.workflow_id) if self.workflow_id else None
        metrics.job_ended(outcome, self.workflowsvc_conn_id, metrics.workflow_of(outcome, known))
        error = failure_for(outcome, fail_on_failed_files=self.fail_on_failed_files, owns_job=False)
        summary = outcome.summary(
            fail_on_failed_files=self.fail_on_failed_files, workflow_id=self.workflow_id or None
        )
        if outcome.job_id and outcome.observed:
            self._unpin(context)  # the job's wait has ended: clearing the task finds a new job
        if error is None:
            return summary
        if self.do_xcom_push:
            context["ti"].xcom_push(key="return_value", value=summary)
        if outcome.status == "timeout":
            from airflow_provider_workflowsvc._tasks.deadline import timeout_failure

            raise timeout_failure(context, error, self.execution_timeout)
        raise error
