"""
Streaming: upload 1 GiB of local files through ``run_workflow`` and download an output of 1 GiB.

Each transfer runs in a fresh child process whose peak RSS (``ru_maxrss``) is the figure: the client
must stream, never hold a file in memory. Beside each hook transfer, the same transfer with raw httpx
to the same server (in the same run, alternating) is the throughput reference.

* Upload: ``WorkflowServiceHook.run_workflow(workflow_id, files=[...])`` to the emulator's real run route
  (``POST /workflows/{id}/run``, multipart, one ``input_files`` part per file) of a workflow with a local
  source. The files are ``.bin``, a type the emulator does not partition (each fails at once with
  "unsupported file type"), so its work per byte is only parsing the multipart body. Raw reference:
  ``httpx.Client.post(..., files=[(name, open file)])``, the same streamed multipart body.
* Download: ``download_job_output(..., path=...)`` from ``benchmarks/_download_server.py``, a
  benchmark-only server that streams a JSON output of the requested size on the download route (the
  emulator answers each output in one piece from SQLite and cannot make a 1 GiB one cheaply). Raw
  reference: ``httpx.Client.stream("GET", ...)`` written to a file chunk by chunk.

The input files are written to a temporary directory and deleted at the end, like every download.

    python -m benchmarks.bench_streaming [--size-mib 1024] [--files 8] [--runs 4]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._common import MIB, Row, child_env, proc_status_kib, run_child, transfer_arguments

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle

TARGET_RSS_MIB = 150.0
KINDS = ("hook-upload", "raw-upload", "hook-download", "raw-download")


# --------------------------------------------------------------------------------------------------
# Child: one transfer


def _child(args: argparse.Namespace) -> None:
    from benchmarks._common import emit, max_rss_kib

    spec = json.loads(args.spec)
    hook: Any = None
    if args.kind.startswith("hook"):
        from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

        settings = ConnectionSettings(base_url=spec["base_url"], token=spec["token"], timeout=600)
        hook = WorkflowServiceHook(settings=settings)
    else:
        import httpx
    gc.collect()
    base_kib = proc_status_kib("VmRSS")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if args.kind == "hook-upload":
        job = hook.run_workflow(spec["workflow_id"], files=spec["files"])
        detail = f"job {job.id if job else None}"
    elif args.kind == "hook-download":
        path = hook.download_job_output("bench-job", "file-1", "node-1", path=spec["out"])
        detail = str(path)
    else:
        headers = {"authorization": f"Bearer {spec['token']}"}
        with httpx.Client(base_url=spec["base_url"] + "/", headers=headers, timeout=600) as client:
            if args.kind == "raw-upload":
                with contextlib.ExitStack() as stack:
                    parts = [
                        (
                            "input_files",
                            (Path(p).name, stack.enter_context(open(p, "rb")), "application/octet-stream"),
                        )
                        for p in spec["files"]
                    ]
                    response = client.post(f"workflows/{spec['workflow_id']}/run", files=parts)
                    response.raise_for_status()
                detail = f"job {response.json().get('id')}"
            else:
                params = {"file_id": "file-1", "node_id": "node-1"}
                with client.stream("GET", "jobs/bench-job/download", params=params) as response:
                    response.raise_for_status()
                    with open(spec["out"], "wb") as fh:
                        for chunk in response.iter_bytes():
                            fh.write(chunk)
                detail = spec["out"]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec, so in a
    # child it is at least the parent's RSS at fork time; VmHWM belongs to the child's own memory.
    peak_kib = proc_status_kib("VmHWM")
    result = {"wall_s": wall, "cpu_s": cpu, "base_kib": base_kib, "peak_kib": peak_kib, "detail": detail}
    emit({**result, "ru_maxrss_kib": max_rss_kib()})


# --------------------------------------------------------------------------------------------------
# Parent


def _write_inputs(directory: Path, total: int, count: int) -> list[str]:
    """``count`` ``.bin`` files of ``total`` bytes together (a random 1 MiB block, repeated)."""
    block = os.urandom(MIB)
    paths = []
    for index in range(count):
        size = total // count + (1 if index < total % count else 0)
        path = directory / f"part-{index:02d}.bin"
        with path.open("wb") as fh:
            while size > 0:
                piece = block[: min(size, len(block))]
                fh.write(piece)
                size -= len(piece)
        paths.append(str(path))
    return paths


def _order(index: int) -> tuple[str, ...]:
    """
    Return the order of run ``index``: hook first in even runs, raw first in odd ones (ABBA).

    So a slow moment of a noisy machine, or disk writeback after the uploads, does not always hit the
    same one.
    """
    if index % 2 == 0:
        return KINDS
    return ("raw-upload", "hook-upload", "raw-download", "hook-download")


@contextlib.contextmanager
def _download_server(size: int) -> Iterator[str]:
    """Run the benchmark download server (a subprocess of ours, stopped by its PID); its base URL."""
    from airflow_provider_workflowsvc.emulator.testing import stop_process

    command = [sys.executable, "-m", "benchmarks._download_server", "--size", str(size)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=child_env()) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "listening on " not in line:
                raise RuntimeError(f"the download server did not start (exit {proc.poll()})")
            yield line.split("listening on ", 1)[1].strip()
        finally:
            stop_process(proc)


def run(
    size: int = 1024 * MIB,
    files: int = 8,
    runs: int = 4,
    emu: EmulatorHandle | None = None,
    log: bool = True,
    work_dir: str | None = None,
) -> list[Row]:
    from benchmarks._service import emulator, hook_for, local_workflow, scratch_dir

    results: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    with contextlib.ExitStack() as stack:
        if emu is None:
            emu = stack.enter_context(emulator())
        emu.reset()
        with hook_for(emu) as hook:
            workflow_id = local_workflow(hook, "bench-upload")
        tmp = stack.enter_context(scratch_dir("wfsvc-bench-stream-", work_dir))
        (tmp / "in").mkdir()
        inputs = _write_inputs(tmp / "in", size, files)
        download_url = stack.enter_context(_download_server(size))
        out = tmp / "download.json"
        for index in range(runs):
            for kind in _order(index):
                upload = kind.endswith("upload")
                spec = {
                    "base_url": emu.base_url if upload else download_url,
                    "token": emu.token,
                    "workflow_id": workflow_id,
                    "files": inputs,
                    "out": str(out),
                }
                os.sync()  # the previous transfer's dirty pages are written back now, not during this one
                result = run_child(
                    ["-m", "benchmarks.bench_streaming", "--child", kind, "--spec", json.dumps(spec)],
                    timeout=900,
                )
                if not upload:
                    got = out.stat().st_size
                    out.unlink()
                    if got != size:
                        raise RuntimeError(f"{kind} wrote {got} bytes, expected {size}")
                emu.clear_requests()
                results[kind].append(result)
                if log:
                    print(
                        f"  streaming run {index + 1}/{runs} {kind}: "
                        f"{size / MIB / result['wall_s']:.0f} MiB/s, "
                        f"peak RSS {result['peak_kib'] / 1024:.0f} MiB (after imports "
                        f"{result['base_kib'] / 1024:.0f} MiB), CPU {result['cpu_s']:.1f} s",
                        flush=True,
                    )
        server_kib = proc_status_kib("VmHWM", emu.pid) if emu.pid else 0
    rows = _rows(results, size, files)
    if server_kib:
        server = f"the emulator's own peak RSS (server side, not a target): {server_kib / 1024:.0f} MiB"
        rows[0].note += "; " + server
    return rows


def _rows(results: dict[str, list[dict[str, Any]]], size: int, files: int) -> list[Row]:
    section = "4 streaming"
    rows: list[Row] = []
    for direction in ("upload", "download"):
        hook, raw = results[f"hook-{direction}"], results[f"raw-{direction}"]
        hook_peak = [r["peak_kib"] / 1024 for r in hook]
        raw_peak = [r["peak_kib"] / 1024 for r in raw]
        hook_growth = [(r["peak_kib"] - r["base_kib"]) / 1024 for r in hook]
        raw_growth = [(r["peak_kib"] - r["base_kib"]) / 1024 for r in raw]
        hook_base = statistics.median(r["base_kib"] for r in hook) / 1024
        hook_tp = [size / MIB / r["wall_s"] for r in hook]
        raw_tp = [size / MIB / r["wall_s"] for r in raw]
        what = (
            f"{size / MIB:.0f} MiB in {files} files to the emulator's run route"
            if direction == "upload"
            else f"{size / MIB:.0f} MiB JSON output from the benchmark download server"
        )
        rows += [
            Row(
                section,
                f"{direction}: peak RSS of the client process (hook)",
                hook_peak,
                "MiB",
                target=f"≤ {TARGET_RSS_MIB:.0f} MiB",
                met=statistics.median(hook_peak) <= TARGET_RSS_MIB,
                reference=f"raw httpx process: {statistics.median(raw_peak):.0f} MiB",
                note=(
                    f"{what}; growth during the transfer over the RSS after imports: hook "
                    f"{statistics.median(hook_growth):.1f} MiB, raw {statistics.median(raw_growth):.1f} MiB "
                    f"(the hook's process imports Airflow: {hook_base:.0f} MiB before any byte moves); "
                    f"client CPU {statistics.median(r['cpu_s'] for r in hook):.1f} s (hook) vs "
                    f"{statistics.median(r['cpu_s'] for r in raw):.1f} s (raw)"
                ),
            ),
            Row(
                section,
                f"{direction}: throughput hook / raw httpx (per alternating pair)",
                [h / r for h, r in zip(hook_tp, raw_tp, strict=True)],
                "ratio",
                reference=(
                    f"hook {statistics.median(hook_tp):.0f} MiB/s, raw {statistics.median(raw_tp):.0f} MiB/s"
                ),
            ),
        ]
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    args = transfer_arguments(argv, __doc__, KINDS, "files")
    if args.child:
        args.kind = args.child
        _child(args)
        return
    from benchmarks._common import airflow_home, notes, table

    with airflow_home():
        rows = run(args.size_mib * MIB, args.files, args.runs, work_dir=args.work_dir)
    print(table(rows))
    print(notes(rows))


if __name__ == "__main__":
    main()
