"""
Hooks for the Workflow Service: authentication and one method per endpoint, sync and async.

Both hooks get their methods from one table of endpoint descriptions (:mod:`._calls`); they differ only
in how a request is sent (``httpx.Client`` or ``httpx.AsyncClient``). A sync hook keeps one HTTP client
(one connection pool) for its whole life. Async hooks in one event loop with the same connection settings
share one ``httpx.AsyncClient`` (one bounded pool: a triggerer's waiting triggers do not open a
connection each); it is closed when its last hook is. Close a hook with ``close()`` / ``aclose()`` or use
it as a context manager.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import random
import re
import secrets
import socket
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, Generic, ParamSpec, TypeVar, overload
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base

from airflow_provider_workflowsvc._compat import CONN_FIELDS_READ, BaseHook
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceApiError,
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceInputError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    error_for_status,
    format_validation_errors,
)
from airflow_provider_workflowsvc.hooks import CONN_TYPE, DEFAULT_CONN_ID, _calls
from airflow_provider_workflowsvc.hooks._calls import ApiCall, ResponseShapeError
from airflow_provider_workflowsvc.models import Job, Workflow

if TYPE_CHECKING:
    from airflow.sdk import Connection

__all__ = ["ConnectionSettings", "WorkflowServiceAsyncHook", "WorkflowServiceHook", "deadline"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
MAX_REDIRECTS = 3
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The default cap on a JSON answer (extra ``max_response_bytes``): far above any real list or record."""
DEFAULT_MAX_CONNECTIONS = 20
"""The default cap on the connections of one pool (extra ``max_connections``); async hooks share a pool."""
KEEPALIVE_EXPIRY = 120.0
"""Seconds an idle connection is kept: longer than the default poll interval, so a wait reuses one."""
_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("airflow-provider-workflowsvc")
    except Exception:
        return "unknown"


class ConnectionSettings(BaseModel):
    """
    Where the service is and how to talk to it; built from an Airflow connection or directly.

    ``verify`` is a boolean or the path of a CA bundle file (or directory); ``max_retries`` bounds the
    retries of one request, ``retry_wait`` is the first backoff (doubled each time, with jitter) and
    ``retry_max_wait`` caps every wait, including one asked for by ``Retry-After``;
    ``max_response_bytes`` caps an answer read into memory (a download to a file is not capped);
    ``max_connections`` caps the open connections of one client, shared by the async hooks that use the
    same settings in one event loop (a request waits for a free one, within its timeout).
    The token and API key must be printable ASCII (a pasted line break is refused, never shown).
    """

    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    base_url: str
    token: SecretStr | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(default=60.0, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    verify: bool | str = True
    max_retries: int = Field(default=5, ge=0, le=20)
    retry_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=60.0, ge=0)
    max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, ge=1024)
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1, le=1000)

    @field_validator("base_url")
    @classmethod
    def _normalize_base_url(cls, value: str) -> str:
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL such as https://host/api/v1")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "must not carry credentials (user:password@): put the token in the password field"
            )
        if parts.query or parts.fragment:
            raise ValueError("must not have a query string or fragment")
        try:
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise ValueError("has an invalid port") from None
        path = parts.path.rstrip("/") or "/api/v1"
        return urlunsplit((parts.scheme, parts.netloc, path, "", ""))

    @field_validator("token", "api_key", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            value = value.strip()
            _check_header_safe(value, _CREDENTIAL_FIELDS[info.field_name or ""])
            return value or None
        return value

    @field_validator("verify", mode="before")
    @classmethod
    def _parse_verify(cls, value: Any) -> Any:
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _TRUE_WORDS:
                return True
            if word in _FALSE_WORDS:
                return False
            if not os.path.exists(os.path.expanduser(value.strip())):
                raise ValueError(
                    "must be true, false, or the path of an existing CA bundle file or directory"
                )
            return os.path.expanduser(value.strip())
        return value

    @classmethod
    def from_connection(cls, conn: Connection) -> ConnectionSettings:
        """
        Read host (base URL), password (token) and extras (api_key, timeouts, TLS, retries).

        ``ca_bundle`` (a CA file or directory) is used for ``verify`` unless verify is false. Extras
        may also carry the ``extra__workflowsvc__`` prefix older connection forms wrote.
        """
        try:
            extra = _extras_of(conn)
            values = {k: v for k, v in extra.items() if k in _EXTRA_SETTINGS and v not in (None, "")}
            ca_bundle = extra.get("ca_bundle")
            if ca_bundle and cls._parse_verify(values.get("verify", True)) is not False:
                values["verify"] = str(ca_bundle)
            return cls(
                base_url=_base_url_of(conn, extra),
                token=conn.password or None,
                api_key=extra.get("api_key") or None,
                **values,
            )
        except ValidationError as exc:
            details = format_validation_errors(exc.errors(include_input=False, include_url=False))
            raise WorkflowServiceInputError(
                f"connection {conn.conn_id!r} is misconfigured: {details}"
            ) from None
        except ValueError as exc:
            raise WorkflowServiceInputError(f"connection {conn.conn_id!r} is misconfigured: {exc}") from None

    def headers(self) -> dict[str, str]:
        """Authentication headers: Bearer token and/or ``service-api-key``, whichever are set."""
        headers = {"accept": "application/json", "user-agent": f"airflow-provider-workflowsvc/{_version()}"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token.get_secret_value()}"
        if self.api_key is not None:
            headers["service-api-key"] = self.api_key.get_secret_value()
        return headers

    def secrets(self) -> tuple[str, ...]:
        """The credential values, to scrub from any text that leaves the hook."""
        return tuple(s.get_secret_value() for s in (self.token, self.api_key) if s is not None)

    def ssl_verify(self) -> ssl.SSLContext:
        """
        ``verify`` as an SSL context, shared by every client with the same setting.

        Building a context loads the CA bundle (~50 ms); hooks are created often (one per task, one
        per trigger poll), so contexts are cached per setting. A CA bundle path becomes a context
        (httpx deprecates ``verify=<path>``).
        """
        ca_env = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        try:
            return _ssl_context(self.verify, ca_env)
        except (ssl.SSLError, OSError) as exc:
            raise WorkflowServiceInputError(
                f"cannot load the CA certificates for TLS verification ({self.verify!r}): {exc}"
            ) from None

    def httpx_options(self) -> dict[str, Any]:
        """Keyword arguments shared by ``httpx.Client`` and ``httpx.AsyncClient``."""
        return {
            "base_url": self.base_url + "/",
            "headers": self.headers(),
            "timeout": httpx.Timeout(self.timeout, connect=self.connect_timeout),
            "verify": self.ssl_verify(),
            "follow_redirects": False,
            "limits": httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            ),
        }


