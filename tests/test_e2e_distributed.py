"""End to end on a distributed Airflow: PostgreSQL, CeleryExecutor with Redis, one Celery worker, two
triggerers (``scripts/local_airflow.py``'s distributed shape) and the emulator as a subprocess.

* Triggerer failover: 20 deferred ``RunWorkflowOperator`` waits on jobs of 2 workflows (10 each, as a
  mapped task's) spread over both triggerers, whose waits on one workflow share one status poll; one
  triggerer gets SIGKILL mid-wait (the jobs run until the test moves the emulator's clock); Airflow
  hands its triggers to the other, which lists both workflows for them; every task succeeds with its
  own job (one job per task in the emulator, one run request each), the same trigger, job id and
  absolute deadline as before the kill, one try, and one event each: one read of its job's failed
  files, which a trigger makes once, to build the event it fires (the emulator's request log, not
  the trigger logs, whose last lines a busy triggerer may not write).
* A paused triggerer cancels no job: one triggerer gets SIGSTOP (a GC pause, a frozen container)
  until Airflow hands its 10 triggers to the other, then SIGCONT; the woken triggerer ends the triggers
  it lost and Airflow 3.3.0 to 3.3.2 run their ``on_kill`` as for a user's mark: the tasks are still
  deferred, so no cancel request reaches the emulator and every task succeeds with its own job, one try.
* Worker crash: the Celery worker's process group gets SIGKILL while a durable, non-deferrable task
  waits for its job; a new worker runs the retry, which reattaches to the stored job (Airflow 3.3
  durable execution): one job in the emulator, one run request.
* No shared disk: every run reads its input from a bucket (moto's S3 server on loopback, an Airflow
  ``aws`` connection), and the example pipeline writes its outputs there.

Figures (triggers per triggerer, failover time, jobs per task, duplicates) are printed with ``[dist]``.
One deployment serves the module; everything started is stopped by PID at the end, also on failure.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import events_built

from scripts.local_airflow import DistributedAirflow, local_stack
from scripts.s3_server import S3Server, running_s3_server

pytestmark = [
    pytest.mark.e2e_distributed,
    pytest.mark.airflow_min("3.3", reason="the worker-crash retry reattaches through durable execution"),
    pytest.mark.timeout(600, method="signal"),
]

FANOUT_DAG = "workflowsvc_e2e_fanout"
DURABLE_DAG = "workflowsvc_e2e_durable"
DURABLE_TASK = "run_in_worker"
TASKS = 20
WORKFLOWS = 2
"""The tasks' jobs belong to this many workflows (``TASKS / WORKFLOWS`` each): the waits share polls."""
SLOW = 3600.0  # emulator seconds per file per node (the most it takes): jobs run until the clock moves
TRIGGERERS = ("triggerer-1", "triggerer-2")
POLL_INTERVAL = 2.0
"""The fan-out tasks' ``poll_interval`` (e2e_dags/distributed/e2e_fanout.py)."""
REPO_ROOT = Path(__file__).resolve().parent.parent
BUCKET = "dist-inputs"
"""The bucket of every input and output (``s3://dist_s3@dist-inputs``: e2e_dags/distributed/)."""
S3_CONN = "dist_s3"
EXAMPLE_DAG = "workflowsvc_example_local_files"


def _say(message: str) -> None:
    print(f"[dist] {message}", flush=True)


@pytest.fixture(scope="module")
def dags_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dist-dags")
    for path in (Path(__file__).parent / "e2e_dags" / "distributed").iterdir():
        if path.suffix == ".py":
            shutil.copy(path, folder)
    shutil.copy(REPO_ROOT / "example_dags" / "example_local_files.py", folder)
    return folder


@pytest.fixture(scope="module")
def store() -> Iterator[S3Server]:
    """The S3 server every worker reads its inputs from (and the example pipeline writes into)."""
    with running_s3_server() as s3:
        inputs = Path(__file__).parent / "e2e_dags" / "distributed"
        documents = {"input.txt": (inputs / "input.txt").read_bytes()}
        for doc in sorted((REPO_ROOT / "example_dags" / "sample_docs").iterdir()):
            documents[f"sample_docs/{doc.name}"] = doc.read_bytes()
        s3.put_tree(BUCKET, documents)
        yield s3


