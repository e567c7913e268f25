"""
How one request travels: building it, deadlines, redirects, retries, body cap and error mapping.

Shared by the sync and async hooks; only the sending itself (``httpx.Client`` or ``httpx.AsyncClient``)
differs between them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from tenacity import RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base

from airflow_provider_workflowsvc._url_secrets import mask_url_secrets
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceApiError,
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    error_for_status,
    format_validation_errors,
)
from airflow_provider_workflowsvc.hooks import _calls
from airflow_provider_workflowsvc.hooks._calls import ApiCall, Listing, ResponseShapeError, StagedObject
from airflow_provider_workflowsvc.hooks._files import _PartFile
from airflow_provider_workflowsvc.hooks._listing import JobItems
from airflow_provider_workflowsvc.hooks._pool import LaneTimeLimit
from airflow_provider_workflowsvc.hooks._settings import ConnectionSettings
from airflow_provider_workflowsvc.models import platform_spelling

log = logging.getLogger("airflow_provider_workflowsvc.hooks.workflowsvc")

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
MAX_REDIRECTS = 3
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@functools.lru_cache(maxsize=1)
def _min_masked_length() -> int:
    """Return ``[logging] min_length_masked_secret``, read once per process (a transport is made per hook)."""
    try:
        from airflow_provider_workflowsvc._compat import conf

        return max(1, conf.getint("logging", "min_length_masked_secret", fallback=5))
    except Exception:  # pragma: no cover - no configuration available
        return 5


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
    Return the server's explanation: FastAPI ``detail`` (string or list) or ``message``, else the raw text.

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
    if call.head_bytes is not None:
        return call.parse(response.content[: call.head_bytes])
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
        detail = _cut(redact(str(exc).replace("\n", " ")), 300)
        raise WorkflowServiceResponseError(call.method, path, response.status_code, detail) from None


class _BodyCap:
    """
    Reads a response body chunk by chunk, failing as soon as it grows past ``max_response_bytes``;
    or, given ``head`` (a successful answer of which only the start is wanted), stopping there.

    The body is kept on the response (as ``Response.read()`` does), so it is parsed as usual.
    """

    def __init__(
        self, transport: _Transport, method: str, path: str, response: httpx.Response, head: int | None = None
    ) -> None:
        self._transport, self._method, self._path, self._response = transport, method, path, response
        self._head = head if response.is_success else None
        self._limit = transport.settings.max_response_bytes
        self._body = bytearray()
        declared = response.headers.get("content-length", "")
        if self._head is None and declared.isdigit() and int(declared) > self._limit:
            raise self._too_large(f"declares {int(declared)} bytes")

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; True once the wanted start of the body is read (read no further)."""
        self._body += chunk
        if self._head is not None:
            return len(self._body) >= self._head
        if len(self._body) > self._limit:
            raise self._too_large(f"passed {self._limit} bytes and was not read further")
        return False

    def done(self) -> httpx.Response:
        """Keep the body read on the response (as ``Response.read()`` does) and return the response."""
        self._response._content = bytes(self._body)
        return self._response

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
        if exc.permanent or exc.kind == "lane_limit":  # a read that hangs: sent again, it would hang again
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

    def redact_foreign(self, text: str) -> str:
        """
        Text this provider did not write (the service's answers, a secrets backend's error) with the
        token and API key masked, and what its URLs may carry as credentials (``user:pass@``, a query).
        """
        return mask_url_secrets(self.redact(text))

    def url_path(self, call: ApiCall[Any]) -> str:
        """Return the path to use for ``call``, after any redirect the server taught us (``/x`` ↔ ``/x/``)."""
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
        """Build the request for ``call`` (its body is left out when a 303 turned it into a GET)."""
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
        Return the absolute URL of ``path``, parsed once: a wait polls the same few paths again and again,
        and parsing a URL is a large part of building a request.
        """
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(self.settings.base_url + "/" + path.lstrip("/"))
            if len(self._urls) < _MAX_CACHED_URLS:
                self._urls[path] = url
        return url

    def _params(self, call: ApiCall[Any]) -> Mapping[str, str] | None:
        """Return the call's query, with a job status filter spelled as the service spells statuses."""
        status = call.extra.get(_calls.STATUS_FILTER)
        if status is None or not self.platform_spelling or call.params is None:
            return call.params
        return {**call.params, "status": status.platform_value}

    def observe_spelling(self, result: Any) -> None:
        """Remember how the service spells job statuses, from the job records it just sent."""
        spelled = platform_spelling(result if isinstance(result, list) else [result])
        if spelled is not None:
            self.platform_spelling = spelled

    def request_timeout(self, method: str, path: str) -> Any:
        """
        Return the client's timeouts, each cut to the time left before the :func:`deadline` (an
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
        Return the ``(method, path)`` to send next after a redirect we may follow, else None.

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

    def exchange(self, call: ApiCall[T]) -> _Exchange[T]:
        """Start sending ``call``: see :class:`_Exchange`."""
        return _Exchange(self, call)

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
        result = _parse_body(call, full, response, self.redact_foreign)
        self.observe_spelling(result)
        return result

    def job_items(self, call: ApiCall[Any], method: str, path: str, response: httpx.Response) -> JobItems:
        """Return the item-by-item reader of a job listing's successful answer (:mod:`._listing`)."""
        full = self.full_path(path)

        def fail(detail: str) -> WorkflowServiceResponseError:
            return WorkflowServiceResponseError(method, full, response.status_code, self.redact(detail))

        return JobItems(
            self.settings.base_url,
            call.extra[_calls.CREATED_SINCE],
            learn=not (call.params or {}).get("status"),
            limit=self.settings.max_response_bytes,
            fail=fail,
            response=response,
        )

    def finish_listing(self, listing: Listing[Any]) -> Listing[Any]:
        """Return the jobs a listing read item by item kept (their spelling observed, as any answer's)."""
        self.observe_spelling(listing)
        return listing

    def api_error(self, method: str, full_path: str, response: httpx.Response) -> WorkflowServiceApiError:
        if response.is_redirect:
            location = response.headers.get("location", "")
            detail = (
                f"redirect to {location} not followed (another origin, or not the same path for {method})"
            )
        else:
            detail = _error_detail(response, self.redact_foreign)
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
        Return the error for a request that got no answer: method, full URL, connection id, and what to
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


