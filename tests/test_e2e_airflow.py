"""End to end on a real local Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor,
SQLite) and the emulator as a subprocess: what ``dag.test()`` cannot show.

* The local-files example DAG succeeds; its run task really deferred and the trigger ran in the
  triggerer (the trigger's own log lines, in the triggerer's log file and through the REST logs API).
* Marking the deferred task failed through the REST API makes the triggerer call the trigger's
  ``on_kill``, which cancels the job: the emulator's job is ``stopped`` and its request log holds the
  cancel POST.
* A connection stored in the metadata DB, its token rotated while the task is deferred: the trigger's
  refused poll reads it again and the wait goes on to success; ``execution_timeout`` bounds a deferred
  wait: the task fails as a timeout at it and the job is cancelled.

One deployment serves the module (~30 s to start); everything started is stopped at the end, with a
hard kill for stragglers, also when a test fails.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # ``scripts`` is not part of the installed package
    sys.path.insert(0, str(REPO_ROOT))

from scripts.local_airflow import LocalAirflow, local_stack  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(360, method="signal")]

EXAMPLE_DAG = "workflowsvc_example_local_files"
LONG_DAG = "workflowsvc_e2e_long_job"
RUN_TASK = "run_workflow"
FAST = 0.05
SLOW = 600.0  # emulator seconds per file per node: the long job never ends on its own

# The asset example: a job's asset event starts the DAG scheduled on that asset (same stack).
PRODUCER = "workflowsvc_example_asset_producer"
CONSUMER = "workflowsvc_example_asset_consumer"
ASSET_URI = "s3://example-bucket/processed"
S3_SECRET = "e2e-s3-secret-51c0"

# Long waits (issue #24, tests/e2e_dags/e2e_long_waits.py)
ROTATION_DAG = "workflowsvc_e2e_rotation"
TIMEOUT_DAG = "workflowsvc_e2e_execution_timeout"
ROTATING_CONN = "workflowsvc_rotating"
ROTATED_TOKEN = "e2e-rotated-token-7b1d"


@pytest.fixture(scope="module")
def dags_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local-files example (with its sample documents) next to the e2e DAG."""
    folder = tmp_path_factory.mktemp("e2e-dags")
    shutil.copy(REPO_ROOT / "example_dags" / "example_local_files.py", folder)
    shutil.copy(REPO_ROOT / "example_dags" / "example_asset_pipeline.py", folder)
    shutil.copytree(REPO_ROOT / "example_dags" / "sample_docs", folder / "sample_docs")
    for path in (Path(__file__).parent / "e2e_dags").iterdir():
        if path.suffix in (".py", ".txt"):
            shutil.copy(path, folder)
    return folder


@pytest.fixture(scope="module")
def stack(dags_folder: Path) -> Iterator[tuple[LocalAirflow, Any]]:
    with local_stack(
        dags_folder,
        # the platform dialect only: what real users meet; each dialect is covered by dag.test() suites
        emulator_options={"token": "e2e-token-5d1f", "api_key": "e2e-key-8a3c", "dialect": "platform"},
        connection_extra={"retry_wait": 0.2},
        env={"AIRFLOW_VAR_WORKFLOWSVC_S3_KEY_ID": "AKIAE2E", "AIRFLOW_VAR_WORKFLOWSVC_S3_SECRET": S3_SECRET},
        progress=lambda message: print(f"[e2e] {message}", flush=True),
        start_timeout=180,
        stop_timeout=30,
    ) as (airflow, emulator):
        airflow.wait_for_dag(EXAMPLE_DAG)
        airflow.wait_for_dag(LONG_DAG)
        airflow.wait_for_dag(PRODUCER)
        airflow.wait_for_dag(CONSUMER)
        airflow.wait_for_dag(ROTATION_DAG)
        airflow.wait_for_dag(TIMEOUT_DAG)
        yield airflow, emulator


def _wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _trigger_log_text(airflow: LocalAirflow, dag_id: str, run_id: str) -> str:
    return "\n".join(p.read_text() for p in airflow.trigger_log_files(dag_id, run_id, RUN_TASK))


