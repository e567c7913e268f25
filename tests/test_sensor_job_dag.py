"""WorkflowJobSensor in real ``dag.test()`` runs against the emulator: poke and deferrable modes, a job
started by the service's own schedule, soft_fail."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.utils.state import DagRunState, TaskInstanceState

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

pytestmark = pytest.mark.compat  # the sensor (poke, deferrable, soft_fail) on every Airflow of the matrix

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
JOB_ID = "{{ ti.xcom_pull(task_ids='run', key='job_id') }}"


def state(dr: Any, task_id: str) -> Any:
    return dr.get_task_instance(task_id).state


def xcom(dr: Any, task_id: str, key: str = "return_value") -> Any:
    return dr.get_task_instance(task_id).xcom_pull(task_ids=task_id, key=key)


def failing_run(workflow: str, tmp_path: Path) -> tuple[RunWorkflowOperator, str]:
    """A run of an empty file (a job the service fails) in the DAG defined now; its job id template."""
    (tmp_path / "bad.txt").write_text("")
    run = RunWorkflowOperator(
        task_id="run_bad", workflow_id=workflow, files=str(tmp_path / "bad.txt"), wait_for_completion=False
    )
    return run, "{{ ti.xcom_pull(task_ids='run_bad', key='job_id') }}"


def test_sensor_modes_and_soft_fail(dag_runner: Any, emulator: Any, settings: Any, tmp_path: Path) -> None:
    emulator.configure(processing_delay=0.1)
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "a.txt").write_text("some text")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)
    with DAG("wfsvc_sensors", schedule=None, start_date=START, catchup=False) as dag:
        run = RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(tmp_path / "good"), wait_for_completion=False
        )
        poke = WorkflowJobSensor(task_id="poke", job_id=JOB_ID, poke_interval=0.1, deferrable=False)
        deferred = WorkflowJobSensor(task_id="deferred", job_id=JOB_ID, poke_interval=0.1, deferrable=True)
        run >> [poke, deferred]
        bad, bad_job = failing_run(workflow, tmp_path)
        skipped = WorkflowJobSensor(task_id="skipped", job_id=bad_job, poke_interval=0.1, soft_fail=True)
        failed = WorkflowJobSensor(task_id="failed", job_id=bad_job, poke_interval=0.1, deferrable=True)
        bad >> [skipped, failed]
    dr = dag_runner(dag)
    assert state(dr, "poke") == TaskInstanceState.SUCCESS
    assert state(dr, "deferred") == TaskInstanceState.SUCCESS
    assert xcom(dr, "poke")["job_id"] == xcom(dr, "deferred")["job_id"] == xcom(dr, "run", "job_id")
    assert xcom(dr, "deferred")["status"] == "completed"
    assert state(dr, "skipped") == TaskInstanceState.SKIPPED
    assert state(dr, "failed") == TaskInstanceState.FAILED
    assert xcom(dr, "failed")["status"] == "failed"


def test_deferrable_sensor_waits_for_a_scheduled_job(dag_runner: Any, emulator: Any, settings: Any) -> None:
    """The service's own schedule starts the job; the sensor finds it (created after T) and waits."""
    with WorkflowServiceHook(settings=settings) as hook:
        source = hook.create_source(
            f"s3-{time.time_ns()}", "s3", {"remote_url": "s3://b/p", "emulator_documents": 2}
        )
        workflow = hook.create_workflow(
            f"wf-{time.time_ns()}", "basic", source_id=source.id, schedule="every 15 minutes"
        )
    after = emulator.now().isoformat()

    ended = threading.Event()

    def fire_schedule_once_the_sensor_looked() -> None:
        looked = f"workflow_id={workflow.id}"
        while not any(looked in (r["query"] or "") for r in emulator.requests(path_contains="/jobs")):
            if ended.wait(0.02):
                return
        emulator.advance_clock(15 * 60)

    thread = threading.Thread(target=fire_schedule_once_the_sensor_looked)
    with DAG("wfsvc_sensor_schedule", schedule=None, start_date=START, catchup=False) as dag:
        WorkflowJobSensor(
            task_id="wait",
            workflow_id=str(workflow.id),
            created_after="{{ params.after }}",
            poke_interval=0.2,
            timeout=timedelta(minutes=4),  # a bound for a failing test only: the job comes within seconds
            deferrable=True,
            params={"after": after},
        )
    thread.start()
    try:
        dr = dag_runner(dag)
    finally:
        ended.set()
        thread.join()
    assert dr.state == DagRunState.SUCCESS
    summary = xcom(dr, "wait")
    assert summary["status"] == "completed"
    assert summary["workflow_id"] == str(workflow.id)
    assert xcom(dr, "wait", "job_id") == summary["job_id"]


