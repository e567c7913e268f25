"""
Requests per interval of ``WorkflowJobEventTrigger`` watchers of one workflow: 1 and 10 watchers, each
with its own poll loop (Airflow 3.0-3.2: ``run()``) and on one shared stream (Airflow 3.3: Airflow's own
``SharedStreamManager``, as the triggerer drives it).

The emulator (a real uvicorn server, in this process) runs a workflow on its own hourly schedule; its
clock is advanced ``--jobs`` times during the run, so jobs start and finish while the watchers poll. The
figures come from the emulator's request log: listings (``GET /jobs/``) and feed reads (``GET
/notifications``, platform dialect: the connection's source, shared with every wait) per poll interval,
the summary requests per finished job (details, record, failed files) and the events each watcher gave
per job (must be 1), in both dialects; and in the platform dialect under the feed's faults (each event
twice, pages oldest first, each job's end shown half an hour late: ``--faults``).

    python -m benchmarks.bench_job_events [--interval 1.0] [--intervals 12] [--jobs 3] [--faults]

``--restart``: a burst of 30 finished jobs whose summaries the emulator slows (0.5 s each); the watcher
is stopped 8 s after its first event and started again from its stored cursor: how many events it hands
over again, and whether any of them was handed over more than ``cursor_settle_seconds`` before the stop.

``--history 0,20000,60000`` measures instead what a watcher and a workflow-mode sensor's trigger cost
the triggerer's event loop when the workflow has that many past jobs: an emulator in a child process
(its CPU never holds this process's interpreter) runs a workflow every 15 minutes of its clock, advanced
until that many jobs exist; then a ``WorkflowJobEventTrigger`` (restarted from its stored cursor, as
after a triggerer restart) and a ``WorkflowJobTrigger(job_id=None, created_after=now)`` poll it on one
event loop for ``--intervals`` intervals, while a probe sleeping 5 ms at a time records how late the loop
wakes it. The table gives the longest block of the loop in any interval (Airflow warns past 0.2 s), the
CPU time of the process per interval, and the first start's block (a new watcher reads the whole
listing once).

    python -m benchmarks.bench_job_events --history 0,20000,60000 [--interval 2] [--intervals 6]

``--waits 100`` measures the wait engine instead (issue #45, 4(a) and 4(c)): that many deferred waits
(``WorkflowJobTrigger.run``, given their workflow) on jobs of 2 workflows in one event loop, with and
without a watcher per workflow on one shared stream. For each job: the connection's source reads (one
per interval) from the first that showed its end to its wait's event, and to its watcher's (p50 / p99);
and the service's requests per waiting job per interval in the steady window (every wait polling, no
job ended yet; the emulator's log: the jobs' own requests, the feed or listing, the watchers' listings).

    python -m benchmarks.bench_job_events --waits 100 [--interval 1] [--job-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any
from unittest import mock

from airflow_provider_workflowsvc.testing.job_events import MemoryAssetStore
from benchmarks._common import CONN_ENV, Row, conn_json


def _scheduled_workflow(emu: Any, schedule: str = "every hour", documents: int = 3) -> str:
    """
    Create a workflow on the service's own ``schedule``, reading ``documents`` from an S3 source; at half
    past the hour, so that each hour advanced starts exactly one job of an hourly one.
    """
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    now = emu.now()
    emu.advance_clock((1800 - (now.minute * 60 + now.second)) % 3600)
    settings = ConnectionSettings(base_url=emu.base_url, token=emu.token, api_key=emu.api_key)
    config = {"remote_url": "s3://bench/in/", "key": "AKIABENCH", "secret": "bench"}
    with WorkflowServiceHook(settings=settings) as hook:
        source = hook.create_source(
            f"bench-{time.time_ns()}", "s3", {**config, "emulator_documents": documents}
        )
        workflow = hook.create_workflow(
            f"bench-{time.time_ns()}", "basic", source_id=str(source.id), schedule=schedule
        )
    return str(workflow.id)


async def _watch(
    emu: Any, watchers: int, shared: bool, interval: float, intervals: int, jobs: int
) -> dict[str, Any]:
    from airflow.triggers.shared_stream import SharedStreamManager

    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger

    workflow_id = _scheduled_workflow(emu)
    triggers, stores = [], [MemoryAssetStore() for _ in range(watchers)]
    for store in stores:
        trigger = WorkflowJobEventTrigger(workflow_id=workflow_id, poll_interval=interval)
        trigger.asset_state_store = store  # type: ignore[assignment]
        trigger.cursor_settle_seconds = 0.0
        triggers.append(trigger)
    manager = SharedStreamManager()
    streams: list[AsyncIterator[Any]] = []
    for number, trigger in enumerate(triggers):
        if shared:
            key = trigger.shared_stream_key()
            streams.append(
                trigger.filter_shared_stream(manager.subscribe(trigger_id=number, trigger=trigger, key=key))
            )
        else:
            streams.append(trigger.run())
    events: list[list[str]] = [[] for _ in triggers]

    async def consume(number: int, stream: AsyncIterator[Any]) -> None:
        async for event in stream:
            events[number].append(event.payload["job_id"])

    tasks = [asyncio.ensure_future(consume(n, s)) for n, s in enumerate(streams)]
    while not all(t.cursor_key in s.values for t, s in zip(triggers, stores, strict=True)):
        await asyncio.sleep(0.01)
    emu.clear_requests()
    started = time.monotonic()
    for _ in range(jobs):  # spread the jobs over the run
        await asyncio.sleep(interval * intervals / (jobs + 1))
        await asyncio.to_thread(emu.advance_clock, 3600)
    await asyncio.sleep(max(0.0, started + interval * intervals - time.monotonic()))
    elapsed = time.monotonic() - started
    log = await asyncio.to_thread(emu.requests, method="GET", path_contains="/jobs")
    feed = await asyncio.to_thread(emu.requests, method="GET", path_contains="/notifications")
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await manager.stop_all()
    listings = sum(r["path"].endswith("/jobs/") for r in log)
    finished = {job_id for got in events for job_id in got}
    per_job = [sum(got.count(job_id) for job_id in finished) / max(len(finished), 1) for got in events]
    return {
        "listings_per_interval": listings / (elapsed / interval),
        "feed_reads_per_interval": len(feed) / (elapsed / interval),
        "summary_requests_per_job": (len(log) - listings) / max(len(finished), 1),
        "events_per_job_per_watcher": per_job,
        "jobs_reported": len(finished),
    }


FEED_FAULTS: dict[str, dict[str, Any]] = {
    "": {},
    ", feed duplicates": {"feed_faults": ["duplicate"]},
    ", feed reorders": {"feed_faults": ["reorder"]},
    ", feed loses ends": {"feed_lag": {"job.completed": 1800.0}},
}


def run(
    runs: int = 1,
    interval: float = 1.0,
    intervals: int = 12,
    jobs: int = 3,
    emu: Any = None,
    dialects: Sequence[str] = ("spec", "platform"),
    faults: bool = False,
) -> list[Row]:
    rows: list[Row] = []
    for dialect in dialects:
        for fault, switches in FEED_FAULTS.items() if faults and dialect == "platform" else [("", {})]:
            rows += _run(runs, interval, intervals, jobs, emu, dialect, fault, switches)
    return rows


def _run(
    runs: int,
    interval: float,
    intervals: int,
    jobs: int,
    emu: Any,
    dialect: str,
    fault: str,
    switches: dict[str, Any],
) -> list[Row]:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        if emu is None:
            emu = stack.enter_context(
                running_emulator(token="bench-token", api_key="bench-key", dialect=dialect)
            )  # type: ignore[arg-type]
        stack.enter_context(
            mock.patch.dict(os.environ, {CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key)})
        )
        emu.configure(processing_delay=0.05, **switches)
        for watchers, shared in ((1, False), (10, False), (1, True), (10, True)):
            results = [
                asyncio.run(_watch(emu, watchers, shared, interval, intervals, jobs)) for _ in range(runs)
            ]
            mode = "one stream (3.3)" if shared else "own loop each (3.0-3.2)"
            section = f"job events, {dialect}{fault}: {watchers} watcher(s), {mode}"
            per_job = [v for r in results for v in r["events_per_job_per_watcher"]]
            rows.append(
                Row(section, "listings per interval", [r["listings_per_interval"] for r in results], "req")
            )
            rows.append(
                Row(
                    section, "feed reads per interval", [r["feed_reads_per_interval"] for r in results], "req"
                )
            )
            rows.append(
                Row(
                    section,
                    "summary requests per finished job",
                    [r["summary_requests_per_job"] for r in results],
                    "req",
                )
            )
            rows.append(
                Row(
                    section,
                    "events per job, per watcher",
                    per_job,
                    "events",
                    target="= 1",
                    met=all(v == 1 for v in per_job) and all(r["jobs_reported"] == jobs for r in results),
                )
            )
    return rows


# --------------------------------------------------------------------------------------------------
# The event loop's cost of a long history


class _LoopProbe:
    """Sleeps ``tick`` seconds at a time and records how late each wake-up is: the loop's blocks."""

    def __init__(self, tick: float = 0.005) -> None:
        self.tick, self.blocks = tick, [(time.monotonic(), 0.0)]
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.tick)
            after = time.monotonic()
            self.blocks.append((after, after - before - self.tick))

    def longest_since(self, moment: float) -> float:
        return max((late for at, late in self.blocks if at >= moment), default=0.0)

    def longest_per_window(self, start: float, window: float, count: int) -> list[float]:
        return [self.longest_since_until(start + i * window, start + (i + 1) * window) for i in range(count)]

    def longest_since_until(self, start: float, end: float) -> float:
        return max((late for at, late in self.blocks if start <= at < end), default=0.0)

    def stop(self) -> None:
        self._task.cancel()


