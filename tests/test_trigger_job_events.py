"""WorkflowJobEventTrigger: the cursor, and real listings of the emulator (schedules fired by its clock)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.models import Job
from airflow_provider_workflowsvc.triggers.job_events import (
    FAILED_FILES_IN_EVENT,
    JobCursor,
    WorkflowJobEventTrigger,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def job(job_id: str, status: str, minute: int) -> Job:
    return Job.model_validate({"id": job_id, "status": status, "created_at": T0 + timedelta(minutes=minute)})


# --------------------------------------------------------------------------------------------------
# The cursor


def test_jobs_final_at_the_first_start_are_never_due() -> None:
    cursor = JobCursor.starting_at([job("a", "completed", 1), job("b", "in progress", 2)])
    assert cursor.due([job("a", "completed", 1), job("b", "in progress", 2)]) == []
    assert [j.id for j in cursor.due([job("a", "completed", 1), job("b", "failed", 2)])] == ["b"]


def test_a_job_is_due_once_it_is_final_and_not_again_after_being_reported() -> None:
    cursor = JobCursor.starting_at([])
    assert cursor.due([job("c", "scheduled", 3)]) == []
    (due,) = cursor.due([job("c", "completed", 3)])
    assert due.id == "c"
    assert [j.id for j in cursor.due([job("c", "completed", 3)])] == ["c"]  # not reported: still due
    cursor.reported("c")
    assert cursor.due([job("c", "completed", 3)]) == []


def test_new_jobs_already_final_are_due_in_creation_order_including_ties_at_the_watermark() -> None:
    cursor = JobCursor.starting_at([job("a", "completed", 5)])
    listing = [job("z", "stopped", 9), job("b", "completed", 5), job("y", "failed", 7)]
    assert [j.id for j in cursor.due(listing)] == ["b", "y", "z"]


def test_the_cursor_survives_json_and_an_unreadable_one_is_a_new_start(caplog: Any) -> None:
    cursor = JobCursor.starting_at([job("a", "in progress", 1), job("b", "completed", 1)])
    again = JobCursor.from_json(cursor.to_json())
    assert again == cursor
    assert again is not None
    assert [j.id for j in again.due([job("a", "failed", 1)])] == ["a"]
    assert JobCursor.from_json(None) is None
    assert JobCursor.from_json({"watermark": "yesterday"}) is None
    assert "cannot be read" in caplog.text


def test_an_undated_job_is_warned_about_once_and_never_due(caplog: Any) -> None:
    cursor = JobCursor.starting_at([])
    undated = Job.model_validate({"id": "u", "status": "completed"})
    assert cursor.due([undated]) == []
    assert cursor.due([undated]) == []
    assert caplog.text.count("Job u has no created_at") == 1


def test_arguments_are_checked_and_serialize_round_trips() -> None:
    trigger = WorkflowJobEventTrigger(workflow_id="w", poll_interval=5, statuses=["FAILED", "stopped"])
    path, kwargs = trigger.serialize()
    assert kwargs["statuses"] == ["failed", "stopped"]
    assert WorkflowJobEventTrigger(**kwargs).serialize() == (path, kwargs)
    assert path == "airflow_provider_workflowsvc.triggers.job_events.WorkflowJobEventTrigger"
    with pytest.raises(ValueError, match="final job statuses"):
        WorkflowJobEventTrigger(statuses=["in progress"])
    with pytest.raises(ValueError, match="final job statuses"):
        WorkflowJobEventTrigger(statuses=[])


def test_watchers_of_one_connection_and_workflow_share_a_stream_key() -> None:
    keys = {WorkflowJobEventTrigger(workflow_id="w", poll_interval=i).shared_stream_key() for i in (5, 9)}
    assert len(keys) == 1
    assert WorkflowJobEventTrigger(workflow_id="v").shared_stream_key() not in keys
    assert (
        WorkflowJobEventTrigger(workflow_id="w", workflowsvc_conn_id="other").shared_stream_key() not in keys
    )


# --------------------------------------------------------------------------------------------------
# Against the emulator: a workflow on the service's own schedule, fired by the emulator's clock


class FakeAssetStore:
    """The asset state store's async accessor (``aget``/``aset``), as the triggerer injects it on 3.3."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.fail_reads = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        if self.fail_reads:
            self.fail_reads -= 1
            raise RuntimeError("the API server did not answer")
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def scheduled_workflow(emulator: Any, settings: Any, documents: int = 3, failing: int = 1) -> str:
    """
    A workflow the service runs every hour (emulator time), reading ``documents`` from an S3 source;
    created at half past the hour, so that each hour :func:`fire` advances starts exactly one job.
    """
    now = emulator.now()
    emulator.advance_clock((1800 - (now.minute * 60 + now.second)) % 3600)
    config = {
        "remote_url": "s3://events-bucket/in/",
        "key": "AKIAEVENTS",
        "secret": "events-secret",
        "emulator_documents": documents,  # the emulator's hints: how many documents, how many fail
        "emulator_failed_documents": failing,
    }
    with WorkflowServiceHook(settings=settings) as hook:
        source = hook.create_source(f"events-{time.time_ns()}", "s3", config)
        workflow = hook.create_workflow(
            f"hourly-{time.time_ns()}", "basic", source_id=str(source.id), schedule="every hour"
        )
    return str(workflow.id)


