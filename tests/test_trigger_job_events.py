"""WorkflowJobEventTrigger: the cursor, and real listings of the emulator (schedules fired by its clock)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta, timezone
from typing import Any, cast
from urllib.parse import parse_qsl

import pytest

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.models import Job
from airflow_provider_workflowsvc.testing.job_events import MemoryAssetStore
from airflow_provider_workflowsvc.triggers import job_events
from airflow_provider_workflowsvc.triggers._job_cursor import JobCursor
from airflow_provider_workflowsvc.triggers.job_events import (
    FAILED_FILES_IN_EVENT,
    LISTING_EVERY,
    WorkflowJobEventTrigger,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def job(job_id: str, status: str, minute: int) -> Job:
    return Job.model_validate({"id": job_id, "status": status, "created_at": T0 + timedelta(minutes=minute)})


# --------------------------------------------------------------------------------------------------
# The cursor

NOW = (T0 + timedelta(minutes=10)).timestamp()
"""The triggerer's clock in the cursor's tests: ten minutes after T0."""
HOUR = 3600.0


def start(*jobs: Job) -> JobCursor:
    return JobCursor.starting_at(list(jobs), NOW, HOUR)


def due(cursor: JobCursor, *jobs: Job, at: float = NOW) -> list[str]:
    return [j.id for j in cursor.due(list(jobs), at, HOUR)]


def test_jobs_final_at_the_first_start_are_never_due() -> None:
    cursor = start(job("a", "completed", 1), job("b", "in progress", 2))
    assert due(cursor, job("a", "completed", 1), job("b", "in progress", 2)) == []
    assert due(cursor, job("a", "completed", 1), job("b", "failed", 2)) == ["b"]


def test_a_job_running_at_the_first_start_is_reported_whatever_its_age() -> None:
    cursor = start(job("old", "in progress", -600))  # created ten hours before the triggerer's now
    assert cursor.unlisted([]) == ["old"], "not in a listing of the last hour: read on its own"
    assert due(cursor, job("old", "completed", -600)) == ["old"]


def test_a_job_is_due_once_it_is_final_and_not_again_after_being_reported() -> None:
    cursor = start()
    assert due(cursor, job("c", "scheduled", 3)) == []
    assert due(cursor, job("c", "completed", 3)) == ["c"]
    assert due(cursor, job("c", "completed", 3)) == ["c"]  # not reported: still due
    cursor.reported("c")
    assert due(cursor, job("c", "completed", 3)) == []


def test_new_jobs_already_final_are_due_in_creation_order() -> None:
    cursor = start(job("a", "completed", 5))
    listing = [job("z", "stopped", 9), job("b", "completed", 5), job("y", "failed", 7)]
    assert due(cursor, *listing) == ["b", "y", "z"]


def test_a_job_dated_before_jobs_already_seen_is_new_and_one_in_the_future_blocks_nothing() -> None:
    cursor = start(job("a", "completed", 5))
    assert due(cursor, job("future", "completed", 60 * 24 * 365 * 5)) == ["future"]
    cursor.reported("future")
    assert due(cursor, job("late", "completed", -30), job("next", "completed", 6)) == ["late", "next"]


def test_the_horizon_follows_the_triggerers_clock_and_lets_go_of_ids_behind_it() -> None:
    cursor = start(job("a", "completed", 5))
    cursor.advance(NOW + 2 * HOUR, HOUR)
    assert cursor.horizon == datetime.fromtimestamp(NOW + HOUR, tz=timezone.utc)
    assert cursor.known == {}, "a's id is behind the horizon: history"
    assert due(cursor, job("a", "completed", 5), job("beyond", "completed", 20)) == []


def test_the_cursor_survives_json_and_an_unreadable_one_is_a_new_start(caplog: Any) -> None:
    cursor = start(job("a", "in progress", 1), job("b", "completed", 1))
    again = JobCursor.from_json(cursor.to_json())
    assert again == cursor
    assert again is not None
    assert due(again, job("a", "failed", 1)) == ["a"]
    assert JobCursor.from_json(None) is None
    assert JobCursor.from_json({"horizon": "yesterday", "known": {}, "pending": []}) is None
    assert "cannot be read" in caplog.text
    assert JobCursor.from_json({"horizon": "2099-01-01T00:00:00+00:00", "known": {}, "pending": []}) is None
    assert "ahead of this triggerer's clock" in caplog.text


def test_recently_reported_jobs_are_stored_as_pending_until_settled() -> None:
    cursor = start()
    due(cursor, job("c", "completed", 3))
    cursor.reported("c")
    assert cursor.to_json(unsettled=["c"])["pending"] == ["c"]
    assert cursor.to_json()["pending"] == []


def test_an_undated_job_is_warned_about_once_and_never_due(caplog: Any) -> None:
    cursor = start()
    undated = Job.model_validate({"id": "u", "status": "completed"})
    assert due(cursor, undated) == []
    assert due(cursor, undated) == []
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
    with pytest.raises(ValueError, match="max_lateness must be a positive number of seconds"):
        WorkflowJobEventTrigger(max_lateness=0)
    assert kwargs["max_lateness"] == 3600.0


def test_watchers_of_one_connection_and_workflow_share_a_stream_key() -> None:
    keys = {WorkflowJobEventTrigger(workflow_id="w", poll_interval=i).shared_stream_key() for i in (5, 9)}
    assert len(keys) == 1
    assert WorkflowJobEventTrigger(workflow_id="v").shared_stream_key() not in keys
    assert (
        WorkflowJobEventTrigger(workflow_id="w", workflowsvc_conn_id="other").shared_stream_key() not in keys
    )


# --------------------------------------------------------------------------------------------------
# Against the emulator: a workflow on the service's own schedule, fired by the emulator's clock


class FakeAssetStore(MemoryAssetStore):
    """The test kit's in-memory asset state store, whose next ``fail_reads`` reads fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_reads = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        if self.fail_reads:
            self.fail_reads -= 1
            raise RuntimeError("the API server did not answer")
        return await super().aget(key, default)


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
        self.handed: set[str] = set()
        """The jobs whose events were handed over (and the next event asked for)."""
        self._saved: tuple[set[str], set[str]] = (set(), set())
        """At the last save of the cursor: the jobs handed over by then, and those it stored as pending."""
        save = trigger._save_cursor

        async def saved(cursor: JobCursor, unsettled: Any = ()) -> None:
            handed, pending = set(self.handed), cursor.pending | set(unsettled)
            await save(cursor, unsettled)
            self._saved = (handed, pending)

        trigger._save_cursor = saved  # type: ignore[method-assign]

    async def started(self) -> Running:
        """Wait for the first listing (the watch's start: from now on, or from the stored cursor)."""
        while self.trigger._memory is None:  # saved after each round, the first one included
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
        self.handed.add(payload["job_id"])
        return payload

    def stored_pending(self) -> set[str]:
        """The jobs the cursor in the asset state store holds as pending (not reported)."""
        store = self.trigger.asset_state_store
        value = store.values.get(self.trigger.cursor_key) if isinstance(store, FakeAssetStore) else None
        return set(value.get("pending", ())) if value else set()

    async def stop(self, settle: bool = True) -> None:
        """Stop it (the triggerer going down) once a save of the cursor since the last event handed over
        holds every one as reported (unless not ``settle``; without a store there is nothing to wait for)."""
        while settle and isinstance(self.trigger.asset_state_store, FakeAssetStore):
            handed, pending = self._saved
            if self.handed <= handed and not self.handed & pending:
                break
            await asyncio.sleep(0.02)
        self._next.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await self._next
        await self._events.aclose()


