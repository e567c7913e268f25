"""DownloadJobOutputOperator and CancelJobOperator (respx), and the safe naming of downloaded files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import job_json

from airflow_provider_workflowsvc.exceptions import WorkflowServiceError, WorkflowServiceInputError
from airflow_provider_workflowsvc.operators._files import OutputNames, document_name, inside, safe_name
from airflow_provider_workflowsvc.operators.jobs import CancelJobOperator, DownloadJobOutputOperator


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
    ("raw", "expected"),
    [
        ("../../etc/passwd", "passwd"),
        ("/abs/dir/x.txt", "x.txt"),
        ("..\\..\\win.txt", "win.txt"),
        ("..", "output"),
        ("", "output"),
        (".hidden", "hidden"),
        ("a b?c*.txt", "a_b_c_.txt"),
        ("dir/", "dir"),
        ("ünï code.md", "n_code.md"),
        ("x" * 400, "x" * 150),
    ],
)
def test_safe_name(raw: str, expected: str) -> None:
    assert safe_name(raw) == expected


def test_output_names_are_unique_and_safe() -> None:
    outputs = [("f1", "n1"), ("f2", "n1"), ("f3", "n1"), ("f3", "n2")]
    names = OutputNames(outputs)
    assert names.allocate("f1", "n1", "report.pdf") == "report.pdf.json"
    assert names.allocate("f2", "n1", "REPORT.pdf") == "REPORT.pdf-2.json"
    assert names.allocate("f3", "n1", None) == "f3.n1.json"
    assert names.allocate("f3", "n2", "../../../etc/x") == "etc/x.n2.json"
    names = OutputNames([("a", "n1"), ("b", "n1"), ("c", "n1")])
    assert names.allocate("a", "n1", "2024/report.txt") == "2024/report.txt.json", "issue #15: path kept"
    assert names.allocate("b", "n1", "2025/report.txt") == "2025/report.txt.json"
    assert names.allocate("c", "n1", "2025/./x?.txt") == "2025/x_.txt.json"


def test_inside_refuses_escapes(tmp_path: Path) -> None:
    assert inside(tmp_path, "a.json") == tmp_path.resolve() / "a.json"
    assert inside(tmp_path, "sub/a.json") == tmp_path.resolve() / "sub" / "a.json"
    for bad in ("../a.json", "/etc/passwd", "sub/../../a.json"):
        with pytest.raises(WorkflowServiceInputError):
            inside(tmp_path, bad)


def test_document_name(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    path.write_text(json.dumps(elements('we"ird.txt')))
    assert document_name(path) == 'we"ird.txt'
    path.write_text("[]")
    assert document_name(path) is None


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