@pytest.fixture
def hourly(workflowsvc_conn: Any, settings: Any) -> str:
    """A scheduled workflow whose jobs take ~0.05 s each: 3 documents, 1 of them fails."""
    workflowsvc_conn.configure(processing_delay=0.01)
    return scheduled_workflow(workflowsvc_conn, settings)


def fire(emulator: Any, occurrences: int = 1) -> None:
    """Advance the emulator's clock through ``occurrences`` hourly schedule times."""
    emulator.advance_clock(3600 * occurrences)


def watcher(workflow_id: str, store: FakeAssetStore | None, **kwargs: Any) -> WorkflowJobEventTrigger:
    trigger = WorkflowJobEventTrigger(workflow_id=workflow_id, **{"poll_interval": 0.05, **kwargs})
    trigger.cursor_settle_seconds = 0.0
    trigger.asset_state_store = store  # type: ignore[assignment]
    return trigger


class Running:
    """A trigger's ``run()`` driven as the triggerer drives it: the next event is always asked for."""

    def __init__(self, trigger: WorkflowJobEventTrigger) -> None:
        self.trigger = trigger
        self._events = cast("AsyncGenerator[Any, None]", trigger.run())
        self._next: asyncio.Future[Any] = asyncio.ensure_future(self._events.__anext__())

    async def started(self, store: FakeAssetStore | None) -> Running:
        """Wait for the first listing (the watch's start: from now on, or from the stored cursor)."""
        if store is None:
            await asyncio.sleep(0.3)
        while store is not None and self.trigger.cursor_key not in store.values:
            await asyncio.sleep(0.02)
        return self

    async def events(self, count: int, within: float = 15) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        for _ in range(count):
            payload = await self.event(within)
            assert payload is not None, f"{len(got)} event(s) of {count} within {within} s"
            got.append(payload)
        return got

    async def event(self, within: float) -> dict[str, Any] | None:
        done, _ = await asyncio.wait({self._next}, timeout=within)
        if not done:
            return None
        payload: dict[str, Any] = self._next.result().payload
        self._next = asyncio.ensure_future(self._events.__anext__())
        return payload

    async def stop(self) -> None:
        """Stop it (the triggerer going down) once the cursor had time to be saved."""
        await asyncio.sleep(0.3)
        self._next.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await self._next
        await self._events.aclose()


async def test_each_scheduled_job_gives_one_event_with_its_summary(hourly: str, emulator: Any) -> None:
    fire(emulator)  # a job before the watch: never reported
    await asyncio.sleep(0.3)
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started(store)
    fire(emulator, 2)  # two occurrences: two jobs
    payloads = await watch.events(2)
    assert [p["status"] for p in payloads] == ["completed", "completed"]
    assert len({p["job_id"] for p in payloads}) == 2
    listed = {j["id"]: j for j in emulator_jobs(emulator, hourly)}
    assert len(listed) == 3
    assert all(p["job_id"] in listed for p in payloads)
    for payload in payloads:
        assert payload["workflow_id"] == hourly
        assert payload["workflow_name"].startswith("hourly-")
        assert (payload["documents_written"], payload["failed_count"]) == (2, 1)
        assert [f["document"] for f in payload["failed_files"]] == ["s3-document-3.txt"]
    assert await watch.event(0.5) is None  # nothing twice
    await watch.stop()