async def test_each_scheduled_job_gives_one_event_with_its_summary(hourly: str, emulator: Any) -> None:
    fire(emulator)  # a job before the watch (ended by then): never reported
    await ended(emulator, hourly, 1)
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started()
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
    watch = await Running(watcher(hourly, store)).started()
    fire(emulator)
    (reported,) = await watch.events(1)
    await watch.stop()  # the triggerer is down ...
    fire(emulator, 2)  # ... while two jobs run and finish
    await ended(emulator, hourly, 3)
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
    watch = await Running(trigger).started()
    fire(emulator)
    (first,) = await watch.events(1)
    while first["job_id"] not in watch.stored_pending():  # saved, with its event not settled
        await asyncio.sleep(0.02)
    await watch.stop(settle=False)
    (again,) = await Running(watcher(hourly, store)).events(1)
    assert again["job_id"] == first["job_id"]


async def test_without_a_store_a_restart_starts_from_now(hourly: str, emulator: Any) -> None:
    """Airflow < 3.3: jobs that finished while the trigger was down are not reported (none twice)."""
    watch = await Running(watcher(hourly, None)).started()
    fire(emulator)
    await watch.events(1)
    await watch.stop()
    fire(emulator)  # while down
    await ended(emulator, hourly, 2)
    restarted = await Running(watcher(hourly, None)).started()
    assert await restarted.event(1.0) is None
    fire(emulator)
    (after,) = await restarted.events(1)
    assert after["job_id"] == emulator_jobs(emulator, hourly)[0]["id"]  # the newest (listing: newest first)
    await restarted.stop()


