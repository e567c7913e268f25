"""Templates and on-demand jobs in the emulator (platform dialect), over HTTP: the catalogue, the job's
life, the request's checks, the documented limits (files, size, launch gap, running cap, quota) and the
emulator's own guarantees (faults, request log, no echo). Every wait is a step of the emulator clock."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import TEST_API_KEY, TEST_TOKEN

from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle, running_emulator

STEP = 100.0  # processing delay: real time between two calls is negligible beside it
TEXT = b"Quarterly Report\n\nRevenue grew in every region.\n\n- north\n- south\n"
CUSTOM_NODE_ID = "0b9a7c52-3f1e-4d2a-9c8b-6e5f4d3c2b1a"
PARTITION_ONLY = [
    {
        "id": CUSTOM_NODE_ID,
        "name": "partition step",
        "type": "partition",
        "subtype": "unstructured_api",
        "settings": {"strategy": "fast", "provider_api_key": "sk-live-secret-7731"},
    }
]
SECRET = "sk-live-secret-7731"


@pytest.fixture(scope="module")
def platform_server() -> Iterator[EmulatorHandle]:
    with running_emulator(token=TEST_TOKEN, api_key=TEST_API_KEY, dialect="platform") as emulator:
        yield emulator


@pytest.fixture
def emu(platform_server: EmulatorHandle) -> EmulatorHandle:
    """The platform emulator, emptied, with a slow clock and no launch gap (tests that need it set it)."""
    platform_server.reset()
    platform_server.configure(processing_delay=STEP, on_demand_launch_interval=0)
    return platform_server


@pytest.fixture
def api(emu: EmulatorHandle) -> Iterator[httpx.Client]:
    with emu.api_client() as client:
        yield client


Files = Sequence[tuple[str, bytes]]


def launch(
    api: httpx.Client, request_data: Any, files: Files = (), *, part: str = "input_files"
) -> httpx.Response:
    """POST /jobs/ as the SDK does: a ``request_data`` text part and one part per file."""
    data = {"request_data": request_data if isinstance(request_data, str) else json.dumps(request_data)}
    parts = [(part, (name, content, "text/plain")) for name, content in files]
    return api.post("/jobs/", data=data, files=parts or None)


def launched(api: httpx.Client, request_data: Any, files: Files = ()) -> dict[str, Any]:
    response = launch(api, request_data, files)
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


def status(api: httpx.Client, job_id: str) -> str:
    return str(api.get(f"/jobs/{job_id}").json()["status"])


def job_count(api: httpx.Client) -> int:
    return len(api.get("/jobs/").json())


# --------------------------------------------------------------------------------------------------
# The operations exist in the platform dialect only


def test_the_spec_dialect_has_no_templates_and_no_on_demand_jobs(emulator: EmulatorHandle) -> None:
    """The seed has none of the three operations: the spec dialect answers as before (404, 405)."""
    with emulator.api_client() as api:
        answers = (
            api.get("/templates/").status_code,
            api.get("/templates/hi_res_partition").status_code,
            launch(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT)]).status_code,
        )
        if emulator.dialect == "spec":
            assert answers == (404, 404, 405)
            assert api.get("/jobs").json() == []
        else:
            assert answers == (200, 200, 200)


# --------------------------------------------------------------------------------------------------
# The catalogue


def test_the_template_catalogue(api: httpx.Client) -> None:
    listed = api.get("/templates/").json()
    assert [t["id"] for t in listed] == ["hi_res_partition", "hi_res_and_enrichment"]
    for item in listed:
        assert set(item) == {"id", "name", "description", "version", "last_updated"}
        assert all(isinstance(value, str) and value for value in item.values())
        detail = api.get(f"/templates/{item['id']}").json()
        assert {k: v for k, v in detail.items() if k != "nodes"} == item
        assert detail["nodes"][0]["type"] == "partition"
        assert detail["nodes"][0]["settings"]["strategy"] == "hi_res"
        for node in detail["nodes"]:
            assert set(node) == {"id", "name", "type", "subtype", "settings"}
    enrichment = api.get("/templates/hi_res_and_enrichment").json()
    assert [n["type"] for n in enrichment["nodes"]] == ["partition", "prompter", "prompter"]


def test_an_unknown_template_is_404_and_its_id_is_not_echoed(api: httpx.Client) -> None:
    response = api.get("/templates/no-such-template-4711")
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert "no-such-template-4711" not in detail
    assert "hi_res_partition" in detail


# --------------------------------------------------------------------------------------------------
# An on-demand job's life


def test_a_template_job_runs_like_a_run(emu: EmulatorHandle, api: httpx.Client) -> None:
    files = [("a.txt", TEXT), ("bad.txt", b"\x00\x01"), ("c.md", b"# C\n\nText.")]
    job = launched(api, {"template_id": "hi_res_and_enrichment"}, files)
    assert job["status"] == "SCHEDULED"
    assert job["job_type"] == "template"
    assert job["workflow_name"] == f"job-{job['id'][:8]}"
    assert job["input_file_ids"] == ["a.txt", "bad.txt", "c.md"]
    assert job["output_node_files"] == []
    emu.advance_clock(STEP)
    assert status(api, job["id"]) == "IN_PROGRESS"
    emu.advance_clock(5 * STEP)  # 3 files through 3 nodes: slots 0..4
    record = api.get(f"/jobs/{job['id']}").json()
    assert record["status"] == "COMPLETED"
    details = api.get(f"/jobs/{job['id']}/details").json()
    assert details["processing_status"] == "COMPLETED_WITH_ERRORS"
    assert [n["node_name"] for n in details["node_stats"]] == [
        "Partitioner",
        "Image description",
        "Table description",
    ]
    failed = api.get(f"/jobs/{job['id']}/failed-files").json()["failed_files"]
    assert [f["document"] for f in failed] == ["bad.txt"]
    outputs = record["output_node_files"]
    template = api.get("/templates/hi_res_and_enrichment").json()
    assert {(o["node_id"], o["node_type"], o["node_subtype"]) for o in outputs} == {
        (template["nodes"][-1]["id"], "prompter", "openai_table_description")
    }
    first = outputs[0]
    by_id = api.get(f"/jobs/{job['id']}/download", params={"file_id": first["file_id"]})
    by_node = api.get(f"/jobs/{job['id']}/download", params=first)
    by_input_id = api.get(f"/jobs/{job['id']}/download", params={"file_id": "a.txt"})
    assert by_id.status_code == by_node.status_code == by_input_id.status_code == 200
    assert by_id.json() == by_node.json() == by_input_id.json()
    assert by_id.json()[0]["metadata"]["filename"] == "a.txt"
    assert api.get(f"/jobs/{job['id']}/download", params={"file_id": "bad.txt"}).status_code == 404


def test_a_job_of_custom_nodes_is_ephemeral_and_keeps_its_node_ids(
    emu: EmulatorHandle, api: httpx.Client
) -> None:
    job = launched(api, {"job_nodes": PARTITION_ONLY}, [("a.txt", TEXT)])
    assert job["job_type"] == "ephemeral"
    emu.advance_clock(3 * STEP)
    record = api.get(f"/jobs/{job['id']}").json()
    assert record["status"] == "COMPLETED"
    assert record["output_node_files"][0]["node_id"] == CUSTOM_NODE_ID
    assert record["output_node_files"][0]["node_subtype"] == "unstructured_api"
    listed = api.get("/jobs", params={"workflow_id": job["workflow_id"]}).json()
    assert [j["id"] for j in listed] == [job["id"]]
    assert api.get(f"/workflows/{job['workflow_id']}").status_code == 404  # temporary: not a workflow
    assert api.get("/workflows/").json() == []


def test_a_job_without_files_fails_saying_why(emu: EmulatorHandle, api: httpx.Client) -> None:
    job = launched(api, {"job_nodes": PARTITION_ONLY})
    assert job["input_file_ids"] == []
    emu.advance_clock(STEP)
    assert status(api, job["id"]) == "FAILED"
    assert "No input files" in api.get(f"/jobs/{job['id']}/details").json()["message"]


def test_an_on_demand_job_can_be_cancelled(emu: EmulatorHandle, api: httpx.Client) -> None:
    job = launched(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT)])
    emu.advance_clock(STEP)
    cancelled = api.post(f"/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "STOPPED"
    emu.advance_clock(10 * STEP)
    assert status(api, job["id"]) == "STOPPED"


# --------------------------------------------------------------------------------------------------
# The request


BAD_REQUESTS: dict[str, tuple[Any, str]] = {
    "not JSON": (f'{{"template_id": "{SECRET}"', "request_data is not valid JSON"),
    "a list": ([{"template_id": "hi_res_partition"}], "request_data must be a JSON object"),
    "neither": ({}, "give exactly one of template_id and job_nodes"),
    "both": (
        {"template_id": "hi_res_partition", "job_nodes": PARTITION_ONLY},
        "give exactly one of template_id and job_nodes",
    ),
    "unknown template": ({"template_id": SECRET}, "unknown template_id; expected one of: hi_res_partition"),
    "no nodes": ({"job_nodes": []}, "an on-demand job needs at least one node"),
    "repeated node names": ({"job_nodes": PARTITION_ONLY * 2}, "node names must be unique"),
    "a node without type": (
        {"job_nodes": [{"name": "p", "subtype": "x", "settings": {"key": SECRET}}]},
        "Field required",
    ),
    "an unknown field": ({"template_id": "hi_res_partition", "token": SECRET}, "Extra inputs"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_a_bad_request_is_refused_before_anything_is_created(api: httpx.Client, case: str) -> None:
    request_data, message = BAD_REQUESTS[case]
    response = launch(api, request_data, [("a.txt", TEXT)])
    assert response.status_code == 422, response.text
    assert message in response.text
    assert SECRET not in response.text
    assert job_count(api) == 0


def test_the_form_itself_is_checked(api: httpx.Client) -> None:
    good = json.dumps({"template_id": "hi_res_partition"})
    without = api.post("/jobs/", json={"template_id": "hi_res_partition"})  # JSON, not a form
    assert without.status_code == 422
    assert without.json()["detail"][0]["loc"] == ["body", "request_data"]
    twice = api.post("/jobs/", files=[("request_data", (None, good)), ("request_data", (None, good))])
    assert twice.status_code == 422
    as_file = api.post("/jobs/", files=[("request_data", ("r.json", good.encode(), "application/json"))])
    assert as_file.status_code == 422
    assert "text part" in as_file.text
    nameless = api.post("/jobs/", data={"request_data": good}, files=[("input_files", (None, "text"))])
    assert nameless.status_code == 422
    assert job_count(api) == 0


def test_both_part_names_and_a_bodyless_form_are_accepted(api: httpx.Client) -> None:
    """The SDK names its parts ``input_files[]``; with no file it sends the form URL-encoded."""
    bracketed = launch(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT)], part="input_files[]")
    assert bracketed.json()["input_file_ids"] == ["a.txt"]
    encoded = api.post("/jobs/", data={"request_data": json.dumps({"job_nodes": PARTITION_ONLY})})
    assert encoded.status_code == 200, encoded.text
    assert job_count(api) == 2


def test_node_settings_are_never_shown(emu: EmulatorHandle, api: httpx.Client) -> None:
    """A node's settings may hold a key (``provider_api_key``): no answer about the job carries them."""
    job = launched(api, {"job_nodes": PARTITION_ONLY}, [("a.txt", TEXT)])
    emu.advance_clock(3 * STEP)
    answers = [
        api.get(f"/jobs/{job['id']}").text,
        api.get("/jobs/").text,
        api.get(f"/jobs/{job['id']}/details").text,
        api.get(f"/jobs/{job['id']}/failed-files").text,
        json.dumps(emu.requests()),
    ]
    assert not [a for a in answers if SECRET in a]


