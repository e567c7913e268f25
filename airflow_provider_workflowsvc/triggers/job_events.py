"""Event trigger for asset watchers: one event per job of a workflow that reaches a final status."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Hashable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.models import Job

log = logging.getLogger(__name__)

FINAL_STATUSES = ("completed", "completed with errors", "failed", "stopped")
"""The statuses reported by default: every final status of a job."""
FAILED_FILES_IN_EVENT = 20
"""Failed files listed in an event's payload (``failed_count`` has them all)."""
SUMMARY_BUDGET = 60.0
"""Seconds the requests for one job's summary may take before the next listing tries again."""
CURSOR_KEY_PREFIX = "workflowsvc_job_events"
"""Asset state store key of a watcher's cursor (never rename it: a renamed key restarts the cursor)."""


# --------------------------------------------------------------------------------------------------
# The cursor: which jobs were already reported


@dataclass
class JobCursor:
    """
    What a watcher has seen of its workflow's jobs; it survives a restart in the asset state store.

    A job is *new* when it was created after ``watermark`` (or at it, but not among ``at_watermark``).
    ``pending`` holds the jobs seen before they were reported: unfinished ones, and finished ones whose
    event is not out yet. A job is *due* (its event is sent) when it is new and already final, or
    pending and final now. The cursor stays small: jobs leave ``pending`` once reported.
    """

    watermark: datetime | None = None
    at_watermark: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    _undated: set[str] = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def starting_at(cls, jobs: Iterable[Job]) -> JobCursor:
        """Start a cursor at a first start: the jobs listed now and already final are never reported."""
        cursor = cls()
        for job in cursor._dated(jobs):
            cursor._see(job)
            if not job.status.is_terminal:
                cursor.pending.add(job.id)
        return cursor

    def due(self, jobs: Iterable[Job]) -> list[Job]:
        """Return the jobs that finished since the cursor last saw them (oldest first); note new ones."""
        due: list[Job] = []
        for job in self._dated(jobs):
            if self._is_new(job):
                self._see(job)
                self.pending.add(job.id)
            if job.id in self.pending and job.status.is_terminal:
                due.append(job)
        return due

    def reported(self, job_id: str) -> None:
        """Record that ``job_id``'s event is out (or that it is not wanted): never report it again."""
        self.pending.discard(job_id)

    def _is_new(self, job: Job) -> bool:
        created = job.created_utc
        assert created is not None
        if self.watermark is None or created > self.watermark:
            return True
        return created == self.watermark and job.id not in self.at_watermark

    def _see(self, job: Job) -> None:
        created = job.created_utc
        assert created is not None
        if self.watermark is None or created > self.watermark:
            self.watermark, self.at_watermark = created, set()
        self.at_watermark.add(job.id)

    def _dated(self, jobs: Iterable[Job]) -> list[Job]:
        """Return the jobs in creation order; an undated job cannot be placed: skipped (warned once)."""
        dated = []
        for job in jobs:
            if job.created_utc is not None:
                dated.append(job)
            elif job.id not in self._undated:
                self._undated.add(job.id)
                log.warning("Job %s has no created_at; it cannot be ordered and is not reported", job.id)
        return sorted(dated, key=lambda job: (job.created_utc, job.id))

    def to_json(self) -> dict[str, Any]:
        return {
            "watermark": None if self.watermark is None else self.watermark.isoformat(),
            "at_watermark": sorted(self.at_watermark),
            "pending": sorted(self.pending),
        }

    @classmethod
    def from_json(cls, value: Any) -> JobCursor | None:
        """Read a stored cursor; None when there is none, or it cannot be read (a new start, warned)."""
        if value is None:
            return None
        try:
            mark = value["watermark"]
            return cls(
                watermark=None if mark is None else datetime.fromisoformat(mark),
                at_watermark={str(i) for i in value["at_watermark"]},
                pending={str(i) for i in value["pending"]},
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("The stored job cursor %r cannot be read (%s); starting from now", value, exc)
            return None


# --------------------------------------------------------------------------------------------------
# The stream: one listing per interval, shared by the watchers of one workflow


class JobSummaries:
    """
    The event payloads of finished jobs, fetched once per job for every watcher of the stream.

    A summary that could not be fetched (the service answered badly, or the job's details still say it
    runs) is fetched again with the next listing, once for all watchers.
    """

    def __init__(self, hook: WorkflowServiceAsyncHook) -> None:
        self._hook = hook
        self._fetches: dict[str, tuple[int, asyncio.Task[dict[str, Any] | None]]] = {}

    async def of(self, job: Job, listing: int) -> dict[str, Any] | None:
        """Return ``job``'s summary; None: not available yet (try again with a later listing)."""
        known = self._fetches.get(job.id)
        if known is None or (known[0] != listing and not _succeeded(known[1])):
            known = (listing, asyncio.ensure_future(self._fetch(job)))
            self._fetches[job.id] = known
        return await asyncio.shield(known[1])

    def forget_all_but(self, job_ids: set[str]) -> None:
        """Drop the summaries of jobs the service no longer lists (bounded memory)."""
        for job_id in [j for j in self._fetches if j not in job_ids]:
            del self._fetches[job_id]

    async def _fetch(self, job: Job) -> dict[str, Any] | None:
        from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
        from airflow_provider_workflowsvc.wait.poll import apoll_once, survive_transient
        from airflow_provider_workflowsvc.wait.watch import JobWatch

        watch = JobWatch(job.id, log)
        try:
            with deadline(time.time() + SUMMARY_BUDGET):
                outcome = await apoll_once(self._hook, watch)
        except Exception as exc:
            try:
                survive_transient(exc, log, f"Job {job.id}: reading its summary", retry="next listing")
            except Exception:
                log.exception(
                    "Job %s finished, but its summary cannot be read; reporting the listing's", job.id
                )
                return job_summary(job, None, error=f"{type(exc).__name__}: {exc}")
            return None
        if outcome is None:
            log.info("Job %s is listed as %s, but its details do not say so yet", job.id, job.raw_status)
            return None
        return job_summary(job, outcome.summary(fail_on_failed_files=False))


def _succeeded(task: asyncio.Task[dict[str, Any] | None]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None and task.result() is not None


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


@dataclass(frozen=True)
class JobListing:
    """One raw event of the stream: the jobs listed at one poll, and where to get their summaries."""

    number: int
    jobs: list[Job]
    summaries: JobSummaries


# --------------------------------------------------------------------------------------------------
# The trigger


class WorkflowJobEventTrigger(BaseEventTrigger):
    """
    Report each job of a workflow that reaches a final status: for ``Asset(watchers=[AssetWatcher(...)])``.

    Every ``poll_interval`` seconds the trigger lists the workflow's jobs (``GET /jobs/?workflow_id=``,
    or every job of the connection without ``workflow_id``). Each job that reaches one of ``statuses``
    after the watch began gives exactly one event, whose payload is the job's summary: ``job_id``,
    ``workflow_id``, ``workflow_name``, ``status``, ``created_at``, ``documents_written``,
    ``failed_count``, ``failed_files`` (the first :data:`FAILED_FILES_IN_EVENT`) and ``message``. The
    DAG scheduled on the asset reads it from ``triggering_asset_events[asset][i].extra["payload"]``.
    Jobs that had finished when the watch first started are not reported.

    Bad answers and outages are survived as waits survive them (:func:`~.wait.poll.is_transient`):
    the listing, or a job's summary, is tried again at the next interval.

    Airflow 3.3+: the cursor (which jobs were reported) is kept in the asset state store, so jobs that
    finished while the triggerer was down are reported on restart, none twice; and the watchers of one
    connection and workflow share one listing per interval (``shared_stream_key``). Airflow 3.0-3.2
    have no store: each start of the trigger begins from "now" (jobs that finished while it was down
    are not reported; none is reported twice). See the provider docs' "Event-driven scheduling".

    :param workflow_id: the workflow whose jobs to report; None: every job of the connection.
    :param workflowsvc_conn_id: the Workflow Service connection.
    :param poll_interval: seconds between two listings.
    :param statuses: the final statuses to report (default: all of them); a finished job in another
        status is passed over silently.
    """

    cursor_settle_seconds = 5.0
    """Seconds the cursor is saved after the events of a listing were handed to the triggerer: by
    then they are in the database, so a crash can repeat an event only within this window."""

    def __init__(
        self,
        *,
        workflow_id: str | None = None,
        workflowsvc_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 60.0,
        statuses: Iterable[str] | None = None,
    ) -> None:
        from airflow_provider_workflowsvc.operators._base import interval_seconds

        super().__init__()
        self.workflow_id = str(workflow_id) if workflow_id else None
        self.workflowsvc_conn_id = workflowsvc_conn_id
        self.poll_interval = interval_seconds(poll_interval, "poll_interval")
        self.statuses = _final_statuses(FINAL_STATUSES if statuses is None else statuses)
        self._memory: JobCursor | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "workflow_id": self.workflow_id,
                "workflowsvc_conn_id": self.workflowsvc_conn_id,
                "poll_interval": self.poll_interval,
                "statuses": list(self.statuses),
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
        """List the jobs now, then every ``poll_interval`` seconds; yield each listing (forever)."""
        from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, deadline
        from airflow_provider_workflowsvc.wait.poll import survive_transient

        workflow_id, interval = kwargs.get("workflow_id"), float(kwargs.get("poll_interval") or 60.0)
        what = f"Listing the jobs of workflow {workflow_id}" if workflow_id else "Listing the jobs"
        async with WorkflowServiceAsyncHook(kwargs.get("workflowsvc_conn_id") or DEFAULT_CONN_ID) as hook:
            summaries, number = JobSummaries(hook), 0
            while True:
                try:
                    with deadline(time.time() + max(interval, SUMMARY_BUDGET)):
                        jobs = await hook.list_jobs(workflow_id=workflow_id)
                except Exception as exc:
                    survive_transient(exc, log, what, retry="next interval")
                else:
                    number += 1
                    summaries.forget_all_but({job.id for job in jobs})
                    yield JobListing(number, jobs, summaries)
                await asyncio.sleep(interval)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """Turn the listings into this watcher's events: the jobs its own cursor has not reported."""
        read, cursor = False, None
        async for listing in shared_stream:
            if not read:
                read, cursor = await self._load_cursor()
                if not read:
                    continue
                self._log_start(cursor)
            if cursor is None:
                cursor = JobCursor.starting_at(listing.jobs)
                self.log.info("Watching %s from now on", self._watched())
                await self._save_cursor(cursor)
                continue
            emitted = False
            for job in cursor.due(listing.jobs):
                if job.status.value not in self.statuses:
                    cursor.reported(job.id)
                    continue
                payload = await listing.summaries.of(job, listing.number)
                if payload is None:
                    continue  # stays pending: the next listing tries again
                self.log.info("Job %s of %s ended %s", job.id, self._watched(), payload["status"])
                yield TriggerEvent(payload)
                cursor.reported(job.id)
                emitted = True
            if emitted:
                await asyncio.sleep(self.cursor_settle_seconds)
            await self._save_cursor(cursor)

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
            return
        newest = cursor.watermark.isoformat() if cursor.watermark else "none yet"
        self.log.info(
            "Resuming %s from the saved job cursor: newest job seen created at %s (%d job(s) at that time),"
            " %d job(s) seen but not reported yet",
            self._watched(),
            newest,
            len(cursor.at_watermark),
            len(cursor.pending),
        )

    async def _save_cursor(self, cursor: JobCursor) -> None:
        self._memory = cursor
        store = self._store()
        if store is None:
            return
        try:
            await store.aset(self.cursor_key, cursor.to_json())
        except Exception as exc:  # the next listing saves it again
            self.log.warning("Could not save the job cursor to the asset state store: %s", exc)


def _final_statuses(statuses: Iterable[str]) -> tuple[str, ...]:
    """Return the final statuses named (any spelling), canonical and sorted; others are an error."""
    from airflow_provider_workflowsvc.models import JobStatus

    names = [statuses] if isinstance(statuses, str) else list(statuses)
    parsed = {name: JobStatus(str(name)) for name in names}
    if not parsed or any(not status.is_terminal for status in parsed.values()):
        raise ValueError(f"statuses must be final job statuses ({', '.join(FINAL_STATUSES)}), got {names!r}")
    return tuple(sorted({status.value for status in parsed.values()}))
