"""Issue #22: a job is a task's only on evidence no other client's run could produce.

Each scenario runs the real operator (``dag.test()`` with real Airflow retries, or the task's own
``execute`` with a task state store) against the emulator over HTTP, in both dialects. The truth
comes from the service: every file has a unique content and the emulator writes it into the outputs
of the job that processed it. In every scenario: 0 foreign adoptions and 0 duplicates (no content
processed twice, never more run requests than the service refused). Where the job records list
their files (platform dialect) the task's own job is adopted; where they do not (spec dialect)
nothing proves it and the task fails with ``AmbiguousRunError``, the run not sent again.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
from helpers import TaskStateStore

from airflow_provider_workflowsvc._tasks.submit import AmbiguousRunError
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import PENDING_RUN_KEY, RunWorkflowOperator

from ._helpers import pending_record, task_context, texts_of, use_connection
from .test_identity_scenarios import (
    FAILED,
    FAST,
    RUN_ROUTE,
    SUCCESS,
    post_run,
    run_dag,
    runs_sent,
    text_file,
    when,
    workflow,  # noqa: F401 - the fixture
)

pytestmark = pytest.mark.timeout(180)

SAME_NAME = "report.txt"


def finished_texts(emulator: Any, settings: Any, workflow_id: str) -> dict[str, list[str]]:
    """Each job of the workflow and the file contents it processed (the clock is moved on so all finish)."""
    emulator.clear_faults()
    emulator.advance_clock(3600)
    with WorkflowServiceHook(settings=settings) as hook:
        return {job.id: texts_of(hook, job.id) for job in hook.list_jobs(workflow_id=workflow_id)}


def duplicates(jobs: dict[str, list[str]]) -> int:
    per_text = collections.Counter(text for texts in jobs.values() for text in texts)
    return sum(count - 1 for count in per_text.values())


def job_records_list_files(settings: Any, job_id: str) -> bool:
    with WorkflowServiceHook(settings=settings) as hook:
        return hook.get_job(job_id).input_file_ids is not None


def run_task(workflow_id: str, own: str, **kwargs: Any) -> RunWorkflowOperator:
    """The task under test; ``mark_uploads=True`` unless given (the proof these scenarios attack)."""
    args: dict[str, Any] = {
        "task_id": "run",
        "workflow_id": workflow_id,
        "files": [own],
        "retries": 2,
        "retry_delay": 0,
        "poll_interval": 0.1,
        "deferrable": False,
        "run_grace_period": 1.5,
        "mark_uploads": True,
    }
    return RunWorkflowOperator(**{**args, **kwargs})


@pytest.mark.parametrize("failure", [502, 504, "drop"])
def test_a_same_named_run_of_another_client_is_never_adopted(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: Any,
) -> None:
    """Scenario (same-named files, gateway failure before processing): task A runs the workflow on
    ``report.txt``; a gateway answers 502/504 (or drops the connection) before the service processed
    it: no job exists for A. Another client B runs the same workflow on its own ``report.txt`` inside
    A's grace period. A must not adopt B's job (same name, new, inside the window): it fails as
    ambiguous (nothing proves its run was not processed) and sends nothing again; B's job keeps B's
    content; one job in all."""
    use_connection(monkeypatch, emulator, **FAST)
    own_dir, other_dir = tmp_path / "a", tmp_path / "b"
    own_dir.mkdir()
    other_dir.mkdir()
    own = text_file(own_dir, SAME_NAME, "Task A's report.")
    emulator.set_faults(method="POST", path_regex=RUN_ROUTE, errors=[failure], count=1)
    foreign: list[str] = []
    when(
        lambda: len(runs_sent(emulator, workflow)) >= 1,
        lambda: foreign.append(post_run(emulator, workflow, SAME_NAME, "Client B's report.")),
    )
    dr = run_dag(dag_runner, f"evidence_same_name_{failure}", lambda: run_task(workflow, own))
    ti = dr.get_task_instance("run")
    sent = runs_sent(emulator, workflow)
    jobs = finished_texts(emulator, settings, workflow)
    reported = ti.xcom_pull(task_ids="run", key="job_id")
    figures.update(
        dialect=emulator.dialect,
        run_requests=len(sent),
        jobs=len(jobs),
        foreign_adoptions=int(bool(foreign) and reported == foreign[0]),
        duplicates=duplicates(jobs),
    )
    assert len(foreign) == 1
    assert reported is None, "A reported B's job"
    assert ti.state == FAILED, ti.state
    assert ti.try_number == 1, "AmbiguousRunError fails the task without retries"
    assert len(sent) == 2, "A's run was sent once (B's once)"
    assert jobs == {foreign[0]: ["Client B's report."]}


def test_a_retry_after_a_crash_before_sending_never_adopts_a_same_named_run(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    settings: Any,
    workflow: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario (crash before sending): a try wrote its pending-run record and died before its run
    request left. Another client then runs the workflow on a file of the same name. The retry reads
    the record and looks for that run's job: the other client's job (same name, new, in the window)
    is not it. Nothing proves the run was never sent, so the retry fails as ambiguous, keeps the
    record and sends nothing. Cleared by a person, the task then runs the workflow (its own job)."""
    emulator = workflowsvc_conn
    use_connection(monkeypatch, emulator, timeout=1, **FAST)  # the dead try's request: 1 s in flight at most
    own = text_file(tmp_path, SAME_NAME, "Task A's report.")
    marker = "__wfsvc-00112233445566aa"
    store = TaskStateStore(
        **{PENDING_RUN_KEY: pending_record(workflow, [f"report{marker}.txt"], age=1, marker=marker)}
    )
    foreign = post_run(emulator, workflow, SAME_NAME, "Client B's report.")
    task = run_task(workflow, own, run_grace_period=1)
    with pytest.raises(AmbiguousRunError, match="clear this task") as error:
        task.execute(task_context(store))
    if job_records_list_files(settings, foreign):
        assert marker in str(error.value), "platform: nothing carries the marker (B's job is not named)"
        assert foreign not in str(error.value)
    jobs = finished_texts(emulator, settings, workflow)
    figures.update(dialect=emulator.dialect, run_requests=len(runs_sent(emulator, workflow)), jobs=len(jobs))
    assert jobs == {foreign: ["Client B's report."]}
    assert len(runs_sent(emulator, workflow)) == 1, "only B's run"
    assert store.values[PENDING_RUN_KEY]["marker"] == marker, "the record stays"
    assert store.values[PENDING_RUN_KEY]["failed_closed"] is True

    # A person clears the task: the next try looks once more, finds no job with the marker, runs.
    result = run_task(workflow, own, run_grace_period=1).execute(task_context(store))
    jobs = finished_texts(emulator, settings, workflow)
    assert jobs[result["job_id"]] == ["Task A's report."]
    assert len(jobs) == 2
    assert len(runs_sent(emulator, workflow)) == 2


