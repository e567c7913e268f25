"""
Hung neighbours: how late healthy waits report their jobs' completion when other waits of the same
triggerer (same connection, one shared pool) have status reads the service never answers.

One event loop runs ``healthy`` + ``hung`` ``WorkflowJobTrigger``s on one connection
(``max_connections`` lanes, read timeout ``--read-timeout``). The emulator (its own process) holds
every status read of the hung jobs for ten minutes. After ``--settle`` seconds (the hung reads pile
up), every job is completed at one instant (the emulator's clock is moved on); the latency of a healthy
wait is the time from that instant to its event. The connection bound is checked by counting the
sockets this process holds open every 50 ms (less those it held when the trial's event loop started).

A row with ``lane limit off`` is the pool as it was before issue #24 (a hung read keeps its lane until
its read timeout). A row with ``httpx pool + deadline`` is the alternative issue #33 weighed: the shared
client on httpx's own pool of ``2 * lanes`` connections (the lanes' socket bound), each status read cut
at the lane time limit and not retried (the next poll asks again).

    python -m benchmarks.bench_hung_neighbours [--hung 0,20,50] [--healthy 20] [--interval 2] [--httpx-pool]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import time
from typing import Any

from benchmarks._common import CONN_ENV, conn_json, machine, open_sockets, raise_open_files_limit
from benchmarks._service import emulator, make_jobs

log = logging.getLogger("benchmarks.hung")
JOB_SECONDS = 4 * 3600.0
"""Jobs that never end on their own: the benchmark completes them all at once."""


async def _trial(
    emu: Any, healthy: list[str], hung: list[str], interval: float, settle: float
) -> dict[str, Any]:
    from airflow_provider_workflowsvc.hooks._pool import _SHARED_CLIENTS
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

    deadline = time.time() + settle + 60
    reported: dict[str, float] = {}
    statuses: dict[str, str] = {}

    async def wait(job: str) -> None:
        trigger = WorkflowJobTrigger(job_id=job, deadline=deadline, poll_interval=interval)
        async for event in trigger.run():
            reported[job] = time.time()
            statuses[job] = event.payload["status"]

    sockets: list[int] = []
    before = open_sockets()  # inside the event loop: its own self-pipe (two sockets) is not counted

    async def count_sockets() -> None:
        while True:
            sockets.append(open_sockets())
            await asyncio.sleep(0.05)

    counter = asyncio.create_task(count_sockets())
    tasks = [asyncio.create_task(wait(job)) for job in [*healthy, *hung]]
    await asyncio.sleep(settle)
    overflowing = [
        getattr(shared.client._transport, "overflowing", 0)
        for clients in _SHARED_CLIENTS.values()
        for shared in clients.values()
    ]
    completed_at = time.time()
    await asyncio.to_thread(emu.advance_clock, JOB_SECONDS + 1)
    await asyncio.wait(tasks[: len(healthy)], timeout=60)
    for task in tasks[len(healthy) :]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    counter.cancel()
    latencies = [reported[job] - completed_at for job in healthy if job in reported]
    return {
        "healthy": len(healthy),
        "hung": len(hung),
        "reported": len(latencies),
        "succeeded": sum(statuses.get(job) == "success" for job in healthy),
        "latency_median": statistics.median(latencies) if latencies else float("nan"),
        "latency_max": max(latencies) if latencies else float("nan"),
        "max_sockets": max(sockets) - before if sockets else 0,
        "overflowing_at_completion": sum(overflowing),
    }


def run_one(
    hung_count: int, healthy_count: int, interval: float, settle: float, lanes: int, read_timeout: float
) -> dict[str, Any]:
    with emulator() as emu:
        os.environ[CONN_ENV] = conn_json(
            emu.base_url, emu.token, emu.api_key, max_connections=lanes, timeout=read_timeout
        )
        ids = make_jobs(emu, healthy_count + hung_count, JOB_SECONDS)
        healthy, hung = ids[:healthy_count], ids[healthy_count:]
        if hung:
            emu.set_faults(
                method="GET", path_regex="|".join(f".*/jobs/{j}(/details)?$" for j in hung), latency=600
            )
        return asyncio.run(_trial(emu, healthy, hung, interval, settle))


def _use_httpx_pool_with_read_deadlines(deadline: float) -> None:
    """Put the shared clients on httpx's own pool (``2 * max_connections``), each GET cut at ``deadline``."""
    import httpx

    from airflow_provider_workflowsvc.hooks import _exchange, _failures, _pool
    from airflow_provider_workflowsvc.hooks._settings import KEEPALIVE_EXPIRY

    def plain_pool(size: int, *, lane_limit: float, **options: Any) -> httpx.AsyncHTTPTransport:
        limits = httpx.Limits(max_connections=2 * size, max_keepalive_connections=2 * size)
        return httpx.AsyncHTTPTransport(
            limits=httpx.Limits(**{**limits.__dict__, "keepalive_expiry": KEEPALIVE_EXPIRY}), **options
        )

    timeout_of = _exchange._Transport.request_timeout

    def cut_reads(self: Any, method: str, path: str) -> Any:
        timeout = timeout_of(self, method, path)
        if method != "GET":
            return timeout
        read = self.settings.timeout if timeout is httpx.USE_CLIENT_DEFAULT else timeout.read
        return httpx.Timeout(min(read, deadline), connect=self.settings.connect_timeout)

    kind_of = _failures._failure_kind

    def not_retried(exc: httpx.TransportError) -> str:  # a cut read is not retried, as a lane-limit cut
        return "lane_limit" if isinstance(exc, httpx.ReadTimeout) else kind_of(exc)

    _pool._Lanes = plain_pool  # type: ignore[assignment,misc]
    _exchange._Transport.request_timeout = cut_reads  # type: ignore[method-assign]
    _failures._failure_kind = not_retried


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hung", default="0,20,50")
    parser.add_argument("--healthy", type=int, default=20)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--lanes", type=int, default=20)
    parser.add_argument("--read-timeout", type=float, default=8.0)
    parser.add_argument("--baseline", action="store_true", help="also run with the lane limit off")
    parser.add_argument(
        "--httpx-pool", action="store_true", help="also run on httpx's own pool with per-read deadlines"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    raise_open_files_limit()
    from airflow_provider_workflowsvc.hooks import _pool

    lane_limit = _pool.LANE_TIME_LIMIT
    modes = [("lane limit on", lane_limit)]
    if args.baseline:
        modes.append(("lane limit off", 1e9))
    if args.httpx_pool:
        modes.append(("httpx pool + deadline", lane_limit))
    rows = []
    for name, limit in modes:
        _pool.LANE_TIME_LIMIT = limit
        if name.startswith("httpx pool"):
            _use_httpx_pool_with_read_deadlines(limit)
        for hung in (int(h) for h in args.hung.split(",")):
            row = run_one(hung, args.healthy, args.interval, args.settle, args.lanes, args.read_timeout)
            row["mode"] = name
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(f"machine: {json.dumps(machine())}")
    print(
        f"{args.healthy} healthy waits, poll interval {args.interval:g} s, {args.lanes} lanes, read timeout "
        f"{args.read_timeout:g} s; jobs completed {args.settle:g} s after the waits started"
    )
    print()
    columns = ("pool", "hung neighbours", "healthy reported", "median latency (s)", "max latency (s)")
    columns += ("max sockets", "reads in overflow")
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['hung']} | {r['succeeded']}/{r['healthy']} | {r['latency_median']:.2f} | "
            f"{r['latency_max']:.2f} | {r['max_sockets']} | {r['overflowing_at_completion']} |"
        )


if __name__ == "__main__":
    main()
