"""
Whether a workflow has a job running now: the evidence ``RunWorkflowOperator(if_running=...)`` decides
by, read tolerantly and decided strictly (docs/decisions/runs.md, "if_running").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.exceptions import WorkflowAlreadyRunningError
from airflow_provider_workflowsvc.models import ACTIVE_JOB_STATUSES

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job


def running_job(hook: WorkflowServiceHook, workflow_id: str, log: logging.Logger | Any) -> Job | None:
    """Return the workflow's running job (the newest of several), None when none is; see the module."""
    running: dict[str, Job] = {}
    for status in ACTIVE_JOB_STATUSES:
        listed = hook.list_jobs(workflow_id=workflow_id, status=status)
        unreadable = getattr(listed, "skipped", ())
        if unreadable:
            raise WorkflowAlreadyRunningError(
                f"the service listed {len(unreadable)} {status.value} job(s) of workflow {workflow_id} the "
                "provider cannot read (see the warning above): one may be running, so the workflow is not "
                "run beside it"
            )
        running.update((job.id, job) for job in listed if job.status is status)
    if not running:
        return None
    jobs = sorted(running.values(), key=lambda job: (job.created_utc is not None, job.created_utc))
    if len(jobs) > 1 and jobs[0].created_utc is None:
        ids = ", ".join(sorted(running))
        raise WorkflowAlreadyRunningError(
            f"workflow {workflow_id} has {len(jobs)} running jobs ({ids}), not all with a creation time: "
            "which is the newest is not known, so none is waited for and the workflow is not run"
        )
    if len(jobs) > 1:
        log.info("Workflow %s has %d running jobs; the newest is %s", workflow_id, len(jobs), jobs[-1].id)
    return jobs[-1]


def refuse(job: Job, workflow_id: str) -> WorkflowAlreadyRunningError:
    """Return the error of ``if_running='fail'`` finding ``job`` running."""
    return WorkflowAlreadyRunningError(
        f"job {job.id} of workflow {workflow_id} is {job.raw_status or job.status.value} (created "
        f"{job.created_at.isoformat() if job.created_at else 'at an unknown time'}), and if_running='fail': "
        "the workflow is not run beside it. A retry runs it once that job has ended; if_running='wait' "
        "waits for that job instead"
    )


def job_to_wait_for(
    hook: WorkflowServiceHook, workflow_id: str, if_running: str, log: logging.Logger | Any
) -> Job | None:
    """
    Apply ``if_running`` (``wait`` or ``fail``): the workflow's running job to wait for instead of
    running it; its refusal (``fail``); None when no job of the workflow is running.
    """
    from airflow_provider_workflowsvc import metrics

    job = running_job(hook, workflow_id, log)
    if job is None:
        log.info("No job of workflow %s is running (if_running=%r): running it", workflow_id, if_running)
        return None
    metrics.found_running(workflow_id, hook.workflowsvc_conn_id, if_running)
    if if_running == "fail":
        raise refuse(job, workflow_id)
    log.warning(
        "Job %s of workflow %s is already %s: waiting for it instead of running the workflow "
        "(if_running='wait'). This task did NOT start it: its summary says started_by_task=False, and "
        "this task never cancels it",
        job.id,
        workflow_id,
        job.raw_status or job.status.value,
    )
    return job
