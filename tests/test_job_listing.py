"""A job listing read item by item (hooks/_listing.py): what is kept, when reading stops, what it learns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
import respx

from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError, WorkflowServiceResponseError
from airflow_provider_workflowsvc.hooks import _listing
from airflow_provider_workflowsvc.hooks._listing import NEWEST_FIRST_EVIDENCE, JobItems
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)

BASE = "https://listing.test/api/v1"
T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def unknown_order() -> Iterator[None]:
    """Each test starts with the service's order unknown (the fact is per process and base URL)."""
    _listing._newest_first.pop(BASE, None)
    yield
    _listing._newest_first.pop(BASE, None)


def item(n: int, minutes: float | None = None, **extra: Any) -> dict[str, Any]:
    created = None if minutes is None else (T0 + timedelta(minutes=minutes)).isoformat()
    return {"id": f"job-{n}", "status": "COMPLETED", "created_at": created, **extra}


def newest_first(count: int) -> list[dict[str, Any]]:
    """``count`` jobs one minute apart, newest first (job-0 is the oldest)."""
    return [item(n, n) for n in reversed(range(count))]


def read(body: bytes, since: datetime | None, piece: int, limit: int = 1 << 20) -> JobItems:
    def fail(detail: str) -> Exception:
        return WorkflowServiceResponseError("GET", "/api/v1/jobs/", 200, detail)

    items = JobItems(BASE, since, learn=True, limit=limit, fail=fail)
    for start in range(0, len(body), piece):
        if items.add(body[start : start + piece]):
            break
    return items


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 10_000])
def test_every_way_of_cutting_the_body_gives_the_same_jobs(piece: int) -> None:
    jobs = [item(1, 5, workflow_name="é ✓ 名前"), item(2, 4), item(3, None), item(4, 3)]
    body = json.dumps(jobs, indent=1).encode()
    listing = read(body, T0 + timedelta(minutes=4), piece).listing()
    assert listing is not None
    assert [job.id for job in listing] == ["job-1", "job-2", "job-3"], "since 4 min; the undated one stays"
    assert listing[0].workflow_name == "é ✓ 名前"


def test_unreadable_items_are_skipped_by_their_place_and_the_rest_kept(caplog: Any) -> None:
    body = json.dumps([item(1, 2), {"status": "COMPLETED"}, 7, item(4, 1)]).encode()
    listing = read(body, None, 5).listing()
    assert listing is not None
    assert [job.id for job in listing] == ["job-1", "job-4"]
    assert listing.skipped == [{"status": "COMPLETED"}, 7]
    assert "Skipped item 1 of a Job listing" in caplog.text
    assert "Skipped item 2 of a Job listing" in caplog.text


def test_reading_stops_past_the_time_asked_for_only_once_the_order_is_known() -> None:
    body = json.dumps(newest_first(50)).encode()
    since = T0 + timedelta(minutes=45)
    first = read(body, since, 100)
    assert [job.id for job in first.listing() or []] == [f"job-{n}" for n in (49, 48, 47, 46, 45)]
    assert first.complete, "the order is not known yet: read to the end"
    assert not first.stopped
    assert _listing.lists_newest_first(BASE)
    again = read(body, since, 100)
    assert again.stopped, "known newest first: two older jobs in a row end the reading"
    assert [job.id for job in again.listing() or []] == [f"job-{n}" for n in (49, 48, 47, 46, 45)]


def test_a_short_listing_proves_no_order() -> None:
    read(json.dumps(newest_first(NEWEST_FIRST_EVIDENCE - 1)).encode(), None, 100).listing()
    assert not _listing.lists_newest_first(BASE)
    read(json.dumps(newest_first(NEWEST_FIRST_EVIDENCE)).encode(), None, 100).listing()
    assert _listing.lists_newest_first(BASE)


def test_a_listing_out_of_order_is_read_to_its_end_and_unlearns_the_order() -> None:
    read(json.dumps(newest_first(20)).encode(), None, 100).listing()
    assert _listing.lists_newest_first(BASE)
    oldest_first = list(reversed(newest_first(20)))
    since = T0 + timedelta(minutes=15)
    items = read(json.dumps(oldest_first).encode(), since, 100)
    assert not items.stopped
    assert sorted(job.id for job in items.listing() or []) == sorted(f"job-{n}" for n in range(15, 20))
    assert not _listing.lists_newest_first(BASE)


def test_the_limit_bounds_what_is_kept_not_what_is_read_past() -> None:
    body = json.dumps(newest_first(400)).encode()
    small = len(json.dumps(newest_first(20)))
    items = read(body, T0 + timedelta(minutes=395), 512, limit=small)
    assert len(items.listing() or []) == 5, "the 395 older jobs were dropped unread: no memory for them"
    with pytest.raises(WorkflowServiceResponseError, match="max_response_bytes"):
        read(body, None, 512, limit=small)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'[{"id": "j1", "status": "COMPL', "not JSON"),
        (b'[{"id": "j1"} {"id": "j2"}]', "not JSON"),
        (b'[{"id": "j1"}] trailing', "not JSON"),
    ],
)
def test_a_broken_list_is_an_unexpected_body(body: bytes, error: str) -> None:
    with pytest.raises(WorkflowServiceResponseError, match=error):
        read(body, None, 4).listing()


# --------------------------------------------------------------------------------------------------
# Through the hooks


class CountedBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body in small pieces that counts the pieces read."""

    def __init__(self, body: bytes, piece: int = 256) -> None:
        self.pieces = [body[i : i + piece] for i in range(0, len(body), piece)]
        self.read = 0

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.pieces:
            self.read += 1
            yield piece

    async def __aiter__(self) -> Any:
        for piece in self.pieces:
            self.read += 1
            yield piece


def settings() -> ConnectionSettings:
    return ConnectionSettings(base_url=BASE, token="tok-listing-1")


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_hooks_read_a_known_newest_first_listing_only_down_to_created_since(kind: str) -> None:
    body = json.dumps(newest_first(300)).encode()
    bodies: list[CountedBody] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(CountedBody(body))
        return httpx.Response(200, stream=bodies[-1], headers={"content-type": "application/json"})

    since = T0 + timedelta(minutes=297)
    with respx.mock(assert_all_called=True) as router:
        router.get(f"{BASE}/jobs/").mock(side_effect=answer)
        if kind == "sync":
            with WorkflowServiceHook(settings=settings()) as hook:
                first = hook.list_jobs(created_since=since)
                second = hook.list_jobs(created_since=since)
        else:
            async with WorkflowServiceAsyncHook(settings=settings()) as ahook:
                first = await ahook.list_jobs(created_since=since)
                second = await ahook.list_jobs(created_since=since)
    assert [j.id for j in first] == [j.id for j in second] == ["job-299", "job-298", "job-297"]
    assert bodies[0].read == len(bodies[0].pieces), "order unknown: the whole listing"
    assert bodies[1].read <= 3, f"{bodies[1].read} of {len(bodies[1].pieces)} pieces read"


def test_created_since_must_be_a_datetime_and_a_naive_one_is_utc() -> None:
    from airflow_provider_workflowsvc.hooks._calls import Endpoints

    with pytest.raises(WorkflowServiceInputError, match="created_since must be a datetime"):
        Endpoints.list_jobs.build(created_since="yesterday")
    call = Endpoints.list_jobs.build(created_since=datetime(2026, 3, 1, 12))
    assert call.created_since == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert call.params is None, "nothing of it is sent: the service has no such filter"
