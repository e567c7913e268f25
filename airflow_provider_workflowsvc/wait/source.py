"""
Where a triggerer's waits learn that their jobs changed: ONE source per connection (per shared client).

Once per interval for every wait and watcher of the connection it reads the job-event feed (``GET
/notifications``), else (404: the spec dialect) the account's active-jobs listing. It never decides an
outcome (a wait it shows changed reads its own job) nor marks an event read. What bounds a stale, purged
or down source at a cost per connection (canaries, gaps, ``DOWN_AFTER``, patience): docs/decisions/waits.md,
"One source per connection".
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc.exceptions import WorkflowServiceNotFoundError
from airflow_provider_workflowsvc.hooks._pool import first_in_line, wait_at_most
from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
from airflow_provider_workflowsvc.models import JobStatus, as_utc
from airflow_provider_workflowsvc.wait.poll import is_transient

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.models import Job, Notification
    from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule

SHARE_FROM = 3
"""Waits on a connection from which the source reads (fewer poll their own jobs: a read costs as much)."""
CANARY_EVERY = 2
"""Reads per canary (an own read of the wait longest without one) while the source proves nothing."""
DOWN_AFTER = 3
"""Intervals without a read that succeeded after which the waits read their own jobs (and while the last
read failed)."""
ANSWER_ROOM = 2.0
"""A read's patience: this many times as long as the last one took, at least ``PATIENCE`` intervals, at
most ``PATIENCE_MAX`` seconds (a uniformly slow service is waited for; a hung read only delays the next)."""
PATIENCE = 4
PATIENCE_MAX = 60.0
FEED_PAGE = 100
"""Events per page of the feed (its maximum)."""
MAX_PAGES = 10
"""Pages one read follows at most; a read that has not reached the last event seen by then is a gap."""
SINCE_MARGIN = timedelta(seconds=1)
"""How far before the last event seen a read asks from (``since``): that event is in the answer whether
the service reads ``since`` as inclusive or not, so reaching it proves no gap."""
ACTIVE = frozenset({JobStatus.SCHEDULED, JobStatus.IN_PROGRESS})
ENDED = frozenset({JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.FAILED, JobStatus.STOPPED})
KEPT = 50_000
"""Jobs whose last status the source keeps at most (then it forgets: their waits read their own)."""

_log = logging.getLogger(__name__)
Seen = tuple[datetime, set[str]]
"""The newest events a read saw: their ``created_at``, their ids."""


@dataclass(frozen=True)
class JobChange:
    """What the source showed of one job: an event of the feed, or a job that left the active listing."""

    job_id: str
    status: str
    """The status it says (the event's, spelt as sent; ``ended?`` for a job no longer listed active)."""
    at: datetime | None
    """When the service says it happened (the event's ``created_at``; None from the listing)."""
    event_id: str | None = None
    workflow_id: str | None = None

    @property
    def active(self) -> bool:
        """Whether it says the job is scheduled or in progress (nothing for a wait to read)."""
        return JobStatus(self.status) in ACTIVE


class Subscription:
    """One wait registered with its connection's source (:func:`watching`): whether its poll is due."""

    def __init__(
        self, source: ChangeSource, watch: JobWatch, hook: WorkflowServiceAsyncHook, interval: float
    ) -> None:
        self.source, self.watch, self.hook, self.interval = source, watch, hook, interval
        self.told = False
        """The source showed a change since the wait's last own read."""
        self.told_at = self.polled_at = 0.0
        """When the last read that told it started; when its last own read did (monotonic)."""
        self.covered = False
        """Something vouches that the job had not ended when the wait began: an own read, a listing that
        started after, or an event of the job the feed showed (it shows its later ones too)."""
        self.canary = self.own = False
        self.last_read = self.since = time.monotonic()

    def due(self, schedule: PollSchedule) -> bool:
        """Whether this poll reads the job's own record (else nothing is sent: the source vouches)."""
        if self.own:
            self.read()  # the previous poll read the job's own record
        source = self.source
        source.wake()
        self.own = schedule.final or self.told or self.canary or not self.covered
        self.own = self.own or not source.vouches(schedule.interval)
        if self.own:
            self.polled_at = time.monotonic()
        else:
            metrics.shared_poll_served(None, self.hook.workflowsvc_conn_id)
        return self.own

    def read(self) -> None:
        """Record the wait's own read (its watch holds what the read showed)."""
        if self.watch.status in ENDED and self.covered and not self.told:
            self.source.suspect(self.watch.job_id)
        self.told = self.told and self.told_at > self.polled_at  # a read begun since may show more
        self.canary = self.own = False
        self.covered = True
        self.last_read = time.monotonic()


class ChangeSource:
    """The source of one connection's waits in one event loop: one reader task."""

    def __init__(self) -> None:
        self.kind: str | None = None
        """``feed``, ``listing``, ``refused`` (no reads: each wait polls its own job), None: not known yet."""
        self.waits: dict[int, Subscription] = {}
        self.listeners: set[Listener] = set()
        self.width = 1
        """Canaries per read: 1 every ``CANARY_EVERY`` reads while nothing proves the source stale."""
        self._reader: asyncio.Task[None] | None = None
        self._good_at = 0.0
        self._wake_at: float | None = None
        """When the reader, asleep between reads, is due to read again (None: it is reading)."""
        self._took = 0.0
        self._reads = 0
        self._last: Seen | None = None
        """The feed's newest events seen: their ``created_at`` and ids."""
        self._shown: set[str] = set()
        """Jobs whose end (a non-active event; a job no longer listed) the source showed, recently."""
        self._active: set[str] = set()
        """Jobs whose latest event the feed showed is scheduled or in progress (it would show their end)."""
        self._suspects: dict[str, float] = {}
        """Jobs an own read showed ended before the source did: when (monotonic)."""

    # -- the waits' side --------------------------------------------------------------------------

    def vouches(self, interval: float) -> bool:
        """Whether a wait at ``interval`` may take the source's silence for "unchanged"."""
        now = time.monotonic()
        # a loop frozen or starved past the reader's wake-up (a paused triggerer) kept it from reading
        overdue = max(0.0, now - self._wake_at) if self._wake_at is not None else 0.0
        fresh = now - self._good_at - overdue <= DOWN_AFTER * interval + ANSWER_ROOM * self._took
        return self.kind in ("feed", "listing") and self._reading and fresh

    @property
    def _reading(self) -> bool:
        return len(self.waits) >= SHARE_FROM or (bool(self.listeners) and self.kind in (None, "feed"))

    def wake(self) -> None:
        """Start the reader if it is needed and not running."""
        if self.kind != "refused" and self._reading and (self._reader is None or self._reader.done()):
            self._reader = asyncio.ensure_future(self._run())

    def suspect(self, job_id: str) -> None:
        """Note that a wait's own read shows ``job_id`` ended, which the source has not shown (yet)."""
        if job_id not in self._shown:
            self._suspects.setdefault(job_id, time.monotonic())

    def close_if_idle(self) -> None:
        """Stop the reader when no wait needs it."""
        if not self._reading and self._reader is not None:
            self._reader.cancel()
            self._reader = None

    # -- the reader -------------------------------------------------------------------------------

    def _readers(self) -> list[Subscription | Listener]:
        return [*self.waits.values(), *self.listeners]

    def _interval(self) -> float:
        return min((w.interval for w in self._readers()), default=1.0)

    def _hook(self) -> WorkflowServiceAsyncHook | None:
        return next((w.hook for w in self._readers()), None)

    async def _run(self) -> None:
        while self._reading and self.kind != "refused":
            interval, started = self._interval(), time.monotonic()
            hook = self._hook()
            if hook is None:
                return
            patience = max(PATIENCE * interval, min(ANSWER_ROOM * self._took, PATIENCE_MAX))
            try:
                with deadline(time.time() + patience), first_in_line():
                    changes = await wait_at_most(self._read(hook), patience)
            except Exception as exc:
                self._failed(hook, exc, time.monotonic() - started, patience)
            else:
                self._good_at, self._took = started, time.monotonic() - started
                metrics.shared_listing(None, hook.workflowsvc_conn_id)
                self._tell(changes, started)
                for listener in self.listeners:  # without a feed, only to wake it (at most one queued)
                    if self.kind == "feed" or listener.reads.empty():
                        listener.reads.put_nowait(changes if self.kind == "feed" else None)
            await self._sleep(max(interval - (time.monotonic() - started), 0.0))

    async def _sleep(self, seconds: float) -> None:
        """Sleep until the next read; the time the loop wakes the reader late is not the service's silence."""
        self._wake_at = wake_at = time.monotonic() + seconds
        try:
            await asyncio.sleep(seconds)
        finally:
            self._good_at += max(0.0, time.monotonic() - wake_at)
            self._wake_at = None

    def _failed(self, hook: WorkflowServiceAsyncHook, exc: Exception, took: float, patience: float) -> None:
        """
        Note a failed read: it tells nothing; one cut by its patience doubles the next one's; a refusal
        ends the reads.
        """
        metrics.shared_listing(None, hook.workflowsvc_conn_id, failed=True)
        if took >= patience / 2:
            self._took = max(self._took, patience)
        reason = str(exc) or type(exc).__name__
        if is_transient(exc):
            _log.warning("Reading the %s failed (%s); trying again next interval", self._what, reason)
            return
        _log.warning(
            "Reading the %s failed (%s); the waits poll their own jobs from now on", self._what, reason
        )
        self.kind = "refused"

    @property
    def _what(self) -> str:
        return "listing of the account's active jobs" if self.kind == "listing" else "job-event feed"

    async def _read(self, hook: WorkflowServiceAsyncHook) -> list[JobChange] | None:
        """One read: the changes it shows (None: a gap, every wait reads its own job once)."""
        if self.kind in (None, "feed"):
            try:
                return await self._read_feed(hook)
            except WorkflowServiceNotFoundError:
                _log.info("The service has no job-event feed; the waits learn from its active-jobs listing")
                self.kind = "listing"
        return await self._read_listing(hook)

    async def _read_feed(self, hook: WorkflowServiceAsyncHook) -> list[JobChange] | None:
        """
        Page the feed (newest first) down to the events last seen (none: its first pages); return the
        events after them, newest first (None: a gap, the pages ran out or past ``MAX_PAGES`` first).
        """
        found: list[JobChange] = []
        cursor: str | None = None
        last = self._last
        since = last[0] - SINCE_MARGIN if last else None
        for _ in range(MAX_PAGES):
            page = await hook.list_notifications(since=since, limit=FEED_PAGE, cursor=cursor)
            changes = list(map(_change, page.events))
            found += (new := [c for c in changes if not (last and c.at and _seen(c.at, c.event_id, last))])
            if len(new) < len(changes) or not (cursor := page.next_cursor):  # down to the events seen
                break
        self.kind, self._last = "feed", _newest(found, last)
        return found if last is None or len(new) < len(changes) else None

    async def _read_listing(self, hook: WorkflowServiceAsyncHook) -> list[JobChange]:
        self.kind = "listing"
        statuses = [JobStatus.IN_PROGRESS]
        if any(w.watch.status is not JobStatus.IN_PROGRESS for w in self.waits.values()):
            statuses.insert(0, JobStatus.SCHEDULED)  # some wait has not seen its job start (lifecycle order)
        listed: dict[str, Job] = {}
        for status in statuses:
            for job in await hook.list_jobs(status=status):
                listed.setdefault(job.id, job)
        changes = []
        for sub in self.waits.values():
            shown = listed.get(sub.watch.job_id)
            if shown is not None and shown.status in ACTIVE:
                if shown.status is not sub.watch.status:
                    sub.watch.observe(None, shown)
            else:
                changes.append(JobChange(sub.watch.job_id, "ended?", None))
        return changes

    def _note(self, changes: list[JobChange]) -> set[str]:
        """Note each job's latest status a read showed; return the jobs it showed ended."""
        latest: dict[str, JobChange] = {}
        for change in changes:  # newest first: a job's first change is its latest
            latest.setdefault(change.job_id, change)
        shown = {job for job, change in latest.items() if not change.active}
        if len(self._shown) + len(self._active) > KEPT:  # let go: their waits read their own jobs
            self._shown, self._active = set(), set()
        self._shown |= shown
        self._active = (self._active - shown) | {job for job in latest if job not in self._shown}
        return shown

    def _tell(self, changes: list[JobChange] | None, started: float) -> None:
        """
        Tell the waits what a read showed; pick the next canaries. An end an own read showed before this
        read started, which no read has shown by now, proves the source stale.
        """
        self._reads += 1
        shown = self._note(changes or [])
        judged = [job for job, at in self._suspects.items() if at < started or job in self._shown]
        stale = changes is not None and any(job not in self._shown for job in judged)
        for job in judged:
            del self._suspects[job]
        if stale:
            self.width = min(2 * self.width, max(len(self.waits), 1))
            _log.warning(
                "The %s lags behind the jobs' own records; %d canaries a read", self._what, self.width
            )
        elif self.width > 1:
            self.width //= 2
        for sub in self.waits.values():
            job = sub.watch.job_id
            if changes is None or job in shown:
                sub.told, sub.told_at = True, started
            elif job in self._active or (self.kind == "listing" and started > sub.since):
                sub.covered = True
        if stale or self.width > 1 or self._reads % CANARY_EVERY == 0:
            for sub in sorted(self.waits.values(), key=lambda s: s.last_read)[: self.width]:
                sub.canary = True


def _seen(at: datetime, event_id: str | None, last: Seen) -> bool:
    return at < last[0] or event_id in last[1]


def _newest(found: list[JobChange], last: Seen | None) -> Seen | None:
    """Return the newest events' time and ids (``last``'s when none is dated)."""
    top = max((c.at for c in found if c.at is not None), default=None)
    return last if top is None else (top, {str(c.event_id) for c in found if c.at == top})


def _change(event: Notification) -> JobChange:
    """One event: its job, workflow, status (the payload's, else the event type's: kept as sent)."""
    status = event.payload.status
    known = status.value if status is not JobStatus.UNKNOWN else event.event_type.removeprefix("job.")
    at = event.created_at
    return JobChange(event.payload.job_id or "", known, at and as_utc(at), event.id, event.workflow_id)


_SOURCES: weakref.WeakKeyDictionary[Any, ChangeSource] = weakref.WeakKeyDictionary()
"""The source of each shared HTTP client (one per event loop and connection settings)."""


async def _source(hook: WorkflowServiceAsyncHook) -> ChangeSource:
    return _SOURCES.setdefault(await hook.get_async_conn(), ChangeSource())


@asynccontextmanager
async def watching(
    hook: WorkflowServiceAsyncHook, watch: JobWatch, interval: float
) -> AsyncIterator[Subscription]:
    """Register ``watch`` with its connection's source until the block ends; pass it to ``await_job``."""
    source = await _source(hook)
    source.waits[id(watch)] = sub = Subscription(source, watch, hook, interval)
    source.wake()
    try:
        yield sub
    finally:
        if sub.own:
            sub.read()  # its last poll's
        del source.waits[id(watch)]
        source.close_if_idle()


class Listener:
    """A job-event watcher's stream registered with its connection's source (:func:`listening`)."""

    def __init__(self, source: ChangeSource, hook: WorkflowServiceAsyncHook, interval: float) -> None:
        self.source, self.hook, self.interval = source, hook, interval
        self.reads: asyncio.Queue[list[JobChange] | None] = asyncio.Queue()

    async def next(self) -> list[JobChange] | None:
        """Return the events of the source's reads since the last call; None: it cannot tell this time."""
        self.source.wake()
        if self.source.kind not in (None, "feed"):
            await asyncio.sleep(self.interval)
            return None
        try:
            read = await wait_at_most(
                self.reads.get(), DOWN_AFTER * self.interval + ANSWER_ROOM * self.source._took
            )
        except asyncio.TimeoutError:
            return None
        changes: list[JobChange] | None = read
        while not self.reads.empty():
            later = self.reads.get_nowait()
            changes = None if changes is None or later is None else [*later, *changes]
        return changes


@asynccontextmanager
async def listening(hook: WorkflowServiceAsyncHook, interval: float) -> AsyncIterator[Listener]:
    """Register a job-event watcher's stream with its connection's source until the block ends."""
    source = await _source(hook)
    listener = Listener(source, hook, interval)
    source.listeners.add(listener)
    try:
        yield listener
    finally:
        source.listeners.discard(listener)
        source.close_if_idle()
