"""Run an asset watcher's job-event trigger as a triggerer does, without one, and collect its events."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

__all__ = ["JobEventWatch", "MemoryAssetStore", "job_event_trigger", "job_event_triggers"]

FAST_POLL_INTERVAL = 0.05
"""Seconds between two listings of a watched workflow's jobs in a test (the DAG's own interval is for
production)."""
_MIN_POLL_ENV = "AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL"


def job_event_triggers(dag: Any) -> list[Any]:
    """
    Return the :class:`~airflow_provider_workflowsvc.triggers.job_events.WorkflowJobEventTrigger` of
    every asset watcher on the assets that schedule ``dag``: the DAG's wiring to the service's jobs.
    """
    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger

    condition = getattr(dag.timetable, "asset_condition", None)
    return [
        watcher.trigger
        for asset in _assets(condition)
        for watcher in getattr(asset, "watchers", None) or ()
        if isinstance(watcher.trigger, WorkflowJobEventTrigger)
    ]


def job_event_trigger(watched: Any, *, dag_id: str | None = None) -> Any:
    """
    Return the job-event trigger of ``watched``: a DAG (object, or the path of its file) scheduled on
    exactly one job-event watcher, or the trigger itself.
    """
    if isinstance(watched, (str, os.PathLike)):
        from airflow_provider_workflowsvc.testing.dag_runs import parse_dag_file

        _, watched = parse_dag_file(Path(watched).resolve(), dag_id)
    if not hasattr(watched, "timetable"):
        return watched
    triggers = job_event_triggers(watched)
    if len(triggers) != 1:
        raise AssertionError(
            f"DAG {watched.dag_id} is scheduled on {len(triggers)} job-event watcher(s), not one: "
            "pass the trigger itself"
        )
    return triggers[0]


def _assets(condition: Any) -> Iterator[Any]:
    """Yield the assets of a schedule's condition (``a | b & c``): the leaves of its ``objects`` tree."""
    if condition is None:
        return
    children = getattr(condition, "objects", None)
    if children is None:
        yield condition
        return
    for child in children:
        yield from _assets(child)


class MemoryAssetStore:
    """The asset state store a triggerer hands a watcher (Airflow 3.3), kept in memory (``values``)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


class JobEventWatch:
    """
    A job-event trigger running as the triggerer runs an asset watcher, on an event loop of its own.

    The trigger is rebuilt from its ``serialize()`` (what the triggerer stores and starts), with a short
    ``poll_interval``, an asset state store in memory, and no wait after an event before the cursor is
    saved. It reads its Airflow connection as the triggerer would (``AIRFLOW_CONN_<ID>``). Start it with
    :meth:`start` (or ``with``): it has then listed the jobs once and watches from that moment.
    """

    def __init__(self, trigger: Any, *, workflow_id: str | None = None, timeout: float = 60.0) -> None:
        """
        :param trigger: the watcher's trigger, e.g. from :func:`job_event_triggers`.
        :param workflow_id: watch this workflow instead of the trigger's own (a test's workflow).
        :param timeout: seconds after which waiting for events, or for the watch to start, fails.
        """
        _, kwargs = trigger.serialize()
        self.kwargs = {**kwargs, "poll_interval": FAST_POLL_INTERVAL}
        if workflow_id is not None:
            self.kwargs["workflow_id"] = str(workflow_id)
        self.trigger_class = type(trigger)
        self.timeout = timeout
        self._changed = threading.Condition()
        self._payloads: list[dict[str, Any]] = []
        self._taken = 0
        self._fetched = 0
        self._processed = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> JobEventWatch:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> JobEventWatch:
        """Start the trigger and wait until it listed the jobs once (the watch begins then)."""
        saved = os.environ.get(_MIN_POLL_ENV)
        os.environ[_MIN_POLL_ENV] = str(FAST_POLL_INTERVAL)  # the floor a trigger checks when made
        try:
            trigger = self.trigger_class(**self.kwargs)
        finally:
            if saved is None:
                os.environ.pop(_MIN_POLL_ENV, None)
            else:
                os.environ[_MIN_POLL_ENV] = saved
        trigger.asset_state_store = MemoryAssetStore()
        trigger.cursor_settle_seconds = 0.0
        self._thread = threading.Thread(target=self._serve, args=(trigger,), name="job-event-watch")
        self._thread.start()
        self._wait_for(lambda: self._processed >= 1, "the watch to list the jobs once")
        return self

    def events(self, count: int) -> list[dict[str, Any]]:
        """Wait for ``count`` more events and return their payloads (each job's summary)."""
        wanted = self._taken + count
        self._wait_for(lambda: len(self._payloads) >= wanted, f"{count} event(s)")
        with self._changed:
            taken, self._taken = self._payloads[self._taken : wanted], wanted
        return taken

    def settle(self) -> list[dict[str, Any]]:
        """
        Wait until the trigger has handled a listing of the jobs made after this call, and return the
        events it sent meanwhile (none: nothing more is due, for instance nothing twice).
        """
        with self._changed:
            target = self._fetched + 2  # the listing after the one that may be in flight now
        self._wait_for(lambda: self._processed >= target, "a listing made after this moment")
        with self._changed:
            taken, self._taken = self._payloads[self._taken :], len(self._payloads)
        return taken

    def stop(self) -> None:
        """Stop the trigger (as a triggerer does when the watcher goes away)."""
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(self.timeout)
            self._thread = None

    # -- the trigger's own event loop ------------------------------------------------------------------

    def _serve(self, trigger: Any) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._task = self._loop.create_task(self._watch(trigger))
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # reported by the waits of the test's thread
            with self._changed:
                self._error = exc
                self._changed.notify_all()
        finally:
            self._loop.close()

    async def _watch(self, trigger: Any) -> None:
        """Filter the shared stream of listings as the triggerer does (Airflow < 3.3: ``run()`` does)."""
        stream = self._counted(self.trigger_class.open_shared_stream(self.kwargs))
        async for event in trigger.filter_shared_stream(stream):
            with self._changed:
                self._payloads.append(dict(event.payload))
                self._changed.notify_all()

    async def _counted(self, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Pass the listings on; note each fetched, and each handled (once the next one is asked for)."""
        async for listing in stream:
            with self._changed:
                self._fetched += 1
            yield listing
            with self._changed:
                self._processed += 1
                self._changed.notify_all()

    def _wait_for(self, condition: Any, what: str) -> None:
        with self._changed:
            done = self._changed.wait_for(lambda: condition() or self._error is not None, self.timeout)
            if self._error is not None:
                raise AssertionError(f"the job-event trigger failed: {self._error!r}") from self._error
            if not done:
                raise AssertionError(
                    f"waited {self.timeout:g} s for {what}; the trigger sent {len(self._payloads)} "
                    f"event(s) in {self._processed} listing(s)"
                )
