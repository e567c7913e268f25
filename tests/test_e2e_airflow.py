"""End to end on a real local Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor,
SQLite) and the emulator as a subprocess: what ``dag.test()`` cannot show.

* The local-files example DAG succeeds; its run task really deferred and the trigger ran in the
  triggerer (the trigger's own log lines, in the triggerer's log file and through the REST logs API).
* Marking the deferred tasks failed or success, or clearing them, through the REST API makes the
  triggerer call the triggers' ``on_kill``, which finds the task no longer deferred and cancels the
  jobs (``RunWorkflowOperator``'s and ``RunOnDemandJobOperator``'s): the emulator's jobs are
  ``stopped`` and its request log holds one cancel POST each.
* A connection stored in the metadata DB, its token rotated while the task is deferred: the trigger's
  refused poll reads it again and the wait goes on to success; ``execution_timeout`` bounds a deferred
  wait: the task fails as a timeout at it and the job is cancelled.
* Airflow's metrics on (StatsD, to a UDP socket of this test on loopback): the provider's metrics of a
  throttled deferrable run arrive from the worker and the triggerer, the watcher's from the triggerer,
  with Airflow's own from the scheduler (issue #37).
* An Airflow pool that counts deferred tasks caps the jobs in flight: four deferrable runs, two slots,
  never more than two jobs active in the service (issue #37).

One deployment serves the module (~30 s to start); everything started is stopped at the end, with a
hard kill for stragglers, also when a test fails.
"""

from __future__ import annotations

import functools
import itertools
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import events_built
from metric_receivers import StatsdReceiver

from scripts.local_airflow import LocalAirflow, local_stack, wait_for

REPO_ROOT = Path(__file__).resolve().parent.parent

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

# Event-driven scheduling (example_dags/example_job_events.py) and a sensor that starts in the triggerer.
JOB_EVENTS_DAG = "workflowsvc_example_job_events"
SENSOR_DAG = "workflowsvc_e2e_sensor_slots"

# On-demand jobs (issue #34, tests/e2e_dags/e2e_on_demand_mapped.py): one mapped task per folder.
ON_DEMAND_DAG = "workflowsvc_e2e_on_demand_mapped"

