"""RunWorkflowOperator, DownloadJobOutputOperator and CancelJobOperator in real ``dag.test()`` runs
against the emulator (deferrable and not)."""

from __future__ import annotations

import json
import math
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.utils.state import DagRunState, TaskInstanceState
from helpers import TEST_API_KEY, TEST_TOKEN

from airflow_provider_workflowsvc._compat import HAS_TASK_STATE_STORE
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators._lifecycle import VariableStore
from airflow_provider_workflowsvc.operators.jobs import (
    CancelJobOperator,
    DownloadJobOutputOperator,
    RunWorkflowOperator,
)

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SUCCESS, FAILED = TaskInstanceState.SUCCESS, TaskInstanceState.FAILED


@pytest.fixture
def workflow(settings: Any) -> str:
    """A local-to-local workflow (3 nodes) in the emulator."""
    with WorkflowServiceHook(settings=settings) as hook:
        return str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)


def write(directory: Path, **files: str | bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = directory / name.replace("_", ".")
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return directory


def state(dr: Any, task_id: str) -> Any:
    return dr.get_task_instance(task_id).state


def xcom(dr: Any, task_id: str, key: str = "return_value") -> Any:
    return dr.get_task_instance(task_id).xcom_pull(task_ids=task_id, key=key)


def runs(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.requests(method="POST", path_contains="/run") if r["path"].endswith("/run")]


def test_local_files_run_and_download(dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path) -> None:
    """Both waiting modes; outputs downloaded under the documents' names."""
    inputs = write(tmp_path / "in", a_txt="hello world", b_md="# Title\n\nSome text.")
    out = tmp_path / "out"
    with DAG("wfsvc_run_download", schedule=None, start_date=START, catchup=False) as dag:
        sync = RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(inputs), poll_interval=0.1, deferrable=False
        )
        RunWorkflowOperator(
            task_id="run_deferred",
            workflow_id="{{ params.wf }}",
            files=[str(inputs / "*.txt")],
            poll_interval=0.1,
            deferrable=True,
        )
        download = DownloadJobOutputOperator(task_id="download", run_task_id="run", output_dir=str(out))
        sync >> download
        dag.params["wf"] = workflow
    dr = dag_runner(dag)
    assert dr.state == DagRunState.SUCCESS
    assert [state(dr, t) for t in ("run", "run_deferred", "download")] == [SUCCESS] * 3
    summary = xcom(dr, "run")
    assert summary["status"] == "completed"
    assert summary["failed_file_count"] == 0
    assert len(summary["output_files"]) == 2
    assert [n["success"] for n in summary["node_stats"]] == [2, 2, 2]
    assert xcom(dr, "run", "job_id") == summary["job_id"]
    assert xcom(dr, "run", "_link_WorkflowJobLink") == "", "no ui_url extra: no link (never the API record)"
    deferred_summary = xcom(dr, "run_deferred")
    assert deferred_summary["status"] == "completed"
    assert len(deferred_summary["output_files"]) == 1
    assert xcom(dr, "run_deferred", "job_id") == deferred_summary["job_id"]  # pushed before deferring
    assert xcom(dr, "run_deferred", "_link_WorkflowJobLink") == ""
    assert sorted(p.name for p in out.iterdir()) == ["a.txt.json", "b.md.json"]
    assert xcom(dr, "download") == [str(out / "a.txt.json"), str(out / "b.md.json")]
    elements = json.loads((out / "a.txt.json").read_text())
    # The output's own content is the service's: the name it processed, the user's own (issue #32).
    assert elements[0]["metadata"]["filename"] == "a.txt"
    assert "hello world" in elements[0]["text"]
    assert sorted(o["document"] for o in summary["output_files"]) == ["a.txt", "b.md"]
    assert len(runs(emulator)) == 2


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_failed_files_fail_the_task(
    dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path, capsys: Any, deferrable: bool
) -> None:
    inputs = write(tmp_path, good_txt="fine text", empty_txt="", blob_json=b"\x00\x01")
    with DAG(f"wfsvc_failed_files_{deferrable}", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(inputs), poll_interval=0.1, deferrable=deferrable
        )
    dr = dag_runner(dag)
    assert dr.state == DagRunState.FAILED
    assert state(dr, "run") == FAILED
    summary = xcom(dr, "run")
    assert summary["status"] == "completed"
    assert summary["failed_file_count"] == 2
    assert sorted(f["document"] for f in summary["failed_files"]) == ["blob.json", "empty.txt"]
    out = capsys.readouterr().out
    assert "2 file(s) failed" in out
    assert "empty.txt: file is empty" in out
    assert TEST_TOKEN not in out
    assert TEST_API_KEY not in out


