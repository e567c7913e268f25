"""Item 3: a worker dies after the run started; the retry must not run the workflow again.

Real crashes: the task runs in a separate process (``dag.test()`` there, on this session's metadata DB
and emulator) and gets SIGKILL. What the scheduler does about a dead worker (the task instance goes to
``up_for_retry``) is done by hand; the retry then runs here, in the same DAG run, so it sees the
same ``task_state_store`` (Airflow 3.0-3.2: the same Variable):

* killed after the job id was stored, the job finishing while no worker runs: the retry returns the
  job's result without a new run;
* killed after the service created the job but before the worker heard of it (the run's answer is
  held back): the retry finds the run the dead try sent and adopts its job when the job record proves
  it (it lists the run's files: platform dialect), then waits for it; without that proof (spec
  dialect) the retry fails as ambiguous, naming the job, and never runs the workflow again.

The remaining cases (a stale or expired pending-run record, a record of another workflow) use the
operator directly with an in-memory store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.utils.state import TaskInstanceState
from helpers import TaskStateStore

from airflow_provider_workflowsvc._compat import HAS_TASK_STATE_STORE
from airflow_provider_workflowsvc._tasks.evidence import PENDING_RUN_TTL, AmbiguousRunError
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators._lifecycle import DELIVERED_KEY, VariableStore
from airflow_provider_workflowsvc.operators.jobs import PENDING_RUN_KEY, RunWorkflowOperator

from . import _task_process
from ._helpers import pending_record, records_list_files, task_context

pytestmark = pytest.mark.timeout(600)  # a hang guard: each wait is for an event

WORKER = Path(_task_process.__file__)
JOB_KEY = RunWorkflowOperator.external_id_key
MARKER = "__wfsvc-0123456789abcdef"
"""The marker of the run a dead try sent, in the records these tests write."""


@pytest.fixture
def workflow(settings: Any) -> str:
    with WorkflowServiceHook(settings=settings) as hook:
        return str(hook.create_workflow(f"crash-{time.time_ns()}", "basic").id)


@pytest.fixture
def input_file(tmp_path: Path) -> str:
    path = tmp_path / "doc.txt"
    path.write_text("text of a document")
    return str(path)


def run_requests(emulator: Any, workflow: str) -> list[dict[str, Any]]:
    return emulator.requests(method="POST", path_contains=f"/workflows/{workflow}/run")


def wait_for(predicate: Callable[[], Any], what: str, proc: Any = None, interval: float = 0.2) -> Any:
    """
    Wait for ``predicate``'s event: its value, or a failure naming ``what`` when the worker exits first. No
    wall-clock bound: a loaded machine only makes it later, and a hang is the test's timeout's.
    """
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the worker exited ({proc.returncode}) before {what}")
        time.sleep(interval)


def stored_state(dag_id: str) -> dict[str, Any]:
    """The task state store of the run task in ``dag_id`` (key → JSON value), read from the DB: Airflow's
    (3.3+), else the provider's Variable of the task."""
    from airflow import settings
    from sqlalchemy import create_engine, select
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.orm import Session

    if not HAS_TASK_STATE_STORE:
        from airflow.models.variable import Variable

        def read(session: Session) -> dict[str, Any]:
            kept = select(Variable).where(Variable.key.like(f"{VariableStore.PREFIX}{dag_id}:%"))
            return {key: value for row in session.scalars(kept) for key, value in json.loads(row.val).items()}
    else:
        from airflow.models.task_state_store import TaskStateStoreModel

        def read(session: Session) -> dict[str, Any]:
            kept = select(TaskStateStoreModel).where(TaskStateStoreModel.dag_id == dag_id)
            return {row.key: json.loads(row.value) for row in session.scalars(kept)}

    # A connection of its own: the test process's shared session may still hold the snapshot of a
    # transaction an earlier test opened, and would not see what the worker process wrote since.
    engine = create_engine(settings.SQL_ALCHEMY_CONN)
    try:
        for attempt in range(STORE_READS):
            try:
                with Session(engine) as session:
                    return read(session)
            except OperationalError:
                # SQLite, read while the worker process writes (or right after it was killed mid-write):
                # "disk I/O error" or "database is locked" while it lasts, longer on a busy machine (a
                # second was too short at load 10). Read again until a read works; fail if it never does.
                if attempt == STORE_READS - 1:
                    raise
                engine.dispose()
                time.sleep(0.2)
        raise AssertionError("unreachable")
    finally:
        engine.dispose()