# Jobs in flight capped by a pool (issue #37, tests/e2e_dags/e2e_pool_cap.py)
POOL_DAG = "workflowsvc_e2e_pool_cap"
POOL = "workflowsvc_e2e_jobs"
POOL_TASKS = [f"run_{index}" for index in range(4)]
POOL_SLOTS = 2


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdReceiver]:
    receiver = StatsdReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


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
def stack(dags_folder: Path, statsd: StatsdReceiver) -> Iterator[tuple[LocalAirflow, Any]]:
    with local_stack(
        dags_folder,
        # the platform dialect only: what real users meet; each dialect is covered by dag.test() suites
        emulator_options={"token": "e2e-token-5d1f", "api_key": "e2e-key-8a3c", "dialect": "platform"},
        connection_extra={"retry_wait": 0.2},
        env={
            "AIRFLOW_VAR_WORKFLOWSVC_S3_KEY_ID": "AKIAE2E",
            "AIRFLOW_VAR_WORKFLOWSVC_S3_SECRET": S3_SECRET,
            # a restarted triggerer takes over the watcher of the one SIGKILLed within seconds
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
            **statsd.env(),  # every component sends Airflow's metrics, the provider's among them
        },
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
        airflow.wait_for_dag(SENSOR_DAG)
        airflow.wait_for_dag(ON_DEMAND_DAG)
        airflow.wait_for_dag(POOL_DAG)
        watch_scheduled_jobs(emulator, dags_folder)  # parsed, and the watcher started, while tests run
        yield airflow, emulator


def _trigger_log_text(airflow: LocalAirflow, dag_id: str, run_id: str, task_id: str = RUN_TASK) -> str:
    return "\n".join(p.read_text() for p in airflow.trigger_log_files(dag_id, run_id, task_id))


@pytest.mark.e2e_smoke  # the stack's proof on the 3.2 leg too (docs/decisions/project.md)
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
    assert events_built(emulator, job_id) == 1  # one event (the log's last lines may be dropped)
    # The REST logs endpoint merges the trigger's lines into the task's log.
    task_log = airflow.task_log(EXAMPLE_DAG, run_id, RUN_TASK)
    assert "airflow_provider_workflowsvc.triggers.job.WorkflowJobTrigger" in task_log
    assert f"Waiting for job {job_id}" in task_log

    # Job polled by the triggerer through the job endpoints (with each output's start, for the
    # summary's document names: issue #32), output downloaded by the worker.
    assert emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details")
    assert len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/download")) == 4 + 4


ON_DEMAND_TASK = "run_on_demand"
KILLED = {RUN_TASK: "job_id", ON_DEMAND_TASK: "job_ids"}
"""The deferred tasks of the long-job DAG, with the XCom key of their jobs."""
LEFT_BY_ACTION = {"failed": "failed", "success": "success", "clear": "scheduled"}
"""The state each user action leaves the deferred tasks in (cleared: scheduled again, held there)."""


@pytest.mark.parametrize("action", list(LEFT_BY_ACTION))
def test_a_user_ending_the_deferred_tasks_cancels_their_jobs(
    stack: tuple[LocalAirflow, Any], action: str
) -> None:
    """Marking the deferred tasks failed or success, or clearing them, makes the triggerer call each
    trigger's ``on_kill``: it finds its task no longer deferred and cancels the jobs (the run task's
    and the on-demand task's), one cancel request each; the jobs end ``stopped``."""
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)

    run_id = airflow.trigger_dag(LONG_DAG)
    jobs: dict[str, list[str]] = {}
    for task_id, key in KILLED.items():
        airflow.wait_for_task_state(LONG_DAG, run_id, task_id, ["deferred"], timeout=90)
        pushed = airflow.xcom(LONG_DAG, run_id, task_id, key=key)
        jobs[task_id] = [pushed] if isinstance(pushed, str) else list(pushed)
        # on_kill is only called for a trigger running in the triggerer
        wait_for(
            lambda task_id=task_id: "Waiting for" in _trigger_log_text(airflow, LONG_DAG, run_id, task_id),
            timeout=60,
            what=f"{task_id}'s trigger to start in the triggerer",
        )
    job_ids = [job_id for ids in jobs.values() for job_id in ids]
    emulator.advance_clock(SLOW + 1)  # out of "scheduled": the jobs now process their file
    running = {job_id: emulator_job_status(emulator, job_id) for job_id in job_ids}
    assert not set(running.values()) & {"completed", "failed", "stopped"}, running

    def cancels(job_id: str) -> list[dict[str, Any]]:
        return list(emulator.requests(method="POST", path_contains=f"/jobs/{job_id}/cancel"))

    slots = airflow.api("GET", "/pools/default_pool")["slots"]
    try:
        if action == "clear":
            # Airflow ends a cleared task's trigger once the scheduler has scheduled the task again (its
            # trigger cleanup skips a task whose state is None); without a slot the new try cannot start
            # (and defer again) before the assertions.
            _set_default_pool_slots(airflow, 0)
            airflow.api(
                "POST",
                f"/dags/{LONG_DAG}/clearTaskInstances",
                json={"dry_run": False, "dag_run_id": run_id, "task_ids": list(KILLED), "only_failed": False},
            )
        else:
            for task_id in KILLED:
                airflow.mark_task_instance(LONG_DAG, run_id, task_id, action)
        wait_for(
            lambda: all(cancels(j) for j in job_ids), timeout=60, what="each trigger's on_kill to cancel"
        )
        for task_id, ids in jobs.items():
            for job_id in ids:
                assert emulator_job_status(emulator, job_id) == "stopped", (task_id, job_id)
                assert [c["status"] < 300 for c in cancels(job_id)] == [True], (task_id, job_id)
            assert airflow.task_instance(LONG_DAG, run_id, task_id)["state"] == LEFT_BY_ACTION[action], (
                task_id
            )
    finally:
        if action == "clear":  # end the cleared run as a user would, then give the slots back
            for task_id in KILLED:
                airflow.mark_task_instance(LONG_DAG, run_id, task_id, "failed")
            _set_default_pool_slots(airflow, slots)
    finished = airflow.wait_for_run(LONG_DAG, run_id, timeout=60)["state"]
    assert finished == ("success" if action == "success" else "failed")


def _set_default_pool_slots(airflow: LocalAirflow, slots: int) -> None:
    airflow.api("PATCH", "/pools/default_pool", params={"update_mask": "slots"}, json={"slots": slots})


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


def _connection_body(emulator: Any, token: str, api_key: str) -> dict[str, Any]:
    return {
        "connection_id": ROTATING_CONN,
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": token,
        "extra": json.dumps({"api_key": api_key, "retry_wait": 0.2}),
    }


