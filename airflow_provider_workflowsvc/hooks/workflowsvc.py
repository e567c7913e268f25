"""Hooks for the Workflow Service: authentication and one method per endpoint, sync and async.

Both hooks get their methods from one table of endpoint descriptions (:mod:`._calls`); they differ only
in how a request is sent (``httpx.Client`` or ``httpx.AsyncClient``). A hook keeps one HTTP client (one
connection pool) for its whole life; close it with ``close()`` / ``aclose()`` or use it as a context
manager.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, ParamSpec, TypeVar, overload
from urllib.parse import urljoin, urlsplit

import httpx
from airflow.sdk import BaseHook
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt

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
from airflow_provider_workflowsvc.hooks import _calls
from airflow_provider_workflowsvc.hooks._calls import ApiCall, ResponseShapeError
from airflow_provider_workflowsvc.models import Workflow

if TYPE_CHECKING:
    from airflow.sdk import Connection

__all__ = ["ConnectionSettings", "WorkflowServiceAsyncHook", "WorkflowServiceHook"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_CONN_ID = "workflowsvc_default"
CONN_TYPE = "workflowsvc"
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
MAX_REDIRECTS = 3
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("airflow-provider-workflowsvc")
    except Exception:
        return "unknown"


class ConnectionSettings(BaseModel):
    """Where the service is and how to talk to it; built from an Airflow connection or directly."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    token: SecretStr | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(default=60.0, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    verify: bool | str = True
    max_retries: int = Field(default=5, ge=0, le=20)
    retry_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=60.0, ge=0)

    @field_validator("base_url")
    @classmethod
    def _normalize_base_url(cls, value: str) -> str:
        value = value.strip()
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base URL must be an http(s) URL such as https://host/api/v1, got {value!r}")
        if parts.path in ("", "/"):
            value = value.rstrip("/") + "/api/v1"
        return value.rstrip("/")

    @classmethod
    def from_connection(cls, conn: Connection) -> ConnectionSettings:
        """Read host (base URL), password (token) and extras (api_key, timeouts, TLS, retries)."""
        extra = conn.extra_dejson or {}
        try:
            return cls(
                base_url=_base_url_of(conn, extra),
                token=conn.password or None,
                api_key=extra.get("api_key") or None,
                **{k: v for k, v in extra.items() if k in _EXTRA_SETTINGS and v not in (None, "")},
            )
        except ValueError as exc:
            details = exc.errors(include_input=False) if hasattr(exc, "errors") else [{"msg": str(exc)}]
            raise WorkflowServiceInputError(
                f"connection {conn.conn_id!r} is misconfigured: {format_validation_errors(details)}"
            ) from None

    def headers(self) -> dict[str, str]:
        """Authentication headers: Bearer token and/or ``service-api-key``, whichever are set."""
        headers = {"accept": "application/json", "user-agent": f"airflow-provider-workflowsvc/{_version()}"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token.get_secret_value()}"
        if self.api_key is not None:
            headers["service-api-key"] = self.api_key.get_secret_value()
        return headers

    def httpx_options(self) -> dict[str, Any]:
        """Keyword arguments shared by ``httpx.Client`` and ``httpx.AsyncClient``."""
        return {
            "base_url": self.base_url + "/",
            "headers": self.headers(),
            "timeout": httpx.Timeout(self.timeout, connect=self.connect_timeout),
            "verify": self.verify,
            "follow_redirects": False,
        }


_EXTRA_SETTINGS = frozenset(
    {"timeout", "connect_timeout", "verify", "max_retries", "retry_wait", "retry_max_wait"}
)


def _base_url_of(conn: Connection, extra: dict[str, Any]) -> str:
    host = (conn.host or "").strip()
    if not host:
        raise ValueError("host is empty: set it to the service's base URL, e.g. https://host/api/v1")
    if "://" in host:
        return host
    scheme = str(extra.get("protocol") or "https")
    port = f":{conn.port}" if conn.port else ""
    path = (conn.schema or "api/v1").strip("/")
    return f"{scheme}://{host}{port}/{path}"


def _mask_secrets(settings: ConnectionSettings) -> None:
    """Register the credentials with Airflow's log masker (a no-op outside a task process)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDK
        return
    for secret in (settings.token, settings.api_key):
        if secret is not None:
            mask_secret(secret.get_secret_value())


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
    except (TypeError, ValueError):
        return None


def _error_detail(response: httpx.Response) -> str:
    """The server's explanation: FastAPI ``detail`` (string or list) or ``message``, else the raw text."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return text[:300] + ("…" if len(text) > 300 else "")
    if isinstance(body, dict):
        detail = body.get("detail", body.get("message", body.get("error")))
        if isinstance(detail, list):
            return format_validation_errors([d if isinstance(d, dict) else {"msg": str(d)} for d in detail])
        if detail is not None:
            return str(detail)
    return str(body)[:300]


