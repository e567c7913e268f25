"""Issue #11: the named identity scenarios, each in a real ``dag.test()`` run with real Airflow retries.

The emulator is the service (real HTTP); what a task reports is checked against the service's own
record of which file each job processed (its outputs), never against what the provider believes.
Where an outcome depends on what the service's job records prove (``input_file_ids``: the platform
dialect), the test says what each dialect must do; both must never report another run's job and
never run the workflow twice.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from airflow.sdk import DAG
from airflow.utils.state import TaskInstanceState

from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.operators.jobs import CancelJobOperator, RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import DeleteWorkflowOperator
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

from ._helpers import documents_of, records_list_files, use_connection

pytestmark = pytest.mark.timeout(180)

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
RUN_ROUTE = r"/workflows/[0-9a-f-]{36}/run$"
SUCCESS, FAILED = TaskInstanceState.SUCCESS, TaskInstanceState.FAILED
FAST = {"retry_wait": 0.02, "retry_max_wait": 0.1}


@pytest.fixture
def workflow(settings: Any) -> str:
    with WorkflowServiceHook(settings=settings) as hook:
        return str(hook.create_workflow(f"identity-{time.time_ns()}", "basic").id)


def text_file(directory: Path, name: str, text: str = "Some text the service processes.") -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


def run_dag(dag_runner: Any, dag_id: str, *tasks: Callable[[], Any]) -> Any:
    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        for make in tasks:
            make()
    return dag_runner(dag)


def runs_sent(emulator: Any, workflow: str) -> list[dict[str, Any]]:
    return emulator.requests(method="POST", path_contains=f"/workflows/{workflow}/run")


def post_run(emulator: Any, workflow: str, name: str, text: str = "Another client's document.") -> str:
    """A run started by someone else (another DAG, a schedule, a person): its job id."""
    settings = ConnectionSettings(base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key)
    with tempfile.TemporaryDirectory() as directory, WorkflowServiceHook(settings=settings) as hook:
        path = Path(directory) / name
        path.write_text(text)
        before = {job.id for job in hook.list_jobs(workflow_id=workflow)}
        job = hook.run_workflow(workflow, files=[str(path)])
        if job is not None:
            return job.id
        (new,) = [job.id for job in hook.list_jobs(workflow_id=workflow) if job.id not in before]
        return new


def when(predicate: Callable[[], bool], then: Callable[[], Any], timeout: float = 60) -> threading.Thread:
    """Do ``then`` in the background as soon as ``predicate`` holds."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        then()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def finished_jobs(emulator: Any, settings: Any, workflow: str) -> dict[str, list[str]]:
    """Each job of the workflow and the files it processed (the clock is moved on so all finish)."""
    emulator.clear_faults()
    emulator.advance_clock(3600)
    with WorkflowServiceHook(settings=settings) as hook:
        return {job.id: documents_of(hook, job.id) for job in hook.list_jobs(workflow_id=workflow)}


def test_a_try_that_sent_no_run_leaves_no_record_to_adopt(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario (stale record): the first try's three run requests are refused (503: not processed),
    so it fails having created nothing; meanwhile another client runs the workflow. The retry must
    not take that job for the earlier try's: it runs the workflow and reports its own job."""
    use_connection(monkeypatch, emulator, **FAST)
    own = text_file(tmp_path, "own.txt")
    emulator.set_faults(method="POST", path_regex=RUN_ROUTE, errors=[503], count=3)
    foreign: list[str] = []
    when(
        lambda: len(runs_sent(emulator, workflow)) >= 3,
        lambda: foreign.append(post_run(emulator, workflow, "x.txt")),
    )
    dr = run_dag(
        dag_runner,
        "identity_no_run_no_record",
        lambda: RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=[own],
            submit_attempts=3,
            retries=1,
            retry_delay=0,
            poll_interval=0.1,
            deferrable=False,
            run_grace_period=2,
        ),
    )
    ti = dr.get_task_instance("run")
    jobs = finished_jobs(emulator, settings, workflow)
    reported = ti.xcom_pull(task_ids="run", key="job_id")
    figures.update(tries=ti.try_number, jobs=len(jobs), foreign_adoptions=int(reported in foreign))
    assert ti.state == SUCCESS, (ti.state, ti.try_number)
    assert ti.try_number == 2, (ti.state, ti.try_number)
    assert len(foreign) == 1
    assert reported != foreign[0]
    assert jobs[reported] == ["own.txt"]
    assert len(jobs) == 2


