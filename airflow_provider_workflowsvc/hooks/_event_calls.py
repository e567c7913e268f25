"""The job events' endpoints (the live service's): the feed, its read state, notification channels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from airflow_provider_workflowsvc.exceptions import validate_input
from airflow_provider_workflowsvc.hooks._calls import (
    Endpoint,
    Endpoints,
    _deletion,
    _given,
    _non_empty,
    _path_id,
    _uuid,
    endpoints_of,
)
from airflow_provider_workflowsvc.hooks._exchange import ApiCall, RetryPolicy, parser
from airflow_provider_workflowsvc.models import (
    ChannelList,
    CreateChannel,
    JobEventType,
    ListNotificationsParams,
    MarkNotificationsRead,
    Notification,
    NotificationChannel,
    NotificationCount,
    NotificationPage,
    UpdateChannel,
    request_json,
)


class JobEventEndpoints(Endpoints):
    """The job events' endpoints, after the others (a hook class on this one has both)."""

    @Endpoint
    def list_notifications(
        workflow_id: str | UUID | None = None,
        event_types: Iterable[JobEventType] | str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        unread_only: bool | None = None,
    ) -> ApiCall[NotificationPage]:
        """
        Read one page of the service's job events, newest first: of one workflow, of some event types
        (:data:`~airflow_provider_workflowsvc.models.JOB_EVENT_TYPES`), created since a moment (a
        date-time without a zone is UTC), ``limit`` (1 to 100) at most; the page's ``next_cursor`` as
        ``cursor`` reads the next one. Reading never marks an event read.
        """
        given = {"workflow_id": workflow_id, "event_types": event_types, "since": since, "limit": limit}
        given |= {"cursor": cursor, "unread_only": unread_only}
        params = validate_input(ListNotificationsParams, "list_notifications parameters", given).query()
        return ApiCall("GET", "/notifications", parser(NotificationPage), params=params)

    @Endpoint
    def get_notification(notification_id: str) -> ApiCall[Notification]:
        """Fetch one job event of the feed."""
        path = f"/notifications/{_path_id(notification_id, 'notification_id')}"
        return ApiCall("GET", path, parser(Notification))

    @Endpoint
    def count_unread_notifications(workflow_id: str | UUID | None = None) -> ApiCall[int]:
        """Count the job events not read yet by the connection's user (of one workflow when given)."""
        params = None if workflow_id is None else {"workflow_id": _uuid(workflow_id, "workflow_id")}
        return ApiCall("GET", "/notifications/unread-count", _count, params=params)

    @Endpoint
    def mark_notifications_read(
        notification_ids: Iterable[str] | None = None,
        *,
        before: datetime | None = None,
        workflow_id: str | UUID | None = None,
    ) -> ApiCall[int]:
        """
        Mark job events read for the connection's user (the service's bell, a person's state: the
        provider never marks any): up to 100 by id, or all created ``before`` a moment (of one workflow
        when given). Returns how many were newly marked.
        """
        given = {"notification_ids": notification_ids, "before": before, "workflow_id": workflow_id}
        body = validate_input(MarkNotificationsRead, "mark_notifications_read", _given(given))
        return ApiCall("POST", "/notifications/mark-read", _count, json=request_json(body))

    # -- notification channels: a workflow's and the workspace's (the live service's) --------------

    @Endpoint
    def create_workflow_channel(
        workflow_id: str | UUID, channel_type: str, **fields: Any
    ) -> ApiCall[NotificationChannel]:
        """
        Create a notification channel of a workflow: ``channel_type`` ``webhook`` (``url``: HTTPS;
        ``secret``: 24 to 75 bytes, write-only, signs the deliveries) or ``email`` (``email_config``);
        ``event_types`` (at least one), ``description`` (up to 255 characters), ``enabled``.
        """
        return _channel_write("POST", _channels(_workflow(workflow_id)), CreateChannel, channel_type, fields)

    @Endpoint
    def list_workflow_channels(
        workflow_id: str | UUID, channel_type: str | None = None
    ) -> ApiCall[list[NotificationChannel]]:
        """List a workflow's notification channels (of one type when given)."""
        return _channel_list(_workflow(workflow_id), channel_type)

    @Endpoint
    def get_workflow_channel(workflow_id: str | UUID, channel_id: str) -> ApiCall[NotificationChannel]:
        """Fetch one notification channel of a workflow (never its secret)."""
        return ApiCall("GET", _channels(_workflow(workflow_id), channel_id), parser(NotificationChannel))

    @Endpoint
    def update_workflow_channel(
        workflow_id: str | UUID, channel_id: str, **fields: Any
    ) -> ApiCall[NotificationChannel]:
        """Change a workflow's notification channel: only the fields given are sent (``secret=""``: none)."""
        path = _channels(_workflow(workflow_id), channel_id)
        return _channel_write("PATCH", path, UpdateChannel, None, fields)

    @Endpoint
    def delete_workflow_channel(workflow_id: str | UUID, channel_id: str) -> ApiCall[None]:
        """Delete a notification channel of a workflow."""
        return _deletion(_channels(_workflow(workflow_id), channel_id))

    @Endpoint
    def verify_workflow_channel(
        workflow_id: str | UUID, channel_id: str, code: str | None = None
    ) -> ApiCall[NotificationChannel | None]:
        """Verify a workflow's email channel with the code its recipient got (it sends once verified)."""
        return _channel_verify(_channels(_workflow(workflow_id), channel_id, "/verify"), code)

    @Endpoint
    def create_workspace_channel(channel_type: str, **fields: Any) -> ApiCall[NotificationChannel]:
        """Create a notification channel of the workspace: all its events (fields as a workflow's)."""
        return _channel_write("POST", _channels(""), CreateChannel, channel_type, fields)

    @Endpoint
    def list_workspace_channels(channel_type: str | None = None) -> ApiCall[list[NotificationChannel]]:
        """List the workspace's notification channels (of one type when given)."""
        return _channel_list("", channel_type)

    @Endpoint
    def get_workspace_channel(channel_id: str) -> ApiCall[NotificationChannel]:
        """Fetch one notification channel of the workspace (never its secret)."""
        return ApiCall("GET", _channels("", channel_id), parser(NotificationChannel))

    @Endpoint
    def update_workspace_channel(channel_id: str, **fields: Any) -> ApiCall[NotificationChannel]:
        """Change a workspace's notification channel: only the fields given are sent (``secret=""``: none)."""
        return _channel_write("PATCH", _channels("", channel_id), UpdateChannel, None, fields)

    @Endpoint
    def delete_workspace_channel(channel_id: str) -> ApiCall[None]:
        """Delete a notification channel of the workspace."""
        return _deletion(_channels("", channel_id))

    @Endpoint
    def verify_workspace_channel(
        channel_id: str, code: str | None = None
    ) -> ApiCall[NotificationChannel | None]:
        """Verify a workspace's email channel with the code sent to its recipient."""
        return _channel_verify(_channels("", channel_id, "/verify"), code)


def _count(data: Any) -> int:
    return parser(NotificationCount)(data).count


def _workflow(workflow_id: str | UUID) -> str:
    return f"/workflows/{_uuid(workflow_id, 'workflow_id')}"


def _channels(scope: str, channel_id: str | None = None, below: str = "") -> str:
    path = f"{scope}/notifications/channels"
    return path if channel_id is None else f"{path}/{_path_id(channel_id, 'channel_id')}{below}"


def _channel_write(
    method: str, path: str, model: type[UpdateChannel], channel_type: str | None, fields: Mapping[str, Any]
) -> ApiCall[NotificationChannel]:
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
    return ApiCall("POST", path, _channel_or_none, json=body)


def _channel_or_none(data: Any) -> NotificationChannel | None:
    """Read a verification's answer (undocumented): the channel when it is one, else None."""
    return parser(NotificationChannel)(data) if isinstance(data, Mapping) and "id" in data else None


ENDPOINTS: tuple[Endpoint[Any, Any], ...] = endpoints_of(JobEventEndpoints)
"""Every endpoint, in the order declared: each hook has one method of its name per endpoint."""