STORE_READS = 300
"""Tries to read the task state store while the worker process holds SQLite (0.2 s apart)."""


def start_worker(spec: dict[str, Any], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(spec)], stdout=out, stderr=subprocess.STDOUT
        )


def kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    proc.wait(30)


def scheduler_schedules_a_retry(dag_id: str) -> int:
    """What the scheduler does about a worker that stopped heartbeating: the try failed (the task
    instance is still ``running`` in the DB), the next try is scheduled. Returns its try number."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id)).one()
        assert ti.state == TaskInstanceState.RUNNING, ti.state
        ti.prepare_db_for_next_try(session)
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        return int(ti.try_number)


def retry_in_the_same_run(spec: dict[str, Any]) -> Any:
    """Run the task's next try here, in the same DAG run (``dag.test()`` would replace the run, and
    its task state store with it): what a worker does with the retry. Returns the task instance."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag = _task_process.build_dag(spec)
    query = select(TaskInstance).where(TaskInstance.dag_id == spec["dag_id"])
    with create_session() as session:
        ti = session.scalars(query).one()
        session.expunge(ti)
    _run_task(ti=ti, task=dag.task_dict["run"], run_triggerer=True)
    with create_session() as session:
        ti = session.scalars(query).one()
        session.expunge(ti)
    return ti


def spec_for(dag_id: str, workflow: str, input_file: str, mark_uploads: bool = False) -> dict[str, Any]:
    return {
        "dag_id": dag_id,
        "logical_date": "2026-11-22T00:00:00+00:00",
        "task": {
            "workflow_id": workflow,
            "files": [input_file],
            "mark_uploads": mark_uploads,
            "poll_interval": 0.2,
            "deferrable": False,
            "retries": 2,
            "retry_delay": 0,
        },
    }


def test_killed_after_the_job_id_was_stored(
    figures: dict[str, Any], dag_runner: Any, emulator: Any, workflow: str, input_file: str, tmp_path: Path
) -> None:
    """The job finishes while no worker runs: the retry returns its result, with no new run."""
    emulator.configure(processing_delay=100)  # the job waits for the emulator clock
    spec = spec_for(f"reliability_crash_stored_{emulator.dialect}", workflow, input_file)
    proc = start_worker(spec, tmp_path / "worker.log")
    try:
        job_id = wait_for(lambda: stored_state(spec["dag_id"]).get(JOB_KEY), "the job id to be stored", proc)
        wait_for(lambda: emulator.requests(path_contains=f"/jobs/{job_id}/details"), "a poll", proc)
        killed_at = time.monotonic()
        kill(proc)
    finally:
        kill(proc)
    assert len(run_requests(emulator, workflow)) == 1
    try_number = scheduler_schedules_a_retry(spec["dag_id"])
    emulator.advance_clock(1000)  # the job completes while no worker runs

    ti = retry_in_the_same_run(spec)
    assert ti.state == TaskInstanceState.SUCCESS
    assert ti.try_number == try_number == 2
    summary = ti.xcom_pull(task_ids="run", run_id=ti.run_id)
    assert summary["job_id"] == job_id
    assert summary["status"] == "completed"
    runs = run_requests(emulator, workflow)
    with WorkflowServiceHook(settings=_settings(emulator)) as hook:
        jobs = hook.list_jobs(workflow_id=workflow)
    assert len(runs) == 1
    assert [j.id for j in jobs] == [job_id]
    # after a success the job stays marked with its clear (3.3: a retry of a success Airflow did not record
    # goes on with it); the Variable of Airflow < 3.3 is deleted
    kept = {JOB_KEY: job_id, DELIVERED_KEY: ti.max_tries} if HAS_TASK_STATE_STORE else {}
    assert stored_state(spec["dag_id"]) == kept
    figures.update(
        crashes=1,
        tries=ti.try_number,
        run_requests=len(runs),
        jobs=len(jobs),
        duplicates=len(jobs) - 1,
        retry_seconds=round(time.monotonic() - killed_at, 1),
    )


