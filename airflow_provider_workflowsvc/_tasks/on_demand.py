"""
An on-demand task's checks and outcome: its template (before any upload), one summary per document, the task's
verdict, the outputs downloaded. Imported when a task runs, never at DAG-parse time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc._tasks.launches import SHOWN, LaunchedJob, Plan, missing_operation
from airflow_provider_workflowsvc.exceptions import (
    InvalidJobEventError,
    UnprocessedDocumentsError,
    UnprocessedDocumentsNoRetryError,
    WorkflowServiceNotFoundError,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc._tasks.outputs import OutputFolder
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

Log = logging.Logger | Any


# --------------------------------------------------------------------------------------------------
# The summary and the verdict


def conclude(
    hook: WorkflowServiceHook,
    plan: Plan,
    outcomes: Mapping[str, JobOutcome],
    *,
    folder: OutputFolder | None,
    links: dict[str, str],
    durable: bool,
    fail_on_failed_files: bool,
    log: Log,
) -> tuple[dict[str, Any], Exception | None]:
    """
    Download the outputs (into ``folder``, when given), sum up per document and log it; return the
    summary and the task's failure (None: it succeeds); ``links``: each job's.
    """
    outputs = download(hook, plan, outcomes, folder, log) if folder is not None else {}
    summary = summarize(plan, outcomes, outputs, links, fail_on_failed_files=fail_on_failed_files)
    log_summary(summary, log)
    return summary, failure(summary, plan, durable=durable, fail_on_failed_files=fail_on_failed_files)


def outcomes_of(plan: Plan, outcomes: Sequence[JobOutcome]) -> dict[str, JobOutcome]:
    """Each planned job's outcome; a job the wait did not report fails the task (closed)."""
    by_job = {outcome.job_id: outcome for outcome in outcomes if outcome.job_id}
    missing = [job.job_id for job in plan.jobs if job.job_id not in by_job]
    if missing:
        raise InvalidJobEventError(f"the wait reported no outcome for job(s) {', '.join(missing)}")
    return {job.job_id: by_job[job.job_id] for job in plan.jobs}


def log_summary(summary: Mapping[str, Any], log: Log) -> None:
    """Log one line per job, then the counts (every document's outcome is in the summary)."""
    for job in summary["jobs"]:
        log.info(
            "Job %s: %s (job status %s), %d document(s), %d failed file(s), %d output file(s)",
            job["job_id"],
            job["outcome"],
            job["status"],
            len(job["documents"]),
            len(job["failed_files"]),
            len(job["output_files"]),
        )
    log.info(
        "%d of %d document(s) processed (%s)",
        summary["completed_count"],
        summary["document_count"],
        summary["outcome"],
    )
    unprocessed = [d for d in summary["documents"] if d["status"] != "completed"]
    if unprocessed:  # named whatever the verdict (fail_on_failed_files=False too); the log has them all
        log.warning(
            "%d document(s) not processed:\n%s",
            len(unprocessed),
            describe_documents(summary, unprocessed, limit=len(unprocessed)),
        )


def summarize(
    plan: Plan,
    outcomes: Mapping[str, JobOutcome],
    outputs: Mapping[str, list[str]],
    links: Mapping[str, str],
    *,
    fail_on_failed_files: bool,
) -> dict[str, Any]:
    """
    Return the task's summary: per document (its name, its ``source``) its job, status, error and output files
    (``outputs``: by source); per job its status, documents, link and outputs; the counts. The statuses are
    the operator's (:class:`.RunOnDemandJobOperator`).
    """
    docs: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for job in plan.jobs:
        outcome = outcomes[job.job_id]
        said, own = _failures(job, outcome), job.own()
        for source, name in own:
            status, error = _document_status(outcome, said.get(source))
            docs.append(_document(source, name, job.job_id, status, error, outputs.get(source, [])))
        jobs.append(
            {
                "job_id": job.job_id,
                "status": outcome.job_status,
                "outcome": outcome.status,
                "message": outcome.message,
                "documents": [name for _, name in own],
                "job_url": links.get(job.job_id, ""),
                "failed_files": [f.model_dump() for f in outcome.failed_files],
                "output_files": [f.model_dump() for f in outcome.output_files],
                "elapsed_seconds": None if outcome.elapsed is None else round(outcome.elapsed, 1),
                "job_seconds": None if outcome.job_seconds is None else round(outcome.job_seconds, 1),
            }
        )
    docs += [_document(*doc, None, "not_launched", plan.refusal, []) for doc in plan.unlaunched]
    docs += [_document(source, name, None, "skipped", why, []) for source, name, why in plan.skipped]
    failing = [d for d in docs if not passes(d["status"], fail_on_failed_files)]
    completed = sum(d["status"] == "completed" for d in docs)
    return {
        "outcome": "failed" if failing else "success",
        "document_count": len(docs),
        "completed_count": completed,
        "unprocessed_count": len(docs) - completed,
        "documents": docs,
        "jobs": jobs,
    }


def passes(status: str, fail_on_failed_files: bool) -> bool:
    """
    Whether a document's status lets the task succeed: ``completed``; also a file the service failed
    (or may have: ``unknown``) or one left out over the size limit, unless failed files fail the task.
    """
    return status == "completed" or (status in FAILED_FILE and not fail_on_failed_files)


FAILED_FILE = ("failed", "unknown", "skipped")
"""The statuses of a document its completed job did not (or may not have) processed, or never sent."""


def _failures(job: LaunchedJob, outcome: JobOutcome) -> dict[str, tuple[str, str]]:
    """
    Return what the completed job's failed files say of each of its documents (by source): ``failed`` with
    the service's error, or ``unknown`` when the name given can be several of them.
    """
    said: dict[str, tuple[str, str]] = {}
    for failed in outcome.failed_files:  # the wait took the marker out
        meant = job.meant(failed.document)
        for source in meant:
            if len(meant) == 1:
                said[source] = ("failed", failed.error or "the service gave no error")
            else:
                said.setdefault(
                    source, ("unknown", f"the service names {failed.document!r} failed, {_several}")
                )
    return said