# --------------------------------------------------------------------------------------------------
# The documented limits, each a setting


def test_more_files_than_the_limit_are_refused(emu: EmulatorHandle, api: httpx.Client) -> None:
    eleven = [(f"f{i}.txt", TEXT) for i in range(11)]
    refused = launch(api, {"template_id": "hi_res_partition"}, eleven)
    assert refused.status_code == 422
    assert refused.json()["detail"] == [
        {
            "loc": ["body", "input_files"],
            "msg": "Each on-demand job is limited to 10 files; this request has 11.",
            "type": "too_long",
        }
    ]
    assert launch(api, {"template_id": "hi_res_partition"}, eleven[:10]).status_code == 200
    emu.configure(on_demand_max_files=2)
    assert launch(api, {"template_id": "hi_res_partition"}, eleven[:3]).status_code == 422
    assert launch(api, {"template_id": "hi_res_partition"}, eleven[:2]).status_code == 200
    assert job_count(api) == 2


def test_a_file_over_the_size_limit_is_refused_naming_it(emu: EmulatorHandle, api: httpx.Client) -> None:
    over = launch(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT), ("big.txt", b"x" * 10_000_001)])
    assert over.status_code == 413
    assert over.json() == {"detail": "Each file is limited to 10 MB in size; 'big.txt' has 10,000,001 bytes."}
    emu.configure(on_demand_max_file_bytes=len(TEXT))
    assert launch(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT)]).status_code == 200
    small = launch(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT + b"!")])
    assert small.status_code == 413
    assert f"limited to {len(TEXT):,} bytes" in small.text
    assert job_count(api) == 1


