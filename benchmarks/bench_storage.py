"""
Object storage (issue #35): 1 GiB of inputs streamed from S3 into a run, and a 1 GiB output streamed
into S3, each against the same bytes on local disk.

Each transfer runs in a fresh child process. Its figures: the peak RSS growth over the RSS it had once
its imports were done and its filesystem open (``VmHWM`` reset to ``VmRSS`` just before the transfer),
and its wall time. The S3 store is moto's server mode on loopback (``scripts/s3_server.py``), reached
as a deployment reaches S3: ``ObjectStoragePath`` with an Airflow ``aws`` connection (endpoint_url in
its extra), the Amazon provider's s3 filesystem (s3fs).

* Upload: the task's own path, ``resolve_named_files(location)`` then
  ``WorkflowServiceHook.run_workflow(workflow_id, files=...)``, to the emulator's run route (multipart,
  ``.bin`` files the emulator does not partition): from ``s3://bucket/in/`` (the objects streamed in
  ``storage.READ_BLOCK`` reads) and from a local directory holding the same files.
* The store alone, the reference for what S3 itself costs here: the same objects read through the same
  filesystem (64 KiB reads, ``READ_BLOCK`` blocks) into nothing (``s3-read``), and the same bytes
  written and copied to a name (``s3-write``), without the service.
* Download: the download operator's path (``output_folder`` → staging → ``download_job_output`` →
  ``publish``) of a 1 GiB output from ``benchmarks/_download_server.py``, into ``s3://bucket/out/``
  (``storage.WRITE_BLOCK`` parts, then the server-side copy to its name) and into a local directory.

Runs alternate the order (ABBA) so a slow moment does not always hit the same variant.

    python -m benchmarks.bench_storage [--size-mib 1024] [--files 8] [--runs 4]
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import (
    MIB,
    Row,
    child_env,
    proc_status_kib,
    reset_peak_rss,
    run_child,
    transfer_arguments,
)

KINDS = ("s3-upload", "local-upload", "s3-read", "s3-download", "local-download", "s3-write")
CONN_ID = "bench_s3"
BUCKET = "wfsvc-bench"


# --------------------------------------------------------------------------------------------------
# Child: one transfer


def _child(kind: str, spec: dict[str, Any]) -> None:
    from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files
    from airflow_provider_workflowsvc._tasks.outputs import output_folder
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
    from benchmarks._common import emit

    settings = ConnectionSettings(base_url=spec["base_url"], token=spec["token"], timeout=900)
    hook = WorkflowServiceHook(settings=settings)
    if kind.startswith("s3"):
        from airflow_provider_workflowsvc import storage

        storage.location(f"s3://{BUCKET}/", CONN_ID, "files")  # the filesystem open before the figures
    gc.collect()
    reset_peak_rss()
    base_kib = proc_status_kib("VmRSS")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if kind in ("s3-read", "s3-write"):
        detail = _store_alone(kind, spec)
    elif kind.endswith("upload"):
        files = resolve_named_files(spec["source"], conn_id=CONN_ID)
        job = hook.run_workflow(spec["workflow_id"], files=files)
        detail = f"{len(files)} files, job {job.id if job else None}"
    else:
        folder = output_folder(spec["target"], CONN_ID)
        folder.create()
        staging = folder.staging()
        try:
            hook.download_job_output("bench-job", "file-1", "node-1", path=staging)
            detail = folder.publish(staging, "output.json")
        finally:
            folder.discard(staging)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    peak_kib = proc_status_kib("VmHWM")
    emit({"wall_s": wall, "cpu_s": cpu, "base_kib": base_kib, "peak_kib": peak_kib, "detail": detail})


def _store_alone(kind: str, spec: dict[str, Any]) -> str:
    """Read the input objects, or write one output and copy it to its name, with nothing else."""
    from airflow_provider_workflowsvc import storage

    root = storage.location(f"s3://{BUCKET}/", CONN_ID, "files")
    fs = root.fs
    if kind == "s3-read":
        total = 0
        for key in sorted(fs.find(f"{BUCKET}/in")):
            with fs.open(key, "rb", block_size=storage.READ_BLOCK) as fh:
                while chunk := fh.read(64 * 1024):
                    total += len(chunk)
        return f"{total} bytes read"
    chunk, left = os.urandom(64 * 1024), spec["size"]
    staging = f"{BUCKET}/out/alone/.staging"
    with fs.open(staging, "wb", block_size=storage.WRITE_BLOCK) as fh:
        while left > 0:
            left -= fh.write(chunk[: min(left, len(chunk))])
    fs.mv(staging, f"{BUCKET}/out/alone/output.json")
    fs.rm_file(f"{BUCKET}/out/alone/output.json")
    return f"{spec['size']} bytes written and copied"


# --------------------------------------------------------------------------------------------------
# Parent


def _order(index: int) -> tuple[str, ...]:
    """S3 first in even runs, local first in odd ones (ABBA)."""
    if index % 2 == 0:
        return KINDS
    return ("s3-read", "local-upload", "s3-upload", "s3-write", "local-download", "s3-download")


def run(
    size: int = 1024 * MIB, files: int = 8, runs: int = 4, log: bool = True, work_dir: str | None = None
) -> list[Row]:
    from benchmarks._service import emulator, hook_for, local_workflow, scratch_dir
    from benchmarks.bench_streaming import _download_server, _write_inputs
    from scripts.s3_server import running_s3_server

    results: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    with contextlib.ExitStack() as stack:
        emu = stack.enter_context(emulator())
        with hook_for(emu) as hook:
            workflow_id = local_workflow(hook, "bench-storage")
        s3 = stack.enter_context(running_s3_server())
        tmp = stack.enter_context(scratch_dir("wfsvc-bench-storage-", work_dir))
        (tmp / "in").mkdir()
        inputs = _write_inputs(tmp / "in", size, files)
        s3.put_tree(BUCKET, {f"in/{Path(p).name}": Path(p).read_bytes() for p in inputs})
        download_url = stack.enter_context(_download_server(size))
        env = child_env(s3.connection_env(CONN_ID))
        for index in range(runs):
            for kind in _order(index):
                upload = kind.endswith("upload") or kind == "s3-read"
                local_out = tmp / "out"
                spec = {
                    "base_url": emu.base_url if upload else download_url,
                    "token": emu.token,
                    "workflow_id": workflow_id,
                    "source": f"s3://{BUCKET}/in/" if kind.startswith("s3") else str(tmp / "in"),
                    "target": f"s3://{BUCKET}/out/{index}" if kind.startswith("s3") else str(local_out),
                    "size": size,
                }
                os.sync()  # the previous transfer's dirty pages are written back now, not during this one
                result = run_child(
                    ["-m", "benchmarks.bench_storage", "--child", kind, "--spec", json.dumps(spec)],
                    env=env,
                    timeout=1800,
                )
                if kind.endswith("download"):
                    _check_download(kind, size, s3, index, local_out)
                emu.clear_requests()
                results[kind].append(result)
                if log:
                    print(
                        f"  storage run {index + 1}/{runs} {kind}: "
                        f"{size / MIB / result['wall_s']:.0f} MiB/s, "
                        f"RSS growth {(result['peak_kib'] - result['base_kib']) / 1024:.1f} MiB "
                        f"(from {result['base_kib'] / 1024:.0f} MiB), CPU {result['cpu_s']:.1f} s",
                        flush=True,
                    )
    return _rows(results, size, files)


def _check_download(kind: str, size: int, s3: Any, index: int, local_out: Path) -> None:
    """Check the output is whole where it was written (and only there); then remove it."""
    if kind.startswith("s3"):
        keys = s3.keys(BUCKET, f"out/{index}/")
        if keys != {f"out/{index}/output.json": size}:
            raise RuntimeError(f"{kind} left {keys} in the bucket, expected one object of {size} bytes")
        s3.client().delete_object(Bucket=BUCKET, Key=f"out/{index}/output.json")
        return
    written = sorted(local_out.iterdir())
    if [p.name for p in written] != ["output.json"] or written[0].stat().st_size != size:
        raise RuntimeError(f"{kind} left {written} in {local_out}, expected output.json of {size} bytes")
    written[0].unlink()


def _rows(results: dict[str, list[dict[str, Any]]], size: int, files: int) -> list[Row]:
    section = "storage"
    rows: list[Row] = []
    for direction in ("upload", "download"):
        s3, local = results[f"s3-{direction}"], results[f"local-{direction}"]
        growth = [(r["peak_kib"] - r["base_kib"]) / 1024 for r in s3]
        local_growth = [(r["peak_kib"] - r["base_kib"]) / 1024 for r in local]
        ratio = [a["wall_s"] / b["wall_s"] for a, b in zip(s3, local, strict=True)]
        alone = results["s3-read" if direction == "upload" else "s3-write"]
        over_store = [a["wall_s"] / b["wall_s"] for a, b in zip(s3, alone, strict=True)]
        what = (
            f"{size / MIB:.0f} MiB in {files} objects from S3 into the emulator's run route"
            if direction == "upload"
            else f"one {size / MIB:.0f} MiB output from the benchmark download server into S3"
        )
        rows += [
            Row(
                section,
                f"{direction}: peak RSS growth of the task process (S3)",
                growth,
                "MiB",
                reference=f"local disk: {statistics.median(local_growth):.1f} MiB",
                note=f"{what}; RSS before the transfer {_median_mib(s3, 'base_kib'):.0f} MiB",
            ),
            Row(
                section,
                f"{direction}: wall time S3 / local disk (per alternating pair)",
                ratio,
                "ratio",
                reference=(
                    f"S3 {statistics.median(r['wall_s'] for r in s3):.1f} s "
                    f"({statistics.median(size / MIB / r['wall_s'] for r in s3):.0f} MiB/s), local "
                    f"{statistics.median(r['wall_s'] for r in local):.1f} s "
                    f"({statistics.median(size / MIB / r['wall_s'] for r in local):.0f} MiB/s)"
                ),
                note=(
                    f"client CPU {statistics.median(r['cpu_s'] for r in s3):.1f} s (S3) vs "
                    f"{statistics.median(r['cpu_s'] for r in local):.1f} s (local)"
                ),
            ),
            Row(
                section,
                f"{direction}: wall time S3 / the store alone (same run)",
                over_store,
                "ratio",
                reference=(
                    f"the store alone ({'reading' if direction == 'upload' else 'writing, copying'}): "
                    f"{statistics.median(r['wall_s'] for r in alone):.1f} s, RSS growth "
                    f"{statistics.median((r['peak_kib'] - r['base_kib']) / 1024 for r in alone):.1f} MiB"
                ),
            ),
        ]
    return rows


def _median_mib(results: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in results)) / 1024


def main(argv: Sequence[str] | None = None) -> None:
    args = transfer_arguments(argv, __doc__, KINDS, "objects")
    if args.child:
        _child(args.child, json.loads(args.spec))
        return
    from benchmarks._common import airflow_home, machine, notes, table

    with airflow_home():
        rows = run(args.size_mib * MIB, args.files, args.runs, work_dir=args.work_dir)
    print(json.dumps(machine()))
    print(table(rows))
    print(notes(rows))


if __name__ == "__main__":
    sys.exit(main())
