"""
Job events (platform dialect): the notifications feed, derived from the jobs' own timelines.

No event is stored: an event is a status a job's record has entered (``JobRecord.transitions``), so the
feed at any instant shows exactly the changes ``GET /jobs/{id}`` has shown by then, each stamped with
the moment of the change. Its id is fixed by the job and the event type (each job enters each status at
most once), so read marks and webhook deliveries can name it. Read state is kept per credential (the
live service keeps it per user), as the ids marked read and ``before`` marks (per workflow or for all).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_provider_workflowsvc.emulator.clock import to_datetime
from airflow_provider_workflowsvc.emulator.dialect import job_status
from airflow_provider_workflowsvc.emulator.errors import ApiError, InvalidRequest
from airflow_provider_workflowsvc.emulator.schema import JobState

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.jobs import JobRecord
    from airflow_provider_workflowsvc.emulator.service import Service

__all__ = ["EVENT_TYPES", "Event", "Notifications", "event_types_field", "job_events", "reader_of"]

EVENT_TYPES: dict[JobState, str] = {
    JobState.SCHEDULED: "job.scheduled",
    JobState.IN_PROGRESS: "job.in_progress",
    JobState.COMPLETED: "job.completed",
    JobState.STOPPED: "job.stopped",
    JobState.FAILED: "job.failed",
}
MAX_MARKED_IDS = 100
_NAMESPACE = uuid.UUID("5c0f1d2e-8a3b-4c6d-9e7f-a1b2c3d4e5f6")
_MARK_ALL = "*"
_AUTH_HEADERS = ("unstructured-api-key", "authorization")


@dataclass(frozen=True)
class Event:
    """One status change of one job."""

    id: str
    event_type: str
    job_id: str
    workflow_id: str | None
    """The job's workflow; None for an on-demand job (account level: its workflow is temporary)."""
    status: JobState
    at: float
    rank: int
    job_created_at: float

    @property
    def key(self) -> tuple[float, int, str]:
        """Order of the feed (newest first is descending): time, then the job's own order of changes."""
        return (self.at, self.rank, self.job_id)

    @property
    def processing_time_ms(self) -> int:
        """Milliseconds from the job's creation to this change."""
        return max(0, round((self.at - self.job_created_at) * 1000))


def job_events(job: JobRecord, at: float) -> list[Event]:
    """Return the events of ``job`` visible at ``at``, oldest first."""
    workflow_id = None if job.on_demand else job.workflow_id
    return [
        Event(
            id=str(uuid.uuid5(_NAMESPACE, f"{job.id}/{EVENT_TYPES[state]}")),
            event_type=EVENT_TYPES[state],
            job_id=job.id,
            workflow_id=workflow_id,
            status=state,
            at=moment,
            rank=rank,
            job_created_at=job.created_at,
        )
        for rank, (state, moment) in enumerate(job.transitions(at))
    ]


def reader_of(headers: Mapping[str, str]) -> str:
    """Whose read state a request sees: a digest of the credential it presented (never the credential)."""
    credential = next((headers[h] for h in _AUTH_HEADERS if h in headers), "")
    return hashlib.sha256(credential.encode()).hexdigest()[:32]


