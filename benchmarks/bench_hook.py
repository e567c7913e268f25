"""Hook overhead: ``get_job`` through the sync hook against raw ``httpx.Client`` on the same emulator route.

Both send ``GET /api/v1/jobs/{id}`` one after the other over one keep-alive connection, to the emulator
in its own process. Raw means ``client.get(...)``, ``raise_for_status()`` and ``.json()``: the least
any caller does. The hook adds building the call, retries (tenacity), redirect handling, error mapping
and validating the answer into a ``Job`` model. Trials alternate (raw, hook, hook, raw, raw, hook, ...) so
noise hits both; the figure is the median of the per-pair ratios hook/raw of requests per second. This
process's CPU time per request is reported too (the emulator's is not in it).

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
    """Requests per second and CPU ms per request of ``call`` repeated for about ``seconds``."""
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

        def hook_get() -> Any:
            return hook.get_job(job_id)

        assert str(hook_get().id) == raw_get()["id"]
        _trial(raw_get, 0.3)  # warm-up: connections, caches, validators
        _trial(hook_get, 0.3)
        raw_rps, hook_rps, raw_cpu, hook_cpu = [], [], [], []
        for index in range(runs):
            emu.clear_requests()  # keep the emulator's request log (a bounded deque) small
            pair = {}
            for name in ("raw", "hook") if index % 2 == 0 else ("hook", "raw"):  # ABBA order
                pair[name] = _trial(raw_get if name == "raw" else hook_get, seconds)
            raw_rps.append(pair["raw"][0])
            raw_cpu.append(pair["raw"][1])
            hook_rps.append(pair["hook"][0])
            hook_cpu.append(pair["hook"][1])
            if log:
                print(
                    f"  hook run {index + 1}/{runs}: raw {raw_rps[-1]:.0f} req/s, hook {hook_rps[-1]:.0f} "
                    f"req/s ({hook_rps[-1] / raw_rps[-1]:.2f}); CPU/request raw {raw_cpu[-1]:.3f} ms, "
                    f"hook {hook_cpu[-1]:.3f} ms",
                    flush=True,
                )
    ratios = [h / r for h, r in zip(hook_rps, raw_rps, strict=True)]
    extra_cpu = statistics.median(hook_cpu) - statistics.median(raw_cpu)
    section = "3 hook overhead"
    return [
        Row(
            section,
            "get_job requests/s: sync hook / raw httpx.Client (per alternating pair)",
            ratios,
            "ratio",
            target=f"≥ {TARGET_RATIO:.2f}",
            met=statistics.median(ratios) >= TARGET_RATIO,
            reference=f"raw {statistics.median(raw_rps):,.0f} req/s; hook {statistics.median(hook_rps):,.0f}",
            note=(
                f"{runs} pairs of {seconds:g} s trials, one keep-alive connection each, emulator in its own "
                f"process; client CPU per request: raw {statistics.median(raw_cpu):.3f} ms, hook "
                f"{statistics.median(hook_cpu):.3f} ms (+{extra_cpu:.3f} ms: call building, tenacity, "
                "Job validation)"
            ),
        ),
        Row(section, "get_job requests/s - raw httpx.Client (the limit)", raw_rps, "req/s"),
        Row(section, "get_job requests/s - sync hook", hook_rps, "req/s"),
        Row(section, "client CPU per get_job - raw httpx.Client", raw_cpu, "ms"),
        Row(
            section,
            "client CPU per get_job - sync hook",
            hook_cpu,
            "ms",
            reference=f"raw x{statistics.median(hook_cpu) / statistics.median(raw_cpu):.2f}",
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