def test_a_db_connection_rotated_while_deferred_fails_no_wait(stack: tuple[LocalAirflow, Any]) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)
    airflow.api("POST", "/connections", json=_connection_body(emulator, emulator.token, emulator.api_key))
    try:
        run_id = airflow.trigger_dag(ROTATION_DAG)
        airflow.wait_for_task_state(ROTATION_DAG, run_id, RUN_TASK, ["deferred"], timeout=90)
        job_id = airflow.xcom(ROTATION_DAG, run_id, RUN_TASK, key="job_id")
        wait_for(
            lambda: len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details")) >= 2,
            timeout=60,
            what="the trigger's first polls",
        )
        # Rotate as an operator does: the connection in Airflow gets the new credential (token and API
        # key), then the old ones are revoked. The triggerer keeps the old settings (cached 60 s) until
        # a poll is refused.
        airflow.api(
            "PATCH",
            f"/connections/{ROTATING_CONN}",
            json=_connection_body(emulator, ROTATED_TOKEN, ROTATED_TOKEN),
        )
        emulator.configure(api_token=ROTATED_TOKEN)
        revoked = emulator.now()
        rotated_at = len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/details"))
        wait_for(
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
        # the old token was really refused (a status poll, or the connection's job-event feed read that
        # tells the waits), and the wait survived it
        refused = [r for r in emulator.requests() if r["status"] == 401 and _at(r) >= revoked]
        assert refused, statuses
        trigger_log = _trigger_log_text(airflow, ROTATION_DAG, run_id)
        # the re-read is logged by whoever met the refusal: the trigger, or the connection's shared
        # source (the triggerer's own log)
        logs = trigger_log + airflow.component_log("triggerer", 100_000)
        assert "changed since they were read" in logs
        assert ROTATED_TOKEN not in logs
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
    # execution_timeout=15 s ended it: the job never ends on its own, the operator's timeout is an hour
    assert ran >= 15, ran
    assert emulator_job_status(emulator, job_id) == "stopped"
    assert emulator.requests(method="POST", path_contains=f"/jobs/{job_id}/cancel")
    task_log = airflow.task_log(TIMEOUT_DAG, run_id, RUN_TASK)
    assert "AirflowTaskTimeout" in task_log
    assert "execution_timeout (15 s)" in task_log
    print(f"[e2e] execution_timeout: task {ti['state']} after {ran:.1f} s; job {job_id} stopped")


def _parse_time(value: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# A sensor on a known job starts in the triggerer: a worker runs it only to finish (issue #26).


WORKER_STARTED = "Worker startup parse complete"
"""The line the task runner writes once each time a worker starts to run a task (Airflow 3.3)."""


def worker_sessions(airflow: LocalAirflow, dag_id: str, run_id: str, task_id: str) -> list[float]:
    """
    Seconds each worker session of a task lasted, from the worker's own log (``attempt=1.log``): a
    session begins where the task runner says it started (:data:`WORKER_STARTED`), however long a
    busy machine pauses between its lines. Empty when no worker ran the task.
    """
    import json
    from datetime import datetime

    log_files = list(airflow.task_log_dir(dag_id, run_id, task_id).glob("**/attempt=1.log"))
    if not log_files:
        return []  # no worker ever ran the task (the triggerer's log is a file of its own)
    (log_file,) = log_files
    sessions: list[list[float]] = []
    started: list[bool] = []
    for line in log_file.read_text().splitlines():
        try:
            entry = json.loads(line)
            stamp = datetime.fromisoformat(entry["timestamp"]).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        begins = entry.get("event") == WORKER_STARTED
        if not sessions or (begins and started[-1]):
            sessions.append([])
            started.append(False)
        sessions[-1].append(stamp)
        started[-1] = started[-1] or begins
    return [stamps[-1] - stamps[0] for stamps in sessions]


def test_a_sensor_on_a_known_job_starts_in_the_triggerer(
    stack: tuple[LocalAirflow, Any], tmp_path: Path
) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=2.0)  # one file, three nodes: a job of ~6 s
    (tmp_path / "empty.txt").write_text("")  # the service fails an empty document: the job fails
    with service_hook(emulator) as hook:
        workflow = hook.create_workflow("e2e-sensor-slots", "basic")
        job = hook.run_workflow(
            str(workflow.id), files=[REPO_ROOT / "tests" / "e2e_dags" / "long_job_input.txt"]
        )
        failing = hook.run_workflow(str(workflow.id), files=[tmp_path / "empty.txt"])
    assert job is not None
    assert failing is not None

    run_id = airflow.trigger_dag(SENSOR_DAG, conf={"job_id": job.id})
    failed_run_id = airflow.trigger_dag(SENSOR_DAG, conf={"job_id": failing.id})
    run = airflow.wait_for_run(SENSOR_DAG, run_id, timeout=150)
    states = {ti["task_id"]: ti["state"] for ti in airflow.task_instances(SENSOR_DAG, run_id)}
    assert run["state"] == "success", states
    for task_id in ("in_triggerer", "from_worker"):
        summary = airflow.xcom(SENSOR_DAG, run_id, task_id)
        assert (summary["job_id"], summary["status"], summary["outcome"]) == (job.id, "completed", "success")
        assert summary["node_stats"]
        assert summary["failed_file_count"] == 0
        assert airflow.xcom(SENSOR_DAG, run_id, task_id, key="job_id") == job.id
        assert airflow.trigger_log_files(SENSOR_DAG, run_id, task_id), f"{task_id} never deferred"
    # started in the triggerer: the trigger rendered the templated job id, and ended the task there
    in_trigger_log = _trigger_log_text(airflow, SENSOR_DAG, run_id, "in_triggerer")
    assert f"Waiting for job {job.id}" in in_trigger_log
    assert "the task ends here, without a worker" in in_trigger_log
    direct = worker_sessions(airflow, SENSOR_DAG, run_id, "in_triggerer")
    before = worker_sessions(airflow, SENSOR_DAG, run_id, "from_worker")
    assert direct == [], direct  # no worker ever ran it
    assert len(before) == 2, before  # first poke + defer, then execute_complete
    # a failed job still resumes the task in a worker, to fail with the provider's error
    failed_run = airflow.wait_for_run(SENSOR_DAG, failed_run_id, timeout=150)
    assert failed_run["state"] == "failed"
    assert airflow.task_instance(SENSOR_DAG, failed_run_id, "in_triggerer")["state"] == "failed"
    on_failure = worker_sessions(airflow, SENSOR_DAG, failed_run_id, "in_triggerer")
    assert len(on_failure) == 1, on_failure  # execute_complete only
    assert f"Workflow Service job {failing.id} failed" in airflow.task_log(
        SENSOR_DAG, failed_run_id, "in_triggerer"
    )
    failed_summary = airflow.xcom(SENSOR_DAG, failed_run_id, "in_triggerer")
    assert (failed_summary["job_id"], failed_summary["outcome"]) == (failing.id, "failed")
    print(
        f"[e2e] worker-slot seconds per sensor task (task runner's log): started in the triggerer "
        f"{sum(direct):.2f} s ({len(direct)} sessions); first poke in a worker {sum(before):.2f} s "
        f"({len(before)} sessions: {', '.join(f'{s:.2f}' for s in before)}); job {job.id} took ~6 s; "
        f"started in the triggerer on a failed job {sum(on_failure):.2f} s ({len(on_failure)} session)"
    )


def service_hook(emulator: Any) -> Any:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    settings = ConnectionSettings(base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key)
    return WorkflowServiceHook(settings=settings)


# --------------------------------------------------------------------------------------------------
# Event-driven scheduling: the workflow's own schedule fires in the emulator (its clock); the watcher
# reports each job once, also across a SIGKILL of the triggerer (issue #26). Last: it kills the triggerer.


SCHEDULED_WORKFLOW = "e2e-scheduled-workflow"


def watch_scheduled_jobs(emulator: Any, dags_folder: Path) -> None:
    """
    Create the workflow (3 documents from an S3 source, 1 fails; no schedule yet, so that no other
    test's clock advance starts a job) and put the job-events example, watching it, in the DAGs folder.
    """
    config = {
        "remote_url": "s3://e2e-events/in/",
        "key": "AKIAE2E",
        "secret": S3_SECRET,
        "emulator_documents": 3,
        "emulator_failed_documents": 1,
    }
    with service_hook(emulator) as hook:
        source = hook.create_source("e2e-scheduled-source", "s3", config)
        workflow = hook.create_workflow(SCHEDULED_WORKFLOW, "basic", source_id=str(source.id))
    example = (REPO_ROOT / "example_dags" / "example_job_events.py").read_text()
    example = example.replace('"6f1c3a52-6a4e-4c8e-9d0b-2f7e1c9a5b10"', repr(str(workflow.id)))
    example = example.replace("POLL_INTERVAL = 60", "POLL_INTERVAL = 2")
    (dags_folder / "example_job_events.py").write_text(example)


def reported_jobs(airflow: LocalAirflow) -> list[str]:
    """The job of every payload the consumer DAG's runs read (one entry per asset event consumed)."""
    runs = airflow.api("GET", f"/dags/{JOB_EVENTS_DAG}/dagRuns").get("dag_runs", [])
    jobs: list[str] = []
    for run in runs:
        if run["state"] != "success":
            continue
        jobs.extend(job["job_id"] for job in airflow.xcom(JOB_EVENTS_DAG, run["dag_run_id"], "report_jobs"))
    return jobs


def asset_events_per_job(airflow: LocalAirflow) -> dict[str, int]:
    events = airflow.api("GET", "/assets/events", params={"limit": 100})["asset_events"]
    counts: dict[str, int] = {}
    for event in events:
        payload = (event.get("extra") or {}).get("payload") or {}
        if "job_id" in payload:
            counts[payload["job_id"]] = counts.get(payload["job_id"], 0) + 1
    return counts


def test_scheduled_jobs_run_the_consumer_once_each_across_a_triggerer_kill(
    stack: tuple[LocalAirflow, Any], statsd: StatsdReceiver
) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=0.05)
    now = emulator.now()  # to half past the hour: each advance of an hour then starts exactly one job
    emulator.advance_clock((1800 - (now.minute * 60 + now.second)) % 3600)
    with service_hook(emulator) as hook:
        (workflow,) = [w for w in hook.list_workflows() if w.name == SCHEDULED_WORKFLOW]
        workflow_id = str(workflow.id)
        hook.update_workflow(workflow_id, schedule="every hour")  # from now on, the service runs it
    airflow.wait_for_dag(JOB_EVENTS_DAG)
    wait_for(
        lambda: f"Watching workflow {workflow_id} from now on" in airflow.component_log("triggerer", 100_000),
        timeout=90,
        what="the watcher to start in the triggerer",
    )
    time.sleep(1)  # the starting cursor is saved right after that line

    emulator.advance_clock(3600)  # the workflow's schedule fires: job 1
    wait_for(lambda: len(reported_jobs(airflow)) == 1, timeout=90, what="the consumer's run for job 1")
    time.sleep(6)  # the cursor is saved 5 s after an event: the kill comes between two jobs

    airflow.kill_component("triggerer")
    emulator.advance_clock(3600)  # job 2 runs and ends while no triggerer is up
    time.sleep(2)
    airflow.start_component("triggerer", ("triggerer", "--skip-serve-logs"))
    wait_for(
        lambda: len(reported_jobs(airflow)) == 2, timeout=120, what="the run for job 2, after the restart"
    )
    time.sleep(8)
    # Job 3 after the restart. (Not two jobs in one listing: their events, milliseconds apart, can meet
    # Airflow's own race, where the second event joins the queue row the scheduler is consuming and no
    # run takes it; each still has its one asset event.)
    emulator.advance_clock(3600)
    wait_for(lambda: len(reported_jobs(airflow)) == 3, timeout=90, what="the run for job 3")
    mark = max(_feed_reads(emulator))
    wait_for(  # a job reported twice would be by then: each read is a chance to report it again
        lambda: sum(at > mark for at in _feed_reads(emulator)) >= 3,
        timeout=90,
        what="3 more reads of the feed",
    )
    listed = {job["id"] for job in emulator_jobs(emulator, workflow_id)}
    reported = reported_jobs(airflow)
    per_job = asset_events_per_job(airflow)
    assert len(listed) == 3
    assert sorted(reported) == sorted(listed), (reported, listed)  # each job's run exactly once
    assert per_job == dict.fromkeys(listed, 1)  # one asset event per job
    runs = airflow.api("GET", f"/dags/{JOB_EVENTS_DAG}/dagRuns")["dag_runs"]
    assert {run["run_type"] for run in runs} == {"asset_triggered"}
    print(f"[e2e] job events: {len(listed)} jobs, asset events per job {per_job}, {len(runs)} consumer runs")
    # the watcher's metrics, from the triggerer: its listings, one event per job, the lag of each
    tags = {"workflow": workflow_id, "conn_id": "workflowsvc_default"}
    assert statsd.wait_for("airflow.workflowsvc.watcher.listings", **tags)
    assert statsd.wait_for("airflow.workflowsvc.watcher.events", at_least=3, **tags)
    lags = statsd.wait_for("airflow.workflowsvc.watcher.lag", **tags)
    assert {m.kind for m in lags} == {"ms"}
    print(f"[e2e] watcher metrics received, e.g. {lags[0].source}")


