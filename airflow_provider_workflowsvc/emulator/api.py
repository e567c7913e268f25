"""
Routes of the emulated ``/api/v1``: parse the request, call the :class:`Service`, answer JSON.

Plain Starlette routes (no dependency injection) keep request handling lean. Paths are registered
without a trailing slash; the middleware makes the slash form reach them too.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from airflow_provider_workflowsvc.emulator import templates
from airflow_provider_workflowsvc.emulator.channels import Channels
from airflow_provider_workflowsvc.emulator.config import API_PREFIX
from airflow_provider_workflowsvc.emulator.dialect import Dialect, accepted_status_code
from airflow_provider_workflowsvc.emulator.errors import InvalidRequest
from airflow_provider_workflowsvc.emulator.events import Notifications, reader_of
from airflow_provider_workflowsvc.emulator.service import Kind, Service, Upload

__all__ = ["Form", "api_routes", "json_response", "multipart"]

INPUT_FILE_PARTS = frozenset({"input_files", "input_files[]"})
REQUEST_DATA_PART = "request_data"
FORM_MEDIA_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
MAX_FORM_PARTS = 10_000


def json_response(data: Any, status_code: int = 200) -> Response:
    return Response(json.dumps(data, separators=(",", ":")), status_code, media_type="application/json")


def _service(request: Request) -> Service:
    service: Service = request.app.state.emulator.service
    return service


def path_uuid(request: Request, name: str) -> str:
    """Return a path parameter that must be a UUID, canonicalised; 422 otherwise."""
    try:
        return str(uuid.UUID(request.path_params[name]))
    except ValueError:
        raise InvalidRequest.one(["path", name], "Input should be a valid UUID", "uuid_parsing") from None


def query_uuid(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidRequest.one(["query", name], "Input should be a valid UUID", "uuid_parsing") from None


def required_query(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if not value:
        raise InvalidRequest.one(["query", name], "Field required", "missing")
    return value


async def json_body(request: Request) -> dict[str, Any]:
    """Return the request body as a JSON object; 422 when missing, not JSON or not an object."""
    raw = await request.body()
    if not raw.strip():
        raise InvalidRequest.one(["body"], "Field required", "missing")
    try:
        body = json.loads(raw)
    except ValueError:
        raise InvalidRequest.one(["body"], "body is not valid JSON", "json_invalid") from None
    if not isinstance(body, dict):
        raise InvalidRequest.one(["body"], "body must be a JSON object", "dict_type")
    return body


@dataclass
class Form:
    """What a multipart request carries: its ``input_files`` parts and its text parts."""

    files: list[Upload] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        """Return the one text part of this name (None: none given); 422 when it is repeated."""
        values = self.texts.get(name, [])
        if len(values) > 1:
            message = f"give one {name} part, not {len(values)}"
            raise InvalidRequest.one(["body", name], message, "value_error")
        return values[0] if values else None


@asynccontextmanager
async def multipart(request: Request) -> AsyncIterator[Form]:
    """
    Yield the parts of a form request: ``input_files`` / ``input_files[]`` files, and text parts
    (an empty form for other bodies). A form without files may come URL-encoded: that is how the SDK
    (httpx) sends a multipart body that has no file parts.

    Parts are streamed to spooled temporary files (on disk beyond 1 MiB), never read whole into
    memory here; they are deleted when the block ends.
    """
    if not request.headers.get("content-type", "").startswith(FORM_MEDIA_TYPES):
        await request.body()
        yield Form()
        return
    async with request.form(max_files=MAX_FORM_PARTS, max_fields=MAX_FORM_PARTS) as form:
        parsed = Form()
        for index, (key, value) in enumerate(form.multi_items()):
            if key in INPUT_FILE_PARTS:
                if isinstance(value, str) or not value.filename:
                    raise InvalidRequest.one(
                        ["body", key, index],
                        "each input_files part must be a file with a file name",
                        "value_error",
                    )
                parsed.files.append(Upload(value.filename, value.content_type, value.file, _size(value.file)))
            elif isinstance(value, str):
                parsed.texts.setdefault(key, []).append(value)
            elif key == REQUEST_DATA_PART:
                raise InvalidRequest.one(["body", key], "request_data must be a text part", "string_type")
        yield parsed


def _size(file: BinaryIO) -> int:
    file.seek(0, os.SEEK_END)
    return file.tell()


def _connector_routes(kind: Kind, collection: str) -> list[Route]:
    base = f"{API_PREFIX}/{collection}"
    id_name = f"{kind}_id"

    async def list_connectors(request: Request) -> Response:
        return json_response(
            _service(request).list_connectors(kind, request.query_params.get(f"{kind}_type"))
        )

    async def create_connector(request: Request) -> Response:
        return json_response(_service(request).create_connector(kind, await json_body(request)))

    async def get_connector(request: Request) -> Response:
        return json_response(_service(request).get_connector(kind, path_uuid(request, id_name)))

    async def update_connector(request: Request) -> Response:
        connector_id = path_uuid(request, id_name)
        return json_response(_service(request).update_connector(kind, connector_id, await json_body(request)))

    async def delete_connector(request: Request) -> Response:
        return json_response(_service(request).delete_connector(kind, path_uuid(request, id_name)))

    async def start_check(request: Request) -> Response:
        service = _service(request)
        check = service.start_connection_check(kind, path_uuid(request, id_name))
        return json_response(check, accepted_status_code(service.dialect))

    async def get_check(request: Request) -> Response:
        return json_response(_service(request).get_connection_check(kind, path_uuid(request, id_name)))

    item = f"{base}/{{{id_name}}}"
    return [
        Route(base, list_connectors, methods=["GET"]),
        Route(base, create_connector, methods=["POST"]),
        Route(item, get_connector, methods=["GET"]),
        Route(item, update_connector, methods=["PUT"]),
        Route(item, delete_connector, methods=["DELETE"]),
        Route(f"{item}/connection-check", start_check, methods=["POST"]),
        Route(f"{item}/connection-check", get_check, methods=["GET"]),
    ]


async def list_workflows(request: Request) -> Response:
    return json_response(_service(request).list_workflows(request.query_params))


async def create_workflow(request: Request) -> Response:
    return json_response(_service(request).create_workflow(await json_body(request)))


async def get_workflow(request: Request) -> Response:
    return json_response(_service(request).get_workflow(path_uuid(request, "workflow_id")))


async def update_workflow(request: Request) -> Response:
    workflow_id = path_uuid(request, "workflow_id")
    return json_response(_service(request).update_workflow(workflow_id, await json_body(request)))


async def delete_workflow(request: Request) -> Response:
    return json_response(_service(request).delete_workflow(path_uuid(request, "workflow_id")))


async def run_workflow(request: Request) -> Response:
    workflow_id, service = path_uuid(request, "workflow_id"), _service(request)
    async with multipart(request) as form:
        job = service.run_workflow(workflow_id, form.files)
    return json_response(job, accepted_status_code(service.dialect))


async def create_job(request: Request) -> Response:
    """``POST /jobs/``: an on-demand job (200, as the live service's SDK requires)."""
    service = _service(request)
    async with multipart(request) as form:
        job = service.create_job(form.text(REQUEST_DATA_PART), form.files)
    return json_response(job)


async def list_templates(request: Request) -> Response:
    return json_response(templates.list_templates())


async def get_template(request: Request) -> Response:
    template = templates.get_template(request.path_params["template_id"])
    return json_response(template.model_dump(mode="json"))


async def list_jobs(request: Request) -> Response:
    workflow_id = query_uuid(request, "workflow_id")
    return json_response(_service(request).list_jobs(workflow_id, request.query_params.get("status")))


async def get_job(request: Request) -> Response:
    return json_response(_service(request).get_job(path_uuid(request, "job_id")))


async def job_details(request: Request) -> Response:
    return json_response(_service(request).job_details(path_uuid(request, "job_id")))


async def job_failed_files(request: Request) -> Response:
    return json_response(_service(request).job_failed_files(path_uuid(request, "job_id")))


async def cancel_job(request: Request) -> Response:
    return json_response(_service(request).cancel_job(path_uuid(request, "job_id")))


async def download(request: Request) -> Response:
    job_id, service = path_uuid(request, "job_id"), _service(request)
    file_id = required_query(request, "file_id")
    node_id = request.query_params.get("node_id", "").strip() or None
    if node_id is None and service.dialect == "spec":  # the platform serves the last node's output
        node_id = required_query(request, "node_id")
    text = service.download(job_id, file_id, node_id)
    return Response(text, media_type="application/json")


def _notifications(request: Request) -> tuple[Notifications, str]:
    """Return the feed, and whose read state this request sees (its credential's)."""
    return request.app.state.emulator.notifications, reader_of(request.headers)


async def list_notifications(request: Request) -> Response:
    feed, reader = _notifications(request)
    return json_response(feed.list(reader, request.query_params))


async def get_notification(request: Request) -> Response:
    feed, reader = _notifications(request)
    return json_response(feed.get(reader, path_uuid(request, "notification_id")))


async def unread_count(request: Request) -> Response:
    feed, reader = _notifications(request)
    return json_response(feed.unread_count(reader, query_uuid(request, "workflow_id")))


async def mark_read(request: Request) -> Response:
    feed, reader = _notifications(request)
    return json_response(feed.mark_read(reader, await json_body(request)))


def _channel_routes(base: str, workspace: bool) -> list[Route]:
    """Return the routes of a workflow's channels (``base`` has its ``{workflow_id}``) or the workspace's."""

    def parsed(request: Request) -> tuple[Channels, str | None]:
        channels: Channels = request.app.state.emulator.channels
        return channels, None if workspace else path_uuid(request, "workflow_id")

    async def list_channels(request: Request) -> Response:
        channels, scope = parsed(request)
        return json_response(channels.list(scope))

    async def create_channel(request: Request) -> Response:
        channels, scope = parsed(request)
        return json_response(channels.create(scope, await json_body(request)), 201 if workspace else 200)

    async def get_channel(request: Request) -> Response:
        channels, scope = parsed(request)
        return json_response(channels.get(scope, request.path_params["channel_id"]))

    async def update_channel(request: Request) -> Response:
        channels, scope = parsed(request)
        body = await json_body(request)
        return json_response(channels.update(scope, request.path_params["channel_id"], body))

    async def delete_channel(request: Request) -> Response:
        channels, scope = parsed(request)
        channels.delete(scope, request.path_params["channel_id"])
        return Response(status_code=204)

    async def verify_channel(request: Request) -> Response:
        channels, scope = parsed(request)
        return json_response(channels.verify(scope, request.path_params["channel_id"]))

    item = f"{base}/{{channel_id}}"
    return [
        Route(base, list_channels, methods=["GET"]),
        Route(base, create_channel, methods=["POST"]),
        Route(item, get_channel, methods=["GET"]),
        Route(item, update_channel, methods=["PATCH"]),
        Route(item, delete_channel, methods=["DELETE"]),
        Route(f"{item}/verify", verify_channel, methods=["POST"]),
    ]


def api_routes(dialect: Dialect) -> list[Route]:
    """Every endpoint of the spec, the ones pollers hit most first; the platform's own ones in its dialect."""
    workflow = f"{API_PREFIX}/workflows/{{workflow_id}}"
    job = f"{API_PREFIX}/jobs/{{job_id}}"
    notifications = f"{API_PREFIX}/notifications"
    platform_only = [
        Route(f"{API_PREFIX}/jobs", create_job, methods=["POST"]),
        Route(f"{API_PREFIX}/templates", list_templates, methods=["GET"]),
        Route(f"{API_PREFIX}/templates/{{template_id}}", get_template, methods=["GET"]),
        Route(notifications, list_notifications, methods=["GET"]),
        Route(f"{notifications}/unread-count", unread_count, methods=["GET"]),
        Route(f"{notifications}/mark-read", mark_read, methods=["POST"]),
        *_channel_routes(f"{notifications}/channels", workspace=True),
        Route(f"{notifications}/{{notification_id}}", get_notification, methods=["GET"]),
        *_channel_routes(f"{workflow}/notifications/channels", workspace=False),
    ]
    return [
        Route(job, get_job, methods=["GET"]),
        Route(f"{job}/details", job_details, methods=["GET"]),
        Route(f"{API_PREFIX}/jobs", list_jobs, methods=["GET"]),
        Route(f"{job}/failed-files", job_failed_files, methods=["GET"]),
        Route(f"{job}/cancel", cancel_job, methods=["POST"]),
        Route(f"{job}/download", download, methods=["GET"]),
        *_connector_routes("source", "sources"),
        *_connector_routes("destination", "destinations"),
        Route(f"{API_PREFIX}/workflows", list_workflows, methods=["GET"]),
        Route(f"{API_PREFIX}/workflows", create_workflow, methods=["POST"]),
        Route(workflow, get_workflow, methods=["GET"]),
        Route(workflow, update_workflow, methods=["PUT"]),
        Route(workflow, delete_workflow, methods=["DELETE"]),
        Route(f"{workflow}/run", run_workflow, methods=["POST"]),
        *(platform_only if dialect == "platform" else []),
    ]
