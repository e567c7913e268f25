"""DownloadJobOutputOperator and CancelJobOperator (respx), and the safe naming of downloaded files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import job_json

from airflow_provider_workflowsvc._tasks.outputs import OutputNames, inside, output_name, within
from airflow_provider_workflowsvc.exceptions import WorkflowServiceError, WorkflowServiceInputError
from airflow_provider_workflowsvc.hooks._calls import document_name_in
from airflow_provider_workflowsvc.operators.jobs import CancelJobOperator, DownloadJobOutputOperator
from airflow_provider_workflowsvc.storage import Room


class FakeTI:
    def __init__(self, **pulls: Any) -> None:
        self.pulls = pulls

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.pulls.get(f"{task_ids}.{key}")


def ctx(**pulls: Any) -> Any:
    return {"ti": FakeTI(**pulls)}


def ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json=data)


def elements(filename: str) -> list[dict[str, Any]]:
    return [{"type": "NarrativeText", "element_id": "e1", "text": "hi", "metadata": {"filename": filename}}]


class BrokenStream(httpx.SyncByteStream):
    """Sends a first chunk, then the connection drops."""

    def __iter__(self) -> Iterator[bytes]:
        yield b'[{"type": "Title", "metadata": {"filename": "b.txt"}, "text": "'
        raise httpx.ReadError("connection reset mid-body")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("données.txt", "données.txt.json"),  # issue #32: letters of any script kept
        ("sub/Q3 report.md", "sub/Q3 report.md.json"),  # spaces and folders kept
        ("报告 2024.pdf", "报告 2024.pdf.json"),
        ("we?ird*na<me>|:x.txt", "we?ird*na<me>|:x.txt.json"),  # valid on POSIX: kept
        ("..\\..\\win.txt", "..\\..\\win.txt.json"),  # a backslash is a character on POSIX
        (".hidden", ".hidden.json"),
        ("data.json", "data.json.json"),
        ("../../etc/passwd", "etc/passwd.json"),  # `..` parts dropped
        ("/abs/dir/x.txt", "abs/dir/x.txt.json"),  # absolute: made relative
        ("a//./b.txt", "a/b.txt.json"),
        ("dir/", "dir.json"),
        ("tab\there\n.txt", "tab_here_.txt.json"),  # control characters
        ("nul\x00byte.txt", "nul_byte.txt.json"),
        ("lone\udc80surrogate.txt", "lone_surrogate.txt.json"),
        ("..", None),
        ("", None),
        ("/", None),
    ],
)
def test_output_name_keeps_the_documents_name_but_what_a_file_system_cannot_hold(
    document: str, expected: str | None
) -> None:
    assert output_name(document) == expected


def test_output_name_cuts_an_over_long_part_before_its_extension() -> None:
    long = "é" * 200 + ".pdf"  # 404 bytes in UTF-8
    name = output_name(f"{'d' * 300}/{long}")
    assert name is not None
    folder, base = name.split("/")
    assert folder == "d" * 255
    assert len(base.encode()) <= 255
    assert base.endswith(".pdf.json")
    assert base.startswith("é" * 100)
    assert output_name("x" * 300, ".n1-2.json") == "x" * (255 - len(".n1-2.json")) + ".n1-2.json"


def test_a_name_over_the_folders_room_keeps_its_top_folders_and_file_name_with_a_hash() -> None:
    """Issue #43, item 7: a path over PATH_MAX, a key over 1,024 bytes; every part under 255 bytes."""
    top = "/".join(["f" * 200] * 5)
    shortened = {within(f"{top}/{leaf}/report.txt.json", 500) for leaf in ("x", "y")}
    assert len(shortened) == 2, "two names, two short ones"
    for name in shortened:
        assert len(name.encode()) <= 500
        assert name.startswith(f"{'f' * 200}/{'f' * 200}/")
        assert re.fullmatch(r"report\.txt~[0-9a-f]{16}\.json", name.rsplit("/", 1)[1])
    assert within(f"{top}/x/report.txt.json", 500) in shortened, "the same name on every try"
    assert within("a/b.json", 8) == "a/b.json"
    cut = within("x" * 250 + ".pdf.json", 100)  # a room under 255 bytes: the stem is cut, as by the rule
    assert len(cut.encode()) <= 100
    assert re.fullmatch(r"x+\.pdf~[0-9a-f]{16}\.json", cut)

    names = OutputNames([("a", "n"), ("b", "n")], Room(300, "a test's limit"))
    long = f"{'d' * 100}/{'c' * 100}/{'e' * 150}.txt"  # 361 bytes: the top folder and the file fit
    first, second = names.allocate("a", "n", long), names.allocate("b", "n", long)
    assert first != second, "a clash once shortened still gets its -2"
    for name in (first, second):
        assert len(name.encode()) <= 300
        assert re.fullmatch(r"d{100}/e{150}\.txt(-2)?~[0-9a-f]{16}\.json", name)
    assert "-2~" in second


