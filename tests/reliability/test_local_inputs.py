"""Issue #12, local inputs (``files=``): symlinks, odd names, many files, literal paths.

Each case builds a real directory tree in ``tmp_path`` and resolves it the way ``RunWorkflowOperator``
does, then (where the upload itself is at stake) sends it to the emulator or to a loopback server.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TaskStateStore

from airflow_provider_workflowsvc._tasks import inputs as _files
from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files
from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError
from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

from ._helpers import LoopbackServer, task_context

WORKFLOW_ID = "0b8f3c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b"


def resolve_files(spec: Any) -> list[Any]:
    """The sources ``files`` resolves to (local paths here), without the names the service sees."""
    return [source for source, _ in resolve_named_files(spec)]


def names(paths: list[str], root: Path) -> list[str]:
    return [os.path.relpath(p, root) for p in paths]


@pytest.fixture
def looping_tree(tmp_path: Path) -> Path:
    """docs/ with 3 documents, two directory links that loop and one that duplicates a directory."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    for name in ("a.txt", "sub/b.txt", "sub/c.txt"):
        (docs / name).write_text(f"document {name}")
    (docs / "loop").symlink_to(docs)  # docs/loop/loop/loop/...
    (docs / "sub" / "back").symlink_to("..")  # docs/sub/back/sub/back/...
    (docs / "alias").symlink_to("sub")  # the same documents under a second name
    return docs


@pytest.mark.parametrize(
    "spec",
    ["{docs}/**/*.txt", "{docs}", "{docs}/**", ["{docs}/a.txt", "{docs}", "{docs}/*"]],
    ids=["double-star-glob", "directory", "double-star-only", "overlapping-list"],
)
def test_directory_symlinks_are_not_followed_and_each_document_is_sent_once(
    figures: dict[str, Any], looping_tree: Path, spec: Any
) -> None:
    """``**`` followed symlinked directories: 3 documents became 6, a looping link sent one file 41
    times, two loops hung the task. Now directory links are not entered and real paths de-duplicate."""
    filled = (
        [s.format(docs=looping_tree) for s in spec]
        if isinstance(spec, list)
        else spec.format(docs=looping_tree)
    )
    started = time.monotonic()
    resolved = resolve_files(filled)
    elapsed = time.monotonic() - started
    assert names(resolved, looping_tree) == ["a.txt", "sub/b.txt", "sub/c.txt"]
    figures.update(documents=3, resolved=len(resolved), seconds_to_resolve=round(elapsed, 3))


def test_a_looping_tree_runs_as_one_job_of_three_documents(looping_tree: Path, workflowsvc_conn: Any) -> None:
    """End to end against the emulator: the run sends 3 parts, and the job has 3 outputs."""
    with WorkflowServiceHook() as hook:
        workflow = str(hook.create_workflow("looping-inputs", "basic").id)
    task = RunWorkflowOperator(
        task_id="run", workflow_id=workflow, files=f"{looping_tree}/**/*", poll_interval=0.05, timeout=60
    )
    result = task.execute(task_context())
    assert len(result["output_files"]) == 3, result


