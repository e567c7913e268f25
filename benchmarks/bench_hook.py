"""
Hook overhead: ``get_job`` through the sync hook against raw ``httpx.Client`` on the same emulator route.

Both send ``GET /api/v1/jobs/{id}`` one after the other over one keep-alive connection, to the emulator
in its own process. Raw means ``client.get(...)``, ``raise_for_status()`` and ``.json()``: the least
any caller does. The hook adds building the call, redirect handling, error mapping, validating the
answer into a ``Job`` model and, only once an attempt has failed, retries (tenacity). Trials alternate
in ABBA order (raw, hook, hook, raw, ...) so noise hits both. The figure is the median of the per-round
ratios hook/raw of requests per second. This process's CPU time per request is reported too (the
emulator's is not in it).

    python -m benchmarks.bench_hook [--runs 7] [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from benchmarks._common import Row

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle

TARGET_RATIO = 0.90


def _trial(call: Callable[[], Any], seconds: float) -> tuple[float, float]:
    """Measure requests per second and CPU ms per request of ``call`` repeated for about ``seconds``."""
    count = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    ends = wall0 + seconds
    while True:
        for _ in range(20):
            call()
        count += 20
        if time.perf_counter() >= ends:
            break
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return count / wall, cpu / count * 1000


ARMS = ("raw", "hook")


def run(
    runs: int = 7, seconds: float = 1.5, emu: EmulatorHandle | None = None, log: bool = True
) -> list[Row]:
    import contextlib

    import httpx

    from benchmarks._service import emulator, hook_for, make_jobs

    with contextlib.ExitStack() as stack:
        if emu is None:
            emu = stack.enter_context(emulator())
        emu.reset()
        job_id = make_jobs(emu, 1, 30.0)[0]
        hook = stack.enter_context(hook_for(emu))
        headers = {"authorization": f"Bearer {emu.token}", "accept": "application/json"}
        raw = stack.enter_context(httpx.Client(base_url=emu.base_url + "/", headers=headers, timeout=60))

        def raw_get() -> Any:
            response = raw.get(f"jobs/{job_id}")
            response.raise_for_status()
            return response.json()

        calls: dict[str, Callable[[], Any]] = {
            "raw": raw_get,
            "hook": lambda: hook.get_job(job_id),
        }
        assert str(calls["hook"]().id) == raw_get()["id"]
        for call in calls.values():
            _trial(call, 0.3)  # warm-up: connections, caches, validators
        rps: dict[str, list[float]] = {arm: [] for arm in ARMS}
        cpu: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for index in range(runs):
            emu.clear_requests()  # keep the emulator's request log (a bounded deque) small
            for arm in ARMS if index % 2 == 0 else ARMS[::-1]:  # ABBA order
                arm_rps, arm_cpu = _trial(calls[arm], seconds)
                rps[arm].append(arm_rps)
                cpu[arm].append(arm_cpu)
            if log:
                print(
                    f"  hook run {index + 1}/{runs}: "
                    + ", ".join(f"{arm} {rps[arm][-1]:.0f} req/s {cpu[arm][-1]:.3f} ms CPU" for arm in ARMS)
                    + f" (hook/raw {rps['hook'][-1] / rps['raw'][-1]:.2f})",
                    flush=True,
                )
    return _rows(rps, cpu, runs, seconds)


def _rows(rps: dict[str, list[float]], cpu: dict[str, list[float]], runs: int, seconds: float) -> list[Row]:
    def median(values: list[float]) -> float:
        return statistics.median(values)

    ratios = [h / r for h, r in zip(rps["hook"], rps["raw"], strict=True)]
    extra_cpu = median(cpu["hook"]) - median(cpu["raw"])
    section = "3 hook overhead"
    return [
        Row(
            section,
            "get_job requests/s: sync hook / raw httpx.Client (per round)",
            ratios,
            "ratio",
            target=f"≥ {TARGET_RATIO:.2f}",
            met=median(ratios) >= TARGET_RATIO,
            reference=f"raw {median(rps['raw']):,.0f} req/s; hook {median(rps['hook']):,.0f}",
            note=(
                f"{runs} rounds of {seconds:g} s trials, one keep-alive connection each, emulator in its own "
                f"process; client CPU per request: raw {median(cpu['raw']):.3f} ms, hook "
                f"{median(cpu['hook']):.3f} ms (+{extra_cpu:.3f} ms: call building, error mapping, "
                f"Job validation)"
            ),
        ),
        Row(section, "get_job requests/s - raw httpx.Client (the limit)", rps["raw"], "req/s"),
        Row(section, "get_job requests/s - sync hook", rps["hook"], "req/s"),
        Row(section, "client CPU per get_job - raw httpx.Client", cpu["raw"], "ms"),
        Row(
            section,
            "client CPU per get_job - sync hook",
            cpu["hook"],
            "ms",
            reference=f"raw x{median(cpu['hook']) / median(cpu['raw']):.2f}",
        ),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks._common import airflow_home, notes, table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.5, help="length of one trial")
    args = parser.parse_args(argv)
    with airflow_home():
        rows = run(args.runs, args.seconds)
    print(table(rows))
    print(notes(rows))


if __name__ == "__main__":
    main()
