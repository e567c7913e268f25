"""What a failed request means: the error it raises, whether it is retried, what to check, masked text."""

from __future__ import annotations

import functools
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc._url_secrets import mask_url_secrets
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceApiError,
    WorkflowServiceAuthError,
    WorkflowServiceAuthUnconfirmedError,
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceQuotaError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    error_for_status,
    format_validation_errors,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks._exchange import ApiCall
    from airflow_provider_workflowsvc.hooks._settings import ConnectionSettings

log = logging.getLogger("airflow_provider_workflowsvc.hooks.workflowsvc")

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class LaneTimeLimit(httpx.ReadTimeout):
    """A read cut at the lane time limit, the overflow full: not retried (a wait polls again)."""


# --------------------------------------------------------------------------------------------------
# Which failures are sent again, and when


def is_retryable(call: ApiCall[Any], exc: BaseException) -> bool:
    """Whether ``call`` may be sent again after ``exc`` without risk of doing its work twice (wire.md)."""
    if isinstance(exc, WorkflowServiceConnectionError):
        if exc.permanent or exc.unreached or exc.kind == "lane_limit":  # a hung read would hang again
            return False
        return call.retry == "idempotent" or not exc.sent
    if isinstance(exc, WorkflowServiceQuotaError):
        return False  # a used-up quota is not cured by asking again (not even a 429 saying so)
    if isinstance(exc, WorkflowServiceApiError):
        retried = call.retry == "idempotent" and exc.status_code in RETRYABLE_STATUS
        return retried and exc.retryable is not False
    return False


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


# --------------------------------------------------------------------------------------------------
# The service's text, masked


def _cut(text: str, limit: int) -> str:
    return text[:limit] + ("…" if len(text) > limit else "")


_NOT_JSON = object()


def _error_detail(body: Any, response: httpx.Response, redact: Callable[[str], str]) -> str:
    """Return the server's explanation, redacted before it is cut (no credential leaks in part)."""
    if body is _NOT_JSON:
        return _cut(redact(response.text.strip()), 300)
    if isinstance(body, dict):
        detail = body.get("detail", body.get("message", body.get("error")))
        if isinstance(detail, list):
            items = [d if isinstance(d, dict) else {"msg": str(d)} for d in detail]
            return redact(format_validation_errors(items))
        if detail is not None:
            return _cut(redact(str(detail)), 1000)
    return _cut(redact(str(body)), 300)


@functools.lru_cache(maxsize=1)
def _min_masked_length() -> int:
    try:
        from airflow_provider_workflowsvc._compat import conf

        return max(1, conf.getint("logging", "min_length_masked_secret", fallback=5))
    except Exception:  # pragma: no cover - no configuration available
        return 5


# --------------------------------------------------------------------------------------------------
# The errors a transport raises