@pytest.mark.parametrize("marked", [True, False], ids=["mark_uploads", "own-names"])
def test_killed_before_the_job_id_was_stored(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    workflow: str,
    input_file: str,
    tmp_path: Path,
    capsys: Any,
    marked: bool,
) -> None:
    """The service created the job but its answer never reached the worker, which then died: the
    retry adopts that job when its record lists the run's marked files (``mark_uploads=True``), and
    waits for it; otherwise (the user's own names, or records that list no files) it fails as
    ambiguous (no retry), naming the job. Either way it never runs the workflow again."""
    emulator.configure(processing_delay=100)
    emulator.set_faults(method="POST", path="/api/v1/workflows/*/run", latency=3600, phase="after")
    dag_id = f"reliability_crash_pending_{emulator.dialect}_{'marked' if marked else 'own_names'}"
    spec = spec_for(dag_id, workflow, input_file, mark_uploads=marked)
    proc = start_worker(spec, tmp_path / "worker.log")
    try:
        wait_for(lambda: run_requests(emulator, workflow), "the run request", proc)
        pending = wait_for(lambda: stored_state(spec["dag_id"]).get(PENDING_RUN_KEY), "the pending run")
        kill(proc)
    finally:
        kill(proc)
    emulator.clear_faults()  # the held answer goes nowhere: the worker is gone
    with WorkflowServiceHook(settings=_settings(emulator)) as hook:
        (created,) = hook.list_jobs(workflow_id=workflow)
    assert pending["workflow_id"] == workflow
    if marked:
        assert pending["files"] == [f"doc{pending['marker']}.txt"], "the name sent carries the run's marker"
    else:
        assert pending["files"] == ["doc.txt"], "the user's own name"
        assert pending["marker"] is None
    assert abs(pending["sent_at"] - time.time()) < 120
    assert JOB_KEY not in stored_state(spec["dag_id"])  # the dead try never learnt the job id
    scheduler_schedules_a_retry(spec["dag_id"])
    assert len(run_requests(emulator, workflow)) == 1

    emulator.clear_requests()
    ended = threading.Event()
    finisher = _finish_the_job_once_polled(emulator, ended)
    try:
        ti = retry_in_the_same_run(spec)
    finally:
        ended.set()
        finisher.join()
    retry_runs = run_requests(emulator, workflow)
    with WorkflowServiceHook(settings=_settings(emulator)) as hook:
        jobs = hook.list_jobs(workflow_id=workflow)
    assert retry_runs == []
    assert [j.id for j in jobs] == [created.id]
    if marked and records_list_files(created):
        assert ti.state == TaskInstanceState.SUCCESS, ti.state
        assert ti.xcom_pull(task_ids="run", run_id=ti.run_id)["job_id"] == created.id
    else:  # no proof: failed without retries, the record kept so that no later try runs it again
        assert ti.state == TaskInstanceState.FAILED, ti.state
        assert stored_state(spec["dag_id"])[PENDING_RUN_KEY]["files"] == pending["files"]
        out = capsys.readouterr().out
        assert "AmbiguousRunError" in out
        assert created.id in out, "the ambiguity names the job"
    figures.update(
        mark_uploads=marked,
        crashes=1,
        run_requests=1 + len(retry_runs),
        jobs=len(jobs),
        duplicates=len(jobs) - 1,
        adopted=int(ti.state == TaskInstanceState.SUCCESS),
    )


def _finish_the_job_once_polled(emulator: Any, ended: threading.Event) -> threading.Thread:
    """Let the jobs complete once the retry is polling (whichever job it polls: a wrong one fails the
    test on its job id, not on a timeout); ``ended``: the retry ended first (it never polled)."""

    def finish() -> None:
        while not emulator.requests(path_contains="/details"):
            if ended.wait(0.1):
                return
        emulator.advance_clock(1000)

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def _settings(emulator: Any) -> Any:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    return ConnectionSettings(base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key)


