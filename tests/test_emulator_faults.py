"""Fault injection (latency, error statuses, dropped connections) and the request log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airflow_provider_workflowsvc.emulator.testing import running_emulator

SOURCE = {"name": "s", "type": "s3", "config": {"remote_url": "s3://b", "secret_key": "do-not-log-me"}}


@pytest.fixture
def api(emulator: Any) -> Iterator[httpx.Client]:
    with emulator.api_client() as client:
        yield client


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_error_statuses_are_injected_before_processing(emulator: Any, api: httpx.Client, status: int) -> None:
    emulator.set_faults(errors=[status], count=1, retry_after=3)
    response = api.post("/sources", json=SOURCE)
    assert response.status_code == status
    assert "injected" in response.json()["detail"]
    assert (response.headers.get("retry-after") == "3") is (status == 429)
    assert api.get("/sources").json() == []  # nothing was created
    assert api.post("/sources", json=SOURCE).status_code == 200
    log = emulator.requests(method="POST")
    assert [(r["status"], r["fault"]) for r in log] == [(status, str(status)), (200, None)]


def test_dropped_connection_truncates_the_response(emulator: Any, api: httpx.Client) -> None:
    emulator.set_faults(errors=["drop"], count=1)
    with pytest.raises(httpx.RemoteProtocolError):
        api.get("/sources")
    assert api.get("/sources").status_code == 200
    assert [(r["status"], r["fault"]) for r in emulator.requests()] == [(None, "drop"), (200, None)]


def test_latency_delays_matching_requests_only(emulator: Any, api: httpx.Client) -> None:
    emulator.set_faults(latency=0.3, method="GET", path="/api/v1/jobs*")
    started = time.monotonic()
    assert api.get("/jobs").status_code == 200
    assert time.monotonic() - started >= 0.3
    api.get("/sources")
    api.post("/jobs/not-a-uuid/cancel")
    assert [r["fault"] for r in emulator.requests()] == ["latency 0.3s", None, None]


def test_a_request_that_never_answers_ends_when_faults_are_cleared(emulator: Any) -> None:
    emulator.set_faults(latency=3600)
    with emulator.api_client(timeout=0.3) as client, pytest.raises(httpx.ReadTimeout):
        client.get("/sources")
    (pending,) = emulator.requests()
    assert pending["status"] is None
    emulator.clear_faults()
    deadline = time.monotonic() + 2
    while emulator.requests()[0]["status"] is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert emulator.requests()[0]["status"] == 200


@pytest.mark.parametrize("error", [502, "drop"])
def test_after_phase_processes_the_request_then_loses_the_answer(
    emulator: Any, api: httpx.Client, error: Any
) -> None:
    emulator.set_faults(method="POST", errors=[error], count=1, phase="after")
    if error == "drop":
        with pytest.raises(httpx.RemoteProtocolError):
            api.post("/sources", json=SOURCE)
    else:
        assert api.post("/sources", json=SOURCE).status_code == error
    assert [s["name"] for s in api.get("/sources").json()] == ["s"]  # the work was done
    (logged,) = emulator.requests(method="POST")
    assert logged["fault"] == f"{error} after processing"


def test_after_phase_latency_holds_the_answer(emulator: Any, api: httpx.Client) -> None:
    emulator.set_faults(method="POST", latency=0.3, phase="after")
    started = time.monotonic()
    assert api.post("/sources", json=SOURCE).status_code == 200
    assert time.monotonic() - started >= 0.3
    assert emulator.requests(method="POST")[0]["fault"] == "latency 0.3s after processing"


def test_rate_and_seed_make_faults_reproducible(emulator: Any, api: httpx.Client) -> None:
    outcomes = []
    for _ in range(2):
        emulator.set_faults(errors=[500, 503], rate=0.5, seed=42)
        outcomes.append([api.get("/sources").status_code for _ in range(20)])
    assert outcomes[0] == outcomes[1]
    assert {200, 500, 503} <= set(outcomes[0]) or {200} < set(outcomes[0])


def test_several_rules_and_described_state(emulator: Any, api: httpx.Client) -> None:
    spec = emulator.set_faults(
        rules=[
            {"method": "POST", "path_regex": r"/run$", "errors": [503]},
            {"path": "/api/v1/sources*", "errors": [429], "count": 2},
        ]
    )
    assert [r["remaining"] for r in spec["rules"]] == [None, 2]
    assert api.get("/sources").status_code == 429
    assert api.get("/destinations").status_code == 200
    control = emulator.control_headers()
    described = httpx.get(emulator.root_url + "/_emulator/faults", headers=control).json()
    assert [r["remaining"] for r in described["rules"]] == [None, 1]
    assert (
        httpx.get(emulator.root_url + "/_emulator/health", headers=control).status_code == 200
    )  # never faulted
    bad = httpx.put(emulator.root_url + "/_emulator/faults", json={"errors": [418]}, headers=control)
    assert bad.status_code == 422


def test_request_log_records_no_headers_or_bodies(emulator: Any, api: httpx.Client) -> None:
    api.post("/sources", json=SOURCE)
    api.get("/sources", params={"source_type": "s3"})
    log = emulator.requests()
    assert set(log[0]) == {"time", "method", "path", "query", "status", "fault", "duration_ms"}
    assert log[1]["query"] == "source_type=s3"
    assert "do-not-log-me" not in str(log)
    assert emulator.token not in str(log)
    assert [r["method"] for r in emulator.requests(path_contains="/sources")] == ["POST", "GET"]
    assert emulator.requests(method="delete") == []
    emulator.clear_requests()
    assert emulator.requests() == []


def test_running_emulator_takes_fault_options() -> None:
    with running_emulator(errors=[502], count=1) as emu, emu.api_client() as client:
        assert client.get("/jobs").status_code == 502
        assert client.get("/jobs").status_code == 200
