"""
How one request travels: :func:`exchange` holds its decisions without I/O and yields the steps it needs,
which :func:`send` (sync) and :func:`~._pool.asend` (async) perform. Why: docs/decisions/wire.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import closing
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic import ValidationError

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceAuthError,
    WorkflowServiceError,
    WorkflowServiceValidationError,
    format_validation_errors,
)
from airflow_provider_workflowsvc.hooks._failures import ANSWERED, Failures, is_retryable
from airflow_provider_workflowsvc.hooks._files import UploadFile, _atomic_file, _PartFile
from airflow_provider_workflowsvc.hooks._listing import JobItems, Listing, parse_listed, parser
from airflow_provider_workflowsvc.models import ConnectionCheck, Job, JobStatus
from airflow_provider_workflowsvc.storage import StagedObject

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks._settings import ConnectionSettings
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

log = logging.getLogger("airflow_provider_workflowsvc.hooks.workflowsvc")

T = TypeVar("T")

MAX_REDIRECTS = 3

RetryPolicy = Literal["idempotent", "unsent-only"]
"""``idempotent``: retry on any transient failure. ``unsent-only``: only when the request never left."""


@dataclass(frozen=True)
class ApiCall(Generic[T]):
    """Everything needed to send one request and interpret its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, str] | None = None
    json: Any = None
    files: tuple[UploadFile, ...] = ()
    files_part: str = "input_files"
    form: Mapping[str, str] | None = None
    retry: RetryPolicy = "idempotent"
    download_to: Path | StagedObject | None = None
    head_bytes: int | None = None  # read only the first bytes of a successful answer; parsed as bytes
    status_filter: JobStatus | None = None
    job_listing: bool = False
    created_since: datetime | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)  # masked in an error's echo (a channel's secret)


# --------------------------------------------------------------------------------------------------
# Parsing answers


@functools.cache
def list_parser(tp: Any) -> Callable[[Any], Listing[Any]]:
    """Parse a JSON list item by item: an item that cannot be read is skipped with a warning naming it."""
    what = getattr(tp, "__name__", str(tp))

    def parse(data: Any) -> Listing[Any]:
        if not isinstance(data, list):
            raise ValueError(f"expected a list of {what} records, got {type(data).__name__}")
        listing: Listing[Any] = Listing()
        for index, raw in enumerate(data):
            parse_listed(tp, index, raw, listing)
        return listing

    return parse


def ignore_body(_: Any) -> None:
    return None


# --------------------------------------------------------------------------------------------------
# Answers the spec does not show (a run's, a connection check's start)


def parse_run_result(data: Any) -> Job | None:
    """Read the answer of a run or a launch (the spec shows none): a job when it looks like one, else None."""
    if isinstance(data, Mapping) and "id" in data and ("status" in data or "workflow_id" in data):
        parsed: Job = parser(Job)(data)
        return parsed
    if isinstance(data, Mapping) and isinstance(data.get("job"), Mapping):
        return parse_run_result(data["job"])
    return None


def parse_check_started(data: Any) -> ConnectionCheck:
    """Read the start answer (not shown in the spec): a check record, or (empty body) one not yet known."""
    if data is None or data == "":
        return ConnectionCheck()
    parsed: ConnectionCheck = parser(ConnectionCheck)(data)
    return parsed


# --------------------------------------------------------------------------------------------------
# Deadlines


_DEADLINE: ContextVar[float | None] = ContextVar("workflowsvc_deadline", default=None)


@contextlib.contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """
    End every hook request made in this block (this thread or task, and those it starts) by ``at`` (epoch
    seconds; None: none): timeouts cut to the time left, no retry or request that could not start in time.
    """
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


# --------------------------------------------------------------------------------------------------
# The transport: a hook's settings turned into requests