async def test_each_start_logs_where_the_watch_resumes(hourly: str, emulator: Any, capsys: Any) -> None:
    """Issue #32: after a restart the log says what the saved cursor holds, or that the watch starts now."""
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started()
    started = f"No saved job cursor for workflow {hourly} (kept in the asset state store): starting from now"
    assert started in capsys.readouterr().out
    fire(emulator)
    (reported,) = await watch.events(1)
    await watch.stop()
    saved = dict(store.values[watch.trigger.cursor_key])
    assert reported["job_id"] in saved["known"]
    fire(emulator)  # a job that runs while the watcher is down: seen by no listing yet
    restarted = Running(watcher(hourly, store))
    await restarted.events(1)  # the job that ended while down: the restart loaded the cursor before it
    assert (
        f"Resuming workflow {hourly} from the saved job cursor: {len(saved['known'])} job(s) created since "
        f"{saved['horizon']} known, {len(saved['pending'])} job(s) seen but not reported yet"
    ) in capsys.readouterr().out
    await restarted.stop()
    memory_only = await Running(watcher(hourly, None)).started()
    in_memory = f"No saved job cursor for workflow {hourly} (kept in memory only (Airflow < 3.3)): starting"
    assert in_memory in capsys.readouterr().out
    await memory_only.stop()


async def test_only_the_statuses_asked_for_are_reported(hourly: str, emulator: Any, settings: Any) -> None:
    store = FakeAssetStore()
    trigger = watcher(hourly, store, statuses=["stopped"])
    watch = await Running(trigger).started()
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
    watch = await Running(watcher(hourly, store)).started()
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
    watch = await Running(watcher(workflow, store)).started()
    fire(workflowsvc_conn)
    (payload,) = await watch.events(1, within=30)
    assert payload["failed_count"] == failing
    assert len(payload["failed_files"]) == FAILED_FILES_IN_EVENT
    assert payload["documents_written"] == 2
    await watch.stop()