def _seed_history(emu: Any, workflow_id: str, jobs: int) -> None:
    """
    Advance the emulator's clock until ``workflow_id`` (every 15 minutes) has ``jobs`` past jobs, dated
    (``job_stamp_offset``) over the months before this machine's now, as a real history is.
    """
    ahead = (emu.now() - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    emu.configure(job_stamp_offset=-(ahead + 900 * jobs + 7200))
    per_call = 50  # the emulator fires at most 50 occurrences per clock move
    done = 0
    while done < jobs:
        step = min(per_call, jobs - done)
        emu.advance_clock(900 * step)
        done += step
    emu.advance_clock(3600)  # every job has ended
    emu.configure(job_stamp_offset=0)


async def _history_cost(workflow_id: str, interval: float, intervals: int) -> dict[str, float]:
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger
    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger

    store = MemoryAssetStore()
    probe = _LoopProbe()

    def watcher() -> WorkflowJobEventTrigger:
        trigger = WorkflowJobEventTrigger(workflow_id=workflow_id, poll_interval=interval)
        trigger.asset_state_store = store  # type: ignore[assignment]
        trigger.cursor_settle_seconds = 0.0
        return trigger

    first = watcher()  # a first start: the whole listing, once
    started = time.monotonic()
    events = first.run()
    pending = asyncio.ensure_future(events.__anext__())
    while first.cursor_key not in store.values:
        await asyncio.sleep(0.05)
    first_start = probe.longest_since(started)
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await pending
    await events.aclose()  # type: ignore[attr-defined]

    restarted = watcher()  # a restart from the stored cursor: the steady state
    events = restarted.run()
    pending = asyncio.ensure_future(events.__anext__())
    created_after = datetime.datetime.now(datetime.timezone.utc).isoformat()
    sensor = WorkflowJobTrigger(
        job_id=None,
        workflow_id=workflow_id,
        deadline=time.time() + interval * (intervals + 1),
        poll_interval=interval,
        created_after=created_after,
    )
    cpu, begun = time.process_time(), time.monotonic()
    await anext(sensor.run())  # no job is created: it polls every interval until its deadline
    cpu, elapsed = time.process_time() - cpu, time.monotonic() - begun
    windows = probe.longest_per_window(begun, interval, int(elapsed // interval))
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await pending
    await events.aclose()  # type: ignore[attr-defined]
    probe.stop()
    return {
        "longest_block": max(windows, default=0.0),
        "cpu_per_interval": cpu / max(elapsed / interval, 1.0),
        "first_start_block": first_start,
    }


def run_history(histories: Sequence[int], interval: float = 2.0, intervals: int = 6) -> list[Row]:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    rows: list[Row] = []
    for history in histories:
        with running_emulator(subprocess=True, token="bench-token", api_key="bench-key") as emu:
            workflow_id = _scheduled_workflow(emu, "every 15 minutes", documents=1)
            _seed_history(emu, workflow_id, history)
            with mock.patch.dict(os.environ, {CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key)}):
                result = asyncio.run(_history_cost(workflow_id, interval, intervals))
        section = f"event loop, {history:,} past jobs (watcher + workflow-mode sensor, every {interval:g} s)"
        rows.append(
            Row(
                section,
                "longest loop block in an interval",
                [result["longest_block"]],
                "s",
                target="<= 0.1",
                met=result["longest_block"] <= 0.1,
            )
        )
        rows.append(Row(section, "CPU time per interval", [result["cpu_per_interval"]], "s"))
        once = [result["first_start_block"]]
        rows.append(Row(section, "first start: longest loop block (once)", once, "s"))
    return rows


# --------------------------------------------------------------------------------------------------
# What a restart repeats


async def _restart_repeats(emu: Any, jobs: int, restart_after: float) -> dict[str, float]:
    """
    ``jobs`` finished jobs reported in one burst (each summary slowed by the emulator); the watcher is
    stopped ``restart_after`` seconds after the first event and started again from the stored cursor:
    the events it hands over again, and how many of those were handed within the settle time.
    """
    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger

    workflow_id = _scheduled_workflow(emu)
    store = MemoryAssetStore()

    def watcher() -> WorkflowJobEventTrigger:
        trigger = WorkflowJobEventTrigger(workflow_id=workflow_id, poll_interval=1.0)
        trigger.asset_state_store = store  # type: ignore[assignment]
        return trigger

    first = watcher()
    settle = first.cursor_settle_seconds
    events = first.run()
    pending = asyncio.ensure_future(events.__anext__())
    while first.cursor_key not in store.values:
        await asyncio.sleep(0.05)
    emu.set_faults(method="GET", path="/api/v1/jobs/*/details", latency=0.5)
    await asyncio.to_thread(emu.advance_clock, 3600 * jobs)
    handed: dict[str, float] = {}
    stop_at = None
    while stop_at is None or time.monotonic() < stop_at:
        timeout = None if stop_at is None else max(stop_at - time.monotonic(), 0.0)
        done, _ = await asyncio.wait({pending}, timeout=timeout)
        if not done:
            break
        handed[pending.result().payload["job_id"]] = time.monotonic()
        stop_at = stop_at or time.monotonic() + restart_after
        pending = asyncio.ensure_future(events.__anext__())
    stopped = time.monotonic()
    pending.cancel()
    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
        await pending
    await events.aclose()  # type: ignore[attr-defined]
    emu.clear_faults()
    again: list[str] = []
    events = watcher().run()
    while True:
        try:
            event = await asyncio.wait_for(events.__anext__(), timeout=5.0)
        except asyncio.TimeoutError:
            break
        again.append(event.payload["job_id"])
    await events.aclose()  # type: ignore[attr-defined]
    repeated = [job_id for job_id in again if job_id in handed]
    recent = [job_id for job_id in repeated if stopped - handed[job_id] <= settle]
    return {
        "handed_before_restart": len(handed),
        "repeated": len(repeated),
        "repeated_within_settle": len(recent),
        "lost": jobs - len(set(handed) | set(again)),
    }


def run_restart(jobs: int = 30, restart_after: float = 8.0) -> list[Row]:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    with running_emulator(subprocess=True, token="bench-token", api_key="bench-key") as emu:
        emu.configure(processing_delay=0.01)
        with mock.patch.dict(os.environ, {CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key)}):
            result = asyncio.run(_restart_repeats(emu, jobs, restart_after))
    section = f"restart {restart_after:g} s into a burst of {jobs} finished jobs (summaries slowed 0.5 s)"
    return [
        Row(section, "events handed over before the restart", [result["handed_before_restart"]], "events"),
        Row(section, "of them handed over again after it", [result["repeated"]], "events"),
        Row(
            section,
            "repeated beyond the settle time (5 s)",
            [result["repeated"] - result["repeated_within_settle"]],
            "events",
            target="= 0",
            met=result["repeated"] == result["repeated_within_settle"],
        ),
        Row(section, "jobs never reported", [result["lost"]], "jobs", target="= 0", met=result["lost"] == 0),
    ]


# --------------------------------------------------------------------------------------------------
# The wait engine: how soon an end reaches its wait and watcher, and what the waits cost


async def _engine(emu: Any, waits: int, watched: bool, interval: float, job_seconds: float) -> dict[str, Any]:
    from airflow.triggers.shared_stream import SharedStreamManager

    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger
    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger
    from airflow_provider_workflowsvc.wait import source
    from benchmarks._service import make_jobs_over, make_workflows
    from benchmarks.bench_triggerer import _epoch, _job_of, _source_read

    workflows = await asyncio.to_thread(make_workflows, emu, 2)
    reads: list[float] = []  # when each read of the source was told (monotonic)
    shown: dict[str, int] = {}  # job -> the index in ``reads`` of the first read that showed its end
    tell = source.ChangeSource._tell

    def told(self: Any, changes: Any, started: float) -> None:
        reads.append(time.monotonic())
        for change in changes or []:
            if not change.active:
                shown.setdefault(change.job_id, len(reads) - 1)
        tell(self, changes, started)

    manager, consumers = SharedStreamManager(), []
    ended: dict[str, float] = {}  # job -> its wait's event (monotonic)
    reported: dict[str, float] = {}  # job -> its watcher's event (monotonic)
    stores = [MemoryAssetStore() for _ in workflows] if watched else []
    for number, (workflow_id, store) in enumerate(zip(workflows, stores, strict=False)):
        watcher = WorkflowJobEventTrigger(workflow_id=workflow_id, poll_interval=interval)
        watcher.asset_state_store = store  # type: ignore[assignment]
        watcher.cursor_settle_seconds = 0.0
        key = watcher.shared_stream_key()
        stream = watcher.filter_shared_stream(manager.subscribe(trigger_id=number, trigger=watcher, key=key))

        async def consume(stream: AsyncIterator[Any] = stream) -> None:
            async for event in stream:
                reported.setdefault(event.payload["job_id"], time.monotonic())

        consumers.append(asyncio.ensure_future(consume()))
    while not all(s.values for s in stores):
        await asyncio.sleep(0.01)
    with mock.patch.object(source.ChangeSource, "_tell", told):
        made_from, deadline = time.time(), time.time() + 3 * job_seconds + 120
        jobs: list[tuple[str, str]] = []
        waiting: list[asyncio.Future[None]] = []

        async def wait(job_id: str, workflow_id: str) -> None:
            trigger = WorkflowJobTrigger(
                job_id=job_id, workflow_id=workflow_id, deadline=deadline, poll_interval=interval
            )
            async for _ in trigger.run():
                ended[job_id] = time.monotonic()
                return

        for _ in range(BATCHES):  # the jobs end spread over BATCHES intervals, as they started
            made = await asyncio.to_thread(
                make_jobs_over, emu, waits // BATCHES, job_seconds, workflows, concurrency=16
            )
            jobs += made
            waiting += [asyncio.ensure_future(wait(job, workflow)) for job, workflow in made]
            await asyncio.sleep(interval)
        made_until = time.time()
        await asyncio.gather(*waiting)
        while watched and len(reported) < len(jobs) and time.time() < deadline:
            await asyncio.sleep(interval / 4)
    for consumer in consumers:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
    await manager.stop_all()
    log = await asyncio.to_thread(emu.requests)
    begin, end = made_until + 1.5 * interval, made_from + job_seconds - 0.5 * interval
    ids, watched_ids = {job for job, _ in jobs}, set(workflows)
    inside = [
        e for e in log if begin <= _epoch(e) < end and (_job_of(e) in ids or _source_read(e, watched_ids))
    ]

    def reads_to(events: dict[str, float]) -> list[float]:
        """Per job: the source's reads after the one that showed its end, up to its event (0: that one)."""
        return [
            float(sum(1 for at in reads[shown[job] + 1 :] if at < events[job]))
            for job in ids
            if job in shown and job in events
        ]

    def intervals_to(events: dict[str, float]) -> list[float]:
        """Per job: intervals from the read that showed its end to its event."""
        return [(events[job] - reads[shown[job]]) / interval for job in ids if job in shown and job in events]

    return {
        "to_wait": reads_to(ended),
        "to_watcher": reads_to(reported),
        "late": sum(n > 1 for n in reads_to(ended)),  # waits that came more than a read after their end's
        "intervals_to_wait": intervals_to(ended),
        "intervals_to_watcher": intervals_to(reported),
        "per_job_interval": len(inside) / (len(ids) * max(end - begin, interval) / interval),
        "shown": sum(1 for job in ids if job in shown),
        "jobs": len(ids),
    }


BATCHES = 10
"""Batches the engine's jobs are started in, an interval apart (so not all of them end in one interval)."""


def _pct(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def run_engine(waits: int, interval: float, job_seconds: float) -> list[Row]:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    rows: list[Row] = []
    for dialect, target in (("platform", 0.02), ("spec", 0.05)):
        with (
            running_emulator(token="bench-token", api_key="bench-key", dialect=dialect) as emu,  # type: ignore[arg-type]
            mock.patch.dict(os.environ, {CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key)}),
        ):
            for watched in (False, True):
                r = asyncio.run(_engine(emu, waits, watched, interval, job_seconds))
                section = f"{waits} deferred waits on 2 workflows, {dialect}" + (
                    ", a watcher per workflow" if watched else ""
                )
                rows.append(
                    Row(
                        section,
                        "requests per waiting job per interval",
                        [r["per_job_interval"]],
                        "req",
                        target=f"<= {target}",
                        met=r["per_job_interval"] <= target,
                    )
                )
                rows.append(
                    Row(
                        section, f"jobs whose end a source read showed (of {r['jobs']})", [r["shown"]], "jobs"
                    )
                )
                for who in ("wait", "watcher") if watched else ("wait",):
                    got = r[f"to_{who}"]
                    time_to = r[f"intervals_to_{who}"]
                    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
                        rows.append(
                            Row(
                                section,
                                f"intervals from its end's read to its {who}'s event, {name}",
                                [_pct(time_to, fraction)],
                                "intervals",
                            )
                        )
                        rows.append(
                            Row(
                                section,
                                f"reads from the end's read to its {who}'s event, {name} (n={len(got)})",
                                [_pct(got, fraction)],
                                "reads",
                                target="<= 1",
                                met=_pct(got, fraction) <= 1,
                            )
                        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks._common import airflow_home, machine, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--intervals", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--history", help="past jobs, comma-separated: the event loop's cost (see above)")
    parser.add_argument("--restart", action="store_true", help="what a restart during a burst repeats")
    parser.add_argument("--faults", action="store_true", help="also under the feed's faults (platform)")
    parser.add_argument("--waits", type=int, help="the wait engine's figures with that many waits (above)")
    parser.add_argument("--job-seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    with airflow_home():
        os.environ.setdefault("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL", "0.01")
        if args.waits:
            rows = run_engine(args.waits, args.interval, args.job_seconds)
        elif args.restart:
            rows = run_restart()
        elif args.history:
            histories = [int(n) for n in args.history.split(",")]
            rows = run_history(histories, args.interval, args.intervals)
        else:
            rows = run(args.runs, args.interval, args.intervals, args.jobs, faults=args.faults)
    print(machine())
    print(table(rows))


if __name__ == "__main__":
    main()