@pytest.fixture(scope="module")
def stack(dags_folder: Path, store: S3Server) -> Iterator[tuple[DistributedAirflow, Any]]:
    with local_stack(
        dags_folder,
        env=store.connection_env(S3_CONN),
        distributed=True,
        # the platform dialect only, as the single-triggerer e2e test: what real users meet
        emulator_options={
            "token": "dist-token-2c7e",
            "api_key": "dist-key-9b41",
            "dialect": "platform",
            "processing_delay": SLOW,
        },
        connection_extra={"retry_wait": 0.2},
        progress=_say,
        start_timeout=300,
        stop_timeout=30,
    ) as (airflow, emulator):
        assert isinstance(airflow, DistributedAirflow)
        airflow.wait_for_dag(FANOUT_DAG, timeout=120)
        airflow.wait_for_dag(DURABLE_DAG, timeout=60)
        airflow.wait_for_dag(EXAMPLE_DAG, timeout=60)
        yield airflow, emulator


def _wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _create_workflows(emulator: Any, count: int, prefix: str) -> list[str]:
    with emulator.api_client() as api:
        ids = []
        for n in range(count):
            response = api.post("/workflows/", json={"name": f"{prefix}-{n:02d}", "workflow_type": "basic"})
            assert response.status_code == 200, response.text
            ids.append(str(response.json()["id"]))
        return ids


def _jobs_of(emulator: Any, workflow_id: str) -> list[str]:
    """The ids of every job of ``workflow_id``, from the emulator's own job listing."""
    with emulator.api_client() as api:
        response = api.get("/jobs", params={"workflow_id": workflow_id})
        response.raise_for_status()
        return [str(job["id"]) for job in response.json()]


def _job_status(emulator: Any, job_id: str) -> str:
    with emulator.api_client() as api:
        response = api.get(f"/jobs/{job_id}")
        response.raise_for_status()
        return str(response.json()["status"]).lower()


def _run_requests(emulator: Any, workflow_id: str) -> int:
    """Run requests the emulator received for ``workflow_id`` (its request log)."""
    return len(emulator.requests(method="POST", path_contains=f"/workflows/{workflow_id}/run"))


def _polls(emulator: Any, job_id: str) -> int:
    return len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}"))


def _listings(emulator: Any, workflow_id: str) -> int:
    """Reads of the connection's source (the feed, else the account's active-jobs listing)."""
    listed = emulator.requests(method="GET")
    return sum(1 for r in listed if r["path"].endswith("/notifications") or "status=" in (r["query"] or ""))


