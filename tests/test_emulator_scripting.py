"""What a test can script in the emulator beyond faults: files that fail by name, how a workflow's jobs
end, a clock move when a request arrives, one more fault rule; and the jobs it can inspect."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import job_spelling

STEP = 100.0  # processing delay: real time between calls is negligible


@pytest.fixture
def api(emulator: Any) -> Iterator[httpx.Client]:
    emulator.configure(processing_delay=STEP)
    with emulator.api_client() as client:
        yield client


def local_workflow(api: httpx.Client, name: str) -> str:
    response = api.post("/workflows/", json={"name": name, "workflow_type": "basic"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def run(api: httpx.Client, workflow_id: str, *names: str) -> str:
    parts = [("input_files", (name, b"Some text to process.", "text/plain")) for name in names]
    response = api.post(f"/workflows/{workflow_id}/run", files=parts)
    assert response.status_code in (200, 202), response.text
    return str(response.json()["id"])


def test_files_named_like_a_pattern_fail_whatever_their_content(emulator: Any, api: httpx.Client) -> None:
    emulator.configure(failing_files=["bad-*.txt"])
    job_id = run(api, local_workflow(api, "wf"), "good.txt", "bad-1.txt")
    emulator.advance_clock(10 * STEP)
    failed = api.get(f"/jobs/{job_id}/failed-files").json()["failed_files"]
    assert failed == [
        {
            "document": "bad-1.txt",
            "error": "document could not be processed (the emulator fails files named 'bad-*.txt')",
        }
    ]
    assert api.get(f"/jobs/{job_id}").json()["status"] == job_spelling(emulator.dialect, "completed")[1]


def test_a_remote_sources_documents_fail_by_name_too(emulator: Any, api: httpx.Client) -> None:
    emulator.configure(failing_files=["*-2.txt"])
    config = {"remote_url": "s3://b", "emulator_documents": 3}
    source = api.post("/sources", json={"name": "s", "type": "s3", "config": config}).json()
    workflow = api.post(
        "/workflows/", json={"name": "remote", "workflow_type": "basic", "source_id": source["id"]}
    ).json()
    job_id = api.post(f"/workflows/{workflow['id']}/run").json()["id"]
    emulator.advance_clock(10 * STEP)
    failed = api.get(f"/jobs/{job_id}/failed-files").json()["failed_files"]
    assert [f["document"] for f in failed] == ["s3-document-2.txt"]


@pytest.mark.parametrize("ending", ["failed", "stopped"])
def test_the_jobs_of_a_workflow_end_as_the_test_chose(emulator: Any, api: httpx.Client, ending: str) -> None:
    emulator.configure(job_endings={"nightly-*": ending})
    chosen = run(api, local_workflow(api, "nightly-load"), "a.txt")
    other = run(api, local_workflow(api, "adhoc"), "a.txt")
    emulator.advance_clock(STEP)
    assert api.get(f"/jobs/{chosen}").json()["status"] == job_spelling(emulator.dialect, "in progress")[1]
    emulator.advance_clock(10 * STEP)
    assert api.get(f"/jobs/{chosen}").json()["status"] == job_spelling(emulator.dialect, ending)[1]
    assert api.get(f"/jobs/{other}").json()["status"] == job_spelling(emulator.dialect, "completed")[1]
    message = api.get(f"/jobs/{chosen}/details").json()["message"]
    assert message.startswith(f"Job {'failed' if ending == 'failed' else 'was stopped by'}"), message
    assert api.get(f"/jobs/{chosen}/failed-files").json() == {"failed_files": []}
    emulator.configure(job_endings={})
    assert api.get(f"/jobs/{chosen}").json()["status"] == job_spelling(emulator.dialect, ending)[1]


def test_a_rule_moves_the_clock_when_its_request_arrives(emulator: Any, api: httpx.Client) -> None:
    job_id = run(api, local_workflow(api, "wf"), "a.txt")
    before = emulator.now()
    emulator.add_fault(method="GET", path="/api/v1/jobs/*", advance_clock=10 * STEP, count=1)
    assert api.get(f"/jobs/{job_id}").json()["status"] == job_spelling(emulator.dialect, "completed")[1]
    assert (emulator.now() - before).total_seconds() >= 10 * STEP
    later = emulator.now()
    api.get(f"/jobs/{job_id}")  # the rule is spent: the clock stays
    assert (emulator.now() - later).total_seconds() < STEP
    assert [r["fault"] for r in emulator.requests(method="GET")] == [f"clock +{10 * STEP:g}s", None]


def test_an_added_rule_keeps_the_counts_of_the_others(emulator: Any, api: httpx.Client) -> None:
    emulator.set_faults(method="GET", path="/api/v1/sources", errors=[503], count=2)
    assert api.get("/sources").status_code == 503
    described = emulator.add_fault(method="GET", path="/api/v1/workflows", errors=[502])
    assert [rule["remaining"] for rule in described["rules"]] == [1, None]
    assert api.get("/sources").status_code == 503
    assert api.get("/sources").status_code == 200
    assert api.get("/workflows").status_code == 502


def test_an_invalid_rule_is_refused_with_the_field(emulator: Any) -> None:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        emulator.add_fault(errors=[418])
    assert caught.value.response.status_code == 422
    assert "errors" in caught.value.response.text


def test_the_jobs_show_the_names_received_and_why_files_failed(emulator: Any, api: httpx.Client) -> None:
    emulator.configure(failing_files=["b.txt"])
    first = run(api, local_workflow(api, "one"), "a.txt", "b.txt")
    second = run(api, local_workflow(api, "two"), "c.txt")
    emulator.advance_clock(10 * STEP)
    jobs = emulator.jobs()
    assert [j["id"] for j in jobs] == [first, second]  # oldest first
    assert [(j["workflow_name"], j["status"], j["scheduled"]) for j in jobs] == [
        ("one", "completed", False),
        ("two", "completed", False),
    ]
    assert [f["name"] for f in jobs[0]["files"]] == ["a.txt", "b.txt"]
    assert jobs[0]["files"][0]["error"] is None
    assert "'b.txt'" in jobs[0]["files"][1]["error"]
    assert emulator.jobs() == jobs  # reading them changes nothing
    emulator.reset()
    assert emulator.jobs() == []