_CREDENTIAL_FIELDS = {"token": "password (token)", "api_key": "api_key"}
_UNSAFE_HEADER_CHARS = re.compile(r"[\x00-\x1f\x7f]|[^\x00-\x7f]")


def _check_header_safe(value: str, where: str) -> None:
    """
    Refuse a credential an HTTP header cannot carry, naming where it came from and never its value.

    httpx would refuse it only when the request is sent, with an error that quotes the header.
    """
    found = _UNSAFE_HEADER_CHARS.search(value)
    if found is None:
        return
    char = found.group()
    kind = {"\r": "a carriage return (CR)", "\n": "a line feed (LF)", "\x00": "a NUL character"}.get(
        char, "a control character" if char.isascii() else "a non-ASCII character"
    )
    raise ValueError(
        f"the connection's {where} contains {kind}; a credential must be printable ASCII "
        "(was a line break pasted with it?)"
    )


@functools.lru_cache(maxsize=16)
def _ssl_context(verify: bool | str, ca_env: tuple[str | None, str | None]) -> ssl.SSLContext:
    if isinstance(verify, bool):
        return httpx.create_ssl_context(verify=verify)
    if os.path.isdir(verify):
        return ssl.create_default_context(capath=verify)
    return ssl.create_default_context(cafile=verify)


_EXTRA_SETTINGS = frozenset(
    {
        *("timeout", "connect_timeout", "verify", "max_retries", "retry_wait", "retry_max_wait"),
        *("max_response_bytes", "max_connections"),
    }
)
_EXTRA_PREFIX = f"extra__{CONN_TYPE}__"


def _extras_of(conn: Connection) -> dict[str, Any]:
    extra = conn.extra_dejson or {}
    if not isinstance(extra, dict):
        raise ValueError("extra must be a JSON object")
    plain = {k: v for k, v in extra.items() if not k.startswith(_EXTRA_PREFIX)}
    prefixed = {k[len(_EXTRA_PREFIX) :]: v for k, v in extra.items() if k.startswith(_EXTRA_PREFIX)}
    # A plain key wins over the prefixed spelling of the same setting, unless it is empty.
    return {**prefixed, **{k: v for k, v in plain.items() if v not in (None, "") or k not in prefixed}}


def _base_url_of(conn: Connection, extra: dict[str, Any]) -> str:
    """The base URL from host (with or without scheme), port, schema and the ``protocol`` extra."""
    host = (conn.host or "").strip()
    if not host:
        raise ValueError("host is empty: set it to the service's base URL, e.g. https://host/api/v1")
    if "://" not in host:
        scheme = str(extra.get("protocol") or "https").strip().lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"protocol must be http or https, got {scheme!r}")
        host = f"{scheme}://{host}"
    parts = urlsplit(host)
    netloc = parts.netloc
    if conn.port and ":" not in netloc.rsplit("]", 1)[-1]:
        netloc = f"{netloc}:{conn.port}"
    path = parts.path
    if path in ("", "/"):
        path = "/" + ((conn.schema or "").strip("/") or "api/v1")
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def _min_masked_length() -> int:
    try:
        from airflow_provider_workflowsvc._compat import conf

        return max(1, conf.getint("logging", "min_length_masked_secret", fallback=5))
    except Exception:  # pragma: no cover - no configuration available
        return 5


def _mask_secrets(settings: ConnectionSettings) -> None:
    """Register the credentials with Airflow's log masker (a no-op outside a task process)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDK
        return
    for secret in settings.secrets():
        mask_secret(secret)


# --------------------------------------------------------------------------------------------------
# Async clients shared by the hooks of one event loop


_CLIENT_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR")
"""Environment variables (besides ``*_proxy``) an ``httpx.AsyncClient`` reads when it is created."""


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
        env = tuple(
            sorted((k, v) for k, v in os.environ.items() if k.lower().endswith("_proxy") or k in _CLIENT_ENV)
        )
        return cls(settings, env)

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

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

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
    """The running loop's client for ``key`` (created if there is none), with one more user."""
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
    """The running loop's shared clients, each as (base URL, number of hooks using it)."""
    clients = _SHARED_CLIENTS.get(asyncio.get_running_loop(), {})
    return [(key.settings.base_url, shared.users) for key, shared in clients.items()]