def test_a_file_symlink_is_uploaded_and_its_target_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A link to a file outside the input directory used to be uploaded silently: it is still uploaded
    (links are a common way to assemble inputs), and its target is logged, as a warning when outside."""
    docs, elsewhere = tmp_path / "docs", tmp_path / "elsewhere"
    docs.mkdir()
    elsewhere.mkdir()
    (elsewhere / "shared.txt").write_text("kept elsewhere")
    (docs / "inside.txt").write_text("inside")
    (docs / "linked.txt").symlink_to(elsewhere / "shared.txt")
    (docs / "twin.txt").symlink_to("inside.txt")
    with caplog.at_level(logging.INFO, logger=_files.__name__):
        resolved = resolve_files(str(docs))
    assert names(resolved, docs) == ["inside.txt", "linked.txt"]  # twin.txt is inside.txt: sent once
    outside = [r for r in caplog.records if "linked.txt" in r.getMessage()]
    assert outside
    assert outside[0].levelno == logging.WARNING
    assert str(elsewhere / "shared.txt") in outside[0].getMessage()
    assert "outside" in outside[0].getMessage()


def test_an_existing_path_is_taken_literally_even_with_glob_characters(tmp_path: Path) -> None:
    """``report[1].pdf`` was read as a pattern (matching ``report1.pdf``) and reported as missing."""
    (tmp_path / "report[1].txt").write_text("literal")
    (tmp_path / "report1.txt").write_text("what the pattern would match")
    (tmp_path / "data[2024]").mkdir()
    (tmp_path / "data[2024]" / "x.txt").write_text("in a bracketed directory")
    assert resolve_files(str(tmp_path / "report[1].txt")) == [str(tmp_path / "report[1].txt")]
    assert resolve_files(str(tmp_path / "data[2024]")) == [str(tmp_path / "data[2024]" / "x.txt")]
    assert resolve_files(str(tmp_path / "data[2024]" / "*.txt")) == [str(tmp_path / "data[2024]" / "x.txt")]
    assert resolve_files(f"['{tmp_path / 'report[1].txt'}']") == [str(tmp_path / "report[1].txt")]


def test_the_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        (tmp_path / f"f{i}.txt").write_text("x")
    monkeypatch.setattr(_files, "MAX_WALK_ENTRIES", 20)
    with pytest.raises(WorkflowServiceInputError, match=r"went through more than 20 entries"):
        resolve_files(str(tmp_path))


def test_a_name_that_is_not_utf8_fails_before_any_request(tmp_path: Path, workflowsvc_conn: Any) -> None:
    """It raised a bare ``UnicodeEncodeError`` while the run was being sent, after the pending-run record
    was written. Now a clear input error names the file (escaped); nothing is sent or recorded."""
    raw = os.fsencode(tmp_path) + b"/r\xe9sum\xe9.txt"
    with open(raw, "wb") as fh:
        fh.write(b"Latin-1 name")
    (tmp_path / "fine.txt").write_text("fine")
    workflowsvc_conn.clear_requests()
    store = TaskStateStore()
    task = RunWorkflowOperator(
        task_id="run", workflow_id=WORKFLOW_ID, files=str(tmp_path), poll_interval=0.05
    )
    with pytest.raises(
        WorkflowServiceInputError, match=r"input file '.*r\\xe9sum\\xe9\.txt': its name is not"
    ):
        task.execute(task_context(store))
    assert workflowsvc_conn.requests() == []
    assert store.values == {}
    with WorkflowServiceHook() as hook, pytest.raises(WorkflowServiceInputError, match="not valid UTF-8"):
        hook.run_workflow(WORKFLOW_ID, files=[os.fsdecode(raw)])  # the hook alone refuses it too
    assert workflowsvc_conn.requests() == []


@pytest.fixture
def few_descriptors() -> Iterator[int]:
    """The soft limit of open files lowered to 64 above what this process has open now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = len(os.listdir("/proc/self/fd")) + 64
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def job_answer(handler: Any) -> None:
    body = json.dumps({"id": "job-1", "status": "SCHEDULED", "workflow_id": WORKFLOW_ID}).encode()
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.send(body)


def test_thousands_of_files_go_in_one_run_with_few_open_files(
    figures: dict[str, Any], tmp_path: Path, few_descriptors: int
) -> None:
    """Every file was opened before the request started: more than about 1,000 failed with "Too many
    open files". Now each file is open only while its part is sent. 1,500 files go under a limit of 64
    spare descriptors; the server (a thread of this process) counts open descriptors as parts arrive."""
    count = 1500
    for i in range(count):
        (tmp_path / f"doc-{i:04d}.txt").write_text(f"document number {i}\n" * 20)
    baseline = len(os.listdir("/proc/self/fd"))
    peak = baseline
    received = bytearray()

    def sample(chunk: bytes) -> None:
        nonlocal peak
        received.extend(chunk)
        peak = max(peak, len(os.listdir("/proc/self/fd")))

    server = LoopbackServer(job_answer)
    server.on_body = sample
    try:
        files = resolve_files(str(tmp_path))
        with WorkflowServiceHook(settings=ConnectionSettings(base_url=server.url, token="tok-files")) as hook:
            job = hook.run_workflow(WORKFLOW_ID, files=files)
    finally:
        server.close()
    assert job is not None
    assert job.id == "job-1"
    assert received.count(b'name="input_files"') == count
    assert all(f'filename="doc-{i:04d}.txt"'.encode() in received for i in (0, 749, 1499))
    assert received.count(b"document number 1499\n") == 20
    assert peak - baseline < 16, f"{peak - baseline} more descriptors open while sending"
    figures.update(
        files=count, descriptor_limit=few_descriptors, extra_descriptors_while_sending=peak - baseline
    )
