"""
Triggerer fan-in: many ``WorkflowJobTrigger``s waiting at once in one event loop, against the emulator.

The emulator runs in its own process (its CPU is not ours). The triggers run in a fresh child process
that does only that, like a triggerer: after one warm-up trigger it records its RSS, then starts all
triggers at once (``asyncio.gather``) and waits for every event. Measured:

* CPU seconds of the child (user + system) per API request the triggers sent (the emulator's request
  log counts them; every request is a status poll or one of the two final reads of a finished job),
  with, in the run's line, the system part and the cyclic garbage collector's part of it;
* peak RSS over the baseline (``VmHWM`` after resetting it through ``/proc/self/clear_refs``), per
  trigger;
* TCP connections opened, per trigger: ``httpcore``'s network backend is wrapped to count every
  ``connect_tcp``; the parent also samples the child's open sockets from ``/proc/<pid>/fd``.

Variants, each in its own child, alternated run by run:

* ``provider`` - the provider as it is: one hook per trigger; the hooks of one connection share one
  ``httpx.AsyncClient`` (one bounded pool) per event loop;
* ``fresh-client`` - the reference: a new ``httpx.AsyncClient`` for every request (and so every poll);
* ``raw-httpx`` - the floor: no trigger, no hook, a bare ``client.get`` loop on the same requests;
* ``httpx-pool`` - the provider with its shared client on httpx's own pool of ``max_connections``
  instead of the lanes of ``hooks/_pool.py`` (not in the default set; issue #33's pool decision);
* ``raw-jittered`` - the floor with the provider's first-poll jitter (its first pause 1.0-1.2
  intervals): what spreading the polls costs a bare poller (not in the default set);
* ``idle`` - the provider with a poll interval longer than httpx's default keep-alive expiry (5 s), to
  show that its clients keep idle connections past it (not in the default set);
* ``per-job-N``, ``shared-N`` - jobs of N workflows, each wait polling its own job, or sharing one listing
  per workflow (issue #27); ``shared-2`` and ``job-id-2``: 100 waits on 2 workflows, given their
  workflow or only their job (issue #37: a wait given only its job learns the workflow from its record);
* ``metrics-statsd`` - the provider with Airflow's metrics on (StatsD to a UDP socket nobody reads), to
  set beside ``provider`` (metrics off): what the provider's metrics cost (issue #37).

    python -m benchmarks.bench_triggerer [--triggers 1000] [--job-seconds 30] [--interval 4] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import contextvars
import cProfile
import functools
import gc
import json
import os
import random
import socket
import statistics
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from benchmarks._common import (
    CONN_ENV,
    CpuTimer,
    GcTimer,
    Row,
    child_env,
    conn_json,
    proc_status_kib,
    raise_open_files_limit,
    reset_peak_rss,
    run_child,
)

WARM_UP_ENV = {"AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL": "0.01"}
"""The warm-up trigger polls every 0.01 s, under the provider's default 1 s floor of poll intervals."""
CREATION_HEADROOM = 600.0
"""Emulator seconds each job is given on top of its length for the jobs' creation; the emulator's clock
is then moved on by what creation did not use. On a busy machine making 2,000 jobs took 50-70 s: jobs of
30 s had ended before the first poll, and the fan-in measured one poll and the end's reads per trigger."""
HTTPX_DEFAULT_KEEPALIVE_EXPIRY = 5.0
"""httpx's default ``Limits(keepalive_expiry=...)``; the provider sets its own, longer one."""


@dataclass(frozen=True)
class Variant:
    """One way of running the fan-in."""

    label: str
    fresh_client: bool = False
    raw_httpx: bool = False
    """Not a trigger: a bare httpx poller (one client each), the floor of an httpx-based trigger."""
    interval: float | None = None
    """Overrides the poll interval of the run."""
    triggers: int | None = None
    """Overrides the number of triggers of the run."""
    job_seconds: float | None = None
    jittered: bool = False
    """The floor with the provider's first-poll jitter (a first pause of 1.0-1.2 intervals)."""
    workflows: int | None = None
    """The jobs are spread over this many workflows (default: all of one workflow)."""
    shared: bool = False
    """The triggers carry their job's workflow, as the operator's do: one status poll per workflow."""
    job_id_only: bool = False
    """The shared status poll on, the triggers given only their job (a sensor's, user code's): each
    learns the workflow from its job's record (issue #37)."""
    metrics: bool = False
    """Airflow's metrics on (StatsD, to a UDP socket of the parent that nobody reads), as a triggerer with
    ``[metrics] statsd_on``; without it Airflow's metrics are off (its no-op logger)."""
    httpx_pool: bool = False
    """The shared client on httpx's own pool of ``max_connections`` (no lanes): the pool decision (#33)."""
    dialect: str = "spec"
    """The emulator's dialect: ``platform`` has the job-event feed the waits' source reads (#45)."""


