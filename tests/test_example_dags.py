"""The example DAGs import cleanly and run against the emulator, tested with the test kit as a user's DAGs
would be: the local-files pipeline, the sensor on a scheduled job, the job-event watcher, the on-demand
parse of a folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import dag_bag, hourly_workflow

from airflow_provider_workflowsvc.testing import DagRunner, EmulatorConnection, job_event_triggers

pytestmark = pytest.mark.compat  # the matrix's smoke check on every Airflow: the examples parse and run

EXAMPLE_DAGS = Path(__file__).resolve().parent.parent / "example_dags"
EXPECTED_DAG_IDS = {
    "workflowsvc_example_local_files",
    "workflowsvc_example_connectors_pipeline",
    "workflowsvc_example_sensor",
    "workflowsvc_example_asset_producer",
    "workflowsvc_example_asset_consumer",
    "workflowsvc_example_job_events",
    "workflowsvc_example_on_demand",
}


@pytest.fixture(scope="module")
def example_bag() -> Any:
    return dag_bag(EXAMPLE_DAGS, collect_dags=True)


def test_example_dags_import_without_errors(example_bag: Any) -> None:
    assert example_bag.import_errors == {}
    assert set(example_bag.dag_ids) == EXPECTED_DAG_IDS
    for dag_id in EXPECTED_DAG_IDS:
        dag = example_bag.dags[dag_id]
        assert "example" in dag.tags
        assert dag.doc_md, f"{dag_id} explains itself in the UI"


def test_example_dags_hard_code_no_secrets() -> None:
    """Secrets come from Variables/connections: every secret-looking config value is a template."""
    for path in EXAMPLE_DAGS.glob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(('"token":', '"password":', '"api_key":')):
                assert "{{ var.value." in stripped, f"{path.name}: {stripped}"


def test_sample_docs_include_a_failing_document() -> None:
    docs = sorted(p.name for p in (EXAMPLE_DAGS / "sample_docs").iterdir())
    assert {"welcome.txt", "release-notes.md", "faq.html", "inventory.csv", "empty.txt"} <= set(docs)
    assert (EXAMPLE_DAGS / "sample_docs" / "empty.txt").stat().st_size == 0


def test_local_files_example_runs_against_the_emulator(
    workflowsvc_connection: EmulatorConnection, workflowsvc_run_dag: DagRunner, tmp_path: Path
) -> None:
    result = workflowsvc_run_dag(
        EXAMPLE_DAGS / "example_local_files.py", run_conf={"output_dir": str(tmp_path)}
    )

    assert result.succeeded, result.errors
    summary = result.xcom("summarize")
    assert summary["status"] == "completed"
    assert [f["document"] for f in summary["failed_files"]] == ["empty.txt"]
    assert {n["node_name"] for n in summary["node_stats"]} >= {"Partitioner"}
    paths = [Path(p) for p in summary["output_paths"]]
    assert len(paths) == 4  # five samples, one failed
    for path in paths:
        assert path.parent == tmp_path / summary["job_id"]
        json.loads(path.read_text())  # each output is the JSON of the processed file

    # The run really went through the service: files uploaded in one run request, job polled, output read.
    emulator = workflowsvc_connection.emulator
    assert len(emulator.requests("POST", "/workflows/*/run")) == 1
    # each output's start, read for the run summary's document names (issue #32), then each download
    assert len(emulator.requests("GET", "/jobs/*/download")) == 4 + 4
    (job,) = emulator.jobs()
    assert (job.id, len(job.files)) == (summary["job_id"], 5)


def test_sensor_example_waits_for_the_job_the_schedule_starts_after_the_run(
    workflowsvc_connection: EmulatorConnection,
    workflowsvc_run_dag: DagRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulator = workflowsvc_connection.emulator
    workflow_id = hourly_workflow("example-sensor")
    monkeypatch.setenv("AIRFLOW_VAR_WORKFLOWSVC_SCHEDULED_WORKFLOW_ID", workflow_id)
    emulator.advance_clock(3600)  # a job before the run: not the one the run waits for
    emulator.advance_clock(3600, when=("GET", "/jobs"))  # the next one, once the sensor looks

    result = workflowsvc_run_dag(EXAMPLE_DAGS / "example_sensor.py")

    assert result.succeeded, result.errors
    # oldest first: the job before the run, then the one the schedule started after it (a run that
    # crosses a wall-clock hour may see the hourly schedule start one more, later)
    awaited = emulator.jobs()[1]
    assert result.xcom("wait_for_scheduled_job")["job_id"] == awaited.id
    assert result.task_states["report"] == "success"


def test_job_events_example_gets_one_event_per_finished_job(
    example_bag: Any, workflowsvc_connection: EmulatorConnection, workflowsvc_job_events: Any
) -> None:
    dag = example_bag.dags["workflowsvc_example_job_events"]
    (trigger,) = job_event_triggers(dag)  # the DAG is scheduled on the asset this trigger watches
    assert trigger.workflow_id == "6f1c3a52-6a4e-4c8e-9d0b-2f7e1c9a5b10"
    emulator = workflowsvc_connection.emulator
    workflow_id = hourly_workflow("example-events")

    watch = workflowsvc_job_events(dag, workflow_id=workflow_id)  # the example's watcher, on this workflow
    emulator.advance_clock(2 * 3600)  # two schedule times: two jobs, which end

    payloads = watch.events(2)
    assert {p["job_id"] for p in payloads} == {job.id for job in emulator.jobs()}
    assert all(p["status"] == "completed" for p in payloads)
    assert watch.settle() == []  # nothing twice


@pytest.mark.workflowsvc(dialect="platform")  # on-demand jobs are the live service's (platform) API
def test_on_demand_example_parses_the_folder_in_one_deferral_and_reads_the_elements(
    workflowsvc_connection: EmulatorConnection, workflowsvc_run_dag: DagRunner, tmp_path: Path
) -> None:
    result = workflowsvc_run_dag(
        EXAMPLE_DAGS / "example_on_demand.py", run_conf={"output_dir": str(tmp_path)}
    )

    assert result.succeeded, result.errors
    parsed = result.xcom("parse_folder")
    statuses = {d["document"]: d["status"] for d in parsed["documents"]}
    assert statuses == {
        "empty.txt": "failed",
        "faq.html": "completed",
        "inventory.csv": "completed",
        "release-notes.md": "completed",
        "welcome.txt": "completed",
    }
    read = result.xcom("read_elements")
    assert set(read) == {"faq.html", "inventory.csv", "release-notes.md", "welcome.txt"}
    assert read["inventory.csv"]["elements"] == {"Table": 1}
    assert all(sum(doc["elements"].values()) >= 1 for doc in read.values())
    # One launch of the five files, its job waited for in the triggerer (dag.test runs it inline).
    emulator = workflowsvc_connection.emulator
    launches = [r for r in emulator.requests("POST") if r.path == "/api/v1/jobs/"]
    assert [r.status for r in launches] == [200]
    (job,) = emulator.jobs()
    assert len(job.files) == 5
    outputs = [Path(p) for d in parsed["documents"] for p in d["output_files"]]
    assert outputs
    assert all(p.parent == tmp_path / result.run_id for p in outputs)


# A fresh interpreter parses the example DAGs as Airflow's DAG processor does (a DagBag, which records
# each file's warnings: what the UI shows as DAG warnings), and reports every warning, recorded by the
# DagBag or raised around it, as "filename:lineno: category: message". The probe at the end proves the
# recording still worked after Airflow configured its logging (which takes over warnings.showwarning).
PARSE_SCRIPT = """
import json, sys, warnings
import airflow
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow < 3.2
        from airflow.models.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1], collect_dags=True)
    warnings.warn_explicit("probe", DeprecationWarning, "probe.py", 1)
shown = [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught]
shown += [text for texts in bag.captured_warnings.values() for text in texts]
print(json.dumps({"dags": sorted(bag.dag_ids), "errors": list(bag.import_errors), "warnings": shown}))
"""


def test_parsing_the_example_dags_raises_no_warning_from_the_provider() -> None:
    """Issue #32: on Airflow 3.2 every DAG parse warned of ``airflow.exceptions.AirflowTaskTimeout``."""
    import os
    import subprocess
    import sys

    import airflow_provider_workflowsvc

    package_dir = str(Path(airflow_provider_workflowsvc.__file__).parent)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, "-c", PARSE_SCRIPT, str(EXAMPLE_DAGS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == []
    assert set(parsed["dags"]) == EXPECTED_DAG_IDS
    assert "probe.py:1: DeprecationWarning: probe" in parsed["warnings"]
    assert [w for w in parsed["warnings"] if w.startswith(package_dir)] == []
