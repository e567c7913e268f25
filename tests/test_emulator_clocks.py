"""Issue #22: the emulator writes skewed, naive and PostgreSQL-style job times, caps and orders its job
list, and answers a run with an unreadable record; each setting as the provider's tests rely on it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest


@pytest.fixture
def api(emulator: Any) -> Iterator[httpx.Client]:
    with emulator.api_client() as client:
        yield client


def _workflow(api: httpx.Client) -> str:
    response = api.post("/workflows/", json={"name": "clocks", "workflow_type": "basic"})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def _run(api: httpx.Client, workflow_id: str, name: str = "a.txt") -> httpx.Response:
    return api.post(f"/workflows/{workflow_id}/run", files={"input_files": (name, b"some text")})


def _created(api: httpx.Client, workflow_id: str) -> list[str]:
    return [job["created_at"] for job in api.get("/jobs/", params={"workflow_id": workflow_id}).json()]


def test_job_times_follow_the_clock_settings(emulator: Any, api: httpx.Client) -> None:
    workflow_id = _workflow(api)
    assert _run(api, workflow_id).status_code in (200, 202)
    (iso,) = _created(api, workflow_id)
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    assert moment.tzinfo is not None

    emulator.configure(clock_skew=-120)
    (behind,) = _created(api, workflow_id)
    assert datetime.fromisoformat(behind.replace("Z", "+00:00")) == moment - timedelta(seconds=120)

    emulator.configure(clock_skew=0, timestamp_style="naive", naive_zone_hours=2)
    (naive,) = _created(api, workflow_id)
    assert datetime.fromisoformat(naive) == (moment + timedelta(hours=2)).replace(tzinfo=None)

    emulator.configure(timestamp_style="postgres")
    (postgres,) = _created(api, workflow_id)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\+00", postgres), postgres
    assert datetime.strptime(postgres[:-3], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc) == moment


def test_the_job_list_can_be_capped_oldest_first(emulator: Any, api: httpx.Client) -> None:
    workflow_id = _workflow(api)
    ids = [_run(api, workflow_id, f"{n}.txt").json()["id"] for n in range(4)]
    listed = [job["id"] for job in api.get("/jobs/", params={"workflow_id": workflow_id}).json()]
    assert listed == ids[::-1]
    emulator.configure(jobs_list_order="oldest-first", jobs_list_cap=2)
    listed = [job["id"] for job in api.get("/jobs/", params={"workflow_id": workflow_id}).json()]
    assert listed == ids[:2]


def test_an_unreadable_fault_keeps_the_status_and_spoils_the_record(emulator: Any, api: httpx.Client) -> None:
    workflow_id = _workflow(api)
    emulator.set_faults(method="POST", path_regex=r"/run$", errors=["unreadable"], phase="after", count=1)
    response = _run(api, workflow_id)
    assert response.status_code in (200, 202)
    assert response.json()["created_at"] == "the 24th, at ten"
    (job,) = api.get("/jobs/", params={"workflow_id": workflow_id}).json()
    assert job["id"] == response.json()["id"], "the run was processed"
    emulator.set_faults(method="POST", path_regex=r"/run$", errors=["unreadable"], count=1)
    response = _run(api, workflow_id)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert len(api.get("/jobs/", params={"workflow_id": workflow_id}).json()) == 1, "not processed"
