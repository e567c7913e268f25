"""The test kit (``airflow_provider_workflowsvc.testing``) through its own fixtures, as a user's tests use it:
real DAG runs against the emulator, what the handle scripts and shows, the kit's own Airflow, one clock
for the DAG run and the service, the job-event watch."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, task
from helpers import hourly_workflow, run_pytest

from airflow_provider_workflowsvc import (
    CreateDestinationConnectorOperator,
    CreateWorkflowOperator,
    RunWorkflowOperator,
    WorkflowJobSensor,
)
from airflow_provider_workflowsvc.testing import DagFileError, DagRunner, ServiceEmulator
from airflow_provider_workflowsvc.testing.emulator import route_regex

START = datetime(2025, 1, 1, tzinfo=timezone.utc)


def ingest_dag(dag_id: str, inputs: Path, **run_kwargs: Any) -> DAG:
    """Create a workflow of local files (reused if it exists), run it on ``inputs``, wait for the job."""
    conn_id = run_kwargs.pop("workflowsvc_conn_id", "workflowsvc_default")
    with DAG(
        dag_id, schedule=None, start_date=START, catchup=False, default_args={"workflowsvc_conn_id": conn_id}
    ) as dag:
        workflow = CreateWorkflowOperator(task_id="create", name=dag_id, workflow_type="basic")
        RunWorkflowOperator(
            task_id="run", workflow_id=workflow.output, files=str(inputs), poll_interval=60, **run_kwargs
        )
    return dag


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "a.txt").write_text("Quarterly report: revenue grew.")
    (folder / "b.txt").write_text("Minutes of the meeting.")
    return folder


def test_a_dag_defined_in_a_test_runs_end_to_end(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    result = workflowsvc_run_dag(ingest_dag("kit_ok", inputs))
    assert result.succeeded, result
    assert result.task_states == {"create": "success", "run": "success"}
    summary = result.xcom("run")
    assert (summary["status"], summary["failed_file_count"]) == ("completed", 0)
    assert result.xcom("run", "job_id") == summary["job_id"]
    assert result.errors == {}
    with pytest.raises(KeyError, match="pushed no XCom 'nothing'; it pushed"):
        result.xcom("run", "nothing")
    emulator: ServiceEmulator = workflowsvc_connection.emulator
    (job,) = emulator.jobs(workflow="kit_ok")
    assert (job.id, job.status, job.scheduled) == (summary["job_id"], "completed", False)
    assert len(emulator.received_files()) == 2  # one run request, both files
    assert len(emulator.requests("POST", "/workflows/*/run")) == 1


def test_files_the_service_fails_fail_the_task_with_its_reason(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    workflowsvc_connection.emulator.fail_files("b*")
    result = workflowsvc_run_dag(ingest_dag("kit_failed_files", inputs))
    assert result.task_states["run"] == "failed"
    assert "b.txt" in result.errors["run"]
    assert [f["document"] for f in result.xcom("run")["failed_files"]] == ["b.txt"]
    (job,) = workflowsvc_connection.emulator.jobs()
    assert job.status == "completed"
    assert [Path(name).stem.split("__wfsvc-")[0] for name in job.failed_files] == ["b"]  # marked or not


def test_a_flaky_service_is_waited_out(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    emulator = workflowsvc_connection.emulator
    emulator.fail_requests("GET", "/jobs/*", status=503, times=3)
    emulator.fail_requests("GET", "/workflows/*", status="drop", times=1)
    emulator.fail_requests("POST", "/workflows/*/run", status=429, times=1)  # refused: sent again
    result = workflowsvc_run_dag(ingest_dag("kit_flaky", inputs))
    assert result.succeeded, result.errors
    faults = [r.fault for r in emulator.requests() if r.fault]
    assert sorted(faults) == sorted(["503"] * 3 + ["drop", "429"])
    assert len(emulator.jobs()) == 1


def test_a_lost_run_answer_is_never_sent_again(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    emulator = workflowsvc_connection.emulator
    emulator.fail_requests("POST", "/workflows/*/run", status=502, after=True, times=1)
    result = workflowsvc_run_dag(ingest_dag("kit_lost_answer", inputs))
    (job,) = emulator.jobs()  # the service ran it once; nothing was sent again
    assert len(emulator.requests("POST", "/workflows/*/run")) == 1
    assert result.task_states["run"] == "failed"
    assert job.id in result.errors["run"]  # spec dialect: nothing proves the job is this run's


@pytest.mark.parametrize("ending", ["failed", "stopped"])
def test_a_workflows_jobs_end_as_the_test_says(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path, ending: str
) -> None:
    workflowsvc_connection.emulator.end_jobs(ending, workflow="kit_end_*")
    result = workflowsvc_run_dag(ingest_dag(f"kit_end_{ending}", inputs))
    assert result.task_states["run"] == "failed"
    assert result.xcom("run")["status"] == ending
    assert ending in result.errors["run"]


def test_processing_time_and_the_clock(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    emulator = workflowsvc_connection.emulator
    emulator.set_processing_time(600)  # emulator seconds per file per node: the job stays scheduled
    result = workflowsvc_run_dag(ingest_dag("kit_clock", inputs, wait_for_completion=False))
    assert result.succeeded, result.errors
    assert [j.status for j in emulator.jobs()] == ["scheduled"]
    before = emulator.now()
    emulator.advance_clock(600 * 10)
    assert [j.status for j in emulator.jobs()] == ["completed"]
    assert (emulator.now() - before).total_seconds() >= 6000


def test_what_a_destination_connector_received_is_read_back(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    with DAG("kit_lake", schedule=None, start_date=START, catchup=False) as dag:
        lake = CreateDestinationConnectorOperator(
            task_id="lake", name="lake", connector_type="s3", config={"remote_url": "s3://bucket/out"}
        )
        workflow = CreateWorkflowOperator(
            task_id="create", name="kit_lake", workflow_type="basic", destination_id=lake.output
        )
        RunWorkflowOperator(task_id="run", workflow_id=workflow.output, files=str(inputs))
    result = workflowsvc_run_dag(dag)
    assert result.succeeded, result.errors
    writes = workflowsvc_connection.emulator.destination_writes("lake")
    assert [w.document for w in writes] == ["a.txt", "b.txt"]
    [chunk] = writes[0].elements  # the basic workflow's Chunker and Embedder ran
    assert (chunk["type"], chunk["text"]) == ("CompositeElement", "Quarterly report: revenue grew.")
    assert len(chunk["embeddings"]) == 1536


def test_the_dags_own_poll_interval_is_kept_with_none_and_restored_after_a_run(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path
) -> None:
    dag = ingest_dag("kit_poll", inputs, wait_for_completion=False)
    workflowsvc_run_dag(dag)
    assert dag.task_dict["run"].poll_interval == 60  # the kit polled every 0.1 s during the run only
    result = workflowsvc_run_dag(dag, poll_interval=None)
    assert result.succeeded


@pytest.mark.workflowsvc(dialect="platform", conn_id="platform_conn")
def test_the_marker_chooses_the_dialect_and_the_connection_id(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner, inputs: Path, tmp_path: Path
) -> None:
    assert workflowsvc_connection.emulator.dialect == "platform"
    assert workflowsvc_connection.env_var == "AIRFLOW_CONN_PLATFORM_CONN"
    result = workflowsvc_run_dag(ingest_dag("kit_platform", inputs, workflowsvc_conn_id="platform_conn"))
    assert result.succeeded, result.errors
    assert workflowsvc_connection.emulator.requests("GET", "/jobs/*")


def test_route_globs_match_both_slash_forms_only_under_the_api() -> None:

    pattern = re.compile(route_regex("/workflows/*/run"))
    assert pattern.search("/api/v1/workflows/abc/run")
    assert pattern.search("/api/v1/workflows/abc/run/")
    assert not pattern.search("/api/v1/workflows/abc/run/x")
    assert not pattern.search("/_emulator/workflows/abc/run")
    assert re.search(route_regex("/jobs"), "/api/v1/jobs/")
    with pytest.raises(ValueError, match="starts with '/'"):
        route_regex("jobs")


# --------------------------------------------------------------------------------------------------
# DAG files, the kit's own Airflow, the "not serialized" trap

DAG_FILE = """
from datetime import datetime
from airflow.sdk import DAG, task