VARIANTS: dict[str, Variant] = {
    "provider": Variant("provider as is (triggers share one AsyncClient per connection)"),
    "fresh-client": Variant("reference: a new AsyncClient per poll", fresh_client=True),
    "raw-httpx": Variant("floor: bare httpx poller, one AsyncClient each, no hook", raw_httpx=True),
    "httpx-pool": Variant("provider, its shared client on httpx's own pool (no lanes)", httpx_pool=True),
    "raw-jittered": Variant(
        "floor, first poll jittered as the provider's (1.0-1.2 intervals)", raw_httpx=True, jittered=True
    ),
    **{
        f"per-job-{n}": Variant(f"today: each wait polls its job, jobs of {n} workflows", workflows=n)
        for n in (10, 100, 1000)
    },
    **{
        f"shared-{n}": Variant(
            f"shared status poll (issue #27), jobs of {n} workflows", workflows=n, shared=True
        )
        for n in (10, 100, 1000)
    },
    **{
        f"{prefix}{kind}-2": Variant(
            f"{label}, 100 waits given {given}, jobs of 2 workflows",
            workflows=2,
            shared=kind == "shared",
            job_id_only=kind == "job-id",
            triggers=100,
            dialect=dialect,
        )
        for prefix, label, dialect in (
            ("", "shared source, spec dialect (the active-jobs listing)", "spec"),
            ("feed-", "shared source, platform dialect (the job-event feed)", "platform"),
        )
        for kind, given in (("shared", "their workflow"), ("job-id", "only their job"))
    },
    "metrics-statsd": Variant("provider as is, Airflow's metrics on (StatsD)", metrics=True),
    "idle": Variant(
        "provider, poll interval 6 s (> httpx's default keep-alive expiry 5 s), 100 triggers",
        interval=HTTPX_DEFAULT_KEEPALIVE_EXPIRY + 1,
        triggers=100,
        job_seconds=18.0,
    ),
}
DEFAULT_VARIANTS = ("provider", "fresh-client", "raw-httpx")
TARGET_CPU_RATIO = 1.10
"""CPU per poll request, at most this multiple of the bare-httpx floor's in the same run (issue #45)."""
TARGET_CPU_MS = 1.0
"""The absolute CPU target, when the floor was not measured in the run."""
TARGET_KIB = 24.0
TARGET_CONNECTIONS = 50.0
"""TCP connections opened in total by the whole fan-in (the shared pool's cap is 20)."""


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


Waiter = Callable[[str, str | None, float, float], Awaitable[dict[str, Any]]]
"""``waiter(job_id, workflow_id, deadline, interval)``: wait for one job, return the final event payload."""


def _waiter(variant: Variant) -> Waiter:
    if variant.raw_httpx:
        return functools.partial(_raw_wait, jittered=variant.jittered)
    if variant.httpx_pool:
        _use_httpx_pool()
    trigger_cls = _trigger_class(variant)
    # the shared status poll (on by default) only where the variant measures it
    os.environ["AIRFLOW__WORKFLOWSVC__SHARED_STATUS_POLL"] = str(variant.shared or variant.job_id_only)

    async def wait(job_id: str, workflow_id: str | None, deadline: float, interval: float) -> dict[str, Any]:
        workflow = workflow_id if variant.shared else None
        trigger = trigger_cls(job_id=job_id, workflow_id=workflow, deadline=deadline, poll_interval=interval)
        return await _event(trigger)

    return wait