def _at(request: dict[str, Any]) -> Any:
    """The emulator time of a logged request."""
    from datetime import datetime

    return datetime.fromisoformat(request["time"])


def _feed_reads(emulator: Any) -> list[Any]:
    """The emulator times of the reads of the job-event feed (from its request log)."""
    return [_at(r) for r in emulator.requests(method="GET", path_contains="/notifications")]


def emulator_jobs(emulator: Any, workflow_id: str) -> list[dict[str, Any]]:
    import httpx

    headers = {"authorization": f"Bearer {emulator.token}", "service-api-key": emulator.api_key}
    response = httpx.get(
        f"{emulator.base_url}/jobs/", params={"workflow_id": workflow_id}, headers=headers, timeout=10
    )
    response.raise_for_status()
    jobs: list[dict[str, Any]] = response.json()
    return jobs


# On-demand jobs: a mapped run of several batches (issue #34)


def _log_tails(airflow: LocalAirflow, dag_id: str, run_id: str, task_id: str, chars: int = 2500) -> str:
    """The end of each log file of a task (every map index and try), to say why it failed."""
    folder = airflow.task_log_dir(dag_id, run_id, task_id)
    files = sorted(folder.rglob("*.log")) if folder.exists() else []
    return "\n".join(f"--- {path.relative_to(folder)}\n{path.read_text()[-chars:]}" for path in files)