with DAG("{dag_id}", schedule=None, start_date=datetime(2025, 1, 1)):
    @task
    def double(n: int = 21) -> int:
        return n * 2

    @task
    def add(values: list[int]) -> int:
        return sum(values)

    add(double.expand(n=[1, 2]))
"""


@pytest.mark.compat  # the kit's use of Airflow's internals, on every minor
def test_a_dag_file_runs_with_mapped_tasks_keyed_by_index(
    workflowsvc_run_dag: DagRunner, tmp_path: Path
) -> None:
    (tmp_path / "dags").mkdir()
    path = tmp_path / "dags" / "maths.py"
    path.write_text(DAG_FILE.format(dag_id="kit_file_maths"))
    result = workflowsvc_run_dag(path)
    assert result.state == "success"
    assert result.task_states == {"double[0]": "success", "double[1]": "success", "add": "success"}
    assert (result.xcom("double[1]"), result.xcom("add")) == (4, 6)


@pytest.mark.compat  # the kit's use of Airflow's internals, on every minor
def test_dag_files_that_cannot_run_say_why(workflowsvc_run_dag: DagRunner, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("from airflow.sdk import DAG\nraise RuntimeError('no such thing')\n")
    with pytest.raises(DagFileError, match=r"does not import:(.|\n)*no such thing"):
        workflowsvc_run_dag(broken)
    two = tmp_path / "two.py"
    two.write_text(DAG_FILE.format(dag_id="kit_one") + DAG_FILE.format(dag_id="kit_two"))
    with pytest.raises(DagFileError, match=r"holds \['kit_one', 'kit_two'\]: name one with dag_id="):
        workflowsvc_run_dag(two)
    with pytest.raises(DagFileError, match="holds no DAG 'kit_three'"):
        workflowsvc_run_dag(two, dag_id="kit_three")
    assert workflowsvc_run_dag(two, dag_id="kit_two").xcom("add") == 6


@pytest.mark.compat  # the kit's use of Airflow's internals, on every minor
def test_a_dag_file_is_read_without_airflows_examples_whatever_load_examples_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Airflow 3.3 a DagBag adds Airflow's example DAGs when [core] load_examples is on (default)."""
    from airflow_provider_workflowsvc.testing.dag_runs import parse_dag_file

    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "True")
    path = tmp_path / "maths.py"
    path.write_text(DAG_FILE.format(dag_id="kit_no_examples"))
    bag, dag = parse_dag_file(path)
    assert (sorted(bag.dags), dag.dag_id) == (["kit_no_examples"], "kit_no_examples")