@pytest.mark.parametrize("marked", [True, False], ids=["mark_uploads", "own-names"])
def test_an_unreadable_2xx_run_answer_makes_one_job_under_retries(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    marked: bool,
) -> None:
    """Scenario (unparsable 2xx): the service creates the job but its answer's record does not parse
    (``created_at`` unreadable); every run answer is so. The task, with 2 Airflow retries, runs the
    workflow once: its job is adopted where its names are marked and the records list their files
    (platform), else it fails as ambiguous without retries. One run request, one job."""
    use_connection(monkeypatch, emulator, **FAST)
    own = text_file(tmp_path, "doc.txt", "The only document.")
    emulator.set_faults(method="POST", path_regex=RUN_ROUTE, errors=["unreadable"], phase="after")
    dag_id = f"evidence_unreadable_2xx_{'marked' if marked else 'own_names'}"
    dr = run_dag(dag_runner, dag_id, lambda: run_task(workflow, own, mark_uploads=marked))
    ti = dr.get_task_instance("run")
    sent = runs_sent(emulator, workflow)
    jobs = finished_texts(emulator, settings, workflow)
    figures.update(dialect=emulator.dialect, run_requests=len(sent), jobs=len(jobs), tries=ti.try_number)
    assert len(jobs) == 1, f"the run was sent again: {jobs}"
    (job_id,) = jobs
    assert len(sent) == 1
    assert jobs[job_id] == ["The only document."]
    if marked and job_records_list_files(settings, job_id):
        assert ti.state == SUCCESS, ti.state
        assert ti.xcom_pull(task_ids="run", key="job_id") == job_id
    else:
        assert ti.state == FAILED, ti.state
        assert ti.try_number == 1


CLOCKS = {
    "service-10s-behind": {"clock_skew": -10},
    "service-10s-ahead": {"clock_skew": 10},
    "service-2min-behind": {"clock_skew": -120},
    "service-2min-ahead": {"clock_skew": 120},
    "naive-local-times": {"timestamp_style": "naive"},
    "postgres-times": {"timestamp_style": "postgres"},
    "list-capped-oldest-first": {"jobs_list_order": "oldest-first", "jobs_list_cap": 5},
}


@pytest.mark.parametrize("service", list(CLOCKS))
def test_a_lost_answer_is_never_run_again_whatever_the_service_clock(
    figures: dict[str, Any],
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    workflow: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    service: str,
) -> None:
    """Scenario (clocks and lists): the service's clock is 10 s or 2 min behind or ahead of the
    worker's, or it writes naive local times (a zone 2 h east of UTC) or PostgreSQL-style ones, or
    its job list is capped with the oldest jobs first (8 past jobs, cap 5). The run is processed and
    its answer lost (504 after processing). The run is never sent again (0 duplicates); the task's
    job is adopted where the records list their files (platform), else it fails as ambiguous."""
    use_connection(monkeypatch, emulator, **FAST)
    for n in range(8 if "capped" in service else 0):
        post_run(emulator, workflow, f"past-{n}.txt", f"Past document {n}.")
    emulator.configure(**CLOCKS[service])
    try:
        own = text_file(tmp_path, "doc.txt", "This task's document.")
        emulator.set_faults(method="POST", path_regex=RUN_ROUTE, errors=[504], phase="after", count=1)
        dr = run_dag(dag_runner, f"evidence_clock_{service}", lambda: run_task(workflow, own))
        ti = dr.get_task_instance("run")
        sent = runs_sent(emulator, workflow)
    finally:
        emulator.configure(
            clock_skew=0, timestamp_style="iso", jobs_list_order="newest-first", jobs_list_cap=None
        )
    jobs = finished_texts(emulator, settings, workflow)
    figures.update(dialect=emulator.dialect, run_requests=len(sent), duplicates=duplicates(jobs))
    assert duplicates(jobs) == 0, f"the run was sent again: {jobs}"
    (own_job,) = [job_id for job_id, texts in jobs.items() if texts == ["This task's document."]]
    assert len(sent) == 9 if "capped" in service else len(sent) == 1
    if job_records_list_files(settings, own_job):
        assert ti.state == SUCCESS, ti.state
        assert ti.xcom_pull(task_ids="run", key="job_id") == own_job
    else:
        assert ti.state == FAILED, ti.state
        assert ti.try_number == 1