# --------------------------------------------------------------------------------------------------
# Deadlines


_DEADLINE: ContextVar[float | None] = ContextVar("workflowsvc_deadline", default=None)


@contextlib.contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """
    Every hook request made in this block ends by ``at`` (epoch seconds; None: no deadline).

    Each request's connect, read, write and pool timeouts are cut to the time left; a retry is not
    waited for when it could not start before ``at``; a request due after ``at`` is not sent (a
    :class:`WorkflowServiceConnectionError` with ``sent=False``). Inside the block it replaces any
    enclosing deadline (a cancel sent when a wait ends has a budget of its own). Context-local: it
    applies to the current thread or asyncio task (and the tasks it starts).
    """
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class _StopAtDeadline(stop_base):
    """Retry stop: the next attempt could not start (after its backoff) before the deadline."""

    def __call__(self, retry_state: RetryCallState) -> bool:
        at = _DEADLINE.get()
        return at is not None and time.time() + retry_state.upcoming_sleep >= at


# --------------------------------------------------------------------------------------------------
# Interpreting responses (shared by both hooks)


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _cut(text: str, limit: int) -> str:
    return text[:limit] + ("…" if len(text) > limit else "")


def _error_detail(response: httpx.Response, redact: Callable[[str], str]) -> str:
    """
    The server's explanation: FastAPI ``detail`` (string or list) or ``message``, else the raw text.

    Credentials are redacted before the text is cut to length, so none can leak in part across the cut.
    """
    try:
        body = response.json()
    except ValueError:
        return _cut(redact(response.text.strip()), 300)
    if isinstance(body, dict):
        detail = body.get("detail", body.get("message", body.get("error")))
        if isinstance(detail, list):
            items = [d if isinstance(d, dict) else {"msg": str(d)} for d in detail]
            return redact(format_validation_errors(items))
        if detail is not None:
            return _cut(redact(str(detail)), 1000)
    return _cut(redact(str(body)), 300)


def _parse_body(call: ApiCall[T], path: str, response: httpx.Response, redact: Callable[[str], str]) -> T:
    if not call.wants_body:
        return call.parse(None)
    try:
        data = response.json() if response.content else None
    except ValueError:
        snippet = _cut(redact(response.text.replace("\n", " ")), 120)
        raise WorkflowServiceResponseError(
            call.method, path, response.status_code, f"not JSON ({len(response.content)} bytes): {snippet!r}"
        ) from None
    try:
        return call.parse(data)
    except ResponseShapeError as exc:
        raise WorkflowServiceResponseError(call.method, path, response.status_code, str(exc)) from None


class _BodyCap:
    """
    Reads a response body chunk by chunk, failing as soon as it grows past ``max_response_bytes``.

    The body is kept on the response (as ``Response.read()`` does), so it is parsed as usual.
    """

    def __init__(self, transport: _Transport, method: str, path: str, response: httpx.Response) -> None:
        self._transport, self._method, self._path, self._response = transport, method, path, response
        self._limit = transport.settings.max_response_bytes
        self._body = bytearray()
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            raise self._too_large(f"declares {int(declared)} bytes")

    def add(self, chunk: bytes) -> None:
        self._body += chunk
        if len(self._body) > self._limit:
            raise self._too_large(f"passed {self._limit} bytes and was not read further")

    def done(self) -> None:
        self._response._content = bytes(self._body)  # what Response.read() stores

    def _too_large(self, how: str) -> WorkflowServiceResponseError:
        return WorkflowServiceResponseError(
            self._method,
            self._transport.full_path(self._path),
            self._response.status_code,
            f"the answer {how}, more than max_response_bytes ({self._limit}); raise that connection "
            "extra if such answers are expected",
        )


def is_retryable(call: ApiCall[Any], exc: BaseException) -> bool:
    """
    Whether ``call`` may be sent again after ``exc`` without risk of doing its work twice.

    Idempotent calls retry on a transport failure and on 429/502/503/504; a failure that would
    happen again the same way (TLS version or certificate mismatch, unknown host name) is never
    retried. Create and run calls
    (``unsent-only``) retry only when the connection was never established, so the server never saw
    them: a read timeout, a dropped connection, a 429 or a 5xx may mean the work was done.
    """
    if isinstance(exc, WorkflowServiceConnectionError):
        if exc.permanent:
            return False
        return call.retry == "idempotent" or not exc.sent
    if isinstance(exc, WorkflowServiceApiError):
        return call.retry == "idempotent" and exc.status_code in RETRYABLE_STATUS
    return False


_MAX_CACHED_URLS = 64
"""Parsed URLs a transport keeps (a hook listing many jobs' paths does not grow without bound)."""