@pytest.mark.compat  # the kit's use of Airflow's internals, on every minor
def test_the_kit_runs_in_an_airflow_of_its_own_and_puts_the_sessions_back(
    workflowsvc_run_dag: DagRunner, airflow_db: None
) -> None:
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    before = settings.SQL_ALCHEMY_CONN
    with DAG("kit_isolated", schedule=None, start_date=START) as dag:
        task(lambda: 1, task_id="one")()
    result = workflowsvc_run_dag(dag)
    assert result.succeeded
    assert before == settings.SQL_ALCHEMY_CONN
    with create_session() as session:  # the suite's own database never saw the run
        assert session.query(DagRun).filter(DagRun.dag_id == "kit_isolated").count() == 0
    assert workflowsvc_run_dag.airflow.home.as_posix() not in before


@pytest.mark.compat  # the kit's use of Airflow's internals, on every minor
def test_no_connection_to_the_sessions_database_outlives_a_run(
    workflowsvc_run_dag: DagRunner, airflow_db: None
) -> None:
    """
    The kit keeps its engine from run to run, not the connections: one kept open through a run broke the
    suite's database in a long session (``disk I/O error`` on ``PRAGMA journal_mode=WAL``). Reading the
    database file drops the process's SQLite locks (POSIX drops them all at the read's close); another
    process then took itself for the last user and deleted the -wal and -shm files the kept connection
    still used, and this process's next connection read the stale ones.
    """
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:  # the session's database has a pooled connection now
        session.query(DagRun).count()
    with DAG("kit_no_kept_connection", schedule=None, start_date=START) as dag:
        task(lambda: 1, task_id="one")()
    assert workflowsvc_run_dag(dag).succeeded
    database = Path(settings.engine.url.database)
    reads = "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM log').fetchall()"
    another_process = [sys.executable, "-c", reads, str(database)]
    database.read_bytes()  # as a scan for secrets did in this process (tests/reliability: now in a child)
    subprocess.run(another_process, check=True)
    with create_session() as session:  # the session's database written to again
        session.execute(text("INSERT INTO log (dttm, event) VALUES (CURRENT_TIMESTAMP, 'kit_probe')"))
    subprocess.run(another_process, check=True)
    new = sqlite3.connect(database)  # this process's next connection: "disk I/O error" after a kept one
    try:
        assert new.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
        assert new.execute("SELECT count(*) FROM log WHERE event = 'kit_probe'").fetchone() == (1,)
    finally:
        new.close()


