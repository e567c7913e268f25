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


def job_facet(
    job_id: str,
    workflow_id: str,
    workflow_name: str | None,
    summary: Mapping[str, Any],
    documents: int,
    failed: int,
) -> WorkflowServiceJobRunFacet:
    """Return the job facet of a job summary (``documents`` written, ``failed`` files)."""
    return WorkflowServiceJobRunFacet(
        jobId=job_id,
        workflowId=workflow_id,
        workflowName=workflow_name,
        status=summary.get("status"),
        documentsWritten=documents,
        failedCount=failed,
    )


def failed_files_facet(failed: Sequence[Mapping[str, Any]]) -> WorkflowServiceFailedFilesRunFacet:
    """Return the failed-files facet of a job summary's ``failed_files``."""
    return WorkflowServiceFailedFilesRunFacet(
        failedCount=len(failed),
        files=[
            FailedFile(document=str(f.get("document", "")), error=str(f.get("error") or ""))
            for f in failed[:FAILED_FILES_IN_FACET]
        ],
    )
