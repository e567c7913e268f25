"""Issue #43 (5): ``if_running``'s check sees a job that starts while it is made.

The check lists the workflow's jobs one status at a time. Against the emulator (both dialects), the
job moves on from scheduled to in progress on the emulator's clock right after the check's first
listing is answered, whichever status that listing asked for: the job runs throughout the check and
must be in its answer (in the other order it was in neither listing, and ``if_running='fail'`` sent a
run beside it).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from airflow_provider_workflowsvc._tasks.running import running_job
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.models import JobStatus

DELAY = 600.0
"""Emulator seconds a job stays scheduled (then one more step per file and node in progress)."""
log = logging.getLogger(__name__)


class MovingOnHook(WorkflowServiceHook):
    """A hook whose first job listing, once answered, moves the emulator's clock: the job starts."""

    emulator: Any = None
    listed: list[list[JobStatus]]

    def list_jobs(self, *args: Any, **kwargs: Any) -> Any:
        listed = super().list_jobs(*args, **kwargs)
        if not self.listed:
            self.emulator.advance_clock(DELAY)
        self.listed.append([job.status for job in listed])
        return listed


def test_a_job_that_starts_during_the_check_is_seen(emulator: Any, settings: Any, tmp_path: Path) -> None:
    emulator.configure(processing_delay=DELAY)
    path = tmp_path / "a.txt"
    path.write_text("a")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow_id = str(hook.create_workflow("moving-on", "basic").id)
        job = hook.run_workflow(workflow_id, files=[(str(path), "a.txt")])
        assert job is not None
        assert hook.get_job(job.id).status is JobStatus.SCHEDULED
    with MovingOnHook(settings=settings) as hook:
        hook.emulator, hook.listed = emulator, []
        found = running_job(hook, workflow_id, log)
        assert hook.get_job(job.id).status is JobStatus.IN_PROGRESS, "the job moved on during the check"
    assert found is not None, hook.listed
    assert found.id == job.id
    assert len(hook.listed) == 2