def test_without_the_emulator_a_run_is_due_now_as_dag_test_makes_it(workflowsvc_run_dag: DagRunner) -> None:
    with DAG("kit_no_emulator", schedule="@daily", start_date=START) as dag:

        @task
        def day(ds: str | None = None) -> str | None:
            return ds

        day()
    before = datetime.now(timezone.utc).date().isoformat()
    result = workflowsvc_run_dag(dag)
    assert result.xcom("day") in {before, datetime.now(timezone.utc).date().isoformat()}


@pytest.mark.compat  # the kit's use of Airflow's internals, on every minor
@pytest.mark.airflow_min("3.1", reason="Airflow 3.0's dag.test() serializes the DAG itself")
def test_a_dag_defined_outside_the_dag_folder_is_serialized_for_the_user(
    workflowsvc_run_dag: DagRunner,
) -> None:
    with DAG("kit_not_serialized", schedule=None, start_date=START) as dag:
        task(lambda: 1, task_id="one")()
    with workflowsvc_run_dag.airflow.active(), pytest.raises(Exception, match="the dag is not serialized"):
        dag.test()  # the trap: Airflow runs only DAGs it has serialized
    assert workflowsvc_run_dag(dag).succeeded  # the kit serializes it first


# --------------------------------------------------------------------------------------------------
# One clock for the DAG run and the service: a sensor finds the job the schedule started after the run


def sensor_dag(dag_id: str, workflow_id: str) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        WorkflowJobSensor(
            task_id="wait",
            workflow_id=workflow_id,
            created_after="{{ dag_run.run_after }}",  # a job the schedule started after this run was due
            pick="earliest",
            poke_interval=60,
            timeout=120,
        )
    return dag


def jobs_around_the_run(emulator: ServiceEmulator) -> str:
    """
    Half past the hour, the service's clock moves an hour on (its schedule starts a job, which ends);
    then, when the sensor first lists the jobs, another hour (another job). Returns the workflow's id.
    """
    now = emulator.now()
    emulator.advance_clock((1800 - (now.minute * 60 + now.second)) % 3600)
    workflow_id = hourly_workflow(f"hourly-{now.timestamp():.0f}")
    emulator.advance_clock(3600)
    emulator.advance_clock(3600, when=("GET", "/jobs"))
    return workflow_id


def test_a_sensor_finds_the_job_started_after_its_run_on_the_services_clock(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner
) -> None:
    emulator = workflowsvc_connection.emulator
    workflow_id = jobs_around_the_run(emulator)
    result = workflowsvc_run_dag(sensor_dag("kit_clock_sensor", workflow_id))
    before, after = emulator.jobs()
    assert result.xcom("wait", "job_id") == after.id, "the sensor took the job started before the run"
    assert result.succeeded
    assert before.created_at < after.created_at


