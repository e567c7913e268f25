"""Event trigger for asset watchers: one event per job of a workflow that reaches a final status."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from datetime import datetime

    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.models import Job, JobStatus
    from airflow_provider_workflowsvc.triggers._job_cursor import JobCursor
    from airflow_provider_workflowsvc.wait.source import JobChange, Listener

MAX_LATENESS = 3600.0
"""Seconds, on the triggerer's clock, a job may appear in the listing after its ``created_at`` and still
be reported (``max_lateness``'s default)."""

log = logging.getLogger(__name__)

FINAL_STATUSES = ("completed", "completed with errors", "failed", "stopped")
"""The statuses reported by default: every final status of a job."""
FAILED_FILES_IN_EVENT = 20
"""Failed files listed in an event's payload (``failed_count`` has them all)."""
SUMMARY_BUDGET = 60.0
"""Seconds the requests for one job's summary may take before the next listing tries again."""
LISTING_BUDGET = 60.0
"""Seconds one listing may take before the next interval (or listing) tries again."""
LISTING_EVERY = 10
"""Intervals after which a watcher told by the job-event feed lists its workflow's jobs all the same (an
event the feed lost is found then)."""
GONE = "gone"
"""What :meth:`JobListing.record` returns for a job the service no longer has."""
CURSOR_KEY_PREFIX = "workflowsvc_job_events"
"""Asset state store key of a watcher's cursor (never rename it: a renamed key restarts the cursor)."""


# --------------------------------------------------------------------------------------------------
# The stream: one listing per interval, shared by the watchers of one workflow


async def _summary(hook: WorkflowServiceAsyncHook, job: Job) -> dict[str, Any] | None:
    """Read a finished job's event payload as a wait reads its end; None: not available yet (next round)."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
    from airflow_provider_workflowsvc.wait.poll import apoll_once, survive_transient
    from airflow_provider_workflowsvc.wait.watch import JobWatch

    try:
        with deadline(time.time() + SUMMARY_BUDGET):
            outcome = await apoll_once(hook, JobWatch(job.id, log))
    except Exception as exc:
        try:
            survive_transient(exc, log, f"Job {job.id}: reading its summary", retry="next round")
        except Exception:
            log.exception("Job %s finished, but its summary cannot be read; reporting the listing's", job.id)
            return job_summary(job, None, error=f"{type(exc).__name__}: {exc}")
        return None
    if outcome is None:
        log.info("Job %s is listed as %s, but its details do not say so yet", job.id, job.raw_status)
        return None
    return job_summary(job, outcome.summary(fail_on_failed_files=False))


def job_summary(job: Job, summary: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    """Build the event payload: job, workflow, status, documents written, failed files (capped)."""
    from airflow_provider_workflowsvc.lineage import documents_written, failed_count

    summary = summary or {}
    failed = summary.get("failed_files") or []
    payload = {
        "job_id": job.id,
        "workflow_id": summary.get("workflow_id") or job.workflow_id,
        "workflow_name": job.workflow_name,
        "status": summary.get("status") or job.raw_status or job.status.value,
        "created_at": None if job.created_at is None else job.created_at.isoformat(),
        "documents_written": documents_written(summary) if summary else None,
        "failed_count": failed_count(summary) if summary else None,
        "failed_files": failed[:FAILED_FILES_IN_EVENT],
        "message": summary.get("message") or "",
    }
    if error is not None:
        payload["summary_error"] = error
    return payload


class JobListing:
    """
    One round of the stream: the source's events (``changes``; None: list the jobs), and the reads a
    watcher may need beyond them (a listing, records, summaries), each made once for every watcher.
    """

    def __init__(
        self, listed_at: float, listener: Listener, workflow_id: str | None, changes: list[JobChange] | None
    ) -> None:
        self.listed_at, self.changes = listed_at, changes
        self._hook, self._workflow_id = listener.hook, workflow_id
        self._lock = asyncio.Lock()
        self._listed: tuple[datetime | None, list[Job]] | None = None
        self._reads: dict[tuple[str, str], asyncio.Future[Any]] = {}

    def _once(self, key: tuple[str, str], read: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        """Start ``read`` (once in this round for every watcher, at once with the others); await it."""
        if key not in self._reads:
            self._reads[key] = asyncio.ensure_future(read())
        return asyncio.shield(self._reads[key])

    def summary(self, job: Job) -> Awaitable[dict[str, Any] | None]:
        """``job``'s event payload (None: try again next round)."""
        return self._once(("summary", job.id), lambda: _summary(self._hook, job))

    def record(self, job_id: str) -> Awaitable[Job | str | None]:
        """Job ``job_id`` as the service now records it (None: not readable now; :data:`GONE`: none)."""
        return self._once(("record", job_id), lambda: _record(self._hook, job_id))

    def shown(self) -> list[JobChange] | None:
        """Return this round's events of the watched workflow (None: list the jobs)."""
        if self.changes is None:
            return None
        return [c for c in self.changes if self._workflow_id in (None, c.workflow_id) and c.job_id]

    async def reaching(self, since: datetime | None) -> list[Job] | None:
        """
        Return the jobs created since ``since`` (None: all), listed once for every watcher of the round
        that far back; None: that listing failed for now.
        """
        async with self._lock:
            back = self._listed[0] if self._listed else None
            if not self._listed or (back is not None and (since is None or since < back)):
                jobs = await _listed(self._hook, self._workflow_id, since)
                if jobs is None:
                    return None
                self._listed = (since, jobs)
        return self._listed[1] if self._listed else []

    async def unfinished(self) -> list[Job] | None:
        """
        Return the workflow's active jobs of any age (a first start; a status filter refused is skipped);
        None: a listing failed for now.
        """
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceApiError
        from airflow_provider_workflowsvc.models import ACTIVE_JOB_STATUSES

        found: dict[str, Job] = {}
        for status in ACTIVE_JOB_STATUSES:
            try:
                if (jobs := await _listed(self._hook, self._workflow_id, None, status)) is None:
                    return None
            except WorkflowServiceApiError as exc:
                if exc.status_code not in (400, 422):
                    raise
            else:
                found.update((job.id, job) for job in jobs if job.id not in found)
        return list(found.values())


async def _record(hook: WorkflowServiceAsyncHook, job_id: str) -> Job | str | None:
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceNotFoundError
    from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
    from airflow_provider_workflowsvc.wait.poll import survive_transient

    try:
        with deadline(time.time() + SUMMARY_BUDGET):
            return await hook.get_job(job_id)
    except WorkflowServiceNotFoundError:
        return GONE
    except Exception as exc:
        survive_transient(exc, log, f"Job {job_id}: reading its record", retry="next round")
        return None


async def _listed(
    hook: WorkflowServiceAsyncHook,
    workflow_id: str | None,
    since: datetime | None,
    status: JobStatus | None = None,
) -> list[Job] | None:
    """List the workflow's jobs created since ``since`` (in ``status``); None: failed transiently (logged)."""
    from airflow_provider_workflowsvc import metrics
    from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
    from airflow_provider_workflowsvc.wait.poll import survive_transient

    what = f"Listing the jobs of workflow {workflow_id}" if workflow_id else "Listing the jobs"
    try:
        with deadline(time.time() + LISTING_BUDGET):
            jobs = await hook.list_jobs(workflow_id=workflow_id, status=status, created_since=since)
    except Exception as exc:
        metrics.watcher_listing(workflow_id, hook.workflowsvc_conn_id, failed=True)
        survive_transient(exc, log, what, retry="next listing")
        return None
    metrics.watcher_listing(workflow_id, hook.workflowsvc_conn_id)
    return jobs


class _SettledSaver:
    """Saves a watcher's cursor so that each event handed over ``settle`` s ago is stored as reported."""

    def __init__(self, trigger: WorkflowJobEventTrigger, cursor: JobCursor) -> None:
        self._trigger, self._cursor = trigger, cursor
        self._handed: dict[str, float] = {}
        """Job id → when its event was handed over (monotonic), until it is saved as reported."""
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def handed(self, job_id: str) -> None:
        self._handed[job_id] = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._save_when_settled())

    async def save(self) -> None:
        """Save the cursor now: the events handed over within the settle time stay pending in it."""
        async with self._lock:
            settled_before = time.monotonic() - self._trigger.cursor_settle_seconds
            for job_id in [j for j, at in self._handed.items() if at <= settled_before]:
                del self._handed[job_id]
            await self._trigger._save_cursor(self._cursor, unsettled=self._handed)

    async def _save_when_settled(self) -> None:
        while self._handed:
            oldest = min(self._handed.values())
            await asyncio.sleep(max(oldest + self._trigger.cursor_settle_seconds - time.monotonic(), 0.0))
            await self.save()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