def test_a_failed_job_fails_the_task(dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path) -> None:
    inputs = write(tmp_path, empty_txt="", blank_md="   ")
    with DAG("wfsvc_job_failed", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(task_id="run", workflow_id=workflow, files=str(inputs), poll_interval=0.1)
    dr = dag_runner(dag)
    assert state(dr, "run") == FAILED
    summary = xcom(dr, "run")
    assert summary["status"] == "failed"
    assert summary["outcome"] == "failed"
    assert "All 2 file(s) failed" in summary["message"]


def _cancel_when_running(emulator: Any, settings: Any, workflow: str) -> threading.Thread:
    """Cancel the workflow's first job from another thread once it is in progress."""

    def cancel() -> None:
        with WorkflowServiceHook(settings=settings) as hook:
            for _ in range(400):
                jobs = hook.list_jobs(workflow_id=workflow)
                if jobs and jobs[0].status.value == "in progress":
                    hook.cancel_job(jobs[0].id)
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=cancel, daemon=True)
    thread.start()
    return thread


def test_a_job_cancelled_while_running_fails_the_task(
    dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path
) -> None:
    emulator.configure(processing_delay=0.5)
    inputs = write(tmp_path, a_txt="one", b_txt="two")
    thread = _cancel_when_running(emulator, settings, workflow)
    with DAG("wfsvc_job_cancelled", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(task_id="run", workflow_id=workflow, files=str(inputs), poll_interval=0.2)
    dr = dag_runner(dag)
    thread.join(5)
    assert state(dr, "run") == FAILED
    summary = xcom(dr, "run")
    assert summary["status"] == "stopped"
    assert "cancelled" in summary["message"]


def test_timeout_fails_and_cancels_the_job(
    dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path
) -> None:
    """The timeouts end both waits (the jobs would run for hours: the run ending at all is the timeouts'
    doing), fail the tasks, and cancel the job unless cancel_on_timeout=False."""
    emulator.configure(processing_delay=3600)
    inputs = write(tmp_path, a_txt="one")
    with DAG("wfsvc_timeout", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(inputs), poll_interval=0.2, timeout=1
        )
        RunWorkflowOperator(
            task_id="run_deferred",
            workflow_id=workflow,
            files=str(inputs),
            poll_interval=0.2,
            timeout=1,
            deferrable=True,
            cancel_on_timeout=False,
        )
    dr = dag_runner(dag)
    assert state(dr, "run") == FAILED
    assert state(dr, "run_deferred") == FAILED
    assert {xcom(dr, t)["outcome"] for t in ("run", "run_deferred")} == {"timeout"}
    ids = {t: xcom(dr, t, "job_id") for t in ("run", "run_deferred")}
    with WorkflowServiceHook(settings=settings) as hook:
        assert hook.get_job(ids["run"]).status.value == "stopped"
        assert hook.get_job(ids["run_deferred"]).status.is_active  # cancel_on_timeout=False: still running


def test_cancel_operator(
    dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path
) -> None:
    emulator.configure(processing_delay=30)
    inputs = write(tmp_path, a_txt="one")
    with DAG("wfsvc_cancel_op", schedule=None, start_date=START, catchup=False) as dag:
        run = RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(inputs), wait_for_completion=False
        )
        first = CancelJobOperator(task_id="cancel", job_id="{{ ti.xcom_pull(task_ids='run', key='job_id') }}")
        again = CancelJobOperator(
            task_id="cancel_again", job_id="{{ ti.xcom_pull(task_ids='run', key='job_id') }}"
        )
        run >> first >> again
    dr = dag_runner(dag)
    assert dr.state == DagRunState.SUCCESS
    assert xcom(dr, "cancel")["cancelled"] is True
    again = xcom(dr, "cancel_again")
    # one spelling in XCom whatever the service's dialect (STOPPED on the platform)
    assert again == {"job_id": xcom(dr, "run", "job_id"), "cancelled": False, "status": "stopped"}
    assert len(emulator.requests(method="POST", path_contains="/cancel")) == 1