@pytest.mark.parametrize("marked", [True, False], ids=["mark_uploads", "own-names"])
def test_a_same_named_run_in_flight_is_adopted_only_by_its_marker(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
    marked: bool,
) -> None:
    """Scenario (two candidates): the task's run is processed but its answer is lost; while it was
    in flight another client ran the workflow with a file of the same name. Where the names were
    marked (``mark_uploads=True``) and job records list their files (platform), the task's own job
    carries its run's marker and is adopted (the other one is not); otherwise (the user's own names:
    both jobs list ``same.txt``; or records without files: spec) neither job can be told to be the
    task's: the task fails at once (no retry would know more), naming both jobs. It never runs the
    workflow again."""
    use_connection(monkeypatch, emulator, **FAST)
    own = text_file(tmp_path, "same.txt")
    emulator.set_faults(
        method="POST", path_regex=RUN_ROUTE, errors=["drop"], latency=1.0, phase="after", count=1
    )
    foreign: list[str] = []
    when(
        lambda: len(runs_sent(emulator, workflow)) >= 1,
        lambda: foreign.append(post_run(emulator, workflow, "same.txt")),
    )
    dr = run_dag(
        dag_runner,
        f"identity_two_candidates_{'marked' if marked else 'own_names'}",
        lambda: RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=[own],
            retries=2,
            retry_delay=0,
            poll_interval=0.1,
            deferrable=False,
            run_grace_period=2,
            mark_uploads=marked,
        ),
    )
    ti = dr.get_task_instance("run")
    out = capsys.readouterr().out
    jobs = finished_jobs(emulator, settings, workflow)
    figures.update(tries=ti.try_number, jobs=len(jobs), run_requests=len(runs_sent(emulator, workflow)))
    assert ti.try_number == 1, (ti.state, ti.try_number)
    assert len(jobs) == 2
    assert all(names == ["same.txt"] for names in jobs.values())
    assert len(runs_sent(emulator, workflow)) == 2
    with WorkflowServiceHook(settings=settings) as hook:
        proven = marked and records_list_files(hook.get_job(foreign[0]))
    if proven:
        assert ti.state == SUCCESS, (ti.state, ti.try_number)
        (own_job,) = set(jobs) - set(foreign)
        assert ti.xcom_pull(task_ids="run", key="job_id") == own_job
        return
    assert ti.state == FAILED, (ti.state, ti.try_number)
    assert "AmbiguousRunError" in out
    assert all(job_id in out for job_id in jobs)
    assert "clear this task" in out
    assert ti.xcom_pull(task_ids="run", key="job_id") is None


@pytest.mark.parametrize("marked", [True, False], ids=["mark_uploads", "own-names"])
def test_a_run_processed_after_the_client_timeout_is_not_sent_again(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    marked: bool,
) -> None:
    """Scenario (late processing): the service holds the run longer than the client waits (read
    timeout 1 s), then processes it. The task re-reads the job list for its grace period instead of
    sending the run again: one run, one job. Marked names in job records that list their files let
    the task adopt it; otherwise (the user's own names, or no file lists) the task fails as
    ambiguous, naming the job."""
    use_connection(monkeypatch, emulator, timeout=1, **FAST)
    own = text_file(tmp_path, "late.txt")
    emulator.set_faults(method="POST", path_regex=RUN_ROUTE, latency=2.0, count=1)
    dr = run_dag(
        dag_runner,
        f"identity_late_processing_{'marked' if marked else 'own_names'}",
        lambda: RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=[own],
            retries=1,
            retry_delay=0,
            poll_interval=0.1,
            deferrable=False,
            run_grace_period=5,
            mark_uploads=marked,
        ),
    )
    ti = dr.get_task_instance("run")
    sent = runs_sent(emulator, workflow)
    jobs = finished_jobs(emulator, settings, workflow)
    (job_id,) = jobs
    with WorkflowServiceHook(settings=settings) as hook:
        proven = marked and records_list_files(hook.get_job(job_id))
    figures.update(run_requests=len(sent), jobs=len(jobs), adopted=int(ti.state == SUCCESS))
    assert len(sent) == 1
    assert jobs[job_id] == ["late.txt"]
    if proven:
        assert ti.state == SUCCESS
        assert ti.xcom_pull(task_ids="run", key="job_id") == job_id
    else:
        assert ti.state == FAILED
        assert ti.try_number == 1