def test_launches_closer_than_the_gap_get_429_on_the_emulator_clock(
    emu: EmulatorHandle, api: httpx.Client
) -> None:
    emu.configure(on_demand_launch_interval=3600)  # no real pause between two calls comes near it
    request = {"template_id": "hi_res_partition"}
    assert launch(api, request, [("a.txt", TEXT)]).status_code == 200
    assert launch(api, {"template_id": "nope"}).status_code == 422  # checked before the gap
    too_soon = launch(api, request, [("b.txt", TEXT)])
    assert too_soon.status_code == 429
    assert "wait at least 3600 second(s) between on-demand job launch requests" in too_soon.json()["detail"]
    wait = int(too_soon.headers["retry-after"])
    assert 3590 < wait <= 3600
    assert job_count(api) == 1  # refused: nothing created, and it does not count as a launch
    emu.advance_clock(wait - 600)
    again = launch(api, request, [("b.txt", TEXT)])
    assert again.status_code == 429
    assert 0 < int(again.headers["retry-after"]) <= 600
    emu.advance_clock(int(again.headers["retry-after"]))
    assert launch(api, request, [("b.txt", TEXT)]).status_code == 200
    assert job_count(api) == 2


def test_the_defaults_are_the_documented_limits(emu: EmulatorHandle, api: httpx.Client) -> None:
    emu.reset()
    config = emu.config()
    limits = ("on_demand_max_files", "on_demand_max_file_bytes", "on_demand_launch_interval")
    assert [config[k] for k in (*limits, "on_demand_max_running", "quota_exhausted")] == [
        10,
        10_000_000,
        1.0,
        5,
        False,
    ]
    emu.configure(processing_delay=STEP)
    assert launch(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT)]).status_code == 200
    emu.advance_clock(1)
    assert launch(api, {"template_id": "hi_res_partition"}, [("b.txt", TEXT)]).status_code == 200


