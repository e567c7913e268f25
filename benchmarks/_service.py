"""
The emulator side of the benchmarks: start it as a subprocess, make workflows and jobs of a set length.

A job of a local-source workflow with one small text file goes through ``1 + nodes`` processing slots
of ``processing_delay`` emulator seconds each (see ``emulator/jobs.py``): with the default three nodes
of a ``basic`` workflow a job lasts ``4 * processing_delay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

SLOTS_PER_JOB = 4
"""Processing slots of a one-file job of a ``basic`` workflow (scheduled + three nodes)."""


@contextlib.contextmanager
def emulator(**options: Any) -> Iterator[EmulatorHandle]:
    """Run the emulator in its own process (its CPU time is never counted as ours)."""
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    with running_emulator(subprocess=True, **options) as emu:
        yield emu


def settings_for(emu: EmulatorHandle, **options: Any) -> ConnectionSettings:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    return ConnectionSettings(base_url=emu.base_url, token=emu.token, api_key=emu.api_key, **options)


def hook_for(emu: EmulatorHandle) -> WorkflowServiceHook:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    return WorkflowServiceHook(settings=settings_for(emu))


def local_workflow(hook: WorkflowServiceHook, prefix: str = "bench") -> str:
    """Create a ``basic`` workflow with a local source and a local destination; return its id."""
    workflow = hook.create_workflow(f"{prefix}-{uuid.uuid4().hex[:8]}", "basic")
    return str(workflow.id)


def make_jobs(emu: EmulatorHandle, count: int, job_seconds: float, *, concurrency: int = 8) -> list[str]:
    """
    Start ``count`` one-file jobs that each take ``job_seconds`` (emulator time); their ids, in order.

    The run requests are sent concurrently (raw httpx, ``concurrency`` at a time) so the jobs start
    close together.
    """
    made = make_jobs_over(emu, count, job_seconds, make_workflows(emu, 1), concurrency=concurrency)
    return [job for job, _ in made]


def make_workflows(emu: EmulatorHandle, count: int) -> list[str]:
    """Create ``count`` local-to-local ``basic`` workflows; their ids."""
    with hook_for(emu) as hook:
        return [local_workflow(hook) for _ in range(count)]


def make_jobs_over(
    emu: EmulatorHandle, count: int, job_seconds: float, workflows: list[str], *, concurrency: int = 8
) -> list[tuple[str, str]]:
    """:func:`make_jobs` spread over ``workflows`` (round robin): ``(job, workflow)`` pairs."""
    emu.configure(processing_delay=job_seconds / SLOTS_PER_JOB)
    of_job = [workflows[i % len(workflows)] for i in range(count)]
    return list(zip(asyncio.run(_run_many(emu, of_job, concurrency)), of_job, strict=True))


async def _run_many(emu: EmulatorHandle, of_job: list[str], concurrency: int) -> list[str]:
    count = len(of_job)
    headers = {"authorization": f"Bearer {emu.token}"}
    if emu.api_key:
        headers["service-api-key"] = emu.api_key
    ids: list[str] = [""] * count
    next_index = iter(range(count))
    body = b"A small document.\n\nIt has two paragraphs.\n"

    async def worker(client: httpx.AsyncClient) -> None:
        for index in next_index:
            files = {"input_files": (f"doc-{index}.txt", body, "text/plain")}
            response = await client.post(f"workflows/{of_job[index]}/run", files=files)
            response.raise_for_status()
            ids[index] = str(response.json()["id"])

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=emu.base_url + "/", headers=headers, timeout=60, limits=limits
    ) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return ids


@contextlib.contextmanager
def scratch_dir(prefix: str, parent: str | None = None) -> Iterator[Path]:
    """Yield a temporary directory, removed at the end whatever happens (benchmarks write big files here)."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as name:
        yield Path(name)
