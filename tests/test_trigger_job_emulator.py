"""WorkflowJobTrigger against the emulator: real jobs, injected faults, on_kill."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger


@pytest.fixture
def job(workflowsvc_conn: Any, settings: Any, tmp_path: Path) -> str:
    """A running two-file job of a local-to-local workflow (about 1 s long)."""
    workflowsvc_conn.configure(processing_delay=0.2)
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"text of {name}")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = hook.create_workflow(f"wf-{time.time_ns()}", "basic")
        created = hook.run_workflow(str(workflow.id), files=[tmp_path / "a.txt", tmp_path / "b.txt"])
    assert created is not None
    return created.id


async def first_event(trigger: WorkflowJobTrigger) -> dict[str, Any]:
    return (await asyncio.wait_for(trigger.run().__anext__(), 20)).payload


async def test_waits_through_injected_faults(job: str, emulator: Any) -> None:
    emulator.set_faults(
        rules=[{"method": "GET", "path": "/api/v1/jobs/*", "errors": [503, 502, 429, "drop"], "rate": 0.5}],
        seed=7,
    )
    trigger = WorkflowJobTrigger(job_id=job, deadline=time.time() + 15, poll_interval=0.1)
    payload = await first_event(trigger)
    assert payload["status"] == "success", payload
    assert [n["success"] for n in payload["node_stats"]] == [2, 2, 2]
    assert len(payload["output_files"]) == 2
    assert any(r["fault"] for r in emulator.requests(path_contains=f"/jobs/{job}"))


async def test_on_kill_stops_the_job(job: str, emulator: Any, settings: Any, task_state: Any) -> None:
    for _ in range(2):  # a user marks the task failed; the second time the job has ended: 409, quiet
        trigger = WorkflowJobTrigger(job_id=job, deadline=time.time() + 15)
        task_state(trigger)
        await trigger.on_kill()
        with WorkflowServiceHook(settings=settings) as hook:
            assert hook.get_job(job).status.value == "stopped"
    statuses = [r["status"] for r in emulator.requests(method="POST", path_contains="/cancel")]
    assert statuses == [200, 409]
