"""End to end on a distributed Airflow: PostgreSQL, CeleryExecutor with Redis, one Celery worker, two
triggerers (``scripts/local_airflow.py``'s distributed shape) and the emulator as a subprocess.

* Triggerer failover: the failover benchmark's ``pause+kill`` scenario (benchmarks/bench_failover.py)
  at CI's size: 16 waits on 2 workflows over both triggerers, 4 ``RunWorkflowOperator`` tasks deferred
  from the worker, 12 sensors started in the triggerer; the busier triggerer gets SIGSTOP past the
  health-check threshold and then SIGCONT, then the other gets SIGKILL; every wait ends with 0 lost, 0
  duplicated (jobs, run requests, events built, tries) and 0 cancel requests: counts from the
  emulator's request log and Airflow's database, never times.
* Worker crash: the Celery worker's process group gets SIGKILL while a durable, non-deferrable task
  waits for its job; a new worker runs the retry, which reattaches to the stored job (Airflow 3.3
  durable execution): one job in the emulator, one run request.
* No shared disk: every run reads its input from a bucket (moto's S3 server on loopback, an Airflow
  ``aws`` connection), and the example pipeline writes its outputs there.

Figures (triggers per triggerer, failover time, the benchmark's counts) are printed with ``[dist]``.
One deployment serves the module; everything started is stopped by PID at the end, also on failure.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_failover import DAG_ID as FAILOVER_DAG, Sizes, run_scenario, write_dag
from scripts.local_airflow import DistributedAirflow, local_stack, wait_for
from scripts.s3_server import S3Server, running_s3_server

pytestmark = [
    pytest.mark.e2e_distributed,
    pytest.mark.airflow_min("3.3", reason="the worker-crash retry reattaches through durable execution"),
    pytest.mark.timeout(600, method="signal"),
]

DURABLE_DAG = "workflowsvc_e2e_durable"
DURABLE_TASK = "run_in_worker"
CI_SIZES = Sizes(waits=16, run_waits=4, workflows=2, interval=2.0, window=2.0)
"""The failover scenario's size in CI: 4 waits that start in the worker (each a task process to start
and one to resume), 12 sensors that start in the triggerer, on 2 workflows (they share status reads)."""
SLOW = 3600.0  # emulator seconds per file per node (the most it takes): jobs run until the clock moves
REPO_ROOT = Path(__file__).resolve().parent.parent
BUCKET = "dist-inputs"
"""The bucket of every input and output (``s3://dist_s3@dist-inputs``: e2e_dags/distributed/)."""
S3_CONN = "dist_s3"
INPUT = f"s3://{S3_CONN}@{BUCKET}/input.txt"
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
    write_dag(folder, CI_SIZES, INPUT)  # the failover benchmark's waits
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
        airflow.wait_for_dag(FAILOVER_DAG, timeout=120)
        airflow.wait_for_dag(DURABLE_DAG, timeout=60)
        airflow.wait_for_dag(EXAMPLE_DAG, timeout=60)
        yield airflow, emulator


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


def _run_requests(emulator: Any, workflow_id: str) -> int:
    """Run requests the emulator received for ``workflow_id`` (its request log)."""
    return len(emulator.requests(method="POST", path_contains=f"/workflows/{workflow_id}/run"))


def _polls(emulator: Any, job_id: str) -> int:
    return len(emulator.requests(method="GET", path_contains=f"/jobs/{job_id}"))


def test_a_paused_then_a_killed_triggerer_lose_duplicate_and_cancel_no_wait(
    stack: tuple[DistributedAirflow, Any],
) -> None:
    """
    The failover benchmark's ``pause+kill`` at CI's size (benchmarks/bench_failover.py), on one set of
    waits: SIGSTOP to the triggerer holding the most until Airflow hands its waits to the other, then
    SIGCONT (the woken triggerer ends the triggers it lost: Airflow 3.3.0 to 3.3.2 run their ``on_kill``
    as for a user's mark, and the provider must leave the jobs running); then SIGKILL to the one now
    holding them all, so every wait moves back to the woken one, which reads their state again. Every
    task succeeds, each run task with its own job, one run request, one event, one try; no cancel
    request reaches the service. Counts only.
    """
    airflow, emulator = stack
    started = time.monotonic()
    out = run_scenario(airflow, emulator, "pause+kill", CI_SIZES, _say)
    counts = out.counts
    _say(f"pause+kill: wall time {time.monotonic() - started:.0f} s")
    assert counts["moved"] > CI_SIZES.waits // 2, out.held  # the second failover moves every wait
    assert counts["finished"] == CI_SIZES.waits, counts
    assert counts["lost"] == 0, counts
    assert counts["duplicated"] == 0, counts
    assert counts["cancel requests"] == 0, counts


def test_a_killed_workers_durable_task_reattaches_on_retry(stack: tuple[DistributedAirflow, Any]) -> None:
    airflow, emulator = stack
    started = time.monotonic()
    emulator.configure(processing_delay=SLOW)
    (workflow_id,) = _create_workflows(emulator, 1, "durable")

    run_id = airflow.trigger_dag(DURABLE_DAG, conf={"workflow": workflow_id})
    job_id = wait_for(
        lambda: airflow.xcom(DURABLE_DAG, run_id, DURABLE_TASK, key="job_id"),
        timeout=120,
        what="the task to run the workflow",
    )
    # Waiting in the worker (not deferred): it polls the job itself.
    wait_for(lambda: _polls(emulator, job_id) >= 2, timeout=60, what="the worker to poll the job")
    first = airflow.task_instance(DURABLE_DAG, run_id, DURABLE_TASK)
    assert first["state"] == "running"
    assert first["try_number"] == 1
    assert first["hostname"] == "celery-worker-1"

    killed = airflow.kill_worker()
    killed_at = time.monotonic()
    _say(f"killed {killed.name} (process group {killed.pid}) during the non-deferrable wait")
    airflow.start_worker()

    retry = wait_for(
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
    wait_for(lambda: _polls(emulator, job_id) > polls, timeout=60, what="the retry to poll the job")

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
