"""
One endpoint's machinery: :class:`Endpoint` (a builder that becomes a method of each hook), the checks of
its arguments (a :class:`WorkflowServiceInputError` before anything is sent) and the shapes several
endpoints share. The endpoints themselves are in :mod:`._calls`, each once.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, overload
from urllib.parse import quote
from uuid import UUID

from pydantic import ValidationError

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceInputError,
    format_validation_errors,
    validate_input,
)
from airflow_provider_workflowsvc.hooks._exchange import (
    ApiCall,
    RetryPolicy,
    ignore_body,
    parser,
    send_sync,
)
from airflow_provider_workflowsvc.hooks._files import (  # operators import the upload checks from here
    check_upload_name as check_upload_name,
)
from airflow_provider_workflowsvc.hooks._pool import send_async
from airflow_provider_workflowsvc.models import (
    ChannelList,
    NotificationChannel,
    NotificationCount,
    UpdateChannel,
    UpdateConnector,
    as_utc,
    connector_type_name,
    parse_connector_type,
    parse_enum,
    request_json,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

P = ParamSpec("P")
T = TypeVar("T")
E = TypeVar("E", bound=Enum)


class Endpoint(Generic[P, T]):
    """
    One endpoint: its builder (signature, docstring, wire facts), declared once in :class:`Endpoints`.

    On a hook it is a method of the builder's name and signature that builds the call and sends it:
    ``T`` from the sync hook, an awaitable of ``T`` from the async one (how type checkers see it; at
    run time each hook class holds a real function, :meth:`method`).
    """

    def __init__(self, build: Callable[P, ApiCall[T]]) -> None:
        self.build = build
        self.name = build.__name__
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, hook: None, owner: type) -> Endpoint[P, T]: ...
    @overload
    def __get__(self, hook: WorkflowServiceHook, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, hook: WorkflowServiceAsyncHook, owner: type) -> Callable[P, Awaitable[T]]: ...
    def __get__(self, hook: Any, owner: type) -> Any:
        return self  # only on Endpoints itself: every hook class has its own real methods

    def method(self, owner: type, asynchronous: bool) -> Callable[..., Any]:
        """Return ``owner``'s method that sends this endpoint's call, named, typed and documented as it."""
        method = send_async(self) if asynchronous else send_sync(self)
        qualname = f"{owner.__qualname__}.{self.name}"
        if sys.version_info >= (3, 11):  # a traceback names the endpoint
            method.__code__ = method.__code__.replace(co_name=self.name, co_qualname=qualname)
        else:  # pragma: no cover - Python 3.10
            method.__code__ = method.__code__.replace(co_name=self.name)
        signature = inspect.signature(self.build)
        answer = self.answer_type()
        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        method.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_parameter, *signature.parameters.values()], return_annotation=answer
        )
        hints = typing.get_type_hints(self.build)  # resolved here: the method's own module lacks the names
        method.__annotations__ = {**hints, "return": typing.get_args(hints["return"])[0]}
        method.__name__, method.__qualname__, method.__module__ = self.name, qualname, owner.__module__
        method.__doc__ = self.build.__doc__
        return method

    def answer_type(self) -> str:
        """Return the ``T`` of the builder's ``ApiCall[T]`` return annotation, as text."""
        returned = str(self.build.__annotations__["return"])
        return returned.removeprefix("ApiCall[").removesuffix("]")


# --------------------------------------------------------------------------------------------------
# Argument checks


def _uuid(value: str | UUID, what: str) -> str:
    if isinstance(value, UUID):
        return str(value)
    try:
        return str(UUID(str(value).strip()))
    except (ValueError, AttributeError):
        raise WorkflowServiceInputError(f"{what} must be a UUID, got {value!r}") from None


def _path_id(value: Any, what: str) -> str:
    """Return an id that is one path segment, quoted (job and template ids are strings, not only UUIDs)."""
    text = str(value).strip() if value is not None else ""
    if not text or "/" in text or text in (".", ".."):
        raise WorkflowServiceInputError(f"{what} must be a non-empty {what.replace('_', ' ')}, got {value!r}")
    return quote(text, safe="")


def _job_id(value: str) -> str:
    return _path_id(value, "job_id")


def _enum(enum_cls: type[E], value: Any, what: str) -> E:
    try:
        return parse_enum(enum_cls, value, what)
    except ValueError as exc:
        raise WorkflowServiceInputError(str(exc)) from None