def test_without_one_clock_the_sensor_takes_a_job_that_ended_before_the_run(
    workflowsvc_connection: Any, workflowsvc_run_dag: DagRunner
) -> None:
    """The trap the kit removes: the run due on Airflow's clock, an hour behind the service's."""
    emulator = workflowsvc_connection.emulator
    workflow_id = jobs_around_the_run(emulator)
    own_clock = DagRunner(workflowsvc_run_dag.airflow, clock=None)
    result = own_clock(sensor_dag("kit_clock_trap", workflow_id))
    before, _ = emulator.jobs()
    assert result.xcom("wait", "job_id") == before.id


# --------------------------------------------------------------------------------------------------
# Event-driven DAGs: the job-event watcher, without a triggerer


def test_an_asset_watcher_dag_gets_one_event_per_finished_job(
    workflowsvc_connection: Any, workflowsvc_job_events: Any
) -> None:
    from airflow.sdk import Asset, AssetWatcher

    from airflow_provider_workflowsvc import WorkflowJobEventTrigger
    from airflow_provider_workflowsvc.testing import job_event_triggers

    emulator = workflowsvc_connection.emulator
    jobs = Asset(
        "kit-jobs", watchers=[AssetWatcher(name="kit", trigger=WorkflowJobEventTrigger(workflow_id="x"))]
    )
    with DAG("kit_on_jobs", schedule=[jobs], start_date=START) as dag:
        task(lambda: 1, task_id="one")()
    (trigger,) = job_event_triggers(dag)
    assert trigger.workflow_id == "x"
    workflow_id = hourly_workflow("kit-events")
    emulator.fail_files("*-2.txt")
    watch = workflowsvc_job_events(dag, workflow_id=workflow_id)
    emulator.advance_clock(2 * 3600)  # two schedule times: two jobs, both end
    payloads = watch.events(2)
    assert {p["job_id"] for p in payloads} == {j.id for j in emulator.jobs()}
    assert {(p["status"], p["failed_count"]) for p in payloads} == {("completed", 1)}
    assert watch.settle() == []  # nothing twice
    emulator.advance_clock(3600)
    (third,) = watch.events(1)
    assert third["job_id"] == emulator.jobs()[-1].id


# --------------------------------------------------------------------------------------------------
# The marker's keep_state and the option, in a pytest session of their own (the tests run in order)

MARKER_TESTS = """
import pytest

from airflow_provider_workflowsvc import WorkflowServiceHook

pytestmark = pytest.mark.usefixtures("workflowsvc_connection")


def names():
    with WorkflowServiceHook() as hook:
        return [w.name for w in hook.list_workflows()]


def test_creates_a_workflow(workflowsvc_emulator):
    assert workflowsvc_emulator.dialect == "platform"  # --workflowsvc-dialect
    with WorkflowServiceHook() as hook:
        hook.create_workflow("left-behind", "basic")


@pytest.mark.workflowsvc(keep_state=True)
def test_keeps_what_the_earlier_test_left(workflowsvc_emulator):
    assert names() == ["left-behind"]


def test_starts_empty_without_it(workflowsvc_emulator):
    assert names() == []


@pytest.mark.workflowsvc(dialect="spec", keep_state=True)
def test_the_other_dialect_is_another_emulator(workflowsvc_emulator):
    assert (workflowsvc_emulator.dialect, names()) == ("spec", [])


@pytest.mark.workflowsvc(dialekt="spec")
def test_a_misspelt_keyword_is_refused(workflowsvc_emulator):
    pass
"""


def test_keep_state_the_dialect_option_and_a_misspelt_marker(tmp_path: Path) -> None:
    (tmp_path / "test_marker.py").write_text(MARKER_TESTS)
    result = run_pytest(sys.executable, tmp_path, "--workflowsvc-dialect", "platform", "-rE")
    assert re.search(r"\b4 passed\b.*\b1 error\b", result.stdout), result.stdout[-4000:]  # warnings between
    assert "takes the keywords dialect, keep_state, conn_id" in result.stdout


def test_without_the_emulator_extra_a_fixture_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None\n"
        "from airflow_provider_workflowsvc.testing.emulator import emulator_for_tests\n"
        "with emulator_for_tests(): pass\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert "pip install 'airflow-provider-workflowsvc[emulator]'" in result.stderr, result.stderr[-2000:]