def test_the_quota_switch_answers_402_to_work_only(emu: EmulatorHandle, api: httpx.Client) -> None:
    workflow = api.post("/workflows/", json={"name": "local", "workflow_type": "basic"}).json()
    done = launched(api, {"template_id": "hi_res_partition"}, [("a.txt", TEXT)])
    emu.configure(quota_exhausted=True)
    refused = launch(api, {"template_id": "hi_res_partition"}, [("b.txt", TEXT)])
    assert (refused.status_code, refused.json()) == (402, {"detail": "Insufficient API quota"})
    run = api.post(f"/workflows/{workflow['id']}/run", files=[("input_files", ("a.txt", TEXT, "text/plain"))])
    assert (run.status_code, run.json()) == (402, {"detail": "Insufficient API quota"})
    assert api.get(f"/jobs/{done['id']}").status_code == 200  # reading is not work
    assert api.get("/templates/").status_code == 200
    assert job_count(api) == 1
    emu.configure(quota_exhausted=False)
    assert launch(api, {"template_id": "hi_res_partition"}, [("b.txt", TEXT)]).status_code == 200


# --------------------------------------------------------------------------------------------------
# The running cap: a queue, first come first served, on the emulator clock


def _states(api: httpx.Client, jobs: list[dict[str, Any]]) -> list[str]:
    by_id = {j["id"]: j["status"] for j in api.get("/jobs/").json()}
    return [by_id[j["id"]] for j in jobs]