class _Transport(Failures):
    """A hook's settings turned into requests, and answers into results (failures: :class:`Failures`)."""

    spellings: ClassVar[dict[str, str]] = {}  # base URL: "platform" or "spec", once a job showed it

    def __init__(self, settings: ConnectionSettings, conn_id: str = "") -> None:
        self.settings = settings
        self.conn_id = conn_id  # the Airflow connection read ("": settings given), named in errors
        self._path_forms: dict[str, str] = {}
        self._urls: dict[str, httpx.URL] = {}

    def learn_spelling(self, result: Any) -> None:
        """Remember how the service spells job statuses, from the first job of ``result`` that shows it."""
        jobs = result if isinstance(result, list) else (result,)
        raw = next(
            (
                job.raw_status
                for job in jobs
                if isinstance(job, Job) and job.raw_status and any(c.isalpha() for c in job.raw_status)
            ),
            None,
        )
        if raw is not None:
            self.spellings[self.settings.base_url] = "platform" if raw == raw.upper() else "spec"

    def request(
        self, call: ApiCall[Any], method: str, path: str, parts: contextlib.ExitStack
    ) -> dict[str, Any]:
        """Return the arguments of ``build_request`` for ``call`` (no body when a 303 made it a GET)."""
        with_body = method == call.method
        files: Any = None  # httpx types file parts as IO[bytes]; a _PartFile has what it uses
        if call.files and with_body:
            files = [
                (call.files_part, (f.filename, parts.enter_context(closing(_PartFile(f.path))), f.media_type))
                for f in call.files
            ]
        return {
            "method": method,
            "url": self._url(path),
            "params": call.params,
            "json": call.json if with_body else None,
            "data": call.form if with_body else None,
            "files": files,
            "timeout": self.request_timeout(method, path),
        }

    def _url(self, path: str) -> httpx.URL:
        """Return the URL of ``path``, parsed once for the first 64 paths (4-13 % of a read's work, #45)."""
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(self.settings.base_url + "/" + path.lstrip("/"))
            if len(self._urls) < 64:
                self._urls[path] = url
        return url

    def request_timeout(self, method: str, path: str) -> Any:
        """Return the client's timeouts cut to the time left before the :func:`deadline` (if any)."""
        at = _DEADLINE.get()
        if at is None:
            return httpx.USE_CLIENT_DEFAULT
        left = at - time.time()
        if left <= 0:
            reason = "not sent: the deadline for this wait has passed"
            raise self.connection_error(method, path, reason, sent=False, kind="deadline")
        read = min(self.settings.timeout, left)
        return httpx.Timeout(read, connect=min(self.settings.connect_timeout, left))

    def redirect_target(
        self, call: ApiCall[Any], method: str, path: str, response: httpx.Response
    ) -> tuple[str, str] | None:
        """Return the ``(method, path)`` of a redirect we follow (same origin, under the base URL) or None."""
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

    def finish(self, call: ApiCall[T], method: str, path: str, response: httpx.Response) -> T:
        """Raise the error the (fully read) response stands for, or parse its body."""
        if not response.is_success:
            raise self.api_error(method, self.full_path(path), response, call.secrets)
        if call.parse is ignore_body:  # what the answer says is not read (a delete, a cancel)
            return call.parse(None)
        if call.head_bytes is not None:
            return call.parse(response.content[: call.head_bytes])
        try:
            data = response.json() if response.content else None
        except ValueError:
            raise self.unreadable(method, path, response) from None
        try:
            result = call.parse(data)
        except ValueError as exc:  # pydantic's ValidationError, or not a list (``list_parser``)
            complaint = str(exc)
            if isinstance(exc, ValidationError):
                complaint = format_validation_errors(exc.errors(include_input=False, include_url=False))
            raise self.unreadable(method, path, response, complaint) from None
        self.learn_spelling(result)
        return result


# --------------------------------------------------------------------------------------------------
# The exchange: every decision of one call, without I/O


@dataclass
class _Send:
    """Send a request (``build_request`` arguments); the answer is the response, its body not read yet."""

    request: dict[str, Any]


@dataclass
class _Body:
    """Read the body into ``sink`` until it ends, ``most`` bytes are read, or ``sink`` returns True."""

    response: httpx.Response
    sink: Callable[[bytes], Any]
    most: int | None = None


@dataclass
class _Sleep:
    seconds: float


@dataclass
class _Reread:
    """Read the connection again after a refusal; answer: a new transport, else why not (None: unchanged)."""

    refused: ConnectionSettings = field(repr=False)


Step = _Send | _Body | _Sleep | _Reread
Exchange = Generator[Step, Any, T]


def exchange(
    transport: _Transport, call: ApiCall[T], retries: bool = True, operation: str = ""
) -> Exchange[T]:
    """Make one call's attempts and retries, and after a 401/403 one more with the connection read anew."""
    attempts = _attempts if call.status_filter is None else _spelled_attempts
    try:
        return (yield from attempts(transport, call, retries, operation))
    except WorkflowServiceAuthError as exc:
        renewed = (yield _Reread(transport.settings)) if retries and transport.conn_id else None
        if not isinstance(renewed, _Transport):
            raise transport.still_refused(exc, unread=renewed) from None
    try:
        return (yield from attempts(renewed, call, retries, operation))
    except WorkflowServiceAuthError as exc:
        raise renewed.still_refused(exc) from None


def _spelled_attempts(transport: _Transport, call: ApiCall[T], retries: bool, operation: str) -> Exchange[T]:
    """Make the attempts of a call with a status filter in the service's spelling (decisions/wire.md)."""
    status = call.status_filter
    assert status is not None
    known = transport.spellings.get(transport.settings.base_url)
    first = known or "platform"
    for spelling in (first, "spec" if first == "platform" else "platform"):
        last = spelling != first
        spelled = status.platform_value if spelling == "platform" else status.wire_value
        spelled_call = dataclasses.replace(call, params={**(call.params or {}), "status": spelled})
        try:
            result = yield from _attempts(transport, spelled_call, retries, operation)
        except WorkflowServiceValidationError:
            if last:
                raise
            continue
        if result or last or known:
            return result
    raise AssertionError("unreachable")  # pragma: no cover