async def ended(emulator: Any, workflow_id: str, count: int) -> None:
    """Wait until the workflow has ``count`` jobs, each ended (as the service records them)."""
    while True:
        jobs = [Job.model_validate(j) for j in emulator_jobs(emulator, workflow_id)]
        if len(jobs) >= count and all(j.status.is_terminal for j in jobs):
            return
        await asyncio.sleep(0.02)


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
    hourly: str, emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stream for the ten, one listing of each kind per round of it, one summary for all ten."""
    from airflow.triggers.shared_stream import SharedStreamManager

    rounds: list[int] = []  # per round of a stream: its listener (one per stream)
    begin = job_events.JobListing.__init__

    def counted(self: Any, listed_at: float, listener: Any, *args: Any) -> None:
        rounds.append(id(listener))
        begin(self, listed_at, listener, *args)

    monkeypatch.setattr(job_events.JobListing, "__init__", counted)
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
    rounds.clear()
    fire(emulator)
    payloads = [(await asyncio.wait_for(n, 15)).payload for n in nexts]
    then = len(rounds)
    while len(rounds) < then + 5:  # five rounds more: a watcher reading on its own would show there
        await asyncio.sleep(0.02)
    listings = emulator.requests(method="GET", path_contains="/jobs/")
    job_id = payloads[0]["job_id"]
    assert {p["job_id"] for p in payloads} == {job_id}
    assert len(set(rounds)) == 1, "one stream for the ten watchers"
    # the reads of the source (the feed; the listings, by their query's keys): one of each per round
    reads = collections.Counter(
        r["path"] + "?" + "&".join(sorted(k for k, _ in parse_qsl(r["query"] or "")))
        for r in emulator.requests(method="GET")
        if r["path"].endswith(("/jobs/", "/notifications"))
    )
    print(f"\nten watchers, {len(rounds)} rounds of their stream: reads {dict(reads)}")
    assert reads, "the source was read"
    assert max(reads.values()) <= len(rounds) + 1, (reads, len(rounds))
    by_kind = [r["path"] for r in listings]
    assert sum(p.endswith(f"/jobs/{job_id}/details") for p in by_kind) == 1  # one summary for all ten
    assert sum(p.endswith(f"/jobs/{job_id}/failed-files") for p in by_kind) == 1
    for stream in streams:
        await cast("AsyncGenerator[Any, None]", stream).aclose()
    await manager.stop_all()


# --------------------------------------------------------------------------------------------------
# Issue #31: no job lost to a timestamp, a restart repeats only the settle window, a stored cursor
# cannot crash the watcher


def stamped(emulator: Any, seconds: float) -> None:
    """The jobs created from now on are stamped ``seconds`` off (a replica's skewed clock, a late commit)."""
    emulator.configure(job_stamp_offset=seconds)


async def test_a_job_that_appears_after_a_newer_one_is_reported(hourly: str, emulator: Any) -> None:
    """Commit order or a replica whose clock is behind: two jobs dated before a job already reported
    appear after it; each is reported once, and so is the next job."""
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started()
    fire(emulator)
    (first,) = await watch.events(1)
    stamped(emulator, -(2 * 3600 + 600))  # the next two hourly jobs are dated before ``first``
    fire(emulator, 2)
    late = await watch.events(2)
    stamped(emulator, 0)
    fire(emulator)
    (after,) = await watch.events(1)
    ids = [first["job_id"], *(p["job_id"] for p in late), after["job_id"]]
    assert len(set(ids)) == 4
    assert all(p["created_at"] < first["created_at"] for p in late)
    assert await watch.event(0.5) is None
    await watch.stop()


async def test_a_job_dated_years_ahead_does_not_silence_the_watcher(hourly: str, emulator: Any) -> None:
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started()
    stamped(emulator, 5 * 365 * 86400)  # a replica whose clock says 2031
    fire(emulator)
    (future,) = await watch.events(1)
    stamped(emulator, 0)
    fire(emulator, 2)
    later = await watch.events(2)
    assert len({future["job_id"], *(p["job_id"] for p in later)}) == 3
    assert await watch.event(0.5) is None
    await watch.stop()


async def test_a_job_later_than_the_lateness_bound_is_not_reported_and_others_are(
    hourly: str, emulator: Any
) -> None:
    """The documented bound of a listing: a job that appears more than ``max_lateness`` after its
    ``created_at`` (on the triggerer's clock) is history; the watcher goes on with the jobs after it. The
    feed (platform dialect) stamps events with the moment of the change: the late job is reported."""
    store = FakeAssetStore()
    trigger = watcher(hourly, store)
    trigger.max_lateness = 60.0
    watch = await Running(trigger).started()
    ahead = (emulator.now() - datetime.now(timezone.utc)).total_seconds()
    stamped(emulator, -(ahead + 3600))  # dated an hour before the triggerer's now
    fire(emulator)
    stamped(emulator, 0)
    fire(emulator)
    newest, late = (j["id"] for j in emulator_jobs(emulator, hourly))
    told = emulator.dialect == "platform"
    reported = await watch.events(2 if told else 1)
    assert {p["job_id"] for p in reported} == ({newest, late} if told else {newest})
    assert await watch.event(0.5) is None
    await watch.stop()


@pytest.mark.parametrize(
    "stored",
    [
        {"watermark": "2026-01-01T00:00:00", "at_watermark": [], "pending": []},
        {"horizon": "2026-01-01T00:00:00", "known": {}, "pending": []},
    ],
    ids=["older-version", "this-version"],
)
async def test_a_stored_cursor_without_a_zone_is_read_as_utc(
    hourly: str, emulator: Any, stored: dict[str, Any], caplog: Any
) -> None:
    """A hand-edited or restored cursor whose time has no zone: read as UTC (as the provider writes it),
    with a warning; the watcher reports the jobs after it instead of failing at every listing."""
    store = FakeAssetStore()
    trigger = watcher(hourly, store)
    store.values[trigger.cursor_key] = stored
    watch = Running(trigger)
    fire(emulator)
    (payload,) = await watch.events(1)
    assert payload["job_id"] == emulator_jobs(emulator, hourly)[0]["id"]
    assert "without a time zone" in caplog.text
    await watch.stop()


async def test_events_handed_over_are_saved_within_the_settle_time_of_a_long_burst(
    hourly: str, emulator: Any
) -> None:
    """A restart during a burst repeats only the events of the last ``cursor_settle_seconds``: here the
    summary of the burst's last job hangs; the five before it are saved as reported meanwhile, and a
    restart then reports the last job alone."""
    store = FakeAssetStore()
    trigger = watcher(hourly, store)
    trigger.cursor_settle_seconds = 0.2
    watch = await Running(trigger).started()
    fire(emulator, 6)
    last = emulator_jobs(emulator, hourly)[0]["id"]  # the newest: reported last
    emulator.set_faults(rules=[{"method": "GET", "path": f"/api/v1/jobs/{last}/details", "latency": 60}])
    first = await watch.events(5)
    assert last not in {p["job_id"] for p in first}
    handed = {p["job_id"] for p in first}
    for _ in range(750):  # the save after the fifth event's settle time (15 s: only a failure detector)
        saved = store.values[trigger.cursor_key]
        if handed <= set(saved.get("known", ())) and not handed & set(saved["pending"]):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"the events handed over were not saved: {store.values[trigger.cursor_key]}")
    await watch.stop(settle=False)  # the triggerer dies while the last summary hangs
    emulator.clear_faults()
    restarted = Running(watcher(hourly, store))
    (again,) = await restarted.events(1)
    assert again["job_id"] == last
    assert await restarted.event(0.5) is None
    await restarted.stop()