@pytest.mark.parametrize("deferrable", [False, True])
def test_execution_timeout_bounds_the_sensor_in_both_modes(
    dag_runner: Any, emulator: Any, settings: Any, tmp_path: Path, deferrable: bool
) -> None:
    """A sensor shares the wait: its execution_timeout ends a deferred wait too (issue #24). The job
    runs for hours and the sensor's own timeout is an hour: the run ending at all is the
    execution_timeout's doing."""
    emulator.configure(processing_delay=3600)
    (tmp_path / "a.txt").write_text("some text")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)
    with DAG(f"wfsvc_sensor_execution_timeout_{deferrable}", schedule=None, start_date=START) as dag:
        run = RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(tmp_path / "a.txt"), wait_for_completion=False
        )
        sensor = WorkflowJobSensor(
            task_id="sensor",
            job_id=JOB_ID,
            poke_interval=0.2,
            timeout=3600,
            execution_timeout=timedelta(seconds=3),
            deferrable=deferrable,
        )
        run >> sensor
    dr = dag_runner(dag)
    assert state(dr, "sensor") == TaskInstanceState.FAILED


def test_only_the_jobs_verdict_forbids_a_retry(
    dag_runner: Any, emulator: Any, settings: Any, tmp_path: Path
) -> None:
    """
    Issue #31, item 5: each job exists when its sensor first looks, then every read of it answers 404
    (a replica that does not have it): the wait could not observe its job, so each try fails
    retryably, in poke mode and after the trigger, and ``soft_fail`` does not skip it (2 tries of
    ``retries=1``). A failed job is the job's verdict: 1 try.
    """
    emulator.configure(processing_delay=3600)  # the jobs run until the test ends
    (tmp_path / "a.txt").write_text("some text")
    modes = {
        "poke": {"deferrable": False},
        "deferred": {"deferrable": True, "start_from_trigger": False},
        "deferred_soft": {"deferrable": True, "start_from_trigger": False, "soft_fail": True},
    }
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)
        jobs = {task_id: hook.run_workflow(workflow, files=[tmp_path / "a.txt"]) for task_id in modes}
    retried = {"retries": 1, "retry_delay": timedelta(0), "poke_interval": 0.05}
    with DAG("wfsvc_sensor_broken_wait", schedule=None, start_date=START, catchup=False) as dag:
        for task_id, mode in modes.items():
            WorkflowJobSensor(task_id=task_id, job_id=str(jobs[task_id].id), **retried, **mode)  # type: ignore[union-attr]
        bad, bad_job = failing_run(workflow, tmp_path)
        bad >> WorkflowJobSensor(task_id="verdict", job_id=bad_job, **retried)

    ended = threading.Event()
    lost = threading.Thread(target=lose_each_job_once_seen, args=(emulator, jobs.values(), ended))
    lost.start()
    emulator.configure(processing_delay=0.05)  # jobs run from now on are quick: run_bad fails at once
    try:
        dr = dag_runner(dag)
    finally:
        ended.set()
        lost.join()
    tries = {
        t: (dr.get_task_instance(t).state, dr.get_task_instance(t).try_number) for t in [*modes, "verdict"]
    }
    assert tries == {
        "poke": (TaskInstanceState.FAILED, 2),
        "deferred": (TaskInstanceState.FAILED, 2),
        "deferred_soft": (TaskInstanceState.FAILED, 2),
        "verdict": (TaskInstanceState.FAILED, 1),
    }
    assert {xcom(dr, t)["outcome"] for t in modes} == {"error"}
    assert xcom(dr, "verdict")["outcome"] == "failed"


def lose_each_job_once_seen(emulator: Any, jobs: Any, ended: threading.Event) -> None:
    """Once a sensor has read a job (its first poke, in a worker), every later read of it is a 404."""
    rules: list[dict[str, Any]] = []
    pending = {str(job.id) for job in jobs}
    while pending and not ended.is_set():
        for job_id in sorted(pending):
            if emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details"):
                pending.discard(job_id)
                rules.append({"method": "GET", "path": f"*/jobs/{job_id}*", "errors": [404]})
                emulator.set_faults(rules=rules)
        time.sleep(0.02)