async def test_a_restart_reports_what_finished_while_down_and_nothing_twice(
    hourly: str, emulator: Any
) -> None:
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started(store)
    fire(emulator)
    (reported,) = await watch.events(1)
    await watch.stop()  # the triggerer is down ...
    fire(emulator, 2)  # ... while two jobs run and finish
    await asyncio.sleep(0.5)
    store.fail_reads = 2  # and the store does not answer at first: no new start from "now"
    restarted = Running(watcher(hourly, store))
    payloads = await restarted.events(2)
    ids = [reported["job_id"], *(p["job_id"] for p in payloads)]
    assert len(set(ids)) == 3
    assert len(emulator_jobs(emulator, hourly)) == 3
    assert await restarted.event(0.5) is None
    await restarted.stop()


async def test_a_crash_before_the_cursor_is_saved_repeats_the_event_never_loses_it(
    hourly: str, emulator: Any
) -> None:
    store = FakeAssetStore()
    trigger = watcher(hourly, store)
    trigger.cursor_settle_seconds = 30.0  # the triggerer dies within the settle window
    watch = await Running(trigger).started(store)
    fire(emulator)
    (first,) = await watch.events(1)
    await watch.stop()
    (again,) = await Running(watcher(hourly, store)).events(1)
    assert again["job_id"] == first["job_id"]


async def test_without_a_store_a_restart_starts_from_now(hourly: str, emulator: Any) -> None:
    """Airflow < 3.3: jobs that finished while the trigger was down are not reported (none twice)."""
    watch = await Running(watcher(hourly, None)).started(None)
    fire(emulator)
    await watch.events(1)
    await watch.stop()
    fire(emulator)  # while down
    await asyncio.sleep(0.3)
    restarted = await Running(watcher(hourly, None)).started(None)
    assert await restarted.event(1.0) is None
    fire(emulator)
    (after,) = await restarted.events(1)
    assert after["job_id"] == emulator_jobs(emulator, hourly)[0]["id"]  # the newest (listing: newest first)
    await restarted.stop()


async def test_each_start_logs_where_the_watch_resumes(hourly: str, emulator: Any, capsys: Any) -> None:
    """Issue #32: after a restart the log says what the saved cursor holds, or that the watch starts now."""
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started(store)
    started = f"No saved job cursor for workflow {hourly} (kept in the asset state store): starting from now"
    assert started in capsys.readouterr().out
    fire(emulator)
    (reported,) = await watch.events(1)
    await watch.stop()
    fire(emulator)  # a job that runs while the watcher is down: seen by no listing yet
    restarted = Running(watcher(hourly, store))
    await restarted.events(1)  # the job that ended while down: the restart loaded the cursor before it
    (listed,) = [j for j in emulator_jobs(emulator, hourly) if j["id"] == reported["job_id"]]
    created = Job.model_validate(listed).created_utc
    assert created is not None
    assert (
        f"Resuming workflow {hourly} from the saved job cursor: newest job seen created at "
        f"{created.isoformat()} (1 job(s) at that time), 0 job(s) seen but not reported yet"
    ) in capsys.readouterr().out
    await restarted.stop()
    memory_only = await Running(watcher(hourly, None)).started(None)
    in_memory = f"No saved job cursor for workflow {hourly} (kept in memory only (Airflow < 3.3)): starting"
    assert in_memory in capsys.readouterr().out
    await memory_only.stop()