class _GarbledOnce:
    """A transport that answers the first ``/details`` request with a non-JSON 200 (a proxy's page)."""

    def __init__(self, inner: Any, garbled: list[str]) -> None:
        self.inner, self.garbled = inner, garbled

    def _garble(self, request: httpx.Request) -> httpx.Response | None:
        if not request.url.path.endswith("/details") or self.garbled:
            return None
        self.garbled.append(str(request.url))
        return httpx.Response(200, content=b"<html>upstream hiccup</html>", request=request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        garbled = self._garble(request)
        if garbled is None:
            return response
        response.close()
        return garbled

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        garbled = self._garble(request)
        if garbled is None:
            return response
        await response.aclose()
        return garbled

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_an_unreadable_2xx_during_the_wait_is_survived(
    dag_runner: Any,
    emulator: Any,
    workflow: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    deferrable: bool,
) -> None:
    """Scenario (bad 2xx): one status check during the wait gets a 200 whose body is not JSON. The
    wait goes on (like after a 503) and the task succeeds with its job; it never fails leaving the
    job running, untracked."""
    use_connection(monkeypatch, emulator, **FAST)
    garbled: list[str] = []
    sync_conn, async_conn = WorkflowServiceHook.get_conn, WorkflowServiceAsyncHook.get_async_conn

    def get_conn(self: WorkflowServiceHook) -> httpx.Client:
        fresh = self._client is None
        client = sync_conn(self)
        if fresh:
            client._transport = _GarbledOnce(client._transport, garbled)  # type: ignore[assignment]
        return client

    async def get_async_conn(self: WorkflowServiceAsyncHook) -> httpx.AsyncClient:
        fresh = self._client is None
        client = await async_conn(self)
        if fresh:
            client._transport = _GarbledOnce(client._transport, garbled)  # type: ignore[assignment]
        return client

    monkeypatch.setattr(WorkflowServiceHook, "get_conn", get_conn)
    monkeypatch.setattr(WorkflowServiceAsyncHook, "get_async_conn", get_async_conn)
    emulator.configure(processing_delay=0.2)
    own = text_file(tmp_path, "doc.txt")
    dr = run_dag(
        dag_runner,
        f"identity_bad_2xx_{deferrable}",
        lambda: RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=[own], poll_interval=0.1, deferrable=deferrable
        ),
    )
    ti = dr.get_task_instance("run")
    assert len(garbled) == 1, "the non-JSON answer was not served"
    assert ti.state == SUCCESS, (ti.state, ti.try_number)
    assert ti.try_number == 1, (ti.state, ti.try_number)
    assert ti.xcom_pull(task_ids="run")["status"] == "completed"
    assert len(runs_sent(emulator, workflow)) == 1


