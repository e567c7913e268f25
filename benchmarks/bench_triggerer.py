"""Triggerer fan-in: many ``WorkflowJobTrigger``s waiting at once in one event loop, against the emulator.

The emulator runs in its own process (its CPU is not ours). The triggers run in a fresh child process
that does only that, like a triggerer: after one warm-up trigger it records its RSS, then starts all
triggers at once (``asyncio.gather``) and waits for every event. Measured:

* CPU seconds of the child (user + system) per API request the triggers sent (the emulator's request
  log counts them; every request is a status poll or one of the two final reads of a finished job);
* peak RSS over the baseline (``VmHWM`` after resetting it through ``/proc/self/clear_refs``), per
  trigger;
* TCP connections opened, per trigger: ``httpcore``'s network backend is wrapped to count every
  ``connect_tcp``; the parent also samples the child's open sockets from ``/proc/<pid>/fd``.

Variants, each in its own child, alternated run by run:

* ``provider`` - the provider as it is: one hook, so one ``httpx.AsyncClient``, per trigger;
* ``fresh-client`` - the reference: a new ``httpx.AsyncClient`` for every request (and so every poll);
* ``shared-ssl`` - the provider with the fix this benchmark recommends: every client shares one SSL
  context instead of building its own (patched in the child only, see docs/benchmarks.md).

    python -m benchmarks.bench_triggerer [--triggers 1000] [--job-seconds 30] [--interval 4] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import gc
import json
import os
import ssl
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from benchmarks._common import (
    CONN_ENV,
    CpuTimer,
    Row,
    child_env,
    conn_json,
    proc_status_kib,
    raise_open_files_limit,
    reset_peak_rss,
    run_child,
)

VARIANTS = ("provider", "fresh-client", "shared-ssl")
TARGET_CPU_MS = 1.0
TARGET_KIB = 64.0
TARGET_CONNECTIONS = 1.0


# --------------------------------------------------------------------------------------------------
# Child: the "triggerer"


class ConnectionCounter:
    """Counts TCP connections httpcore opens (sync and async), by wrapping its network backends."""

    def __init__(self) -> None:
        self.opened = 0

    def install(self) -> None:
        from httpcore._backends.auto import AutoBackend
        from httpcore._backends.sync import SyncBackend

        counter = self
        async_connect, sync_connect = AutoBackend.connect_tcp, SyncBackend.connect_tcp

        @functools.wraps(async_connect)
        async def counted_async(self: AutoBackend, *args: Any, **kwargs: Any) -> Any:
            counter.opened += 1
            return await async_connect(self, *args, **kwargs)

        @functools.wraps(sync_connect)
        def counted_sync(self: SyncBackend, *args: Any, **kwargs: Any) -> Any:
            counter.opened += 1
            return sync_connect(self, *args, **kwargs)

        AutoBackend.connect_tcp = counted_async  # type: ignore[method-assign]
        SyncBackend.connect_tcp = counted_sync  # type: ignore[method-assign]


def _trigger_class(variant: str) -> type[Any]:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

    if variant == "provider":
        return WorkflowJobTrigger
    if variant == "shared-ssl":
        ConnectionSettings.ssl_verify = _shared_ssl_verify  # type: ignore[method-assign]
        return WorkflowJobTrigger
    if variant != "fresh-client":
        raise ValueError(f"unknown variant {variant!r}")

    class FreshClientHook(WorkflowServiceAsyncHook):
        """A new ``httpx.AsyncClient`` for every request, closed right after it."""

        async def _send_once(self, call: Any) -> Any:
            await self.aclose()
            try:
                return await super()._send_once(call)
            finally:
                await self.aclose()

    class FreshClientTrigger(WorkflowJobTrigger):
        def _hook(self) -> WorkflowServiceAsyncHook:
            return FreshClientHook(self.workflowsvc_conn_id)

    return FreshClientTrigger


@functools.cache
def _shared_context(verify: bool | str) -> ssl.SSLContext:
    import httpx

    if isinstance(verify, bool):
        return httpx.create_ssl_context(verify=verify)
    if os.path.isdir(verify):
        return ssl.create_default_context(capath=verify)
    return ssl.create_default_context(cafile=verify)


def _shared_ssl_verify(self: Any) -> ssl.SSLContext:
    """The recommended ``ConnectionSettings.ssl_verify``: one context per ``verify`` value, shared."""
    return _shared_context(self.verify)


async def _event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        payload: dict[str, Any] = event.payload
        return payload
    raise RuntimeError("the trigger ended without an event")


async def _lag_monitor(stop: asyncio.Event, lags: list[float], every: float = 0.5) -> None:
    """How late the event loop wakes up a sleeper: a saturated loop delays every poll."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(every)
        lags.append(loop.time() - start - every)


