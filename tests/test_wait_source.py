"""The source of a connection's waits (wait/source.py) against the emulator: the feed, else the listing."""

from __future__ import annotations

import asyncio
import collections
import math
import time
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import SHARED_STATUS_POLL_ENV, write_good_and_empty

from airflow_provider_workflowsvc.hooks import _pool
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.models import JobStatus
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger
from airflow_provider_workflowsvc.wait import source

INTERVAL = 0.5
KINDS = ("completed", "failed_files", "failed")
FILES = {"completed": ["good.txt"], "failed_files": ["good.txt", "empty.txt"], "failed": ["empty.txt"]}
VERDICT = {"completed": ("success", 0), "failed_files": ("success", 1), "failed": ("failed", 1)}


@pytest.fixture(autouse=True)
def shared_status_poll_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared status poll is on by default; pinned on here, whatever the environment says."""
    monkeypatch.setenv(SHARED_STATUS_POLL_ENV, "True")


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    return write_good_and_empty(tmp_path)


def start_jobs(settings: Any, inputs: Path, count: int, name: str = "shared") -> tuple[str, list[str]]:
    """A workflow and ``count`` jobs of it, of each kind in turn."""
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"{name}-{time.time_ns()}", "basic").id)
        jobs = []
        for i in range(count):
            files = [inputs / f for f in FILES[KINDS[i % 3]]]
            job = hook.run_workflow(workflow, files=files)
            assert job is not None
            jobs.append(job.id)
    return workflow, jobs


async def event(job: str, workflow: str | None, seconds: float = 30.0, interval: float = INTERVAL) -> Any:
    trigger = WorkflowJobTrigger(
        job_id=job, workflow_id=workflow, deadline=time.time() + seconds, poll_interval=interval
    )
    return (await anext(trigger.run())).payload


def check_kinds(events: list[dict[str, Any]]) -> None:
    """Every job's verdict is its kind's: nothing missed, nothing wrong."""
    for i, payload in enumerate(events):
        status, failed = VERDICT[KINDS[i % 3]]
        assert payload["status"] == status, payload
        assert len(payload["failed_files"]) == failed, payload
        assert payload["node_stats"], payload


def is_source_read(r: dict[str, Any]) -> bool:
    """Whether a logged request read the waits' source: the feed, or a listing of the active jobs."""
    return bool(r["path"].endswith("/notifications") or "status=" in (r.get("query") or ""))


def requests_by_kind(emulator: Any, jobs: list[str], workflow: str) -> collections.Counter[str]:
    """The GETs sent, by kind: ``source`` (the feed or the active-jobs listing), and per job."""
    counts: collections.Counter[str] = collections.Counter()
    for r in emulator.requests(method="GET"):
        if is_source_read(r):
            counts["source"] += 1
        elif any(f"/jobs/{job}" in r["path"] for job in jobs):
            counts[r["path"].rsplit("/", 1)[-1] if r["path"].count("/") > 4 else "record"] += 1
    return counts


def _without_times(payload: dict[str, Any]) -> dict[str, Any]:
    """The event, less what differs from job to job (ids, names, times)."""
    varying = ("job_id", "workflow_id", "workflow_name", "elapsed", "job_seconds", "output_files")
    same = {k: v for k, v in payload.items() if k not in varying}
    return {**same, "output_files": len(payload["output_files"])}