def test_example_dag_succeeds_and_waits_in_the_triggerer(
    stack: tuple[LocalAirflow, Any], tmp_path: Path
) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=FAST)

    run_id = airflow.trigger_dag(EXAMPLE_DAG, conf={"output_dir": str(tmp_path)})
    run = airflow.wait_for_run(EXAMPLE_DAG, run_id, timeout=150)

    states = {ti["task_id"]: ti["state"] for ti in airflow.task_instances(EXAMPLE_DAG, run_id)}
    assert run["state"] == "success", states
    summary = airflow.xcom(EXAMPLE_DAG, run_id, "summarize")
    job_id = summary["job_id"]
    assert summary["status"] == "completed"
    assert [f["document"] for f in summary["failed_files"]] == ["empty.txt"]
    assert len(summary["output_paths"]) == 4
    assert all(Path(p).is_file() and Path(p).parent == tmp_path / job_id for p in summary["output_paths"])

    # The run task deferred: one try, and the triggerer wrote the trigger's log for it.
    assert airflow.task_instance(EXAMPLE_DAG, run_id, RUN_TASK)["try_number"] == 1
    trigger_files = airflow.trigger_log_files(EXAMPLE_DAG, run_id, RUN_TASK)
    assert trigger_files, "no trigger log file: the task never deferred to the triggerer"
    trigger_log = _trigger_log_text(airflow, EXAMPLE_DAG, run_id)
    assert f"Waiting for job {job_id}" in trigger_log  # WorkflowJobTrigger.run, in the triggerer
    assert "Trigger fired event" in trigger_log  # the triggerer's own record of the event
    # The REST logs endpoint merges the trigger's lines into the task's log.
    task_log = airflow.task_log(EXAMPLE_DAG, run_id, RUN_TASK)
    assert "airflow_provider_workflowsvc.triggers.job.WorkflowJobTrigger" in task_log
    assert f"Waiting for job {job_id}" in task_log

    # Job polled by the triggerer through the job endpoints, output downloaded by the worker.
    assert emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details")
    assert len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/download")) == 4


def test_marking_the_deferred_task_failed_cancels_the_job(stack: tuple[LocalAirflow, Any]) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)

    run_id = airflow.trigger_dag(LONG_DAG)
    airflow.wait_for_task_state(LONG_DAG, run_id, RUN_TASK, ["deferred"], timeout=90)
    job_id = airflow.xcom(LONG_DAG, run_id, RUN_TASK, key="job_id")
    assert job_id
    # Wait until the trigger runs in the triggerer (on_kill is only called for a running trigger).
    _wait_for(
        lambda: f"Waiting for job {job_id}" in _trigger_log_text(airflow, LONG_DAG, run_id),
        timeout=60,
        what="the trigger to start in the triggerer",
    )
    emulator.advance_clock(SLOW + 1)  # out of "scheduled": the job is now processing its file
    assert emulator_job_status(emulator, job_id) == "in progress"

    airflow.mark_task_failed(LONG_DAG, run_id, RUN_TASK)

    _wait_for(
        lambda: emulator.requests(method="POST", path_contains=f"/jobs/{job_id}/cancel"),
        timeout=45,
        what="the trigger's on_kill to send the cancel",
    )
    assert emulator_job_status(emulator, job_id) == "stopped"
    cancels = emulator.requests(method="POST", path_contains=f"/jobs/{job_id}/cancel")
    assert len(cancels) == 1
    assert cancels[0]["status"] < 300
    _wait_for(
        lambda: f"Asked the service to cancel job {job_id}" in _trigger_log_text(airflow, LONG_DAG, run_id),
        timeout=30,
        what="the trigger's cancel log line",
    )
    assert airflow.task_instance(LONG_DAG, run_id, RUN_TASK)["state"] == "failed"
    assert airflow.wait_for_run(LONG_DAG, run_id, timeout=60)["state"] == "failed"


def emulator_job_status(emulator: Any, job_id: str) -> str:
    """The job's status as the service reports it (listing spelling: ``im progress`` → in progress)."""
    import httpx

    headers = {"authorization": f"Bearer {emulator.token}", "service-api-key": emulator.api_key}
    response = httpx.get(f"{emulator.base_url}/jobs/{job_id}", headers=headers, timeout=10)
    response.raise_for_status()
    status = str(response.json()["status"]).lower().replace("_", " ")
    return "in progress" if status in ("im progress", "in progress") else status


# --------------------------------------------------------------------------------------------------
# Assets: the producer's asset event makes the *scheduler* create a run of the consumer DAG, whose
# task reads the job from the event's extra (example_dags/example_asset_pipeline.py).


def consumer_runs(airflow: LocalAirflow) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = airflow.api("GET", f"/dags/{CONSUMER}/dagRuns").get("dag_runs", [])
    return runs


def test_the_job_asset_event_triggers_the_consumer_dag(stack: tuple[LocalAirflow, Any]) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=0.05)
    assert consumer_runs(airflow) == []
    airflow.api("PATCH", f"/dags/{PRODUCER}", json={"is_paused": False})  # paused upon creation

    run_id = airflow.trigger_dag(PRODUCER)
    producer = airflow.wait_for_run(PRODUCER, run_id, timeout=150)
    assert producer["state"] == "success", airflow.task_instances(PRODUCER, run_id)
    result = airflow.xcom(PRODUCER, run_id, "run_workflow")
    assert result["status"] == "completed"
    assert result["failed_file_count"] == 1
    assert airflow.trigger_log_files(PRODUCER, run_id, "run_workflow"), "the run task did not defer"

    # Airflow's asset event, with the job in its extra
    events = airflow.api("GET", "/assets/events", params={"source_dag_id": PRODUCER})["asset_events"]
    (event,) = [e for e in events if e["source_run_id"] == run_id]
    assert event["uri"] == ASSET_URI
    expected_extra = {
        "job_id": result["job_id"],
        "workflow_id": result["workflow_id"],
        "status": "completed",
        "documents_written": 4,
        "failed_count": 1,
    }
    assert {k: event["extra"].get(k) for k in expected_extra} == expected_extra

    # the scheduler creates the consumer's run from that event; its task reads the extra
    deadline = time.monotonic() + 90
    while not (runs := consumer_runs(airflow)):
        assert time.monotonic() < deadline, "the consumer DAG was not triggered by the asset event"
        time.sleep(1)
    (consumer,) = runs
    assert consumer["run_type"] == "asset_triggered"
    finished = airflow.wait_for_run(CONSUMER, consumer["dag_run_id"], timeout=120)
    assert finished["state"] == "success", airflow.task_instances(CONSUMER, consumer["dag_run_id"])
    jobs = airflow.xcom(CONSUMER, consumer["dag_run_id"], "report_new_documents")
    assert [{k: job.get(k) for k in expected_extra} for job in jobs] == [expected_extra]
    print(
        f"[e2e] producer run {run_id}: job {result['job_id']}; asset event {event['id']} on "
        f"{event['uri']} extra {event['extra']}; consumer run {consumer['dag_run_id']} "
        f"({consumer['run_type']}) {finished['state']}, read {jobs}"
    )