STORED: list[Any] = []
"""The job each try of a :class:`CrashingRun` found stored by an earlier one (None: none)."""


class CrashingRun(RunWorkflowOperator):
    """Its first try dies (like a killed worker) right after it stored its job id (``crash``
    ``"after-storing"``), also every later try right after it read it (``"every-try"``), or it fails
    after it delivered (``"after-delivering"``: as when Airflow fails a try before recording its success)."""

    def __init__(self, *, crash: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crash = crash

    def execute(self, context: Any) -> Any:
        summary = super().execute(context)
        if self.crash == "after-delivering" and context["ti"].try_number == 1:
            raise RuntimeError("the try failed after it delivered")
        return summary

    def _stored_job(self, context: Any, store: Any) -> Any:
        found = super()._stored_job(context, store)
        STORED.append(None if found is None else found[0])
        if found is not None and self.crash == "every-try":
            raise RuntimeError("simulated worker crash")
        return found

    def _wait(self, context: Any, job_id: str) -> Any:
        if context["ti"].try_number == 1 and self.crash != "after-delivering":
            raise RuntimeError("simulated worker crash")
        return super()._wait(context, job_id)


def task_state_variables() -> dict[str, Any]:
    """The Variables that keep a task's state between tries (Airflow 3.0-3.2) in the DB: key → value."""
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        kept = select(Variable).where(Variable.key.like(f"{VariableStore.PREFIX}%"))
        return {row.key: json.loads(row.val) for row in session.scalars(kept)}


@pytest.mark.compat
# Airflow 3.0 warned on every write of a dict to a Variable (#47): the store writes what the API keeps
@pytest.mark.filterwarnings("error:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("crash", ["after-storing", "every-try", "after-delivering"])
def test_durable_retry_reconnects_instead_of_running_again(
    dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path, crash: str
) -> None:
    """On every Airflow (3.3: its task state store; 3.0-3.2: a Variable) the retry goes on with the job
    the first try stored and never runs the workflow again. The Variable is gone once the task
    succeeded; after a final failure it stays, as 3.3's store does, for a person's clear to go on from.
    A try that failed after it delivered leaves its job too (3.3); before 3.3 the Variable is deleted at
    success (Variables would pile up) and the retry runs again, as the installation page's table says."""
    emulator.configure(processing_delay=0.3)
    inputs = write(tmp_path, a_txt="one", b_txt="two")
    STORED.clear()
    with DAG(f"wfsvc_durable_{crash}", schedule=None, start_date=START, catchup=False) as dag:
        CrashingRun(
            task_id="run",
            workflow_id=workflow,
            files=str(inputs),
            poll_interval=0.1,
            retries=1,
            retry_delay=timedelta(0),
            crash=crash,
        )
    dr = dag_runner(dag)
    ti = dr.get_task_instance("run")
    assert ti.try_number == 2
    kept = {key: value for key, value in task_state_variables().items() if key.endswith(f":{dr.run_id}")}
    if crash == "after-delivering" and not HAS_TASK_STATE_STORE:
        assert (ti.state, len(runs(emulator)), STORED, kept) == (SUCCESS, 2, [None, None], {})
        return
    assert len(runs(emulator)) == 1
    assert STORED[0] is None
    assert STORED[1] is not None  # the first try's job, which the second went on with
    if crash != "every-try":
        assert ti.state == SUCCESS
        assert xcom(dr, "run")["status"] == "completed"
        assert xcom(dr, "run")["job_id"] == STORED[1]
        assert kept == {}
        return
    assert ti.state == FAILED
    if not HAS_TASK_STATE_STORE:
        assert [value[RunWorkflowOperator.external_id_key] for value in kept.values()] == [STORED[1]]


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_requests_per_wait_stay_within_budget(
    dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path, deferrable: bool
) -> None:
    """A job of known duration T, polled every I seconds, costs at most ceil(T / I) + 3 requests, and
    one per output file (the start of each output, for its document's name: issue #32)."""
    delay, interval = 0.4, 0.5
    emulator.configure(processing_delay=delay)
    inputs = write(tmp_path, a_txt="one", b_txt="two")
    duration = delay * (2 + 3)  # one scheduled slot, then 2 files through 3 pipelined nodes
    with DAG(f"wfsvc_budget_{deferrable}", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=str(inputs),
            poll_interval=interval,
            deferrable=deferrable,
        )
    dr = dag_runner(dag)
    assert state(dr, "run") == SUCCESS
    job_id = xcom(dr, "run", "job_id")
    waited = emulator.requests(path_contains=f"/jobs/{job_id}")
    assert [r["method"] for r in waited].count("GET") == len(waited)
    outputs = len(xcom(dr, "run")["output_files"])
    assert outputs == 2
    assert [r["path"].endswith("/download") for r in waited].count(True) == outputs
    assert len(waited) <= math.ceil(duration / interval) + 3 + outputs, [r["path"] for r in waited]
    print(f"requests for a {duration:.1f} s job polled every {interval} s ({dag.dag_id}): {len(waited)}")


def test_execution_timeout_kills_the_task_and_cancels_the_job(
    dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path
) -> None:
    """Airflow's execution_timeout calls on_kill: the job is cancelled, not left running."""
    emulator.configure(processing_delay=30)
    inputs = write(tmp_path, a_txt="one")
    with DAG("wfsvc_execution_timeout", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=str(inputs),
            poll_interval=0.2,
            execution_timeout=timedelta(seconds=10),  # after the run's start on a busy machine (1 s was not)
            cancel_on_timeout=False,
        )
    dr = dag_runner(dag)
    assert state(dr, "run") == FAILED
    with WorkflowServiceHook(settings=settings) as hook:
        assert hook.get_job(xcom(dr, "run", "job_id")).status.value == "stopped"


def test_bad_input_fails_without_retries_and_an_empty_inbox_can_skip(
    dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path
) -> None:
    """Issue #15: a missing input file and an empty job_id XCom fail at once (retries would see the
    same input); ``skip_if_no_files=True`` skips when the inbox glob matches nothing."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    retry = {"retries": 3, "retry_delay": timedelta(seconds=0)}
    with DAG("wfsvc_bad_input", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="missing", workflow_id=workflow, files=str(tmp_path / "nope.txt"), **retry
        )
        RunWorkflowOperator(task_id="empty_inbox", workflow_id=workflow, files=str(inbox / "*.pdf"), **retry)
        RunWorkflowOperator(
            task_id="skip_inbox",
            workflow_id=workflow,
            files=[str(inbox / "*.pdf"), str(inbox)],
            skip_if_no_files=True,
            **retry,
        )
        DownloadJobOutputOperator(
            task_id="no_job",
            run_task_id="skip_inbox",
            output_dir=str(tmp_path / "out"),
            trigger_rule="all_done",
            **retry,
        )
    dr = dag_runner(dag)
    tis = {ti.task_id: ti for ti in dr.get_task_instances()}
    assert {t: (ti.state, ti.try_number) for t, ti in tis.items()} == {
        "missing": (FAILED, 1),
        "empty_inbox": (FAILED, 1),
        "skip_inbox": (TaskInstanceState.SKIPPED, 1),
        "no_job": (FAILED, 1),  # runs on its own: the skipped task pushed no job_id
    }
    assert not runs(emulator)


def test_the_service_message_names_the_users_file_not_the_uploaded_one(
    dag_runner: Any, emulator: Any, workflow: str, tmp_path: Path
) -> None:
    """Issue #22: with ``mark_uploads=True`` the service's own message names the marked upload
    (``empty__wfsvc-….txt``); where the job record lists the marked names (platform) the summary and
    the task's error show the user's name."""
    inputs = write(tmp_path, empty_txt="")  # empty: the service fails it, naming it in its message
    with DAG("wfsvc_message_names", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(inputs), poll_interval=0.1, mark_uploads=True
        )
    dr = dag_runner(dag)
    assert state(dr, "run") == FAILED
    message = xcom(dr, "run")["message"]
    assert "empty" in message
    if emulator.dialect == "platform":
        assert "empty.txt" in message
        assert "__wfsvc" not in message


def test_relative_paths_name_failed_files_outputs_and_the_summary(
    dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path
) -> None:
    """Issue #15: ``2024/report.txt`` and ``2025/report.txt`` stay apart in the failed-file message,
    the summary, the names the service records and the downloaded outputs."""
    inbox = tmp_path / "in"
    write(inbox / "2024", report_txt="")  # empty: the service fails it
    write(inbox / "2025", report_txt="hello 2025", notes_md="# 2025")
    out = tmp_path / "out"
    with DAG("wfsvc_relative_names", schedule=None, start_date=START, catchup=False) as dag:
        run = RunWorkflowOperator(
            task_id="run", workflow_id=workflow, files=str(inbox / "**" / "*"), poll_interval=0.1
        )
        download = DownloadJobOutputOperator(
            task_id="download", run_task_id="run", output_dir=str(out), trigger_rule="all_done"
        )
        run >> download
    dr = dag_runner(dag)
    assert [state(dr, t) for t in ("run", "download")] == [FAILED, SUCCESS]
    summary = xcom(dr, "run")
    assert summary["outcome"] == "failed_files"
    assert [f["document"] for f in summary["failed_files"]] == ["2024/report.txt"]
    with WorkflowServiceHook(settings=settings) as hook:
        record = hook.get_job(summary["job_id"])
    if record.input_file_ids is not None:  # the platform dialect lists the names it recorded
        assert sorted(record.input_file_ids) == [
            "2024/report.txt",
            "2025/notes.md",
            "2025/report.txt",
        ]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.json")) == [
        "2025/notes.md.json",
        "2025/report.txt.json",
    ]


def test_a_run_refused_before_sending_fails_once_with_its_reason_and_no_link_error(
    dag_runner: Any, emulator: Any, settings: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with WorkflowServiceHook(settings=settings) as hook:
        source = hook.create_source(f"in-{time.time_ns()}", "s3", {"remote_url": "s3://in/"})
        remote = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic", source_id=source.id).id)
    inputs = write(tmp_path, a_txt="a")
    with DAG("wfsvc_refused_run", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(task_id="run", workflow_id=remote, files=str(inputs), poll_interval=0.1)
    capfd.readouterr()

    dr = dag_runner(dag)

    assert state(dr, "run") == FAILED
    assert runs(emulator) == []  # nothing was uploaded
    out = capfd.readouterr()
    text = out.out + out.err
    assert "it has the source connector" in text
    assert "XCom not found" not in text
    assert "_link_WorkflowJobLink" not in text


@pytest.mark.parametrize("deferrable", [False, True])
def test_execution_timeout_bounds_the_wait_in_both_modes(
    dag_runner: Any, emulator: Any, settings: Any, workflow: str, tmp_path: Path, deferrable: bool
) -> None:
    """Airflow's execution_timeout ends the wait (deferred time included), fails the task as a timeout
    and cancels the job; the operator's own timeout (an hour) would not, nor the job (hours long): the
    run ending at all is the execution_timeout's doing."""
    emulator.configure(processing_delay=3600)
    inputs = write(tmp_path, a_txt="one")
    dag_id = f"wfsvc_execution_timeout_{deferrable}"
    with DAG(dag_id, schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=str(inputs),
            poll_interval=0.2,
            timeout=3600,
            execution_timeout=timedelta(seconds=3),
            deferrable=deferrable,
        )
    dr = dag_runner(dag)
    assert state(dr, "run") == FAILED
    summary = xcom(dr, "run")
    if deferrable or summary is not None:
        assert summary["outcome"] == "timeout"
    # else: in a worker, the wait's end and Airflow's own timeout (SIGALRM) fall at the same moment, and on a
    # busy machine Airflow's may come first, before the summary is pushed: its on_kill cancels the job then
    with WorkflowServiceHook(settings=settings) as hook:
        assert hook.get_job(xcom(dr, "run", "job_id")).status.value == "stopped"