# --------------------------------------------------------------------------------------------------
# The trigger


class WorkflowJobEventTrigger(BaseEventTrigger):
    """
    Report each job of a workflow that reaches a final status: for ``Asset(watchers=[AssetWatcher(...)])``.

    Every ``poll_interval`` seconds it learns which jobs changed from its connection's source
    (:mod:`~.wait.source`: the job-event feed, read once per interval for every wait and watcher of the
    connection, never marking an event read) and reads each job the feed shows ended from its own record,
    which decides. Where the source cannot tell (no feed: the spec dialect; a gap; down), and every
    :data:`LISTING_EVERY` intervals, it lists the workflow's jobs down to those created within
    ``max_lateness``. Each job that reaches one of ``statuses`` after the watch began gives exactly one
    event, whose payload is the job's summary: ``job_id``, ``workflow_id``, ``workflow_name``,
    ``status``, ``created_at``, ``documents_written``, ``failed_count``, ``failed_files`` (the first
    :data:`FAILED_FILES_IN_EVENT`) and ``message``, read by the DAG scheduled on the asset from
    ``triggering_asset_events[asset][i].extra["payload"]``. Failures are survived as waits survive them.

    Airflow 3.3+: the cursor (the jobs reported) is kept in the asset state store,
    so jobs that finished while the triggerer was down are reported on restart, none twice; the watchers
    of one connection and workflow share one stream. Airflow 3.0-3.2 have no store: each start begins
    from "now". See the provider docs' "Event-driven scheduling".

    :param workflow_id: the workflow whose jobs to report; None: every job of the connection.
    :param workflowsvc_conn_id: the Workflow Service connection.
    :param poll_interval: seconds between two reads of the source (or listings).
    :param statuses: the final statuses to report (default: all of them); a finished job in another
        status is passed over silently.
    :param max_lateness: seconds a job may appear in the listing after its ``created_at`` (a commit that
        lands late, a replica whose clock is behind) and still be reported; each listing reads the jobs
        created within it (:data:`MAX_LATENESS` by default).
    """

    cursor_settle_seconds = 5.0
    """Seconds after which an event handed to the triggerer is saved as reported: by then it is in the
    database, so a crash can repeat an event only within this window (never lose one)."""

    def __init__(
        self,
        *,
        workflow_id: str | None = None,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 60.0,
        statuses: Iterable[str] | None = None,
        max_lateness: float = MAX_LATENESS,
    ) -> None:
        from airflow_provider_workflowsvc._tasks.base import interval_seconds

        super().__init__()
        self.workflow_id = str(workflow_id) if workflow_id else None
        self.workflowsvc_conn_id = workflowsvc_conn_id
        self.poll_interval = interval_seconds(poll_interval, "poll_interval")
        self.statuses = _final_statuses(FINAL_STATUSES if statuses is None else statuses)
        self.max_lateness = _lateness(max_lateness)
        self._memory: JobCursor | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "workflow_id": self.workflow_id,
                "workflowsvc_conn_id": self.workflowsvc_conn_id,
                "poll_interval": self.poll_interval,
                "statuses": list(self.statuses),
                "max_lateness": self.max_lateness,
            },
        )

    @property
    def cursor_key(self) -> str:
        return f"{CURSOR_KEY_PREFIX}:{self.workflowsvc_conn_id}:{self.workflow_id or '*'}"

    # -- shared stream (Airflow 3.3+; older Airflow calls run()) -----------------------------------

    def shared_stream_key(self) -> Hashable | None:
        """Watchers of one connection and workflow share one listing per interval."""
        return (CURSOR_KEY_PREFIX, self.workflowsvc_conn_id, self.workflow_id or "*")

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        """Yield a round per read of the connection's source (a listing round where it cannot tell)."""
        from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
        from airflow_provider_workflowsvc.wait.source import listening

        workflow_id, interval = kwargs.get("workflow_id"), float(kwargs.get("poll_interval") or 60.0)
        conn_id = kwargs.get("workflowsvc_conn_id") or DEFAULT_CONN_ID
        async with WorkflowServiceAsyncHook(conn_id) as hook, listening(hook, interval) as listener:
            listed = time.time()
            while True:
                changes = await listener.next()
                now = time.time()
                if changes is None or now - listed >= LISTING_EVERY * interval:
                    changes, listed = None, now
                yield JobListing(now, listener, workflow_id, changes)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """Turn the listings into this watcher's events: the jobs its own cursor has not reported."""
        from airflow_provider_workflowsvc import metrics

        read, cursor, saver, caught_up = False, None, None, False
        ended: set[str] = set()  # jobs the feed showed ended, not reported yet: read again each round
        try:
            async for listing in shared_stream:
                if not read:
                    read, cursor = await self._load_cursor()
                    if not read:
                        continue
                    self._log_start(cursor)
                if cursor is None:
                    cursor = await self._first_start(listing)
                    if cursor is not None:
                        await self._save_cursor(cursor)
                    caught_up = True
                    continue
                if saver is None:
                    saver = _SettledSaver(self, cursor)
                shown = listing.shown() if caught_up else None  # a (re)start lists: what ended while down
                told = None if shown is None else ended | cursor.saw(shown)
                found = await self._due(cursor, listing, told)
                if found is None:
                    continue  # the listing could not be read that far: the next one tries again
                due, running = found
                ended = (ended if told is None else told) - running
                caught_up = True
                payloads = {job.id: listing.summary(job) for job in due if job.status.value in self.statuses}
                for job in due:
                    if job.id not in payloads:
                        cursor.reported(job.id)
                        continue
                    payload = await payloads[job.id]
                    if payload is None:
                        continue  # stays pending: the next round tries again
                    self.log.info("Job %s of %s ended %s", job.id, self._watched(), payload["status"])
                    metrics.watcher_event(self.workflow_id, self.workflowsvc_conn_id, event_lag(job))
                    yield TriggerEvent(payload)
                    cursor.reported(job.id)
                    saver.handed(job.id)
                ended &= cursor.pending
                cursor.advance(listing.listed_at, self.max_lateness)
                await saver.save()
        finally:
            if saver is not None:
                saver.close()

    async def _first_start(self, listing: JobListing) -> JobCursor | None:
        """Start a cursor from the lateness window's and the unfinished jobs (those final: never reported)."""
        from airflow_provider_workflowsvc.triggers._job_cursor import JobCursor, _utc

        window = await listing.reaching(_utc(listing.listed_at - self.max_lateness))
        unfinished = await listing.unfinished() if window is not None else None
        if window is None or unfinished is None:
            return None
        self.log.info("Watching %s from now on", self._watched())
        return JobCursor.starting_at([*window, *unfinished], listing.listed_at, self.max_lateness)

    async def _due(
        self, cursor: JobCursor, listing: JobListing, ended: set[str] | None
    ) -> tuple[list[Job], set[str]] | None:
        """
        Return the jobs to report this round, and those read that still run (None: not readable now).
        Told by the feed (``ended``: the jobs it showed ended, not reported): each read from its record,
        which decides. Else the listing: the pending jobs it shows final, those it does not show read.
        """
        from airflow_provider_workflowsvc.models import Job

        running: set[str] = set()
        if ended is not None:
            due, reads = [], sorted(ended)
        else:
            jobs = await listing.reaching(cursor.horizon)
            if jobs is None:
                return None
            due, reads = cursor.due(jobs, listing.listed_at, self.max_lateness), cursor.unlisted(jobs)
        for job_id, job in zip(reads, await asyncio.gather(*map(listing.record, reads)), strict=True):
            if job == GONE:
                self.log.warning("Job %s is no longer known to the service; it is not reported", job_id)
                cursor.reported(job_id)
            elif isinstance(job, Job) and job.status.is_terminal:
                due.append(job)
            elif isinstance(job, Job):
                running.add(job_id)
        if ended is not None:  # oldest first, as a listing gives them: a hung summary holds only newer jobs
            due.sort(key=lambda job: job.created_at.timestamp() if job.created_at else 0.0)
        return due, running

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Without a shared stream (Airflow < 3.3): the same listings, on a stream of its own."""
        _, kwargs = self.serialize()
        async for event in self.filter_shared_stream(self.open_shared_stream(kwargs)):
            yield event

    # -- the cursor's home ---------------------------------------------------------------------------

    def _watched(self) -> str:
        return f"workflow {self.workflow_id}" if self.workflow_id else "every workflow"

    def _store(self) -> Any:
        """Return the watched asset's state store (Airflow 3.3+); None on older Airflow."""
        return getattr(self, "asset_state_store", None)

    async def _load_cursor(self) -> tuple[bool, JobCursor | None]:
        """``(read, cursor)``: the stored cursor (None: a first start); ``read`` False: try again later."""
        from airflow_provider_workflowsvc.triggers._job_cursor import JobCursor

        store = self._store()
        if store is None:
            return True, self._memory
        try:
            return True, JobCursor.from_json(await store.aget(self.cursor_key))
        except Exception as exc:  # never start from "now" just because the store did not answer
            self.log.warning("Could not read the job cursor (%s); trying again at the next listing", exc)
            return False, None

    def _log_start(self, cursor: JobCursor | None) -> None:
        """Say where the watch resumes after a (re)start: the saved cursor, or "now"."""
        if cursor is None:
            kept = (
                "in the asset state store" if self._store() is not None else "in memory only (Airflow < 3.3)"
            )
            self.log.info("No saved job cursor for %s (kept %s): starting from now", self._watched(), kept)
        else:
            self.log.info(
                "Resuming %s from the saved job cursor: %d job(s) created since %s known, %d job(s) seen but"
                " not reported yet",
                self._watched(),
                len(cursor.known),
                cursor.horizon.isoformat() if cursor.horizon else "none",
                len(cursor.pending),
            )

    async def _save_cursor(self, cursor: JobCursor, unsettled: Iterable[str] = ()) -> None:
        self._memory = cursor
        store = self._store()
        if store is None:
            return
        try:
            await store.aset(self.cursor_key, cursor.to_json(unsettled))
        except Exception as exc:  # the next listing saves it again
            self.log.warning("Could not save the job cursor to the asset state store: %s", exc)


