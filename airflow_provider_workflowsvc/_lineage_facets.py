"""
The provider's own OpenLineage run facets (needs the ``[openlineage]`` extra: imported lazily).

Facet values come from the job summary (the task's XCom: no secret is ever in it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import define, field
from openlineage.client.facet_v2 import RunFacet

FAILED_FILES_IN_FACET = 100
"""Failed files listed in the facet (``failedCount`` counts them all)."""


@define
class WorkflowServiceJobRunFacet(RunFacet):
    """The Workflow Service job a task ran: ids, workflow name, status and document counts."""

    jobId: str  # camelCase: the OpenLineage facet convention
    workflowId: str
    workflowName: str | None = field(default=None)
    status: str | None = field(default=None)
    documentsWritten: int = field(default=0)
    failedCount: int = field(default=0)


@define
class FailedFile:
    """One document the job could not process, with the service's error."""

    document: str
    error: str = field(default="")


@define
class WorkflowServiceFailedFilesRunFacet(RunFacet):
    """The documents a job failed (the first :data:`FAILED_FILES_IN_FACET`) and how many there were."""

    failedCount: int
    files: list[FailedFile] = field(factory=list)


def run_facets(
    job_id: str,
    workflow_id: str,
    workflow_name: str | None,
    summary: Mapping[str, Any],
    documents: int,
    failed: int,
) -> dict[str, RunFacet]:
    """
    Return the run facets of a job summary (``documents`` written, ``failed`` files): the job, and its
    failed files when there are any.
    """
    facets: dict[str, RunFacet] = {
        "workflowsvc_job": WorkflowServiceJobRunFacet(
            jobId=job_id,
            workflowId=workflow_id,
            workflowName=workflow_name,
            status=summary.get("status"),
            documentsWritten=documents,
            failedCount=failed,
        )
    }
    failed_files: Sequence[Mapping[str, Any]] = summary.get("failed_files") or []
    if failed_files:
        facets["workflowsvc_failedFiles"] = WorkflowServiceFailedFilesRunFacet(
            failedCount=len(failed_files),
            files=[
                FailedFile(document=str(f.get("document", "")), error=str(f.get("error") or ""))
                for f in failed_files[:FAILED_FILES_IN_FACET]
            ],
        )
    return facets