def test_beyond_the_cap_jobs_stay_scheduled_until_one_ends(emu: EmulatorHandle, api: httpx.Client) -> None:
    """Cap 2, three one-file one-node jobs of 2 slots each: the third starts when the first ends."""
    emu.configure(on_demand_max_running=2)
    jobs = [launched(api, {"job_nodes": PARTITION_ONLY}, [(f"{n}.txt", TEXT)]) for n in "abc"]
    assert _states(api, jobs) == ["SCHEDULED"] * 3
    queued = api.get(f"/jobs/{jobs[2]['id']}/details").json()["message"]
    assert "starts when one of the account's running on-demand jobs ends" in queued
    emu.advance_clock(1.5 * STEP)
    assert _states(api, jobs) == ["IN_PROGRESS", "IN_PROGRESS", "SCHEDULED"]
    emu.advance_clock(STEP)  # the first two end at 2 slots; the third is admitted then
    assert _states(api, jobs) == ["COMPLETED", "COMPLETED", "SCHEDULED"]
    emu.advance_clock(STEP)
    assert _states(api, jobs) == ["COMPLETED", "COMPLETED", "IN_PROGRESS"]
    emu.advance_clock(STEP)
    assert _states(api, jobs) == ["COMPLETED"] * 3


def test_a_big_clock_step_admits_at_the_times_a_queue_would(emu: EmulatorHandle, api: httpx.Client) -> None:
    """Cap 1, four jobs of 2 slots: one long step later, they ran one after another, not at once."""
    emu.configure(on_demand_max_running=1)
    jobs = [launched(api, {"job_nodes": PARTITION_ONLY}, [(f"{n}.txt", TEXT)]) for n in "abcd"]
    emu.advance_clock(5 * STEP)  # job 3 runs from 4 to 6 slots, job 4 from 6 to 8
    assert _states(api, jobs) == ["COMPLETED", "COMPLETED", "IN_PROGRESS", "SCHEDULED"]
    emu.advance_clock(2 * STEP)
    assert _states(api, jobs) == ["COMPLETED"] * 3 + ["IN_PROGRESS"]


def test_cancelling_frees_a_place_and_a_cancelled_queued_job_takes_none(
    emu: EmulatorHandle, api: httpx.Client
) -> None:
    emu.configure(on_demand_max_running=1)
    jobs = [launched(api, {"job_nodes": PARTITION_ONLY}, [(f"{n}.txt", TEXT)]) for n in "abc"]
    assert api.post(f"/jobs/{jobs[1]['id']}/cancel").status_code == 200  # queued: never starts
    emu.advance_clock(1.5 * STEP)
    assert _states(api, jobs) == ["IN_PROGRESS", "STOPPED", "SCHEDULED"]
    assert api.post(f"/jobs/{jobs[0]['id']}/cancel").status_code == 200  # frees the place now
    emu.advance_clock(1.5 * STEP)
    assert _states(api, jobs) == ["STOPPED", "STOPPED", "IN_PROGRESS"]


