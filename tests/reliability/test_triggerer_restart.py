"""Item 2: the triggerer restarts while a deferred task waits for its job.

A restart cancels the running trigger (no ``on_kill``: the task is still deferred) and another
triggerer rebuilds it from what ``serialize()`` returned. The rebuilt trigger must go on waiting for
the same job with the same absolute deadline (the clock does not start again), and nothing may be run
or cancelled because of the restart.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk._shared.module_loading import import_string
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_workflowsvc.exceptions import WorkflowJobTimeoutError
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

from ._helpers import task_context

# A rebuilt trigger keeps its job and deadline whatever the wire's shapes: proven against the dialect real
# users meet.
pytestmark = pytest.mark.dialect("platform", reason="the trigger's serialized state, not the wire")


@pytest.fixture
def workflow(settings: Any) -> str:
    with WorkflowServiceHook(settings=settings) as hook:
        return str(hook.create_workflow(f"restart-{time.time_ns()}", "basic").id)


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for path in paths:
        path.write_text(f"text of {path.name}")
    return [str(p) for p in paths]


def defer(task: RunWorkflowOperator, context: dict[str, Any]) -> WorkflowJobTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context)
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkflowJobTrigger)
    return trigger


async def run_until_restart(trigger: WorkflowJobTrigger, seconds: float) -> None:
    """Run the trigger for ``seconds``, then cancel it the way a stopping triggerer does."""
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(trigger.run().__anext__(), seconds)


def rebuild(trigger: WorkflowJobTrigger) -> WorkflowJobTrigger:
    """What another triggerer does: import the class path and call it with the serialized kwargs."""
    path, kwargs = trigger.serialize()
    rebuilt = import_string(path)(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)
    return rebuilt


async def first_event(trigger: WorkflowJobTrigger, timeout: float) -> dict[str, Any]:
    event = await asyncio.wait_for(trigger.run().__anext__(), timeout)
    return dict(event.payload)


def posts(emulator: Any) -> list[str]:
    return [r["path"] for r in emulator.requests(method="POST")]


async def test_a_rebuilt_trigger_finishes_the_same_wait(
    figures: dict[str, Any], workflowsvc_conn: Any, workflow: str, inputs: list[str]
) -> None:
    """Restarted twice, once with a status request in flight: the job's result, nothing re-run."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.3)  # 2 files through 3 nodes: ~1.5 s
    emulator.clear_requests()
    task = RunWorkflowOperator(task_id="run", workflow_id=workflow, files=inputs, poll_interval=0.1)
    task.deferrable = True
    context = task_context()
    trigger = defer(task, context)
    original = trigger.serialize()[1]

    await run_until_restart(trigger, 0.4)
    # The next status request hangs until the triggerer goes down (and the faults change).
    emulator.set_faults(method="GET", path="/api/v1/jobs/*/details", latency=3600, count=1)
    trigger = rebuild(trigger)
    await run_until_restart(trigger, 0.4)
    in_flight = [r for r in emulator.requests(path_contains="/details") if r["status"] is None]
    assert len(in_flight) == 1  # the triggerer went down while a status request was in flight
    emulator.clear_faults()
    trigger = rebuild(trigger)
    assert trigger.serialize()[1] == original  # same job, same deadline, same start

    payload = await first_event(trigger, 15)
    summary = task.execute_complete(context, payload)
    assert summary["status"] == "completed"
    assert summary["job_id"] == original["job_id"]
    assert [n["success"] for n in summary["node_stats"]] == [2, 2, 2]
    assert payload["elapsed"] >= 0.8  # measured from the original start, not from the restart
    assert posts(emulator) == [f"/api/v1/workflows/{workflow}/run"]  # one run, no cancel
    figures.update(restarts=2, restarts_with_a_request_in_flight=len(in_flight), runs=1, cancels=0)


async def test_a_rebuilt_trigger_keeps_the_deadline(
    figures: dict[str, Any], workflowsvc_conn: Any, workflow: str, inputs: list[str]
) -> None:
    """A job that never finishes: the rebuilt trigger times out at the deadline set before deferring."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)
    emulator.clear_requests()
    timeout, before_restart = 2.0, 1.2
    task = RunWorkflowOperator(
        task_id="run", workflow_id=workflow, files=inputs, poll_interval=0.1, timeout=timeout
    )
    task.deferrable = True
    context = task_context()
    started = time.time()
    trigger = defer(task, context)
    assert started <= trigger.deadline - timeout <= time.time()

    await run_until_restart(trigger, before_restart)
    payload = await first_event(rebuild(trigger), 10)
    ended = time.time()
    assert payload["status"] == "timeout"
    late = ended - trigger.deadline
    assert -0.2 <= late < 0.5, f"the event came {late:+.2f} s from the deadline"
    assert ended - started < before_restart + timeout  # the clock did not start again
    with pytest.raises(WorkflowJobTimeoutError, match="did not finish in time"):
        task.execute_complete(context, payload)
    cancels = emulator.requests(method="POST", path_contains="/cancel")
    assert len(cancels) == 1  # cancel_on_timeout, once the task judged the timeout: not the restart
    assert len([p for p in posts(emulator) if p.endswith("/run")]) == 1
    figures.update(restarts=1, deadline_seconds=timeout, event_after_deadline_seconds=round(late, 2), runs=1)
