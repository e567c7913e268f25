"""
The Workflow Service hooks: one method per endpoint (:mod:`._calls`), sync (``httpx.Client``, one for the
hook's life) and async (the ``httpx.AsyncClient`` the hooks of one event loop and settings share,
:mod:`._pool`). Close a hook with ``close()`` / ``aclose()`` or use it as a context manager.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc._compat import CONN_FIELDS_READ, BaseHook
from airflow_provider_workflowsvc.hooks import CONN_TYPE, DEFAULT_CONN_ID
from airflow_provider_workflowsvc.hooks._calls import Endpoints
from airflow_provider_workflowsvc.hooks._connection_form import form_widgets, ui_field_behaviour
from airflow_provider_workflowsvc.hooks._event_calls import ENDPOINTS, JobEventEndpoints
from airflow_provider_workflowsvc.hooks._exchange import _Transport, deadline, send
from airflow_provider_workflowsvc.hooks._failures import connection_failed, is_retryable
from airflow_provider_workflowsvc.hooks._listing import Listing
from airflow_provider_workflowsvc.hooks._pool import (
    _acquire_client,
    _ClientKey,
    _release_client,
    asend,
    shared_client_users,
)
from airflow_provider_workflowsvc.hooks._settings import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESPONSE_BYTES,
    SETTINGS_CACHE,
    ConnectionSettings,
    settings_of,
)

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_provider_workflowsvc.models import Workflow

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ENDPOINT_NAMES",
    "ConnectionSettings",
    "WorkflowServiceAsyncHook",
    "WorkflowServiceHook",
    "deadline",
    "is_retryable",
    "shared_client_users",
]

ENDPOINT_NAMES: tuple[str, ...] = tuple(each.name for each in ENDPOINTS)
"""The names of the endpoint methods both hooks have, in the order declared."""


class _Pages:
    """The pages ``iter_workflows`` asks for, until one brings nothing new (a server ignoring ``page``)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self._params = dict(params)
        self._page = int(self._params.pop("page", None) or 1)
        self._size = int(self._params.pop("page_size", None) or 100)
        self._seen: set[Any] = set()
        self.skipped: list[Any] = []  # the raw items of the pages read that could not be read

    def query(self) -> dict[str, Any]:
        """Return the ``list_workflows`` arguments of the next page."""
        return {**self._params, "page": self._page, "page_size": self._size}

    def new(self, batch: list[Workflow]) -> list[Workflow] | None:
        """Return the workflows of ``batch`` not seen before; None when nothing is new, readable or not."""
        new = [w for w in batch if w.id not in self._seen]
        unreadable = [raw for raw in getattr(batch, "skipped", ()) if repr(raw) not in self._seen]
        if not new and not unreadable:
            return None
        self._seen.update(w.id for w in new)
        self._seen.update(repr(raw) for raw in unreadable)
        self.skipped.extend(unreadable)
        self._page += 1
        return new


def all_workflows(hook: WorkflowServiceHook, **params: Any) -> Listing[Workflow]:
    """Return every workflow matching ``params``; unreadable items in ``skipped`` (name checks need them)."""
    pages = _Pages(params)
    return Listing(_pages_of(hook, pages), pages.skipped)  # the items read before ``skipped``


def _pages_of(hook: WorkflowServiceHook, pages: _Pages) -> Iterator[Workflow]:
    while (new := pages.new(hook.list_workflows(**pages.query()))) is not None:
        yield from new


