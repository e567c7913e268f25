"""What a job-event watcher has seen of its workflow's jobs: the jobs it knows by id, and a horizon."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.models import as_utc

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.models import Job
    from airflow_provider_workflowsvc.wait.source import JobChange

log = logging.getLogger("airflow_provider_workflowsvc.triggers.job_events")

MAX_KNOWN = 5000
"""Jobs a cursor knows by id at most; past it, the oldest are let go and the horizon moves up to them
(more jobs than this within ``max_lateness``: the bound shrinks, with a warning)."""


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


@dataclass
class JobCursor:
    """
    What a watcher has seen of its workflow's jobs; it survives a restart in the asset state store.

    A job is *new* the first time a listing or the feed shows it, unless created before ``horizon``;
    ``known`` holds the ids seen since the horizon (whatever their ``created_at``: new exactly once),
    ``pending`` those seen and not reported yet; a pending job that is final is *due*. The horizon follows
    the triggerer's clock (``max_lateness`` behind each listing), so ``known`` stays bounded (``MAX_KNOWN``).
    """

    horizon: datetime | None = None
    """Jobs created before it are not new (None: every job not known is new)."""
    known: dict[str, datetime] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    _undated: set[str] = field(default_factory=set, repr=False, compare=False)
    _last_listed: float | None = field(default=None, repr=False, compare=False)

    @classmethod
    def starting_at(cls, jobs: Iterable[Job], listed_at: float, max_lateness: float) -> JobCursor:
        """Start a cursor from the jobs listed at a first start: the final ones are never reported."""
        horizon = _utc(listed_at - max_lateness)
        cursor = cls(horizon=horizon)
        for job in jobs:
            created = job.created_utc
            if created is None:
                cursor._undated_warning(job)
                continue
            if created >= horizon:
                cursor.known[job.id] = created
            if not job.status.is_terminal:
                cursor.pending.add(job.id)
        cursor._last_listed = listed_at
        return cursor

    def due(self, jobs: Iterable[Job], listed_at: float, max_lateness: float) -> list[Job]:
        """Return the listed jobs that are pending and final now (oldest first); note the new ones."""
        due: list[Job] = []
        for job in self._dated(jobs):
            if self._is_new(job):
                self._see(job, listed_at, max_lateness)
            if job.id in self.pending and job.status.is_terminal:
                due.append(job)
        return due

    def saw(self, changes: Iterable[JobChange]) -> set[str]:
        """
        Note the feed's events (any order, duplicates too): a job not known is new (pending); return
        the jobs not reported yet that an event shows ended (their records decide).
        """
        ended = set()
        for change in changes:
            if change.job_id in self.known and change.job_id not in self.pending:
                continue  # reported (or history): a duplicate, or an event of it arriving late
            self.known.setdefault(change.job_id, change.at or _utc(time.time()))
            self.pending.add(change.job_id)
            if not change.active:
                ended.add(change.job_id)
        return ended

    def unlisted(self, jobs: Iterable[Job]) -> list[str]:
        """Return the pending jobs ``jobs`` does not show (created before its window, or gone): read each."""
        listed = {job.id for job in jobs}
        return sorted(job_id for job_id in self.pending if job_id not in listed)

    def reported(self, job_id: str) -> None:
        """Record that ``job_id``'s event is out (or that it is not wanted): never report it again."""
        self.pending.discard(job_id)

    def advance(self, listed_at: float, max_lateness: float) -> None:
        """
        Move the horizon to ``max_lateness`` before a listing just gone through (jobs created before it
        are history from now on), and let go of the ids it leaves behind.
        """
        horizon = _utc(listed_at - max_lateness)
        if self.horizon is None or horizon > self.horizon:
            self.horizon = horizon
        self.known = {job_id: at for job_id, at in self.known.items() if at >= self.horizon}
        if len(self.known) > MAX_KNOWN:
            self._shed()
        self._last_listed = listed_at

    def _shed(self) -> None:
        """Keep the newest ``MAX_KNOWN`` ids: the horizon moves up past the others (warned)."""
        by_age = sorted(self.known.items(), key=lambda item: item[1])
        horizon = by_age[len(by_age) - MAX_KNOWN - 1][1] + timedelta(microseconds=1)
        log.warning(
            "More than %d jobs are dated within the lateness window or ahead of it: jobs created before "
            "%s that were not listed yet will not be reported",
            MAX_KNOWN,
            horizon.isoformat(),
        )
        self.horizon = horizon
        self.known = {job_id: at for job_id, at in self.known.items() if at >= horizon}

    def _is_new(self, job: Job) -> bool:
        if job.id in self.known or job.id in self.pending:
            return False
        created = job.created_utc
        return self.horizon is None or (created is not None and created >= self.horizon)

    def _see(self, job: Job, listed_at: float, max_lateness: float) -> None:
        created = job.created_utc
        assert created is not None
        self.known[job.id] = created
        self.pending.add(job.id)
        previous = self._last_listed
        if previous is not None and created < _utc(previous - max_lateness / 2):
            log.warning(
                "Job %s appeared %.0f s after its created_at (%s), as seen from this triggerer: a job that "
                "appears more than max_lateness (%.0f s) late is not reported. Is the service's clock "
                "behind this triggerer's?",
                job.id,
                listed_at - created.timestamp(),
                created.isoformat(),
                max_lateness,
            )

    def _dated(self, jobs: Iterable[Job]) -> list[Job]:
        """Return the jobs in creation order; an undated job cannot be placed: skipped (warned once)."""
        dated = []
        for job in jobs:
            if job.created_utc is not None:
                dated.append(job)
            else:
                self._undated_warning(job)
        return sorted(dated, key=lambda job: (job.created_utc, job.id))

    def _undated_warning(self, job: Job) -> None:
        if job.id not in self._undated:
            self._undated.add(job.id)
            log.warning("Job %s has no created_at; it cannot be placed in time and is not reported", job.id)

    def to_json(self, unsettled: Iterable[str] = ()) -> dict[str, Any]:
        """Return the stored form; ``unsettled``: jobs reported so recently they are stored as pending."""
        return {
            "horizon": None if self.horizon is None else self.horizon.isoformat(),
            "known": {job_id: at.isoformat() for job_id, at in sorted(self.known.items())},
            "pending": sorted(self.pending | set(unsettled)),
        }

    @classmethod
    def from_json(cls, value: Any) -> JobCursor | None:
        """
        Read a stored cursor; None when there is none or it cannot be read (warned). A time without a zone
        is UTC; a horizon ahead of this clock is not read; an older ``watermark`` is read as its horizon.
        """
        if value is None:
            return None
        try:
            if "watermark" in value:  # written before the cursor knew jobs by id
                horizon = _stored_time(value["watermark"])
                known = {} if horizon is None else dict.fromkeys(map(str, value["at_watermark"]), horizon)
            else:
                horizon = _stored_time(value["horizon"])
                known = {str(job_id): _known_time(at) for job_id, at in value["known"].items()}
            cursor = cls(horizon=horizon, known=known, pending={str(job_id) for job_id in value["pending"]})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("The stored job cursor %r cannot be read (%s); starting from now", value, exc)
            return None
        if horizon is not None and horizon.timestamp() > time.time():
            log.warning(
                "The stored job cursor's horizon %s is ahead of this triggerer's clock; starting from now",
                horizon.isoformat(),
            )
            return None
        return cursor


def _stored_time(value: Any) -> datetime | None:
    return None if value is None else _known_time(value)


def _known_time(value: Any) -> datetime:
    moment = datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        log.warning("The stored job cursor has a time without a time zone (%s): read as UTC", value)
    return as_utc(moment)