async def test_waits_on_one_connection_share_one_source(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nine waits on one connection: the same events as nine lone waits, a fraction of the requests."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.8)  # ~2.5 s: five polls or so
    workflow, jobs = start_jobs(settings, inputs, 9)
    emulator.clear_requests()
    started = time.monotonic()
    shared = await asyncio.gather(*(event(job, workflow) for job in jobs))
    shared_intervals = (time.monotonic() - started) / INTERVAL
    used = requests_by_kind(emulator, jobs, workflow)
    monkeypatch.setenv(SHARED_STATUS_POLL_ENV, "False")  # the same waits, each polling its own job
    alone_workflow, alone_jobs = start_jobs(settings, inputs, 9, "alone")
    emulator.clear_requests()
    started = time.monotonic()
    alone = await asyncio.gather(*(event(job, alone_workflow) for job in alone_jobs))
    alone_intervals = (time.monotonic() - started) / INTERVAL
    check_kinds(shared)
    assert [_without_times(e) for e in shared] == [_without_times(e) for e in alone]
    assert used["source"] >= 1
    # read on their own first, once the source shows them changed, and as a canary now and then
    assert used["details"] <= 3 * len(jobs), used
    per_job = requests_by_kind(emulator, alone_jobs, alone_workflow)
    assert per_job["source"] == 0
    shared_status = (used["source"] + used["details"]) / len(jobs) / shared_intervals
    lone_status = per_job["details"] / len(jobs) / alone_intervals
    # one read per round for all nine, and a canary's own poll every CANARY_EVERY reads
    assert shared_status < 0.8 * lone_status, (used, per_job)
    assert all(not s.waits for s in source._SOURCES.values())


async def test_waits_given_only_their_job_share_the_source_as_others_do(
    workflowsvc_conn: Any, settings: Any, inputs: Path
) -> None:
    """
    Nine waits given only their job (a sensor's, a trigger built by user code) share their connection's
    source as waits given the workflow do (it needs no workflow): the same events, no extra read.
    """
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.8)
    workflow, jobs = start_jobs(settings, inputs, 9)
    emulator.clear_requests()
    learnt = await asyncio.gather(*(event(job, None) for job in jobs))
    check_kinds(learnt)
    used = requests_by_kind(emulator, jobs, workflow)
    assert used["source"] >= 1, used
    assert used["details"] <= 3 * len(jobs), used
    # only the read that confirms each job's end: no wait reads its record to learn its workflow
    assert used["record"] == len(jobs), used
    assert all(e["workflow_id"] == workflow for e in learnt)
    assert all(not s.waits for s in source._SOURCES.values())


async def four_waits_on_one_workflow(
    emulator: Any, settings: Any, inputs: Path, processing_delay: float
) -> collections.Counter[str]:
    """Four waits on jobs of one new workflow, each ending with its kind's verdict; their requests by kind."""
    emulator.configure(processing_delay=processing_delay)
    workflow, jobs = start_jobs(settings, inputs, 4)
    emulator.clear_requests()
    check_kinds(await asyncio.gather(*(event(job, workflow) for job in jobs)))
    return requests_by_kind(emulator, jobs, workflow)


async def test_by_default_the_waits_share_their_connections_source(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing configured the waits of a connection share its source."""
    monkeypatch.delenv(SHARED_STATUS_POLL_ENV)
    used = await four_waits_on_one_workflow(workflowsvc_conn, settings, inputs, processing_delay=0.6)
    assert used["source"] >= 1, used


async def test_switched_off_each_wait_polls_its_own_job(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``[workflowsvc] shared_status_poll = False`` the waits send no feed read nor listing."""
    monkeypatch.setenv(SHARED_STATUS_POLL_ENV, "False")
    used = await four_waits_on_one_workflow(workflowsvc_conn, settings, inputs, processing_delay=0.3)
    assert used["source"] == 0, used
    assert used["record"] == used["failed-files"] == 4, used


async def test_a_wait_alone_on_its_connection_polls_as_before(
    workflowsvc_conn: Any, settings: Any, inputs: Path
) -> None:
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.3)
    workflow, (job,) = start_jobs(settings, inputs, 1)
    emulator.clear_requests()
    payload = await event(job, workflow)
    assert payload["status"] == "success", payload
    used = requests_by_kind(emulator, [job], workflow)
    assert used["source"] == 0
    assert set(used) == {"details", "record", "failed-files", "download"}, used
    assert used["record"] == used["failed-files"] == 1, used
    assert used["download"] == len(payload["output_files"]) == 1, "the output's document (issue #32)"


