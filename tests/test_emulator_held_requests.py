"""A request held by injected latency is processed even when its client gives up (real sockets)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.models import Job, JobStatus

HOLD = 0.8
CLIENT_TIMEOUT = 0.2


def _held_run(emulator: Any, settings: Any, tmp_path: Path) -> tuple[str, list[Job]]:
    """Send a run held ``HOLD`` s with a client that waits ``CLIENT_TIMEOUT`` s; the jobs after the hold."""
    with WorkflowServiceHook(settings=settings) as hook:
        workflow_id = str(hook.create_workflow("held", "basic").id)
    emulator.set_faults(method="POST", path=f"*/workflows/{workflow_id}/run", latency=HOLD)
    data = tmp_path / "held.txt"
    data.write_text("A file sent just before the client gives up.")
    with (
        emulator.api_client(timeout=CLIENT_TIMEOUT) as client,
        data.open("rb") as fh,
        pytest.raises(httpx.ReadTimeout),
    ):
        client.post(f"/workflows/{workflow_id}/run", files={"input_files": ("held.txt", fh, "text/plain")})
    while not _held_run_handled(emulator):  # processed, or dropped: the emulator has done with it
        time.sleep(0.02)
    emulator.clear_faults()
    with WorkflowServiceHook(settings=settings) as hook:
        return workflow_id, hook.list_jobs(workflow_id=workflow_id)


def _held_run_handled(emulator: Any) -> bool:
    """Whether the emulator has finished handling the held run (its request log gives the duration)."""
    return any(r["duration_ms"] is not None for r in emulator.requests(method="POST", path_contains="/run"))


def test_a_held_run_is_processed_after_the_client_disconnected(
    emulator: Any, settings: Any, tmp_path: Path
) -> None:
    """Scenario: the client's read timeout ends its request while the emulator holds it (latency
    before processing). The service still processes the buffered request: one job, with the file."""
    _, jobs = _held_run(emulator, settings, tmp_path)
    assert len(jobs) == 1, jobs
    with WorkflowServiceHook(settings=settings) as hook:
        details = hook.get_job_details(jobs[0].id)
        assert details.processing_status is not JobStatus.UNKNOWN
        assert sum(n.ready + n.in_progress + n.success + n.failure for n in details.node_stats[:1]) == 1
    log = emulator.requests(method="POST", path_contains="/run")
    assert [r["fault"] for r in log] == [f"latency {HOLD:g}s"]


def test_abandon_on_disconnect_restores_dropping_held_requests(
    emulator: Any, settings: Any, tmp_path: Path
) -> None:
    """Scenario: with ``abandon_on_disconnect`` the held request of a client that left is dropped."""
    emulator.configure(abandon_on_disconnect=True)
    _, jobs = _held_run(emulator, settings, tmp_path)
    assert jobs == []


def test_a_held_request_of_a_patient_client_is_answered(emulator: Any, settings: Any, tmp_path: Path) -> None:
    """Scenario: a client that waits out the hold gets the normal answer (the body was replayed)."""
    with WorkflowServiceHook(settings=settings) as hook:
        workflow_id = str(hook.create_workflow("patient", "basic").id)
        emulator.set_faults(method="POST", path="*/run", latency=0.2)
        data = tmp_path / "patient.txt"
        data.write_text("Patient.")
        job = hook.run_workflow(workflow_id, files=[str(data)])
        assert job is not None
        assert [j.id for j in hook.list_jobs(workflow_id=workflow_id)] == [job.id]
