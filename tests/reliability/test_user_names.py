"""Issue #32: the user's names, as the service stores them and as the user gets them back.

For each choice of ``mark_uploads``, one run of ``notes.txt``, ``données.txt``, ``sub/Q3 report.md``
and an empty ``empty.txt`` (which the service fails) through the real operators (``dag.test()``)
against the emulator, in both dialects. Recorded in the figures: what the service stores (the job
record's ``input_file_ids``, its failed files, each output element's ``metadata.filename``), what
the task shows (the summary's failed files and output documents) and the names the download writes.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.utils.state import TaskInstanceState

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator

pytestmark = pytest.mark.timeout(180)

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
FILES = {"notes.txt": "Meeting notes.", "données.txt": "Des données.", "sub/Q3 report.md": "# Q3\n\nUp."}
FAILING = "empty.txt"
MARKED = r"__wfsvc-[0-9a-f]{16}"


def inbox(folder: Path) -> Path:
    for name, text in {**FILES, FAILING: ""}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def marked_form(name: str) -> str:
    """The pattern of ``name`` as a marked run uploads it (the marker before its extension)."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.rpartition(".")
    return f"{folder + '/' if folder else ''}{stem}{MARKED}{dot}{extension}"


@pytest.mark.parametrize("marked", [False, True], ids=["own-names", "mark_uploads"])
def test_what_the_service_stores_and_the_user_gets_back(
    figures: dict[str, Any], dag_runner: Any, emulator: Any, settings: Any, tmp_path: Path, marked: bool
) -> None:
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"names-{time.time_ns()}", "basic").id)
    folder, out = inbox(tmp_path / "in"), tmp_path / "out"
    with DAG(f"user_names_{marked}", schedule=None, start_date=START, catchup=False) as dag:
        run = RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=str(folder),
            mark_uploads=marked,
            fail_on_failed_files=False,
            poll_interval=0.1,
        )
        run >> DownloadJobOutputOperator(task_id="download", run_task_id="run", output_dir=str(out))
    dr = dag_runner(dag)
    assert dr.get_task_instance("run").state == TaskInstanceState.SUCCESS
    summary = dr.get_task_instance("run").xcom_pull(task_ids="run")
    with WorkflowServiceHook(settings=settings) as hook:
        record = hook.get_job(summary["job_id"])
        stored_failed = [f.document for f in hook.get_job_failed_files(record.id).failed_files]
        element_names = sorted(
            str(hook.download_job_output(record.id, o.file_id, o.node_id)[0].metadata.filename)  # type: ignore[index]
            for o in record.output_node_files
        )
    downloads = sorted(str(p.relative_to(out)) for p in out.rglob("*.json"))
    figures.update(
        dialect=emulator.dialect,
        mark_uploads=marked,
        stored_input_file_ids=record.input_file_ids,
        stored_failed_files=stored_failed,
        stored_element_filenames=element_names,
        summary_failed_files=[f["document"] for f in summary["failed_files"]],
        summary_output_documents=sorted(str(o["document"]) for o in summary["output_files"]),
        downloads=downloads,
    )
    lists_files = record.input_file_ids is not None
    wanted = sorted(FILES)
    sent = sorted([*FILES, FAILING])
    if not marked:  # the user's own names everywhere: in the service and back
        assert not lists_files or sorted(record.input_file_ids or ()) == sent
        assert stored_failed == [FAILING]
        assert element_names == wanted
    else:  # the service stores the marked names; the task shows the user's where the record proves them
        for stored, name in zip(sorted(record.input_file_ids or sent), sent, strict=True):
            assert not lists_files or re.fullmatch(marked_form(name), stored), (stored, name)
        for stored, name in zip(element_names, wanted, strict=True):
            assert re.fullmatch(marked_form(name), stored), (stored, name)
        assert re.fullmatch(marked_form(FAILING), stored_failed[0])
    shown_plainly = not marked or lists_files
    if shown_plainly:
        assert [f["document"] for f in summary["failed_files"]] == [FAILING]
        assert sorted(o["document"] for o in summary["output_files"]) == wanted
        assert downloads == sorted(f"{name}.json" for name in FILES)
    else:  # marked, and a service whose records list no files: nothing shows which marker to take out
        assert re.fullmatch(marked_form(FAILING), summary["failed_files"][0]["document"])
        assert len(downloads) == len(FILES)
