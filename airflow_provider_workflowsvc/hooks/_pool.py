"""
The async hooks' shared ``httpx.AsyncClient`` (per event loop and settings), its connections ("lanes"),
and the async driver :func:`asend`. Why: docs/decisions/wire.md ("The triggerer's connection pool").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import os
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpcore
import httpx

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc.hooks._exchange import ApiCall, _Body, _Send, _Sleep, exchange
from airflow_provider_workflowsvc.hooks._failures import LaneTimeLimit
from airflow_provider_workflowsvc.hooks._settings import KEEPALIVE_EXPIRY, ConnectionSettings

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook

T = TypeVar("T")

_PROXY_ENV = tuple(
    name for s in ("http", "https", "all", "no") for name in (f"{s}_proxy", f"{s.upper()}_PROXY")
)
"""The proxy variables an ``httpx.AsyncClient`` reads, looked up by name (0.07 ms a hook against 0.62 ms for
``urllib.request.getproxies()``, measured for #44)."""


@dataclass(frozen=True, repr=False)
class _ClientKey:
    """What makes two hooks' requests differ (settings, TLS, proxies); its repr names the base URL only."""

    settings: ConnectionSettings
    verify: ssl.SSLContext
    proxies: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, settings: ConnectionSettings) -> _ClientKey:
        environ = os.environ
        return cls(
            settings, settings.ssl_verify(), tuple((k, environ[k]) for k in _PROXY_ENV if k in environ)
        )

    def __repr__(self) -> str:
        return f"_ClientKey(base_url={self.settings.base_url!r})"


LANE_TIME_LIMIT = 1.0
"""Seconds a read (GET) may hold a lane before its answer begins; then it moves to the overflow."""


