"""Process any number of local files with on-demand jobs, split into jobs within the service's limits."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_workflowsvc._tasks.base import (
    input_error,
    invalid_input_fails,
    is_deferred_value,
    one_of,
    positive_seconds,
)
from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID
from airflow_provider_workflowsvc.operators._lifecycle import JobOperator, job_settings
from airflow_provider_workflowsvc.operators.jobs import WorkflowJobLink
from airflow_provider_workflowsvc.operators.workflows import check_nodes

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_workflowsvc._tasks.launches import Plan
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

__all__ = ["OnDemandJobLink", "RunOnDemandJobOperator"]

OVERSIZED_CHOICES = ("fail", "skip")
XCOM_JOB_IDS = "job_ids"
XCOM_JOB_LINKS = "job_links"


class OnDemandJobLink(WorkflowJobLink):
    """Link to the task's first on-demand job in the service (every job's link: XCom ``job_links``)."""

    name = "Workflow Service job (first)"


class RunOnDemandJobOperator(JobOperator):
    """
    Process local files with the service's on-demand jobs (a template, or nodes given inline; no
    workflow to create), any number of files; wait for every job; return one summary per document.

    The files are split into jobs within the service's limits (``max_files_per_job`` files each, every
    file at most ``max_file_bytes``), launched at least ``launch_interval`` seconds apart (a launch the
    service refuses with 429 is sent again after its ``Retry-After``); the service queues the jobs
    beyond its running cap itself. The task waits for all of them in one deferral (deferrable by
    default), each job logged as it ends, then downloads the outputs when ``output_dir`` is given.

    When a launch is refused midway, the jobs already launched are
    still waited for and reported, and the task fails naming the files never launched. A launch whose
    answer is lost is never sent again unless the service proves it created nothing (as a run's,
    :class:`RunWorkflowOperator`); with the names as they are (the default), nothing can prove which
    job a lost answer created, and the task fails closed naming the candidates.

    A document is known by its source (path or URI), never by its name: inputs that share a name or a
    base name (``day1/report.txt`` and ``day2/report.txt`` given as two folders) go to different jobs,
    so what the service says of a name in a job means one document.

    Durable execution (``durable=True``): the task state store (before Airflow 3.3: a Variable of the
    task) remembers which job launched which documents (by source), so a retry launches only the
    documents not processed (never launched, in a job that failed, was stopped or is gone, or a failed
    file when failed files fail the task): a document processed, or still processing, is never launched
    again. With ``durable=False`` a failure after any launch fails the task without retries, since a
    retry would launch every document again.

    Pushes XCom ``job_ids`` and ``job_links`` (every job's link; the extra link shows the first)
    before waiting. Returns the summary: ``documents`` (per document: ``document``, ``source``,
    ``job_id``, ``status``, ``error``, ``output_files``), ``jobs`` (per job: ``job_id``, ``status``,
    ``outcome``, ``documents``, ``job_url``, ``failed_files``, ``output_files``, the times),
    ``outcome``, ``document_count``, ``completed_count``, ``unprocessed_count``. A document's
    ``status`` is ``completed``, ``failed`` (the service could not process it), ``unknown`` (a failed
    file the service named can be several documents: never launched again), ``job_failed`` (its
    job failed), ``stopped``, ``timeout``, ``error``, ``not_launched`` or ``skipped``. On failure the
    summary is pushed as the return value before the task fails.

    :param files: input files (templated), as ``RunWorkflowOperator`` takes them: a path, directory,
        glob pattern, a location in object storage, or a list mixing them; the service sees each file's
        name relative to its directory, prefix or pattern. An object's size is the one the store lists.
    :param files_conn_id: the Airflow connection of the storage URIs in ``files`` that name none
        (templated), as ``RunWorkflowOperator``'s.
    :param template_id: the service's workflow template to process them with (templated), e.g.
        ``hi_res_partition``. Give this or ``job_nodes``.
    :param job_nodes: the nodes to process them with, as a custom workflow's (templated; their
        settings are masked in logs and rendered fields).
    :param output_dir: directory, or folder of object storage, to download every output into
        (templated), as ``DownloadJobOutputOperator`` names and writes them (``report.pdf`` →
        ``report.pdf.json``); each document's files are in the summary. None: nothing is downloaded.
    :param output_conn_id: the Airflow connection of an ``output_dir`` URI that names none (templated).
    :param workflowsvc_conn_id: the Workflow Service connection (templated).
    :param max_files_per_job: most files per job (the service's limit: 10).
    :param max_file_bytes: largest file in bytes (the service's limit: 10 MB, read as 10,000,000).
    :param launch_interval: least seconds (or a timedelta) between two launches (the service's: 1 s).
    :param oversized_files: ``fail`` (default): a file over ``max_file_bytes`` fails the task before
        anything is uploaded; ``skip``: it is not uploaded and is reported (status ``skipped``), which
        fails the task at the end when failed files do.
    :param poll_interval: seconds between status checks.
    :param timeout: seconds (or a timedelta) to wait for all the jobs before failing the task.
    :param deferrable: wait in the triggerer (default), holding no worker slot while the jobs run.
    :param fail_on_failed_files: fail the task when the service could not process some files.
    :param cancel_on_timeout: cancel the jobs not ended when the wait times out.
    :param cancel_on_kill: cancel the jobs when the task is killed (or, deferred, marked/cleared).
    :param submit_attempts: launch requests sent at most per job, when earlier ones provably created
        no job (a 429 or 503 answer, a connection never made).
    :param launch_grace_period: seconds (or a timedelta) the account's jobs are read after a lost
        launch answer for the job it may have created; the launch is never sent again after one.
    :param mark_uploads: upload each file with a marker unique to its launch in its name
        (``report__wfsvc-<16 hex>.txt``), so the job of a lost answer can be proven this task's; the
        service then also writes that name into the elements' ``metadata.filename``. Default
        ``False``: the names stay yours, and a lost answer fails the task, naming the candidates.
    :param skip_if_no_files: skip the task when the directories and patterns of ``files`` match no
        file at all.
    :param durable: remember the launches in the task state store (before Airflow 3.3: a Variable), so
        a retry launches only the documents not processed.
    """

    template_fields: Sequence[str] = (
        "files",
        "files_conn_id",
        "template_id",
        "job_nodes",
        "output_dir",
        "output_conn_id",
        "workflowsvc_conn_id",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"job_nodes": "json"}
    secret_fields: ClassVar[Sequence[str]] = ("job_nodes",)
    operator_extra_links = (OnDemandJobLink(),)
    ui_color = "#e8f4fe"

    def __init__(
        self,
        *,
        files: str | Any | Sequence[str | Any],
        files_conn_id: str | None = None,
        template_id: str | None = None,
        job_nodes: list[Any] | None = None,
        output_dir: str | Any | None = None,
        output_conn_id: str | None = None,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        max_files_per_job: int = 10,
        max_file_bytes: int = 10_000_000,
        launch_interval: float | timedelta = 1.0,
        oversized_files: str = "fail",
        poll_interval: float | timedelta = 30.0,
        timeout: float | timedelta = timedelta(hours=24),
        deferrable: bool = True,
        fail_on_failed_files: bool = True,
        cancel_on_timeout: bool = True,
        cancel_on_kill: bool = True,
        submit_attempts: int = 5,
        launch_grace_period: float | timedelta = 30.0,
        mark_uploads: bool = False,
        skip_if_no_files: bool = False,
        durable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            workflowsvc_conn_id=workflowsvc_conn_id,
            # Unlike a run's (Airflow's setting): its jobs queue behind the service's cap of 5 running
            # on-demand jobs per account, so the one wait for all of them may be long; a worker slot
            # held all along is what the triggerer saves (documented as the default since it came).
            deferrable=deferrable,
            **job_settings(locals()),
            **kwargs,
        )
        _check_template_or_nodes(template_id, job_nodes)
        for what, value in (("max_files_per_job", max_files_per_job), ("max_file_bytes", max_file_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise input_error(f"{what} must be a positive whole number, got {value!r}")
        interval = (
            launch_interval.total_seconds() if hasattr(launch_interval, "total_seconds") else launch_interval
        )
        if float(interval) < 0:
            raise input_error(f"launch_interval must not be negative, got {launch_interval!r}")
        self.template_id = template_id
        self.job_nodes = job_nodes
        self.output_dir = output_dir
        self.output_conn_id = output_conn_id
        self.max_files_per_job = max_files_per_job
        self.max_file_bytes = max_file_bytes
        self.launch_interval = float(interval)
        self.oversized_files = one_of(oversized_files, OVERSIZED_CHOICES, "oversized_files")
        self.launch_grace_period = positive_seconds(launch_grace_period, "launch_grace_period")
        self._job_ids: list[str] = []

    # -- execution ---------------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        from airflow_provider_workflowsvc._tasks.deadline import wait_deadline

        self._job_ids = []
        self.push_links(context)
        self.forget_if_cleared(context)
        with self.closing_hook():
            plan = self._launch(context)
            if not plan.jobs:
                return self._finish(context, plan, [])
            self._announce(context, plan)
            started = time.time()
            deadline = wait_deadline(context, started, self.timeout, self.execution_timeout)
            if self.deferrable:
                self._defer(plan, started, deadline)
            return self._finish(context, plan, self._wait_here(started, deadline))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: validate its event and the plan it carried (failing closed), sum up."""
        from airflow_provider_workflowsvc._tasks.launches import Plan
        from airflow_provider_workflowsvc.wait.outcome import parse_jobs_event

        ended = parse_jobs_event(event)
        plan = Plan.from_json(ended.resume_with)
        self._job_ids = [job.job_id for job in plan.jobs]
        with self.closing_hook():
            return self._finish(context, plan, ended.outcomes)

    def state_keys(self) -> tuple[str, ...]:
        from airflow_provider_workflowsvc._tasks.launches import BOOK_KEY

        return (BOOK_KEY,)

    def jobs_to_cancel_on_kill(self) -> list[str]:
        """Return every job launched so far."""
        return list(self._job_ids)

    # -- launching ---------------------------------------------------------------------------------

    def _launch(self, context: Context) -> Plan:
        """Check the input, then launch the documents no earlier try processed; return the plan."""
        from airflow_provider_workflowsvc._tasks import launches
        from airflow_provider_workflowsvc._tasks.inputs import resolve_task_files
        from airflow_provider_workflowsvc._tasks.on_demand import check_template
        from airflow_provider_workflowsvc._tasks.outputs import output_folder
        from airflow_provider_workflowsvc.exceptions import validate_input
        from airflow_provider_workflowsvc.models import CreateJob

        docs, big = launches.documents(resolve_task_files(self, "process"), self.max_file_bytes)
        with invalid_input_fails():
            if big and self.oversized_files == "fail":
                raise input_error(launches.too_large(big, self.max_file_bytes))
            _check_template_or_nodes(self.template_id, self.job_nodes)
            fields = {"template_id": self.template_id, "job_nodes": self.job_nodes}
            validate_input(CreateJob, "on-demand job", {k: v for k, v in fields.items() if v is not None})
            if self.output_dir is not None:
                output_folder(self.output_dir, self.output_conn_id or None)
            if self.template_id is not None:  # it exists, and the service has templates at all
                check_template(self.hook, str(self.template_id), self.log)
        return launches.launch(
            self.hook,
            docs,
            big,
            launches.LaunchBook(self.state_store(context), self.log),
            self._send,
            max_files=self.max_files_per_job,
            max_bytes=self.max_file_bytes,
            interval=self.launch_interval,
            attempts=self.submit_attempts,
            grace=self.launch_grace_period,
            mark=self.mark_uploads,
            fail_on_failed_files=self.fail_on_failed_files,
            on_launch=self._job_ids.append,
        )

    def _send(self, hook: Any, files: list[tuple[str, str]] | None) -> Any:
        return hook.create_job(template_id=self.template_id, job_nodes=self.job_nodes, files=files)

    # -- waiting -----------------------------------------------------------------------------------

    def _announce(self, context: Context, plan: Plan) -> None:
        """Push every job id and link (XCom), the first as the extra link, before any waiting."""
        self._job_ids = [job.job_id for job in plan.jobs]
        links = self.push_links(context, self._job_ids)
        context["ti"].xcom_push(key=XCOM_JOB_IDS, value=self._job_ids)
        context["ti"].xcom_push(key=XCOM_JOB_LINKS, value=links)
        for job in plan.jobs:
            link = links[job.job_id]
            self.log.info(
                "Job %s: %d document(s)%s", job.job_id, len(job.documents), f", {link}" if link else ""
            )

    def _defer(self, plan: Plan, started: float, deadline: float) -> None:
        from airflow_provider_workflowsvc.triggers.job import deferral_timeout
        from airflow_provider_workflowsvc.triggers.jobs import WorkflowJobsTrigger

        trigger = WorkflowJobsTrigger(
            job_ids=[job.job_id for job in plan.jobs],
            deadline=deadline,
            poll_interval=self.poll_interval,
            workflowsvc_conn_id=self.workflowsvc_conn_id,
            started_at=started,
            cancel_on_kill=self.cancel_on_kill,
            resume_with=plan.to_json(),
        )
        self.defer(
            trigger=trigger, method_name="execute_complete", timeout=deferral_timeout(deadline, self.log)
        )

    def _wait_here(self, started: float, deadline: float) -> list[JobOutcome]:
        """Wait for every job in this worker, with the trigger's own wait (an event loop of its own)."""
        import asyncio

        from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
        from airflow_provider_workflowsvc.triggers.job import shared_status_poll
        from airflow_provider_workflowsvc.wait.jobs import await_jobs

        async def wait() -> list[JobOutcome]:
            async with WorkflowServiceAsyncHook(
                self.workflowsvc_conn_id, settings=self.hook.settings
            ) as hook:
                return await await_jobs(
                    hook,
                    self._job_ids,
                    deadline=deadline,
                    interval=self.poll_interval,
                    started_at=started,
                    log=self.log,
                    share=shared_status_poll(),
                )

        return asyncio.run(wait())

    # -- outcome -----------------------------------------------------------------------------------

    def _finish(self, context: Context, plan: Plan, outcomes: list[JobOutcome]) -> dict[str, Any]:
        """Cancel what timed out, download, sum up per document; return the summary or raise the failure."""
        from airflow_provider_workflowsvc import metrics
        from airflow_provider_workflowsvc._tasks import on_demand as od
        from airflow_provider_workflowsvc._tasks.outputs import output_folder

        by_job = od.outcomes_of(plan, outcomes)
        by_job = {job_id: self._after_timeout(outcome) for job_id, outcome in by_job.items()}
        for outcome in by_job.values():
            metrics.job_ended(outcome, self.workflowsvc_conn_id, metrics.ON_DEMAND)
        store = self.state_store(context)
        summary, error = od.conclude(
            self.hook,
            plan,
            by_job,
            folder=None
            if self.output_dir is None
            else output_folder(self.output_dir, self.output_conn_id or None),
            links=self.job_links(by_job),
            durable=store is not None,
            fail_on_failed_files=self.fail_on_failed_files,
            log=self.log,
        )
        if error is not None:
            self.fail(context, summary, error)
        self.delivered(context)
        return summary

    def _after_timeout(self, outcome: JobOutcome) -> JobOutcome:
        """Cancel a job whose wait timed out (when asked); its outcome then says what became of it."""
        if outcome.status != "timeout" or not outcome.job_id:
            return outcome
        note = self.cancel_after_timeout(outcome.job_id)
        message = f"the job did not finish in time (last status {outcome.job_status or 'unknown'}); {note}"
        return outcome.model_copy(update={"message": message})


def _check_template_or_nodes(template_id: Any, job_nodes: Any) -> None:
    """Exactly one of ``template_id`` and ``job_nodes``, where known now; nodes checked as a workflow's."""
    if template_id is None and job_nodes is None:
        raise input_error("give template_id (a template of the service) or job_nodes (the nodes to run)")
    if template_id is not None and job_nodes is not None:
        raise input_error("give template_id or job_nodes, not both")
    known = template_id is not None and not is_deferred_value(template_id)
    if known and not (isinstance(template_id, str) and template_id.strip()):
        raise input_error(f"template_id must be a non-empty string, got {template_id!r}")
    check_nodes(job_nodes, "job_nodes")
