"""
One status poll per workflow: the waits of a triggerer on jobs of one workflow share one listing.

Jobs without a workflow to list them by (on-demand jobs: each runs on a temporary workflow of its own)
share one listing of all the account's active jobs: the poll of workflow ``None``. A wait given only its
job learns the workflow from the job's own record, at its first poll, and joins that workflow's poll
(:class:`Joining`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
import zlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc.hooks._pool import first_in_line
from airflow_provider_workflowsvc.hooks.workflowsvc import deadline
from airflow_provider_workflowsvc.models import JobStatus
from airflow_provider_workflowsvc.wait.poll import is_transient

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook
    from airflow_provider_workflowsvc.models import Job
    from airflow_provider_workflowsvc.wait.watch import JobWatch, PollSchedule

SHARE_FROM = 3
"""Waits on one workflow from which they share its listing; fewer poll each job, as a lone wait always
did (a listing of one or two statuses would cost as much as their own polls)."""
FRESH_FOR = 0.5
"""A listing answers the polls that come due while it is under way, and up to this share of their
interval after it started: the waits of a workflow deferred at different moments need at most two
listings per interval. It is also the time a listing gets at first (its patience)."""
ANSWER_ROOM = 2.0
"""A listing's patience once one answered: this many times as long as the last one took (at least
``FRESH_FOR`` of an interval). A uniformly slow service is waited for; its waits are slowed, not sent to
poll their own jobs (which would cost a request each, as slow)."""
PATIENCE_MAX = 4
"""Intervals a listing may be given at most: one cut by its patience doubles the next one's up to this
(a hung listing delays a wait's own poll at most this long; the own poll every ``OWN_POLL_EVERY``)."""
ACTIVE_LISTED = (JobStatus.IN_PROGRESS, JobStatus.SCHEDULED)
"""The statuses listed, in this order; ``scheduled`` only while some wait has not seen its job start
(the hook spells each filter as the service spells statuses)."""

ANSWER_GRACE = 0.2
"""Seconds past a listing's limit the other waits of its round still wait for its answer."""
OWN_POLL_EVERY = 4
"""Every this many polls a wait polls its own job even while the listing shows it active: a listing
that lags (a stale replica, a cache) holds no job past this many intervals after the job's own record
shows its end."""

_log = logging.getLogger(__name__)

Listed = dict[str, "Job"]
"""A listing: the workflow's jobs it showed, by id (``None`` in its place: the listing failed)."""


class _Round:
    """One listing of a workflow's active jobs: when it started, and its answer once there."""

    def __init__(self, limit: float) -> None:
        self.started = time.monotonic()
        self.limit = limit
        """Seconds the listing may take (its workflow's patience when it started)."""
        self.answer: asyncio.Future[Listed | None] = asyncio.get_running_loop().create_future()

    async def awaited(self) -> Listed | None:
        """Return the answer, for a wait that did not start the listing (``None``: it is late)."""
        if self.answer.done():
            return self.answer.result()
        late = self.started + self.limit + ANSWER_GRACE - time.monotonic()
        try:
            return await asyncio.wait_for(asyncio.shield(self.answer), timeout=max(late, 0.0))
        except asyncio.TimeoutError:
            return None  # its starter is stuck: this wait polls its own job

    def serves(self, interval: float) -> bool:
        """Whether a poll due now at ``interval`` may take this listing's answer: under way, or fresh."""
        return not self.answer.done() or time.monotonic() - self.started <= FRESH_FOR * interval

    def settle(self, listed: Listed | None) -> None:
        if not self.answer.done():
            self.answer.set_result(listed)


class WorkflowPoll:
    """
    The waits of one event loop on jobs of one workflow, through one shared client: one listing of the
    workflow's active jobs answers the polls of all of them that come due while it is fresh.

    A job the listing shows as scheduled or in progress has not ended: its wait learns its status and
    sends nothing, except at every ``OWN_POLL_EVERY``-th poll, which is its own whatever the listing
    says (a listing can lag behind the job's record). Any other job (not shown: it has ended, the list
    is capped, its item was unreadable; or shown in another status) is polled on its own, exactly as a
    lone wait polls (details, then the job record and its failed files). A failed listing leaves every
    wait of that round to its own poll; one the service refuses (not a transient failure) ends the
    sharing for this workflow.
    """

    def __init__(self, workflow_id: str | None) -> None:
        self.workflow_id = workflow_id
        """The workflow whose active jobs are listed; None: all the account's active jobs."""
        self.waits: dict[int, JobWatch] = {}
        self._listed_polls: dict[int, int] = {}
        """Per wait: its polls answered by the listing since its last own poll."""
        self._round: _Round | None = None
        self._patience = 0.0
        """Seconds the next listing gets (0: ``FRESH_FOR`` of an interval): follows the service's answers."""
        self.refused = False
        """The service refused a listing (say, its status filter): every wait polls its own job."""

    @property
    def shared(self) -> bool:
        return not self.refused and len(self.waits) >= SHARE_FROM

    async def shows_active(
        self, hook: WorkflowServiceAsyncHook, watch: JobWatch, schedule: PollSchedule
    ) -> bool:
        """
        Whether a fresh listing shows ``watch``'s job scheduled or in progress (its status is then
        recorded, and its own poll is not needed). The last poll before the deadline is always the
        job's own: the wait's final word is never older than the moment it is taken; so is every
        ``OWN_POLL_EVERY``-th.
        """
        key = id(watch)
        listed_polls = self._listed_polls.get(key, _stagger(watch.job_id))
        if self.shared and not schedule.final and listed_polls < OWN_POLL_EVERY - 1:
            listed = await self._listing(hook, schedule)
            job = listed.get(watch.job_id) if listed is not None else None
            if job is not None and job.status.is_active:
                watch.observe(None, job)
                self._listed_polls[key] = listed_polls + 1
                metrics.shared_poll_served(self.workflow_id, hook.workflowsvc_conn_id)
                return True
        self._listed_polls[key] = 0
        return False

    async def _listing(self, hook: WorkflowServiceAsyncHook, schedule: PollSchedule) -> Listed | None:
        """Return the answer of a listing fresh for this poll: one under way or just done, or a new one."""
        current = self._round
        if current is not None and current.serves(schedule.interval):
            return await current.awaited()  # one under way answers every poll due meanwhile
        self._round = current = _Round(max(self._patience, FRESH_FOR * schedule.interval))
        try:
            current.settle(await self._list(hook, schedule, current.limit))
        finally:
            current.settle(None)  # cancelled (its wait ended): the others poll on their own
        return await current.answer

    async def _list(
        self, hook: WorkflowServiceAsyncHook, schedule: PollSchedule, limit: float
    ) -> Listed | None:
        """List the workflow's active jobs (``None``: the listing failed) within ``limit`` seconds."""
        started = time.monotonic()
        try:
            with deadline(min(schedule.cutoff, time.time() + limit)), first_in_line():
                listed = await asyncio.wait_for(self._list_active(hook), timeout=limit)
        except Exception as exc:
            metrics.shared_listing(self.workflow_id, hook.workflowsvc_conn_id, failed=True)
            took = time.monotonic() - started
            if took >= limit / 2:  # cut, or nearly, by its patience: the next one gets twice as long
                self._learn(2 * limit, schedule.interval)
            self._listing_failed(exc)
            return None
        metrics.shared_listing(self.workflow_id, hook.workflowsvc_conn_id)
        self._learn(ANSWER_ROOM * (time.monotonic() - started), schedule.interval)
        return listed

    def _learn(self, patience: float, interval: float) -> None:
        self._patience = min(patience, PATIENCE_MAX * interval)

    def answered_in(self, seconds: float, interval: float) -> None:
        """Give no listing less room than a request answered in ``seconds`` (a joining wait's first read)."""
        if ANSWER_ROOM * seconds > self._patience:
            self._learn(ANSWER_ROOM * seconds, interval)

    async def _list_active(self, hook: WorkflowServiceAsyncHook) -> Listed:
        listed: Listed = {}
        for status in self._statuses():
            for job in await hook.list_jobs(workflow_id=self.workflow_id, status=status):
                listed.setdefault(job.id, job)
        return listed

    def _statuses(self) -> tuple[JobStatus, ...]:
        """In progress always; scheduled too while some wait has not seen its job in progress yet."""
        if all(w.status is JobStatus.IN_PROGRESS for w in self.waits.values()):
            return ACTIVE_LISTED[:1]
        return ACTIVE_LISTED

    @property
    def _listed(self) -> str:
        if self.workflow_id is None:
            return "the account's active jobs"
        return f"the active jobs of workflow {self.workflow_id}"

    def _listing_failed(self, exc: Exception) -> None:
        if is_transient(exc):
            _log.warning("Listing %s failed (%s); its waits poll their own jobs this time", self._listed, exc)
            return
        self.refused = True
        _log.warning("Listing %s failed (%s); its waits poll their own jobs from now on", self._listed, exc)


def _stagger(job_id: str) -> int:
    """
    Return where a wait starts counting to its own poll: the waits of one workflow (often started
    together) take their own polls in different rounds, ``1 / OWN_POLL_EVERY`` of them each round.
    """
    return zlib.crc32(job_id.encode()) % OWN_POLL_EVERY


_POLLS: weakref.WeakKeyDictionary[Any, dict[str | None, WorkflowPoll]] = weakref.WeakKeyDictionary()
"""The shared polls of each shared HTTP client (one per event loop and connection settings), by workflow."""


@asynccontextmanager
async def sharing(
    hook: WorkflowServiceAsyncHook, workflow_id: str | None, watch: JobWatch
) -> AsyncIterator[WorkflowPoll]:
    """
    Register ``watch`` with the shared poll of its workflow (None: of the account's on-demand jobs),
    created if none, until the block ends; the wait passes it to :func:`~.poll.await_job`.
    """
    polls = _POLLS.setdefault(await hook.get_async_conn(), {})
    poll = polls.get(workflow_id)
    if poll is None:
        poll = polls[workflow_id] = WorkflowPoll(workflow_id)
    poll.waits[id(watch)] = watch
    try:
        yield poll
    finally:
        del poll.waits[id(watch)]
        poll._listed_polls.pop(id(watch), None)
        if not poll.waits and polls.get(workflow_id) is poll:
            del polls[workflow_id]


class Joining:
    """
    The shared poll of a wait that knows only its job (a sensor, a trigger built by user code): its first
    poll reads the job's record, which names the job's workflow; the wait then shares that workflow's
    listing with the other waits on it, as a wait given the workflow does. A record that names no
    workflow leaves the wait to poll its own job.
    """

    def __init__(self, stack: AsyncExitStack) -> None:
        self._stack = stack
        self._poll: WorkflowPoll | None = None
        self._alone = False

    async def shows_active(
        self, hook: WorkflowServiceAsyncHook, watch: JobWatch, schedule: PollSchedule
    ) -> bool:
        """
        :meth:`WorkflowPoll.shows_active` once the workflow is known; the first poll reads the record
        (its status then stands for that poll), the last before the deadline is always the job's own.
        """
        if self._poll is not None:
            return await self._poll.shows_active(hook, watch, schedule)
        if self._alone or schedule.final:
            return False
        started = time.monotonic()
        job = await hook.get_job(watch.job_id)
        if job.workflow_id:
            self._poll = await self._stack.enter_async_context(sharing(hook, job.workflow_id, watch))
            self._poll.answered_in(time.monotonic() - started, schedule.interval)
        else:
            self._alone = True
        if not job.status.is_active:
            return False  # ended, or a status nobody knows: its own poll reads it in full
        watch.observe(None, job)
        return True


@asynccontextmanager
async def joining(hook: WorkflowServiceAsyncHook, watch: JobWatch) -> AsyncIterator[Joining]:
    """Yield the shared poll ``watch`` joins once its job's record names the workflow (left at the end)."""
    async with AsyncExitStack() as stack:
        yield Joining(stack)
