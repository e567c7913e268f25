"""
The failover benchmark's probe of Airflow's "blocked event loop" warnings (never part of the provider).

``benchmarks/bench_failover.py`` puts this folder on the triggerers' ``PYTHONPATH`` and names a folder
in ``WFSVC_LOOP_PROBE_DIR``; Python imports this module at start-up. When the triggerer imports
``airflow.jobs.triggerer_job_runner``, ``TriggerRunner.block_watchdog`` is replaced by the same loop
(the same 0.1 s sleep, the same warning and metric) that also records, for each interval over the
threshold, one JSON line in ``loop-PID.jsonl``:

* ``wall``: the interval, as Airflow measures it;
* ``cpu``: the loop thread's own CPU time over it (``time.thread_time()``, read in the loop thread);
* ``runq``: the time the loop thread was runnable but not running (``/proc/thread-self/schedstat``):
  the OS ran other processes;
* ``stacks``: the loop thread's innermost frames, sampled every 50 ms from another thread while the
  interval was overdue (what ran, or ``select`` when the loop was idle and only waiting to be woken).

A block whose ``cpu`` is most of ``wall`` is code holding the loop; one whose ``runq`` is most of it is
the machine's load.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

TARGET = "airflow.jobs.triggerer_job_runner"
SAMPLE_EVERY = 0.05
FRAMES = 8


def _schedstat() -> tuple[float, float]:
    """Return the calling thread's (CPU s, run-queue wait s) from the kernel's scheduler statistics."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            cpu, wait, _ = f.read().split()
        return int(cpu) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def _stack(frame: Any) -> str:
    """
    Return the loop thread's stack, innermost first: its innermost ``FRAMES`` frames that are not
    the import machinery's, down to the event loop's callback (``asyncio/events.py``), then the
    innermost frame of the provider and of Airflow below those.
    """
    kept: list[str] = []
    owners: dict[str, str] = {}
    while frame is not None:
        path = frame.f_code.co_filename
        if path.endswith("asyncio/events.py"):
            break
        if not path.startswith("<frozen"):
            if "site-packages/" in path:
                path = path.split("site-packages/", 1)[1]
            elif "/lib/python3" in path:  # the standard library
                path = path.split("/lib/python3", 1)[1].partition("/")[2]
            line = f"{path}:{frame.f_lineno} {frame.f_code.co_name}"
            if len(kept) < FRAMES:
                kept.append(line)
            else:
                for owner in ("airflow_provider_workflowsvc/", "airflow/"):
                    if owner in path and owner not in owners:
                        owners[owner] = line
        frame = frame.f_back
    return " <- ".join([*kept, *owners.values()])


class Probe:
    """One triggerer's records: the loop thread's interval, its CPU and run-queue wait, its stacks."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, f"loop-{os.getpid()}.jsonl")
        self.component = os.environ.get("WORKFLOWSVC_COMPONENT_HOST", "")
        self.loop_thread = threading.get_ident()
        self.started = 0.0
        self.stacks: Counter[str] = Counter()
        self._lock = threading.Lock()
        threading.Thread(target=self._sample, name="loop-probe", daemon=True).start()

    def begin(self) -> tuple[float, float, float, float]:
        with self._lock:
            self.stacks = Counter()
            self.started = time.monotonic()
        return self.started, time.thread_time(), *_schedstat()

    def end(self, mark: tuple[float, float, float, float]) -> dict[str, Any]:
        wall = time.monotonic() - mark[0]
        cpu = time.thread_time() - mark[1]
        _, wait = _schedstat()
        with self._lock:
            self.started, stacks = 0.0, self.stacks
        return {
            "t": time.time(),
            "component": self.component,
            "pid": os.getpid(),
            "wall": round(wall, 4),
            "cpu": round(cpu, 4),
            "runq": round(wait - mark[3], 4),
            "stacks": dict(stacks.most_common(3)),
        }

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def _sample(self) -> None:
        while True:
            time.sleep(SAMPLE_EVERY)
            with self._lock:
                overdue = self.started and time.monotonic() - self.started > 0.1 + SAMPLE_EVERY
                if overdue:
                    frame = sys._current_frames().get(self.loop_thread)
                    if frame is not None:
                        self.stacks[_stack(frame)] += 1


def _patch(module: Any) -> None:
    import asyncio

    folder = os.environ["WFSVC_LOOP_PROBE_DIR"]
    stats = module.stats

    async def block_watchdog(self: Any) -> None:
        """Airflow's watchdog (triggerer_job_runner), recording each over-threshold interval."""
        probe = Probe(folder)
        while not self.stop:
            mark = probe.begin()
            await asyncio.sleep(0.1)
            record = probe.end(mark)
            if record["wall"] > self.blocked_main_thread_warning_threshold:
                probe.write(record)
                await self.log.ainfo(
                    "Triggerer's async thread was blocked for %.2f seconds, "
                    "exceeding the configured warning threshold of %.2f seconds. "
                    "This is likely caused by a badly-written trigger. "
                    "Set PYTHONASYNCIODEBUG=1 to get more information on overrunning coroutines.",
                    record["wall"],
                    self.blocked_main_thread_warning_threshold,
                )
                stats.incr("triggers.blocked_main_thread")

    module.TriggerRunner.block_watchdog = block_watchdog


class _Finder(importlib.abc.MetaPathFinder):
    """Patch ``TARGET`` right after it is executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("WFSVC_LOOP_PROBE_DIR"):
    sys.meta_path.insert(0, _Finder())