# -- the pending-run record, directly ----------------------------------------------------------------


def run_op(workflow: str, input_file: str) -> RunWorkflowOperator:
    return RunWorkflowOperator(
        task_id="run", workflow_id=workflow, files=[input_file], poll_interval=0.05, deferrable=False
    )


def test_a_pending_run_is_adopted_once(workflowsvc_conn: Any, workflow: str, input_file: str) -> None:
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.02)
    sent = f"doc{MARKER}.txt"
    with emulator.api_client() as api:  # the run a dead try sent
        created = api.post(f"/workflows/{workflow}/run", files={"input_files": (sent, b"x")}).json()
    store = TaskStateStore(**{PENDING_RUN_KEY: pending_record(workflow, [sent], age=1, marker=MARKER)})
    with WorkflowServiceHook(settings=_settings(emulator)) as hook:
        proven = records_list_files(hook.get_job(created["id"]))
    if not proven:  # spec dialect: the job cannot be proven to be the dead try's: never adopted
        with pytest.raises(AmbiguousRunError, match=created["id"]):
            run_op(workflow, input_file).execute(task_context(store))
        assert len(run_requests(emulator, workflow)) == 1
        assert PENDING_RUN_KEY in store.values
        return
    assert run_op(workflow, input_file).execute(task_context(store))["job_id"] == created["id"]
    assert len(run_requests(emulator, workflow)) == 1
    assert store.values == {}  # job id and pending run forgotten after success
    # Cleared later, the task runs the workflow again: nothing pending, nothing stored.
    assert run_op(workflow, input_file).execute(task_context(store))["job_id"] != created["id"]
    assert len(run_requests(emulator, workflow)) == 2


@pytest.mark.parametrize("stale", ["stored-job", "other-workflow", "expired", "old-format"])
def test_a_stale_pending_run_is_not_adopted(
    workflowsvc_conn: Any, workflow: str, input_file: str, stale: str
) -> None:
    """Scenario: a record left by a try that did store its job (killed between the two writes), one
    of another workflow, one older than the record's lifetime, or one an older version wrote never
    makes a retry adopt a job (or fail as ambiguous): the retry runs the workflow and succeeds. The
    stored job shows it is the record's run by its marker (platform); in the spec dialect nothing
    does, and the retry fails as ambiguous instead (never a second run unproven)."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.02)
    sent = f"e{MARKER}.txt"
    with emulator.api_client() as api:
        old = api.post(f"/workflows/{workflow}/run", files={"input_files": (sent, b"")}).json()["id"]
    emulator.advance_clock(10)  # the old job failed (empty file): the retry must run again
    if stale == "stored-job":  # the record of the run whose job the store holds (carries its marker)
        store = TaskStateStore(
            **{JOB_KEY: old, PENDING_RUN_KEY: pending_record(workflow, [sent], age=600, marker=MARKER)}
        )
        with WorkflowServiceHook(settings=_settings(emulator)) as hook:
            if not records_list_files(hook.get_job(old)):  # spec: nothing shows the record is that job's
                with pytest.raises(AmbiguousRunError):
                    run_op(workflow, input_file).execute(task_context(store))
                assert len(run_requests(emulator, workflow)) == 1
                return
    elif stale == "other-workflow":
        other = "0b7c6a9e-3f0e-4a51-9c7b-1d2e3f4a5b6c"
        store = TaskStateStore(**{PENDING_RUN_KEY: pending_record(other, ["e.txt"])})
    elif stale == "expired":
        expired = pending_record(workflow, ["e.txt"], age=PENDING_RUN_TTL + 60)
        store = TaskStateStore(**{PENDING_RUN_KEY: expired})
    else:
        store = TaskStateStore(**{PENDING_RUN_KEY: {"workflow_id": workflow, "before": []}})
    summary = run_op(workflow, input_file).execute(task_context(store))
    assert summary["job_id"] != old
    assert summary["status"] == "completed"
    assert len(run_requests(emulator, workflow)) == 2