async def test_only_the_statuses_asked_for_are_reported(hourly: str, emulator: Any, settings: Any) -> None:
    store = FakeAssetStore()
    trigger = watcher(hourly, store, statuses=["stopped"])
    watch = await Running(trigger).started(store)
    emulator.configure(processing_delay=600)
    fire(emulator, 2)
    newest, older = (j["id"] for j in emulator_jobs(emulator, hourly)[:2])
    with WorkflowServiceHook(settings=settings) as hook:
        hook.cancel_job(newest)
    emulator.configure(processing_delay=0.01)
    emulator.advance_clock(1200 * 3)  # the other one completes: not asked for
    (stopped,) = await watch.events(1)
    assert (stopped["job_id"], stopped["status"]) == (newest, "stopped")
    assert await watch.event(0.5) is None
    assert not store.values[trigger.cursor_key]["pending"]  # the completed one was passed over
    assert older not in store.values[trigger.cursor_key]["pending"]
    await watch.stop()


async def test_outages_and_bad_answers_are_survived(hourly: str, emulator: Any) -> None:
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started(store)
    emulator.set_faults(
        rules=[{"method": "GET", "path": "/api/v1/jobs/*", "errors": [503, 502, 429, "drop"], "rate": 0.5}],
        seed=3,
    )
    fire(emulator)
    (payload,) = await watch.events(1, within=30)
    assert payload["status"] == "completed"
    assert "summary_error" not in payload
    assert any(r["fault"] for r in emulator.requests(path_contains="/jobs"))
    emulator.clear_faults()
    assert await watch.event(0.5) is None
    await watch.stop()


async def test_the_failed_files_in_the_event_are_capped(workflowsvc_conn: Any, settings: Any) -> None:
    workflowsvc_conn.configure(processing_delay=0.01)
    failing = FAILED_FILES_IN_EVENT + 3
    workflow = scheduled_workflow(workflowsvc_conn, settings, documents=failing + 2, failing=failing)
    store = FakeAssetStore()
    watch = await Running(watcher(workflow, store)).started(store)
    fire(workflowsvc_conn)
    (payload,) = await watch.events(1, within=30)
    assert payload["failed_count"] == failing
    assert len(payload["failed_files"]) == FAILED_FILES_IN_EVENT
    assert payload["documents_written"] == 2
    await watch.stop()


def emulator_jobs(emulator: Any, workflow_id: str) -> list[dict[str, Any]]:
    with emulator.api_client() as client:
        response = client.get("/jobs/", params={"workflow_id": workflow_id})
        response.raise_for_status()
        jobs: list[dict[str, Any]] = response.json()
        return jobs


# --------------------------------------------------------------------------------------------------
# One listing per interval for the watchers of one workflow (Airflow 3.3's shared streams)


@pytest.mark.airflow_min("3.3", reason="shared streams (airflow.triggers.shared_stream)")
async def test_ten_watchers_of_one_workflow_share_one_listing_and_each_gets_every_job(
    hourly: str, emulator: Any
) -> None:
    from airflow.triggers.shared_stream import SharedStreamManager

    manager = SharedStreamManager()
    stores = [FakeAssetStore() for _ in range(10)]
    watchers = [watcher(hourly, store, poll_interval=0.2) for store in stores]
    keys = {w.shared_stream_key() for w in watchers}
    (key,) = keys
    streams = [
        w.filter_shared_stream(manager.subscribe(trigger_id=i, trigger=w, key=key))
        for i, w in enumerate(watchers)
    ]
    nexts = [asyncio.ensure_future(s.__anext__()) for s in streams]
    while not all(w.cursor_key in s.values for w, s in zip(watchers, stores, strict=True)):
        await asyncio.sleep(0.02)
    emulator.clear_requests()
    started = time.monotonic()
    fire(emulator)
    payloads = [(await asyncio.wait_for(n, 15)).payload for n in nexts]
    await asyncio.sleep(1.0)
    elapsed = time.monotonic() - started
    listings = emulator.requests(method="GET", path_contains="/jobs/")
    job_id = payloads[0]["job_id"]
    assert {p["job_id"] for p in payloads} == {job_id}
    by_kind = [r["path"] for r in listings]
    assert sum(p.endswith("/jobs/") for p in by_kind) <= elapsed / 0.2 + 2  # one listing per interval
    assert sum(p.endswith(f"/jobs/{job_id}/details") for p in by_kind) == 1  # one summary for all ten
    assert sum(p.endswith(f"/jobs/{job_id}/failed-files") for p in by_kind) == 1
    for stream in streams:
        await cast("AsyncGenerator[Any, None]", stream).aclose()
    await manager.stop_all()
