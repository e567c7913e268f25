"""
One on-demand run of 95 local files, one of them 11 MB (issue #34), against the emulator with the live
service's documented limits (10 files and 10 MB per job, 1 s between launches, 5 jobs running).

``RunOnDemandJobOperator`` is driven as Airflow drives it, in this process: ``execute`` until it
defers, the trigger run to its one event (the triggerer's part), then ``execute_complete`` (downloads
and the summary). The figures:

* ``fail`` (the default, ``oversized_files="fail"``): what becomes of the run: the task fails before
  any upload, naming the 11 MB file and the limit; jobs launched, and the time to fail;
* ``skip`` (``oversized_files="skip"``, deferrable): jobs launched and the smallest gap between two
  launches (the emulator's request log, its own clock), the most jobs running at once (a listing of
  the service's in-progress jobs every ``--sample`` seconds, beside the run), the worker-slot seconds
  of the task (``execute`` up to the deferral, plus ``execute_complete``: the time a worker is held)
  against the wall-clock time of the whole run, and the outcome of the 11 MB file;
* ``skip, in the worker`` (``deferrable=False``): the same run waited for in the worker, whose
  worker-slot seconds are the whole run: the reference for the deferrable figure.

The emulator runs in its own process (``--processing-delay`` seconds per file per node: a job of 10
files on one node lasts about ``12 x`` that), so its CPU is not ours.

    python -m benchmarks.bench_on_demand [--files 95] [--processing-delay 0.5] [--sample 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks._common import CONN_ENV, airflow_home, conn_json, machine
from benchmarks._service import emulator

BIG_BYTES = 11_000_000
"""The one file over the service's 10 MB (10,000,000 bytes) limit."""