async def _triggerer(
    job_ids: list[str], warm_job: str, variant: str, interval: float, deadline: float
) -> dict[str, Any]:
    trigger_cls = _trigger_class(variant)
    counter = ConnectionCounter()
    counter.install()
    warm = await _event(trigger_cls(job_id=warm_job, deadline=time.time() + 60, poll_interval=0.01))
    if warm.get("status") != "success":
        raise RuntimeError(f"warm-up trigger failed: {warm}")
    gc.collect()
    base_kib = proc_status_kib("VmRSS")
    hwm_reset = reset_peak_rss()
    counter.opened = 0
    lags: list[float] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(_lag_monitor(stop, lags))
    with CpuTimer() as timer:
        ends = time.time() + deadline
        triggers = [trigger_cls(job_id=j, deadline=ends, poll_interval=interval) for j in job_ids]
        events = await asyncio.gather(*(_event(t) for t in triggers))
    stop.set()
    await monitor
    peak_kib = proc_status_kib("VmHWM") if hwm_reset else 0
    return {
        "cpu_s": timer.cpu,
        "wall_s": timer.wall,
        "rss_base_kib": base_kib,
        "rss_peak_kib": peak_kib,
        "hwm_reset": hwm_reset,
        "connections_opened": counter.opened,
        "outcomes": dict(collections.Counter(e.get("status") for e in events)),
        "loop_lag_max_s": max(lags, default=0.0),
        "loop_lag_p50_s": statistics.median(lags) if lags else 0.0,
    }


def child_main(args: argparse.Namespace) -> None:
    from benchmarks._common import emit

    raise_open_files_limit()
    with open(args.jobs_file) as fh:
        data = json.load(fh)
    result = asyncio.run(_triggerer(data["jobs"], data["warm"], args.variant, args.interval, args.deadline))
    emit(result)


# --------------------------------------------------------------------------------------------------
# Parent


