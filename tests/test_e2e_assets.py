"""End to end on a real local Airflow: a job's asset event starts the DAG scheduled on that asset.

The asset example (``example_dags/example_asset_pipeline.py``) runs on the harness of
``test_e2e_airflow.py`` (api-server, scheduler, dag-processor, triggerer; LocalExecutor, SQLite) and
the emulator: the producer's run task defers, its job succeeds, the asset event it records makes the
*scheduler* create a run of the consumer DAG, whose task reads the job from the event's extra.
"""

from __future__ import annotations

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

PRODUCER = "workflowsvc_example_asset_producer"
CONSUMER = "workflowsvc_example_asset_consumer"
ASSET_URI = "s3://example-bucket/processed"
S3_SECRET = "e2e-s3-secret-51c0"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalAirflow, Any]]:
    folder = tmp_path_factory.mktemp("e2e-asset-dags")
    shutil.copy(REPO_ROOT / "example_dags" / "example_asset_pipeline.py", folder)
    shutil.copytree(REPO_ROOT / "example_dags" / "sample_docs", folder / "sample_docs")
    variables = {
        "AIRFLOW_VAR_WORKFLOWSVC_S3_KEY_ID": "AKIAE2E",
        "AIRFLOW_VAR_WORKFLOWSVC_S3_SECRET": S3_SECRET,
    }
    with local_stack(
        folder,
        emulator_options={"token": "e2e-token-a55e", "api_key": "e2e-key-a55e", "dialect": "platform"},
        connection_extra={"retry_wait": 0.2},
        env=variables,
        progress=lambda message: print(f"[e2e-assets] {message}", flush=True),
        start_timeout=180,
        stop_timeout=30,
    ) as (airflow, emulator):
        airflow.wait_for_dag(PRODUCER)
        airflow.wait_for_dag(CONSUMER)
        yield airflow, emulator


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
    assert result["status"] == "completed" and result["failed_file_count"] == 1
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
        f"[e2e-assets] producer run {run_id}: job {result['job_id']}; asset event {event['id']} on "
        f"{event['uri']} extra {event['extra']}; consumer run {consumer['dag_run_id']} "
        f"({consumer['run_type']}) {finished['state']}, read {jobs}"
    )