class _Exchange(Generic[T]):
    """
    One request's way to its answer, whatever sends it: the request to send, the redirects to follow,
    and what the final response means.

    Each hook only sends the requests and reads the body (with or without ``await``).
    """

    def __init__(self, transport: _Transport, call: ApiCall[T]) -> None:
        self.transport, self.call = transport, call
        self.method, self.path = call.method, transport.url_path(call)
        self._redirects = 0
        self._items: JobItems | None = None

    def request(self, client: httpx.Client | httpx.AsyncClient, stack: contextlib.ExitStack) -> httpx.Request:
        """Build the next request (its upload parts close with ``stack``)."""
        return self.transport.build(client, self.call, self.method, self.path, stack)

    def follow(self, response: httpx.Response) -> bool:
        """Move on to the redirect ``response`` asks for, if it is one to follow; fail past MAX_REDIRECTS."""
        hop = self.transport.redirect_target(self.call, self.method, self.path, response)
        if hop is None:
            return False
        if self._redirects == MAX_REDIRECTS:
            raise WorkflowServiceError(
                f"{self.method} {self.transport.full_path(self.path)}: too many redirects"
            )
        self._redirects += 1
        self.method, self.path = hop
        return True

    def download_target(self, response: httpx.Response) -> Path | StagedObject | None:
        """Return the file to stream a successful download into (None: the body is read into memory)."""
        call = self.call
        if call.download_to is not None and response.is_success and self.method == call.method:
            return call.download_to
        return None

    def body_cap(self, response: httpx.Response) -> _BodyCap | JobItems:
        """
        Return a reader of the body: its ``add(chunk)`` fails once the body grows past
        ``max_response_bytes``, and returns True when the rest of the body is not needed (a job listing
        read down to the jobs asked for, :class:`~._listing.JobItems`; the start of an answer of which
        only its first ``head_bytes`` are wanted).
        """
        self._items = None
        call = self.call
        if _calls.CREATED_SINCE in call.extra and response.is_success and self.method == call.method:
            self._items = self.transport.job_items(call, self.method, self.path, response)
            return self._items
        return _BodyCap(self.transport, self.method, self.path, response, call.head_bytes)

    def finish(self, response: httpx.Response) -> T:
        """Raise the error the (read) response stands for, or parse its body."""
        if self._items is not None:
            listing = self._items.listing()
            if listing is not None:
                return self.transport.finish_listing(listing)  # type: ignore[return-value]
            response._content = self._items.raw_body()
        return self.transport.finish(self.call, self.method, self.path, response)

    def failed(self, exc: httpx.TransportError) -> WorkflowServiceConnectionError:
        """Return the error for a request that got no answer."""
        return self.transport.transport_error(self.method, self.path, exc)


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
    """Tell what kind of failure ``exc`` is, from the OS or TLS error behind it (else from its text)."""
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
    if isinstance(exc, LaneTimeLimit):
        return "lane_limit"
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
    """Say what to check for a failure of ``kind`` reaching ``base`` (a split base URL)."""
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
    """Write a message a person understands for a failed ``test_connection``."""
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