class _Lanes(httpx.AsyncBaseTransport):
    """
    ``size`` single-connection transports ("lanes"), and an ``overflow`` of more for reads that hang: a GET
    unanswered after ``lane_limit`` moves there, or is cut when it is full (:class:`LaneTimeLimit`).
    A lane's connection is renewed when a request finds it not idle (:class:`_OneConnection`; wire.md).
    """

    def __init__(
        self,
        size: int,
        *,
        overflow: int | None = None,
        lane_limit: float = LANE_TIME_LIMIT,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        self._verify = verify
        self._lanes = [self._new_lane() for _ in range(size)]
        self._free = list(reversed(self._lanes))
        self._waiters: collections.deque[asyncio.Future[httpx.AsyncHTTPTransport]] = collections.deque()
        self.overflow = size if overflow is None else overflow
        self.lane_limit = lane_limit
        self._overflowing: set[httpx.AsyncHTTPTransport] = set()
        self._closing: set[asyncio.Task[None]] = set()

    def _new_lane(self) -> httpx.AsyncHTTPTransport:
        lane = httpx.AsyncHTTPTransport(verify=self._verify or True)
        lane._pool = _OneConnection(self._verify)  # type: ignore[assignment]  # httpx's transport, our pool
        return lane

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        lane = await self._take(timeouts.get("pool"))
        hold = _Hold(self, lane)
        timer = (
            asyncio.get_running_loop().call_later(self.lane_limit, hold.expire)
            if request.method == "GET"
            else None
        )
        try:
            response = await lane.handle_async_request(request)
        except asyncio.CancelledError:
            hold.release(clean=False)
            if not hold.cut:
                raise
            hold.uncancel()
            raise LaneTimeLimit(
                f"no answer within {self.lane_limit:g} s while all {self.overflow} overflow connections "
                "were held by reads that hang; not retried (a wait polls again)",
                request=request,
            ) from None
        except BaseException:
            hold.release(clean=False)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        response.stream = _GiveBackOnClose(response.stream, hold)
        return response

    def _move_to_overflow(self, lane: httpx.AsyncHTTPTransport) -> bool:
        if len(self._overflowing) >= self.overflow:
            return False
        self._overflowing.add(lane)
        replacement = self._new_lane()
        self._lanes[self._lanes.index(lane)] = replacement
        self._give_back(replacement)
        return True

    def _leave_overflow(self, lane: httpx.AsyncHTTPTransport) -> None:
        task = asyncio.get_running_loop().create_task(self._close(lane))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        task.add_done_callback(lambda _: self._overflowing.discard(lane))

    async def _close(self, lane: httpx.AsyncHTTPTransport) -> None:
        with contextlib.suppress(Exception):
            await wait_at_most(lane.aclose(), self.lane_limit)

    async def _take(self, timeout: float | None) -> httpx.AsyncHTTPTransport:
        if self._free:
            return self._free.pop()  # the most recently used: idle connections stay few
        waiter: asyncio.Future[httpx.AsyncHTTPTransport] = asyncio.get_running_loop().create_future()
        if _FIRST_IN_LINE.get():
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            return await wait_at_most(waiter, timeout)
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
        for lane in [*self._lanes, *self._overflowing]:
            await lane.aclose()
        await asyncio.gather(*self._closing, return_exceptions=True)  # overflow connections closing


class _OneConnection:
    """
    A lane's connection, in place of httpcore's pool: renewed when it is not idle (a close skipped or cut
    short), has expired (keep-alive, the server closed it) or points elsewhere; never waited for.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        self._ssl_context, self._keepalive_expiry = ssl_context, KEEPALIVE_EXPIRY
        self._connection: httpcore.AsyncHTTPConnection | None = None

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        connection = self._connection
        if connection is None or not _reusable(connection, request.url.origin):
            if connection is not None:
                await connection.aclose()
            connection = self._connection = httpcore.AsyncHTTPConnection(
                request.url.origin, ssl_context=self._ssl_context, keepalive_expiry=self._keepalive_expiry
            )
        return await connection.handle_async_request(request)

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.aclose()


def _reusable(connection: httpcore.AsyncHTTPConnection, origin: httpcore.Origin) -> bool:
    return connection.is_idle() and not connection.has_expired() and connection.can_handle_request(origin)


_FIRST_IN_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("first_in_line", default=False)


@contextlib.contextmanager
def first_in_line() -> Iterator[None]:
    """Put the requests of this block (and its tasks) first in line for a lane: a shared listing's."""
    token = _FIRST_IN_LINE.set(True)
    try:
        yield
    finally:
        _FIRST_IN_LINE.reset(token)


class _Hold:
    """One request's hold on a lane: given back when its response closes, or moved to the overflow."""

    __slots__ = ("cut", "lane", "lanes", "moved", "released", "task")

    def __init__(self, lanes: _Lanes, lane: httpx.AsyncHTTPTransport) -> None:
        self.lanes, self.lane, self.task = lanes, lane, asyncio.current_task()
        self.moved = self.cut = self.released = False

    def expire(self) -> None:
        if self.released or self.moved:
            return
        self.moved = self.lanes._move_to_overflow(self.lane)
        metrics.read_moved_to_overflow(self.moved)
        if not self.moved and self.task is not None:
            self.cut = True
            self.task.cancel()

    def uncancel(self) -> None:
        """Take back the cancellation :meth:`expire` asked for (Python 3.11+ counts them)."""
        uncancel = getattr(self.task, "uncancel", None)
        if uncancel is not None:
            uncancel()

    def release(self, clean: bool = True) -> None:
        if self.released:
            return
        self.released = True
        if self.moved:
            self.lanes._leave_overflow(self.lane)
            return
        if not clean:
            metrics.lane_retired()  # its connection, renewed by the lane's next request
        self.lanes._give_back(self.lane)


class _GiveBackOnClose(httpx.AsyncByteStream):
    """A response body that gives its lane back when it is closed."""

    def __init__(self, stream: Any, hold: _Hold) -> None:
        self._stream, self._hold = stream, hold

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # the body's own iterator: no extra generator per chunk

    async def aclose(self) -> None:
        clean = False
        try:
            await self._stream.aclose()
            clean = True
        finally:
            self._hold.release(clean)  # a close cut short (cancelled) may leave the connection busy: renewed


async def wait_at_most(awaitable: Awaitable[T], seconds: float | None) -> T:
    """
    Await ``awaitable`` for at most ``seconds`` (None: no limit; past it ``asyncio.TimeoutError``). Unlike
    ``asyncio.wait_for`` before Python 3.12, a cancel that meets the answer is never lost (gh-86296): a
    cancelled trigger stops instead of waiting on.
    """
    if seconds is None:
        return await awaitable
    if _async_timeout is not None:  # Python 3.11+
        async with _async_timeout(seconds):
            return await awaitable
    task = asyncio.ensure_future(awaitable)  # Python 3.10: a cancel of this task reaches the await below
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    finally:
        if not task.done():
            task.cancel()
    if not done:
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise asyncio.TimeoutError
    return task.result()


_async_timeout: Any = getattr(asyncio, "timeout", None)


@dataclass
class _SharedClient:
    client: httpx.AsyncClient
    users: int = 0


_SHARED_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_ClientKey, _SharedClient]] = (
    weakref.WeakKeyDictionary()
)