# --------------------------------------------------------------------------------------------------
# Long waits (issue #24)


def _connection_body(emulator: Any, token: str) -> dict[str, Any]:
    return {
        "connection_id": ROTATING_CONN,
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": token,
        "extra": json.dumps({"api_key": emulator.api_key, "retry_wait": 0.2}),
    }


def test_a_db_connection_rotated_while_deferred_fails_no_wait(stack: tuple[LocalAirflow, Any]) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)
    airflow.api("POST", "/connections", json=_connection_body(emulator, emulator.token))
    try:
        run_id = airflow.trigger_dag(ROTATION_DAG)
        airflow.wait_for_task_state(ROTATION_DAG, run_id, RUN_TASK, ["deferred"], timeout=90)
        job_id = airflow.xcom(ROTATION_DAG, run_id, RUN_TASK, key="job_id")
        _wait_for(
            lambda: len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details")) >= 2,
            timeout=60,
            what="the trigger's first polls",
        )
        # Rotate as an operator does: the connection in Airflow gets the new token, then the old one is
        # revoked. The triggerer keeps the old settings (cached 60 s) until a poll is refused.
        airflow.api("PATCH", f"/connections/{ROTATING_CONN}", json=_connection_body(emulator, ROTATED_TOKEN))
        emulator.configure(api_token=ROTATED_TOKEN)
        rotated_at = len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details"))
        _wait_for(
            lambda: (
                [r["status"] for r in emulator.requests(path_contains=f"/jobs/{job_id}/details")][
                    rotated_at:
                ].count(200)
                >= 2
            ),
            timeout=60,
            what="polls with the rotated token",
        )
        emulator.advance_clock(4 * SLOW + 1)  # scheduled, then 3 nodes: the job completes
        run = airflow.wait_for_run(ROTATION_DAG, run_id, timeout=90)
        assert run["state"] == "success", airflow.task_instances(ROTATION_DAG, run_id)
        statuses = [r["status"] for r in emulator.requests(path_contains=f"/jobs/{job_id}/details")]
        refused = statuses[rotated_at - 1 :].count(401)
        assert refused >= 1, statuses  # the old token was really refused, and the wait survived it
        trigger_log = _trigger_log_text(airflow, ROTATION_DAG, run_id)
        assert "changed since they were read" in trigger_log
        assert ROTATED_TOKEN not in trigger_log
        print(f"[e2e] rotation: job {job_id} polls {statuses}; task success, 0 waits failed")
    finally:
        emulator.configure(api_token=None)
        airflow.api("DELETE", f"/connections/{ROTATING_CONN}")


def test_execution_timeout_bounds_a_deferred_wait(stack: tuple[LocalAirflow, Any]) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)
    run_id = airflow.trigger_dag(TIMEOUT_DAG)
    airflow.wait_for_task_state(TIMEOUT_DAG, run_id, RUN_TASK, ["deferred"], timeout=90)
    job_id = airflow.xcom(TIMEOUT_DAG, run_id, RUN_TASK, key="job_id")
    run = airflow.wait_for_run(TIMEOUT_DAG, run_id, timeout=120)
    ti = airflow.task_instance(TIMEOUT_DAG, run_id, RUN_TASK)
    assert run["state"] == "failed"
    assert ti["state"] == "failed"
    ran = (_parse_time(ti["end_date"]) - _parse_time(ti["start_date"])).total_seconds()
    assert 15 <= ran < 45, ran  # execution_timeout=15 s; the operator's own timeout is an hour
    assert emulator_job_status(emulator, job_id) == "stopped"
    assert emulator.requests(method="POST", path_contains=f"/jobs/{job_id}/cancel")
    task_log = airflow.task_log(TIMEOUT_DAG, run_id, RUN_TASK)
    assert "AirflowTaskTimeout" in task_log
    assert "execution_timeout (15 s)" in task_log
    print(f"[e2e] execution_timeout: task {ti['state']} after {ran:.1f} s; job {job_id} stopped")


def _parse_time(value: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00"))
