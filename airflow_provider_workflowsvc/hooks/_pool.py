"""
The ``httpx.AsyncClient`` shared by the async hooks of one event loop with the same settings.

One bounded pool of connections ("lanes") per client: a triggerer's waiting triggers do not open a
connection each. The client is closed when the last hook using it is.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from airflow_provider_workflowsvc.hooks._settings import KEEPALIVE_EXPIRY, ConnectionSettings

T = TypeVar("T")

_CLIENT_ENV = (
    *(f"{scheme}_proxy" for scheme in ("http", "https", "all", "no")),
    *(f"{scheme}_PROXY" for scheme in ("HTTP", "HTTPS", "ALL", "NO")),
    *("SSL_CERT_FILE", "SSL_CERT_DIR"),
)
"""
Environment variables an ``httpx.AsyncClient`` reads when it is created: the proxies it uses (http,
https, all, no; in the two usual spellings) and the CA files. Looked up by name: scanning the whole
environment for every hook was a visible share of a trigger's start.
"""


@dataclass(frozen=True, repr=False)
class _ClientKey:
    """
    Everything that makes two hooks' requests differ: the settings (credentials included, compared
    by value) and the environment a client reads when created (proxies, CA files).

    Its repr names the base URL only: the credentials and a proxy URL's password never show.
    """

    settings: ConnectionSettings
    env: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, settings: ConnectionSettings) -> _ClientKey:
        environ = os.environ
        return cls(settings, tuple((k, environ[k]) for k in _CLIENT_ENV if k in environ))

    def __repr__(self) -> str:
        return f"_ClientKey(base_url={self.settings.base_url!r})"


class _Lanes(httpx.AsyncBaseTransport):
    """
    A pool of ``size`` connections made of single-connection transports ("lanes").

    A request takes a free lane, or waits for one (first come, first served) up to its pool timeout
    (``httpx.PoolTimeout``), and gives it back when its response is closed. httpx's own pool, at each
    request's start and end, re-examines every connection it holds (a system call each) and every
    request queued in it: shared by a thousand triggers, that was most of the CPU of a poll. Taking and
    giving back a lane costs the same whatever the number of connections and waiters.
    """

    def __init__(self, size: int, **options: Any) -> None:
        limits = httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_EXPIRY
        )
        self._lanes = [httpx.AsyncHTTPTransport(limits=limits, **options) for _ in range(size)]
        self._free = list(reversed(self._lanes))
        self._waiters: collections.deque[asyncio.Future[httpx.AsyncHTTPTransport]] = collections.deque()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lane = await self._take(request.extensions.get("timeout", {}).get("pool"))
        try:
            response = await lane.handle_async_request(request)
        except BaseException:
            self._give_back(lane)
            raise
        response.stream = _GiveBackOnClose(response.stream, functools.partial(self._give_back, lane))
        return response

    async def _take(self, timeout: float | None) -> httpx.AsyncHTTPTransport:
        if self._free:
            return self._free.pop()  # the most recently used: idle connections stay few
        waiter: asyncio.Future[httpx.AsyncHTTPTransport] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await _within_seconds(waiter, timeout)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._give_back(waiter.result())  # handed over just as the wait ended
            else:
                waiter.cancel()
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout(f"no free connection within {timeout:g} s") from None
            raise

    def _give_back(self, lane: httpx.AsyncHTTPTransport) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(lane)
                return
        self._free.append(lane)

    async def aclose(self) -> None:
        for lane in self._lanes:
            await lane.aclose()


class _GiveBackOnClose(httpx.AsyncByteStream):
    """A response body that gives its lane back when it is closed (once)."""

    def __init__(self, stream: Any, give_back: Callable[[], None]) -> None:
        self._stream, self._give_back = stream, give_back

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # the body's own iterator: no extra generator per chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            give_back, self._give_back = self._give_back, _nothing
            give_back()


def _nothing() -> None:
    return None


async def _within_seconds(future: asyncio.Future[T], timeout: float | None) -> T:
    """``await future``, for at most ``timeout`` seconds (None: no limit); ``TimeoutError`` after."""
    if timeout is None:
        return await future
    if _async_timeout is None:  # Python 3.10
        return await asyncio.wait_for(future, timeout)
    async with _async_timeout(timeout):
        return await future


_async_timeout: Any = getattr(asyncio, "timeout", None)


@dataclass
class _SharedClient:
    client: httpx.AsyncClient
    users: int = 0


_SHARED_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_ClientKey, _SharedClient]] = (
    weakref.WeakKeyDictionary()
)


def _acquire_client(key: _ClientKey) -> _SharedClient:
    """Return the running loop's client for ``key`` (created if there is none), with one more user."""
    clients = _SHARED_CLIENTS.setdefault(asyncio.get_running_loop(), {})
    shared = clients.get(key)
    if shared is None or shared.client.is_closed:
        settings = key.settings
        lanes = _Lanes(settings.max_connections, verify=settings.ssl_verify())
        shared = clients[key] = _SharedClient(httpx.AsyncClient(**settings.httpx_options(), transport=lanes))
    shared.users += 1
    return shared


async def _release_client(
    loop: asyncio.AbstractEventLoop, key: _ClientKey, client: httpx.AsyncClient
) -> None:
    """
    One user fewer; the last one closes the client.

    The count drops before anything is awaited, so a hook cancelled while releasing is still counted out.
    """
    clients = _SHARED_CLIENTS.get(loop, {})
    shared = clients.get(key)
    if shared is None or shared.client is not client:  # not shared (any more): it is this hook's alone
        await client.aclose()
        return
    shared.users -= 1
    if shared.users > 0:
        return
    del clients[key]
    await client.aclose()


def shared_client_users() -> list[tuple[str, int]]:
    """List the running loop's shared clients, each as (base URL, number of hooks using it)."""
    clients = _SHARED_CLIENTS.get(asyncio.get_running_loop(), {})
    return [(key.settings.base_url, shared.users) for key, shared in clients.items()]