async def test_a_job_running_at_the_first_start_is_reported_whatever_its_date(
    hourly: str, emulator: Any
) -> None:
    """A job dated hours before the watch began (outside the lateness window) and still running then is
    found by the status filter at the first start, read on its own while it runs, reported once it ends."""
    emulator.configure(
        processing_delay=400
    )  # it runs 40 minutes (emulator time), half an hour old at the start
    ahead = (emulator.now() - datetime.now(timezone.utc)).total_seconds()
    stamped(emulator, -(ahead + 3 * 3600))  # dated three hours before the triggerer's now
    fire(emulator)
    stamped(emulator, 0)
    (old,) = emulator_jobs(emulator, hourly)
    store = FakeAssetStore()
    watch = await Running(watcher(hourly, store)).started()
    assert old["id"] in store.values[watch.trigger.cursor_key]["pending"]
    emulator.advance_clock(900)  # it ends (before the next hourly job)
    (payload,) = await watch.events(1)
    assert payload["job_id"] == old["id"]
    assert await watch.event(0.5) is None
    await watch.stop()


# --------------------------------------------------------------------------------------------------
# Issue #45: told by the job-event feed (platform dialect), exactly once under its faults


@pytest.fixture
def platform_hourly(platform_service: Any) -> str:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    platform_service.configure(processing_delay=0.01)
    emu = platform_service
    settings = ConnectionSettings(
        base_url=emu.base_url, token=emu.token, api_key=emu.api_key, retry_wait=0.05
    )
    return scheduled_workflow(platform_service, settings)