def _mapped(airflow: LocalAirflow, dag_id: str, run_id: str, task_id: str, index: int) -> dict[str, Any]:
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{index}"
    body: dict[str, Any] = airflow.api("GET", path)
    return body


def _mapped_xcom(airflow: LocalAirflow, dag_id: str, run_id: str, task_id: str, index: int) -> Any:
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
    value = airflow.api("GET", path, params={"map_index": index}).get("value")
    return json.loads(value) if isinstance(value, str) else value


def _deferrals_handled(airflow: LocalAirflow, run_id: str, indexes: range, within: float = 120) -> None:
    """
    Wait until the scheduler has handled the end of each mapped ``parse`` task's deferring process (its
    executor event, read while the task is deferred). Airflow fails a task whose resumed try is already
    running when that event is read late ("task state changed externally"): on a busy machine, jobs that
    end at once let the trigger resume the task first.
    """
    log = airflow.airflow_home / "components" / "scheduler.log"
    deadline = time.monotonic() + within
    while True:
        text = log.read_text() if log.exists() else ""
        handled = {
            index
            for index in indexes
            for line in text.splitlines()
            if "TaskInstance Finished" in line
            and f"run_id={run_id}," in line
            and "task_id=parse," in line
            and f"map_index={index}," in line
            and "state=deferred" in line
        }
        if handled == set(indexes):
            return
        assert time.monotonic() < deadline, f"the scheduler handled the deferrals of {sorted(handled)} only"
        time.sleep(0.5)


