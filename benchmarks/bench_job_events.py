"""
Requests per interval of ``WorkflowJobEventTrigger`` watchers of one workflow: 1 and 10 watchers, each
with its own poll loop (Airflow 3.0-3.2: ``run()``) and on one shared stream (Airflow 3.3: Airflow's own
``SharedStreamManager``, as the triggerer drives it).

The emulator (a real uvicorn server, in this process) runs a workflow on its own hourly schedule; its
clock is advanced ``--jobs`` times during the run, so jobs start and finish while the watchers poll. The
figures come from the emulator's request log: listings (``GET /jobs/``) per poll interval, the summary
requests per finished job (details, record, failed files) and the events each watcher gave per job
(must be 1).

    python -m benchmarks.bench_job_events [--interval 1.0] [--intervals 12] [--jobs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any
from unittest import mock

from airflow_provider_workflowsvc.testing.job_events import MemoryAssetStore
from benchmarks._common import CONN_ENV, Row, conn_json


def _scheduled_workflow(emu: Any) -> str:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    now = emu.now()  # half past the hour: each hour advanced then starts exactly one job
    emu.advance_clock((1800 - (now.minute * 60 + now.second)) % 3600)
    settings = ConnectionSettings(base_url=emu.base_url, token=emu.token, api_key=emu.api_key)
    config = {"remote_url": "s3://bench/in/", "key": "AKIABENCH", "secret": "bench", "emulator_documents": 3}
    with WorkflowServiceHook(settings=settings) as hook:
        source = hook.create_source(f"bench-{time.time_ns()}", "s3", config)
        workflow = hook.create_workflow(
            f"bench-{time.time_ns()}", "basic", source_id=str(source.id), schedule="every hour"
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
        "summary_requests_per_job": (len(log) - listings) / max(len(finished), 1),
        "events_per_job_per_watcher": per_job,
        "jobs_reported": len(finished),
    }


def run(
    runs: int = 1, interval: float = 1.0, intervals: int = 12, jobs: int = 3, emu: Any = None
) -> list[Row]:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        if emu is None:
            emu = stack.enter_context(running_emulator(token="bench-token", api_key="bench-key"))
        stack.enter_context(
            mock.patch.dict(os.environ, {CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key)})
        )
        emu.configure(processing_delay=0.05)
        for watchers, shared in ((1, False), (10, False), (1, True), (10, True)):
            results = [
                asyncio.run(_watch(emu, watchers, shared, interval, intervals, jobs)) for _ in range(runs)
            ]
            mode = "one stream (3.3)" if shared else "own loop each (3.0-3.2)"
            section = f"job events: {watchers} watcher(s), {mode}"
            per_job = [v for r in results for v in r["events_per_job_per_watcher"]]
            rows.append(
                Row(section, "listings per interval", [r["listings_per_interval"] for r in results], "req")
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


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks._common import airflow_home, machine, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--intervals", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=3)
    args = parser.parse_args(argv)
    with airflow_home():
        os.environ.setdefault("AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL", "0.01")
        rows = run(args.runs, args.interval, args.intervals, args.jobs)
    print(machine())
    print(table(rows))


if __name__ == "__main__":
    main()
