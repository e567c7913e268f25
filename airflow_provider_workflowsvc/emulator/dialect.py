"""
How each dialect spells what the emulated service answers (see docs/emulator.md, "Dialects").

``spec``: the spec's own examples (lower-case job statuses, ``im progress`` in the job listing, 200 for
every answer). ``platform``: what the live service sends where the spec is silent, as its public SDK
expects (upper-case statuses, 202 for runs and connection checks, richer job records).
"""

from __future__ import annotations

from typing import Literal, get_args

from airflow_provider_workflowsvc.emulator.schema import (
    DESTINATION_TYPES,
    PLATFORM_DESTINATION_TYPES,
    PLATFORM_SOURCE_TYPES,
    SOURCE_TYPES,
    JobState,
)

__all__ = [
    "DIALECTS",
    "Dialect",
    "JobSpelling",
    "accepted_status_code",
    "check_status",
    "connector_types",
    "details_status",
    "job_status",
]

Dialect = Literal["spec", "platform"]
DIALECTS: tuple[Dialect, ...] = get_args(Dialect)
JobSpelling = Literal["listing", "record"]

_PLATFORM_JOB = {
    JobState.SCHEDULED: "SCHEDULED",
    JobState.IN_PROGRESS: "IN_PROGRESS",
    JobState.COMPLETED: "COMPLETED",
    JobState.STOPPED: "STOPPED",
    JobState.FAILED: "FAILED",
}


def job_status(state: JobState, dialect: Dialect, spelling: JobSpelling) -> str:
    """Return a job's ``status`` in a record (``record``) or in the listing and run answer (``listing``)."""
    if dialect == "platform":
        return _PLATFORM_JOB[state]
    if spelling == "listing" and state is JobState.IN_PROGRESS:
        return "im progress"
    return state.value


def details_status(state: JobState, some_files_failed: bool, dialect: Dialect) -> str:
    """Return the ``processing_status`` of job details (platform: finished is SUCCESS, never COMPLETED)."""
    if dialect == "platform" and state is JobState.COMPLETED:
        return "COMPLETED_WITH_ERRORS" if some_files_failed else "SUCCESS"
    return state.value.upper().replace(" ", "_")


def check_status(resolved: bool, failure: str | None, dialect: Dialect) -> str:
    """Return a connection check's ``status``: scheduled until it resolves, then success or failure."""
    status = "scheduled" if not resolved else "failure" if failure else "success"
    return status.upper() if dialect == "platform" else status


def connector_types(kind: str, dialect: Dialect) -> tuple[str, ...]:
    """Return the connector types a dialect knows: the spec's, or (platform) also the live docs' ones."""
    if dialect == "platform":
        return PLATFORM_SOURCE_TYPES if kind == "source" else PLATFORM_DESTINATION_TYPES
    return SOURCE_TYPES if kind == "source" else DESTINATION_TYPES


def accepted_status_code(dialect: Dialect) -> int:
    """Return the code of an answer that starts work (a run, a connection check): 202 on the platform."""
    return 202 if dialect == "platform" else 200