def _fan_out(
    airflow: DistributedAirflow, emulator: Any, prefix: str
) -> tuple[str, dict[str, str], dict[str, dict[str, Any]]]:
    """
    Run the fan-out DAG, its ``TASKS`` waits spread half and half over the two triggerers; return the
    run id, each task's workflow and each deferred task's trigger (``deferred_tasks``).
    """
    shared_by = _create_workflows(emulator, WORKFLOWS, prefix)
    task_ids = [f"run_{n:02d}" for n in range(TASKS)]
    workflow_of = {task_id: shared_by[n % WORKFLOWS] for n, task_id in enumerate(task_ids)}
    victim, survivor = TRIGGERERS
    # A spread over both triggerers that does not depend on which one looks first: the victim takes
    # at most half (--capacity) while it runs alone; the survivor starts afterwards and takes the rest
    # (with the default capacity, enough to take over the victim's half too).
    for name in TRIGGERERS:
        if name in [c.name for c in airflow.components]:
            airflow.kill_component(name)
    airflow.start_component(victim, ("triggerer", "--skip-serve-logs", "--capacity", str(TASKS // 2)))

    run_id = airflow.trigger_dag(FANOUT_DAG, conf={"workflows": [workflow_of[t] for t in task_ids]})

    def half_held() -> bool:
        deferred = airflow.deferred_tasks(FANOUT_DAG, run_id)
        return (
            len(deferred) == TASKS and sum(d["triggerer"] == victim for d in deferred.values()) == TASKS // 2
        )

    _wait_for(half_held, timeout=240, what=f"{TASKS} tasks deferred, {TASKS // 2} held by {victim}")
    airflow.start_component(survivor, ("triggerer", "--skip-serve-logs"))

    def all_held() -> dict[str, dict[str, Any]] | None:
        deferred = airflow.deferred_tasks(FANOUT_DAG, run_id)
        if len(deferred) == TASKS and all(d["triggerer"] in TRIGGERERS for d in deferred.values()):
            return deferred
        return None

    before = _wait_for(all_held, timeout=240, what=f"{TASKS} tasks deferred and held by a triggerer")
    return run_id, workflow_of, before


def _held_by(airflow: DistributedAirflow, run_id: str, holder: str) -> dict[str, dict[str, Any]] | None:
    """Every fan-out task's trigger once ``holder`` holds all of them, else None."""
    deferred = airflow.deferred_tasks(FANOUT_DAG, run_id)
    if len(deferred) == TASKS and all(d["triggerer"] == holder for d in deferred.values()):
        return deferred
    return None


def _assert_each_task_ran_its_own_job(
    airflow: DistributedAirflow,
    emulator: Any,
    run_id: str,
    workflow_of: dict[str, str],
    before: dict[str, dict[str, Any]],
) -> dict[str, int]:
    """Assert the fan-out run succeeded, every task with its own trigger's job, in one try and one job
    per task; return the events built per task."""
    run = airflow.wait_for_run(FANOUT_DAG, run_id, timeout=180)
    tis = {ti["task_id"]: ti for ti in airflow.task_instances(FANOUT_DAG, run_id)}
    assert run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    fired = {}
    for task_id in workflow_of:
        job_id = before[task_id]["kwargs"]["job_id"]
        summary = airflow.xcom(FANOUT_DAG, run_id, task_id)
        assert summary["job_id"] == job_id, task_id  # each task reports its own trigger's job
        assert summary["status"] == "completed", task_id
        assert airflow.xcom(FANOUT_DAG, run_id, task_id, key="job_id") == job_id, task_id
        assert tis[task_id]["state"] == "success", task_id
        assert tis[task_id]["try_number"] == 1, task_id
        fired[task_id] = events_built(emulator, job_id)
    for workflow_id in set(workflow_of.values()):  # one job per task: the triggers' jobs, one run each
        mine = sorted(before[t]["kwargs"]["job_id"] for t, w in workflow_of.items() if w == workflow_id)
        assert sorted(_jobs_of(emulator, workflow_id)) == mine, workflow_id
        assert len(set(mine)) == TASKS // WORKFLOWS
        assert _run_requests(emulator, workflow_id) == TASKS // WORKFLOWS, workflow_id
    return fired


def test_a_killed_triggerers_waits_finish_on_the_other_one(stack: tuple[DistributedAirflow, Any]) -> None:
    airflow, emulator = stack
    started = time.monotonic()
    emulator.configure(processing_delay=SLOW)
    victim, survivor = TRIGGERERS
    run_id, workflow_of, before = _fan_out(airflow, emulator, "fanout")
    task_ids, shared_by = list(workflow_of), sorted(set(workflow_of.values()))
    # The waits share their workflow's status poll: each triggerer holds waits on both workflows.
    _wait_for(lambda: all(_listings(emulator, w) for w in shared_by), timeout=240, what="shared status polls")
    held = Counter(d["triggerer"] for d in before.values())
    _say(
        f"triggers per triggerer before the kill: {dict(held)} "
        f"(all deferred after {time.monotonic() - started:.0f} s)"
    )
    assert set(held) == set(TRIGGERERS), f"the triggers were not spread over both triggerers: {dict(held)}"
    assert all(d["kwargs"]["workflow_id"] == workflow_of[t] for t, d in before.items())

    moved = sorted(t for t, d in before.items() if d["triggerer"] == victim)
    killed_at = time.monotonic()
    airflow.kill_component(victim)  # SIGKILL to its process group, waits until no process is left
    assert victim not in [c.name for c in airflow.components]

    after = _wait_for(
        lambda: _held_by(airflow, run_id, survivor),
        timeout=240,
        what=f"{survivor} to take over {victim}'s triggers",
    )
    reassigned_s = time.monotonic() - killed_at
    # Running elsewhere: the survivor, which now holds ten waits on each workflow, lists both for them
    # (each moved trigger's own event, below, shows it ran there: the victim is gone by then).
    listed = {w: _listings(emulator, w) for w in shared_by}
    _wait_for(
        lambda: all(_listings(emulator, w) >= listed[w] + 2 for w in shared_by),
        timeout=240,
        what=f"{survivor} to list both workflows",
    )
    steady_from, gets_from = time.monotonic(), len(emulator.requests(method="GET", path_contains="/jobs"))
    time.sleep(10.0)
    gets = len(emulator.requests(method="GET", path_contains="/jobs")) - gets_from
    per_wait = gets / TASKS / ((time.monotonic() - steady_from) / POLL_INTERVAL)
    _say(
        f"killed {victim} holding {len(moved)} triggers: reassigned to {survivor} "
        f"after {reassigned_s:.1f} s; then {gets} status "
        f"requests in 10 s for {TASKS} waits on {WORKFLOWS} workflows: {per_wait:.2f} per wait per interval"
    )
    # Sharing: per connection and interval, one read of the source (a listing of two statuses while the
    # jobs are scheduled) and a canary every CANARY_EVERY (2) reads. Polling each job: 1.0.
    assert per_wait < 0.8, f"the waits did not share their status polls: {per_wait:.2f} requests each"
    for task_id in task_ids:  # the same trigger row moved: same job, same absolute deadline
        assert after[task_id]["trigger_id"] == before[task_id]["trigger_id"], task_id
        assert after[task_id]["kwargs"]["job_id"] == before[task_id]["kwargs"]["job_id"], task_id
        assert after[task_id]["kwargs"]["deadline"] == before[task_id]["kwargs"]["deadline"], task_id

    emulator.advance_clock(SLOW * 100)  # every job finishes now
    fired = _assert_each_task_ran_its_own_job(airflow, emulator, run_id, workflow_of, before)
    assert set(fired.values()) == {1}, f"events built per task: {fired}"
    _say(
        f"jobs per task: 1 ({TASKS} jobs of {WORKFLOWS} workflows); "
        f"events per task: {Counter(fired.values())}; duplicates: 0; "
        f"wall time {time.monotonic() - started:.0f} s"
    )


def _cancels(emulator: Any, job_ids: list[str]) -> list[str]:
    """The jobs of ``job_ids`` the emulator received a cancel request for (its request log)."""
    return [j for j in job_ids if emulator.requests(method="POST", path_contains=f"/jobs/{j}/cancel")]


def _left_running(airflow: DistributedAirflow, run_id: str, task_id: str, job_id: str) -> bool:
    """Whether the task's trigger log says its ``on_kill`` left ``job_id`` running (the guard's line)."""
    texts = (
        path.read_text(errors="replace") for path in airflow.trigger_log_files(FANOUT_DAG, run_id, task_id)
    )
    return any(f"Left job {job_id} running" in text for text in texts)


def test_a_paused_triggerer_cancels_no_job(stack: tuple[DistributedAirflow, Any]) -> None:
    """
    SIGSTOP one triggerer past ``triggerer_health_check_threshold`` (a GC pause, a frozen container):
    Airflow hands its triggers to the other; SIGCONT: the woken triggerer cancels the triggers it no
    longer holds with Airflow's "user action" message (3.3.0 to 3.3.2), which runs their ``on_kill``. The
    tasks are still deferred, so no job is cancelled: every task succeeds with its own job, one try.
    """
    airflow, emulator = stack
    started = time.monotonic()
    emulator.configure(processing_delay=SLOW)
    victim, survivor = TRIGGERERS
    run_id, workflow_of, before = _fan_out(airflow, emulator, "paused")
    moved = {t: d["kwargs"]["job_id"] for t, d in before.items() if d["triggerer"] == victim}
    assert len(moved) == TASKS // 2

    airflow.signal_component(victim, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        _wait_for(
            lambda: _held_by(airflow, run_id, survivor),
            timeout=240,
            what=f"{survivor} to take over the paused {victim}'s triggers",
        )
        reassigned_s = time.monotonic() - paused_at
    finally:
        airflow.signal_component(victim, signal.SIGCONT)

    # The woken triggerer ends each trigger it lost; each on_kill either cancels the job (the defect) or
    # leaves it running and says so in the trigger's log.
    _wait_for(
        lambda: all(
            _cancels(emulator, [job_id]) or _left_running(airflow, run_id, task_id, job_id)
            for task_id, job_id in moved.items()
        ),
        timeout=120,
        what=f"the woken {victim} to end the {len(moved)} triggers it lost",
    )
    cancelled = _cancels(emulator, list(moved.values()))
    emulator.advance_clock(SLOW * 100)  # every job still running finishes now
    run = airflow.wait_for_run(FANOUT_DAG, run_id, timeout=180)
    tis = {ti["task_id"]: ti for ti in airflow.task_instances(FANOUT_DAG, run_id)}
    stopped = [t for t, job_id in moved.items() if _job_status(emulator, job_id) == "stopped"]
    _say(
        f"paused {victim} holding {len(moved)} triggers: reassigned to {survivor} "
        f"after {reassigned_s:.1f} s; "
        f"after SIGCONT: {len(cancelled)} cancel requests, {len(stopped)} jobs stopped, "
        f"{sum(ti['state'] != 'success' for ti in tis.values())} tasks not successful, run {run['state']}; "
        f"wall time {time.monotonic() - started:.0f} s"
    )
    assert cancelled == [], f"the woken triggerer cancelled jobs it no longer owned: {cancelled}"
    _assert_each_task_ran_its_own_job(airflow, emulator, run_id, workflow_of, before)


def test_a_killed_workers_durable_task_reattaches_on_retry(stack: tuple[DistributedAirflow, Any]) -> None:
    airflow, emulator = stack
    started = time.monotonic()
    emulator.configure(processing_delay=SLOW)
    (workflow_id,) = _create_workflows(emulator, 1, "durable")

    run_id = airflow.trigger_dag(DURABLE_DAG, conf={"workflow": workflow_id})
    job_id = _wait_for(
        lambda: airflow.xcom(DURABLE_DAG, run_id, DURABLE_TASK, key="job_id"),
        timeout=120,
        what="the task to run the workflow",
    )
    # Waiting in the worker (not deferred): it polls the job itself.
    _wait_for(lambda: _polls(emulator, job_id) >= 2, timeout=60, what="the worker to poll the job")
    first = airflow.task_instance(DURABLE_DAG, run_id, DURABLE_TASK)
    assert first["state"] == "running"
    assert first["try_number"] == 1
    assert first["hostname"] == "celery-worker-1"

    killed = airflow.kill_worker()
    killed_at = time.monotonic()
    _say(f"killed {killed.name} (process group {killed.pid}) during the non-deferrable wait")
    airflow.start_worker()

    retry = _wait_for(
        lambda: (
            (ti := airflow.task_instance(DURABLE_DAG, run_id, DURABLE_TASK))["try_number"] == 2
            and ti["state"] == "running"
            and ti
        ),
        timeout=120,
        what="the retry to run on the new worker",
    )
    retry_s = time.monotonic() - killed_at
    assert retry["hostname"] == "celery-worker-2"
    polls = _polls(emulator, job_id)
    _wait_for(lambda: _polls(emulator, job_id) > polls, timeout=60, what="the retry to poll the job")

    emulator.advance_clock(SLOW * 100)
    run = airflow.wait_for_run(DURABLE_DAG, run_id, timeout=120)
    assert run["state"] == "success"
    summary = airflow.xcom(DURABLE_DAG, run_id, DURABLE_TASK)
    assert summary["job_id"] == job_id
    assert summary["status"] == "completed"
    jobs = _jobs_of(emulator, workflow_id)
    assert jobs == [job_id]  # the retry reattached: no second job
    assert _run_requests(emulator, workflow_id) == 1
    ti = airflow.task_instance(DURABLE_DAG, run_id, DURABLE_TASK)
    assert ti["state"] == "success"
    assert ti["try_number"] == 2
    assert "Submitted job" not in airflow.task_log(DURABLE_DAG, run_id, DURABLE_TASK, try_number=2)
    _say(
        f"worker kill: retry running on celery-worker-2 {retry_s:.0f} s after the kill; jobs for the task: "
        f"{len(jobs)}; wall time {time.monotonic() - started:.0f} s"
    )


def test_the_example_pipeline_reads_and_writes_a_bucket(
    stack: tuple[DistributedAirflow, Any], store: S3Server
) -> None:
    """The example pipeline on Celery workers with inputs and outputs in the bucket: its outputs are
    objects (the store's own listing), named by the download rule; its failed document is reported."""
    airflow, emulator = stack
    emulator.configure(processing_delay=0.05)
    bucket = f"s3://{S3_CONN}@{BUCKET}"
    conf = {"input_dir": f"{bucket}/sample_docs/", "output_dir": f"{bucket}/output"}
    run_id = airflow.trigger_dag(EXAMPLE_DAG, conf=conf)
    run = airflow.wait_for_run(EXAMPLE_DAG, run_id, timeout=240)
    tis = {ti["task_id"]: ti for ti in airflow.task_instances(EXAMPLE_DAG, run_id)}
    assert run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    assert {ti["hostname"] for ti in tis.values()} <= {"celery-worker-1", "celery-worker-2"}
    summary = airflow.xcom(EXAMPLE_DAG, run_id, "summarize")
    job_id = summary["job_id"]
    names = ("faq.html", "inventory.csv", "release-notes.md", "welcome.txt")
    expected = [f"output/{job_id}/{name}.json" for name in names]
    assert sorted(store.keys(BUCKET, "output/")) == expected
    assert sorted(summary["output_paths"]) == [f"s3://{BUCKET}/{key}" for key in expected]
    assert [f["document"] for f in summary["failed_files"]] == ["empty.txt"]
    _say(f"example pipeline on the bucket: {len(expected)} outputs in s3://{BUCKET}/output/{job_id}/")