_TERMINAL = frozenset({"COMPLETED", "FAILED", "STOPPED"})


async def _raw_wait(
    job_id: str, workflow_id: str | None, deadline: float, interval: float, jittered: bool = False
) -> dict[str, Any]:
    """Wait as a trigger does with nothing but httpx: details every ``interval``, then job, failed files."""
    import httpx

    conn = json.loads(os.environ[CONN_ENV])
    headers = {"authorization": f"Bearer {conn['password']}", "accept": "application/json"}
    if conn.get("extra", {}).get("api_key"):
        headers["service-api-key"] = conn["extra"]["api_key"]
    from airflow_provider_workflowsvc.hooks._settings import KEEPALIVE_EXPIRY

    # the provider's keep-alive: polls spaced past httpx's 5 s (a saturated emulator) reconnect otherwise
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)
    async with httpx.AsyncClient(
        base_url=conn["host"] + "/", headers=headers, timeout=60, verify=_shared_ssl_context(), limits=limits
    ) as client:
        pause = interval * random.uniform(1.0, 1.2) if jittered else interval
        while time.time() < deadline:
            await asyncio.sleep(pause)
            pause = interval
            details = (await client.get(f"jobs/{job_id}/details")).json()
            if details["processing_status"] in _TERMINAL:
                job = (await client.get(f"jobs/{job_id}")).json()
                (await client.get(f"jobs/{job_id}/failed-files")).raise_for_status()
                return {"status": "success" if job["status"] == "completed" else job["status"]}
    return {"status": "timeout"}


def _use_httpx_pool() -> None:
    """Give the shared clients httpx's own pool of ``max_connections`` instead of the lanes."""
    import httpx

    from airflow_provider_workflowsvc.hooks import _pool
    from airflow_provider_workflowsvc.hooks._settings import KEEPALIVE_EXPIRY

    def plain_pool(size: int, *, lane_limit: float, **options: Any) -> httpx.AsyncHTTPTransport:
        limits = httpx.Limits(
            max_connections=size, max_keepalive_connections=size, keepalive_expiry=KEEPALIVE_EXPIRY
        )
        return httpx.AsyncHTTPTransport(limits=limits, **options)

    _pool._Lanes = plain_pool  # type: ignore[assignment,misc]


_REQUEST_CLIENT: contextvars.ContextVar[Any] = contextvars.ContextVar("fresh_client")
"""The ``fresh-client`` variant's client of the request being sent (asend's task inherits it)."""


@functools.cache
def _shared_ssl_context() -> Any:
    import httpx

    return httpx.create_ssl_context()


def _trigger_class(variant: Variant) -> type[Any]:
    import httpx

    from airflow_provider_workflowsvc.hooks._pool import asend
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

    if not variant.fresh_client:
        return WorkflowJobTrigger

    class FreshClientHook(WorkflowServiceAsyncHook):
        """
        A new ``httpx.AsyncClient`` (same options) for every request, closed right after it.

        The client is the request's own (a context variable), not the hook's: the wait sends two
        requests at once on one hook (the last poll's failed files and output documents), and a client
        kept on the hook was closed by the first to end under the other, whose retry then failed with
        "Cannot send a request, as the client has been closed".
        """

        async def get_async_conn(self) -> Any:
            return _REQUEST_CLIENT.get()

        async def aclose(self) -> None:
            return None

        async def _send(self, call: Any, **options: Any) -> Any:
            options_ = (await self._atransport()).settings.httpx_options()
            async with httpx.AsyncClient(**options_) as client:
                token = _REQUEST_CLIENT.set(client)
                try:
                    return await asend(self, call, **options)
                finally:
                    _REQUEST_CLIENT.reset(token)

    class FreshClientTrigger(WorkflowJobTrigger):
        def _hook(self) -> WorkflowServiceAsyncHook:
            return FreshClientHook(self.workflowsvc_conn_id)

    return FreshClientTrigger


async def _event(trigger: Any) -> dict[str, Any]:
    async for event in trigger.run():
        payload: dict[str, Any] = event.payload
        return payload
    raise RuntimeError("the trigger ended without an event")


