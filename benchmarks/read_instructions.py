"""
Instructions per awaited status read (``GET /jobs/{id}/details``): the async hook against bare httpx,
counted by valgrind's callgrind, so a busy machine does not move the figures (issue #45).

    python -m benchmarks.read_instructions [--tasks 10] [--reads 20] [--variants raw,hook]

The emulator runs in its own process. One child runs under ``valgrind --tool=callgrind`` with
instrumentation off; for each variant it opens ``--tasks`` clients (``raw``: one ``httpx.AsyncClient``
each, as the fan-in's floor) or hooks (``hook``: the provider's, sharing the loop's client), warms them
up, then reads ``--reads`` times each, instrumented alone (``callgrind_control``), the garbage collector
off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

VARIANTS = ("raw", "hook")


def _child(url: str, token: str, jobs: list[str], variants: list[str], reads: int) -> None:
    """Each variant: open, warm up, READY, wait for a line, read (measured), DONE, wait for a line."""
    os.environ["AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"] = json.dumps(
        {"conn_type": "workflowsvc", "host": url, "password": token}
    )
    import httpx

    from airflow_provider_workflowsvc.hooks import _pool
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook

    _pool.LANE_TIME_LIMIT = 600.0  # valgrind runs a read ~50x slower: none may move to the overflow
    ssl_context = httpx.create_ssl_context()

    async def read(user: Any, job: str, count: int) -> None:
        for _ in range(count):
            if isinstance(user, httpx.AsyncClient):
                assert (await user.get(f"jobs/{job}/details")).json()["processing_status"]
            else:
                assert (await user.get_job_details(job)).processing_status

    async def phase(variant: str) -> None:
        headers = {"authorization": f"Bearer {token}", "accept": "application/json"}
        async with contextlib.AsyncExitStack() as stack:
            users = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=url + "/", headers=headers, timeout=60, verify=ssl_context)
                    if variant == "raw"
                    else WorkflowServiceAsyncHook()
                )
                for _ in jobs
            ]
            await asyncio.gather(*(read(u, j, 3) for u, j in zip(users, jobs, strict=True)))
            gc.collect()
            gc.disable()
            for marker in ("READY", "DONE"):
                if marker == "DONE":
                    await asyncio.gather(*(read(u, j, reads) for u, j in zip(users, jobs, strict=True)))
                print(marker, flush=True)
                await asyncio.to_thread(sys.stdin.readline)
            gc.enable()

    for variant in variants:
        asyncio.run(phase(variant))


def run(tasks: int, reads: int, variants: list[str]) -> dict[str, float]:
    """Return the instructions per read of each variant."""
    from benchmarks._common import airflow_home, child_env
    from benchmarks._service import emulator, make_jobs

    counts: dict[str, float] = {}
    with airflow_home(), emulator() as emu, tempfile.TemporaryDirectory(prefix="wfsvc-callgrind-") as tmp:
        jobs = make_jobs(emu, tasks, 3600.0, concurrency=16)  # running for the whole count
        out = os.path.join(tmp, "callgrind.out")
        spec = json.dumps([emu.base_url, emu.token, jobs, variants, reads])
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}.%p"]
        proc = subprocess.Popen(
            [*command, sys.executable, "-m", "benchmarks.read_instructions", "--child", spec],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=child_env(),
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        for variant in variants:
            steps = (("READY", [["-i", "on"], ["-z"]]), ("DONE", [["-d", variant], ["-i", "off"]]))
            for marker, control in steps:
                line = proc.stdout.readline().strip()
                if line != marker:
                    proc.kill()
                    raise RuntimeError(f"the callgrind child said {line!r}, expected {marker}")
                for args in control:
                    subprocess.run(
                        ["callgrind_control", *args, str(proc.pid)], check=True, capture_output=True
                    )
                proc.stdin.write("go\n")
                proc.stdin.flush()
        proc.wait(timeout=600)
        for path in glob.glob(out + ".*"):
            with open(path) as fh:
                text = fh.read()
            dumped = re.search(r"^desc: Trigger: dump (\S+)$", text, re.M)
            total = re.search(r"^summary: (\d+)$", text, re.M)
            if dumped and total and dumped.group(1) in variants:
                counts[dumped.group(1)] = int(total.group(1)) / (tasks * reads)
    return {variant: counts[variant] for variant in variants}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*json.loads(args.child))
        return
    counts = run(args.tasks, args.reads, args.variants.split(","))
    floor = counts.get("raw")
    print(f"| variant | instructions per read ({args.tasks} tasks x {args.reads} reads) | / raw |")
    print("|---|---|---|")
    for name, count in counts.items():
        print(f"| {name} | {count:,.0f} | {f'{count / floor:.2f}x' if floor else ''} |")


if __name__ == "__main__":
    main()