def test_a_trigger_started_past_its_deadline_polls_once(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    workflow: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario (late trigger): the triggerer picks the trigger up after its deadline (a backlog).
    The job completed meanwhile: the trigger polls once and reports success, not a timeout."""
    use_connection(monkeypatch, emulator, **FAST)
    original = WorkflowJobTrigger.run

    async def run_late(self: WorkflowJobTrigger) -> Any:
        await asyncio.sleep(max(self.deadline - time.time(), 0.0) + 0.5)
        async for event in original(self):
            yield event

    monkeypatch.setattr(WorkflowJobTrigger, "run", run_late)
    own = text_file(tmp_path, "doc.txt")
    dr = run_dag(
        dag_runner,
        "identity_late_trigger",
        lambda: RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=[own], poll_interval=0.1, timeout=1, deferrable=True
        ),
    )
    ti = dr.get_task_instance("run")
    polls = emulator.requests(method="GET", path_contains="/details")
    figures.update(polls=len(polls))
    assert ti.state == SUCCESS, ti.state
    assert ti.xcom_pull(task_ids="run")["outcome"] == "success"
    assert len(polls) == 1


@pytest.mark.airflow_min(
    "3.3",
    reason="the pin survives reschedules in the task state store; the XCom fallback of Airflow < 3.3 is "
    "cleared when a rescheduled sensor starts again (README, Compatibility)",
)
def test_the_workflow_sensor_follows_the_job_it_found_across_reschedules(
    figures: dict[str, Any], dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path
) -> None:
    """Scenario (sensor pinning): a reschedule-mode sensor waits for the latest job of a workflow and
    finds job A; before its next poke a newer job B appears and completes, while A fails. The sensor
    reports A's failure: it never switches to B."""
    emulator.configure(processing_delay=100)
    after = emulator.now().isoformat()
    job_a = post_run(emulator, workflow, "empty.txt", text="")  # an empty file: A fails
    job_b: list[str] = []

    def newer_job_appears_then_both_end() -> None:
        job_b.append(post_run(emulator, workflow, "good.txt"))
        emulator.advance_clock(10_000)

    when(
        lambda: bool(emulator.requests(path_contains=f"/jobs/{job_a}/details")),
        newer_job_appears_then_both_end,
    )
    dr = run_dag(
        dag_runner,
        "identity_sensor_pinning",
        lambda: WorkflowJobSensor(
            task_id="wait",
            workflow_id=workflow,
            created_after=after,
            mode="reschedule",
            poke_interval=0.5,
            timeout=60,
            deferrable=False,
        ),
    )
    ti = dr.get_task_instance("wait")
    polled = {r["path"].split("/")[-2] for r in emulator.requests(path_contains="/details")}
    figures.update(jobs_polled=len(polled))
    assert job_b, "the newer job was never started"
    assert ti.state == FAILED, ti.state
    assert ti.xcom_pull(task_ids="wait", key="job_id") == job_a
    assert polled == {job_a}, "the sensor looked at another job than the one it found"


def test_lost_answers_of_a_delete_and_a_cancel_are_verified(
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario (lost answers): the service performs a DELETE and a cancel, but both answers are
    lost (the connection drops after processing); the hook's retry then gets 404 and 409. The tasks
    read the resource instead of assuming: the workflow is gone, the job is stopped: both succeed,
    even with ``missing_ok=False`` and ``fail_if_ended=True``."""
    use_connection(monkeypatch, emulator, **FAST)
    emulator.configure(processing_delay=100)
    with WorkflowServiceHook(settings=settings) as hook:
        doomed = str(hook.create_workflow(f"doomed-{time.time_ns()}", "basic").id)
    job_id = post_run(emulator, workflow, "doc.txt")
    emulator.set_faults(
        rules=[
            {"method": "DELETE", "errors": ["drop"], "phase": "after", "count": 1},
            {"method": "POST", "path": "*/cancel", "errors": ["drop"], "phase": "after", "count": 1},
        ]
    )
    dr = run_dag(
        dag_runner,
        "identity_lost_answers",
        lambda: DeleteWorkflowOperator(task_id="delete", workflow_id=doomed, missing_ok=False),
        lambda: CancelJobOperator(task_id="cancel", job_id=job_id, fail_if_ended=True),
    )
    faults = [r["fault"] for r in emulator.requests() if r["fault"]]
    assert faults == ["drop after processing"] * 2, faults
    assert dr.get_task_instance("delete").state == SUCCESS
    cancel = dr.get_task_instance("cancel")
    assert cancel.state == SUCCESS
    assert cancel.xcom_pull(task_ids="cancel")["cancelled"] is True
    with WorkflowServiceHook(settings=settings) as hook:
        assert doomed not in {str(w.id) for w in hook.list_workflows()}
        assert hook.get_job(job_id).status.value == "stopped"