class _HookBase(BaseHook):
    """What both hooks share: the Airflow connection they read and the transport built from it."""

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
        self._reads_connection = settings is None  # settings given are never read again
        self._settings_due = 0.0  # when (``SETTINGS_CACHE`` clock) the connection is to be read again
        self._transport_obj: _Transport | None = None
        self._unread: str | None = None  # why the connection could not be read again (None: it could)

    def _make_transport(self, settings: ConnectionSettings) -> _Transport:
        self._settings = settings
        self._settings_due = SETTINGS_CACHE.clock() + SETTINGS_CACHE.ttl
        self._transport_obj = _Transport(settings, self.workflowsvc_conn_id if self._reads_connection else "")
        return self._transport_obj

    def _current_transport(self) -> _Transport | None:
        """Return the transport to use now: None when the connection is due to be read (``SETTINGS_TTL``)."""
        if self._transport_obj is None and self._settings is not None:  # given, or read by another hook
            return self._make_transport(self._settings)
        if self._transport_obj is None or (
            self._reads_connection and SETTINGS_CACHE.clock() >= self._settings_due
        ):
            return None
        return self._transport_obj

    def _renew(self, settings: ConnectionSettings | Exception) -> bool:
        """
        Use the settings read again: True when they differ from those in use. A failed read (its error)
        keeps those in use (decisions/wire.md), and raises when there are none.
        """
        if isinstance(settings, Exception):
            if self._transport_obj is None:
                raise settings
            reason = self._transport_obj.redact_foreign(f"{type(settings).__name__}: {settings}".rstrip(": "))
            if reason != self._unread:
                self.log.warning(
                    "Could not read connection %r again (%s); keeping the settings read before, "
                    "trying again in %.0f s",
                    self.workflowsvc_conn_id,
                    reason,
                    SETTINGS_CACHE.retry,
                )
            self._unread = reason
            self._settings_due = SETTINGS_CACHE.clock() + SETTINGS_CACHE.retry
            return False
        if self._unread is not None:
            self.log.info("Connection %r could be read again", self.workflowsvc_conn_id)
            self._unread = None
        current = self._transport_obj.settings if self._transport_obj is not None else None
        if settings == current:
            self._settings_due = SETTINGS_CACHE.clock() + SETTINGS_CACHE.ttl
            return False
        if current is not None:
            self.log.info(
                "The settings of connection %r changed since they were read; using the new ones",
                self.workflowsvc_conn_id,
            )
        self._make_transport(settings)
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workflowsvc_conn_id={self.workflowsvc_conn_id!r})"


class WorkflowServiceHook(_HookBase, JobEventEndpoints):
    """
    Synchronous hook: one ``httpx.Client`` for the hook's life, one method per endpoint.

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    :param settings: connection settings to use instead of reading the Airflow connection.
    """

    _send = send
    _sleep: Callable[[float], None] = staticmethod(time.sleep)  # how retries wait (replaced in tests)
    _client: httpx.Client | None = None

    if not CONN_FIELDS_READ:  # Airflow < 3.2 builds the connection form from these (deprecated in 3.2)
        get_connection_form_widgets = staticmethod(form_widgets)
        get_ui_field_behaviour = staticmethod(ui_field_behaviour)

    @property
    def settings(self) -> ConnectionSettings:
        return self._transport.settings

    @property
    def _transport(self) -> _Transport:
        transport = self._current_transport()
        if transport is None:
            self._reread()
            transport = self._transport_obj
        assert transport is not None
        return transport

    def _reread(self) -> bool:
        """Read the connection again now; True when its settings changed (the client is then replaced)."""
        try:
            read: ConnectionSettings | Exception = settings_of(self.get_connection(self.workflowsvc_conn_id))
        except Exception as exc:
            read = exc
        if self._transport_obj is not None:
            metrics.connection_reread(self.workflowsvc_conn_id, failed=isinstance(read, Exception))
        changed = self._renew(read)
        if changed:
            self.close()
        return changed

    def _connection(self) -> tuple[_Transport, httpx.Client]:
        """Return the transport, then the client (a re-read that changed the settings let the old one go)."""
        transport = self._transport
        return transport, self.get_conn()

    def get_conn(self) -> httpx.Client:
        """Return the hook's HTTP client (created on first use)."""
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

    def iter_workflows(self, **params: Any) -> Iterator[Workflow]:
        """
        Yield every workflow matching ``params`` (any list_workflows filter), fetching page after page
        until one brings no workflow not seen before.
        """
        return _pages_of(self, _Pages(params))

    def test_connection(self) -> tuple[bool, str]:
        """Make one cheap authenticated call (no retries) and say, in words, whether it worked."""
        transport: _Transport | None = None
        try:
            transport = self._transport
            call = Endpoints.list_workflows.build(page=1, page_size=1)
            send(self, call, retries=False, operation=Endpoints.list_workflows.name)
        except Exception as exc:
            return False, connection_failed(exc, transport)
        finally:
            self.close()
        return True, f"Connection successful: {transport.settings.base_url} accepted the credentials."


