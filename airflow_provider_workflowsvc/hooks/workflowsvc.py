"""
The Workflow Service hooks: one method per endpoint, sync (``httpx.Client``) and async (``AsyncClient``).

Each endpoint method builds its request from the table of wire facts in :mod:`._calls` and sends it
through :mod:`._transport` (retries, redirects, deadlines, errors). A sync hook keeps one HTTP client
(one connection pool) for its whole life. Async hooks in one event loop with the same connection settings
share one ``httpx.AsyncClient`` (:mod:`._pool`); it is closed when its last hook is. Close a hook with
``close()`` / ``aclose()`` or use it as a context manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import httpx
from tenacity import AsyncRetrying, Retrying

from airflow_provider_workflowsvc._compat import CONN_FIELDS_READ, BaseHook
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceAuthError,
    WorkflowServiceAuthUnconfirmedError,
    WorkflowServiceError,
)
from airflow_provider_workflowsvc.hooks import CONN_TYPE, DEFAULT_CONN_ID, _calls
from airflow_provider_workflowsvc.hooks._calls import ApiCall, Listing, LocalFile, StagedObject
from airflow_provider_workflowsvc.hooks._files import _atomic_file
from airflow_provider_workflowsvc.hooks._pool import (
    _acquire_client,
    _ClientKey,
    _release_client,
    shared_client_users,
)
from airflow_provider_workflowsvc.hooks._settings import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESPONSE_BYTES,
    SETTINGS_CACHE,
    SETTINGS_RETRY,
    SETTINGS_TTL,
    ConnectionSettings,
    _mask_secrets,
)
from airflow_provider_workflowsvc.hooks._transport import (
    _DEADLINE,  # noqa: F401 - re-exported: tests read the deadline of the running context
    _AsyncReplayFirstFailure,
    _connection_failed,
    _ReplayFirstFailure,
    _Transport,
    deadline,
    is_retryable,
)
from airflow_provider_workflowsvc.models import (
    ConnectionCheck,
    DestinationConnector,
    DestinationType,
    Element,
    Job,
    JobDetails,
    JobFailedFiles,
    JobStatus,
    SourceConnector,
    SourceType,
    Workflow,
)

if TYPE_CHECKING:
    from airflow.sdk import Connection

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

T = TypeVar("T")

ENDPOINT_NAMES: tuple[str, ...] = tuple(build.__name__ for build in _calls.ENDPOINTS)
"""The names of the endpoint methods both hooks have, in the order of :data:`._calls.ENDPOINTS`."""


class _Pages:
    """
    The pages ``iter_workflows`` asks for, and which workflows of each are new.

    It ends at the first page that is empty or brings no workflow not seen before (a server that caps
    ``page_size`` or ignores ``page`` cannot make it stop early or loop forever).
    """

    def __init__(self, params: dict[str, Any]) -> None:
        self._params = dict(params)
        self._page = int(self._params.pop("page", None) or 1)
        self._size = int(self._params.pop("page_size", None) or 100)
        self._seen: set[Any] = set()
        self.skipped: list[Any] = []
        """The raw items of the pages read so far that the provider could not read."""

    def query(self) -> dict[str, Any]:
        """Return the ``list_workflows`` arguments of the next page."""
        return {**self._params, "page": self._page, "page_size": self._size}

    def new(self, batch: list[Workflow]) -> list[Workflow] | None:
        """
        Return the workflows of ``batch`` not seen before; None when the last page was reached (nothing
        new, readable or not: a page of unreadable items alone does not end the paging).
        """
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
    """
    Every workflow matching ``params`` (as :meth:`WorkflowServiceHook.iter_workflows`), with the items of
    every page that could not be read in ``skipped`` (a name check must see them: it fails closed).
    """
    pages = _Pages(params)
    workflows: list[Workflow] = []
    while (new := pages.new(hook.list_workflows(**pages.query()))) is not None:
        workflows.extend(new)
    return Listing(workflows, pages.skipped)


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
        self._reads_connection = settings is None
        """True when the settings come from the Airflow connection (and are read again as it changes)."""
        self._settings_read_at = 0.0
        self._transport_obj: _Transport | None = None
        self._unread: str | None = None
        """Why the connection could not be read again (None: its last read worked)."""

    @staticmethod
    def _settings_from(conn: Connection) -> ConnectionSettings:
        settings = ConnectionSettings.from_connection(conn)
        _mask_secrets(settings)
        return settings

    def _make_transport(self, settings: ConnectionSettings) -> _Transport:
        self._settings = settings
        self._settings_read_at = SETTINGS_CACHE.now()
        self._transport_obj = _Transport(settings, self.workflowsvc_conn_id if self._reads_connection else "")
        return self._transport_obj

    def _settings_stale(self) -> bool:
        """
        Whether the connection is due to be read again: settings read from it are kept for
        ``SETTINGS_TTL`` seconds, so a wait of hours picks up a rotated token within that time.
        """
        return self._reads_connection and SETTINGS_CACHE.now() - self._settings_read_at >= SETTINGS_TTL

    def _keeps_settings(self, exc: Exception) -> bool:
        """
        After a failed read of the connection: True when the settings in use are kept (warned, read
        again in ``SETTINGS_RETRY`` s); False for the first read, which has none to keep (it fails).

        A secrets backend that times out once, or a connection briefly absent or empty while it is
        deleted and added again, must not end a wait whose credentials still work: only the service's
        refusal after a read that worked may (:meth:`_still_refused`).
        """
        if self._transport_obj is None:
            return False
        reason = self._transport_obj.redact_foreign(f"{type(exc).__name__}: {exc}".rstrip(": "))
        if reason != self._unread:
            self.log.warning(
                "Could not read connection %r again (%s); keeping the settings read before, "
                "trying again in %.0f s",
                self.workflowsvc_conn_id,
                reason,
                SETTINGS_RETRY,
            )
        self._unread = reason
        self._settings_read_at = SETTINGS_CACHE.now() - SETTINGS_TTL + SETTINGS_RETRY
        return True

    def _renew(self, settings: ConnectionSettings) -> bool:
        """Use ``settings`` read again from the connection; True when they differ from those in use."""
        if self._unread is not None:
            self.log.info("Connection %r could be read again", self.workflowsvc_conn_id)
            self._unread = None
        current = self._transport_obj.settings if self._transport_obj is not None else None
        if settings == current:
            self._settings_read_at = SETTINGS_CACHE.now()
            return False
        if current is not None:
            self.log.info(
                "The settings of connection %r changed since they were read; using the new ones",
                self.workflowsvc_conn_id,
            )
        self._make_transport(settings)
        return True

    def _still_refused(self, exc: WorkflowServiceAuthError) -> WorkflowServiceAuthError:
        """Return the error of a request refused again after the connection was read anew, naming it."""
        where = f"connection {self.workflowsvc_conn_id!r}"
        if self._unread is not None:
            detail = (
                f"{exc.detail}; {where} could not be read again ({self._unread}), so the refusal is not "
                "taken as final: its credentials may have been rotated"
            )
            return WorkflowServiceAuthUnconfirmedError(
                exc.status_code, exc.method, exc.path, detail, exc.reason
            )
        detail = (
            f"{exc.detail}; {where} was read again and the service still refuses its credentials "
            "(check the token in its password field and its api_key extra)"
            if self._reads_connection
            else exc.detail
        )
        refused = type(exc)(exc.status_code, exc.method, exc.path, detail, exc.reason)
        return refused

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
            """Return the provider info's ``conn-fields`` as WTForms fields."""
            from airflow_provider_workflowsvc.hooks._connection_form import form_widgets

            return form_widgets()

        @classmethod
        def get_ui_field_behaviour(cls) -> dict[str, Any]:
            """Return the provider info's ``ui-field-behaviour``."""
            from airflow_provider_workflowsvc.hooks._connection_form import ui_field_behaviour

            return ui_field_behaviour()

    @property
    def settings(self) -> ConnectionSettings:
        return self._transport.settings

    @property
    def _transport(self) -> _Transport:
        if self._transport_obj is None and self._settings is not None:  # given, or read by another hook
            return self._make_transport(self._settings)
        if self._transport_obj is None or self._settings_stale():
            self._reread()
        assert self._transport_obj is not None
        return self._transport_obj

    def _reread(self) -> bool:
        """Read the connection again; True when its settings changed (the client is then replaced)."""
        try:
            settings = self._settings_from(self.get_connection(self.workflowsvc_conn_id))
        except Exception as exc:
            if not self._keeps_settings(exc):
                raise
            return False
        changed = self._renew(settings)
        if changed:
            self.close()
        return changed

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

    def _send(self, call: ApiCall[T]) -> T:
        try:
            return self._send_retrying(call)
        except WorkflowServiceAuthError as exc:
            # Refused: nothing was done, so sending again cannot duplicate anything. Rotated credentials
            # are read from the connection, bypassing the time they are kept for.
            if not (self._reads_connection and self._reread()):
                raise self._still_refused(exc) from None
        try:
            return self._send_retrying(call)
        except WorkflowServiceAuthError as exc:
            raise self._still_refused(exc) from None

    def _send_retrying(self, call: ApiCall[T]) -> T:
        try:
            return self._send_once(call)
        except WorkflowServiceError as exc:
            if not is_retryable(call, exc):
                raise
            replay = _ReplayFirstFailure(exc, self._send_once)
        retrying = Retrying(sleep=self._sleep, **self._transport.retrying_options(call))
        return retrying(replay, call)

    def _send_once(self, call: ApiCall[T]) -> T:
        exchange, client = self._transport.exchange(call), self.get_conn()
        try:
            while True:
                with contextlib.ExitStack() as stack:
                    response = client.send(exchange.request(client, stack), stream=True)
                    stack.callback(response.close)
                    if exchange.follow(response):
                        continue
                    target = exchange.download_target(response)
                    if target is not None:
                        return self._save(target, response)  # type: ignore[return-value]
                    cap = exchange.body_cap(response)
                    for chunk in response.iter_bytes():
                        if cap.add(chunk):
                            break  # the rest is not needed (a listing's window, an answer's start)
                    return exchange.finish(cap.done())
        except httpx.TransportError as exc:
            raise exchange.failed(exc) from None

    @staticmethod
    def _save(target: Path | StagedObject, response: httpx.Response) -> Path | StagedObject:
        """Stream the body into a file beside ``target``, then rename it: never a partial ``target``."""
        with _atomic_file(target) as fh:
            for chunk in response.iter_bytes():
                fh.write(chunk)
        return target

    # Endpoints, in the order of _calls.ENDPOINTS

    def list_sources(self, source_type: SourceType | str | None = None) -> list[SourceConnector]:
        """List source connectors, optionally only those of one type."""
        return self._send(_calls.list_sources(source_type))

    def get_source(self, source_id: str | UUID) -> SourceConnector:
        """Fetch one source connector."""
        return self._send(_calls.get_source(source_id))

    def create_source(
        self, name: str, type: SourceType | str, config: Mapping[str, Any] | Any
    ) -> SourceConnector:
        """Create a source connector (config is a typed config model or a dict)."""
        return self._send(_calls.create_source(name, type, config))

    def update_source(
        self,
        source_id: str | UUID,
        config: Mapping[str, Any] | Any,
        source_type: SourceType | str | None = None,
    ) -> SourceConnector:
        """Replace a source connector's config (every setting must be sent, changed or not)."""
        return self._send(_calls.update_source(source_id, config, source_type))

    def delete_source(self, source_id: str | UUID) -> None:
        """Delete a source connector."""
        return self._send(_calls.delete_source(source_id))

    def start_source_connection_check(self, source_id: str | UUID) -> ConnectionCheck:
        """
        Start a connectivity test of a source connector.

        Read its outcome with ``get_source_connection_check``.
        """
        return self._send(_calls.start_source_connection_check(source_id))

    def get_source_connection_check(self, source_id: str | UUID) -> ConnectionCheck:
        """Fetch the most recent connectivity test of a source connector."""
        return self._send(_calls.get_source_connection_check(source_id))

    def list_destinations(
        self, destination_type: DestinationType | str | None = None
    ) -> list[DestinationConnector]:
        """List destination connectors, optionally only those of one type."""
        return self._send(_calls.list_destinations(destination_type))

    def get_destination(self, destination_id: str | UUID) -> DestinationConnector:
        """Fetch one destination connector."""
        return self._send(_calls.get_destination(destination_id))

    def create_destination(
        self, name: str, type: DestinationType | str, config: Mapping[str, Any] | Any
    ) -> DestinationConnector:
        """Create a destination connector (config is a typed config model or a dict)."""
        return self._send(_calls.create_destination(name, type, config))

    def update_destination(
        self,
        destination_id: str | UUID,
        config: Mapping[str, Any] | Any,
        destination_type: DestinationType | str | None = None,
    ) -> DestinationConnector:
        """Replace a destination connector's config (every setting must be sent, changed or not)."""
        return self._send(_calls.update_destination(destination_id, config, destination_type))

    def delete_destination(self, destination_id: str | UUID) -> None:
        """Delete a destination connector."""
        return self._send(_calls.delete_destination(destination_id))

    def start_destination_connection_check(self, destination_id: str | UUID) -> ConnectionCheck:
        """
        Start a connectivity test of a destination connector.

        Read its outcome with ``get_destination_connection_check``.
        """
        return self._send(_calls.start_destination_connection_check(destination_id))

    def get_destination_connection_check(self, destination_id: str | UUID) -> ConnectionCheck:
        """Fetch the most recent connectivity test of a destination connector."""
        return self._send(_calls.get_destination_connection_check(destination_id))

    def create_workflow(
        self,
        name: str,
        workflow_type: str,
        *,
        source_id: str | UUID | None = None,
        destination_id: str | UUID | None = None,
        workflow_nodes: list[Any] | None = None,
        schedule: str | None = None,
        reprocess_all: bool | None = None,
        template_id: str | None = None,
    ) -> Workflow:
        """
        Create a workflow; ``schedule`` is one of the spec's values (``every hour``, ``daily``, ...);
        ``template_id`` (the live service's) builds it from a workflow template.
        """
        return self._send(
            _calls.create_workflow(
                name,
                workflow_type,
                source_id=source_id,
                destination_id=destination_id,
                workflow_nodes=workflow_nodes,
                schedule=schedule,
                reprocess_all=reprocess_all,
                template_id=template_id,
            )
        )

    def list_workflows(self, **params: Any) -> list[Workflow]:
        """List one page of workflows; every query parameter of the spec is accepted by name."""
        return self._send(_calls.list_workflows(**params))

    def get_workflow(self, workflow_id: str | UUID) -> Workflow:
        """Fetch one workflow."""
        return self._send(_calls.get_workflow(workflow_id))

    def update_workflow(self, workflow_id: str | UUID, **fields: Any) -> Workflow:
        """Change a workflow's settings; only the fields given are sent."""
        return self._send(_calls.update_workflow(workflow_id, **fields))

    def delete_workflow(self, workflow_id: str | UUID) -> None:
        """Delete a workflow."""
        return self._send(_calls.delete_workflow(workflow_id))

    def run_workflow(
        self, workflow_id: str | UUID, files: Iterable[LocalFile] | str | os.PathLike[str] | None = None
    ) -> Job | None:
        """
        Run a workflow once: no body, or one streamed ``input_files`` part per local file (a path, or
        ``(path, name)`` to send it under another name).

        Returns the created job when the server answers with one. Never retried once it may have reached
        the server, so a run is never duplicated by a retry.
        """
        return self._send(_calls.run_workflow(workflow_id, files))

    def list_jobs(
        self,
        workflow_id: str | UUID | None = None,
        status: JobStatus | str | None = None,
        created_since: datetime | None = None,
    ) -> list[Job]:
        """
        List jobs, optionally of one workflow and/or in one status (both filters combine).

        ``status`` is sent in the spelling of the dialect the hook last saw in a job record (``im
        progress`` in the spec's, ``IN_PROGRESS`` in the platform's), unless it is given as text in one
        dialect's exact spelling: then it is sent as written.

        ``created_since`` keeps only the jobs created at or after it (a date-time without a zone is UTC),
        and jobs without a readable ``created_at``. The service has no such filter: the answer is read item
        by item as it arrives, the others are dropped unread, and once the service's listings have shown
        they come newest first, reading stops past the jobs asked for (:mod:`._listing`).
        """
        return self._send(_calls.list_jobs(workflow_id, status, created_since))

    def get_job(self, job_id: str) -> Job:
        """Fetch one job."""
        return self._send(_calls.get_job(job_id))

    def get_job_details(self, job_id: str) -> JobDetails:
        """Fetch a job's processing status, message and per-node file counts."""
        return self._send(_calls.get_job_details(job_id))

    def get_job_failed_files(self, job_id: str) -> JobFailedFiles:
        """Fetch the files a job failed to process, each with its error."""
        return self._send(_calls.get_job_failed_files(job_id))

    def cancel_job(self, job_id: str) -> None:
        """Ask the service to stop a running job (cancelling twice is harmless, so it is retried)."""
        return self._send(_calls.cancel_job(job_id))

    def download_job_output(
        self,
        job_id: str,
        file_id: str,
        node_id: str | None = None,
        path: str | os.PathLike[str] | StagedObject | None = None,
    ) -> list[Element] | Path:
        """
        Download one output of a local-to-local job: parsed elements, or streamed to ``path`` when given.

        Without ``node_id`` the service chooses the node (the live service: the last node's output; the
        spec requires one). A file written to ``path`` appears only once complete (written beside it,
        then renamed).
        """
        return self._send(_calls.download_job_output(job_id, file_id, node_id, path))

    def get_output_document(self, job_id: str, file_id: str, node_id: str | None = None) -> str | None:
        """
        Read the name of the document one output of a job was made from (the download, its first
        ``OUTPUT_HEAD_BYTES`` only); None when the output names none. Not an endpoint of its own.
        """
        return self._send(_calls.get_output_document(job_id, file_id, node_id))

    def iter_workflows(self, **params: Any) -> Iterator[Workflow]:
        """
        Yield every workflow matching ``params`` (any list_workflows filter), fetching page after page.

        Stops at the first page that is empty or brings no workflow not seen before (a server that
        caps ``page_size`` or ignores ``page`` cannot make it stop early or loop forever).
        """
        pages = _Pages(params)
        while (new := pages.new(self.list_workflows(**pages.query()))) is not None:
            yield from new

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

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    :param settings: connection settings to use instead of reading the Airflow connection.
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
        if self._transport_obj is None and self._settings is not None:  # given, or read by another hook
            return self._make_transport(self._settings)
        if self._transport_obj is None or self._settings_stale():
            await self._areread(SETTINGS_CACHE.get(self.workflowsvc_conn_id, self._aread_settings))
        assert self._transport_obj is not None
        return self._transport_obj

    async def _areread(self, read: Awaitable[ConnectionSettings]) -> bool:
        """Take the settings ``read`` returns; True when they changed (the shared client is then let go)."""
        try:
            settings = await read
        except Exception as exc:
            if not self._keeps_settings(exc):
                raise
            return False
        changed = self._renew(settings)
        if changed:
            await self.aclose()
        return changed

    async def _aread_settings(self) -> ConnectionSettings:
        return self._settings_from(await self._aget_connection())

    async def _aget_connection(self) -> Connection:
        getter = getattr(BaseHook, "aget_connection", None)
        if getter is not None:
            return await getter(self.workflowsvc_conn_id)
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.get_connection)(self.workflowsvc_conn_id)

    async def get_async_conn(self) -> httpx.AsyncClient:
        """
        Return the hook's HTTP client: the one the running event loop's hooks with the same settings share
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
            return await self._send_retrying(call)
        except WorkflowServiceAuthError as exc:
            # Refused: nothing was done. Read the connection again, bypassing the settings cache (once
            # for all the hooks whose settings were refused), and send again if the credentials changed.
            refused = self._settings
            if not (
                self._reads_connection
                and refused is not None
                and await self._areread(
                    SETTINGS_CACHE.refresh(self.workflowsvc_conn_id, self._aread_settings, refused)
                )
            ):
                raise self._still_refused(exc) from None
        try:
            return await self._send_retrying(call)
        except WorkflowServiceAuthError as exc:
            raise self._still_refused(exc) from None

    async def _send_retrying(self, call: ApiCall[T]) -> T:
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
        exchange, client = (await self._atransport()).exchange(call), await self.get_async_conn()
        try:
            while True:
                with contextlib.ExitStack() as stack:
                    response = await client.send(exchange.request(client, stack), stream=True)
                    try:
                        if exchange.follow(response):
                            continue
                        target = exchange.download_target(response)
                        if target is not None:
                            return await self._save(target, response)  # type: ignore[return-value]
                        cap = exchange.body_cap(response)
                        async for chunk in response.aiter_bytes():
                            if cap.add(chunk):
                                break  # the rest is not needed (a listing's window, an answer's start)
                        return exchange.finish(cap.done())
                    finally:
                        await response.aclose()
        except httpx.TransportError as exc:
            raise exchange.failed(exc) from None

    @staticmethod
    async def _save(target: Path | StagedObject, response: httpx.Response) -> Path | StagedObject:
        """Stream the body into a file beside ``target``, then rename it: never a partial ``target``."""
        with _atomic_file(target) as fh:
            async for chunk in response.aiter_bytes():
                fh.write(chunk)
        return target

    # Endpoints, in the order of _calls.ENDPOINTS

    async def list_sources(self, source_type: SourceType | str | None = None) -> list[SourceConnector]:
        """List source connectors, optionally only those of one type."""
        return await self._send(_calls.list_sources(source_type))

    async def get_source(self, source_id: str | UUID) -> SourceConnector:
        """Fetch one source connector."""
        return await self._send(_calls.get_source(source_id))

    async def create_source(
        self, name: str, type: SourceType | str, config: Mapping[str, Any] | Any
    ) -> SourceConnector:
        """Create a source connector (config is a typed config model or a dict)."""
        return await self._send(_calls.create_source(name, type, config))

    async def update_source(
        self,
        source_id: str | UUID,
        config: Mapping[str, Any] | Any,
        source_type: SourceType | str | None = None,
    ) -> SourceConnector:
        """Replace a source connector's config (every setting must be sent, changed or not)."""
        return await self._send(_calls.update_source(source_id, config, source_type))

    async def delete_source(self, source_id: str | UUID) -> None:
        """Delete a source connector."""
        return await self._send(_calls.delete_source(source_id))

    async def start_source_connection_check(self, source_id: str | UUID) -> ConnectionCheck:
        """
        Start a connectivity test of a source connector.

        Read its outcome with ``get_source_connection_check``.
        """
        return await self._send(_calls.start_source_connection_check(source_id))

    async def get_source_connection_check(self, source_id: str | UUID) -> ConnectionCheck:
        """Fetch the most recent connectivity test of a source connector."""
        return await self._send(_calls.get_source_connection_check(source_id))

    async def list_destinations(
        self, destination_type: DestinationType | str | None = None
    ) -> list[DestinationConnector]:
        """List destination connectors, optionally only those of one type."""
        return await self._send(_calls.list_destinations(destination_type))

    async def get_destination(self, destination_id: str | UUID) -> DestinationConnector:
        """Fetch one destination connector."""
        return await self._send(_calls.get_destination(destination_id))

    async def create_destination(
        self, name: str, type: DestinationType | str, config: Mapping[str, Any] | Any
    ) -> DestinationConnector:
        """Create a destination connector (config is a typed config model or a dict)."""
        return await self._send(_calls.create_destination(name, type, config))

    async def update_destination(
        self,
        destination_id: str | UUID,
        config: Mapping[str, Any] | Any,
        destination_type: DestinationType | str | None = None,
    ) -> DestinationConnector:
        """Replace a destination connector's config (every setting must be sent, changed or not)."""
        return await self._send(_calls.update_destination(destination_id, config, destination_type))

    async def delete_destination(self, destination_id: str | UUID) -> None:
        """Delete a destination connector."""
        return await self._send(_calls.delete_destination(destination_id))

    async def start_destination_connection_check(self, destination_id: str | UUID) -> ConnectionCheck:
        """
        Start a connectivity test of a destination connector.

        Read its outcome with ``get_destination_connection_check``.
        """
        return await self._send(_calls.start_destination_connection_check(destination_id))

    async def get_destination_connection_check(self, destination_id: str | UUID) -> ConnectionCheck:
        """Fetch the most recent connectivity test of a destination connector."""
        return await self._send(_calls.get_destination_connection_check(destination_id))

    async def create_workflow(
        self,
        name: str,
        workflow_type: str,
        *,
        source_id: str | UUID | None = None,
        destination_id: str | UUID | None = None,
        workflow_nodes: list[Any] | None = None,
        schedule: str | None = None,
        reprocess_all: bool | None = None,
        template_id: str | None = None,
    ) -> Workflow:
        """
        Create a workflow; ``schedule`` is one of the spec's values (``every hour``, ``daily``, ...);
        ``template_id`` (the live service's) builds it from a workflow template.
        """
        return await self._send(
            _calls.create_workflow(
                name,
                workflow_type,
                source_id=source_id,
                destination_id=destination_id,
                workflow_nodes=workflow_nodes,
                schedule=schedule,
                reprocess_all=reprocess_all,
                template_id=template_id,
            )
        )

    async def list_workflows(self, **params: Any) -> list[Workflow]:
        """List one page of workflows; every query parameter of the spec is accepted by name."""
        return await self._send(_calls.list_workflows(**params))

    async def get_workflow(self, workflow_id: str | UUID) -> Workflow:
        """Fetch one workflow."""
        return await self._send(_calls.get_workflow(workflow_id))

    async def update_workflow(self, workflow_id: str | UUID, **fields: Any) -> Workflow:
        """Change a workflow's settings; only the fields given are sent."""
        return await self._send(_calls.update_workflow(workflow_id, **fields))

    async def delete_workflow(self, workflow_id: str | UUID) -> None:
        """Delete a workflow."""
        return await self._send(_calls.delete_workflow(workflow_id))

    async def run_workflow(
        self, workflow_id: str | UUID, files: Iterable[LocalFile] | str | os.PathLike[str] | None = None
    ) -> Job | None:
        """
        Run a workflow once: no body, or one streamed ``input_files`` part per local file (a path, or
        ``(path, name)`` to send it under another name).

        Returns the created job when the server answers with one. Never retried once it may have reached
        the server, so a run is never duplicated by a retry.
        """
        return await self._send(_calls.run_workflow(workflow_id, files))

    async def list_jobs(
        self,
        workflow_id: str | UUID | None = None,
        status: JobStatus | str | None = None,
        created_since: datetime | None = None,
    ) -> list[Job]:
        """
        List jobs, optionally of one workflow and/or in one status (both filters combine).

        ``status`` is sent in the spelling of the dialect the hook last saw in a job record (``im
        progress`` in the spec's, ``IN_PROGRESS`` in the platform's), unless it is given as text in one
        dialect's exact spelling: then it is sent as written.

        ``created_since`` keeps only the jobs created at or after it (a date-time without a zone is UTC),
        and jobs without a readable ``created_at``. The service has no such filter: the answer is read item
        by item as it arrives, the others are dropped unread, and once the service's listings have shown
        they come newest first, reading stops past the jobs asked for (:mod:`._listing`).
        """
        return await self._send(_calls.list_jobs(workflow_id, status, created_since))

    async def get_job(self, job_id: str) -> Job:
        """Fetch one job."""
        return await self._send(_calls.get_job(job_id))

    async def get_job_details(self, job_id: str) -> JobDetails:
        """Fetch a job's processing status, message and per-node file counts."""
        return await self._send(_calls.get_job_details(job_id))

    async def get_job_failed_files(self, job_id: str) -> JobFailedFiles:
        """Fetch the files a job failed to process, each with its error."""
        return await self._send(_calls.get_job_failed_files(job_id))

    async def cancel_job(self, job_id: str) -> None:
        """Ask the service to stop a running job (cancelling twice is harmless, so it is retried)."""
        return await self._send(_calls.cancel_job(job_id))

    async def download_job_output(
        self,
        job_id: str,
        file_id: str,
        node_id: str | None = None,
        path: str | os.PathLike[str] | StagedObject | None = None,
    ) -> list[Element] | Path:
        """
        Download one output of a local-to-local job: parsed elements, or streamed to ``path`` when given.

        Without ``node_id`` the service chooses the node (the live service: the last node's output; the
        spec requires one). A file written to ``path`` appears only once complete (written beside it,
        then renamed).
        """
        return await self._send(_calls.download_job_output(job_id, file_id, node_id, path))

    async def get_output_document(self, job_id: str, file_id: str, node_id: str | None = None) -> str | None:
        """
        Read the name of the document one output of a job was made from (the download, its first
        ``OUTPUT_HEAD_BYTES`` only); None when the output names none. Not an endpoint of its own.
        """
        return await self._send(_calls.get_output_document(job_id, file_id, node_id))

    async def iter_workflows(self, **params: Any) -> AsyncIterator[Workflow]:
        """
        Yield every workflow matching ``params`` (any list_workflows filter), fetching page after page.

        Stops at the first page that is empty or brings no workflow not seen before.
        """
        pages = _Pages(params)
        while (new := pages.new(await self.list_workflows(**pages.query()))) is not None:
            for workflow in new:
                yield workflow