class _Transport:
    """What both hooks share: settings, request building, redirects between path forms, retries."""

    def __init__(self, settings: ConnectionSettings, conn_id: str = "") -> None:
        self.settings = settings
        self._base_path = urlsplit(settings.base_url).path
        self._urls: dict[str, httpx.URL] = {}
        self._client_timeout = httpx.Timeout(settings.timeout, connect=settings.connect_timeout)
        self.conn_id = conn_id
        """The Airflow connection the settings came from ("" when given directly): named in errors."""
        self._path_forms: dict[str, str] = {}
        self.platform_spelling = False
        """Job records last seen were spelled the platform's way (``IN_PROGRESS``): filters follow."""
        shortest = _min_masked_length()
        self._secrets = sorted((s for s in settings.secrets() if len(s) >= shortest), key=len, reverse=True)

    def redact(self, text: str) -> str:
        """
        ``text`` with the token and API key replaced (a server may echo them in an error).

        Like Airflow's log masker, values shorter than ``[logging] min_length_masked_secret`` (5) are
        left alone: replacing a one-letter placeholder token everywhere would make every message
        unreadable (``ReadTimeout`` → ``ReadTimeou***``).
        """
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def url_path(self, call: ApiCall[Any]) -> str:
        """The path to use for ``call``, after any redirect the server taught us (``/x`` ↔ ``/x/``)."""
        return self._path_forms.get(call.path, call.path)

    def full_path(self, path: str) -> str:
        return self._base_path + path

    def build(
        self,
        client: httpx.Client | httpx.AsyncClient,
        call: ApiCall[Any],
        method: str,
        path: str,
        stack: contextlib.ExitStack,
    ) -> httpx.Request:
        """The request for ``call`` (its body is left out when a 303 turned it into a GET)."""
        with_body = method == call.method
        files: Any = None  # httpx types file parts as IO[bytes]; a _PartFile has what it uses
        if call.files and with_body:
            files = [
                ("input_files", (f.filename, stack.enter_context(_PartFile(f.path)), f.media_type))
                for f in call.files
            ]
        return client.build_request(
            method,
            self._url(path),
            params=self._params(call),
            json=call.json if with_body else None,
            files=files,
            timeout=self.request_timeout(method, path),
        )

    def _url(self, path: str) -> httpx.URL:
        """
        The absolute URL of ``path``, parsed once: a wait polls the same few paths again and again,
        and parsing a URL is a large part of building a request.
        """
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(self.settings.base_url + "/" + path.lstrip("/"))
            if len(self._urls) < _MAX_CACHED_URLS:
                self._urls[path] = url
        return url

    def _params(self, call: ApiCall[Any]) -> Mapping[str, str] | None:
        """The call's query, with a job status filter spelled as the service spells statuses."""
        status = call.extra.get(_calls.STATUS_FILTER)
        if status is None or not self.platform_spelling or call.params is None:
            return call.params
        return {**call.params, "status": status.platform_value}

    def observe_spelling(self, result: Any) -> None:
        """Remember how the service spells job statuses, from the job records it just sent."""
        jobs = result if isinstance(result, list) else [result]
        raw = next((job.raw_status for job in jobs if isinstance(job, Job) and job.raw_status), None)
        if raw is not None and any(c.isalpha() for c in raw):
            self.platform_spelling = raw == raw.upper()

    def request_timeout(self, method: str, path: str) -> Any:
        """
        The client's timeouts, each cut to the time left before the :func:`deadline` (an
        ``httpx.Timeout``), or ``httpx.USE_CLIENT_DEFAULT`` outside a deadline.
        """
        left = self._time_left(method, path)
        if left is None:
            return httpx.USE_CLIENT_DEFAULT
        if left >= self.settings.timeout and left >= self.settings.connect_timeout:
            return self._client_timeout
        read = min(self.settings.timeout, left)
        return httpx.Timeout(read, connect=min(self.settings.connect_timeout, left))

    def _time_left(self, method: str, path: str) -> float | None:
        """Seconds before the :func:`deadline` (None: no deadline); an unsent-request error once past it."""
        at = _DEADLINE.get()
        if at is None:
            return None
        left = at - time.time()
        if left <= 0:
            reason = "not sent: the deadline for this wait has passed"
            raise self.connection_error(method, path, reason, sent=False, kind="deadline")
        return left

    def redirect_target(
        self, call: ApiCall[Any], method: str, path: str, response: httpx.Response
    ) -> tuple[str, str] | None:
        """
        ``(method, path)`` to send next after a redirect we may follow, else None.

        Followed: same-origin redirects under the base URL. 301/302/307/308 keep method and body (a
        POST never turns into a bodiless GET); a non-GET request only follows its own path with or
        without the trailing slash, and the form is remembered for later calls. 303 means "done, see
        there": it is followed with a GET and never re-sends the body.
        """
        if not response.is_redirect or "location" not in response.headers:
            return None
        target = urlsplit(urljoin(str(response.request.url), response.headers["location"]))
        base = urlsplit(self.settings.base_url)
        if (target.scheme, target.netloc) != (base.scheme, base.netloc):
            return None
        if target.path != base.path and not target.path.startswith(base.path + "/"):
            return None
        new_path = target.path[len(base.path) :] or "/"
        if response.status_code == 303:
            return "GET", new_path
        slash_form = new_path.rstrip("/") == path.rstrip("/")
        if method not in ("GET", "HEAD") and not slash_form:
            return None
        if method == call.method and slash_form:
            self._path_forms[call.path] = new_path
            log.debug("%s %s redirected to %s; using that form from now on", method, path, new_path)
        return method, new_path

    def retrying_options(self, call: ApiCall[Any]) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.settings.max_retries + 1) | _StopAtDeadline(),
            "wait": self._wait,
            "retry": retry_if_exception(functools.partial(is_retryable, call)),
            "before_sleep": self._log_retry,
            "reraise": True,
        }

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, WorkflowServiceApiError) and exc.retry_after is not None:
            return min(exc.retry_after, self.settings.retry_max_wait)
        backoff = self.settings.retry_wait * 2 ** (state.attempt_number - 1)
        return min(self.settings.retry_max_wait, backoff) * random.uniform(0.5, 1.0)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s; retrying in %.1f s (attempt %d of %d)",
            self.redact(str(exc)),
            wait,
            state.attempt_number + 1,
            self.settings.max_retries + 1,
        )

    def finish(self, call: ApiCall[T], method: str, path: str, response: httpx.Response) -> T:
        """Raise the error the response stands for, or parse its body."""
        full = self.full_path(path)
        if not response.is_success:
            raise self.api_error(method, full, response)
        result = _parse_body(call, full, response, self.redact)
        self.observe_spelling(result)
        return result

    def api_error(self, method: str, full_path: str, response: httpx.Response) -> WorkflowServiceApiError:
        if response.is_redirect:
            location = response.headers.get("location", "")
            detail = (
                f"redirect to {location} not followed (another origin, or not the same path for {method})"
            )
        else:
            detail = _error_detail(response, self.redact)
        cls = error_for_status(response.status_code)
        return cls(
            response.status_code,
            method,
            full_path,
            detail,
            response.reason_phrase,
            retry_after=_retry_after_seconds(response),
        )

    def transport_error(
        self, method: str, path: str, exc: httpx.TransportError
    ) -> WorkflowServiceConnectionError:
        """
        The error for a request that got no answer: method, full URL, connection id, and what to
        check for this kind of failure.
        """
        reason = self.redact(f"{type(exc).__name__}: {exc}".rstrip(": "))
        kind = _failure_kind(exc)
        return self.connection_error(
            method, path, reason, sent=not isinstance(exc, _UNSENT_ERRORS), kind=kind
        )

    def connection_error(
        self, method: str, path: str, reason: str, *, sent: bool, kind: str
    ) -> WorkflowServiceConnectionError:
        base = urlsplit(self.settings.base_url)
        return WorkflowServiceConnectionError(
            method,
            self.full_path(path),
            reason,
            sent=sent,
            url=urlunsplit((base.scheme, base.netloc, self.full_path(path), "", "")),
            conn_id=self.conn_id,
            kind=kind,
            hint=_hint(kind, base),
            permanent=kind in _PERMANENT_KINDS,
        )