class Failures:
    """What a transport says when a request fails (the error, what to check, masked), and its retries."""

    settings: ConnectionSettings
    conn_id: str

    def full_path(self, path: str) -> str:
        """Return ``path`` under the base URL's path (named in errors only: a success never asks)."""
        return urlsplit(self.settings.base_url).path + path

    @functools.cached_property
    def _secrets(self) -> list[str]:
        shortest = _min_masked_length()
        return sorted((s for s in self.settings.secrets() if len(s) >= shortest), key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with the token and API key masked (not those shorter than Airflow's masker masks)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def redact_foreign(self, text: str, also: tuple[str, ...] = ()) -> str:
        """Mask credentials, the secrets ``also`` and URL secrets in text the provider did not write."""
        for secret in also:
            text = text.replace(secret, "***") if secret else text
        return mask_url_secrets(self.redact(text))

    def pause(self, exc: WorkflowServiceError, attempt: int) -> float:
        """Return the wait after failed ``attempt``: the service's ``Retry-After``, else a backoff."""
        if isinstance(exc, WorkflowServiceApiError) and exc.retry_after is not None:
            return min(exc.retry_after, self.settings.retry_max_wait)
        backoff = self.settings.retry_wait * 2 ** (attempt - 1)
        return min(self.settings.retry_max_wait, backoff) * random.uniform(0.5, 1.0)

    def before_retry(self, operation: str, exc: WorkflowServiceError, wait: float, attempt: int) -> None:
        metrics.retrying(operation, self.conn_id, exc, wait)
        log.warning(
            "%s; retrying in %.1f s (attempt %d of %d)",
            self.redact(str(exc)),
            wait,
            attempt + 1,
            self.settings.max_retries + 1,
        )

    def unreadable(
        self, method: str, path: str, response: httpx.Response, complaint: str | None = None
    ) -> WorkflowServiceResponseError:
        """Return the error of a successful answer that is not JSON, or (``complaint``) not of its shape."""
        full = self.full_path(path)
        if complaint is not None:
            detail = _cut(self.redact_foreign(complaint.replace("\n", " ")), 300)
        else:  # not JSON
            snippet = _cut(self.redact_foreign(response.text.replace("\n", " ")), 120)
            detail = f"not JSON ({len(response.content)} bytes): {snippet!r}"
        return WorkflowServiceResponseError(method, full, response.status_code, detail)

    def too_large(
        self, method: str, path: str, response: httpx.Response, how: str
    ) -> WorkflowServiceResponseError:
        """Return the error of an answer over ``max_response_bytes`` (``how``: what showed it)."""
        limit = self.settings.max_response_bytes
        return WorkflowServiceResponseError(
            method,
            self.full_path(path),
            response.status_code,
            f"the answer {how}, more than max_response_bytes ({limit}); raise that connection "
            "extra if such answers are expected",
        )

    def api_error(
        self, method: str, full_path: str, response: httpx.Response, secrets: tuple[str, ...] = ()
    ) -> WorkflowServiceApiError:
        try:
            body = response.json()  # read once: the detail and the service's word against a retry
        except (ValueError, RecursionError):
            body = _NOT_JSON
        if response.is_redirect:
            location = response.headers.get("location", "")
            detail = (
                f"redirect to {location} not followed (another origin, or not the same path for {method})"
            )
        else:
            detail = _error_detail(body, response, functools.partial(self.redact_foreign, also=secrets))
        cls = error_for_status(response.status_code, detail)
        return cls(
            response.status_code,
            method,
            full_path,
            detail,
            response.reason_phrase,
            retry_after=_retry_after_seconds(response),
            retryable=False if isinstance(body, dict) and body.get("retryable") is False else None,
        )

    def still_refused(
        self, exc: WorkflowServiceAuthError, unread: str | None = None
    ) -> WorkflowServiceAuthError:
        """Return the error of a refusal after a re-read (not final if the re-read failed: ``unread``)."""
        if not self.conn_id:
            return exc
        if unread is not None:
            detail = (
                f"{exc.detail}; connection {self.conn_id!r} could not be read again ({unread}), so the "
                "refusal is not taken as final: its credentials may have been rotated"
            )
            return WorkflowServiceAuthUnconfirmedError(
                exc.status_code, exc.method, exc.path, detail, exc.reason
            )
        detail = (
            f"{exc.detail}; connection {self.conn_id!r} was read again and the service still refuses its "
            "credentials (check the token in its password field and its api_key extra)"
        )
        return type(exc)(exc.status_code, exc.method, exc.path, detail, exc.reason)

    def transport_error(
        self, method: str, path: str, exc: httpx.TransportError
    ) -> WorkflowServiceConnectionError:
        """Return the error of a request that got no answer: method, full URL, connection, what to check."""
        reason = self.redact(f"{type(exc).__name__}: {exc}".rstrip(": "))
        kind = _failure_kind(exc)
        return self.connection_error(
            method, path, reason, sent=not isinstance(exc, _UNSENT_ERRORS), kind=kind
        )

    def connection_error(
        self, method: str, path: str, reason: str, *, sent: bool, kind: str
    ) -> WorkflowServiceConnectionError:
        base = urlsplit(self.settings.base_url)
        unreached = kind == "refused" and self._origin not in ANSWERED
        hint = _hint(kind, base)
        if unreached:
            hint += (
                ". Nothing has answered there through this connection in this process, so the request is "
                f"not sent again (`airflow workflowsvc connection check --conn-id {self.conn_id}` tries "
                "the connection)"
                if self.conn_id
                else ". Nothing has answered there in this process, so the request is not sent again"
            )
        return WorkflowServiceConnectionError(
            method,
            self.full_path(path),
            reason,
            sent=sent,
            url=urlunsplit((base.scheme, base.netloc, self.full_path(path), "", "")),
            conn_id=self.conn_id,
            kind=kind,
            hint=hint,
            permanent=kind in _PERMANENT_KINDS,
            unreached=unreached,
        )

    @property
    def _origin(self) -> tuple[str, str]:
        return self.conn_id, self.settings.base_url


ANSWERED: set[tuple[str, str]] = set()
"""The (connection id, base URL) pairs any answer came through in this process: a refusal by one of them
is a service restarting (retried); by any other, an address where nothing listens (fails at once)."""


# --------------------------------------------------------------------------------------------------
# What kind of failure, and what to check


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


def connection_failed(exc: BaseException, transport: Failures | None) -> str:
    """Say in words why ``test_connection`` failed."""
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