def _lateness(value: Any) -> float:
    seconds = float(value)
    if not seconds > 0:
        raise ValueError(f"max_lateness must be a positive number of seconds, got {value!r}")
    return seconds


def event_lag(job: Job) -> float | None:
    """
    Seconds from ``job``'s end (``created_at`` + ``runtime``; without it ``created_at``: an upper
    bound) to now.
    """
    from airflow_provider_workflowsvc.wait.watch import job_run_time

    created = job.created_utc
    if created is None:
        return None
    ran = job_run_time(job)
    ended = created.timestamp() + (ran["job_seconds"] if ran.get("job_seconds_from") == "runtime" else 0.0)
    return max(0.0, time.time() - ended)


def _final_statuses(statuses: Iterable[str]) -> tuple[str, ...]:
    """Return the final statuses named (any spelling), canonical and sorted; others are an error."""
    from airflow_provider_workflowsvc.models import JobStatus

    names = [statuses] if isinstance(statuses, str) else list(statuses)
    parsed = {name: JobStatus(str(name)) for name in names}
    if not parsed or any(not status.is_terminal for status in parsed.values()):
        raise ValueError(f"statuses must be final job statuses ({', '.join(FINAL_STATUSES)}), got {names!r}")
    return tuple(sorted({status.value for status in parsed.values()}))