class WorkflowServiceAsyncHook(_HookBase, JobEventEndpoints):
    """
    Asynchronous hook: one ``httpx.AsyncClient`` for the hook's life, one awaitable method per endpoint.

    Use ``async with WorkflowServiceAsyncHook(...) as hook:`` so the client is closed at the end.

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    :param settings: connection settings to use instead of reading the Airflow connection.
    """

    _send = asend
    _sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)  # how retries wait
    _client: httpx.AsyncClient | None = None
    _client_of: tuple[asyncio.AbstractEventLoop, _ClientKey] | None = None

    async def _atransport(self) -> _Transport:
        transport = self._current_transport()
        if transport is None:
            await self._areread(SETTINGS_CACHE.get(self.workflowsvc_conn_id, self._aread_settings))
            transport = self._transport_obj
        assert transport is not None
        return transport

    async def _reread_refused(self, refused: ConnectionSettings) -> bool:
        """Read the connection again after ``refused`` were (once for all such hooks); True if it changed."""
        return await self._areread(
            SETTINGS_CACHE.refresh(self.workflowsvc_conn_id, self._aread_settings, refused)
        )

    async def _areread(self, read: Awaitable[ConnectionSettings]) -> bool:
        """Take the settings ``read`` returns; True when they changed (the shared client is then let go)."""
        try:
            settings: ConnectionSettings | Exception = await read
        except Exception as exc:
            settings = exc
        changed = self._renew(settings)
        if changed:
            await self.aclose()
        return changed

    async def _aread_settings(self) -> ConnectionSettings:
        return settings_of(await self._aget_connection())

    async def _aget_connection(self) -> Connection:
        getter = getattr(BaseHook, "aget_connection", None)
        if getter is not None:
            return await getter(self.workflowsvc_conn_id)
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.get_connection)(self.workflowsvc_conn_id)

    async def _aconnection(self) -> tuple[_Transport, httpx.AsyncClient]:
        """:meth:`WorkflowServiceHook._connection`, awaited."""
        transport = self._current_transport() or await self._atransport()
        return transport, await self.get_async_conn()

    async def get_async_conn(self) -> httpx.AsyncClient:
        """Return the client the running event loop's hooks with the same settings share."""
        if self._client is None:
            transport = await self._atransport()
            key, self._client = _acquire_client(transport.settings)
            self._client_of = (asyncio.get_running_loop(), key)
        return self._client

    async def aclose(self) -> None:
        """Let go of the shared client (closing it if this hook was its last user)."""
        client, owner = self._client, self._client_of
        self._client = self._client_of = None
        if client is not None and owner is not None and _release_client(*owner, client):
            await asyncio.ensure_future(client.aclose())  # in a task of its own, as a request is

    async def __aenter__(self) -> WorkflowServiceAsyncHook:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def iter_workflows(self, **params: Any) -> AsyncIterator[Workflow]:
        """Yield every workflow matching ``params``, as :meth:`WorkflowServiceHook.iter_workflows` does."""
        pages = _Pages(params)
        while (new := pages.new(await self.list_workflows(**pages.query()))) is not None:
            for workflow in new:
                yield workflow
