"""
A job's record and its state at any instant, computed from the emulator clock.

A job is ``scheduled`` for one processing slot (``delay`` seconds), then its files flow through the
workflow's nodes like a pipeline: file *i* is in node *j* during slot *i + j*. A file that cannot be
processed fails at the first node (one slot) and goes no further. When every file is through, the job is
``completed`` (at least one file succeeded, or it had nothing to process) or ``failed``, unless the
test that set up the emulator chose how the job ends (``ending``: ``failed`` or ``stopped``). Cancelling
freezes the state at that instant as ``stopped``.

An on-demand job's timeline starts when it is admitted (``started_at``, see ``ondemand.py``), not when
it was created: until then it is ``scheduled``, queued behind the account's running on-demand jobs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_workflowsvc.emulator.schema import JobState

__all__ = ["JobFile", "JobNode", "JobRecord"]

_EPSILON = 1e-9
_DONE = math.inf


@dataclass(frozen=True)
class JobNode:
    """One node of a job's workflow, as the job was created with it."""

    id: str
    name: str
    type: str
    subtype: str


@dataclass(frozen=True)
class JobFile:
    """One input of a job: an uploaded file or a remote document; ``error`` when it cannot be processed."""

    name: str
    file_id: str
    error: str | None = None


@dataclass
class JobRecord:
    """Everything stored about a job; its state is derived, never stored."""

    id: str
    workflow_id: str
    workflow_name: str
    created_at: float
    delay: float
    nodes: list[JobNode]
    files: list[JobFile]
    local_source: bool
    local_destination: bool
    empty_message: str | None = None
    """Why a job with no files fails (None: a job with no files completes)."""
    stopped_at: float | None = None
    scheduled: bool = False
    stamp_offset: float = 0.0
    """Seconds between when the job was created and the ``created_at`` written on it (config
    ``job_stamp_offset`` at its creation)."""
    on_demand: bool = False
    """Launched by ``POST /jobs/`` on a temporary workflow, not by a run of a workflow."""
    template_id: str | None = None
    started_at: float | None = None
    """When an on-demand job was admitted (None: still queued); other jobs start when created."""
    ending: str | None = None
    """The status the job ends with once its files are through, chosen by a test (``failed`` or
    ``stopped``); None: what its files decide."""
    _finish_slot: int = field(default=-1, repr=False, compare=False)

    @property
    def stamped_at(self) -> float:
        """The ``created_at`` written on the job (its creation time, off by ``stamp_offset``)."""
        return self.created_at + self.stamp_offset

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_finish_slot")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        return cls(
            **{
                **data,
                "nodes": [JobNode(**n) for n in data["nodes"]],
                "files": [JobFile(**f) for f in data["files"]],
            }
        )

    @property
    def job_type(self) -> str:
        """Return the ``job_type``: template/ephemeral on demand, scheduled, else ephemeral (a run)."""
        if self.on_demand:
            return "template" if self.template_id else "ephemeral"
        return "scheduled" if self.scheduled else "ephemeral"

    # -- timeline ----------------------------------------------------------------------------------

    @property
    def origin(self) -> float | None:
        """When the job's timeline starts: creation, or an on-demand job's admission (None: queued)."""
        return self.started_at if self.on_demand else self.created_at

    def ends_at(self) -> float:
        """When the job stops occupying the service: its last slot's end, or its cancellation."""
        stopped = math.inf if self.stopped_at is None else self.stopped_at
        origin = self.origin
        if origin is None:
            return stopped
        return min(origin + (self.finish_slot + 1) * max(self.delay, 0.0), stopped)

    @property
    def finish_slot(self) -> int:
        """The number of processing slots the job needs."""
        if self._finish_slot < 0:
            width = len(self.nodes)
            self._finish_slot = max(
                (i + (width if f.error is None else 1) for i, f in enumerate(self.files)), default=0
            )
        return self._finish_slot

    def _slot(self, at: float) -> float:
        """Return the processing slot at ``at``: -1 while scheduled, ``inf`` once every file is through."""
        moment, origin = at if self.stopped_at is None else min(at, self.stopped_at), self.origin
        if origin is None:
            return -1
        if self.delay <= 0:
            return _DONE if moment >= origin else -1
        elapsed = math.floor((moment - origin) / self.delay + _EPSILON)
        if elapsed < 1:
            return -1
        return _DONE if elapsed - 1 >= self.finish_slot else elapsed - 1

    def status(self, at: float) -> JobState:
        if self.stopped_at is not None:
            return JobState.STOPPED
        slot = self._slot(at)
        if slot < 0:
            return JobState.SCHEDULED
        if slot != _DONE:
            return JobState.IN_PROGRESS
        if self.ending is not None:
            return JobState(self.ending)
        return JobState.COMPLETED if self._succeeded() else JobState.FAILED

    def transitions(self, at: float) -> list[tuple[JobState, float]]:
        """
        Return the statuses the job's record has entered by ``at``, each with the moment it entered
        it, in order: ``scheduled`` at creation, ``in progress`` when its first slot began (only a job that
        spent time in progress), then its ending (its last slot's end, or its cancellation).
        """
        status = self.status(at)
        entered = [(JobState.SCHEDULED, self.created_at)]
        origin = self.origin
        if origin is not None and self.delay > 0 and self.finish_slot > 0 and self._slot(at) >= 0:
            entered.append((JobState.IN_PROGRESS, origin + self.delay))
        if not status.is_active:
            entered.append((status, self.ends_at()))
        return entered

    def _succeeded(self) -> bool:
        if not self.files:
            return self.empty_message is None
        return any(f.error is None for f in self.files)

    def node_stats(self, at: float) -> list[dict[str, Any]]:
        """Per node: files waiting for it, in it, through it, and failed in it."""
        slot = self._slot(at)
        stats = []
        for j, node in enumerate(self.nodes):
            counts = {"ready": 0, "in_progress": 0, "success": 0, "failure": 0}
            for i, file in enumerate(self.files):
                failing = file.error is not None
                if failing and j > 0:
                    counts["ready"] += int(i >= slot)  # queued here until it fails in the first node
                    continue
                step = i + j
                if step > slot:
                    counts["ready"] += 1
                elif step == slot:
                    counts["in_progress"] += 1
                else:
                    counts["failure" if failing else "success"] += 1
            stats.append(
                {"node_name": node.name, "node_type": node.type, "node_subtype": node.subtype, **counts}
            )
        return stats

    def failed_files(self, at: float) -> list[JobFile]:
        """Return the files that have failed by ``at``."""
        slot = self._slot(at)
        return [f for i, f in enumerate(self.files) if f.error is not None and i < slot]

    def outputs(self, at: float) -> list[tuple[str, JobNode]]:
        """``(file_id, node)`` of each downloadable output (the last node's), once the job has completed."""
        if not self.local_destination or not self.nodes or self.status(at) is not JobState.COMPLETED:
            return []
        last = self.nodes[-1]
        return [(f.file_id, last) for f in self.files if f.error is None]

    def message(self, at: float) -> str:
        status = self.status(at)
        total, failed = len(self.files), len(self.failed_files(at))
        if status is JobState.SCHEDULED:
            if self.origin is None:
                return "Job is scheduled: it starts when one of the account's running on-demand jobs ends."
            return "Job is scheduled and will start shortly."
        if status is JobState.STOPPED and self.stopped_at is None:
            return f"Job was stopped by the service after {total} file(s) ({failed} failed)."
        if status is JobState.STOPPED:
            done = self._through(at)
            return f"Job was cancelled; it had finished {done} of {total} file(s) ({failed} failed)."
        if status is JobState.IN_PROGRESS:
            return f"Processing {total} file(s): {self._through(at)} done, {failed} failed."
        if status is JobState.FAILED and self.ending is not None:
            return f"Job failed in the service after {total} file(s) ({failed} failed)."
        if status is JobState.FAILED:
            if not self.files:
                return self.empty_message or "Job failed."
            first = next(f for f in self.files if f.error is not None)
            return f"All {total} file(s) failed; first error: {first.name}: {first.error}"
        if not self.files:
            return "Job completed: the source had no documents to process."
        if failed:
            return f"Processed {total - failed} of {total} file(s); {failed} failed (see failed-files)."
        return f"Processed {total} file(s) successfully."

    def _through(self, at: float) -> int:
        slot, width = self._slot(at), len(self.nodes)
        return sum(1 for i, f in enumerate(self.files) if i + (width if f.error is None else 1) <= slot)
