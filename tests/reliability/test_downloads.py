"""Item 7: downloaded outputs stay inside their directory, and a failed download leaves nothing that
looks complete.

The names come from the service (each output's ``metadata.filename``, the name the file was uploaded
under), so the run is sent with crafted multipart file names: path traversal, absolute paths,
backslashes, odd characters, unicode, a 300-character name, names that collide. The failures are the
emulator's: a connection dropped in the middle of the body, a 500, a few 503s.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc.exceptions import WorkflowServiceError
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator

from ._helpers import task_context

HOSTILE_NAMES = [
    "../../escape.txt",
    "/etc/passwd.txt",
    "..\\..\\windows.txt",
    "C:\\Users\\x\\drive.txt",
    "we?ird*na<me>|.txt",
    "tab\there.txt",
    "ünïcødé 文档.txt",
    "x" * 300 + ".txt",
    "a.txt",
    "A.TXT",
    "sub/a.txt",
    ".hidden.txt",
    "..",
    "report.txt.json",
    "report.txt",
]
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def run_with_names(emulator: Any, settings: Any, names: list[str]) -> str:
    """Run a local-to-local workflow with these multipart file names; the job id, once completed."""
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"names-{time.time_ns()}", "basic").id)
    parts = [("input_files", (name, _content(i, name), "text/plain")) for i, name in enumerate(names)]
    with emulator.api_client() as api:
        response = api.post(f"/workflows/{workflow}/run", files=parts)
        response.raise_for_status()
    emulator.advance_clock(3600)
    return str(response.json()["id"])


def _content(index: int, name: str) -> bytes:
    text = f"document number {index}"
    return json.dumps({"text": text}).encode() if name.lower().endswith(".json") else text.encode()


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def download(job_id: str, out: Path) -> list[str]:
    task = DownloadJobOutputOperator(task_id="download", job_id=job_id, output_dir=str(out))
    return list(task.execute(task_context()))


def test_server_given_names_cannot_escape_the_directory(
    figures: dict[str, Any], workflowsvc_conn: Any, settings: Any, tmp_path: Path
) -> None:
    job_id = run_with_names(workflowsvc_conn, settings, HOSTILE_NAMES)
    out = tmp_path / "run" / "out"
    paths = [Path(p) for p in download(job_id, out)]

    root = out.resolve()
    assert len(paths) == len(HOSTILE_NAMES)
    # A document's folders are kept (issue #15: ``2024/report.txt``), always inside the directory.
    assert all(root in p.parents for p in paths), [str(p) for p in paths if root not in p.parents]
    relative = [p.relative_to(root) for p in paths]
    assert len({str(r).lower() for r in relative}) == len(paths), "two outputs share a name"
    bad = [
        str(r)
        for r in relative
        if not r.name.endswith(".json")
        or any(CONTROL.search(part) or part in (".", "..") or len(part.encode()) > 255 for part in r.parts)
    ]
    assert not bad, bad
    # Issue #32: the documents' own names, changed only where a file system cannot hold them.
    for kept in ("sub/a.txt.json", "escape.txt.json", "etc/passwd.txt.json", "ünïcødé 文档.txt.json"):
        assert root / kept in paths, kept
    for kept in ("..\\..\\windows.txt.json", "we?ird*na<me>|.txt.json", ".hidden.txt.json"):
        assert root / kept in paths, kept
    assert root / "A.TXT-2.json" in paths, "a.txt and A.TXT never share a name"
    assert root / ("x" * (255 - len(".txt.json")) + ".txt.json") in paths, "cut before its extension"
    assert files_under(tmp_path) == sorted(paths), "a file was written elsewhere, or a partial one left"
    numbers = {int(n) for p in paths for n in re.findall(r"document number (\d+)", p.read_text())}
    assert numbers == set(range(len(HOSTILE_NAMES)))  # each file holds its own document, complete
    figures.update(
        names_tried=len(HOSTILE_NAMES),
        files_written=len(paths),
        outside_the_directory=0,
        collisions_renamed=sum(1 for p in paths if re.search(r"-\d+\.json$", p.name)),
        longest_name=max(len(p.name) for p in paths),
        in_subfolders=sum(1 for r in relative if len(r.parts) > 1),
    )


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ({"errors": ["drop"]}, r"RemoteProtocolError|incomplete|closed"),
        ({"errors": [500]}, r"→ 500"),
        ({"errors": [503], "count": 2}, None),  # retried: the download completes
        ({"errors": ["drop"], "count": 1}, None),
    ],
    ids=["dropped-mid-body", "500", "503-twice-then-ok", "dropped-once-then-ok"],
)
def test_a_failed_download_leaves_no_partial_file(
    figures: dict[str, Any],
    workflowsvc_conn: Any,
    settings: Any,
    tmp_path: Path,
    fault: dict[str, Any],
    error: str | None,
) -> None:
    emulator = workflowsvc_conn
    job_id = run_with_names(emulator, settings, ["first.txt", "second.txt"])
    out = tmp_path / "out"
    out.mkdir()
    earlier = out / "first.txt.json"
    earlier.write_text('["an earlier, complete download"]')
    emulator.set_faults(method="GET", path="/api/v1/jobs/*/download", **fault)
    if error is not None:
        with pytest.raises(WorkflowServiceError, match=error):
            download(job_id, out)
        assert files_under(tmp_path) == [earlier], "a partial or staging file was left"
        assert earlier.read_text() == '["an earlier, complete download"]'  # untouched
    else:
        download(job_id, out)
        assert [p.name for p in files_under(tmp_path)] == ["first.txt.json", "second.txt.json"]
        assert json.loads(earlier.read_text())[0]["metadata"]["filename"] == "first.txt"
    for path in files_under(tmp_path):
        json.loads(path.read_text())  # every file there is complete JSON
    log = emulator.requests(path_contains="/download")
    figures.update(
        download_requests=len(log),
        faults=[r["fault"] for r in log if r["fault"]],
        partial_files_left=0,
    )


DEEP = "/".join(f"{i:02d}{'d' * 198}" for i in range(20)) + "/report.txt"
"""Issue #43, item 7: every part 200 bytes (under the 255 a name may have), 4,030 bytes in all (what a
multipart header carries): in an ``output_dir`` of 200 bytes, more than a path may have (PATH_MAX,
4,096 bytes on Linux)."""
SHORTENED = re.compile(r"report\.txt~[0-9a-f]{16}\.json")


def test_a_path_too_long_for_the_file_system_is_shortened_and_the_rest_written(
    figures: dict[str, Any], workflowsvc_conn: Any, settings: Any, tmp_path: Path, caplog: Any
) -> None:
    job_id = run_with_names(workflowsvc_conn, settings, ["first.txt", DEEP, "last.txt"])
    out = tmp_path / ("o" * 200)
    with caplog.at_level("WARNING", logger="airflow_provider_workflowsvc"):
        paths = download(job_id, out)  # it failed with ENAMETOOLONG on every try: 1 of 3 written
    written = files_under(out)
    figures.update(outputs=3, written=len(written))
    assert len(written) == 3
    assert [Path(p).name for p in paths[::2]] == ["first.txt.json", "last.txt.json"]
    deep = Path(paths[1])
    assert SHORTENED.fullmatch(deep.name), deep.name  # the file's name kept, with the full name's hash
    assert len(str(deep).encode()) < 4096
    assert str(deep.relative_to(out.resolve())).startswith("00" + "d" * 198 + "/01")  # its top folders kept
    assert json.loads(deep.read_text())[0]["metadata"]["filename"] == DEEP  # the document whole
    assert download(job_id, out) == paths  # a retry writes the same names: stable
    warning = next(r.getMessage() for r in caplog.records if "shortened" in r.getMessage())
    assert "4,096" in warning
    assert deep.name in warning
