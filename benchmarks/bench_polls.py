"""
Poll economy: API requests per job wait, for jobs of 10 s, 60 s and 600 s, at the default poll interval.

Time is emulated: the wait's sleeps do not sleep, they advance the emulator's clock (jobs progress by
that clock) and the waiting code's own clock (deadline, elapsed) by the same amount. Patched for the
run, and nothing else: ``asyncio.sleep`` as ``wait.poll`` sees it (the trigger's pauses), ``time.time`` as
``wait.watch`` and ``triggers.job`` see it (deadline and elapsed); the sync path takes ``sleep=`` as an
argument. The wait starts right after the job is created, as in ``RunWorkflowOperator``; the count is
every request of the emulator's log about that job. Bound: ``ceil(T / interval) + 3``, and one per
output file (its document's name, issue #32).

Both waits are measured: the trigger (``WorkflowJobTrigger.run``, deferrable) and the sync wait of a
non-deferrable ``RunWorkflowOperator`` (``wait.poll.wait_for_job``).

    python -m benchmarks.bench_polls [--runs 3] [--durations 10,60,600]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import logging
import math
import os
import statistics
import time
import types
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from unittest import mock

from benchmarks._common import CONN_ENV, Row, conn_json

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle

DURATIONS = (10.0, 60.0, 600.0)
_real_time = time.time
log = logging.getLogger("benchmarks.polls")
log.setLevel(logging.WARNING)  # the waits' progress lines would drown the benchmark's own output


class EmulatedTime:
    """A clock that moves only when the code under test sleeps, together with the emulator's."""

    def __init__(self, emu: EmulatorHandle) -> None:
        self.emu = emu
        self.offset = 0.0
        self.sleeps = 0

    def time(self) -> float:
        return _real_time() + self.offset

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if seconds > 0:
            self.emu.advance_clock(seconds)
            self.offset += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)

    @contextlib.contextmanager
    def patched(self) -> Iterator[None]:
        """Put the provider's polling code on this clock (see the module docstring for what is patched)."""
        from airflow_provider_workflowsvc.triggers import job as trigger_module
        from airflow_provider_workflowsvc.wait import poll, watch

        clock = types.SimpleNamespace(time=self.time)
        loop = types.SimpleNamespace(
            sleep=self.asleep,
            wait_for=asyncio.wait_for,
            gather=asyncio.gather,
            TimeoutError=asyncio.TimeoutError,
        )
        with (
            mock.patch.object(watch, "time", clock),
            mock.patch.object(trigger_module, "time", clock),
            mock.patch.object(poll, "asyncio", loop),
        ):
            yield


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def operator_defaults() -> tuple[float, float]:
    """``RunWorkflowOperator``'s default poll interval and timeout, in seconds."""
    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

    parameters = inspect.signature(RunWorkflowOperator.__init__).parameters
    return _seconds(parameters["poll_interval"].default), _seconds(parameters["timeout"].default)


def trigger_default_interval() -> float:
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

    return _seconds(inspect.signature(WorkflowJobTrigger.__init__).parameters["poll_interval"].default)


def _wait_trigger(clock: EmulatedTime, job_id: str, interval: float, timeout: float) -> dict[str, Any]:
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

    async def first_event() -> dict[str, Any]:
        trigger = WorkflowJobTrigger(
            job_id=job_id, deadline=clock.time() + timeout, poll_interval=interval, started_at=clock.time()
        )
        trigger._log = log  # type: ignore[assignment]  # quiet (LoggingMixin keeps its logger here)
        async for event in trigger.run():
            payload: dict[str, Any] = event.payload
            return payload
        raise RuntimeError("the trigger ended without an event")

    return asyncio.run(first_event())


def _wait_sync(
    clock: EmulatedTime, emu: EmulatorHandle, job_id: str, interval: float, timeout: float
) -> dict[str, Any]:
    from airflow_provider_workflowsvc.wait.poll import wait_for_job
    from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule
    from benchmarks._service import hook_for

    started = clock.time()
    with hook_for(emu) as hook:
        schedule = PollSchedule(started + timeout, interval)
        outcome = wait_for_job(hook, JobWatch(job_id, log, started), schedule, sleep=clock.sleep)
    return outcome.to_event()


def run(
    runs: int = 3,
    durations: Sequence[float] = DURATIONS,
    emu: EmulatorHandle | None = None,
    log_progress: bool = True,
) -> list[Row]:
    from benchmarks._service import emulator, make_jobs

    interval, timeout = operator_defaults()
    trigger_interval = trigger_default_interval()
    counts: dict[tuple[str, float], list[float]] = {}
    outputs: dict[tuple[str, float], int] = {}
    with contextlib.ExitStack() as stack:
        if emu is None:
            emu = stack.enter_context(emulator())
        stack.enter_context(mock.patch.dict(os.environ, {CONN_ENV: conn_json(emu.base_url, emu.token)}))
        for index in range(runs):
            for path in ("trigger", "sync"):
                for seconds in durations:
                    emu.reset()
                    clock = EmulatedTime(emu)
                    job_id = make_jobs(emu, 1, seconds)[0]
                    emu.clear_requests()
                    with clock.patched():
                        if path == "trigger":
                            event = _wait_trigger(clock, job_id, interval, timeout)
                        else:
                            event = _wait_sync(clock, emu, job_id, interval, timeout)
                    if event.get("status") != "success":
                        raise RuntimeError(f"{path} wait for a {seconds:g} s job ended {event}")
                    requests = len(emu.requests(path_contains=job_id))
                    counts.setdefault((path, seconds), []).append(float(requests))
                    outputs[(path, seconds)] = len({o["file_id"] for o in event.get("output_files", [])})
                    if log_progress:
                        print(
                            f"  polls run {index + 1}/{runs} {path} {seconds:g} s job: {requests} requests, "
                            f"{clock.sleeps} sleeps, emulated {clock.offset:g} s",
                            flush=True,
                        )
    section = "5 poll economy"
    rows = []
    for (path, seconds), values in counts.items():
        files = outputs[(path, seconds)]
        bound = math.ceil(seconds / interval) + 3 + files
        what = "trigger (deferrable)" if path == "trigger" else "sync wait (non-deferrable operator)"
        rows.append(
            Row(
                section,
                f"requests per wait, {what}, {seconds:g} s job",
                values,
                "requests",
                target=f"≤ ceil({seconds:g}/{interval:g})+3+{files} = {bound}",
                met=statistics.median(values) <= bound,
                reference=(
                    f"≤ {math.ceil(seconds / interval)} polls + 2 final reads (+1 spare) + {files} output "
                    "document read(s)"
                ),
                note=(
                    f"default poll interval {interval:g} s (RunWorkflowOperator; WorkflowJobTrigger's own "
                    f"default {trigger_interval:g} s), emulated time"
                    if (path, seconds) == next(iter(counts))
                    else ""
                ),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks._common import airflow_home, notes, table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--durations", default=",".join(f"{d:g}" for d in DURATIONS), help="job seconds")
    args = parser.parse_args(argv)
    with airflow_home():
        rows = run(args.runs, [float(d) for d in args.durations.split(",")])
    print(table(rows))
    print(notes(rows))


if __name__ == "__main__":
    main()
