"""
The account limits the live service documents: on-demand job size, launch rate, running cap, API quota.

Wording and codes follow the live docs (``on-demand-jobs-limits``, ``quota-billing-rate-limiting``):
at most ``on_demand_max_files`` files per job (422) of at most ``on_demand_max_file_bytes`` each (413);
launches closer than ``on_demand_launch_interval`` seconds of emulator time get a rate limit error (429
with ``Retry-After``); beyond ``on_demand_max_running`` running on-demand jobs a new one stays
``SCHEDULED`` until one ends; ``quota_exhausted`` answers 402 "Insufficient API quota" to every request
that would start processing. Refused requests create nothing and do not count as launches.

The running cap is a first-come, first-served queue computed from the jobs themselves: a queued job is
admitted at the moment (emulator time) the cap first leaves room for it, so stepping the clock by any
amount admits exactly the jobs a real queue would have, at the times it would have.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_provider_workflowsvc.emulator.errors import ApiError, InvalidRequest

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.config import EmulatorConfig
    from airflow_provider_workflowsvc.emulator.jobs import JobRecord
    from airflow_provider_workflowsvc.emulator.store import Store

__all__ = [
    "INSUFFICIENT_QUOTA",
    "LaunchBook",
    "admit",
    "check_file_limits",
    "check_launch_gap",
    "check_quota",
]

INSUFFICIENT_QUOTA = "Insufficient API quota"
MB = 1_000_000
"""The docs' "MB": decimal, the stricter reading of "10 MB" (a client within it is within 10 MiB too)."""
_META_KEY = "on_demand_book"


def _size_text(size: int) -> str:
    return f"{size // MB} MB" if size % MB == 0 else f"{size:,} bytes"


def check_quota(config: EmulatorConfig) -> None:
    """402 when the account's quota is switched to exhausted."""
    if config.quota_exhausted:
        raise ApiError(402, INSUFFICIENT_QUOTA)


def check_file_limits(files: Sequence[tuple[str, int]], config: EmulatorConfig) -> None:
    """Refuse an on-demand job of too many files (422) or with a file over the size limit (413)."""
    most, largest = config.on_demand_max_files, config.on_demand_max_file_bytes
    if len(files) > most:
        raise InvalidRequest.one(
            ["body", "input_files"],
            f"Each on-demand job is limited to {most} files; this request has {len(files)}.",
            "too_long",
        )
    for name, size in files:
        if size > largest:
            raise ApiError(
                413,
                f"Each file is limited to {_size_text(largest)} in size; {name!r} has {size:,} bytes.",
            )


def check_launch_gap(last_launch: float | None, now: float, config: EmulatorConfig) -> None:
    """429 with ``Retry-After`` (whole seconds, rounded up) when the last launch is too recent."""
    gap = config.on_demand_launch_interval
    if last_launch is None or now - last_launch >= gap:
        return
    wait = max(1, math.ceil(last_launch + gap - now))
    raise ApiError(
        429,
        f"Rate limit exceeded: wait at least {gap:g} second(s) between on-demand job launch requests.",
        headers={"retry-after": str(wait)},
    )


def admit(
    jobs: Sequence[JobRecord], cap: int, now: float, not_before: float = -math.inf
) -> tuple[list[JobRecord], list[JobRecord]]:
    """
    Admit queued on-demand jobs, oldest launch first, up to ``cap`` running at any moment until ``now``.

    ``jobs``: every on-demand job not yet known to have ended, in launch order. ``not_before``: no
    admission earlier than this (when the cap last changed: a new cap does not rewrite the past).
    Returns the jobs admitted by this call (``started_at`` set: save them) and the jobs still to watch
    (queued, or running after the earliest moment a later admission can look at).
    """
    running = [j for j in jobs if j.started_at is not None]
    queued = [j for j in jobs if j.started_at is None]
    admitted: list[JobRecord] = []
    last_start = max((j.started_at for j in running if j.started_at is not None), default=-math.inf)
    waiting = []
    for index, job in enumerate(queued):
        earliest = max(job.created_at, last_start, not_before)
        ends = sorted(e for e in (r.ends_at() for r in running) if e > earliest)
        start = earliest if len(ends) < cap else ends[len(ends) - cap]
        if job.stopped_at is not None and job.stopped_at <= start:
            continue  # cancelled while queued: it never takes a place
        if start > now:
            waiting = list(queued[index:])
            break
        job.started_at, last_start = start, start
        running.append(job)
        admitted.append(job)
    horizon = min([now, *(j.created_at for j in waiting)])
    return admitted, [j for j in running if j.ends_at() > horizon] + waiting


class LaunchBook:
    """
    Which on-demand jobs may still hold or wait for a place, and when the last one was launched.

    Kept in the store's meta row (a handful of ids), so a restarted emulator with a database file
    keeps its queue; the jobs' own records stay the truth of when each started and ends.
    ``settled_at`` (this process only): when the settings last changed, the earliest admission since.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.job_ids: list[str] = []
        self.last_launch: float | None = None
        self.settled_at = -math.inf
        self.load()

    def load(self) -> None:
        data = json.loads(self.store.get_meta(_META_KEY) or "{}")
        self.job_ids, self.last_launch = list(data.get("job_ids", [])), data.get("last_launch")
        self.settled_at = -math.inf

    def save(self) -> None:
        self.store.set_meta(_META_KEY, json.dumps({"job_ids": self.job_ids, "last_launch": self.last_launch}))

    def launched(self, job_id: str, at: float) -> None:
        self.job_ids.append(job_id)
        self.last_launch = at
        self.save()

    def keep(self, job_ids: list[str]) -> None:
        if job_ids != self.job_ids:
            self.job_ids = job_ids
            self.save()
