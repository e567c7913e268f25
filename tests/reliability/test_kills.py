"""Item 4: a killed task leaves no job running.

* A running (non-deferred) task gets SIGTERM, as the supervisor sends it when the task is marked
  failed, times out or its worker stops: the task runs in its own process (``dag.test()``) and the
  signal really arrives there; ``on_kill`` sends the cancel and the job ends ``stopped``.
* A deferred task is marked failed: the triggerer cancels the trigger and awaits its ``on_kill``,
  which cancels the job (the sensor's trigger, which does not own its job, leaves it running).
* The cancel sent on the way out has a budget of its own: a service that never answers cannot hold a
  dying task or a triggerer past it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

from . import _task_process
from ._helpers import record_sent, task_context

# A signal, a mark and a cancel budget: the same in both dialects (the cancel's path and answer are the
# wire suites'); proven against the one real users meet.
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.dialect("platform", reason="signals and budgets, not the wire"),
]


@pytest.fixture
def workflow(settings: Any) -> str:
    with WorkflowServiceHook(settings=settings) as hook:
        return str(hook.create_workflow(f"kill-{time.time_ns()}", "basic").id)


@pytest.fixture
def input_file(tmp_path: Path) -> str:
    path = tmp_path / "doc.txt"
    path.write_text("text of a document")
    return str(path)


def job_status(settings: Any, job_id: str) -> str:
    with WorkflowServiceHook(settings=settings) as hook:
        return hook.get_job(job_id).status.value


def wait_for(predicate: Any, timeout: float, what: str, proc: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the task process exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return value


def test_sigterm_to_a_running_task_stops_its_job(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,
    input_file: str,
    tmp_path: Path,
) -> None:
    emulator.configure(processing_delay=1000)  # never ends on its own
    spec = {
        "dag_id": "reliability_sigterm",
        "logical_date": "2026-11-22T00:00:00+00:00",
        "task": {"workflow_id": workflow, "files": [input_file], "poll_interval": 0.2, "deferrable": False},
    }
    log_path = tmp_path / "task.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, _task_process.__file__, json.dumps(spec)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        polls = wait_for(lambda: emulator.requests(path_contains="/details"), 240, "the wait to start", proc)
        job_id = polls[0]["path"].split("/")[-2]
        signalled = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        # The cancel, or the task process ending without it (the event that fails the test); however
        # long a busy machine takes to deliver the signal and send the request.
        cancel = wait_for(
            lambda: emulator.requests(method="POST", path_contains="/cancel"), 240, "the cancel", proc
        )
        cancel_seconds = time.monotonic() - signalled
        try:  # the supervisor would SIGKILL ~5 s after SIGTERM
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    assert [(c["path"], c["status"]) for c in cancel] == [(f"/api/v1/jobs/{job_id}/cancel", 200)]
    assert job_status(settings, job_id) == "stopped"
    assert "Asked the service to cancel job" in log_path.read_text()
    runs = emulator.requests(method="POST", path_contains="/run")
    assert len(runs) == 1
    figures.update(kills=1, job_status="stopped", cancel_after_sigterm_seconds=round(cancel_seconds, 2))


async def _deferred_trigger(task: RunWorkflowOperator) -> WorkflowJobTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        await asyncio.to_thread(task.execute, task_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkflowJobTrigger)
    return trigger


async def mark_failed_while_deferred(
    trigger: WorkflowJobTrigger, task_state: Any, waited: float = 0.5
) -> float:
    """What the triggerer does when a user marks the deferred task failed: cancel the trigger's run,
    then await ``on_kill`` (which finds the task ``failed``). Returns the seconds ``on_kill`` took."""
    task_state(trigger, "failed")
    run = asyncio.ensure_future(trigger.run().__anext__())
    await asyncio.sleep(waited)
    assert not run.done(), "the trigger ended before it was killed"
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    started = time.monotonic()
    await asyncio.wait_for(trigger.on_kill(), 30)  # [triggerer] on_kill_timeout
    return time.monotonic() - started


async def test_marking_a_deferred_task_failed_stops_its_job(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    settings: Any,
    workflow: str,
    input_file: str,
    task_state: Any,
) -> None:
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)
    task = RunWorkflowOperator(
        task_id="run", workflow_id=workflow, files=[input_file], poll_interval=0.1, deferrable=True
    )
    trigger = await _deferred_trigger(task)
    seconds = await mark_failed_while_deferred(trigger, task_state)
    assert job_status(settings, str(trigger.job_id)) == "stopped"
    # The sensor's trigger does not own the job: killing it leaves the job alone.
    with emulator.api_client() as api:
        other = api.post(f"/workflows/{workflow}/run", files={"input_files": ("x.txt", b"x")}).json()["id"]
    sensor_trigger = WorkflowJobTrigger(
        job_id=other, deadline=time.time() + 60, poll_interval=0.1, cancel_on_kill=False
    )
    await mark_failed_while_deferred(sensor_trigger, task_state)
    assert job_status(settings, other) != "stopped"
    cancels = emulator.requests(method="POST", path_contains="/cancel")
    assert [c["path"] for c in cancels] == [f"/api/v1/jobs/{trigger.job_id}/cancel"]
    figures.update(kills=2, jobs_stopped=1, jobs_left_to_their_owner=1, on_kill_seconds=round(seconds, 2))


@pytest.fixture
def short_cancel_budget(monkeypatch: pytest.MonkeyPatch) -> float:
    """The budget of a cancel sent as a task ends (5 s: the supervisor's SIGKILL), cut for the test."""
    monkeypatch.setattr("airflow_provider_workflowsvc.wait.poll.CANCEL_BUDGET", 1.0)
    return 1.0


async def test_killing_against_a_hanging_service_stays_within_the_budget(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    workflow: str,
    input_file: str,
    short_cancel_budget: float,
    task_state: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cancel gets no answer: ``on_kill`` (operator and trigger) gives up at the budget: each
    cancel is sent with its timeouts cut to the budget, which is what ends it (no answer comes)."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)
    task = RunWorkflowOperator(
        task_id="run", workflow_id=workflow, files=[input_file], poll_interval=0.1, deferrable=True
    )
    trigger = await _deferred_trigger(task)
    emulator.set_faults(method="POST", path="/api/v1/jobs/*/cancel", latency=3600)
    sent = record_sent(monkeypatch)
    trigger_seconds = await mark_failed_while_deferred(trigger, task_state, waited=0.2)

    started = time.monotonic()
    task.on_kill()  # the job id is known from the deferral; SIGTERM's handler calls this
    operator_seconds = time.monotonic() - started
    cancels = emulator.requests(method="POST", path_contains="/cancel")
    emulator.clear_faults()
    assert len(cancels) == 2, cancels  # the trigger's, then the operator's
    assert all(c["status"] is None for c in cancels), "a cancel was answered: nothing hung"
    sent_cancels = [s for s in sent if s.path.endswith("/cancel")]
    assert len(sent_cancels) == 2, sent
    budgeted = [t is not None and t <= short_cancel_budget for s in sent_cancels for t in s.timeout.values()]
    assert all(budgeted), sent_cancels
    figures.update(
        cancel_budget_seconds=short_cancel_budget,
        trigger_on_kill_seconds=round(trigger_seconds, 2),
        operator_on_kill_seconds=round(operator_seconds, 2),
    )