def test_a_mapped_on_demand_run_of_several_batches(stack: tuple[LocalAirflow, Any], tmp_path: Path) -> None:
    """Two folders, one mapped task each, each folder in several jobs: launches paced across both tasks
    (the account's launch gap), every job waited for in one deferral per task, each document once."""
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)  # the jobs wait for the clock: they end when both tasks wait
    sizes = {"a": 7, "b": 5}
    for folder, count in sizes.items():
        (tmp_path / folder).mkdir()
        for i in range(count):
            (tmp_path / folder / f"{folder}{i}.txt").write_text(f"Title {folder}{i}\n\nText of {folder}{i}.")
    emulator.clear_requests()
    conf = {"folders": [str(tmp_path / f) for f in sizes], "output_dir": str(tmp_path / "out")}

    run_id = airflow.trigger_dag(ON_DEMAND_DAG, conf=conf)
    _deferrals_handled(airflow, run_id, range(len(sizes)))
    emulator.advance_clock(10 * SLOW)  # scheduled, then at most 3 files through one node: every job ends
    run = airflow.wait_for_run(ON_DEMAND_DAG, run_id, timeout=240)

    states = {
        (ti["task_id"], ti["map_index"]): ti["state"] for ti in airflow.task_instances(ON_DEMAND_DAG, run_id)
    }
    if run["state"] != "success":
        print(_log_tails(airflow, ON_DEMAND_DAG, run_id, "parse", chars=6000))
        print(airflow.component_log("scheduler", 300))
    assert run["state"] == "success", states
    counts = airflow.xcom(ON_DEMAND_DAG, run_id, "count_elements")
    assert sorted(counts) == sorted(f"{f}{i}.txt" for f, n in sizes.items() for i in range(n))
    assert all(n >= 1 for n in counts.values())
    launched: list[list[str]] = []
    for index, count in enumerate(sizes.values()):
        summary = _mapped_xcom(airflow, ON_DEMAND_DAG, run_id, "parse", index)
        assert summary["completed_count"] == count
        jobs = summary["jobs"]
        assert len(jobs) == -(-count // 3)  # jobs of at most 3 files
        launched += [job["documents"] for job in jobs]
        assert _mapped(airflow, ON_DEMAND_DAG, run_id, "parse", index)["try_number"] == 1
        waits = [
            p.read_text()
            for p in airflow.trigger_log_files(ON_DEMAND_DAG, run_id, "parse")
            if f"map_index={index}" in str(p)
        ]
        assert any(f"Waiting for {len(jobs)} job(s)" in text for text in waits), (
            "not one deferral for all its jobs"
        )
    names = [name for documents in launched for name in documents]
    assert sorted(names) == sorted(set(names)) == sorted(counts)  # every document once
    accepted = [
        r for r in emulator.requests(method="POST") if r["path"] == "/api/v1/jobs/" and r["status"] == 200
    ]
    refused = [
        r for r in emulator.requests(method="POST") if r["path"] == "/api/v1/jobs/" and r["status"] == 429
    ]
    assert len(accepted) == len(launched)
    times = sorted(_parse_time(r["time"]).timestamp() for r in accepted)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 1.0, gaps  # the account's gap held across both tasks
    print(
        f"[e2e] mapped on-demand run: {len(accepted)} jobs launched by 2 mapped tasks, smallest gap "
        f"{min(gaps):.2f} s, {len(refused)} launch(es) refused with 429 and sent again after Retry-After"
    )


# --------------------------------------------------------------------------------------------------
# Metrics through Airflow's own pipeline (issue #37): every component of the stack sends StatsD to the
# module's receiver.


def test_a_throttled_deferrable_run_sends_its_metrics_from_worker_and_triggerer(
    stack: tuple[LocalAirflow, Any], statsd: StatsdReceiver, tmp_path: Path
) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=FAST)
    # the run is refused once with 429 (Retry-After 0.2 s): the task sends it again after the pause
    emulator.set_faults(
        method="POST", path_regex=r".*/workflows/[^/]+/run$", errors=[429], count=1, retry_after=0.2
    )
    try:
        run_id = airflow.trigger_dag(EXAMPLE_DAG, conf={"output_dir": str(tmp_path)})
        run = airflow.wait_for_run(EXAMPLE_DAG, run_id, timeout=150)
    finally:
        emulator.clear_faults()
    assert run["state"] == "success", airflow.task_instances(EXAMPLE_DAG, run_id)
    refused = [
        r for r in emulator.requests(method="POST") if r["path"].endswith("/run") and r["status"] == 429
    ]
    assert len(refused) == 1
    conn = "workflowsvc_default"
    assert airflow.trigger_log_files(EXAMPLE_DAG, run_id, RUN_TASK), "the run task did not defer"

    # the worker: the run refused once, sent again after the pause Retry-After asked for, answered 2xx
    run_call = {"operation": "run_workflow", "conn_id": conn}
    assert statsd.wait_for("airflow.workflowsvc.request.throttled", **run_call)
    assert statsd.wait_for("airflow.workflowsvc.request.retried", reason="429", **run_call)
    pauses = statsd.wait_for("airflow.workflowsvc.request.retry_after", **run_call)
    assert {p.kind for p in pauses} == {"ms"}
    assert any(p.value >= 200 for p in pauses), pauses
    assert statsd.wait_for("airflow.workflowsvc.request.2xx", **run_call)
    # the triggerer: the deferred wait's polls (only a wait sends get_job_details; every wait of this
    # stack's DAGs is deferred)
    assert statsd.wait_for("airflow.workflowsvc.request.2xx", operation="get_job_details", conn_id=conn)
    # the worker again, resumed: how the wait ended (the example's empty.txt fails) and its times
    ended = statsd.wait_for("airflow.workflowsvc.job.completed_with_failed_files", conn_id=conn)
    workflow_tag = ended[-1].tags["workflow"]
    assert statsd.wait_for("airflow.workflowsvc.job.failed_documents", workflow=workflow_tag, conn_id=conn)
    assert statsd.wait_for("airflow.workflowsvc.job.wait_time", workflow=workflow_tag, conn_id=conn)
    assert statsd.wait_for("airflow.workflowsvc.job.run_time", workflow=workflow_tag, conn_id=conn)
    # ... as the task's metrics: tagged with its DAG and task, and under a name that holds them (plain StatsD)
    task = {"dag_id": EXAMPLE_DAG, "task_id": RUN_TASK}
    assert statsd.wait_for("airflow.workflowsvc.job.failed_documents", workflow=workflow_tag, **task)
    assert statsd.wait_for(f"airflow.workflowsvc.job.failed_documents.{EXAMPLE_DAG}.{RUN_TASK}", conn_id=conn)
    # Airflow's own, from the scheduler and the triggerer: the same [metrics] reached every component
    assert statsd.wait_for("airflow.scheduler_heartbeat")
    assert statsd.wait_for("airflow.triggerer_heartbeat")
    ours = sorted({line for line in statsd.lines if line.startswith("airflow.workflowsvc.")})
    print(f"[e2e] StatsD received {len(statsd.lines)} lines, {len(ours)} distinct of the provider's:")
    for line in ours:
        print(f"[e2e]   {line}")