def _one_run(emu: Any, variant: str, triggers: int, job_seconds: float, interval: float) -> dict[str, Any]:
    from benchmarks._service import make_jobs

    emu.reset()
    warm = make_jobs(emu, 1, 0.0)[0]
    created = time.perf_counter()
    jobs = make_jobs(emu, triggers, job_seconds, concurrency=16)
    creation_s = time.perf_counter() - created
    emu.clear_requests()
    deadline = job_seconds * 3 + 120
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="wfsvc-bench-jobs-") as fh:
        json.dump({"jobs": jobs, "warm": warm}, fh)
        fh.flush()
        env = child_env({CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key)})
        args = ["-m", "benchmarks.bench_triggerer", "--child", "--variant", variant, "--jobs-file", fh.name]
        args += ["--interval", repr(interval), "--deadline", repr(deadline)]
        result = run_child(args, env=env, timeout=deadline + 120, sample_every=0.5)
    wanted = set(jobs)
    log = [e for e in emu.requests() if e["path"].split("/")[4:5] and e["path"].split("/")[4] in wanted]
    per_job = collections.Counter(e["path"].split("/")[4] for e in log)
    result.update(
        requests=len(log),
        polls=sum(1 for e in log if e["path"].endswith("/details")),
        requests_per_job_max=max(per_job.values(), default=0),
        requests_per_job_min=min(per_job.values(), default=0),
        non_2xx=sum(1 for e in log if not (e["status"] or 0) // 100 == 2),
        creation_s=creation_s,
    )
    return result


def run(
    triggers: int = 1000,
    job_seconds: float = 30.0,
    interval: float = 4.0,
    runs: int = 1,
    variants: Sequence[str] = VARIANTS,
    log: bool = True,
) -> list[Row]:
    from benchmarks._service import emulator

    raise_open_files_limit()  # the emulator subprocess inherits it: it holds one socket per trigger
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with emulator() as emu:
        for index in range(runs):
            for variant in variants:
                result = _one_run(emu, variant, triggers, job_seconds, interval)
                results[variant].append(result)
                if log:
                    print(
                        f"  fan-in run {index + 1}/{runs} {variant}: {_summary(result, triggers)}", flush=True
                    )
    return _rows(results, triggers, job_seconds, interval)


def _summary(r: dict[str, Any], n: int) -> str:
    return (
        f"{r['requests']} requests ({r['polls']} polls) in {r['wall_s']:.0f} s, CPU {r['cpu_s']:.1f} s = "
        f"{r['cpu_s'] / max(r['requests'], 1) * 1000:.2f} ms/request, "
        f"{(r['rss_peak_kib'] - r['rss_base_kib']) / n:.0f} KiB/trigger, "
        f"{r['connections_opened'] / n:.2f} connections/trigger (peak {r['sampled']['sockets']} sockets), "
        f"outcomes {r['outcomes']}, loop lag max {r['loop_lag_max_s']:.2f} s; jobs created in {r['creation_s']:.1f} s"
    )


def _rows(results: dict[str, list[dict[str, Any]]], n: int, job_seconds: float, interval: float) -> list[Row]:
    def cpu_ms(r: dict[str, Any]) -> float:
        return r["cpu_s"] / max(r["requests"], 1) * 1000

    def kib(r: dict[str, Any]) -> float:
        return (r["rss_peak_kib"] - r["rss_base_kib"]) / n

    def conns(r: dict[str, Any]) -> float:
        return float(r["connections_opened"]) / n

    labels = {
        "provider": "provider (one client per trigger)",
        "fresh-client": "reference: new AsyncClient per poll",
        "shared-ssl": "provider + shared SSL context (proposed fix)",
    }
    section = "2 triggerer fan-in"
    rows: list[Row] = []
    ref = results.get("fresh-client", [])
    for variant, runs in results.items():
        polls = statistics.median(r["polls"] / n for r in runs)
        requests = statistics.median(r["requests"] / n for r in runs)
        context = (
            f"{n} triggers, jobs of {job_seconds:.0f} s, poll interval {interval:g} s: {polls:.1f} polls and "
            f"{requests:.1f} requests per trigger, wall {statistics.median(r['wall_s'] for r in runs):.0f} s, "
            f"event-loop lag max {statistics.median(r['loop_lag_max_s'] for r in runs):.2f} s, "
            f"peak open sockets {statistics.median(r['sampled']['sockets'] for r in runs):.0f}, "
            f"outcomes {runs[0]['outcomes']}, non-2xx answers {sum(r['non_2xx'] for r in runs)}"
        )
        for metric, unit, fn, target in (
            ("CPU per poll request", "ms", cpu_ms, TARGET_CPU_MS),
            ("peak RSS per waiting trigger", "KiB", kib, TARGET_KIB),
            ("TCP connections opened per trigger", "conn", conns, TARGET_CONNECTIONS),
        ):
            values = [fn(r) for r in runs]
            reference = ""
            if ref and variant != "fresh-client":
                ref_median = statistics.median(fn(r) for r in ref)
                reference = f"fresh client per poll: {ref_median:.3g} {unit}"
                if ref_median:
                    reference += f" (ours {statistics.median(values) / ref_median:.2g}x)"
            met = statistics.median(values) <= target if variant != "fresh-client" else None
            rows.append(
                Row(
                    section,
                    f"{metric} - {labels.get(variant, variant)}",
                    values,
                    unit,
                    target=f"≤ {target:g} {unit}" if variant != "fresh-client" else "",
                    met=met,
                    reference=reference,
                    note=context if metric.startswith("CPU") else "",
                )
            )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--job-seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=4.0, help="poll interval (s) of every trigger")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--jobs-file", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=600.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args)
        return
    from benchmarks._common import airflow_home, notes, table

    with airflow_home():
        rows = run(args.triggers, args.job_seconds, args.interval, args.runs, args.variants.split(","))
    print(table(rows))
    print(notes(rows))


if __name__ == "__main__":
    main()