class Rounds(Running):
    """:class:`Running`, counting the rounds of the stream the watcher has handled."""

    def __init__(self, trigger: WorkflowJobEventTrigger) -> None:
        self.rounds = 0
        trigger.run = lambda: trigger.filter_shared_stream(self._counted(trigger))  # type: ignore[method-assign]
        super().__init__(trigger)

    async def _counted(self, trigger: WorkflowJobEventTrigger) -> AsyncGenerator[Any, None]:
        async for listing in type(trigger).open_shared_stream(trigger.serialize()[1]):
            yield listing
            self.rounds += 1  # the watcher asked for the next round: this one is handled

    async def quiet(self, rounds: int) -> bool:
        """Whether ``rounds`` more rounds were handled without an event."""
        until = self.rounds + rounds
        while self.rounds < until and not self._next.done():
            await asyncio.sleep(0.02)
        return not self._next.done()


FEED_FAULTS = {
    "duplicated": {"feed_faults": ["duplicate"]},
    "reordered": {"feed_faults": ["reorder"]},
    "lost": {"feed_lag": {"job.completed": 1800.0}},  # ends appear half an hour late, under older times
}


@pytest.mark.parametrize("fault", FEED_FAULTS)
async def test_each_job_is_reported_once_under_feed_faults_and_a_restart(
    platform_hourly: str, platform_service: Any, fault: str
) -> None:
    """
    The feed duplicates its events, sends them oldest first, or shows each job's end only after later
    events (a reader that went past its time lost it: the watcher's listing every ``LISTING_EVERY``
    rounds finds it): each job is reported once, also across a restart (its first round lists the jobs
    that ended while it was down), and nothing comes twice within a listing round.
    """
    emulator = platform_service
    store = FakeAssetStore()
    watch = await Rounds(watcher(platform_hourly, store)).started()
    emulator.configure(**FEED_FAULTS[fault])
    fire(emulator, 3)
    first = await watch.events(3)
    assert await watch.quiet(LISTING_EVERY + 2)
    await watch.stop()
    fire(emulator, 2)  # while down
    restarted = Rounds(watcher(platform_hourly, store))
    later = await restarted.events(2)
    assert await restarted.quiet(LISTING_EVERY + 2)
    await restarted.stop()
    reported = [p["job_id"] for p in [*first, *later]]
    assert sorted(reported) == sorted(j["id"] for j in emulator_jobs(emulator, platform_hourly))
    assert all(p["status"] == "completed" for p in [*first, *later])


async def test_a_watcher_told_by_the_feed_lists_only_every_few_rounds(
    platform_hourly: str, platform_service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    One feed read per round for the connection; the workflow's listing once per ``LISTING_EVERY`` rounds,
    and in a round the source could not tell (a feed read cut by its patience on a busy machine).
    """
    from airflow_provider_workflowsvc.wait import source

    untold: list[int] = []
    told = source.Listener.next

    async def counted(self: source.Listener) -> Any:
        changes = await told(self)
        untold.append(changes is None)
        return changes

    monkeypatch.setattr(source.Listener, "next", counted)
    store = FakeAssetStore()
    watch = await Rounds(watcher(platform_hourly, store)).started()
    platform_service.clear_requests()
    start, first = watch.rounds, len(untold)
    assert await watch.quiet(3 * LISTING_EVERY)
    rounds = watch.rounds - start
    reads = platform_service.requests(method="GET")
    listings = [r for r in reads if r["path"].endswith("/jobs/")]
    feed = [r for r in reads if r["path"].endswith("/notifications")]
    assert len(listings) <= rounds / LISTING_EVERY + 1 + sum(untold[first:])
    assert len(feed) >= rounds - sum(untold[first:]) - 1  # each round told is one read (or more, queued)
    await watch.stop()
