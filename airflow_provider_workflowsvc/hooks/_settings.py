"""Connection settings: where the service is and how to reach it (Airflow connection, extras, TLS), cached."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import ssl
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

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

from airflow_provider_workflowsvc import __version__, metrics
from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError, format_validation_errors
from airflow_provider_workflowsvc.hooks import CONN_TYPE

if TYPE_CHECKING:
    from airflow.sdk import Connection

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""The default cap on a JSON answer (extra ``max_response_bytes``): far above any real list or record."""
DEFAULT_MAX_CONNECTIONS = 20
"""The default cap on the connections of one pool (extra ``max_connections``); async hooks share a pool."""
KEEPALIVE_EXPIRY = 120.0
"""Seconds an idle connection is kept: longer than the default poll interval, so a wait reuses one."""
_WORDS = dict.fromkeys(("true", "1", "yes", "on"), True) | dict.fromkeys(("false", "0", "no", "off"), False)


class ConnectionSettings(BaseModel):
    """
    Where the service is and how to talk to it, built from an Airflow connection or directly: each field
    means what the connection extra of its name does (docs/provider/connections/workflowsvc.rst);
    ``verify`` may also be a CA bundle's path.
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
            word = _WORDS.get(value.strip().lower())
            if word is not None:
                return word
            if not os.path.exists(os.path.expanduser(value.strip())):
                raise ValueError(
                    "must be true, false, or the path of an existing CA bundle file or directory"
                )
            return os.path.expanduser(value.strip())
        return value

    @classmethod
    def from_connection(cls, conn: Connection) -> ConnectionSettings:
        """Read host (base URL), password (token) and extras (docs/provider/connections/workflowsvc.rst)."""
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
        except ValueError as exc:  # pydantic's ValidationError too: rendered without the input values
            why: object = exc
            if isinstance(exc, ValidationError):
                why = format_validation_errors(exc.errors(include_input=False, include_url=False))
            raise WorkflowServiceInputError(f"connection {conn.conn_id!r} is misconfigured: {why}") from None

    def headers(self) -> dict[str, str]:
        """Return the headers: the token as a Bearer, the API key under both services' header names."""
        headers = {"accept": "application/json", "user-agent": f"airflow-provider-workflowsvc/{__version__}"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token.get_secret_value()}"
        if self.api_key is not None:
            key = self.api_key.get_secret_value()
            headers["unstructured-api-key"] = key
            headers["service-api-key"] = key
        return headers

    def secrets(self) -> tuple[str, ...]:
        """Return the credential values, to scrub from any text that leaves the hook."""
        return tuple(s.get_secret_value() for s in (self.token, self.api_key) if s is not None)

    def ssl_verify(self) -> ssl.SSLContext:
        """Return ``verify`` as an SSL context, one per setting and CA variables (loading takes ~50 ms)."""
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
    """Refuse a credential a header cannot carry, naming where it came from, never its value."""
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


_EXTRA_SETTINGS = frozenset(ConnectionSettings.model_fields) - {"base_url", "token", "api_key"}
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
    """Return the base URL from host (with or without scheme), port, schema and the ``protocol`` extra."""
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


def settings_of(conn: Connection) -> ConnectionSettings:
    """Read the settings of ``conn``; their credentials are registered with Airflow's log masker."""
    settings = ConnectionSettings.from_connection(conn)
    try:
        from airflow.sdk.log import mask_secret  # a no-op outside a task process
    except ImportError:  # pragma: no cover - older task SDK
        return settings
    for secret in settings.secrets():
        mask_secret(secret)
    return settings


SETTINGS_TTL = 60.0  # seconds settings read from a connection are reused
SETTINGS_RETRY = 10.0  # seconds after a failed read before the connection is read again


class _Entry(NamedTuple):
    source: str | None  # the connection's ``AIRFLOW_CONN_<ID>`` variable when read
    until: float  # when it is to be read again
    read: ConnectionSettings | Exception  # the settings, or the failed read's error


class SettingsCache:
    """
    The settings of each Airflow connection, read once per process for ``ttl`` seconds (a failed read: its
    error for ``retry`` seconds); concurrent misses of one loop share a read (wire.md, "The connection").
    """

    def __init__(
        self,
        ttl: float = SETTINGS_TTL,
        clock: Callable[[], float] = time.monotonic,
        retry: float = SETTINGS_RETRY,
    ) -> None:
        self.ttl, self.retry = ttl, retry
        self.clock = clock  # monotonic seconds: hooks time their own settings by it
        self._entries: dict[str, _Entry] = {}
        self._read_before: set[str] = set()  # the connections read at least once: a read again is counted
        self._reads: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str | None], asyncio.Future[ConnectionSettings]]
        ] = weakref.WeakKeyDictionary()

    async def get(
        self, conn_id: str, read: Callable[[], Awaitable[ConnectionSettings]]
    ) -> ConnectionSettings:
        """Return the settings of ``conn_id``: cached ones still fresh, or those ``read()`` returns."""
        source = os.environ.get(_CONN_ENV_PREFIX + conn_id.upper())
        entry = self._entries.get(conn_id)
        if entry is not None and entry.source == source and self.clock() < entry.until:
            if isinstance(entry.read, Exception):
                raise entry.read.with_traceback(None)
            return entry.read
        reads = self._reads.setdefault(asyncio.get_running_loop(), {})
        key = (conn_id, source)
        pending = reads.get(key)
        if pending is None:
            pending = reads[key] = asyncio.ensure_future(self._read(conn_id, source, read))
            pending.add_done_callback(functools.partial(_forget_read, reads, key))
        return await asyncio.shield(pending)  # a cancelled caller does not cancel the others' read

    async def refresh(
        self,
        conn_id: str,
        read: Callable[[], Awaitable[ConnectionSettings]],
        refused: ConnectionSettings,
    ) -> ConnectionSettings:
        """Return the settings of ``conn_id`` read again after ``refused`` were (unless another hook did)."""
        entry = self._entries.get(conn_id)
        if entry is not None and not isinstance(entry.read, Exception):
            if entry.read != refused:
                return entry.read
            del self._entries[conn_id]
        return await self.get(conn_id, read)

    async def _read(
        self, conn_id: str, source: str | None, read: Callable[[], Awaitable[ConnectionSettings]]
    ) -> ConnectionSettings:
        again = conn_id in self._read_before
        try:
            settings = await read()
        except Exception as exc:
            self._entries[conn_id] = _Entry(source, self.clock() + self.retry, exc)
            if again:
                metrics.connection_reread(conn_id, failed=True)
            raise
        if again:
            metrics.connection_reread(conn_id)
        self._read_before.add(conn_id)
        self._entries[conn_id] = _Entry(source, self.clock() + self.ttl, settings)
        return settings

    def clear(self) -> None:
        """Forget every entry and failed read: the next hook of each connection reads it again."""
        self._entries.clear()


_CONN_ENV_PREFIX = "AIRFLOW_CONN_"


def _forget_read(
    reads: dict[tuple[str, str | None], asyncio.Future[ConnectionSettings]],
    key: tuple[str, str | None],
    done: asyncio.Future[ConnectionSettings],
) -> None:
    if reads.get(key) is done:
        del reads[key]
    if not done.cancelled():
        done.exception()  # retrieved: no "exception never retrieved" when every caller was cancelled


SETTINGS_CACHE = SettingsCache()