_several = (
    "which is the name of several documents of the job: whether this one was processed cannot be told, "
    "and it is not launched again"
)


def _document_status(outcome: JobOutcome, said: tuple[str, str] | None) -> tuple[str, str | None]:
    if outcome.status == "success":
        return said or ("completed", None)
    status = "job_failed" if outcome.status == "failed" else outcome.status
    return status, outcome.message or f"job {outcome.job_id} ended {outcome.job_status or 'unknown'}"


def _document(
    source: str, name: str, job_id: str | None, status: str, error: str | None, files: list[str]
) -> dict[str, Any]:
    return {
        "document": name,
        "source": source,
        "job_id": job_id,
        "status": status,
        "error": error,
        "output_files": files,
    }


def failure(
    summary: Mapping[str, Any], plan: Plan, *, durable: bool, fail_on_failed_files: bool
) -> Exception | None:
    """
    Return the task's failure for its summary (None: it succeeds): the documents not processed and why, and
    what a retry does; without retries when a retry cannot help (the refusal says so, or only ``unknown``
    documents are left: never launched again) or when no task state store remembers what was processed.
    """
    bad = [d for d in summary["documents"] if not passes(d["status"], fail_on_failed_files)]
    if not bad:
        return None
    total = summary["document_count"]
    text = f"{len(bad)} of {total} document(s) were not processed:\n" + describe_documents(summary, bad)
    final = plan.final or all(d["status"] == "unknown" for d in bad)
    if final or not durable:
        why_not = (
            "retrying cannot help"
            if final
            else "durable=False keeps no task state, so a retry would launch every document again"
        )
        return UnprocessedDocumentsNoRetryError(
            f"{text}\nThe task is not retried ({why_not}); every document's outcome is in the summary "
            "(XCom return_value). Run the documents not processed in a task of their own.",
            dict(summary),
        )
    return UnprocessedDocumentsError(
        f"{text}\nA retry launches only these (the documents processed, or still processing, are never "
        "launched again); every document's outcome is in the summary (XCom return_value).",
        dict(summary),
    )


def describe_documents(
    summary: Mapping[str, Any], docs: Sequence[Mapping[str, Any]], limit: int = SHOWN
) -> str:
    """
    One line per status of ``docs`` (documents of ``summary``): how many, why, and the first ``limit``
    names (a failed file with the service's error; a name several inputs share, with its source).
    """
    named = [d["document"] for d in summary["documents"]]
    shared = {name for name in named if named.count(name) > 1}
    lines = []
    for status in dict.fromkeys(d["status"] for d in docs):
        group = [d for d in docs if d["status"] == status]
        names = ", ".join(
            d["document"]
            + (f" from {d['source']}" if d["document"] in shared else "")
            + (f" ({d['error']})" if d["error"] and status == "failed" else "")
            for d in group[:limit]
        )
        more = f" and {len(group) - limit} more" if len(group) > limit else ""
        why = f": {group[0]['error']}" if status != "failed" and group[0]["error"] else ""
        lines.append(f"  - {len(group)} {status.replace('_', ' ')}{why}: {names}{more}")
    return "\n".join(lines)


def check_template(hook: WorkflowServiceHook, template_id: str, log: Log) -> None:
    """
    Check that ``template_id`` is one of the service's templates (one read, before any upload): an unknown one
    is an input error naming the known ones; a service without templates, one naming the operation.
    """
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceApiError, WorkflowServiceInputError

    try:
        template = hook.get_template(template_id)
    except WorkflowServiceNotFoundError:
        try:
            known = [t.id for t in hook.list_templates()]
        except WorkflowServiceApiError as exc:
            what = "workflow templates (nor on-demand jobs)"
            missing = missing_operation(exc, hook.settings.base_url, what)
            if missing is None:
                raise
            raise missing from None
        raise WorkflowServiceInputError(
            f"template_id {template_id!r} is not one of the service's templates: {', '.join(known) or 'none'}"
        ) from None
    log.info("Template %s (%s): %s", template.id, template.name, ", ".join(n.name for n in template.nodes))


def download(
    hook: WorkflowServiceHook,
    plan: Plan,
    outcomes: Mapping[str, JobOutcome],
    folder: OutputFolder,
    log: Log,
) -> dict[str, list[str]]:
    """
    Download every output of the completed jobs into ``folder`` (:func:`.outputs.download_outputs`); return
    each document's files by its source: the one document of the job the output's name means (an output
    meaning none, or several, is kept but credited to none).
    """
    from airflow_provider_workflowsvc._tasks.outputs import download_outputs

    completed = [job for job in plan.jobs if outcomes[job.job_id].status == "success"]
    wanted = [(job, o.file_id, o.node_id) for job in completed for o in outcomes[job.job_id].output_files]
    found: dict[str, list[str]] = {}
    if not wanted:
        return found
    each = [(job.job_id, file_id, node_id, job.marker) for job, file_id, node_id in wanted]
    for (job, file_id, _), (path, document) in zip(wanted, download_outputs(hook, folder, each), strict=True):
        owners = [] if document is None else job.meant(document)
        if len(owners) != 1:
            log.warning(
                "Job %s: output %s names %s of the job (%r); kept at %s",
                job.job_id,
                file_id,
                "several documents" if owners else "no document",
                document,
                path,
            )
            continue
        found.setdefault(owners[0], []).append(path)
    log.info("Downloaded %d output file(s) into %s", len(wanted), folder)
    return found