def test_the_cap_set_at_run_time_applies_from_then_on(emu: EmulatorHandle, api: httpx.Client) -> None:
    emu.configure(on_demand_max_running=1)
    jobs = [launched(api, {"job_nodes": PARTITION_ONLY}, [(f"{n}.txt", TEXT)]) for n in "abc"]
    emu.advance_clock(1.5 * STEP)
    assert _states(api, jobs) == ["IN_PROGRESS", "SCHEDULED", "SCHEDULED"]
    emu.configure(on_demand_max_running=3)  # the queued two start now, not back at launch
    assert _states(api, jobs)[1:] == ["SCHEDULED", "SCHEDULED"]
    emu.advance_clock(STEP)
    assert _states(api, jobs) == ["COMPLETED", "IN_PROGRESS", "IN_PROGRESS"]


def test_the_default_cap_is_five(emu: EmulatorHandle, api: httpx.Client) -> None:
    assert emu.config()["on_demand_max_running"] == 5
    jobs = [launched(api, {"job_nodes": PARTITION_ONLY}, [(f"{n}.txt", TEXT)]) for n in "abcdef"]
    emu.advance_clock(1.5 * STEP)
    assert _states(api, jobs) == ["IN_PROGRESS"] * 5 + ["SCHEDULED"]


@contextmanager
def _persistent_api(db: str) -> Iterator[tuple[EmulatorHandle, httpx.Client]]:
    with running_emulator(db=db, dialect="platform", processing_delay=STEP) as emu, emu.api_client() as api:
        yield emu, api


def test_the_queue_survives_a_restart(tmp_path: Path) -> None:
    """With a database file, a queued job is admitted by the restarted emulator when a place frees."""
    db = str(tmp_path / "state.db")
    ids = []
    with _persistent_api(db) as (first, api):
        for name in "abcdef":  # the default cap (5) and launch gap (1 s)
            ids.append(launched(api, {"job_nodes": PARTITION_ONLY}, [(f"{name}.txt", TEXT)])["id"])
            first.advance_clock(1)
    with _persistent_api(db) as (second, api):
        assert status(api, ids[-1]) == "SCHEDULED"
        second.advance_clock(2.5 * STEP)  # the first job ends at 2 slots: the sixth starts then
        assert [status(api, i) for i in ids] == ["COMPLETED"] * 5 + ["SCHEDULED"]
        second.advance_clock(STEP)
        assert status(api, ids[-1]) == "IN_PROGRESS"


# --------------------------------------------------------------------------------------------------
# The emulator's own guarantees hold on these routes too


def test_faults_and_the_request_log_apply(emu: EmulatorHandle, api: httpx.Client) -> None:
    request = {"template_id": "hi_res_partition"}
    emu.set_faults(method="POST", path="/api/v1/jobs/", errors=[503], count=1)
    assert launch(api, request, [("a.txt", TEXT)]).status_code == 503
    assert job_count(api) == 0  # before processing: nothing created
    emu.set_faults(method="POST", path="/api/v1/jobs/", errors=[502], count=1, phase="after")
    assert launch(api, request, [("a.txt", TEXT)]).status_code == 502
    assert job_count(api) == 1  # after processing: the job exists, its answer was lost
    emu.set_faults(method="GET", path="/api/v1/templates/*", errors=[429], count=1, retry_after=3)
    limited = api.get("/templates/hi_res_partition")
    assert (limited.status_code, limited.headers["retry-after"]) == (429, "3")
    logged = [(e["method"], e["path"], e["status"], e["fault"]) for e in emu.requests(path_contains="/jobs/")]
    assert ("POST", "/api/v1/jobs/", 503, "503") in logged
    assert ("POST", "/api/v1/jobs/", 502, "502 after processing") in logged
    assert "Quarterly Report" not in json.dumps(emu.requests())  # never bodies
