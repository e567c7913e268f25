"""
Run-identity evidence cost (issue #22): bytes and requests one run reads, at 10, 10,000 and 250,000 past jobs.

The emulator (a subprocess, on a SQLite file) gets one workflow whose history is seeded straight into
its store: copies of one real completed job, created in the past. Then each case sends one run through
the real submit logic (``_tasks.submit.submit``, names marked: what is measured is the search for
the marked job; with the user's own names a lost answer fails closed after the same reads) and counts
every request and every response
body byte the provider reads (an ``httpx`` transport hook; the emulator's own time is not ours):

* ``answered``: the run's answer arrives (the common case);
* ``lost, job active``: the answer is lost after the service created the job (504 after processing),
  the job still running: found among the active jobs (``status`` filter);
* ``lost, job ended``: the same, but the job has ended before the first look (a fast job): the active
  jobs never show it, the ended ones are read once at the end of the grace period (the workflow's
  history: past the body cap that read is inconclusive and the task fails closed);
* ``snapshot (before #22)``: what every run read before, the full job list of the workflow (one
  request; past the body cap the run failed before it was sent).

    python -m benchmarks.bench_evidence [--sizes 10,10000,250000] [--dialect platform]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx

SIZES = (10, 10_000, 250_000)
RUN_ROUTE = r"/workflows/[0-9a-f-]{36}/run$"
log = logging.getLogger("bench_evidence")


class Traffic:
    """Requests sent and response body bytes read by this process (every ``httpx`` client)."""

    def __init__(self) -> None:
        self.requests, self.bytes = 0, 0

    @contextlib.contextmanager
    def counting(self) -> Iterator[Traffic]:
        original = httpx.HTTPTransport.handle_request
        traffic = self

        def handle(transport: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
            response = original(transport, request)
            traffic.requests += 1
            response.stream = _Counted(response.stream, traffic)  # type: ignore[arg-type]
            return response

        with mock.patch.object(httpx.HTTPTransport, "handle_request", handle):
            yield self


class _Counted(httpx.SyncByteStream):
    def __init__(self, inner: Any, traffic: Traffic) -> None:
        self.inner, self.traffic = inner, traffic

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.traffic.bytes += len(chunk)
            yield chunk

    def close(self) -> None:
        self.inner.close()


def seed_history(db: str, workflow_id: str, sample: dict[str, Any], count: int) -> None:
    """Write ``count`` completed past jobs of ``workflow_id`` (copies of ``sample``) into the store."""
    start = time.time() - 86_400 * 365
    rows = []
    for n in range(count):
        job_id = str(uuid.uuid4())
        created = start + n * 60.0
        rows.append(
            (job_id, workflow_id, created, json.dumps({**sample, "id": job_id, "created_at": created}))
        )
    with sqlite3.connect(db) as con:
        con.executemany("INSERT INTO jobs (id, workflow_id, created, data) VALUES (?, ?, ?, ?)", rows)


def one_case(emu: Any, settings: Any, workflow_id: str, path: str, case: str) -> dict[str, Any]:
    """Send one run in ``case``; the traffic it caused and how it ended."""
    from airflow_provider_workflowsvc._tasks import submit as _submit
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    if case == "lost, job active":
        emu.configure(processing_delay=600)
    else:
        emu.configure(processing_delay=0.001)
    if case.startswith("lost"):
        latency = 1.0 if case == "lost, job ended" else 0.0
        emu.set_faults(
            method="POST", path_regex=RUN_ROUTE, errors=[504], latency=latency, phase="after", count=1
        )
    traffic = Traffic()
    started = time.monotonic()
    outcome = "ok"
    with WorkflowServiceHook(settings=settings) as hook, traffic.counting():
        try:
            if case.startswith("snapshot"):
                outcome = f"{len(hook.list_jobs(workflow_id=workflow_id))} jobs listed"
            else:
                sending = _submit.Sending.run(workflow_id)
                job = _submit.submit(hook, sending, [path], log, grace=1.0, sleep=lambda s: None, mark=True)
                outcome = f"job {job.id[:8]}"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {str(exc)[:90]}"
    emu.clear_faults()
    return {
        "case": case,
        "requests": traffic.requests,
        "bytes": traffic.bytes,
        "seconds": round(time.monotonic() - started, 2),
        "outcome": outcome,
    }


CASES = ("answered", "lost, job active", "lost, job ended", "snapshot (before #22)")


def measure(sizes: tuple[int, ...], dialect: str) -> list[dict[str, Any]]:
    from airflow_provider_workflowsvc.emulator.testing import running_emulator
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.txt"
        path.write_text("A short document.")
        for size in sizes:
            db = str(Path(tmp) / f"store-{size}.db")
            with running_emulator(subprocess=True, db=db, dialect=dialect, processing_delay=0.001) as emu:
                settings = ConnectionSettings(base_url=emu.base_url, token=emu.token, timeout=120)
                with WorkflowServiceHook(settings=settings) as hook:
                    workflow_id = str(hook.create_workflow(f"history-{size}", "basic").id)
                    first = hook.run_workflow(workflow_id, files=[str(path)])
                assert first is not None
                with sqlite3.connect(db) as con:
                    (data,) = con.execute("SELECT data FROM jobs WHERE id = ?", (first.id,)).fetchone()
                seed_history(db, workflow_id, json.loads(data), size - 1)
                for case in CASES:
                    row = {
                        "past_jobs": size,
                        "dialect": dialect,
                        **one_case(emu, settings, workflow_id, str(path), case),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--dialect", default="platform", choices=("platform", "spec"))
    args = parser.parse_args()
    rows = measure(tuple(int(s) for s in args.sizes.split(",")), args.dialect)
    print()
    print(f"{'past jobs':>10} | {'case':<22} | {'requests':>8} | {'bytes read':>12} | outcome")
    for row in rows:
        print(
            f"{row['past_jobs']:>10,} | {row['case']:<22} | {row['requests']:>8} | {row['bytes']:>12,} | "
            f"{row['outcome']}"
        )


if __name__ == "__main__":
    main()