_PLAIN_HTTP_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"}
)
_HOST_NOT_FOUND = frozenset(
    code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None)) if code
)
_PERMANENT_KINDS = frozenset({"tls_version", "certificate", "dns"})
_KIND_BY_TEXT = (
    ("CERTIFICATE_VERIFY_FAILED", "certificate"),
    *((reason, "tls_version") for reason in sorted(_PLAIN_HTTP_REASONS)),
    ("Name or service not known", "dns"),
    ("nodename nor servname provided", "dns"),
    ("Connection refused", "refused"),
)


def _failure_kind(exc: httpx.TransportError) -> str:
    """What kind of failure ``exc`` is, from the OS or TLS error behind it (else from its text)."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:  # a chain can loop back on itself
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            return "certificate"
        if isinstance(cause, ssl.SSLError) and cause.reason in _PLAIN_HTTP_REASONS:
            return "tls_version"
        if isinstance(cause, socket.gaierror):
            return "dns" if cause.errno in _HOST_NOT_FOUND else "dns_temporary"
        if isinstance(cause, ConnectionRefusedError):
            return "refused"
        cause = cause.__cause__ or cause.__context__
    text = str(exc)
    kind = next((kind for marker, kind in _KIND_BY_TEXT if marker in text), None)
    if kind is not None:
        return kind
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return "connect_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return "read_timeout"
    return "connect" if isinstance(exc, httpx.ConnectError | httpx.ProxyError) else "dropped"


def _hint(kind: str, base: Any) -> str:
    """What to check for a failure of ``kind`` reaching ``base`` (a split base URL)."""
    host = base.hostname or ""
    address = f"{host}:{base.port or (443 if base.scheme == 'https' else 80)}"
    hints = {
        "tls_version": (
            "The server speaks plain HTTP? Use http:// in the connection's host, or the extra protocol=http"
        ),
        "certificate": (
            "The server's TLS certificate was not accepted: check the CA bundle (extra ca_bundle) "
            "or the extra verify"
        ),
        "dns": f"Host name {host!r} not found: check the connection's host (and any proxy)",
        "dns_temporary": f"Host name {host!r} could not be resolved just now: check DNS and any proxy",
        "refused": (
            f"Is the service listening on {address}? Check the port, the scheme (http/https) and any proxy"
        ),
        "connect_timeout": (
            f"No connection to {address} in time: check the host, port, proxy and firewall, or "
            "raise the extra connect_timeout"
        ),
        "read_timeout": "The service did not answer in time: raise the extra timeout if it is busy",
        "connect": "Check the scheme (http/https), host, port, proxy and CA bundle",
    }
    return hints.get(kind, "")  # dropped after connecting, or past the deadline: nothing to check


@contextlib.contextmanager
def _atomic_file(target: Path) -> Iterator[BinaryIO]:
    """
    A new file beside ``target`` to write into; renamed to ``target`` only when the block completes.

    The file is created with mode 0o666 less the process umask, like any file a program writes
    (``mkstemp`` would make it 0o600 whatever the umask, unreadable to another user or container).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.{secrets.token_hex(8)}.part"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