# --------------------------------------------------------------------------------------------------
# Jobs in flight capped by an Airflow pool that counts deferred tasks (issue #37; the recipe in
# docs/provider/operators/run-workflow.rst)


def _pool(airflow: LocalAirflow) -> dict[str, Any]:
    body: dict[str, Any] = airflow.api("GET", f"/pools/{POOL}")
    return body


def _states(airflow: LocalAirflow, run_id: str) -> dict[str, str]:
    tis = airflow.task_instances(POOL_DAG, run_id)
    return {ti["task_id"]: ti["state"] for ti in tis if ti["task_id"] in POOL_TASKS}


def _pool_at_rest(airflow: LocalAirflow, emulator: Any, run_id: str) -> dict[str, Any] | None:
    """
    The run at rest, or None while it moves: every task has ended, or every job the service runs has
    its task deferred and nothing else can start (the pool is full, or no task is left to start). Jobs
    end only when the test moves the emulator's clock, so a job started beyond the cap would still be
    running here: each rest is where the cap is checked.
    """
    states = _states(airflow, run_id)
    try:
        workflow_id = airflow.xcom(POOL_DAG, run_id, "create_workflow")
    except Exception:  # the workflow task has not pushed it yet
        return None
    if not workflow_id:
        return None
    jobs = emulator_jobs(emulator, workflow_id)
    active = [j["id"] for j in jobs if emulator_job_status(emulator, j["id"]) in ("scheduled", "in progress")]
    rest = {"states": states, "active": active, "jobs": jobs}
    if len(states) == len(POOL_TASKS) and set(states.values()) == {"success"}:
        return rest
    deferred = list(states.values()).count("deferred")
    others = [state for state in states.values() if state not in ("success", "deferred")]
    if not active or len(active) != deferred or (deferred < POOL_SLOTS and others):
        return None
    return rest


