"""WorkflowJobsTrigger (one wait for many jobs) against the platform emulator: one event, shared polls."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import SHARED_STATUS_POLL_ENV, write_good_and_empty

from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
from airflow_provider_workflowsvc.triggers.jobs import WorkflowJobsTrigger
from airflow_provider_workflowsvc.wait import source
from airflow_provider_workflowsvc.wait.outcome import parse_jobs_event

INTERVAL = 0.5
KINDS = {"completed": ["good.txt"], "failed_files": ["good.txt", "empty.txt"], "failed": ["empty.txt"]}
VERDICT = {"completed": ("success", 0), "failed_files": ("success", 1), "failed": ("failed", 1)}


@pytest.fixture
def service(platform_service: Any) -> Any:
    """The platform emulator: launches without a gap, no running cap in the way."""
    platform_service.configure(on_demand_launch_interval=0, on_demand_max_running=100)
    return platform_service


def launch(service: Any, inputs: Path, count: int) -> list[str]:
    """``count`` on-demand jobs, of each kind in turn."""
    settings = ConnectionSettings(base_url=service.base_url, token=service.token, api_key=service.api_key)
    with WorkflowServiceHook(settings=settings) as hook:
        kinds = list(KINDS)
        jobs = []
        for i in range(count):
            files = [inputs / name for name in KINDS[kinds[i % 3]]]
            job = hook.create_job(template_id="hi_res_partition", files=files)
            assert job is not None
            jobs.append(job.id)
    return jobs


def trigger(jobs: list[str], seconds: float = 60.0, **kwargs: Any) -> WorkflowJobsTrigger:
    return WorkflowJobsTrigger(job_ids=jobs, deadline=time.time() + seconds, poll_interval=INTERVAL, **kwargs)


async def one_event(waiting: WorkflowJobsTrigger) -> dict[str, Any]:
    events = [event.payload async for event in waiting.run()]
    assert len(events) == 1
    return dict(events[0])


def requests_by_kind(service: Any, jobs: list[str]) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for r in service.requests(method="GET"):
        if r["path"].endswith("/notifications"):
            counts["listing"] += 1  # the connection's source: the feed
        elif r["path"].rstrip("/") == "/api/v1/jobs":
            counts["listing"] += 1
            assert "workflow_id" not in (r.get("query") or "")  # on-demand jobs: the account's listing
        elif any(f"/jobs/{job}" in r["path"] for job in jobs):
            counts[r["path"].rsplit("/", 1)[-1] if r["path"].count("/") > 4 else "record"] += 1
    return counts


def test_the_trigger_survives_its_serialization() -> None:
    waiting = trigger(["j1", "j2"], cancel_on_kill=False, workflowsvc_conn_id="other")
    path, kwargs = waiting.serialize()
    assert path == "airflow_provider_workflowsvc.triggers.jobs.WorkflowJobsTrigger"
    assert WorkflowJobsTrigger(**kwargs).serialize() == (path, kwargs)
    with pytest.raises(ValueError, match="at least one job"):
        WorkflowJobsTrigger(job_ids=[], deadline=time.time())


async def waited(
    service: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch, *, share: bool
) -> tuple[dict[str, Any], list[str], collections.Counter[str], float]:
    """Nine new jobs waited for by one trigger: its event, the jobs, their requests by kind, the intervals."""
    monkeypatch.setenv(SHARED_STATUS_POLL_ENV, str(share))
    jobs = launch(service, inputs, 9)
    service.clear_requests()
    started = time.monotonic()
    payload = await one_event(trigger(jobs))
    return payload, jobs, requests_by_kind(service, jobs), (time.monotonic() - started) / INTERVAL


async def test_many_jobs_one_event_their_polls_shared(
    service: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nine jobs waited for by one trigger: the events of nine lone waits, a fraction of the requests."""
    inputs = write_good_and_empty(tmp_path)
    service.configure(processing_delay=1.6)  # ~5 s a job: ten polls or so
    shared, shared_jobs, used, shared_intervals = await waited(service, inputs, monkeypatch, share=True)
    alone, _, per_job, alone_intervals = await waited(service, inputs, monkeypatch, share=False)

    kinds = list(KINDS)
    for payload in (shared, alone):
        outcomes = parse_jobs_event(payload).outcomes
        assert [(o.status, len(o.failed_files)) for o in outcomes] == [
            VERDICT[kinds[i % 3]] for i in range(9)
        ]
    assert [o["job_id"] for o in shared["outcomes"]] == shared_jobs
    assert used["listing"] >= 1
    assert per_job["listing"] == 0
    shared_status = (used["listing"] + used["details"]) / 9 / shared_intervals
    lone_status = per_job["details"] / 9 / alone_intervals
    # one read of the connection's source per round for all nine, a canary now and then, each its last
    assert shared_status < 0.8 * lone_status, (used, per_job, shared_intervals, alone_intervals)
    print(
        f"\nstatus requests per waiting job per interval: shared {shared_status:.3f} "
        f"({used['listing']} listings, {used['details']} details), lone {lone_status:.3f}"
    )
    assert all(not s.waits for s in source._SOURCES.values())


async def test_on_kill_cancels_the_jobs_not_yet_ended(service: Any, task_state: Any, tmp_path: Path) -> None:
    inputs = write_good_and_empty(tmp_path)
    service.configure(processing_delay=0.01)
    quick = launch(service, inputs, 1)
    service.configure(processing_delay=3600)
    slow = launch(service, inputs, 1)
    waiting = trigger([*quick, *slow], seconds=300)
    running = asyncio.ensure_future(one_event(waiting))
    while quick[0] not in waiting._ended:  # the quick job's end is an event the trigger records
        await asyncio.sleep(0.05)
        assert not running.done()
    task_state(waiting)  # a user marked the task failed
    await waiting.on_kill()
    running.cancel()
    with service.api_client() as api:
        assert api.get(f"/jobs/{slow[0]}").json()["status"] == "STOPPED"
        assert api.get(f"/jobs/{quick[0]}").json()["status"] == "COMPLETED"
    cancels = service.requests(method="POST", path_contains="/cancel")
    assert [r["path"] for r in cancels] == [f"/api/v1/jobs/{slow[0]}/cancel"]


async def test_a_wait_that_cannot_start_ends_every_job_with_an_error(service: Any) -> None:
    payload = await one_event(trigger(["j1", "j2"], workflowsvc_conn_id="no_such_connection"))
    outcomes = parse_jobs_event(payload).outcomes
    assert [(o.job_id, o.status) for o in outcomes] == [("j1", "error"), ("j2", "error")]
    assert all("no_such_connection" in o.message for o in outcomes)