async def _lag_monitor(
    stop: asyncio.Event, lags: list[float], cpu: list[tuple[float, float, float]], every: float = 0.5
) -> None:
    """
    How late the event loop wakes up a sleeper (a saturated loop delays every poll); with each
    wake-up, ``(wall clock, process CPU, lag)`` into ``cpu`` (for the figures of the steady window).
    """
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(every)
        lags.append(loop.time() - start - every)
        cpu.append((time.time(), time.process_time(), lags[-1]))


async def _triggerer(
    warm_job: str, variant: Variant, interval: float, deadline: float, profile: str | None
) -> dict[str, Any]:
    from benchmarks._common import wait_for_go

    wait = _waiter(variant)
    counter = ConnectionCounter()
    counter.install()
    warm = await wait(warm_job, None, time.time() + 60, 0.01)
    if warm.get("status") != "success":
        raise RuntimeError(f"warm-up trigger failed: {warm}")
    with open(wait_for_go()) as fh:  # the parent starts the jobs only now that this process is up
        jobs: list[tuple[str, str]] = json.load(fh)
    gc.collect()
    base_kib = proc_status_kib("VmRSS")
    hwm_reset = reset_peak_rss()
    counter.opened = 0
    lags: list[float] = []
    cpu_samples: list[tuple[float, float, float]] = []
    stop = asyncio.Event()
    monitor = asyncio.create_task(_lag_monitor(stop, lags, cpu_samples))
    profiler = cProfile.Profile() if profile else None
    with CpuTimer() as timer, GcTimer() as gc_timer:
        if profiler is not None:
            profiler.enable()
        ends = time.time() + deadline
        events = await asyncio.gather(*(wait(job, workflow, ends, interval) for job, workflow in jobs))
        if profiler is not None:
            profiler.disable()
    if profiler is not None and profile:
        profiler.dump_stats(profile)
    stop.set()
    await monitor
    peak_kib = proc_status_kib("VmHWM") if hwm_reset else 0
    return {
        "cpu_s": timer.cpu,
        "gc_cpu_s": gc_timer.cpu,
        "system_cpu_s": timer.system,
        "gc_collections": gc_timer.collections,
        "wall_s": timer.wall,
        "rss_base_kib": base_kib,
        "rss_peak_kib": peak_kib,
        "hwm_reset": hwm_reset,
        "connections_opened": counter.opened,
        "outcomes": dict(collections.Counter(e.get("status") for e in events)),
        "waited_s": sum(float(e.get("elapsed") or 0.0) for e in events),
        "cpu_samples": cpu_samples,
        "loop_lag_max_s": max(lags, default=0.0),
        "loop_lag_p50_s": statistics.median(lags) if lags else 0.0,
    }


def _airflow_metrics() -> None:
    """Set up Airflow's metrics from ``[metrics]`` (the environment) as the triggerer does at its start."""
    from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_2_PLUS, AIRFLOW_V_3_3_PLUS, conf

    if AIRFLOW_V_3_3_PLUS:
        from airflow.sdk.observability import stats
        from airflow.sdk.observability.metrics import stats_utils

        legacy = conf.getboolean("metrics", "legacy_names_on", fallback=True)
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=legacy)
    elif AIRFLOW_V_3_2_PLUS:
        from airflow.sdk.observability.metrics import stats_utils
        from airflow.sdk.observability.stats import Stats

        Stats.initialize(factory=stats_utils.get_stats_factory(Stats))
    # Airflow 3.0 and 3.1: Stats reads [metrics] itself on first use


def child_main(args: argparse.Namespace) -> None:
    from benchmarks._common import emit

    _airflow_metrics()
    raise_open_files_limit()
    variant = VARIANTS[args.variant]
    result = asyncio.run(_triggerer(args.warm_job, variant, args.interval, args.deadline, args.profile))
    emit(result)


# --------------------------------------------------------------------------------------------------
# Parent


@dataclass(frozen=True)
class Setup:
    """The size of one fan-in run."""

    triggers: int
    job_seconds: float
    interval: float
    workflows: int = 1

    def for_variant(self, variant: Variant) -> Setup:
        return Setup(
            variant.triggers or self.triggers,
            variant.job_seconds or self.job_seconds,
            variant.interval or self.interval,
            variant.workflows or self.workflows,
        )