def _raise_for_status(call: ApiCall[Any], path: str, response: httpx.Response) -> None:
    if response.is_success:
        return
    cls = error_for_status(response.status_code)
    args = (response.status_code, call.method, path, _error_detail(response), response.reason_phrase)
    if cls is WorkflowServiceRateLimitError:
        raise WorkflowServiceRateLimitError(*args, retry_after=_retry_after_seconds(response))
    raise cls(*args)


def _parse_body(call: ApiCall[T], path: str, response: httpx.Response) -> T:
    if not call.wants_body:
        return call.parse(None)
    try:
        data = response.json() if response.content else None
    except ValueError:
        snippet = response.text[:120].replace("\n", " ")
        raise WorkflowServiceResponseError(
            call.method, path, response.status_code, f"not JSON ({len(response.content)} bytes): {snippet!r}"
        ) from None
    try:
        return call.parse(data)
    except ResponseShapeError as exc:
        raise WorkflowServiceResponseError(call.method, path, response.status_code, str(exc)) from None


def _transport_error(call: ApiCall[Any], path: str, exc: httpx.TransportError) -> WorkflowServiceConnectionError:
    error = WorkflowServiceConnectionError(call.method, path, f"{type(exc).__name__}: {exc}".rstrip(": "))
    error.sent = not isinstance(exc, _UNSENT_ERRORS)  # type: ignore[attr-defined]
    return error


def is_retryable(call: ApiCall[Any], exc: BaseException) -> bool:
    """Whether ``call`` may be sent again after ``exc`` without risk of doing its work twice."""
    if isinstance(exc, WorkflowServiceConnectionError):
        return call.retry == "idempotent" or not getattr(exc, "sent", True)
    if isinstance(exc, WorkflowServiceApiError):
        return call.retry == "idempotent" and exc.status_code in RETRYABLE_STATUS
    return False


