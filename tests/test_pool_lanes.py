"""The shared client's lanes after a request that did not end cleanly (real httpcore, real loopback server).

A cancellation (a wait's deadline, the shared listing's time limit, a trigger cancelled by Airflow) can
land inside httpcore's own clean-up of a response: its shield does not hold against ``Task.cancel``, so
the connection stays counted as busy. The lane must not be handed out again: the next request on it
would wait for that connection until its wait's deadline (seen under fault injection, issue #27).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpcore
import httpx
import pytest

from airflow_provider_workflowsvc.hooks import _pool

# The owner suite of hooks/_pool.py: run on every Airflow of the matrix (./dev), a release gate.
pytestmark = pytest.mark.pool


LANE_LIMIT = 10.0
"""Long enough that no request of a busy machine is cut by it."""
HEALTH = "/jobs/"
Http11 = httpcore._async.http11.AsyncHTTP11Connection


@pytest.fixture
async def client(emulator: Any) -> AsyncIterator[httpx.AsyncClient]:
    """One lane, as a pool whose every request takes the same connection."""
    lanes = _pool._Lanes(1, overflow=0, lane_limit=LANE_LIMIT)
    with emulator.api_client() as api:
        headers = dict(api.headers)
    async with httpx.AsyncClient(transport=lanes, base_url=emulator.base_url, headers=headers) as client:
        yield client


async def test_a_close_cut_short_renews_its_lanes_connection(
    client: httpx.AsyncClient, monkeypatch: Any
) -> None:
    """The first request is cancelled inside httpcore's close of its response; the next one is served
    over a new connection (httpcore's pool would wait for the busy one, then fail: ``PoolTimeout``)."""
    closing = asyncio.Event()
    response_closed = Http11._response_closed

    async def stuck_close(self: Any) -> None:
        closing.set()
        await asyncio.sleep(3600)  # the cancellation lands here, inside httpcore's clean-up
        await response_closed(self)

    monkeypatch.setattr(Http11, "_response_closed", stuck_close)
    first = asyncio.ensure_future(client.get(HEALTH))
    await asyncio.wait_for(closing.wait(), 60)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled()
    monkeypatch.setattr(Http11, "_response_closed", response_closed)
    lanes = client._transport
    assert isinstance(lanes, _pool._Lanes)
    old = lanes._lanes[0]._pool._connection  # type: ignore[attr-defined]

    response = await asyncio.wait_for(client.get(HEALTH), 60)
    assert response.status_code == 200  # not a PoolTimeout: no wait for the old connection
    assert lanes._lanes[0]._pool._connection is not old  # type: ignore[attr-defined]
    assert old.is_closed()


async def test_a_lane_found_busy_is_served_over_a_new_connection(
    client: httpx.AsyncClient, monkeypatch: Any
) -> None:
    """A lane whose connection is busy behind its back (its close skipped) serves the next request over a
    new connection at once and closes the old one: nothing waits for a connection that may never free."""
    response_closed = Http11._response_closed

    async def skipped_close(self: Any) -> None:
        return None  # the connection stays counted as busy

    monkeypatch.setattr(Http11, "_response_closed", skipped_close)
    assert (await client.get(HEALTH)).status_code == 200
    monkeypatch.setattr(Http11, "_response_closed", response_closed)
    lanes = client._transport
    assert isinstance(lanes, _pool._Lanes)
    busy = lanes._lanes[0]._pool._connection  # type: ignore[attr-defined]
    assert busy is not None
    assert not busy.is_idle()

    patient = httpx.Timeout(30.0, pool=3600.0)  # with httpcore's pool it would wait for the connection
    assert (await asyncio.wait_for(client.get(HEALTH, timeout=patient), 60)).status_code == 200
    assert busy.is_closed()
    assert lanes._lanes[0]._pool._connection is not busy  # type: ignore[attr-defined]


async def test_a_request_first_in_line_takes_the_next_free_lane() -> None:
    """Every lane busy, two requests waiting: one made ``first_in_line`` (a shared listing, issue #43)
    takes the next lane given back; the others keep their order after it."""
    lanes = _pool._Lanes(1, overflow=0)
    busy = await lanes._take(None)
    order: list[str] = []

    async def take(name: str) -> None:
        lane = await lanes._take(None)
        order.append(name)
        lanes._give_back(lane)

    waiting = [asyncio.ensure_future(take("first")), asyncio.ensure_future(take("second"))]
    await asyncio.sleep(0)  # both are waiting now
    with _pool.first_in_line():
        listing = asyncio.ensure_future(take("listing"))
    await asyncio.sleep(0)
    lanes._give_back(busy)
    await asyncio.gather(listing, *waiting)
    assert order == ["listing", "first", "second"]
    await lanes.aclose()
