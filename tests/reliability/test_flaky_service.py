"""Item 1: run-and-wait cycles against a flaky service (the emulator over real HTTP).

One request in five, on every route, fails: half of them before the service does anything (429, 502,
503, 504, dropped connection), half after it did the work (502, 504, dropped connection: a run created
its job, a cancel stopped it, but the answer is lost; 429 and 503 always mean "not processed"). Every
cycle's workflow must end up with at most one job: a lost run answer is reconciled against the
workflow's jobs, never re-sent (issue #22). Every cycle ends with the right result, or fails as
ambiguous: naming the one job it found when the service's job records do not list their input
files (so nothing proves it is the task's), or naming none when the answer was lost before the
service processed the run (no job exists, and nothing proves it never will).

Cycles go through ``RunWorkflowOperator.execute`` with a minimal task context (sync waits), or
``execute`` → ``TaskDeferred`` → the trigger on an event loop → ``execute_complete`` (deferrable
waits), which is what a worker and a triggerer do minus the scheduling; a few more run in real
``dag.test()`` DAG runs under the same faults.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred
from airflow.utils.state import TaskInstanceState

from airflow_provider_workflowsvc._tasks.submit import AmbiguousRunError
from airflow_provider_workflowsvc.exceptions import WorkflowJobFailedError
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

from ._helpers import MARKER, records_list_files, task_context, use_connection

CYCLES = 200
FAULT_RATE = 0.2
SEED = 20261122
KINDS = ("completed", "failed_files", "failed")
FILES = {"completed": ["good.txt"], "failed_files": ["good.txt", "empty.txt"], "failed": ["empty.txt"]}
FAULTS = [
    # Half the faults before the service does anything, half after it did the work (answer lost):
    # 0.1 + 0.9 * 0.1112 ≈ 0.2 of all requests.
    {"errors": [429, 502, 503, 504, "drop"], "rate": 0.1, "retry_after": 0.01},
    {"errors": [502, 504, "drop"], "rate": 0.1112, "phase": "after"},
]
CONNECTION = {"retry_wait": 0.01, "retry_max_wait": 0.1, "max_retries": 8}
SUBMIT_ATTEMPTS = 6
"""With the defaults (5 retries, 3 run attempts) a task gives up at this fault rate when 3 run requests
in a row are refused before processing (0.1³: once in 1,000 cycles) or a request that ends the task
fails 6 tries (0.2⁶); over 200 cycles about one run of this test in five would see a task give up.
Such a task is retried by Airflow, and the retry reconnects or adopts instead of running again
(test_worker_crash.py). The tries are raised so that every cycle's first try gets through."""


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    (tmp_path / "good.txt").write_text("Some text that the emulator processes.")
    (tmp_path / "empty.txt").write_text("")
    return tmp_path


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses before re-checking a workflow's jobs after a lost run answer (2 s, 4 s, ...), cut to
    10 ms: the emulator creates jobs synchronously, so there is nothing to wait for."""
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        time.sleep(min(seconds, 0.01))

    monkeypatch.setattr("airflow_provider_workflowsvc._tasks.submit.time", SimpleNamespace(sleep=sleep))
    return pauses


def run_task(task: RunWorkflowOperator) -> Any:
    """What a worker (and, when the task defers, a triggerer) does with the task; its result or error."""
    context = task_context()
    try:
        return task.execute(context)
    except TaskDeferred as deferred:
        event = asyncio.run(_first_event(deferred.trigger))
        return getattr(task, deferred.method_name)(context, event)


async def _first_event(trigger: Any) -> Any:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger ended without an event")


def check_result(kind: str, result: Any, error: BaseException | None) -> str:
    """The job id of a cycle whose result is the right one for ``kind`` (else the test fails); for a
    cycle that failed as ambiguous, ``ambiguous:`` and the one job its error names."""
    if isinstance(error, AmbiguousRunError):
        named = set(re.findall(r"job\(s\) ([0-9a-f-]{36})", str(error)))
        assert len(named) <= 1, error
        return f"ambiguous:{''.join(named)}"
    if kind == "completed":
        assert error is None, f"{kind}: {error!r}"
        assert result["status"] == "completed", result
        assert result["outcome"] == "success", result
        assert result["failed_file_count"] == 0, result
        assert len(result["output_files"]) == 1, result
        return str(result["job_id"])
    assert isinstance(error, WorkflowJobFailedError), f"{kind}: {error!r}"
    outcome = error.outcome
    assert outcome is not None
    assert outcome.job_id
    if kind == "failed_files":
        assert outcome.status == "success", outcome
        assert outcome.job_status == "completed", outcome
        # A record that lists no files (spec) shows no marker to take out: the service's name comes back.
        assert [MARKER.sub("", f.document) for f in outcome.failed_files] == ["empty.txt"]
        assert "completed, but 1 file(s) failed" in str(error)
    else:
        assert outcome.status == "failed", outcome
        assert outcome.job_status == "failed", outcome
        assert "failed: All 1 file(s) failed" in str(error)
    return outcome.job_id


def fault_counts(log: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(collections.Counter(r["fault"] for r in log if r["fault"]).items()))


def route_of(path: str) -> str:
    return re.sub(r"[0-9a-f-]{36}", "{id}", path.removeprefix("/api/v1"))


def processed_runs(log: list[dict[str, Any]]) -> collections.Counter[str]:
    """Run requests the service processed (no fault, or a fault after processing), per workflow."""
    return collections.Counter(
        r["path"]
        for r in log
        if r["method"] == "POST" and r["path"].endswith("/run") and (not r["fault"] or "after" in r["fault"])
    )


def test_200_cycles_through_a_flaky_service(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    settings: Any,
    inputs: Path,
    fast_backoff: list[float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulator = workflowsvc_conn
    use_connection(monkeypatch, emulator, **CONNECTION)
    emulator.configure(processing_delay=0.01)
    with WorkflowServiceHook(settings=settings) as hook:
        workflows = [str(hook.create_workflow(f"flaky-{i}", "basic").id) for i in range(CYCLES)]
    emulator.clear_requests()
    emulator.set_faults(rules=FAULTS, seed=SEED)

    started = time.monotonic()
    job_ids: list[str] = []
    modes: collections.Counter[str] = collections.Counter()
    for i, workflow_id in enumerate(workflows):
        kind, deferrable = KINDS[i % 3], (i // 3) % 2 == 1
        modes[f"{kind} {'deferrable' if deferrable else 'sync'}"] += 1
        task = RunWorkflowOperator(
            task_id=f"run_{i}",
            workflow_id=workflow_id,
            files=[str(inputs / name) for name in FILES[kind]],
            poll_interval=0.02,
            timeout=60,
            deferrable=deferrable,
            submit_attempts=SUBMIT_ATTEMPTS,
            mark_uploads=True,  # what is proven of lost answers (unmarked ones fail closed: tested elsewhere)
        )
        result, error = None, None
        try:
            result = run_task(task)
        except Exception as exc:
            error = exc
        job_ids.append(check_result(kind, result, error))
    elapsed = time.monotonic() - started

    log = emulator.requests()
    emulator.clear_faults()
    runs = processed_runs(log)
    with WorkflowServiceHook(settings=settings) as hook:
        records = [hook.list_jobs(workflow_id=w) for w in workflows]
    jobs_per_cycle = [[job.id for job in jobs] for jobs in records]
    ambiguous = [i for i, job_id in enumerate(job_ids) if job_id.startswith("ambiguous:")]
    proven = any(records_list_files(job) for jobs in records for job in jobs)
    duplicates = sum(len(jobs) - 1 for jobs in jobs_per_cycle if len(jobs) > 1)
    lost_run_answers = sum(
        1 for r in log if r["path"].endswith("/run") and r["fault"] and "after" in r["fault"]
    )
    figures.update(
        cycles=CYCLES,
        modes=dict(modes),
        requests=len(log),
        faults_injected=sum(fault_counts(log).values()),
        faults_by_kind=fault_counts(log),
        faults_by_route=dict(collections.Counter(route_of(r["path"]) for r in log if r["fault"])),
        run_requests=sum(1 for r in log if r["path"].endswith("/run")),
        run_answers_lost_after_the_job_was_created=lost_run_answers,
        jobs_created=sum(len(jobs) for jobs in jobs_per_cycle),
        duplicates=duplicates,
        failed_as_ambiguous=len(ambiguous),
        job_records_list_files=proven,
        runs_per_cycle=sorted(set(runs.values())),
        cycles_seconds=round(elapsed, 1),
    )
    unfound = [i for i in ambiguous if job_ids[i] == "ambiguous:"]
    figures.update(failed_as_ambiguous_no_job=len(unfound))
    print(figures)
    assert max(len(jobs) for jobs in jobs_per_cycle) == 1, "a cycle's workflow has several jobs"
    reported = [job_id.removeprefix("ambiguous:") for job_id in job_ids]
    assert [(jobs or [""])[0] for jobs in jobs_per_cycle] == reported, "a cycle reported another job"
    assert not (proven and len(unfound) < len(ambiguous)), (
        "a job whose record shows the marker was not adopted"
    )
    assert set(runs.values()) == {1}
    assert len(runs) == CYCLES - len(unfound)
    assert sum(fault_counts(log).values()) >= 0.15 * len(log), "the faults were not injected"
    assert lost_run_answers > 0, "no run answer was lost: the reconciliation was not exercised"


def test_dag_runs_through_a_flaky_service(
    figures: dict[str, Any],
    dag_runner: Any,
    workflowsvc_conn: Any,
    settings: Any,
    inputs: Path,
    fast_backoff: list[float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six tasks (each kind, sync and deferrable) in a real ``dag.test()`` run under the same faults."""
    emulator = workflowsvc_conn
    use_connection(monkeypatch, emulator, **CONNECTION)
    emulator.configure(processing_delay=0.02)
    with WorkflowServiceHook(settings=settings) as hook:
        workflows = {
            (kind, deferrable): str(hook.create_workflow(f"flaky-dag-{kind}-{deferrable}", "basic").id)
            for kind in KINDS
            for deferrable in (False, True)
        }
    emulator.set_faults(rules=FAULTS, seed=SEED + 1)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with DAG("reliability_flaky_service", schedule=None, start_date=start, catchup=False) as dag:
        for (kind, deferrable), workflow_id in workflows.items():
            RunWorkflowOperator(
                task_id=f"{kind}_{'deferrable' if deferrable else 'sync'}",
                workflow_id=workflow_id,
                files=[str(inputs / name) for name in FILES[kind]],
                poll_interval=0.05,
                timeout=60,
                deferrable=deferrable,
                submit_attempts=SUBMIT_ATTEMPTS,
                mark_uploads=True,
            )
    dr = dag_runner(dag)
    log = emulator.requests()
    emulator.clear_faults()
    expected = {"completed": TaskInstanceState.SUCCESS}
    ambiguous = 0
    with WorkflowServiceHook(settings=settings) as hook:
        for (kind, deferrable), workflow_id in workflows.items():
            ti = dr.get_task_instance(f"{kind}_{'deferrable' if deferrable else 'sync'}")
            summary = ti.xcom_pull(task_ids=ti.task_id)
            jobs = hook.list_jobs(workflow_id=workflow_id)
            assert len(jobs) <= 1, (ti.task_id, jobs)  # never run twice
            if summary is None:  # failed as ambiguous: no job (lost before processing), or no proof
                assert ti.state == TaskInstanceState.FAILED, ti.task_id
                assert not jobs or not records_list_files(jobs[0]), ti.task_id
                ambiguous += 1
                continue
            (job,) = jobs
            assert ti.state == expected.get(kind, TaskInstanceState.FAILED), (ti.task_id, ti.state)
            assert summary["status"] == ("failed" if kind == "failed" else "completed"), summary
            assert job.id == summary["job_id"]
    figures.update(
        cycles=len(workflows),
        requests=len(log),
        faults_injected=sum(fault_counts(log).values()),
        faults_by_kind=fault_counts(log),
        duplicates=0,
        failed_as_ambiguous=ambiguous,
        runs_per_cycle=sorted(set(processed_runs(log).values())),
    )
    assert set(processed_runs(log).values()) == {1}
