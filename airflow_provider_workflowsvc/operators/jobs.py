"""Run a workflow and wait for its job; download a job's output; cancel a job."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink

from airflow_provider_workflowsvc._tasks.base import (
    XCOM_JOB_ID,
    WorkflowServiceBaseOperator,
    default_deferrable,
    input_error,
    invalid_input_fails,
    job_id_of,
    one_of,
    positive_seconds,
)
from airflow_provider_workflowsvc._tasks.target import check_run_target
from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID
from airflow_provider_workflowsvc.operators._lifecycle import JobOperator, job_settings, job_url

__all__ = [
    "CancelJobOperator",
    "DownloadJobOutputOperator",
    "RunWorkflowOperator",
    "WorkflowJobLink",
    "job_url",
]

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

    from airflow_provider_workflowsvc._tasks.submit import StoredRunJournal
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

IF_RUNNING = ("run", "wait", "fail")
"""What ``RunWorkflowOperator`` does when a job of its workflow is running (``if_running``)."""
RUNNING_JOB_KEY = "workflowsvc_running_job"
"""Task state key and XCom key of the job this task found running and waits for (``if_running='wait'``):
a job it did not start (never rename it)."""
PENDING_RUN_KEY = "workflowsvc_pending_run"
"""Task state key of a run being sent whose job id is not stored yet (like ``external_id_key``: never
rename it)."""


class WorkflowJobLink(BaseOperatorLink):
    """Link to the job in the service (pushed to XCom by the task as soon as the job id is known)."""

    name = "Workflow Service job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""


class RunWorkflowOperator(JobOperator):
    """
    Run a workflow (no body, or files: local, or in object storage) and, by default, wait for its job.

    The run is never duplicated: a run request is sent again only when an answer proves it was not
    processed (429, 503); after a lost answer the task adopts this run's job only on proof
    (``mark_uploads``), and otherwise fails with ``AmbiguousRunError``.

    Pushes XCom ``job_id`` and the job link before waiting; returns a summary (``job_id``,
    ``workflow_id``, ``status``, ``outcome``, ``message``, ``node_stats``, ``failed_file_count``,
    ``failed_files``, ``output_files``, ``elapsed_seconds``, ``job_seconds``, ``job_seconds_from``,
    ``started_by_task``: False for a running job it waited for, ``if_running='wait'``).
    ``outcome`` is the task's verdict (``success``, ``failed_files`` when failed files failed the task,
    ``failed``, ``stopped``, ``timeout``, ``error``); ``status`` is the job's own. ``elapsed_seconds``
    is how long the wait took; ``job_seconds`` the job's own run time where its record gives it
    (``job_seconds_from``: ``runtime``, or ``created_at`` to the read that found it ended), else None.
    On failure the same summary is pushed as the return value before the task fails.

    Durable execution (``durable=True`` by default): the job id is kept in the task state store
    (Airflow 3.3+; before, an Airflow Variable of the task, deleted when it succeeds), so a retry after
    a worker crash reconnects to the running job, and a job that finished in the meantime returns its
    result, instead of running the workflow again. A job that failed, was stopped or completed with
    failed files (when those fail the task) is run again by a retry.

    :param workflow_id: the workflow to run (templated). Give this or ``workflow_name``.
    :param workflow_name: the name of the workflow to run (templated), instead of its id: the one
        workflow of exactly that name is run; none or several fail the task. A workflow is never
        created (``CreateWorkflowOperator`` does that).
    :param files: input files for a workflow with a local source (no source connector): a path,
        directory (all its non-hidden files, recursively, sorted), glob pattern (``**`` recurses), a
        location in object storage with the same meanings (an ``ObjectStoragePath``, or a URI:
        ``s3://bucket/prefix/``, ``s3://bucket/2024/**/*.pdf``, ``gs://...``, ``file://...``), or a list
        mixing them (templated). Objects are streamed from the store into the upload, never to local
        disk. ``None`` runs the workflow without a body, which only a workflow with a source connector
        accepts. Two files sent under one name (``day1/`` and ``day2/`` both holding ``report.txt``)
        fail the task before anything is uploaded, naming both. Files for a workflow with a source
        connector (or no files for one without) fail the task before anything is uploaded, and fail the
        DAG import when the DAG declares the workflow's source (``workflow_id`` is a
        ``CreateWorkflowOperator``'s output).
    :param files_conn_id: the Airflow connection of the storage URIs in ``files`` that name none
        (templated); a URI may name its own (``s3://conn_id@bucket/prefix/``, Airflow's form) and an
        ``ObjectStoragePath`` carries its own. ``None``: the store's default credentials.
    :param workflowsvc_conn_id: the Workflow Service connection (templated).
    :param wait_for_completion: wait for the job to finish (default); otherwise return once it exists.
    :param poll_interval: seconds between status checks (one request each).
    :param timeout: seconds (or a timedelta) to wait for the job before failing the task.
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``.
    :param fail_on_failed_files: fail the task when the job completed but some files failed.
    :param cancel_on_timeout: cancel the job when the wait times out.
    :param cancel_on_kill: cancel the job when the task is killed (or, deferred, marked/cleared).
    :param skip_if_no_files: skip the task (instead of failing it) when the directories and glob
        patterns of ``files`` match no file at all; a directory or pattern matching nothing then adds
        nothing. Paths that do not exist still fail the task.
    :param submit_attempts: run requests sent at most, when earlier ones provably created no job.
    :param run_grace_period: seconds (or a timedelta) the workflow's active jobs are read after an
        ambiguous run failure (timeout, dropped connection, 500, 502, 504, an unreadable answer) for
        this run's job; the run is never sent again after such a failure.
    :param durable: keep the job id in the task state store (before Airflow 3.3: a Variable), so that a
        retry goes on with the job of an earlier try instead of running the workflow again.
    :param mark_uploads: what the service receives as your file names, and what a lost run answer
        (a timeout, a dropped connection, a 500/502/504 after the request left) then costs.
        ``False`` (default): your own names, unchanged, so the service writes them wherever it writes
        a file name (each element's ``metadata.filename``, failed files, the job record, the records
        and ids it writes to your destination: a re-run file replaces its records there). Nothing then
        shows which job a lost answer created: the task fails with ``AmbiguousRunError`` naming the
        jobs that appeared meanwhile (never sending the run again); clearing the task runs it again.
        ``True``: each name carries a marker unique to the run request (``report.txt`` →
        ``report__wfsvc-<16 hex>.txt``), which the service writes everywhere instead of your name
        (this task shows your names; the destination keeps the marked ones: records of a re-run file
        are added, not replaced); where job records list their files (the live service's dialect),
        the job of a lost answer is then proven this task's and adopted. For pipelines that do not key
        on file names.
    :param if_running: what to do when a job of the workflow is running already (scheduled or in
        progress, say its own schedule fired): ``"run"`` runs it all the same (the default); ``"wait"``
        waits for that job (the newest, when several) instead and reports it, marked as not started by
        this task (``started_by_task`` False in the summary, a warning in the log), never cancelling it;
        ``"fail"`` fails the task (``WorkflowAlreadyRunningError``; retries apply).
    """

    template_fields: Sequence[str] = (
        "workflow_id",
        "workflow_name",
        "files",
        "files_conn_id",
        "workflowsvc_conn_id",
    )
    operator_extra_links = (WorkflowJobLink(),)
    external_id_key = "workflowsvc_job_id"
    """Task state key of the run's job id (durable execution; never rename it)."""
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        workflow_id: str | None = None,
        workflow_name: str | None = None,
        files: str | Any | Sequence[str | Any] | None = None,
        files_conn_id: str | None = None,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        wait_for_completion: bool = True,
        poll_interval: float | timedelta = 30.0,
        timeout: float | timedelta = timedelta(hours=24),
        deferrable: bool | None = None,
        fail_on_failed_files: bool = True,
        cancel_on_timeout: bool = True,
        cancel_on_kill: bool = True,
        submit_attempts: int = 3,
        run_grace_period: float | timedelta = 30.0,
        skip_if_no_files: bool = False,
        mark_uploads: bool = False,
        durable: bool = True,
        if_running: str = "run",
        **kwargs: Any,
    ) -> None:
        check_run_target(workflow_id, workflow_name, files)
        super().__init__(
            workflowsvc_conn_id=workflowsvc_conn_id,
            # Airflow's own setting, as Airflow's operators follow it: one job's wait is as cheap in a
            # worker as in the triggerer (RunOnDemandJobOperator says why it defers by default).
            deferrable=default_deferrable(deferrable),
            **job_settings(locals()),
            **kwargs,
        )
        self.if_running = one_of(if_running, IF_RUNNING, "if_running")
        self.workflow_id = workflow_id
        self.workflow_name = workflow_name
        self.wait_for_completion = wait_for_completion
        self.run_grace_period = positive_seconds(run_grace_period, "run_grace_period")
        self._job_id: str | None = None
        self._result: dict[str, Any] | None = None
        self._files: list[tuple[Any, str]] | None = None
        self._not_started: str | None = None
        """The job this task waits for but did not start (``if_running='wait'``), once known."""

    # -- execution: the steps in the order they happen -------------------------------------------------

    def execute(self, context: Context) -> Any:
        """Resolve the input and the workflow, submit the run (or go on with its job), wait, finish."""
        self._job_id, self._result, self._not_started = None, None, None
        self.push_links(context)
        from airflow_provider_workflowsvc._tasks.inputs import resolve_task_files

        self._files = None if self.files is None else resolve_task_files(self, "run", own_names=True)
        with self.closing_hook():
            self._resolve_target()
            self.forget_if_cleared(context)
            state = self.state_store(context)
            if not self.wait_for_completion:
                job_id = self._submit(context, state, keep=False)
                started = self._started_by_task(context, job_id)
                status = "submitted" if started else "already running"
                return {
                    "job_id": job_id,
                    "workflow_id": str(self.workflow_id),
                    "status": status,
                    "started_by_task": started,
                }
            found = self._stored_job(context, state)
            job_id, ended = found or (self._submit(context, state, keep=True), None)
            return self._finish(context, ended or self._wait(context, job_id))

    def _resolve_target(self) -> None:
        """Find the workflow by name (``workflow_id`` is then its id); check the input fits it."""
        from airflow_provider_workflowsvc._tasks.target import resolve_target

        with_files = self._files is not None
        found = resolve_target(self.hook, self.workflow_id, self.workflow_name, with_files, self.log)
        self.workflow_id = found or self.workflow_id

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: validate its event (failing closed) and apply the job's outcome."""
        from airflow_provider_workflowsvc.wait.outcome import parse_event

        outcome = parse_event(event)
        self._job_id = outcome.job_id
        with self.closing_hook():
            return self._finish(context, outcome)

    def state_keys(self) -> tuple[str, ...]:
        return (self.external_id_key, PENDING_RUN_KEY, RUNNING_JOB_KEY)

    def jobs_to_cancel_on_kill(self) -> list[str]:
        """Return the run's job, known so far; never a job this task did not start."""
        return [self._job_id] if self._job_id and self._job_id != self._not_started else []

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the job's lineage (``[openlineage]`` extra): sources or files in, destination out."""
        from airflow_provider_workflowsvc.lineage import input_datasets, run_lineage

        job_id = self._job_id or (self._result or {}).get("job_id")
        if not job_id:
            return None
        with self.closing_hook():
            uploaded = input_datasets(self.files, self._files, self.files_conn_id or None)
            return run_lineage(
                self.hook,
                workflow_id=str(self._known_workflow_id()),
                job_id=job_id,
                summary=self._result,
                uploaded=uploaded,
                log=self.log,
            )

    def _stored_job(self, context: Context, store: Any) -> tuple[str, JobOutcome | None] | None:
        """
        Return the job an earlier try stored (durable execution), to go on with: running or in a status nobody
        knows (never a duplicate), or completed (with its outcome); None to run the workflow (no job stored,
        or it is gone, failed, stopped, or completed with failed files that fail the task).
        """
        stored = store.get(self.external_id_key) if store is not None else None
        if not stored:
            return None
        from airflow_provider_workflowsvc.wait.poll import poll_once, stored_job
        from airflow_provider_workflowsvc.wait.watch import JobWatch

        job_id = str(stored)
        job = stored_job(self.hook, job_id, self.fail_on_failed_files, self.log)
        if job is None:
            return None
        if store.get(RUNNING_JOB_KEY) == job_id:
            self._waits_for_running(context, job_id)
        self._known(context, job_id)
        if not job.status.is_success:
            self.log.info("Reconnecting to job %s, which an earlier try of this task started", job_id)
            return job_id, None
        self.log.info("Job %s, which an earlier try of this task started, has completed", job_id)
        return job_id, poll_once(self.hook, JobWatch(job_id, self.log))

    def _submit(self, context: Context, state: Any, *, keep: bool) -> str:
        """
        Run the workflow once (a run an earlier try sent but never recorded is adopted instead) and
        return its job, or (``if_running``) the running job to wait for instead; with ``keep`` (and a task
        state store: durable execution), the job id is kept in the store before any wait, so a retry after a
        worker crash goes on with this job.
        """
        from airflow_provider_workflowsvc._tasks.submit import StoredRunJournal

        journal = None
        if state is not None:
            known = state.get(self.external_id_key)
            journal = StoredRunJournal(state, PENDING_RUN_KEY, known=known, log=self.log)
        job_id = None
        if self.if_running != "run":
            job_id = self._running_job(context, journal)
        if job_id is None:
            job_id = self._run(journal)
        if keep and state is not None:
            state.set(self.external_id_key, job_id)
        self._known(context, job_id)
        return job_id

    def _running_job(self, context: Context, journal: StoredRunJournal | None) -> str | None:
        """
        Apply ``if_running``: the running job to wait for (``wait``), None when none is running. A run
        an earlier try sent and never recorded decides first (its job proven and adopted, or the task
        fails closed), never ``if_running``: the job found running may be that very run's.
        """
        from airflow_provider_workflowsvc._tasks.running import job_to_wait_for

        if journal is not None and journal.pending(str(self.workflow_id)) is not None:
            self.log.info("An earlier try sent a run it never recorded: that run decides, not if_running")
            return None
        job = job_to_wait_for(self.hook, str(self.workflow_id), self.if_running, self.log)
        if job is not None:
            self._waits_for_running(context, job.id)
        return None if job is None else job.id

    def _waits_for_running(self, context: Context, job_id: str) -> None:
        """Remember that ``job_id`` is a running job this task waits for, not one it started."""
        self._not_started = job_id
        context["ti"].xcom_push(key=RUNNING_JOB_KEY, value=job_id)
        state = self.state_store(context)
        if state is not None:
            state.set(RUNNING_JOB_KEY, job_id)

    def _started_by_task(self, context: Context, job_id: str | None) -> bool:
        """
        Whether this task started ``job_id`` (False for a running job it waits for, ``if_running='wait'``):
        known here, or (resumed after a deferral) from the task state store, else the XCom of this try.
        """
        if self._not_started is None and self.if_running == "wait":
            state = self.state_store(context)
            if state is not None:
                self._not_started = state.get(RUNNING_JOB_KEY)
            else:
                self._not_started = context["ti"].xcom_pull(task_ids=self.task_id, key=RUNNING_JOB_KEY)
        return job_id is None or job_id != self._not_started

    def _run(self, journal: StoredRunJournal | None) -> str:
        """Run the workflow once; a run an earlier try sent but never recorded is adopted instead."""
        from airflow_provider_workflowsvc._tasks.submit import Sending, submit
        from airflow_provider_workflowsvc._tasks.target import explain_refusal
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceValidationError

        try:
            job = submit(
                self.hook,
                Sending.run(str(self.workflow_id)),
                self._files,
                self.log,
                attempts=self.submit_attempts,
                grace=self.run_grace_period,
                journal=journal,
                mark=self.mark_uploads,
            )
        except WorkflowServiceValidationError as exc:
            if self._files is None:
                explain_refusal(self.hook, str(self.workflow_id), exc)
            raise
        count = "no files" if self._files is None else f"{len(self._files)} file(s)"
        self.log.info("Submitted job %s for workflow %s with %s", job.id, self.workflow_id, count)
        if self.mark_uploads and self._files is not None and job.input_file_ids is None:
            self.log.warning(
                "mark_uploads=True, but this service's job records list no input files (job %s): the "
                "marker proves nothing here, and the names it sends back stay marked; mark_uploads=False "
                "keeps your own names at no cost",
                job.id,
            )
        return job.id

    def _known(self, context: Context, job_id: str) -> None:
        """
        Take ``job_id`` as the run's job: push its id and link before any waiting (the UI shows them at once),
        and drop the pending-run record, so that no retry looks for the run's job again.
        """
        self._job_id = job_id
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=job_id)
        url = self.push_links(context, [job_id])[job_id]
        if url:
            self.log.info("Job %s: %s", job_id, url)
        else:
            self.log.info("Job %s (set the connection extra ui_url to get a link to it)", job_id)
        self.forget(context, PENDING_RUN_KEY)

    def _wait(self, context: Context, job_id: str) -> JobOutcome:
        """
        Wait for the job until it ends or the deadline (``timeout``, or what is left of
        ``execution_timeout``): here, polling; or, deferrable, in the triggerer (the task resumes in
        :meth:`execute_complete`).
        """
        from airflow_provider_workflowsvc._tasks.deadline import wait_deadline
        from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger, deferral_timeout
        from airflow_provider_workflowsvc.wait.poll import wait_for_job
        from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule

        started = time.time()
        deadline = wait_deadline(context, started, self.timeout, self.execution_timeout)
        if self.deferrable:
            trigger = WorkflowJobTrigger(
                job_id=job_id,
                workflow_id=str(self.workflow_id),
                deadline=deadline,
                poll_interval=self.poll_interval,
                workflowsvc_conn_id=self.workflowsvc_conn_id,
                started_at=started,
                cancel_on_kill=self.cancel_on_kill and self._started_by_task(context, job_id),
            )
            self.defer(
                trigger=trigger, method_name="execute_complete", timeout=deferral_timeout(deadline, self.log)
            )
        every, timeout = self.poll_interval, self.timeout
        self.log.info("Waiting for job %s (polling every %.0f s, timeout %.0f s)", job_id, every, timeout)
        schedule = PollSchedule(deadline, self.poll_interval)
        return wait_for_job(self.hook, JobWatch(job_id, self.log, started), schedule)

    # -- outcome -----------------------------------------------------------------------------------

    def _finish(self, context: Context, outcome: JobOutcome) -> dict[str, Any]:
        """Log the outcome; return the summary, or push it and raise the task's failure."""
        from airflow_provider_workflowsvc import metrics
        from airflow_provider_workflowsvc.wait.outcome import failure_for, log_outcome

        log_outcome(outcome, self.log, fail_on_failed_files=self.fail_on_failed_files)
        known = self.workflow_name or self._known_workflow_id()
        metrics.job_ended(outcome, self.workflowsvc_conn_id, metrics.workflow_of(outcome, known))
        started = self._started_by_task(context, outcome.job_id)
        if not started:
            self.log.warning(
                "Job %s was not started by this task: it was running already and this task waited for it "
                "(if_running='wait')",
                outcome.job_id,
            )
        note = ""
        if outcome.status == "timeout" and outcome.job_id:
            left = "the job was left running: this task did not start it (if_running='wait')"
            note = self.cancel_after_timeout(outcome.job_id) if started else left
        error: BaseException | None = failure_for(
            outcome, fail_on_failed_files=self.fail_on_failed_files, timeout_note=note
        )
        if error is not None and outcome.status == "timeout":
            from airflow_provider_workflowsvc._tasks.deadline import timeout_failure

            error = timeout_failure(context, error, self.execution_timeout)
        summary = self._result = {
            **outcome.summary(
                fail_on_failed_files=self.fail_on_failed_files, workflow_id=self._known_workflow_id()
            ),
            "started_by_task": started,
        }
        if error is not None:
            self.fail(context, summary, error)
        self.delivered(context)
        from airflow_provider_workflowsvc.assets import record_outlet_events

        record_outlet_events(context, self.outlets, summary)
        return summary

    def _known_workflow_id(self) -> str | None:
        """Return the workflow's id: given, found by name, or (resumed after a deferral by name) the job's."""
        if self.workflow_id is not None:
            return str(self.workflow_id)
        return (self._result or {}).get("workflow_id")


class DownloadJobOutputOperator(WorkflowServiceBaseOperator):
    """
    Download every output of a completed local-to-local job into a folder; returns where each went.

    Each output is named after its document (``données.txt`` → ``données.txt.json``), else its file id,
    changed only where a file system cannot hold it; two outputs of one download never share a name, and a
    file appears under its name only once fully written (the rules: the operator's user guide). A file of the
    same name left by an earlier download is replaced (use one directory per run, e.g. ``.../{{ run_id }}``).
    ``output_dir`` may be a folder of object storage (an ``ObjectStoragePath``, or a URI such as
    ``s3://bucket/outputs/{{ run_id }}``): each output is streamed into it, never to local disk, and returned
    as its URI.

    :param output_dir: directory (or object storage folder) to write into, created if missing (templated).
    :param output_conn_id: the Airflow connection of an ``output_dir`` URI that names none (templated; a URI
        may name its own, ``s3://conn_id@bucket/prefix``). ``None``: the store's default credentials.
    :param job_id: the job (templated); when empty, taken from XCom ``job_id`` of ``run_task_id``.
    :param run_task_id: the task that ran the workflow (used when ``job_id`` is empty).
    :param workflowsvc_conn_id: the Workflow Service connection (templated).
    """

    template_fields: Sequence[str] = (
        "job_id",
        "output_dir",
        "output_conn_id",
        "run_task_id",
        "workflowsvc_conn_id",
    )

    def __init__(
        self,
        *,
        output_dir: str | Any,
        output_conn_id: str | None = None,
        job_id: str | None = None,
        run_task_id: str | None = None,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(workflowsvc_conn_id=workflowsvc_conn_id, **kwargs)
        if not job_id and not run_task_id:
            raise input_error("give job_id, or run_task_id to take the job id from that task's XCom")
        self.output_dir = output_dir
        self.output_conn_id = output_conn_id
        self.job_id = job_id
        self.run_task_id = run_task_id
        self._downloaded: tuple[str, Any] | None = None

    def execute(self, context: Context) -> list[str]:
        from airflow_provider_workflowsvc._tasks.outputs import download_job, output_folder

        job_id = job_id_of(self.job_id, self.run_task_id, context)
        with invalid_input_fails():
            folder = output_folder(self.output_dir, self.output_conn_id or None)
        with self.closing_hook():
            paths = download_job(self.hook, job_id, folder, self.log)
        if not paths:
            return []
        self.log.info("Downloaded %d output file(s) of job %s into %s", len(paths), job_id, folder)
        self._downloaded = (job_id, folder)
        return paths

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Return the download's lineage (``[openlineage]`` extra): the job's output into ``output_dir``."""
        from airflow_provider_workflowsvc.lineage import download_lineage, folder_dataset

        if self._downloaded is None:
            return None
        job_id, folder = self._downloaded
        return download_lineage(self.hook.settings.base_url, job_id, folder_dataset(folder))


class CancelJobOperator(WorkflowServiceBaseOperator):
    """
    Cancel a job. A job that has already ended is logged and the task succeeds (or fails, if asked).

    Returns ``{"job_id", "cancelled", "status"}`` (the status before the cancel).

    :param job_id: the job to cancel (templated).
    :param workflowsvc_conn_id: the Workflow Service connection (templated).
    :param fail_if_ended: fail the task when the job had already ended.
    """

    template_fields: Sequence[str] = ("job_id", "workflowsvc_conn_id")

    def __init__(
        self,
        *,
        job_id: str,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        fail_if_ended: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(workflowsvc_conn_id=workflowsvc_conn_id, **kwargs)
        self.job_id = job_id
        self.fail_if_ended = fail_if_ended

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceError
        from airflow_provider_workflowsvc.models import JobStatus
        from airflow_provider_workflowsvc.wait.poll import cancel_quietly

        job_id = job_id_of(self.job_id, None, context)
        with self.closing_hook():
            job = self.hook.get_job(job_id)
            status = (
                job.status.value if job.status is not JobStatus.UNKNOWN else (job.raw_status or "unknown")
            )
            cancelled = not job.status.is_terminal and cancel_quietly(self.hook, job_id, self.log)
        if not cancelled:
            message = f"Job {job_id} had already ended ({status}); nothing to cancel"
            if self.fail_if_ended:
                raise WorkflowServiceError(message)
            self.log.info(message)
        return {"job_id": job_id, "cancelled": cancelled, "status": status}