def event_types_field(value: Any, loc: tuple[str, ...]) -> list[str]:
    """Return a list (or comma list) of event types, each one of the five; 422 otherwise."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise InvalidRequest.one(loc, "event_types must be a list of event types", "list_type")
    names = [i.strip() for i in items if i.strip()]
    unknown = [n for n in names if n not in EVENT_TYPES.values()]
    if unknown or not names:
        allowed = ", ".join(EVENT_TYPES.values())
        raise InvalidRequest.one(loc, f"event_types must be one or more of: {allowed}", "enum")
    return list(dict.fromkeys(names))


def _utc(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()


class FeedQuery(BaseModel):
    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True)

    workflow_id: uuid.UUID | None = None
    event_types: str | None = None
    since: datetime | None = None
    limit: int = Field(default=50, ge=1, le=100)
    cursor: str | None = None
    unread_only: bool = False


class MarkRead(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    notification_ids: list[uuid.UUID] | None = Field(default=None, max_length=MAX_MARKED_IDS)
    before: datetime | None = None
    mark_all: bool = False
    workflow_id: uuid.UUID | None = None


def _encode_cursor(key: tuple[float, int, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, int, str]:
    try:
        at, rank, job_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(at), int(rank), str(job_id)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidRequest.one(["query", "cursor"], "invalid cursor", "value_error") from None


class Notifications:
    """The feed and each credential's read state, over the service's jobs."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._ended: dict[str, list[Event]] = {}
        """The events of each ended job: they can no longer change, and a feed read over thousands of
        earlier jobs rebuilt them all (0.4-3.3 s an answer in the failover benchmark)."""

    def reset(self) -> None:
        """Forget the ended jobs' events (the service forgot its jobs)."""
        self._ended.clear()

    def events(self) -> tuple[list[Event], float]:
        """Every event visible now, newest first, and the emulator time they were read at."""
        jobs, now = self.service.timelines()
        events = [e for job in jobs for e in self._ended.get(job.id) or self._events_of(job, now)]
        events.sort(key=lambda e: e.key, reverse=True)
        return events, now

    def _events_of(self, job: JobRecord, now: float) -> list[Event]:
        events = job_events(job, now)
        if not events[-1].status.is_active:  # its last event is its end: no other can follow
            self._ended[job.id] = events
        return events

    def event_json(self, event: Event, read: bool) -> dict[str, Any]:
        status = job_status(event.status, self.service.dialect, "record")
        return {
            "id": event.id,
            "event_type": event.event_type,
            "payload": {"job_id": event.job_id, "status": status},
            "created_at": to_datetime(event.at).isoformat(),
            "workflow_id": event.workflow_id,
            "is_read": read,
        }

    # -- read state ------------------------------------------------------------------------------

    def _reads(self, reader: str) -> dict[str, Any]:
        return self.service.store.get("reads", reader) or {"ids": [], "marks": {}}

    @staticmethod
    def _is_read(reads: Mapping[str, Any], event: Event, ids: set[str]) -> bool:
        marks = reads["marks"]
        mark = max(marks.get(_MARK_ALL, 0.0), marks.get(event.workflow_id or "", 0.0))
        return event.id in ids or event.at < mark

    def _read_test(self, reader: str) -> Any:
        reads = self._reads(reader)
        ids = set(reads["ids"])
        return lambda event: self._is_read(reads, event, ids)

    # -- routes ----------------------------------------------------------------------------------

    def list(self, reader: str, query: Mapping[str, str]) -> dict[str, Any]:
        try:
            params = FeedQuery.model_validate({k: v for k, v in query.items() if v != ""})
        except ValidationError as exc:
            raise InvalidRequest.from_pydantic(exc, ("query",)) from None
        types = None
        if params.event_types is not None:
            types = set(event_types_field(params.event_types, ("query", "event_types")))
        after = None if params.cursor is None else _decode_cursor(params.cursor)
        since = None if params.since is None else _utc(params.since)
        workflow_id = None if params.workflow_id is None else str(params.workflow_id)
        events, now = self.events()
        is_read = self._read_test(reader)
        config = self.service.config
        chosen = [
            e
            for e in events
            if e.at + config.feed_lag.get(e.event_type, 0.0) <= now
            and (workflow_id is None or e.workflow_id == workflow_id)
            and (types is None or e.event_type in types)
            and (since is None or e.at >= since)
            and (after is None or e.key < after)
            and not (params.unread_only and is_read(e))
        ]
        page = chosen[: params.limit]
        more = len(chosen) > params.limit
        shown = [e for e in page for _ in range(2 if "duplicate" in config.feed_faults else 1)]
        order = -1 if "reorder" in config.feed_faults else 1
        return {
            "events": [self.event_json(e, is_read(e)) for e in shown[::order]],
            "next_cursor": _encode_cursor(page[-1].key) if more else None,
        }

    def get(self, reader: str, event_id: str) -> dict[str, Any]:
        events, _ = self.events()
        event = next((e for e in events if e.id == event_id), None)
        if event is None:
            raise ApiError(404, f"notification {event_id} not found")
        return self.event_json(event, self._read_test(reader)(event))

    def unread_count(self, reader: str, workflow_id: str | None) -> dict[str, Any]:
        events, _ = self.events()
        is_read = self._read_test(reader)
        count = sum(
            1 for e in events if (workflow_id is None or e.workflow_id == workflow_id) and not is_read(e)
        )
        return {"unread_count": count}

    def mark_read(self, reader: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Mark events read for this reader: ids (≤ 100), or all created ``before`` a time, or all."""
        try:
            request = MarkRead.model_validate(body)
        except ValidationError as exc:
            raise InvalidRequest.from_pydantic(exc, ("body",)) from None
        modes = [request.notification_ids is not None, request.before is not None, request.mark_all]
        if sum(modes) != 1:
            raise InvalidRequest.one(
                ["body"], "give exactly one of notification_ids, before or mark_all", "value_error"
            )
        if request.workflow_id is not None and request.notification_ids is not None:
            raise InvalidRequest.one(
                ["body", "workflow_id"], "workflow_id is valid only with before or mark_all", "value_error"
            )
        events, now = self.events()
        reads = self._reads(reader)
        was_read = self._read_test(reader)
        if request.notification_ids is not None:
            wanted = {str(i) for i in request.notification_ids}
            reads["ids"] = sorted(set(reads["ids"]) | {e.id for e in events if e.id in wanted})
        else:
            # "before" a time no later than now: events that appear later are not marked in advance
            mark = min(_utc(request.before), now) if request.before is not None else now + 1e-6
            scope = _MARK_ALL if request.workflow_id is None else str(request.workflow_id)
            reads["marks"][scope] = max(reads["marks"].get(scope, 0.0), mark)
        self.service.store.put("reads", reader, reads)
        now_read = self._read_test(reader)
        return {"marked_count": sum(1 for e in events if now_read(e) and not was_read(e))}