def _moment(value: datetime | None, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise WorkflowServiceInputError(f"{what} must be a datetime, got {type(value).__name__}")
    return as_utc(value)


def _non_empty(value: str, what: str) -> str:
    text = str(value).strip() if value is not None else ""
    if not text:
        raise WorkflowServiceInputError(f"{what} must not be empty")
    return text


def _connector_type(kind: Literal["source", "destination"], value: Any) -> str:
    """Return a connector type's wire name; one the provider does not know passes with a warning."""
    try:
        return connector_type_name(parse_connector_type(kind, value))
    except ValueError as exc:
        raise WorkflowServiceInputError(str(exc)) from None


def _update_connector(
    kind: Literal["source", "destination"], connector_type: Any, config: Any
) -> UpdateConnector:
    if connector_type is not None:
        connector_type = _connector_type(kind, connector_type)
    try:
        return UpdateConnector.for_type(kind, connector_type, config)
    except ValidationError as exc:
        details = format_validation_errors(exc.errors(include_input=False, include_url=False))
        raise WorkflowServiceInputError(f"invalid {kind} connector config: {details}") from None


# --------------------------------------------------------------------------------------------------
# The shapes several endpoints share


def _connector(kind: Literal["source", "destination"], connector_id: str | UUID, below: str = "") -> str:
    """Return the path of a source or destination connector (or of ``below`` it)."""
    return f"/{kind}s/{_uuid(connector_id, f'{kind}_id')}{below}"


def _creation(path: str, model: Any, what: str, fields: Mapping[str, Any], answer: Any) -> ApiCall[Any]:
    """Return a create call: ``fields`` checked as ``model``, never retried once it may have reached it."""
    body = validate_input(model, what, fields)
    return ApiCall("POST", path, parser(answer), json=request_json(body), retry="unsent-only")


def _deletion(path: str) -> ApiCall[None]:
    return ApiCall("DELETE", path, ignore_body, wants_body=False)


def _output_params(file_id: str, node_id: str | None) -> dict[str, str]:
    params = {"file_id": _non_empty(file_id, "file_id")}
    if node_id is not None:
        params["node_id"] = _non_empty(node_id, "node_id")
    return params


# --------------------------------------------------------------------------------------------------
# The shapes of the job events' endpoints


def _given(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _count(data: Any) -> int:
    return parser(NotificationCount)(data).count


def _workflow(workflow_id: str | UUID) -> str:
    return f"/workflows/{_uuid(workflow_id, 'workflow_id')}"


def _channels(scope: str, channel_id: str | None = None, below: str = "") -> str:
    """Return the path of the channels of ``scope`` (a workflow's path; "": the workspace), or of one."""
    path = f"{scope}/notifications/channels"
    return path if channel_id is None else f"{path}/{_path_id(channel_id, 'channel_id')}{below}"


def _channel_write(
    method: str, path: str, model: type[UpdateChannel], channel_type: str | None, fields: Mapping[str, Any]
) -> ApiCall[NotificationChannel]:
    """
    Return a channel create (never retried once it may have arrived) or update; the secret is in the
    request body only, and masked in any error the service answers with.
    """
    given = fields if channel_type is None else {"channel_type": channel_type, **fields}
    body = validate_input(model, "notification channel", given)
    secret = body.secret.get_secret_value() if body.secret is not None else ""
    retry: RetryPolicy = "unsent-only" if method == "POST" else "idempotent"
    json_body = request_json(body)
    return ApiCall(method, path, parser(NotificationChannel), json=json_body, retry=retry, secrets=(secret,))


def _channel_list(scope: str, channel_type: str | None) -> ApiCall[list[NotificationChannel]]:
    params = None if channel_type is None else {"channel_type": _non_empty(channel_type, "channel_type")}
    return ApiCall("GET", _channels(scope), parser(ChannelList), params=params)


def _channel_verify(path: str, code: str | None) -> ApiCall[NotificationChannel | None]:
    body = None if code is None else {"code": _non_empty(code, "code")}
    return ApiCall("POST", path, _channel_or_none, json=body, wants_body=True)


def _channel_or_none(data: Any) -> NotificationChannel | None:
    """Read a verification's answer: the channel when it sends one, else None (its shape is undocumented)."""
    return parser(NotificationChannel)(data) if isinstance(data, Mapping) and "id" in data else None
