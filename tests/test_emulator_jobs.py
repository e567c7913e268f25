"""Runs and jobs over HTTP: lifecycle driven by the emulator clock, outputs, cancel, schedules."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import accepted_code, job_spelling

from airflow_provider_workflowsvc.emulator.samples import simple_pdf

STEP = 100.0  # processing delay in tests that step the clock: real time between calls is negligible
TEXT = b"Project Plan\n\nWe will build the thing. Then ship it.\n\n- design\n- build\n"


@pytest.fixture
def api(emulator: Any) -> Iterator[httpx.Client]:
    emulator.configure(processing_delay=STEP)
    with emulator.api_client() as client:
        yield client


def create(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def local_workflow(api: httpx.Client, name: str = "local", **fields: Any) -> dict[str, Any]:
    return create(api, "/workflows/", {"name": name, "workflow_type": "basic", **fields})


def run(
    api: httpx.Client, workflow_id: str, files: list[tuple[str, bytes]], part: str = "input_files"
) -> Any:
    parts = [(part, (name, data, "text/plain")) for name, data in files]
    return api.post(f"/workflows/{workflow_id}/run", files=parts)


def job_state(api: httpx.Client, job_id: str) -> tuple[str, str, str, list[tuple[int, int, int, int]]]:
    record = api.get(f"/jobs/{job_id}").json()
    (listed,) = [j for j in api.get("/jobs").json() if j["id"] == job_id]
    details = api.get(f"/jobs/{job_id}/details").json()
    stats = [(n["ready"], n["in_progress"], n["success"], n["failure"]) for n in details["node_stats"]]
    return listed["status"], record["status"], details["processing_status"], stats


def test_local_job_lifecycle(emulator: Any, api: httpx.Client) -> None:
    flow = local_workflow(api)
    response = run(
        api, flow["id"], [("a.txt", TEXT), ("bad.txt", b"\x00\x01\x02"), ("c.md", b"# C\n\nText.")]
    )
    assert response.status_code == accepted_code(emulator.dialect), response.text
    job = response.json()
    assert set(job) >= {"id", "status", "workflow_id", "workflow_name", "created_at", "output_node_files"}
    scheduled = job_spelling(emulator.dialect, "scheduled")
    assert (job["status"], job["workflow_id"], job["workflow_name"]) == (scheduled[0], flow["id"], "local")
    assert job["output_node_files"] == []
    assert uuid.UUID(job["id"])
    job_id = job["id"]
    assert job_state(api, job_id) == (*scheduled, [(3, 0, 0, 0)] * 3)
    emulator.advance_clock(STEP)
    assert job_state(api, job_id) == (
        *job_spelling(emulator.dialect, "in progress"),
        [(2, 1, 0, 0), (3, 0, 0, 0), (3, 0, 0, 0)],
    )
    assert api.get(f"/jobs/{job_id}/failed-files").json() == {"failed_files": []}
    emulator.advance_clock(2 * STEP)
    assert job_state(api, job_id)[3] == [(0, 1, 1, 1), (1, 0, 1, 0), (1, 1, 0, 0)]
    failed = api.get(f"/jobs/{job_id}/failed-files").json()["failed_files"]
    assert failed == [
        {"document": "bad.txt", "error": "file contains binary data (NUL bytes); expected a text document"}
    ]
    assert "Processing 3 file(s)" in api.get(f"/jobs/{job_id}/details").json()["message"]
    emulator.advance_clock(3 * STEP)
    assert job_state(api, job_id) == (
        *job_spelling(emulator.dialect, "completed", some_failed=True),
        [(0, 0, 2, 1), (0, 0, 2, 0), (0, 0, 2, 0)],
    )
    details = api.get(f"/jobs/{job_id}/details").json()
    assert details["message"] == "Processed 2 of 3 file(s); 1 failed (see failed-files)."
    outputs = api.get(f"/jobs/{job_id}").json()["output_node_files"]
    last_node = flow["workflow_nodes"][-1]["id"]
    assert len(outputs) == 2
    assert {o["node_id"] for o in outputs} == {last_node}
    elements = api.get(f"/jobs/{job_id}/download", params=outputs[0]).json()
    # the basic workflow's Chunker (chunk_by_title, 500 characters) and Embedder (1536 dimensions)
    chunk = "Project Plan\n\nWe will build the thing. Then ship it.\n\ndesign\n\nbuild"
    assert [(e["type"], e["text"], len(e["embeddings"])) for e in elements] == [
        ("CompositeElement", chunk, 1536)
    ]
    assert elements[0]["metadata"] == {"filename": "a.txt", "filetype": "text/plain", "page_number": 1}
    second = api.get(f"/jobs/{job_id}/download", params=outputs[1]).json()
    assert second[0]["metadata"]["filename"] == "c.md"


def test_run_accepts_bracketed_part_names_and_media_types(emulator: Any, api: httpx.Client) -> None:
    emulator.configure(processing_delay=0)
    flow = local_workflow(api)
    parts = [
        ("input_files[]", ("doc.pdf", simple_pdf([["PDF Title", "Body text here."]]), "application/pdf")),
        ("input_files[]", ("page", b"<h1>Hi</h1>", "text/html")),
        ("note", (None, "ignored form field")),
    ]
    job = api.post(f"/workflows/{flow['id']}/run", files=parts).json()
    record = api.get(f"/jobs/{job['id']}").json()
    completed = job_spelling(emulator.dialect, "completed")[1]
    assert record["status"] == completed
    assert len(record["output_node_files"]) == 2
    pdf = api.get(f"/jobs/{job['id']}/download", params=record["output_node_files"][0]).json()
    assert pdf[0]["metadata"] == {"filename": "doc.pdf", "filetype": "application/pdf", "page_number": 1}
    html = api.get(f"/jobs/{job['id']}/download", params=record["output_node_files"][1]).json()
    assert [{**e, "embeddings": len(e["embeddings"])} for e in html] == [
        {
            "type": "CompositeElement",
            "element_id": html[0]["element_id"],
            "text": "Hi",
            "metadata": {"filename": "page", "filetype": "text/html"},
            "embeddings": 1536,
        }
    ]


def test_all_files_failing_fails_the_job(emulator: Any, api: httpx.Client) -> None:
    flow = local_workflow(api)
    parts = [
        ("input_files", ("empty.txt", b"", "text/plain")),
        ("input_files", ("x.exe", b"MZ", "application/x-dosexec")),
    ]
    job = api.post(f"/workflows/{flow['id']}/run", files=parts).json()
    emulator.advance_clock(10 * STEP)
    assert api.get(f"/jobs/{job['id']}").json()["status"] == job_spelling(emulator.dialect, "failed")[1]
    message = api.get(f"/jobs/{job['id']}/details").json()["message"]
    assert message == "All 2 file(s) failed; first error: empty.txt: file is empty (0 bytes)"
    errors = [f["error"] for f in api.get(f"/jobs/{job['id']}/failed-files").json()["failed_files"]]
    assert errors[1].startswith("unsupported file type (extension '.exe'")


def test_run_validation(api: httpx.Client) -> None:
    flow = local_workflow(api)
    no_files = api.post(f"/workflows/{flow['id']}/run")
    assert no_files.status_code == 422
    assert no_files.json()["detail"][0]["loc"] == ["body", "input_files"]
    unnamed = api.post(f"/workflows/{flow['id']}/run", files=[("input_files", (None, "text"))])
    assert unnamed.status_code == 422
    src = create(api, "/sources", {"name": "s", "type": "s3", "config": {"remote_url": "s3://b"}})
    remote = local_workflow(api, "remote", source_id=src["id"])
    with_files = run(api, remote["id"], [("a.txt", TEXT)])
    assert with_files.status_code == 422
    assert "local source" in with_files.json()["detail"][0]["msg"]
    assert api.post(f"/workflows/{uuid.uuid4()}/run").status_code == 404
    assert api.get("/jobs", params={"workflow_id": "nope"}).status_code == 422


def test_job_listing_filters_and_status_spellings(emulator: Any, api: httpx.Client) -> None:
    first, second = local_workflow(api, "one"), local_workflow(api, "two")
    done = run(api, first["id"], [("a.txt", TEXT)]).json()
    emulator.advance_clock(10 * STEP)
    running = run(api, first["id"], [("a.txt", TEXT), ("b.txt", TEXT)]).json()
    other = run(api, second["id"], [("a.txt", TEXT)]).json()
    emulator.advance_clock(STEP)

    def ids(**params: str) -> list[str]:
        response = api.get("/jobs", params=params)
        assert response.status_code == 200, response.text
        return [j["id"] for j in response.json()]

    assert ids() == [other["id"], running["id"], done["id"]]  # newest first
    assert ids(workflow_id=first["id"]) == [running["id"], done["id"]]
    for spelling in ("im progress", "in progress", "IN_PROGRESS", "In-Progress", "running"):
        assert ids(workflow_id=first["id"], status=spelling) == [running["id"]]
    assert ids(status="completed") == [done["id"]]
    assert ids(workflow_id=second["id"], status="completed") == []
    bad = api.get("/jobs", params={"status": "sleeping"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "status"]


def test_cancel(emulator: Any, api: httpx.Client) -> None:
    flow = local_workflow(api)
    queued = run(api, flow["id"], [("a.txt", TEXT)]).json()
    assert (
        api.post(f"/jobs/{queued['id']}/cancel").json()["status"]
        == job_spelling(emulator.dialect, "stopped")[0]
    )
    job = run(api, flow["id"], [("a.txt", TEXT), ("b.txt", TEXT)]).json()
    emulator.advance_clock(2 * STEP)
    frozen = job_state(api, job["id"])[3]
    assert api.post(f"/jobs/{job['id']}/cancel").status_code == 200
    emulator.advance_clock(10 * STEP)
    assert job_state(api, job["id"]) == (*job_spelling(emulator.dialect, "stopped"), frozen)
    assert api.get(f"/jobs/{job['id']}").json()["output_node_files"] == []
    assert "cancelled" in api.get(f"/jobs/{job['id']}/details").json()["message"]
    again = api.post(f"/jobs/{job['id']}/cancel")
    assert again.status_code == 409
    assert again.json()["detail"].startswith("job already completed")
    finished = run(api, flow["id"], [("a.txt", TEXT)]).json()
    emulator.advance_clock(10 * STEP)
    late = api.post(f"/jobs/{finished['id']}/cancel")
    assert (late.status_code, late.json()["detail"]) == (
        409,
        f"job already completed: its status is {job_spelling(emulator.dialect, 'completed')[0]}",
    )
    assert api.post(f"/jobs/{uuid.uuid4()}/cancel").status_code == 404


def test_download_errors(emulator: Any, api: httpx.Client) -> None:
    flow = local_workflow(api)
    job = run(api, flow["id"], [("a.txt", TEXT)]).json()
    node = flow["workflow_nodes"][-1]["id"]
    early = api.get(f"/jobs/{job['id']}/download", params={"file_id": "x", "node_id": node})
    assert early.status_code == 409
    assert job_spelling(emulator.dialect, "scheduled")[0] in early.json()["detail"]
    emulator.advance_clock(10 * STEP)
    output = api.get(f"/jobs/{job['id']}").json()["output_node_files"][0]
    assert api.get(f"/jobs/{job['id']}/download", params={**output, "node_id": "other"}).status_code == 404
    assert api.get(f"/jobs/{job['id']}/download", params={**output, "file_id": "other"}).status_code == 404
    missing = api.get(f"/jobs/{job['id']}/download", params={"file_id": output["file_id"]})
    if emulator.dialect == "spec":
        assert missing.status_code == 422
        assert missing.json()["detail"][0]["loc"] == ["query", "node_id"]
    else:  # node_id is optional: the last node's output
        with_node = api.get(f"/jobs/{job['id']}/download", params=output)
        assert missing.status_code == 200
        assert missing.json() == with_node.json()
    dst = create(api, "/destinations/", {"name": "d", "type": "s3", "config": {"remote_url": "s3://o"}})
    remote_out = local_workflow(api, "to-s3", destination_id=dst["id"])
    remote_job = run(api, remote_out["id"], [("a.txt", TEXT)]).json()
    emulator.advance_clock(10 * STEP)
    assert api.get(f"/jobs/{remote_job['id']}").json()["output_node_files"] == []
    refused = api.get(f"/jobs/{remote_job['id']}/download", params=output)
    assert refused.status_code == 409
    assert "local source and a local destination" in refused.json()["detail"]


def test_remote_source_jobs(emulator: Any, api: httpx.Client) -> None:
    config = {
        "url": "https://wiki.example.com",
        "username": "u",
        "token": "t",
        "spaces": ["ENG", "OPS", "HR"],
        "max_num_of_spaces": 2,
        "max_num_of_docs_from_each_space": 2,
    }
    wiki = create(api, "/sources", {"name": "wiki", "type": "confluence", "config": config})
    flow = local_workflow(api, "wiki-flow", source_id=wiki["id"])
    job = api.post(f"/workflows/{flow['id']}/run").json()
    emulator.advance_clock(20 * STEP)
    details = api.get(f"/jobs/{job['id']}/details").json()
    finished = job_spelling(emulator.dialect, "completed")[2]
    assert details["processing_status"] == finished
    assert details["node_stats"][0]["success"] == 4
    output = api.get(f"/jobs/{job['id']}").json()["output_node_files"][0]
    assert api.get(f"/jobs/{job['id']}/download", params=output).status_code == 409
    emulator.configure(allow_remote_source_download=True)
    elements = api.get(f"/jobs/{job['id']}/download", params=output).json()
    permissions = elements[0]["metadata"]["data_source"]["permissions_data"]
    assert [next(iter(p)) for p in permissions] == ["read", "update", "delete"]
    assert permissions[0]["read"]["groups"] == ["eng-readers"]

    bucket = {"remote_url": "s3://b", "emulator_documents": 3, "emulator_failed_documents": 1}
    s3 = create(api, "/sources", {"name": "s3", "type": "s3", "config": bucket})
    s3_flow = local_workflow(api, "s3-flow", source_id=s3["id"])
    s3_job = api.post(f"/workflows/{s3_flow['id']}/run").json()
    emulator.advance_clock(20 * STEP)
    assert api.get(f"/jobs/{s3_job['id']}").json()["status"] == job_spelling(emulator.dialect, "completed")[1]
    failed = api.get(f"/jobs/{s3_job['id']}/failed-files").json()["failed_files"]
    assert [f["document"] for f in failed] == ["s3-document-3.txt"]


def just_past_the_hour(emulator: Any) -> None:
    """
    Move the emulator's clock to a second past its next full hour. Its time is real time plus an offset
    and schedules fire on the wall clock's quarter hours: a test started here crosses no boundary of
    its own for 14 minutes, longer than any test may run (pytest's timeout), whatever the machine's load.
    """
    now = emulator.now()
    emulator.advance_clock(3600 - (now.minute * 60 + now.second + now.microsecond / 1e6) + 1)


def test_schedules_fire_with_the_clock(emulator: Any, api: httpx.Client) -> None:
    just_past_the_hour(emulator)
    emulator.configure(processing_delay=0.01)
    src = create(api, "/sources", {"name": "s", "type": "s3", "config": {"remote_url": "s3://b"}})
    remote = local_workflow(api, "quarterly", source_id=src["id"], schedule="every 15 minutes")
    local = local_workflow(api, "local-hourly", schedule="every hour")
    paused = local_workflow(api, "paused", source_id=src["id"], schedule="every 15 minutes")
    api.put(f"/workflows/{paused['id']}", json={"status": "inactive"})
    assert api.get("/jobs").json() == []
    emulator.advance_clock(3600)
    remote_jobs = api.get("/jobs", params={"workflow_id": remote["id"]}).json()
    assert len(remote_jobs) == 4
    minutes = sorted(j["created_at"][14:16] for j in remote_jobs)
    assert minutes == ["00", "15", "30", "45"]
    assert {j["status"] for j in remote_jobs} == {job_spelling(emulator.dialect, "completed")[0]}
    (local_job,) = api.get("/jobs", params={"workflow_id": local["id"]}).json()
    assert local_job["status"] == job_spelling(emulator.dialect, "failed")[0]
    assert "No input files" in api.get(f"/jobs/{local_job['id']}/details").json()["message"]
    assert api.get("/jobs", params={"workflow_id": paused["id"]}).json() == []
    api.put(f"/workflows/{remote['id']}", json={"schedule": None})
    emulator.advance_clock(3600)
    assert len(api.get("/jobs", params={"workflow_id": remote["id"]}).json()) == 4
    assert len(api.get("/jobs", params={"workflow_id": local["id"]}).json()) == 2


def test_schedule_backlog_is_capped(emulator: Any, api: httpx.Client) -> None:
    just_past_the_hour(emulator)
    src = create(api, "/sources", {"name": "s", "type": "s3", "config": {"remote_url": "s3://b"}})
    flow = local_workflow(api, "busy", source_id=src["id"], schedule="every 15 minutes")
    emulator.advance_clock(30 * 24 * 3600)
    assert len(api.get("/jobs", params={"workflow_id": flow["id"]}).json()) == 50
    emulator.advance_clock(900)
    assert len(api.get("/jobs", params={"workflow_id": flow["id"]}).json()) == 51


def test_reset_and_clock(emulator: Any, api: httpx.Client) -> None:
    before = emulator.now()
    emulator.advance_clock(7200)
    assert (emulator.now() - before).total_seconds() >= 7200
    local_workflow(api)
    emulator.set_faults(latency=0.01)
    emulator.reset()
    assert emulator.requests() == []
    assert api.get("/workflows/").json() == []
    assert abs((emulator.now() - before).total_seconds()) < 60
    assert emulator.config()["processing_delay"] == 0.05


def _peak_rss_mib(pid: int) -> float:
    """The peak resident memory of a process (Linux ``VmHWM``), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def test_a_large_upload_is_streamed_to_disk_not_memory(tmp_path: Any) -> None:
    import time

    from airflow_provider_workflowsvc.emulator.service import MAX_PROCESSED_FILE_BYTES
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    big = tmp_path / "big.txt"
    line = b"A line of text that fills the large upload with something to read.\n"
    with big.open("wb") as out:
        for _ in range(160):  # 160 MiB
            out.write(line * (1024 * 1024 // len(line) + 1))
    size = big.stat().st_size
    assert size > 2 * MAX_PROCESSED_FILE_BYTES
    with running_emulator(subprocess=True, processing_delay=0) as emu, emu.api_client(timeout=120) as api:
        flow = create(api, "/workflows/", {"name": "big", "workflow_type": "basic"})
        before = _peak_rss_mib(emu.pid or 0)
        started = time.monotonic()
        with big.open("rb") as handle:
            parts = [
                ("input_files", ("big.txt", handle, "text/plain")),
                ("input_files", ("small.txt", TEXT, "text/plain")),
            ]
            response = api.post(f"/workflows/{flow['id']}/run", files=parts)
        elapsed = time.monotonic() - started
        assert response.status_code == 200, response.text
        growth = _peak_rss_mib(emu.pid or 0) - before
        failed = api.get(f"/jobs/{response.json()['id']}/failed-files").json()["failed_files"]
    assert [f["document"] for f in failed] == ["big.txt"]
    assert "file too large" in failed[0]["error"]
    print(f"\n{size / 2**20:.0f} MiB upload: peak RSS +{growth:.1f} MiB, {elapsed:.1f} s")
    assert growth < 48, f"the emulator's peak memory grew by {growth:.0f} MiB for a {size >> 20} MiB upload"
