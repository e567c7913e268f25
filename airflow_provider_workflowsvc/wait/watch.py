"""
Following one job: what was seen of it (:class:`JobWatch`), when to look again (:class:`PollSchedule`).
No requests here (they are in :mod:`.poll`); imported lazily, never at DAG-parse time.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc._marker import run_marker, unmarked
from airflow_provider_workflowsvc.models import JobStatus
from airflow_provider_workflowsvc.wait.outcome import (
    STATUS_OUTCOME,
    FailedDocument,
    JobOutcome,
    NodeProgress,
    OutcomeStatus,
    OutputFile,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.models import FailedFile, Job, JobDetails, NodeStats

PROGRESS_LOG_EVERY = 60.0
"""Seconds between two progress lines of one job while its status stays the same."""
FINAL_POLL_RESERVE = 5.0
"""Seconds a wait that starts past its deadline gives its one poll."""
END_READ_RESERVE = 60.0
"""Seconds past its deadline a wait gives the reads of a job's end its details showed before the
deadline (record, failed files, documents): a slow or busy service delays the report of an end it
already gave, it does not turn it into a timeout (issue #43: 80 waits on 20 connections, 1.3 s answers)."""
FINAL_POLL_LEAD = 1.0
"""Seconds before the deadline the last poll starts (at most one interval); its requests are cut at
the deadline, and the wait ends at the deadline."""


# --------------------------------------------------------------------------------------------------
# Watching one job


class JobWatch:
    """
    What has been seen of one job; logs status changes, and progress at most once per
    :data:`PROGRESS_LOG_EVERY` seconds in one status (the outcome carries it in full).
    """

    def __init__(self, job_id: str, log: logging.Logger | Any, started_at: float | None = None) -> None:
        self.job_id = job_id
        self.log = log
        self.started_at = time.time() if started_at is None else started_at
        self.status: JobStatus | None = None
        self.raw_status: str | None = None
        self.details: JobDetails | None = None
        self._progress: tuple[Any, ...] | None = None
        """The per-node progress last logged (and ``_progress_at``, when)."""
        self._progress_at = 0.0
        self._warned: set[str] = set()

    @property
    def ended(self) -> bool:
        """Whether the job was last seen in a final status (its end's reads may still be due)."""
        return self.status is not None and self.status.is_terminal

    @property
    def elapsed(self) -> float:
        return max(0.0, time.time() - self.started_at)

    def observe(self, details: JobDetails | None, job: Job | None = None) -> bool:
        """Record a poll (details, and the job record when fetched); True once the job is terminal."""
        status, raw = self._status_of(details, job)
        if details is not None:
            self.details = details
        if status is JobStatus.UNKNOWN and raw not in self._warned:
            self._warned.add(raw)
            self.log.warning(
                "Job %s reports status %r, which this provider does not know; it is not treated as "
                "finished, the wait goes on until the job reports a known final status or times out",
                self.job_id,
                raw,
            )
        changed = status is not self.status
        if changed and status.is_terminal:  # the wait's summary line says how the job ended: one line
            self.status, self.raw_status = status, raw
            return True
        progress = self._progress_to_log(details.node_stats if details is not None else [], changed)
        if changed:
            # The first status seen is no transition: the job may be someone else's (a sensor's)
            seen = f"{self.status} → {raw}" if self.status is not None else f"first seen {raw}"
            line = f"Job %s: %s (wait %.0f s){'; progress: %s' if progress else ''}"
            self.log.info(line, self.job_id, seen, self.elapsed, *([progress] if progress else []))
        elif progress:
            self.log.info("Job %s progress: %s", self.job_id, progress)
        self.status, self.raw_status = status, raw
        return status.is_terminal

    @staticmethod
    def _status_of(details: JobDetails | None, job: Job | None) -> tuple[JobStatus, str]:
        """Return the status seen: the job record's when known, else the details' ``processing_status``."""
        if job is not None and job.status is not JobStatus.UNKNOWN:
            return job.status, job.status.value
        if details is not None and details.processing_status is not JobStatus.UNKNOWN:
            return details.processing_status, details.processing_status.value
        return JobStatus.UNKNOWN, (job.raw_status if job is not None else None) or "unknown"

    def confirmed_by(self, job: Job) -> bool:
        """
        Whether the job record agrees that the job ended (a known non-terminal status: the details ran
        ahead, the wait goes on; an unknown status does not contradict).
        """
        if job.status is JobStatus.UNKNOWN or job.status.is_terminal:
            return True
        self.log.warning(
            "Job %s: the details say %s but the job record says %s; not finished yet, the wait goes on",
            self.job_id,
            self.raw_status,
            job.raw_status or job.status.value,
        )
        self.status, self.raw_status = job.status, job.status.value
        return False

    def _progress_to_log(self, stats: list[NodeStats], changed: bool) -> str | None:
        """Return the per-node progress to log with this poll (None: unchanged, or said recently)."""
        now = time.time()
        if not stats or (not changed and now - self._progress_at < PROGRESS_LOG_EVERY):
            return None  # said recently, in the same status: a later line (or the outcome) carries it
        key = tuple((n.node_name, n.ready, n.in_progress, n.success, n.failure) for n in stats)
        if key == self._progress:
            return None
        self._progress, self._progress_at = key, now
        return "; ".join(
            f"{n.node_name or n.node_type or '?'}: ready {n.ready}, in progress {n.in_progress}, "
            f"success {n.success}, failure {n.failure}"
            for n in stats
        )

    def outcome(
        self, job: Job, failed: list[FailedFile], documents: Mapping[str, str | None] | None = None
    ) -> JobOutcome:
        """
        Build the outcome of a terminal job (``documents``: each output file's document); a marked run's
        marker is taken out of every name the service gives back.
        """
        status = job.status if job.status.is_terminal else (self.status or JobStatus.UNKNOWN)
        details = self.details
        marker = run_marker(job.input_file_ids)
        documents = documents or {}
        named = {file_id: unmarked(doc, marker) for file_id, doc in documents.items() if doc is not None}
        return JobOutcome(
            status=STATUS_OUTCOME.get(status, "error"),
            job_id=self.job_id,
            workflow_id=job.workflow_id,
            workflow_name=job.workflow_name,
            job_status=status.value,
            message=unmarked((details.message if details is not None else None) or "", marker),
            node_stats=self._node_stats(),
            failed_files=[
                FailedDocument(document=unmarked(f.document, marker), error=unmarked(f.error or "", marker))
                for f in failed
            ],
            output_files=[
                OutputFile(file_id=o.file_id, node_id=o.node_id, document=named.get(o.file_id))
                for o in job.output_node_files
            ],
            elapsed=self.elapsed,
            **job_run_time(job),
        )

    def _node_stats(self) -> list[NodeProgress]:
        stats = self.details.node_stats if self.details is not None else []
        fields = set(NodeProgress.model_fields)
        return [NodeProgress(**n.model_dump(include=fields)) for n in stats]

    def timed_out(self) -> JobOutcome:
        return self._unfinished("timeout", "")

    def _unfinished(self, status: OutcomeStatus, message: str) -> JobOutcome:
        return JobOutcome(
            status=status,
            job_id=self.job_id,
            job_status=self.raw_status,
            message=message,
            node_stats=self._node_stats(),
            elapsed=self.elapsed,
        )


# --------------------------------------------------------------------------------------------------
# When to poll


class PollSchedule:
    """
    Poll every ``interval`` s (the first pause up to a fifth longer: no lockstep), the last
    ``FINAL_POLL_LEAD`` s before the deadline, none after; the wait ends at the deadline (:meth:`rest`).
    """

    def __init__(self, deadline: float, interval: float) -> None:
        now = time.time()
        self.deadline = deadline
        self._late = deadline <= now
        self.cutoff = now + FINAL_POLL_RESERVE if self._late else deadline
        """When the requests of the polls must end: the deadline (one that had passed: a moment from now)."""
        self.interval = max(float(interval), 0.0)
        self._lead = min(FINAL_POLL_LEAD, self.interval)
        self._final_done = False
        self._polled = False
        self._first_pause = self.interval * random.uniform(1.0, 1.2)

    def remaining(self) -> float:
        return self.deadline - time.time()

    @property
    def final(self) -> bool:
        """Whether the poll about to be made (after :meth:`next_pause`) is the last before the deadline."""
        return self._final_done

    def next_pause(self) -> float | None:
        """
        Seconds to sleep before the next poll, None when the polls are over (a wait that starts past its
        deadline polls once at once, with ``FINAL_POLL_RESERVE``).
        """
        remaining = self.remaining()
        first, self._polled = not self._polled, True
        if first and self._late:
            self._final_done = True
            return 0.0
        if remaining <= 0 or self._final_done:
            return None
        pause, self._first_pause = self._first_pause, self.interval
        if pause < remaining - self._lead:
            return pause
        self._final_done = True
        return max(remaining - self._lead, 0.0)

    def end_cutoff(self) -> float:
        """When the reads of a job's end seen before the deadline must end: ``END_READ_RESERVE`` from now."""
        return max(self.cutoff, time.time() + END_READ_RESERVE)

    def rest(self) -> float:
        """Seconds from now to the deadline, slept after the last poll (a wait lasts its whole timeout)."""
        return max(self.remaining(), 0.0)


def job_run_time(job: Job) -> dict[str, Any]:
    """Return the job's own run time as ``JobOutcome`` fields: its ``runtime``, else from ``created_at``."""
    seconds = _runtime_seconds(job.runtime)
    if seconds is not None:
        return {"job_seconds": seconds, "job_seconds_from": "runtime"}
    created = job.created_utc
    if created is not None:
        return {"job_seconds": max(0.0, time.time() - created.timestamp()), "job_seconds_from": "created_at"}
    return {}


def _runtime_seconds(runtime: str | float | None) -> float | None:
    """``runtime`` in seconds: a number, or ``[H:]MM:SS[.f]``; None when unreadable or negative."""
    if runtime is None or isinstance(runtime, bool):
        return None
    try:
        if isinstance(runtime, (int, float)) or ":" not in runtime:
            seconds = float(runtime)
        else:
            seconds = sum(float(part) * 60**i for i, part in enumerate(reversed(runtime.split(":"))))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