class _PartFile:
    """
    One upload part's file, open only while its part is being sent (so any number of files can go).

    Its size is taken when the request is built (for ``Content-Length``); it is opened at its first
    read and closed at its end, and reopened if the body is sent again.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            self._size = path.stat().st_size
        except OSError as exc:
            raise self._unreadable(exc) from None
        self._handle: BinaryIO | None = None
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        left = self._size - self._position
        if left <= 0:
            self.close()
            return b""
        if self._handle is None:
            try:
                self._handle = self._path.open("rb")
                self._handle.seek(self._position)
            except OSError as exc:
                raise self._unreadable(exc) from None
        chunk = self._handle.read(left if size is None or size < 0 else min(size, left))
        self._position += len(chunk)
        if not chunk:
            self.close()
        return chunk

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self.close()
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> _PartFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreadable(self, exc: OSError) -> WorkflowServiceInputError:
        return WorkflowServiceInputError(
            f"input file {str(self._path)!r} cannot be read: {exc.strerror or exc}"
        )


class _ReplayFirstFailure:
    """
    An attempt function for tenacity that first re-raises the failure of an attempt already made.

    The first attempt of every request runs without tenacity (its set-up costs more than a loopback
    round trip); only a retryable failure enters the retry loop, which still owns waits, stops and logs.
    """

    def __init__(self, failure: BaseException, attempt: Callable[[ApiCall[Any]], Any]) -> None:
        self._failure: BaseException | None = failure
        self._attempt = attempt

    def __call__(self, call: ApiCall[Any]) -> Any:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        return self._attempt(call)


class _AsyncReplayFirstFailure(_ReplayFirstFailure):
    """:class:`_ReplayFirstFailure` for coroutine attempts (tenacity awaits only coroutine functions)."""

    async def __call__(self, call: ApiCall[Any]) -> Any:
        return await super().__call__(call)


def _connection_failed(exc: BaseException, transport: _Transport | None) -> str:
    """A message a person understands for a failed ``test_connection``."""
    if isinstance(exc, WorkflowServiceApiError):
        status = f"{exc.status_code} {exc.reason}".strip()
        message = f"Connection failed: {status} from {exc.method} {exc.path}"
        if exc.detail:
            message += f": {exc.detail}"
        if isinstance(exc, WorkflowServiceRateLimitError):
            message += ". The service is rate limiting; try again later."
        elif exc.status_code in (401, 403):
            message += ". Check the access token (password) and the API key."
        elif exc.status_code == 404:
            message += ". Check the base URL (it ends in /api/v1)."
        return message
    if isinstance(exc, WorkflowServiceResponseError):
        return f"Connection failed: {exc}. Is the base URL the Workflow Service API (…/api/v1)?"
    text = str(exc) if isinstance(exc, WorkflowServiceError) else f"{type(exc).__name__}: {exc}"
    return f"Connection failed: {transport.redact(text) if transport else text}"


# --------------------------------------------------------------------------------------------------
# One table of endpoints for both hooks


class _Endpoint(Generic[P, T]):
    """
    A hook method made from an endpoint description: returns ``T`` on the sync hook, awaitable on async.

    The arguments are checked when the method is called (a :class:`WorkflowServiceInputError` before
    any request), on both hooks.
    """

    def __init__(self, build: Callable[P, ApiCall[T]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__
        self._name = build.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Endpoint[P, T]: ...
    @overload
    def __get__(self, obj: WorkflowServiceHook, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: WorkflowServiceAsyncHook, owner: type) -> Callable[P, Awaitable[T]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        build, send = self._build, obj._send

        @functools.wraps(build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return send(build(*args, **kwargs))

        # Made once per hook: the instance attribute now shadows this (non-data) descriptor.
        obj.__dict__[self._name] = method
        return method


class _Endpoints:
    """Every endpoint of the spec, once."""

    list_sources = _Endpoint(_calls.list_sources)
    get_source = _Endpoint(_calls.get_source)
    create_source = _Endpoint(_calls.create_source)
    update_source = _Endpoint(_calls.update_source)
    delete_source = _Endpoint(_calls.delete_source)
    start_source_connection_check = _Endpoint(_calls.start_source_connection_check)
    get_source_connection_check = _Endpoint(_calls.get_source_connection_check)
    list_destinations = _Endpoint(_calls.list_destinations)
    get_destination = _Endpoint(_calls.get_destination)
    create_destination = _Endpoint(_calls.create_destination)
    update_destination = _Endpoint(_calls.update_destination)
    delete_destination = _Endpoint(_calls.delete_destination)
    start_destination_connection_check = _Endpoint(_calls.start_destination_connection_check)
    get_destination_connection_check = _Endpoint(_calls.get_destination_connection_check)
    create_workflow = _Endpoint(_calls.create_workflow)
    list_workflows = _Endpoint(_calls.list_workflows)
    get_workflow = _Endpoint(_calls.get_workflow)
    update_workflow = _Endpoint(_calls.update_workflow)
    delete_workflow = _Endpoint(_calls.delete_workflow)
    run_workflow = _Endpoint(_calls.run_workflow)
    list_jobs = _Endpoint(_calls.list_jobs)
    get_job = _Endpoint(_calls.get_job)
    get_job_details = _Endpoint(_calls.get_job_details)
    get_job_failed_files = _Endpoint(_calls.get_job_failed_files)
    cancel_job = _Endpoint(_calls.cancel_job)
    download_job_output = _Endpoint(_calls.download_job_output)


ENDPOINT_NAMES: tuple[str, ...] = tuple(k for k, v in vars(_Endpoints).items() if isinstance(v, _Endpoint))
"""The names of the endpoint methods both hooks have."""


def _page_params(params: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    params = dict(params)
    page = int(params.pop("page", None) or 1)
    size = int(params.pop("page_size", None) or 100)
    return params, page, size


class _HookBase(BaseHook, _Endpoints):
    conn_name_attr = "workflowsvc_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Workflow Service"

    def __init__(
        self, workflowsvc_conn_id: str = DEFAULT_CONN_ID, *, settings: ConnectionSettings | None = None
    ) -> None:
        super().__init__()
        self.workflowsvc_conn_id = workflowsvc_conn_id
        self._settings = settings
        self._transport_obj: _Transport | None = None

    @staticmethod
    def _settings_from(conn: Connection) -> ConnectionSettings:
        settings = ConnectionSettings.from_connection(conn)
        _mask_secrets(settings)
        return settings

    def _make_transport(self, settings: ConnectionSettings) -> _Transport:
        conn_id = "" if self._settings is not None else self.workflowsvc_conn_id
        self._settings = settings
        self._transport_obj = _Transport(settings, conn_id)
        return self._transport_obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workflowsvc_conn_id={self.workflowsvc_conn_id!r})"


class WorkflowServiceHook(_HookBase):
    """
    Synchronous hook: one ``httpx.Client`` for the hook's life, one method per endpoint.

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    :param settings: connection settings to use instead of reading the Airflow connection.
    """

    _sleep: Callable[[float], None] = staticmethod(time.sleep)
    """How retries wait (replaceable in tests)."""

    def __init__(
        self, workflowsvc_conn_id: str = DEFAULT_CONN_ID, *, settings: ConnectionSettings | None = None
    ) -> None:
        super().__init__(workflowsvc_conn_id, settings=settings)
        self._client: httpx.Client | None = None

    if not CONN_FIELDS_READ:  # Airflow < 3.2 builds the connection form from these (deprecated in 3.2)

        @classmethod
        def get_connection_form_widgets(cls) -> dict[str, Any]:
            """The provider info's ``conn-fields`` as WTForms fields."""
            from airflow_provider_workflowsvc.hooks._connection_form import form_widgets

            return form_widgets()

        @classmethod
        def get_ui_field_behaviour(cls) -> dict[str, Any]:
            """The provider info's ``ui-field-behaviour``."""
            from airflow_provider_workflowsvc.hooks._connection_form import ui_field_behaviour

            return ui_field_behaviour()

    @property
    def settings(self) -> ConnectionSettings:
        return self._transport.settings

    @property
    def _transport(self) -> _Transport:
        if self._transport_obj is None:
            settings = self._settings or self._settings_from(self.get_connection(self.workflowsvc_conn_id))
            return self._make_transport(settings)
        return self._transport_obj

    def get_conn(self) -> httpx.Client:
        """The hook's HTTP client (created on first use)."""
        if self._client is None:
            self._client = httpx.Client(**self._transport.settings.httpx_options())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> WorkflowServiceHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: ApiCall[T]) -> T:
        try:
            return self._send_once(call)
        except WorkflowServiceError as exc:
            if not is_retryable(call, exc):
                raise
            replay = _ReplayFirstFailure(exc, self._send_once)
        retrying = Retrying(sleep=self._sleep, **self._transport.retrying_options(call))
        return retrying(replay, call)

    def _send_once(self, call: ApiCall[T]) -> T:
        transport, client = self._transport, self.get_conn()
        method, path = call.method, transport.url_path(call)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                with contextlib.ExitStack() as stack:
                    request = transport.build(client, call, method, path, stack)
                    response = client.send(request, stream=True)
                    stack.callback(response.close)
                    hop = transport.redirect_target(call, method, path, response)
                    if hop is None:
                        if call.download_to is not None and response.is_success and method == call.method:
                            return self._save(call.download_to, response)  # type: ignore[return-value]
                        cap = _BodyCap(transport, method, path, response)
                        for chunk in response.iter_bytes():
                            cap.add(chunk)
                        cap.done()
                        return transport.finish(call, method, path, response)
                method, path = hop
        except httpx.TransportError as exc:
            raise transport.transport_error(method, path, exc) from None
        raise WorkflowServiceError(f"{method} {transport.full_path(path)}: too many redirects")

    @staticmethod
    def _save(target: Path, response: httpx.Response) -> Path:
        """Stream the body into a file beside ``target``, then rename it: never a partial ``target``."""
        with _atomic_file(target) as fh:
            for chunk in response.iter_bytes():
                fh.write(chunk)
        return target

    def iter_workflows(self, **params: Any) -> Iterator[Workflow]:
        """
        Every workflow matching ``params`` (any list_workflows filter), fetching page after page.

        Stops at the first page that is empty or brings no workflow not seen before (a server that
        caps ``page_size`` or ignores ``page`` cannot make it stop early or loop forever).
        """
        params, page, size = _page_params(params)
        seen: set[Any] = set()
        while True:
            batch = self.list_workflows(**params, page=page, page_size=size)
            new = [w for w in batch if w.id not in seen]
            if not new:
                return
            seen.update(w.id for w in new)
            yield from new
            page += 1

    def test_connection(self) -> tuple[bool, str]:
        """Make one cheap authenticated call (no retries) and say, in words, whether it worked."""
        transport: _Transport | None = None
        try:
            transport = self._transport
            self._send_once(_calls.list_workflows(page=1, page_size=1))
        except Exception as exc:
            return False, _connection_failed(exc, transport)
        finally:
            self.close()
        return True, f"Connection successful: {transport.settings.base_url} accepted the credentials."