def _side_by_side(
    emu: Any, names: Sequence[str], setup: Setup, profile: str | None = None
) -> dict[str, dict[str, Any]]:
    """
    Run one child per variant, all at the same time, each with ``setup.triggers`` jobs of its own.

    The jobs are started only once every child is ready, then handed over together; so the variants
    share one moment of the machine (a slower minute slows them all), and their ratio is not moved by it.
    """
    from benchmarks._service import make_jobs, make_jobs_over, make_workflows

    emu.reset()
    warm = make_jobs(emu, 1, 0.0)[0]
    deadline = setup.job_seconds * 3 + 120
    jobs: dict[str, list[tuple[str, str]]] = {}
    timing: dict[str, float] = {}
    results: dict[str, dict[str, Any]] = {}
    errors: list[BaseException] = []
    all_ready = threading.Barrier(len(names), timeout=deadline)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the metrics' StatsD host: never read
    sink.bind(("127.0.0.1", 0))
    with sink, tempfile.TemporaryDirectory(prefix="wfsvc-bench-jobs-") as tmp:

        def start_jobs(name: str) -> str:
            if all_ready.wait() == 0:  # the last child to be ready: start every child's jobs at once
                started = time.perf_counter()
                count, seconds = setup.triggers * len(names), setup.job_seconds
                workflows = make_workflows(emu, setup.workflows)
                timing["jobs_started_from"] = time.time()
                made = make_jobs_over(emu, count, seconds + CREATION_HEADROOM, workflows, concurrency=16)
                timing["jobs_started_until"] = time.time()
                # the first job made has ``seconds`` left now, however long making them all took
                emu.advance_clock(max(CREATION_HEADROOM - (time.time() - timing["jobs_started_from"]), 0.0))
                timing["clock_ahead"] = emu.now().timestamp() - time.time()  # of the request log's times
                timing["creation_s"] = time.perf_counter() - started
                emu.clear_requests()
                for index, each in enumerate(names):
                    jobs[each] = made[index :: len(names)]
                    with open(os.path.join(tmp, f"{each}.json"), "w") as fh:
                        json.dump(jobs[each], fh)
            all_ready.wait()
            return os.path.join(tmp, f"{name}.json")

        def child(name: str) -> None:
            env = child_env({CONN_ENV: conn_json(emu.base_url, emu.token, emu.api_key), **WARM_UP_ENV})
            if VARIANTS[name].metrics:
                env.update(_statsd_env(sink.getsockname()[1]))
            args = ["-m", "benchmarks.bench_triggerer", "--child", "--variant", name, "--warm-job", warm]
            args += ["--interval", repr(setup.interval), "--deadline", repr(deadline)]
            args += ["--profile", f"{profile}.{name}" if len(names) > 1 else profile] if profile else []
            try:
                results[name] = run_child(
                    args,
                    env=env,
                    timeout=deadline + 180,
                    sample_every=0.5,
                    on_ready=functools.partial(start_jobs, name),
                )
            except BaseException as exc:
                all_ready.abort()
                errors.append(exc)

        threads = [threading.Thread(target=child, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    log = emu.requests()
    return {name: _measured(results[name], log, jobs[name], setup, timing) for name in names}


def _statsd_env(port: int) -> dict[str, str]:
    """``[metrics]`` of a triggerer sending Airflow's metrics, the provider's among them, to ``port``."""
    return {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(port),
    }


def _measured(
    result: dict[str, Any],
    emulator_log: list[dict[str, Any]],
    jobs: list[tuple[str, str]],
    setup: Setup,
    timing: dict[str, float],
) -> dict[str, Any]:
    """
    Add to the child's ``result`` the figures that need the emulator's request log of its ``jobs``
    (the requests on each job, and the listings of their workflows).
    """
    wanted, workflows = {job for job, _ in jobs}, {workflow for _, workflow in jobs}
    log = [e for e in emulator_log if e["path"].split("/")[4:5] and e["path"].split("/")[4] in wanted]
    listings = sum(1 for e in emulator_log if _source_read(e, workflows))
    job_intervals = max(result["waited_s"] / setup.interval, 1.0)
    per_job = collections.Counter(e["path"].split("/")[4] for e in log)
    n = setup.triggers
    requests = max(len(log), 1)
    polls = sum(1 for e in log if e["path"].endswith("/details"))
    result.update({k: timing[k] for k in ("jobs_started_from", "jobs_started_until", "clock_ahead")})
    result.update(_steady(result, emulator_log, wanted, workflows, setup))
    result.update(
        triggers=n,
        workflows=len(workflows),
        requests=len(log) + listings,
        polls=polls,
        listings=listings,
        job_intervals=job_intervals,
        status_requests_per_job_interval=(polls + listings) / job_intervals,
        requests_per_job_interval=(len(log) + listings) / job_intervals,
        cpu_ms_per_job_interval=result["cpu_s"] / job_intervals * 1000,
        requests_per_job_max=max(per_job.values(), default=0),
        non_2xx=sum(1 for e in log if (e["status"] or 0) // 100 != 2),
        creation_s=timing["creation_s"],
        cpu_ms_per_request=result["cpu_s"] / (requests + listings) * 1000,
        kib_per_trigger=(result["rss_peak_kib"] - result["rss_base_kib"]) / n,
        connections_per_trigger=result["connections_opened"] / n,
        connections_per_poll=result["connections_opened"] / max(len(log), 1),
    )
    return result


def _steady(
    result: dict[str, Any],
    emulator_log: list[dict[str, Any]],
    jobs: set[str],
    workflows: set[str],
    setup: Setup,
) -> dict[str, float]:
    """
    Issue #27's figures, in the steady window: from an interval and a half after the last job was
    started (every wait has polled, its first pause jittered) to half an interval before the first job
    ends (``job_seconds`` after the last was made, :data:`CREATION_HEADROOM`; no final reads yet): every
    job is waited for throughout. Per waiting job per interval: the requests the service got for these
    jobs (status polls and listings), the triggerer's CPU; and the event-loop lag, max, in that window.
    """
    begin = result["jobs_started_until"] + 1.5 * setup.interval
    end = result["jobs_started_until"] + setup.job_seconds - 0.5 * setup.interval
    if end - begin < setup.interval:
        return {"steady_s": max(end - begin, 0.0)}
    inside = [
        e
        for e in emulator_log
        if begin <= _epoch(e) - result["clock_ahead"] < end
        and (_job_of(e) in jobs or _source_read(e, workflows))
    ]
    samples = [s for s in result["cpu_samples"] if begin <= s[0] < end]
    job_intervals = len(jobs) * (end - begin) / setup.interval
    cpu = 0.0
    if len(samples) > 1:  # the CPU rate between the first and last samples inside, over the window
        cpu = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0]) * (end - begin)
    return {
        "steady_s": end - begin,
        "steady_requests_per_job_interval": len(inside) / job_intervals,
        "steady_cpu_ms_per_job_interval": cpu / job_intervals * 1000,
        "steady_lag_max_s": max((s[2] for s in samples), default=0.0),
    }


def _epoch(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(entry["time"]).timestamp()


def _job_of(entry: dict[str, Any]) -> str | None:
    parts = entry["path"].split("/")
    return parts[4] if len(parts) > 4 else None


def _source_read(entry: dict[str, Any], workflows: set[str]) -> bool:
    """
    Whether a logged request is a read of the waits' source: the feed, a listing of the active jobs
    (a connection's source lists the account's), or a listing of one of ``workflows``.
    """
    if entry["path"].endswith("/notifications"):
        return True
    if not entry["path"].rstrip("/").endswith("/jobs"):
        return False
    query = urllib.parse.parse_qs(entry.get("query") or "")
    listed = (query.get("workflow_id") or [None])[0]
    return listed in workflows or (listed is None and "status" in query)


def run(
    setup: Setup,
    runs: int = 1,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    log: bool = True,
    profile: str | None = None,
    emu: Any = None,
    together: bool = False,
) -> list[Row]:
    from benchmarks._service import emulator

    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown fan-in variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with contextlib.ExitStack() as stack:
        emus = {} if emu is None else {getattr(emu, "dialect", "spec"): emu}
        raise_open_files_limit()  # the emulator inherits it: it holds one socket per trigger

        def emu_for(dialect: str) -> Any:
            if dialect not in emus:
                emus[dialect] = stack.enter_context(emulator(dialect=dialect))
            return emus[dialect]

        for index in range(runs):
            for batch in _batches(variants, setup, together):
                first = VARIANTS[batch[0]]
                for name, result in _side_by_side(
                    emu_for(first.dialect), batch, setup.for_variant(first), profile
                ).items():
                    results[name].append(result)
                    if log:
                        print(f"  fan-in run {index + 1}/{runs} {name}: {_summary(result)}", flush=True)
    return _rows(results, setup)


def _batches(variants: Sequence[str], setup: Setup, together: bool) -> list[list[str]]:
    """
    Group the variants of one round into those run at the same time: each alone, alternated (so a noisy
    moment does not hit one variant only), or, ``together``, those of the same size side by side.
    """
    if not together:
        return [[name] for name in variants]
    groups: dict[tuple[Setup, str], list[str]] = {}
    for name in variants:
        variant = VARIANTS[name]
        groups.setdefault((setup.for_variant(variant), variant.dialect), []).append(name)
    return list(groups.values())


def _summary(r: dict[str, Any]) -> str:
    return (
        f"{r['triggers']} triggers, {r['requests']} requests ({r['polls']} polls) in {r['wall_s']:.0f} s, "
        f"CPU {r['cpu_s']:.1f} s = {r['cpu_ms_per_request']:.2f} ms/request "
        f"(system {r['system_cpu_s']:.1f} s, GC {r['gc_cpu_s']:.1f} s, collections {r['gc_collections']}), "
        f"{r['kib_per_trigger']:.0f} KiB/trigger, {r['connections_per_trigger']:.2f} connections/trigger "
        f"(peak {r['sampled']['sockets']} sockets), outcomes {r['outcomes']}, "
        f"loop lag max {r['loop_lag_max_s']:.2f} s; jobs created in {r['creation_s']:.1f} s; "
        f"{r['workflows']} workflows, {r['listings']} listings; per waiting job per interval: "
        f"{r['status_requests_per_job_interval']:.3f} status requests, {r['requests_per_job_interval']:.3f} "
        f"requests, CPU {r['cpu_ms_per_job_interval']:.3f} ms; steady window {r.get('steady_s', 0):.0f} s: "
        f"{r.get('steady_requests_per_job_interval', float('nan')):.3f} requests and "
        f"{r.get('steady_cpu_ms_per_job_interval', float('nan')):.3f} ms CPU per waiting job per interval, "
        f"lag max {r.get('steady_lag_max_s', float('nan')):.2f} s"
    )


METRICS = (
    ("CPU per poll request", "cpu_ms_per_request", "ms", TARGET_CPU_MS),
    ("peak RSS per waiting trigger", "kib_per_trigger", "KiB", TARGET_KIB),
    ("TCP connections opened in total", "connections_opened", "conn", TARGET_CONNECTIONS),
)
FLOOR = "raw-httpx"
PER_INTERVAL = (
    ("service requests per waiting job per interval (steady)", "steady_requests_per_job_interval", "req"),
    ("CPU per waiting job per interval (steady)", "steady_cpu_ms_per_job_interval", "ms"),
    ("event-loop lag, max (steady)", "steady_lag_max_s", "s"),
    ("status requests per job per interval (whole wait)", "status_requests_per_job_interval", "req"),
    ("CPU per job per interval (whole wait)", "cpu_ms_per_job_interval", "ms"),
    ("event-loop lag, max (whole wait)", "loop_lag_max_s", "s"),
)
"""Issue #27's figures, for the variants whose jobs are spread over workflows."""
SHARED_TARGETS = {
    "shared-10": 0.05,
    "shared-1000": 1.0,
    "shared-2": 0.05,
    "job-id-2": 0.05,
    "feed-shared-2": 0.02,
    "feed-job-id-2": 0.02,
}
"""Service requests per waiting job per interval: 100 waits per workflow, 50, and one (#27); 100 waits on
2 workflows, canaries included, per dialect (#45: the feed, else the listing)."""


def _shared_target(name: str) -> float | None:
    return SHARED_TARGETS.get(name)


def _rows(results: dict[str, list[dict[str, Any]]], setup: Setup) -> list[Row]:
    section = "2 triggerer fan-in"
    rows: list[Row] = []
    reference_runs = results.get("fresh-client", [])
    floor_runs = results.get(FLOOR, [])
    for name, runs in results.items():
        variant = VARIANTS[name]
        size = setup.for_variant(variant)
        is_reference = variant.fresh_client

        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(float(r[key]) for r in runs)

        context = (
            f"{size.triggers} triggers, jobs of {size.job_seconds:g} s, poll interval {size.interval:g} s: "
            f"{median('polls') / size.triggers:.1f} polls and {median('requests') / size.triggers:.1f} "
            f"requests per trigger, {median('connections_per_poll'):.2f} connections per request, "
            f"wall {median('wall_s'):.0f} s, CPU {median('cpu_s'):.1f} s, event-loop lag max "
            f"{median('loop_lag_max_s'):.2f} s, peak open sockets "
            f"{statistics.median(r['sampled']['sockets'] for r in runs):.0f}, "
            f"outcomes {runs[0]['outcomes']}, "
            f"non-2xx answers {sum(r['non_2xx'] for r in runs)}"
        )
        for metric, key, unit, target in METRICS:
            values = [float(r[key]) for r in runs]
            judged = not (is_reference or variant.raw_httpx)
            text, met = f"≤ {target:g} {unit}", statistics.median(values) <= target
            reference = ""
            if key == "cpu_ms_per_request" and floor_runs and judged:
                ratio = _paired_ratio(runs, floor_runs, key)
                text, met = f"≤ {TARGET_CPU_RATIO:g}x the floor", ratio <= TARGET_CPU_RATIO
                reference = f"floor: {_median(floor_runs, key):.3g} {unit} (ours {ratio:.2f}x, run by run)"
            elif reference_runs and judged and name != "idle":
                ref_median = _median(reference_runs, key)
                reference = f"fresh client per poll: {ref_median:.3g} {unit}"
                if ref_median:
                    reference += f" (ours {statistics.median(values) / ref_median:.2g}x)"
            rows.append(
                Row(
                    section,
                    f"{metric} - {variant.label}",
                    values,
                    unit,
                    target=text if judged else "",
                    met=met if judged else None,
                    reference=reference,
                    note=context if key == "cpu_ms_per_request" else "",
                )
            )
        if variant.workflows:
            rows += _per_interval_rows(section, name, runs)
    return rows


def _per_interval_rows(section: str, name: str, runs: list[dict[str, Any]]) -> list[Row]:
    """Issue #27's figures of one variant: requests and CPU per waiting job per interval, loop lag."""
    rows = []
    for metric, key, unit in PER_INTERVAL:
        values = [float(r[key]) for r in runs if key in r]
        if not values:
            continue
        target = _shared_target(name) if key == "steady_requests_per_job_interval" else None
        rows.append(
            Row(
                section,
                f"{metric} - {VARIANTS[name].label}",
                values,
                unit,
                target=f"≤ {target:g} {unit}" if target is not None else "",
                met=statistics.median(values) <= target if target is not None else None,
            )
        )
    return rows


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def _paired_ratio(runs: list[dict[str, Any]], floor_runs: list[dict[str, Any]], key: str) -> float:
    """Return the median of the run-by-run ratios (each run next to the floor's run of the same round)."""
    pairs = zip(runs, floor_runs, strict=False)
    return statistics.median(float(r[key]) / float(f[key]) for r, f in pairs if float(f[key]))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--job-seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=4.0, help="poll interval (s) of every trigger")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument("--profile", help="write a cProfile of each child's wait to this file")
    parser.add_argument(
        "--together",
        action="store_true",
        help="run the variants of one round at the same time (each its own triggers), not one after another",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--warm-job", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=600.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args)
        return
    from benchmarks._common import airflow_home, notes, table

    setup = Setup(args.triggers, args.job_seconds, args.interval)
    with airflow_home():
        rows = run(setup, args.runs, args.variants.split(","), profile=args.profile, together=args.together)
    print(table(rows))
    print(notes(rows))


if __name__ == "__main__":
    main()