def test_a_pool_counting_deferred_tasks_caps_the_jobs_in_flight(stack: tuple[LocalAirflow, Any]) -> None:
    airflow, emulator = stack
    emulator.configure(processing_delay=SLOW)  # a job ends only when the test moves the clock
    emulator.clear_requests()
    body = {"name": POOL, "slots": POOL_SLOTS, "include_deferred": True, "description": "e2e: jobs in flight"}
    airflow.api("POST", "/pools", json=body)
    try:
        run_id = airflow.trigger_dag(POOL_DAG)
        rounds: list[list[str]] = []
        # Each rest: the jobs in flight, never more than the slots, each sent by one run; then the test
        # ends them and the run moves on (a task finishing needs a slot again; one Airflow failed on
        # resuming retries with its stored job and sends nothing more). Until every task has succeeded.
        while True:
            try:
                rest = wait_for(functools.partial(_pool_at_rest, airflow, emulator, run_id), 240, "a rest")
            except AssertionError as exc:
                states = _states(airflow, run_id)
                failed = [t for t, state in states.items() if state == "failed"]
                logs = "\n".join(_log_tails(airflow, POOL_DAG, run_id, t) for t in failed)
                print(airflow.component_log("scheduler", 300))
                raise AssertionError(f"{exc}: rounds {rounds}; {states}\n{logs}") from exc
            runs_sent = [r for r in emulator.requests(method="POST") if r["path"].endswith("/run")]
            assert len(runs_sent) == len(rest["jobs"]), rest  # one job per run sent, none sent twice
            if not rest["active"]:
                break
            assert len(rest["active"]) <= POOL_SLOTS, rest  # never more jobs in flight than slots
            pool = _pool(airflow)
            assert pool["deferred_slots"] == len(rest["active"]), pool
            rounds.append(rest["active"])
            emulator.advance_clock(4 * SLOW + 1)  # these jobs end: their tasks resume and finish
        assert max(map(len, rounds)) == POOL_SLOTS, rounds  # the cap was reached: it is what held them
        run = airflow.wait_for_run(POOL_DAG, run_id, timeout=150)
        assert run["state"] == "success", _states(airflow, run_id)
        tries = {ti["task_id"]: ti.get("try_number") for ti in airflow.task_instances(POOL_DAG, run_id)}
        statuses = {j["id"]: emulator_job_status(emulator, j["id"]) for j in rest["jobs"]}
        completed = [job for job, status in statuses.items() if status == "completed"]
        retried = sum(int(tries[task]) - 1 for task in POOL_TASKS)
        # One job completed per task. A further job only where Airflow failed a try and the job was stopped
        # (a deferred task marked failed cancels its job; its retry runs the workflow again, by design):
        # never two jobs of one task that could both deliver.
        ended = [job for job, status in statuses.items() if status in ("stopped", "failed")]
        extra = len(statuses) - len(completed)
        if len(completed) != len(POOL_TASKS) or extra > retried or extra != len(ended):
            logs = "\n".join(_log_tails(airflow, POOL_DAG, run_id, t, chars=12000) for t in POOL_TASKS)
            posts = [(r.get("time"), r["path"]) for r in emulator.requests(method="POST")]
            scheduler = airflow.component_log("scheduler", 400)
            pytest.fail(f"jobs {statuses}; tries {tries}; posts {posts}\n{logs}\n{scheduler}")  # whole
        if extra:
            print(f"[e2e] Airflow failed {retried} try(s); a retry ran anew after its job ended: {statuses}")
        print(
            f"[e2e] pool of {POOL_SLOTS} slots (include_deferred): {len(POOL_TASKS)} runs, "
            f"jobs in flight by rest {rounds}"
        )
    finally:
        airflow.api("DELETE", f"/pools/{POOL}")