class _Transport:
    """What both hooks share: settings, request building, redirects between path forms, retries."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        self._path_forms: dict[str, str] = {}

    def url_path(self, call: ApiCall[Any]) -> str:
        """The path to use for ``call``, after any redirect the server taught us (``/x`` ↔ ``/x/``)."""
        return self._path_forms.get(call.path, call.path)

    def full_path(self, path: str) -> str:
        return urlsplit(self.settings.base_url).path + path

    def build(self, client: httpx.Client | httpx.AsyncClient, call: ApiCall[Any], path: str,
              stack: contextlib.ExitStack) -> httpx.Request:
        files = None
        if call.files:
            files = [
                ("input_files", (f.filename, stack.enter_context(f.path.open("rb")), f.media_type))
                for f in call.files
            ]
        return client.build_request(call.method, path.lstrip("/"), params=call.params, json=call.json, files=files)

    def redirect_target(self, call: ApiCall[Any], path: str, response: httpx.Response) -> str | None:
        """Where to re-send after a same-origin redirect (same method and body), else None."""
        if not response.is_redirect or "location" not in response.headers:
            return None
        target = urlsplit(urljoin(str(response.request.url), response.headers["location"]))
        base = urlsplit(self.settings.base_url)
        if (target.scheme, target.netloc) != (base.scheme, base.netloc) or not target.path.startswith(base.path):
            return None
        new_path = target.path[len(base.path):] or "/"
        self._path_forms[call.path] = new_path
        log.debug("%s %s redirected to %s; using that form from now on", call.method, path, new_path)
        return new_path

    def retrying_options(self, call: ApiCall[Any]) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.settings.max_retries + 1),
            "wait": self._wait,
            "retry": retry_if_exception(functools.partial(is_retryable, call)),
            "before_sleep": functools.partial(self._log_retry, call),
            "reraise": True,
        }

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, WorkflowServiceRateLimitError) and exc.retry_after is not None:
            return min(exc.retry_after, self.settings.retry_max_wait)
        backoff = self.settings.retry_wait * 2 ** (state.attempt_number - 1)
        return min(self.settings.retry_max_wait, backoff) * random.uniform(0.5, 1.0)

    def _log_retry(self, call: ApiCall[Any], state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s; retrying in %.1f s (attempt %d of %d)",
            exc, wait, state.attempt_number + 1, self.settings.max_retries + 1,
        )

    def finish(self, call: ApiCall[T], path: str, response: httpx.Response) -> T:
        _raise_for_status(call, self.full_path(path), response)
        return _parse_body(call, self.full_path(path), response)


def _partial_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.part")


# --------------------------------------------------------------------------------------------------
# One table of endpoints for both hooks


class _Endpoint(Generic[P, T]):
    """A hook method made from an endpoint description: returns ``T`` on the sync hook, awaitable on async."""

    def __init__(self, build: Callable[P, ApiCall[T]]) -> None:
        self._build = build
        self.__doc__ = build.__doc__

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


def _page_size(params: dict[str, Any]) -> int:
    return int(params.get("page_size") or 100)


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
        self._settings = settings
        self._transport_obj = _Transport(settings)
        return self._transport_obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workflowsvc_conn_id={self.workflowsvc_conn_id!r})"


class WorkflowServiceHook(_HookBase):
    """Synchronous hook: one ``httpx.Client`` for the hook's life, one method per endpoint.

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    :param settings: connection settings to use instead of reading the Airflow connection.
    """

    def __init__(
        self, workflowsvc_conn_id: str = DEFAULT_CONN_ID, *, settings: ConnectionSettings | None = None
    ) -> None:
        super().__init__(workflowsvc_conn_id, settings=settings)
        self._client: httpx.Client | None = None

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
        return Retrying(**self._transport.retrying_options(call))(self._send_once, call)

    def _send_once(self, call: ApiCall[T]) -> T:
        transport, client = self._transport, self.get_conn()
        path = transport.url_path(call)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                with contextlib.ExitStack() as stack:
                    response = client.send(transport.build(client, call, path, stack), stream=True)
                    try:
                        target = transport.redirect_target(call, path, response)
                        if target is None:
                            if call.download_to is not None and response.is_success:
                                return self._save(call, path, response)  # type: ignore[return-value]
                            response.read()
                            return transport.finish(call, path, response)
                    finally:
                        response.close()
                path = target
        except httpx.TransportError as exc:
            raise _transport_error(call, transport.full_path(path), exc) from None
        raise WorkflowServiceError(f"{call.method} {transport.full_path(path)}: too many redirects")

    @staticmethod
    def _save(call: ApiCall[Any], path: str, response: httpx.Response) -> Path:
        assert call.download_to is not None
        target, partial = call.download_to, _partial_path(call.download_to)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with partial.open("wb") as fh:
                for chunk in response.iter_bytes():
                    fh.write(chunk)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    def iter_workflows(self, **params: Any) -> Iterator[Workflow]:
        """Every workflow matching ``params`` (any list_workflows filter), fetching page after page."""
        size, page = _page_size(params), int(params.pop("page", None) or 1)
        while True:
            batch = self.list_workflows(**{**params, "page": page, "page_size": size})
            yield from batch
            if len(batch) < size:
                return
            page += 1

    def test_connection(self) -> tuple[bool, str]:
        """Make one cheap authenticated call and say, in words, whether it worked."""
        try:
            self.list_workflows(page=1, page_size=1)
        except WorkflowServiceError as exc:
            return False, f"Connection failed: {exc}"
        finally:
            self.close()
        return True, f"Connected to {self.settings.base_url}: credentials accepted."


class WorkflowServiceAsyncHook(_HookBase):
    """Asynchronous hook: one ``httpx.AsyncClient`` for the hook's life, one awaitable method per endpoint.

    Use ``async with WorkflowServiceAsyncHook(...) as hook:`` so the client is closed at the end.
    """

    def __init__(
        self, workflowsvc_conn_id: str = DEFAULT_CONN_ID, *, settings: ConnectionSettings | None = None
    ) -> None:
        super().__init__(workflowsvc_conn_id, settings=settings)
        self._client: httpx.AsyncClient | None = None

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
        """The hook's HTTP client (created on first use)."""
        if self._client is None:
            transport = await self._atransport()
            self._client = httpx.AsyncClient(**transport.settings.httpx_options())
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> WorkflowServiceAsyncHook:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _send(self, call: ApiCall[T]) -> T:
        transport = await self._atransport()
        retrying = AsyncRetrying(**transport.retrying_options(call))
        return await retrying(self._send_once, call)

    async def _send_once(self, call: ApiCall[T]) -> T:
        transport, client = await self._atransport(), await self.get_async_conn()
        path = transport.url_path(call)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                with contextlib.ExitStack() as stack:
                    response = await client.send(transport.build(client, call, path, stack), stream=True)
                    try:
                        target = transport.redirect_target(call, path, response)
                        if target is None:
                            if call.download_to is not None and response.is_success:
                                return await self._save(call, response)  # type: ignore[return-value]
                            await response.aread()
                            return transport.finish(call, path, response)
                    finally:
                        await response.aclose()
                path = target
        except httpx.TransportError as exc:
            raise _transport_error(call, transport.full_path(path), exc) from None
        raise WorkflowServiceError(f"{call.method} {transport.full_path(path)}: too many redirects")

    @staticmethod
    async def _save(call: ApiCall[Any], response: httpx.Response) -> Path:
        assert call.download_to is not None
        target, partial = call.download_to, _partial_path(call.download_to)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with partial.open("wb") as fh:
                async for chunk in response.aiter_bytes():
                    fh.write(chunk)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target

    async def iter_workflows(self, **params: Any) -> AsyncIterator[Workflow]:
        """Every workflow matching ``params`` (any list_workflows filter), fetching page after page."""
        size, page = _page_size(params), int(params.pop("page", None) or 1)
        while True:
            batch = await self.list_workflows(**{**params, "page": page, "page_size": size})
            for workflow in batch:
                yield workflow
            if len(batch) < size:
                return
            page += 1