class WorkflowServiceAsyncHook(_HookBase):
    """
    Asynchronous hook: one ``httpx.AsyncClient`` for the hook's life, one awaitable method per endpoint.

    Use ``async with WorkflowServiceAsyncHook(...) as hook:`` so the client is closed at the end.
    """

    _sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)
    """How retries wait (replaceable in tests)."""

    def __init__(
        self, workflowsvc_conn_id: str = DEFAULT_CONN_ID, *, settings: ConnectionSettings | None = None
    ) -> None:
        super().__init__(workflowsvc_conn_id, settings=settings)
        self._client: httpx.AsyncClient | None = None
        self._client_of: tuple[asyncio.AbstractEventLoop, _ClientKey] | None = None

    async def _atransport(self) -> _Transport:
        if self._transport_obj is None:
            settings = self._settings or self._settings_from(await self._aget_connection())
            return self._make_transport(settings)
        return self._transport_obj

    async def _aget_connection(self) -> Connection:
        getter = getattr(BaseHook, "aget_connection", None)
        if getter is not None:
            return await getter(self.workflowsvc_conn_id)
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.get_connection)(self.workflowsvc_conn_id)

    async def get_async_conn(self) -> httpx.AsyncClient:
        """
        The hook's HTTP client: the one the running event loop's hooks with the same settings share
        (created on first use, closed when the last of them is closed).
        """
        if self._client is None:
            transport = await self._atransport()
            key = _ClientKey.of(transport.settings)
            self._client = _acquire_client(key).client
            self._client_of = (asyncio.get_running_loop(), key)
        return self._client

    async def aclose(self) -> None:
        """Let go of the shared client (closing it if this hook was its last user)."""
        client, owner = self._client, self._client_of
        self._client = self._client_of = None
        if client is not None and owner is not None:
            await _release_client(*owner, client)

    async def __aenter__(self) -> WorkflowServiceAsyncHook:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: ApiCall[T]) -> T:
        try:
            return await self._send_once(call)
        except WorkflowServiceError as exc:
            if not is_retryable(call, exc):
                raise
            replay = _AsyncReplayFirstFailure(exc, self._send_once)
        transport = await self._atransport()
        retrying = AsyncRetrying(sleep=self._sleep, **transport.retrying_options(call))
        return await retrying(replay, call)

    async def _send_once(self, call: ApiCall[T]) -> T:
        transport, client = await self._atransport(), await self.get_async_conn()
        method, path = call.method, transport.url_path(call)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                async with contextlib.AsyncExitStack() as astack:
                    stack = astack.enter_context(contextlib.ExitStack())
                    request = transport.build(client, call, method, path, stack)
                    response = await client.send(request, stream=True)
                    astack.push_async_callback(response.aclose)
                    hop = transport.redirect_target(call, method, path, response)
                    if hop is None:
                        if call.download_to is not None and response.is_success and method == call.method:
                            return await self._save(call.download_to, response)  # type: ignore[return-value]
                        cap = _BodyCap(transport, method, path, response)
                        async for chunk in response.aiter_bytes():
                            cap.add(chunk)
                        cap.done()
                        return transport.finish(call, method, path, response)
                method, path = hop
        except httpx.TransportError as exc:
            raise transport.transport_error(method, path, exc) from None
        raise WorkflowServiceError(f"{method} {transport.full_path(path)}: too many redirects")

    @staticmethod
    async def _save(target: Path, response: httpx.Response) -> Path:
        """Stream the body into a file beside ``target``, then rename it: never a partial ``target``."""
        with _atomic_file(target) as fh:
            async for chunk in response.aiter_bytes():
                fh.write(chunk)
        return target

    async def iter_workflows(self, **params: Any) -> AsyncIterator[Workflow]:
        """
        Every workflow matching ``params`` (any list_workflows filter), fetching page after page.

        Stops at the first page that is empty or brings no workflow not seen before.
        """
        params, page, size = _page_params(params)
        seen: set[Any] = set()
        while True:
            batch = await self.list_workflows(**params, page=page, page_size=size)
            new = [w for w in batch if w.id not in seen]
            if not new:
                return
            seen.update(w.id for w in new)
            for workflow in new:
                yield workflow
            page += 1