def _acquire_client(settings: ConnectionSettings) -> tuple[_ClientKey, httpx.AsyncClient]:
    """Return the running loop's client for ``settings`` (created if none) with its key; one more user."""
    key = _ClientKey.of(settings)
    clients = _SHARED_CLIENTS.setdefault(asyncio.get_running_loop(), {})
    shared = clients.get(key)
    if shared is None or shared.client.is_closed:
        lanes = _Lanes(settings.max_connections, lane_limit=LANE_TIME_LIMIT, verify=key.verify)
        shared = clients[key] = _SharedClient(httpx.AsyncClient(**settings.httpx_options(), transport=lanes))
    shared.users += 1
    return key, shared.client


def _release_client(loop: asyncio.AbstractEventLoop, key: _ClientKey, client: httpx.AsyncClient) -> bool:
    """Count one user out; True when the caller is to close ``client`` (its last user)."""
    clients = _SHARED_CLIENTS.get(loop, {})
    shared = clients.get(key)
    if shared is None or shared.client is not client:  # not shared (any more): it is this hook's alone
        return True
    shared.users -= 1
    if shared.users > 0:
        return False
    del clients[key]
    return True


def shared_client_users() -> list[tuple[str, int]]:
    """List the running loop's shared clients, each as (base URL, number of hooks using it)."""
    clients = _SHARED_CLIENTS.get(asyncio.get_running_loop(), {})
    return [(key.settings.base_url, shared.users) for key, shared in clients.items()]


# --------------------------------------------------------------------------------------------------
# The async driver: the async hook's ``_send`` (beside the lanes it waits on)


async def asend(
    hook: WorkflowServiceAsyncHook, call: ApiCall[T], retries: bool = True, operation: str = ""
) -> T:
    """:func:`~._exchange.send` with the shared client (an endpoint method runs it in a task of its own)."""
    transport, client = await hook._aconnection()
    steps = exchange(transport, call, retries, operation)
    answer: Any = None
    error: BaseException | None = None
    opened: httpx.Response | None = None
    try:
        while True:
            try:
                step = steps.throw(error) if error is not None else steps.send(answer)
            except StopIteration as done:
                return done.value
            answer = error = None
            try:
                if isinstance(step, _Send):
                    if opened is not None:
                        await opened.aclose()
                    opened = answer = await client.send(client.build_request(**step.request), stream=True)
                elif isinstance(step, _Body):
                    read = 0
                    async for chunk in step.response.aiter_bytes():
                        read += len(chunk)
                        if step.sink(chunk) or (step.most is not None and read >= step.most):
                            break
                elif isinstance(step, _Sleep):
                    await hook._sleep(step.seconds)
                else:
                    answer = (
                        await hook._atransport() if await hook._reread_refused(step.refused) else hook._unread
                    )
                    client = await hook.get_async_conn()
            except Exception as exc:
                error = exc
    finally:
        steps.close()
        if opened is not None:
            await opened.aclose()