class _TI:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _inputs(folder: Path, count: int) -> Path:
    """``count - 1`` small documents and one of 11 MB, in ``folder``."""
    for i in range(count - 1):
        (folder / f"doc{i:03d}.txt").write_text(f"Report {i}\n\n" + f"Paragraph {i} of the benchmark. " * 20)
    with (folder / "big.txt").open("w") as fh:
        line = "A very long document line that repeats itself until the file is large.\n"
        fh.write(line * (BIG_BYTES // len(line) + 1))
    return folder


class _Running:
    """The most on-demand jobs the service shows in progress at once, sampled beside the run."""

    def __init__(self, emu: Any, every: float) -> None:
        self.emu, self.every, self.most, self.samples = emu, every, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        with self.emu.api_client() as api:
            while not self._stop.is_set():
                listed = api.get("/jobs/", params={"status": "IN_PROGRESS"}).json()
                self.most = max(self.most, sum(job["workflow_name"].startswith("job-") for job in listed))
                self.samples += 1
                self._stop.wait(self.every)

    @contextlib.contextmanager
    def running(self) -> Iterator[_Running]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def _launches(emu: Any) -> tuple[int, int, float | None]:
    """Count launches accepted and refused (429); the smallest gap between two accepted (emulator clock)."""
    launches = [r for r in emu.requests(method="POST") if r["path"] == "/api/v1/jobs/"]
    accepted = sorted(
        datetime.datetime.fromisoformat(r["time"]).timestamp() for r in launches if r["status"] == 200
    )
    gaps = [b - a for a, b in itertools.pairwise(accepted)]
    return len(accepted), sum(r["status"] == 429 for r in launches), round(min(gaps), 3) if gaps else None


def _first_event(trigger: Any) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise RuntimeError("the trigger ended without an event")

    return asyncio.run(run())


def _run(
    emu: Any, folder: Path, out: Path, *, deferrable: bool, sample: float, **options: Any
) -> dict[str, Any]:
    """One task run as Airflow runs it; its figures."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_provider_workflowsvc import RunOnDemandJobOperator

    emu.reset()
    emu.configure(processing_delay=options.pop("processing_delay"))
    task = RunOnDemandJobOperator(
        task_id="parse",
        files=str(folder),
        template_id="hi_res_partition",
        output_dir=str(out),
        poll_interval=1.0,
        deferrable=deferrable,
        **options,
    )
    context = {"ti": _TI(), "task_state_store": None}
    worker = 0.0
    started = time.monotonic()
    outcome: dict[str, Any] = {}
    with _Running(emu, sample).running() as running:
        try:
            begin = time.monotonic()
            try:
                outcome["summary"] = task.execute(context)
            except TaskDeferred as deferred:
                worker += time.monotonic() - begin
                event = _first_event(deferred.trigger)  # the triggerer's part: no worker slot
                begin = time.monotonic()
                outcome["summary"] = task.execute_complete(context, event=event)
            worker += time.monotonic() - begin
        except Exception as exc:
            worker += time.monotonic() - begin
            outcome["error"] = f"{type(exc).__name__}: {exc}"
            outcome["summary"] = getattr(exc, "summary", None) or context["ti"].pushed.get("return_value")
    launched, refused, gap = _launches(emu)
    summary = outcome.get("summary") or {}
    big = next((d for d in summary.get("documents", []) if d["document"] == "big.txt"), None)
    return {
        "jobs_launched": launched,
        "launches_refused_429": refused,
        "smallest_gap_s": gap,
        "most_running": running.most,
        "samples": running.samples,
        "worker_slot_s": round(worker, 2),
        "wall_s": round(time.monotonic() - started, 2),
        "completed": summary.get("completed_count"),
        "documents": summary.get("document_count"),
        "big_file": big or outcome.get("error"),
    }


def measure(files: int, processing_delay: float, sample: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wfsvc-bench-on-demand-") as tmp, airflow_home():
        (Path(tmp) / "in").mkdir()
        folder = _inputs(Path(tmp) / "in", files)
        with emulator(token="bench-token-0d3e", api_key="bench-key-7c21", dialect="platform") as emu:
            os.environ[CONN_ENV] = conn_json(emu.base_url, emu.token, emu.api_key)
            os.environ["AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL"] = "0.1"
            common = {"processing_delay": processing_delay, "sample": sample}
            return {
                "fail": _run(emu, folder, Path(tmp) / "out-fail", deferrable=True, **common),
                "skip": _run(
                    emu, folder, Path(tmp) / "out-skip", deferrable=True, oversized_files="skip", **common
                ),
                "skip, in the worker": _run(
                    emu, folder, Path(tmp) / "out-sync", deferrable=False, oversized_files="skip", **common
                ),
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=95, help="files in the run, one of them 11 MB")
    parser.add_argument("--processing-delay", type=float, default=0.5, help="emulator s per file per node")
    parser.add_argument(
        "--sample", type=float, default=0.1, help="seconds between two listings of running jobs"
    )
    args = parser.parse_args()
    results = measure(args.files, args.processing_delay, args.sample)
    print(json.dumps({"machine": machine(), "date": datetime.date.today().isoformat()}, indent=1))
    figures = (
        "jobs_launched",
        "launches_refused_429",
        "smallest_gap_s",
        "most_running",
        "worker_slot_s",
        "wall_s",
        "completed",
        "documents",
    )
    print(f"\n| case | {' | '.join(figures)} |")
    print("|" + "---|" * (len(figures) + 1))
    for case, row in results.items():
        print(f"| {case} | " + " | ".join(str(row[f]) for f in figures) + " |")
    print()
    for case, row in results.items():
        print(f"{case}: the 11 MB file: {row['big_file']}")
    deferred, in_worker = results["skip"]["worker_slot_s"], results["skip, in the worker"]["worker_slot_s"]
    if in_worker:
        share = deferred / in_worker
        print(f"\nworker-slot seconds, deferrable / in the worker: {deferred} / {in_worker} = {share:.2f}")


if __name__ == "__main__":
    main()