def test_output_names_never_share_a_name_in_one_download() -> None:
    outputs = [("f1", "n1"), ("f2", "n1"), ("f3", "n1"), ("f3", "n2"), ("f4", "n1"), ("f5", "n1")]
    names = OutputNames(outputs)
    assert names.allocate("f1", "n1", "report.pdf") == "report.pdf.json"
    assert names.allocate("f2", "n1", "REPORT.pdf") == "REPORT.pdf-2.json", "case-insensitive systems"
    assert names.allocate("f3", "n1", None) == "f3.n1.json", "no document: the file id"
    assert names.allocate("f3", "n2", "../../../etc/x") == "etc/x.n2.json"
    assert names.allocate("f4", "n1", "etc") == "etc.json", "a file beside the folder etc"
    assert names.allocate("f5", "n1", "..") == "f5.json", "nothing left of the document: the file id"
    names = OutputNames([("a", "n1"), ("b", "n1"), ("c", "n1"), ("d", "n1"), ("e", "n1")])
    assert names.allocate("a", "n1", "2024/report.txt") == "2024/report.txt.json", "issue #15: path kept"
    assert names.allocate("b", "n1", "2025/report.txt") == "2025/report.txt.json"
    assert names.allocate("c", "n1", "2025/./report.txt") == "2025/report.txt-2.json", "same after the rule"
    assert names.allocate("d", "n1", "cafe\u0301.txt") == "cafe\u0301.txt.json"
    assert names.allocate("e", "n1", "caf\u00e9.txt") == "caf\u00e9.txt-2.json", "the same name, normalised"


def test_a_file_name_never_takes_a_folder_another_output_needs() -> None:
    names = OutputNames([("a", "n"), ("b", "n"), ("c", "n")])
    assert names.allocate("a", "n", "x.json/y") == "x.json/y.json"
    assert names.allocate("b", "n", "x") == "x-2.json", "x.json is a folder of this download"
    assert names.allocate("c", "n", "x.json/z") == "x.json/z.json", "a folder is shared"
    names = OutputNames([("a", "n"), ("b", "n")])
    assert names.allocate("a", "n", "x") == "x.json"
    assert names.allocate("b", "n", "x.json/y") == "x.json-2/y.json", "x.json is a file of this download"


def test_inside_refuses_escapes(tmp_path: Path) -> None:
    assert inside(tmp_path, "a.json") == tmp_path.resolve() / "a.json"
    assert inside(tmp_path, "sub/a.json") == tmp_path.resolve() / "sub" / "a.json"
    for bad in ("../a.json", "/etc/passwd", "sub/../../a.json"):
        with pytest.raises(WorkflowServiceInputError):
            inside(tmp_path, bad)


def test_document_name() -> None:
    assert document_name_in(json.dumps(elements('we"ird.txt')).encode()) == 'we"ird.txt'
    assert document_name_in(b"[]") is None