def _attempts(transport: _Transport, call: ApiCall[T], retries: bool, operation: str) -> Exchange[T]:
    """Make a call's attempts: one more after a retryable failure, ``max_retries`` at most, none too late."""
    attempt = 1
    while True:
        try:
            return (yield from _attempt(transport, call, operation))
        except WorkflowServiceError as exc:
            if not (retries and is_retryable(call, exc)) or attempt > transport.settings.max_retries:
                raise
            pause = transport.pause(exc, attempt)
            at = _DEADLINE.get()
            if at is not None and time.time() + pause >= at:  # it could not start before the deadline
                raise
            transport.before_retry(operation, exc, pause, attempt)
        yield _Sleep(pause)
        attempt += 1


def _attempt(transport: _Transport, call: ApiCall[T], operation: str) -> Exchange[T]:
    """Make one attempt: the request, the redirects it may follow, the answer read, saved or refused."""
    method, path = call.method, transport._path_forms.get(call.path, call.path)
    for hop in range(MAX_REDIRECTS + 1):
        with contextlib.ExitStack() as parts:  # upload parts are open only while sent
            try:
                response = yield _Send(transport.request(call, method, path, parts))
            except httpx.TransportError as exc:
                metrics.no_answer(operation, transport.conn_id)
                raise transport.transport_error(method, path, exc) from None
        metrics.answered(operation, transport.conn_id, response.status_code)
        ANSWERED.add((transport.conn_id, transport.settings.base_url))
        follow = transport.redirect_target(call, method, path, response)
        if follow is None:
            break
        if hop == MAX_REDIRECTS:
            raise WorkflowServiceError(f"{method} {transport.full_path(path)}: too many redirects")
        method, path = follow
    own_answer = response.is_success and method == call.method
    head = call.head_bytes if response.is_success else None  # a successful answer's start only
    limit = transport.settings.max_response_bytes
    declared = response.headers.get("content-length", "")
    body = bytearray()
    try:
        if call.download_to is not None and own_answer:
            with _atomic_file(call.download_to) as file:  # never a partial file at the target
                yield _Body(response, lambda chunk: file.write(chunk) and False)
            return call.download_to  # type: ignore[return-value]
        if call.job_listing and own_answer:
            return (yield from _job_listing(transport, call, method, path, response))
        if head is None and declared.isdigit() and int(declared) > limit:
            raise transport.too_large(method, path, response, f"declares {int(declared)} bytes")
        yield _Body(response, body.extend, head if head is not None else limit + 1)  # into a buffer
    except httpx.TransportError as exc:
        raise transport.transport_error(method, path, exc) from None
    if head is None and len(body) > limit:
        raise transport.too_large(method, path, response, f"passed {limit} bytes and was not read further")
    response._content = bytes(body)  # kept on the response, as ``Response.read()`` does
    return transport.finish(call, method, path, response)


def _job_listing(
    transport: _Transport, call: ApiCall[T], method: str, path: str, response: httpx.Response
) -> Exchange[T]:
    """Read a job listing's answer item by item (:class:`~._listing.JobItems`), stopping when it may."""
    items = JobItems(
        transport.settings.base_url,
        call.created_since,
        learn=call.status_filter is None and not (call.params or {}).get("status"),
        limit=transport.settings.max_response_bytes,
        fail=functools.partial(transport.unreadable, method, path, response),
    )
    yield _Body(response, items.add)
    listing = items.listing()
    if listing is None:  # not a list: read whole, as any answer
        response._content = bytes(items.raw)
        return transport.finish(call, method, path, response)
    transport.learn_spelling(listing)
    return listing  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# The sync driver: the sync hook's ``_send``


def send(hook: WorkflowServiceHook, call: ApiCall[T], retries: bool = True, operation: str = "") -> T:
    """Send ``call`` with the hook's ``httpx.Client``: perform the exchange's steps."""
    transport, client = hook._connection()
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
                        opened.close()
                    opened = answer = client.send(client.build_request(**step.request), stream=True)
                elif isinstance(step, _Body):
                    read = 0
                    for chunk in step.response.iter_bytes():
                        read += len(chunk)
                        if step.sink(chunk) or (step.most is not None and read >= step.most):
                            break
                elif isinstance(step, _Sleep):
                    hook._sleep(step.seconds)
                else:
                    answer = hook._transport if hook._reread() else hook._unread
                    client = hook.get_conn()
            except Exception as exc:
                error = exc
    finally:
        steps.close()
        if opened is not None:
            opened.close()