async def test_jobs_a_capped_or_odd_listing_does_not_show_are_polled_on_their_own(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing drops every other job and shows one in a status nobody knows: all end right."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.6)  # ~2.4 s: the hidden jobs are polled a few times
    emulator.set_faults(path="/api/v1/notifications", errors=[404])  # the platform's listing too
    workflow, jobs = start_jobs(settings, inputs, 6)
    list_jobs = WorkflowServiceAsyncHook.list_jobs
    odd = jobs[1]

    async def capped(self: WorkflowServiceAsyncHook, *args: Any, **kwargs: Any) -> Any:
        listed = await list_jobs(self, *args, **kwargs)
        kept = [job for job in listed if jobs.index(job.id) % 2 == 1] if listed else listed
        queued = {"status": JobStatus.UNKNOWN, "raw_status": "queued"}
        return [j.model_copy(update=queued) if j.id == odd else j for j in kept]

    monkeypatch.setattr(WorkflowServiceAsyncHook, "list_jobs", capped)
    emulator.clear_requests()
    events = await asyncio.gather(*(event(job, workflow) for job in jobs))
    check_kinds(events)
    used = requests_by_kind(emulator, jobs, workflow)
    assert used["source"] >= 1
    polls = [len(emulator.requests(path_contains=f"/jobs/{job}/details")) for job in jobs]
    # Jobs 0 and 4 (hidden) and 1 (odd status) run for a while: polled on their own throughout;
    # job 3 (shown) at its first poll, once it left the listing, and perhaps as a canary (jobs 2 and
    # 5 fail at once).
    assert min(polls[0], polls[1], polls[4]) >= 2, polls
    assert polls[3] <= 3, polls


async def test_a_refused_listing_leaves_each_wait_to_its_own_poll(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service refuses the status filter (422) in both dialects' spellings: the waits stop asking
    for listings and poll their own jobs, to the same verdicts."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.3)
    workflow, jobs = start_jobs(settings, inputs, 4)
    refused: list[str] = []
    handle = _pool._Lanes.handle_async_request

    async def refuse_status_filters(self: Any, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/notifications"):  # no feed (the platform's too): the listing
            return httpx.Response(404, json={"detail": "Not Found"}, request=request)
        status = request.url.params.get("status")
        if status is None:
            return await handle(self, request)
        refused.append(status)
        return httpx.Response(422, json={"detail": "status: unknown job status"}, request=request)

    monkeypatch.setattr(_pool._Lanes, "handle_async_request", refuse_status_filters)
    events = await asyncio.gather(*(event(job, workflow) for job in jobs))
    check_kinds(events)
    spellings = (["IN_PROGRESS", "im progress"], ["SCHEDULED", "scheduled"])
    assert sorted(refused) in spellings, "one status in each spelling once, then no more listings"


async def test_a_failing_or_hung_listing_costs_requests_not_outcomes(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Every read of the source (feed, listing) answers 503, or never (held until the faults are cleared,
    past every wait's deadline): a source that never answered vouches for nothing, so every poll of
    each wait reads its own job, and each ends with its verdict while no read of the source answered.
    """
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.3)
    polls: list[bool] = []  # each poll of a subscribed wait: whether it read its own job
    due = source.Subscription.due

    def counted(self: source.Subscription, schedule: Any) -> bool:
        polls.append(due(self, schedule))
        return polls[-1]

    monkeypatch.setattr(source.Subscription, "due", counted)
    for rule in ({"errors": [503]}, {"latency": 3600.0}):
        emulator.clear_requests()
        polls.clear()
        workflow, jobs = start_jobs(settings, inputs, 4)
        paths = ("/api/v1/jobs/", "/api/v1/notifications")
        emulator.set_faults(rules=[{"method": "GET", "path": path, **rule} for path in paths])
        events = await asyncio.gather(*(event(job, workflow) for job in jobs))
        listings = [r for r in emulator.requests(method="GET") if is_source_read(r)]
        emulator.clear_faults()
        check_kinds(events)  # no timeout: each verdict came before its wait's deadline
        assert listings, rule
        assert all(r["fault"] for r in listings), rule
        assert all(r["status"] == rule.get("errors", [None])[0] for r in listings), (rule, listings)
        assert polls, rule
        assert all(polls), (rule, polls)  # no poll left to the source
        for job in jobs:  # each verdict is the job's own read
            assert emulator.requests(path_contains=f"/jobs/{job}/details"), job


async def test_a_cancelled_wait_leaves_the_source(workflowsvc_conn: Any, settings: Any, inputs: Path) -> None:
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.5)
    workflow, jobs = start_jobs(settings, inputs, 4)
    tasks = [asyncio.ensure_future(event(job, workflow)) for job in jobs]
    while not any(len(s.waits) == 4 for s in source._SOURCES.values()):
        await asyncio.sleep(0.01)
    (shared,) = [s for s in source._SOURCES.values() if s.waits]
    tasks[0].cancel()
    while len(shared.waits) != 3:
        await asyncio.sleep(0.01)
    events = await asyncio.gather(*tasks[1:])
    assert [e["status"] for e in events] == ["success", "failed", "success"]
    assert not shared.waits
    assert shared._reader is None, "no reader left behind"


async def test_shared_waits_keep_their_deadlines(workflowsvc_conn: Any, settings: Any, inputs: Path) -> None:
    """Jobs that never end: every wait times out at its deadline, its last poll its own."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)
    workflow, jobs = start_jobs(settings, inputs, 4)
    emulator.clear_requests()
    deadline = time.time() + 2.2
    triggers = [
        WorkflowJobTrigger(job_id=job, workflow_id=workflow, deadline=deadline, poll_interval=INTERVAL)
        for job in jobs
    ]
    events = await asyncio.gather(*(anext(t.run()) for t in triggers))
    late = time.time() - deadline
    assert [e.payload["status"] for e in events] == ["timeout"] * 4
    assert late >= -0.2, late  # never before its deadline (a busy machine only makes it later)
    print(f"the waits ended {late:.2f} s after their deadline")
    for job in jobs:  # the final poll, a second before the deadline, is the job's own
        assert emulator.requests(path_contains=f"/jobs/{job}/details"), job


async def test_a_stale_listing_holds_no_job_past_a_few_polls(
    workflowsvc_conn: Any, settings: Any, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    The listing is stuck (a lagging replica: it answers as it did the first time, every job active) and
    the jobs end: a canary's own read shows an end the listing does not, which proves it stale; the
    canaries double each read, so every wait learns of its job's end within a few polls, not at its
    deadline (``CANARY_EVERY`` polls to the first canary, one to prove, then one per doubling).
    """
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=1000)  # the jobs wait until the emulator's clock is moved
    emulator.set_faults(path="/api/v1/notifications", errors=[404])  # the platform's listing too
    workflow, jobs = start_jobs(settings, inputs, 4)
    stale: dict[Any, Any] = {}
    list_jobs, due = WorkflowServiceAsyncHook.list_jobs, source.Subscription.due
    polls: collections.Counter[str] = collections.Counter()

    async def stuck(self: WorkflowServiceAsyncHook, *args: Any, **kwargs: Any) -> Any:
        key = repr(kwargs)
        if key not in stale:
            stale[key] = await list_jobs(self, *args, **kwargs)
        return stale[key]

    def counted(self: source.Subscription, schedule: Any) -> bool:
        polls[self.watch.job_id] += 1
        return due(self, schedule)

    monkeypatch.setattr(WorkflowServiceAsyncHook, "list_jobs", stuck)
    monkeypatch.setattr(source.Subscription, "due", counted)
    waits = [asyncio.ensure_future(event(job, workflow, seconds=30)) for job in jobs]
    while not stale or min(polls[job] for job in jobs) < 2:  # the listing answers, and will not change
        await asyncio.sleep(0.05)
    emulator.advance_clock(100_000)  # every job ends; the listing still shows them active
    ended = dict(polls)
    check_kinds(await asyncio.gather(*waits))
    after = {job: polls[job] - ended[job] for job in jobs}
    print(f"\nstale listing: polls from the jobs' end to their events: {sorted(after.values())}")
    assert max(after.values()) <= source.CANARY_EVERY + 1 + math.ceil(math.log2(len(jobs))) + 1, after


# --------------------------------------------------------------------------------------------------
# The feed (platform dialect)


def feed_reads(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.requests() if "/notifications" in r["path"]]


async def test_a_feed_told_wait_ends_with_its_jobs_own_verdict(platform_service: Any, inputs: Path) -> None:
    """
    Six waits told by the feed: each ends with its job's own verdict (``job.completed`` with a failed
    file is the job's completed-with-failed-files, read in its own details, not the event's word); the
    connection's waits send no listing, and nothing is ever marked read.
    """
    emulator = platform_service
    emulator.configure(processing_delay=0.8)
    _, jobs = start_jobs(platform_settings(emulator), inputs, 6)
    emulator.clear_requests()
    check_kinds(await asyncio.gather(*(event(job, None) for job in jobs)))
    reads = feed_reads(emulator)
    assert reads, "the feed told the waits"
    assert all(r["method"] == "GET" and r["path"].endswith("/notifications") for r in reads), reads
    assert not any("unread_only" in (r["query"] or "") for r in reads)
    assert not [r for r in emulator.requests() if "status=" in (r["query"] or "")], "no listing"
    assert all(not s.waits for s in source._SOURCES.values())


async def test_without_a_feed_the_listing_tells_the_waits(
    workflowsvc_conn: Any, settings: Any, inputs: Path
) -> None:
    """The feed answers 404 (the spec dialect has none; forced on the platform's): asked once, then listed."""
    emulator = workflowsvc_conn
    emulator.configure(processing_delay=0.8)
    if emulator.dialect == "platform":
        emulator.set_faults(path="/api/v1/notifications", errors=[404])
    workflow, jobs = start_jobs(settings, inputs, 6)
    emulator.clear_requests()
    check_kinds(await asyncio.gather(*(event(job, workflow) for job in jobs)))
    assert [r["status"] for r in feed_reads(emulator)] == [404], "asked once"
    assert requests_by_kind(emulator, jobs, workflow)["source"] >= 2, "then listed"


def platform_settings(emulator: Any) -> ConnectionSettings:
    return ConnectionSettings(base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key)


async def ended_after(
    emulator: Any, jobs: list[str], polls: collections.Counter[str], fault: dict[str, Any] | None = None
) -> dict[str, int]:
    """
    Wait until each wait polled twice, set ``fault``, end every job; return each wait's polls from then
    to its event.
    """
    waits = [asyncio.ensure_future(event(job, None, seconds=30)) for job in jobs]
    while min(polls[job] for job in jobs) < 2:
        await asyncio.sleep(0.05)
    if fault is not None:
        await asyncio.to_thread(emulator.set_faults, **fault)
    ended = dict(polls)
    await asyncio.to_thread(emulator.advance_clock, 100_000)  # every job ends
    check_kinds(await asyncio.gather(*waits))
    return {job: polls[job] - ended[job] for job in jobs}


@pytest.fixture
def counted_polls(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    polls: collections.Counter[str] = collections.Counter()
    due = source.Subscription.due

    def counted(self: source.Subscription, schedule: Any) -> bool:
        polls[self.watch.job_id] += 1
        return due(self, schedule)

    monkeypatch.setattr(source.Subscription, "due", counted)
    return polls


@pytest.mark.parametrize("fault", ["stale", "purged", "down"])
async def test_a_stale_purged_or_down_feed_holds_no_finished_job(
    platform_service: Any,
    inputs: Path,
    monkeypatch: pytest.MonkeyPatch,
    counted_polls: collections.Counter[str],
    fault: str,
) -> None:
    """
    The feed is stuck at its first answer (a lagging replica), or has purged every event the source saw
    (each read finds a gap), or answers 503: every wait still ends with its job's verdict within a few
    polls of the end, not at its deadline (stale: the canaries prove it and double; purged: a gap sends
    every wait to its own record; down: past ``DOWN_AFTER`` intervals without a good read, the waits
    read their own jobs).
    """
    emulator = platform_service
    emulator.configure(processing_delay=1000)
    _, jobs = start_jobs(platform_settings(emulator), inputs, 4)
    read = WorkflowServiceAsyncHook.list_notifications
    first: list[Any] = []

    async def faulty(self: WorkflowServiceAsyncHook, **kwargs: Any) -> Any:
        page = await read(self, **kwargs)
        if fault == "stale":
            first[:] = first or [page]
            return first[0]
        if fault == "purged" and kwargs.get("since") is not None:
            return page.model_copy(update={"events": [], "next_cursor": None})
        return page

    monkeypatch.setattr(WorkflowServiceAsyncHook, "list_notifications", faulty)
    down = {"path": "/api/v1/notifications", "errors": [503]} if fault == "down" else None
    after = await ended_after(emulator, jobs, counted_polls, down)
    print(f"\n{fault} feed: polls from the jobs' end to their events: {sorted(after.values())}")
    bound = {"stale": source.CANARY_EVERY + 2 + math.ceil(math.log2(len(jobs))), "purged": 2}
    # The source's clock is the triggerer's: on a loaded machine a slow, retried read spans more of a
    # wait's polls (stale 7 > 6 at load 25; down 11 > 5 at load 25, again at the 3.2 leg's peak), so the
    # bound is three times the design's figure: still far below the 60 polls to the deadline, which is
    # what a held job would take.
    assert max(after.values()) <= 3 * bound.get(fault, source.DOWN_AFTER + 2), after


def test_a_change_shown_while_a_wait_reads_its_own_job_is_not_lost() -> None:
    """
    A source read that began after a wait's own read began may show what the own read did not (the job
    ended in between): the wait reads its job again at its next poll, not at a canary turn much later.
    A change shown by a read that began before the own read is what that read saw: nothing more to read.
    """
    from airflow_provider_workflowsvc.wait.watch import JobWatch

    class Schedule:
        final, interval = False, 1.0

    hook = WorkflowServiceAsyncHook("unused")
    changes = source.ChangeSource()
    changes.kind, changes._good_at = "feed", time.monotonic() + 3600  # a feed that vouches throughout
    subs = [
        source.Subscription(changes, JobWatch(f"job-{n}", None), hook, 1.0) for n in range(source.SHARE_FROM)
    ]
    changes.waits = dict(enumerate(subs))
    changes.wake = lambda: None  # type: ignore[method-assign]
    sub = subs[0]
    before = time.monotonic()
    assert sub.due(Schedule())  # its first poll reads its own job (nothing vouches for it yet)
    ended = [source.JobChange("job-0", "completed", None)]
    changes._tell(ended, before)  # a read that began before the own read: that read saw as much
    assert not sub.due(Schedule())
    sub.canary = True
    assert sub.due(Schedule())  # an own read again (a canary turn) ...
    changes._tell(ended, time.monotonic())  # ... while a source read that began after it shows the end
    assert sub.due(Schedule())


async def test_a_frozen_loop_is_not_the_sources_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    A paused triggerer wakes with its waits and the source's reader all overdue. The reader's overdue
    time is the loop's, not the service's: the source still vouches, so the waits do not all read their
    own jobs at once, before or after the reader wakes. A source silent while its reader reads (a hung
    read) stops vouching after ``DOWN_AFTER`` intervals, as before.
    """
    clock = [1000.0]
    monkeypatch.setattr(source.time, "monotonic", lambda: clock[0])
    changes = source.ChangeSource()
    changes.kind, changes._good_at = "feed", 1000.0  # a good read just now
    changes.waits = dict(enumerate(object() for _ in range(source.SHARE_FROM)))  # type: ignore[misc]

    async def frozen(seconds: float) -> None:
        clock[0] += seconds + 300  # the reader's sleep, then five minutes stopped (SIGSTOP, SIGCONT)

    monkeypatch.setattr(source, "asyncio", types.SimpleNamespace(sleep=frozen))
    changes._wake_at = clock[0] + 1.0  # asleep until its next read ...
    clock[0] += 301.0  # ... when the process stopped: the waits wake first
    assert changes.vouches(1.0)
    clock[0] -= 301.0
    changes._wake_at = None
    await changes._sleep(1.0)  # the reader wakes as late
    assert changes._wake_at is None
    assert changes.vouches(1.0)  # it reads now: its silence is 1 s, not 301 s
    clock[0] += source.DOWN_AFTER * 1.0 + 0.5  # the read hangs
    assert not changes.vouches(1.0)