def download_op(tmp_path: Path, **kwargs: Any) -> DownloadJobOutputOperator:
    return DownloadJobOutputOperator(
        task_id="dl", output_dir=str(tmp_path / "out"), **{"job_id": "j1", **kwargs}
    )


def test_downloads_every_output_under_safe_names(mock_service: Any, tmp_path: Path) -> None:
    outputs = [("f1", "n9"), ("f2", "n9"), ("f3", "n9")]
    mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", "completed", outputs=outputs)))
    docs = {"f1": "../../evil.txt", "f2": "a.txt", "f3": "/abs/a.txt"}
    for file_id, doc in docs.items():
        mock_service.get("/jobs/j1/download", params={"file_id": file_id, "node_id": "n9"}).mock(
            return_value=ok(elements(doc))
        )
    paths = download_op(tmp_path).execute(ctx())
    out = (tmp_path / "out").resolve()
    assert paths == [str(out / "evil.txt.json"), str(out / "a.txt.json"), str(out / "abs" / "a.txt.json")]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "out/a.txt.json",
        "out/abs/a.txt.json",
        "out/evil.txt.json",
    ]
    assert json.loads((out / "a.txt.json").read_text())[0]["metadata"]["filename"] == "a.txt"


def test_a_failed_download_leaves_no_partial_file(mock_service: Any, tmp_path: Path) -> None:
    mock_service.get("/jobs/j1").mock(
        return_value=ok(job_json("j1", "completed", outputs=[("f1", "n"), ("f2", "n")]))
    )
    mock_service.get("/jobs/j1/download", params={"file_id": "f1"}).mock(return_value=ok(elements("a.txt")))
    mock_service.get("/jobs/j1/download", params={"file_id": "f2"}).mock(
        side_effect=lambda request: httpx.Response(200, stream=BrokenStream())
    )
    with pytest.raises(WorkflowServiceError, match="connection reset"):
        download_op(tmp_path).execute(ctx())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt.json"]  # only complete files


def test_job_id_from_the_run_task(mock_service: Any, tmp_path: Path) -> None:
    mock_service.get("/jobs/j7").mock(return_value=ok(job_json("j7", "completed")))
    task = DownloadJobOutputOperator(task_id="dl", output_dir=str(tmp_path), run_task_id="run")
    assert task.execute(ctx(**{"run.job_id": "j7"})) == []
    with pytest.raises(WorkflowServiceInputError, match="XCom 'job_id' of task 'run' is empty"):
        task.execute(ctx())


def test_only_completed_jobs_have_outputs(mock_service: Any, tmp_path: Path) -> None:
    mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", "im progress")))
    with pytest.raises(WorkflowServiceError, match="only from a completed job"):
        download_op(tmp_path).execute(ctx())


def test_download_needs_a_job(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run_task_id"):
        DownloadJobOutputOperator(task_id="dl", output_dir=str(tmp_path))


# -- CancelJobOperator ------------------------------------------------------------------------------


def test_cancel_a_running_job(mock_service: Any) -> None:
    mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", "im progress")))
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=ok({"status": "stopped"}))
    result = CancelJobOperator(task_id="c", job_id="j1").execute(ctx())
    assert result == {"job_id": "j1", "cancelled": True, "status": "in progress"}
    assert cancel.call_count == 1


@pytest.mark.parametrize("race", [False, True], ids=["ended", "ended-meanwhile"])
def test_cancel_an_ended_job(mock_service: Any, race: bool) -> None:
    mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", "scheduled" if race else "completed")))
    cancel = mock_service.post("/jobs/j1/cancel").mock(
        return_value=httpx.Response(409, json={"detail": "ended"})
    )
    assert CancelJobOperator(task_id="c", job_id="j1").execute(ctx())["cancelled"] is False
    assert cancel.call_count == int(race)
    with pytest.raises(WorkflowServiceError, match="already ended"):
        CancelJobOperator(task_id="c", job_id="j1", fail_if_ended=True).execute(ctx())
