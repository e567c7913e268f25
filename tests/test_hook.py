"""The sync and async hooks against a mocked Workflow Service (respx) and a tiny local HTTP server.

Every endpoint method, the wire format (method, path, query, headers, body, multipart parts), error
mapping, retries (sleep replaced, so nothing waits), redirects between slash forms, connection parsing,
``test_connection`` and the rule that credentials never show up in reprs, messages or logs.
"""

from __future__ import annotations

import email.parser
import email.policy
import inspect
import json
import logging
import os
import resource
import stat
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import respx

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceApiError,
    WorkflowServiceAuthError,
    WorkflowServiceConflictError,
    WorkflowServiceConnectionError,
    WorkflowServiceError,
    WorkflowServiceInputError,
    WorkflowServiceNotFoundError,
    WorkflowServiceQuotaError,
    WorkflowServiceRateLimitError,
    WorkflowServiceResponseError,
    WorkflowServiceServerError,
    WorkflowServiceValidationError,
)
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ENDPOINT_NAMES,
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.models import (
    AzureSourceConfig,
    ConnectionCheck,
    ConnectionCheckStatus,
    CreateChannel,
    DestinationConnector,
    Element,
    Job,
    JobDetails,
    JobFailedFiles,
    JobStatus,
    Notification,
    NotificationChannel,
    NotificationPage,
    SourceConnector,
    TemplateDetail,
    TemplateListItem,
    Workflow,
)

TOKEN = "tok-hooktest-7d41c9e2"
API_KEY = "key-hooktest-b83f0a51"
SECRETS = (TOKEN, API_KEY)
HOST = "https://wfsvc.example.test"
BASE = f"{HOST}/api/v1"
SID = "11111111-1111-4111-8111-111111111111"
DID = "22222222-2222-4222-8222-222222222222"
WID = "33333333-3333-4333-8333-333333333333"
JID = "job-44"
NOW = "2024-06-01T12:00:00Z"


def u(path: str) -> str:
    return BASE + path


def assert_no_secrets(*texts: object) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in str(text), f"credential leaked into: {str(text)[:200]}"


def make_settings(**overrides: Any) -> ConnectionSettings:
    values: dict[str, Any] = {
        "base_url": BASE,
        "token": TOKEN,
        "api_key": API_KEY,
        "retry_wait": 0.5,
        "retry_max_wait": 30.0,
        "max_retries": 3,
    }
    values.update(overrides)
    return ConnectionSettings(**values)


class Api:
    """One hook (sync or async) behind one awaitable call style; retry sleeps are recorded, not slept."""

    def __init__(self, kind: str, settings: ConnectionSettings | None = None, conn_id: str | None = None):
        self.kind = kind
        self.waits: list[float] = []
        cls = WorkflowServiceHook if kind == "sync" else WorkflowServiceAsyncHook
        self.hook: Any = cls(conn_id or "workflowsvc_default", settings=settings)
        if kind == "sync":
            self.hook._sleep = self.waits.append
        else:

            async def record(seconds: float) -> None:
                self.waits.append(seconds)

            self.hook._sleep = record

    async def __call__(self, method_name: str, /, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.hook, method_name)(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def iter_workflows(self, **params: Any) -> list[Workflow]:
        if self.kind == "sync":
            return list(self.hook.iter_workflows(**params))
        return [w async for w in self.hook.iter_workflows(**params)]

    async def close(self) -> None:
        if self.kind == "sync":
            self.hook.close()
        else:
            await self.hook.aclose()


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as router:
        yield router


@pytest.fixture
async def api(kind: str) -> AsyncIterator[Api]:
    client = Api(kind, make_settings())
    yield client
    await client.close()


def api_with(kind: str, **overrides: Any) -> Api:
    return Api(kind, make_settings(**overrides))


# --------------------------------------------------------------------------------------------------
# Sample payloads

SOURCE = {
    "id": SID,
    "name": "src",
    "type": "azure",
    "config": {"remote_url": "az://c", "sas_token": "from-server"},
    "created_at": NOW,
    "updated_at": None,
}
DESTINATION = {
    "id": DID,
    "name": "dst",
    "type": "astradb",
    "config": {"collection_name": "c", "token": "from-server"},
    "created_at": NOW,
}
WORKFLOW = {
    "id": WID,
    "name": "wf",
    "sources": [SID],
    "destinations": [DID],
    "workflow_type": "basic",
    "workflow_nodes": [],
    "schedule": {"crontab_entries": [{"cron_expression": "0 0 * * *"}]},
    "status": "active",
    "created_at": NOW,
    "updated_at": None,
    "reprocess_all": False,
}
JOB = {
    "id": JID,
    "status": "im progress",
    "workflow_id": WID,
    "workflow_name": "wf",
    "created_at": NOW,
    "output_node_files": [{"file_id": "f-1", "node_id": "n-1"}],
}
TEMPLATE = {
    "id": "hi_res_partition",
    "name": "High Resolution Partition",
    "description": "Partition with hi_res.",
    "version": "1.0.0",
    "last_updated": "2025-12-01T00:00:00.000000",
}
TEMPLATE_NODE = {"id": "n-1", "name": "Partitioner", "type": "partition", "subtype": "unstructured_api"}
NODE = {"name": "Partitioner", "type": "partition", "subtype": "fast"}
CHECK = {"id": "chk-1", "status": "scheduled", "reason": None, "created_at": NOW, "reported_at": None}
EVENT = {
    "id": "ev-1", "event_type": "job.completed", "payload": {"job_id": JID, "status": "COMPLETED"},
    "created_at": "2026-11-29 06:00:00+00", "workflow_id": WID, "is_read": False,
}  # fmt: skip
HOOK_SECRET = "whsec-hooktest-0123456789abcdef"  # 30 bytes: a channel's signing secret
CHANNEL = {
    "id": "ch-1", "channel_type": "webhook", "event_types": ["job.completed"], "enabled": True,
    "url": "https://hooks.example.test/in", "description": None, "created_at": NOW, "updated_at": NOW,
}  # fmt: skip
CHANNELS = f"/workflows/{WID}/notifications/channels"
ELEMENTS = [
    {
        "type": "Title",
        "element_id": "e1",
        "text": "Hello",
        "metadata": {
            "filename": "a.pdf",
            "data_source": {"permissions_data": [{"read": {"users": ["u1"], "groups": ["g1"]}}]},
        },
    },
    {"type": "NarrativeText", "element_id": "e2", "text": "World", "metadata": {}},
]


# --------------------------------------------------------------------------------------------------
# Every endpoint: method, path, query, body, parsed result


@dataclass
class Case:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    method: str
    path: str
    response: Any
    check: Callable[[Any], bool]
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None  # expected JSON body; None means no body at all
    status: int = 200
    form: dict[str, str] | None = None  # expected URL-encoded form body (instead of JSON)


CASES = [
    Case("list_sources", (), {}, "GET", "/sources/", [SOURCE],
         lambda r: isinstance(r[0], SourceConnector) and r[0].id == SID),
    Case("list_sources", (), {"source_type": "S3"}, "GET", "/sources/", [],
         lambda r: r == [], params={"source_type": "s3"}),
    Case("get_source", (SID,), {}, "GET", f"/sources/{SID}", SOURCE,
         lambda r: isinstance(r, SourceConnector) and r.name == "src"),
    Case("create_source", ("src", "azure", {"remote_url": "az://c", "sas_token": "sas-value"}), {},
         "POST", "/sources/", SOURCE, lambda r: r.id == SID,
         body={"name": "src", "type": "azure", "config": {"remote_url": "az://c", "sas_token": "sas-value"}},
         status=201),
    Case("create_source", ("conf", "confluence", {"url": "https://w", "token": "pat-value"}), {},
         "POST", "/sources/", SOURCE, lambda r: isinstance(r, SourceConnector),
         body={"name": "conf", "type": "confluence", "config": {
             "url": "https://w", "token": "pat-value", "max_num_of_spaces": 500,
             "max_num_of_docs_from_each_space": 150, "extract_images": False, "extract_files": False,
             "cloud": False}}),
    Case("update_source", (SID, AzureSourceConfig(remote_url="az://d", recursive=True)), {}, "PUT",
         f"/sources/{SID}", SOURCE, lambda r: r.id == SID,
         body={"config": {"remote_url": "az://d", "recursive": True}}),
    Case("update_source", (SID, {"remote_url": "s3://b", "secret_key": "sk"}), {"source_type": "s3"}, "PUT",
         f"/sources/{SID}", SOURCE, lambda r: r.id == SID,
         body={"config": {"remote_url": "s3://b", "secret_key": "sk"}}),
    Case("delete_source", (SID,), {}, "DELETE", f"/sources/{SID}", {"deleted": True},
         lambda r: r is None),
    Case("start_source_connection_check", (SID,), {}, "POST", f"/sources/{SID}/connection-check", CHECK,
         lambda r: isinstance(r, ConnectionCheck) and r.status is ConnectionCheckStatus.SCHEDULED),
    Case("start_source_connection_check", (UUID(SID),), {}, "POST", f"/sources/{SID}/connection-check",
         None, lambda r: isinstance(r, ConnectionCheck) and r.status is ConnectionCheckStatus.UNKNOWN,
         status=202),
    Case("get_source_connection_check", (SID,), {}, "GET", f"/sources/{SID}/connection-check",
         {**CHECK, "status": "SUCCESS", "reported_at": NOW},
         lambda r: r.status is ConnectionCheckStatus.SUCCESS and r.status.is_terminal),
    Case("list_destinations", (), {"destination_type": "astradb"}, "GET", "/destinations/", [DESTINATION],
         lambda r: isinstance(r[0], DestinationConnector), params={"destination_type": "astradb"}),
    Case("get_destination", (DID,), {}, "GET", f"/destinations/{DID}", DESTINATION,
         lambda r: r.id == DID),
    Case("create_destination",
         ("dst", "astradb", {"collection_name": "c", "api_endpoint": "https://a", "token": "astra-tok"}), {},
         "POST", "/destinations/", DESTINATION, lambda r: r.id == DID,
         body={"name": "dst", "type": "astradb",
               "config": {"collection_name": "c", "api_endpoint": "https://a", "token": "astra-tok"}}),
    Case("update_destination", (DID, {"collection_name": "c2", "api_endpoint": "https://a", "token": "t2"}),
         {"destination_type": "astradb"}, "PUT", f"/destinations/{DID}", DESTINATION,
         lambda r: r.id == DID,
         body={"config": {"collection_name": "c2", "api_endpoint": "https://a", "token": "t2"}}),
    Case("delete_destination", (DID,), {}, "DELETE", f"/destinations/{DID}", None, lambda r: r is None,
         status=204),
    Case("start_destination_connection_check", (DID,), {}, "POST",
         f"/destinations/{DID}/connection-check", CHECK, lambda r: r.id == "chk-1"),
    Case("get_destination_connection_check", (DID,), {}, "GET", f"/destinations/{DID}/connection-check",
         {**CHECK, "status": "failed", "reason": "bad creds"},
         lambda r: r.status is ConnectionCheckStatus.FAILURE and r.reason == "bad creds"),
    Case("create_workflow", ("wf", "basic"), {"source_id": SID, "destination_id": DID, "schedule": "daily"},
         "POST", "/workflows/", WORKFLOW, lambda r: isinstance(r, Workflow) and r.id == WID,
         body={"name": "wf", "workflow_type": "basic", "source_id": SID, "destination_id": DID,
               "schedule": "daily"}),
    Case("list_workflows", (), {}, "GET", "/workflows/", [WORKFLOW, {**WORKFLOW, "id": SID}],
         lambda r: [w.id for w in r] == [WID, SID]),
    Case("list_workflows", (), {
        "dag_node_configuration_id": "dnc", "source_id": SID, "destination_id": DID, "status": "active",
        "page": 2, "page_size": 5, "created_since": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "created_before": "2024-12-31T00:00:00Z", "name": "wf", "sort_by": "name",
        "sort_direction": "asc", "show_only_soft_deleted": False, "show_recommender_workflows": True},
         "GET", "/workflows/", [], lambda r: r == [],
         params={"dag_node_configuration_id": "dnc", "source_id": SID, "destination_id": DID,
                 "status": "active", "page": "2", "page_size": "5", "created_since": "2024-01-01T00:00:00Z",
                 "created_before": "2024-12-31T00:00:00Z", "name": "wf", "sort_by": "name",
                 "sort_direction": "asc", "show_only_soft_deleted": "false",
                 "show_recommender_workflows": "true"}),
    Case("get_workflow", (WID,), {}, "GET", f"/workflows/{WID}", WORKFLOW,
         lambda r: r.schedule.crontab_entries[0].cron_expression == "0 0 * * *"),
    Case("update_workflow", (WID,), {"schedule": "every hour", "reprocess_all": True}, "PUT",
         f"/workflows/{WID}", WORKFLOW, lambda r: r.id == WID,
         body={"schedule": "every hour", "reprocess_all": True}),
    Case("delete_workflow", (WID,), {}, "DELETE", f"/workflows/{WID}", None, lambda r: r is None),
    Case("run_workflow", (WID,), {}, "POST", f"/workflows/{WID}/run", JOB,
         lambda r: isinstance(r, Job) and r.status is JobStatus.IN_PROGRESS),
    Case("run_workflow", (WID,), {"files": None}, "POST", f"/workflows/{WID}/run", {"accepted": True},
         lambda r: r is None),
    Case("run_workflow", (WID,), {}, "POST", f"/workflows/{WID}/run", {"job": {**JOB, "status": "scheduled"}},
         lambda r: r.id == JID and r.status is JobStatus.SCHEDULED),
    Case("list_jobs", (), {"workflow_id": WID, "status": "in_progress"}, "GET", "/jobs/",
         [JOB, {**JOB, "id": "job-45", "status": "COMPLETED"}],
         lambda r: [j.status for j in r] == [JobStatus.IN_PROGRESS, JobStatus.COMPLETED],
         params={"workflow_id": WID, "status": "IN_PROGRESS"}),
    Case("list_jobs", (), {"status": "failed"}, "GET", "/jobs/", [], lambda r: r == [],
         params={"status": "failed"}),
    Case("get_job", (JID,), {}, "GET", f"/jobs/{JID}", JOB,
         lambda r: r.output_node_files[0].file_id == "f-1"),
    Case("get_job_details", (JID,), {}, "GET", f"/jobs/{JID}/details",
         {"id": JID, "processing_status": "COMPLETED", "message": "ok",
          "node_stats": [{"node_name": "n", "ready": 0, "in_progress": 0, "success": 3, "failure": 1}]},
         lambda r: isinstance(r, JobDetails) and r.node_stats[0].success == 3),
    Case("get_job_failed_files", (JID,), {}, "GET", f"/jobs/{JID}/failed-files",
         {"failed_files": [{"document": "a.pdf", "error": "corrupt"}]},
         lambda r: isinstance(r, JobFailedFiles) and r.failed_files[0].error == "corrupt"),
    Case("cancel_job", (JID,), {}, "POST", f"/jobs/{JID}/cancel", {"status": "stopped"}, lambda r: r is None),
    Case("download_job_output", (JID, "f-1", "n-1"), {}, "GET", f"/jobs/{JID}/download", ELEMENTS,
         lambda r: [e.element_id for e in r] == ["e1", "e2"] and isinstance(r[0], Element)
         and r[0].metadata.data_source.permissions("read").users == ["u1"],
         params={"file_id": "f-1", "node_id": "n-1"}),
    Case("download_job_output", (JID, "f-1"), {}, "GET", f"/jobs/{JID}/download", ELEMENTS,
         lambda r: [e.element_id for e in r] == ["e1", "e2"], params={"file_id": "f-1"}),
    Case("get_output_document", (JID, "f-1", "n-1"), {}, "GET", f"/jobs/{JID}/download", ELEMENTS,
         lambda r: r == "a.pdf", params={"file_id": "f-1", "node_id": "n-1"}),
    Case("create_workflow", ("wf", "custom"), {"template_id": "tpl-9"}, "POST", "/workflows/", WORKFLOW,
         lambda r: r.id == WID, body={"name": "wf", "workflow_type": "custom", "template_id": "tpl-9"}),
    Case("list_sources", (), {"source_type": "Lakehouse"}, "GET", "/sources/", [SOURCE, "unreadable"],
         lambda r: [s.id for s in r] == [SID] and r.skipped == ["unreadable"],
         params={"source_type": "Lakehouse"}),
    Case("list_templates", (), {}, "GET", "/templates/", [TEMPLATE, {"id": "t2", "later": {"x": 1}}, 7],
         lambda r: [t.id for t in r] == ["hi_res_partition", "t2"] and isinstance(r[0], TemplateListItem)
         and r[0].last_updated == "2025-12-01T00:00:00.000000" and r.skipped == [7]),
    Case("get_template", ("hi_res_partition",), {}, "GET", "/templates/hi_res_partition",
         {**TEMPLATE, "nodes": [{**TEMPLATE_NODE, "settings": None}]},
         lambda r: isinstance(r, TemplateDetail) and r.nodes[0].subtype == "unstructured_api"),
    Case("get_template", ("my template",), {}, "GET", "/templates/my%20template", {**TEMPLATE, "nodes": None},
         lambda r: r.nodes == []),
    Case("create_job", (), {"template_id": "hi_res_partition"}, "POST", "/jobs/",
         {**JOB, "status": "SCHEDULED", "job_type": "template", "input_file_ids": []},
         lambda r: isinstance(r, Job) and r.job_type == "template" and r.status is JobStatus.SCHEDULED,
         form={"request_data": '{"template_id": "hi_res_partition"}'}),
    Case("create_job", (), {"job_nodes": [NODE]}, "POST", "/jobs/",
         {**JOB, "job_type": "a_kind_added_later"}, lambda r: r.job_type == "a_kind_added_later",
         form={"request_data": json.dumps({"job_nodes": [NODE]})}),
    Case("list_notifications", (), {}, "GET", "/notifications", {"events": [EVENT], "next_cursor": None},
         lambda r: isinstance(r, NotificationPage) and r.events[0].payload.status is JobStatus.COMPLETED
         and r.events[0].created_at.tzinfo is not None and r.next_cursor is None),
    Case("list_notifications", (WID,), {
        "event_types": ["job.completed", "job.failed"], "since": datetime(2026, 11, 29, 6), "limit": 100,
        "cursor": "c-2", "unread_only": False}, "GET", "/notifications",
         {"events": [{**EVENT, "event_type": "job.retried", "payload": {"job_id": JID, "status": "x"},
                      "later": 1}], "next_cursor": "c-3", "extra": True},
         lambda r: r.events[0].event_type == "job.retried" and r.events[0].payload.status is JobStatus.UNKNOWN
         and r.next_cursor == "c-3",
         params={"workflow_id": WID, "event_types": "job.completed,job.failed",
                 "since": "2026-11-29T06:00:00Z", "limit": "100", "cursor": "c-2", "unread_only": "false"}),
    Case("get_notification", ("ev-1",), {}, "GET", "/notifications/ev-1", EVENT,
         lambda r: isinstance(r, Notification) and r.payload.job_id == JID and r.is_read is False),
    Case("count_unread_notifications", (), {}, "GET", "/notifications/unread-count", {"unread_count": 3},
         lambda r: r == 3),
    Case("count_unread_notifications", (UUID(WID),), {}, "GET", "/notifications/unread-count",
         {"unread_count": 0, "later": 1}, lambda r: r == 0, params={"workflow_id": WID}),
    Case("mark_notifications_read", (("ev-1", "ev-2"),), {}, "POST", "/notifications/mark-read",
         {"marked_count": 2}, lambda r: r == 2, body={"notification_ids": ["ev-1", "ev-2"]}),
    Case("mark_notifications_read", (), {"before": datetime(2026, 11, 29, 6), "workflow_id": WID}, "POST",
         "/notifications/mark-read", {"marked_count": 0}, lambda r: r == 0,
         body={"before": "2026-11-29T06:00:00Z", "workflow_id": WID}),
    Case("create_workflow_channel", (WID, "webhook"), {
        "event_types": ("job.completed", "job.failed"), "url": CHANNEL["url"], "secret": HOOK_SECRET},
         "POST", CHANNELS, CHANNEL, lambda r: isinstance(r, NotificationChannel) and r.id == "ch-1",
         body={"channel_type": "webhook", "event_types": ["job.completed", "job.failed"],
               "url": CHANNEL["url"], "secret": HOOK_SECRET}, status=201),
    Case("create_workflow_channel", (WID, "email"), {
        "event_types": "job.failed", "email_config": {"recipient_email": "ops@example.test"},
        "description": "failures", "enabled": False}, "POST", CHANNELS,
         {**CHANNEL, "channel_type": "email", "url": None, "email_config": {"recipient_email": "o***"}},
         lambda r: r.channel_type == "email",
         body={"channel_type": "email", "event_types": ["job.failed"], "description": "failures",
               "enabled": False, "email_config": {"recipient_email": "ops@example.test"}}),
    Case("list_workflow_channels", (WID,), {}, "GET", CHANNELS, {"items": [CHANNEL]},
         lambda r: [c.id for c in r] == ["ch-1"]),
    Case("list_workflow_channels", (WID, "email"), {}, "GET", CHANNELS, [], lambda r: r == [],
         params={"channel_type": "email"}),
    Case("get_workflow_channel", (WID, "ch-1"), {}, "GET", f"{CHANNELS}/ch-1",
         {**CHANNEL, "signing_secret": HOOK_SECRET, "event_types": ["job.completed", "job.retried"]},
         lambda r: r.event_types == ["job.completed", "job.retried"] and HOOK_SECRET not in repr(r)
         and HOOK_SECRET not in r.model_dump_json()),
    Case("update_workflow_channel", (WID, "ch-1"), {"enabled": False, "secret": ""}, "PATCH",
         f"{CHANNELS}/ch-1", {**CHANNEL, "enabled": False}, lambda r: r.enabled is False,
         body={"enabled": False, "secret": ""}),
    Case("delete_workflow_channel", (WID, "ch-1"), {}, "DELETE", f"{CHANNELS}/ch-1", None,
         lambda r: r is None, status=204),
    Case("verify_workflow_channel", (WID, "ch-1", "123456"), {}, "POST", f"{CHANNELS}/ch-1/verify", CHANNEL,
         lambda r: r.id == "ch-1", body={"code": "123456"}),
    Case("create_workspace_channel", ("webhook",), {"event_types": ["job.stopped"], "url": CHANNEL["url"]},
         "POST", "/notifications/channels", CHANNEL, lambda r: r.id == "ch-1", status=201,
         body={"channel_type": "webhook", "event_types": ["job.stopped"], "url": CHANNEL["url"]}),
    Case("list_workspace_channels", (), {}, "GET", "/notifications/channels", {"channels": [CHANNEL]},
         lambda r: r[0].event_types == ["job.completed"]),
    Case("get_workspace_channel", ("ch 1",), {}, "GET", "/notifications/channels/ch%201", CHANNEL,
         lambda r: r.url == CHANNEL["url"]),
    Case("update_workspace_channel", ("ch-1",), {"description": "d", "event_types": ["job.failed"]}, "PATCH",
         "/notifications/channels/ch-1", CHANNEL, lambda r: r.id == "ch-1",
         body={"description": "d", "event_types": ["job.failed"]}),
    Case("delete_workspace_channel", ("ch-1",), {}, "DELETE", "/notifications/channels/ch-1", None,
         lambda r: r is None),
    Case("verify_workspace_channel", ("ch-1",), {}, "POST", "/notifications/channels/ch-1/verify",
         {"verified": True}, lambda r: r is None),
]  # fmt: skip


def test_cases_cover_every_endpoint_method() -> None:
    assert {c.name for c in CASES} == set(ENDPOINT_NAMES)
    for name in ENDPOINT_NAMES:
        assert callable(getattr(WorkflowServiceHook(settings=make_settings()), name))
        assert callable(getattr(WorkflowServiceAsyncHook(settings=make_settings()), name))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_endpoint(api: Api, mock: respx.MockRouter, case: Case) -> None:
    content = b"" if case.response is None else json.dumps(case.response).encode()
    route = mock.route(method=case.method, url=u(case.path)).mock(
        return_value=httpx.Response(
            case.status, content=content, headers={"content-type": "application/json"}
        )
    )
    result = await api(case.name, *case.args, **case.kwargs)

    assert route.call_count == 1
    request = route.calls.last.request
    assert request.method == case.method
    assert request.url.raw_path.decode().partition("?")[0] == "/api/v1" + case.path
    assert dict(request.url.params) == case.params
    assert len(request.url.params.multi_items()) == len(case.params)
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["service-api-key"] == API_KEY
    assert request.headers["accept"] == "application/json"
    if case.form is not None:
        assert request.headers["content-type"] == "application/x-www-form-urlencoded"
        assert dict(httpx.QueryParams(request.content.decode())) == case.form
    elif case.body is None:
        assert request.content == b""
        assert "content-type" not in request.headers
    else:
        assert request.headers["content-type"] == "application/json"
        assert json.loads(request.content) == case.body
    assert case.check(result), result


# --------------------------------------------------------------------------------------------------
# Authentication headers


@pytest.mark.parametrize(
    ("token", "api_key", "expected"),
    [
        (
            TOKEN,
            API_KEY,
            {"authorization": f"Bearer {TOKEN}", "service-api-key": API_KEY, "unstructured-api-key": API_KEY},
        ),
        (TOKEN, None, {"authorization": f"Bearer {TOKEN}"}),
        (None, API_KEY, {"service-api-key": API_KEY, "unstructured-api-key": API_KEY}),
        (None, None, {}),  # the deprecated self-hosted deployment
        (f"  {TOKEN}\n", "   ", {"authorization": f"Bearer {TOKEN}"}),
    ],
)
async def test_auth_headers_only_when_set(
    kind: str, mock: respx.MockRouter, token: str | None, api_key: str | None, expected: dict[str, str]
) -> None:
    route = mock.get(u("/jobs/")).mock(return_value=httpx.Response(200, json=[]))
    client = Api(kind, make_settings(token=token, api_key=api_key))
    await client("list_jobs")
    await client.close()
    headers = route.calls.last.request.headers
    sent = {
        k: headers[k] for k in ("authorization", "service-api-key", "unstructured-api-key") if k in headers
    }
    assert sent == expected


# --------------------------------------------------------------------------------------------------
# Multipart run and streaming


def parse_multipart(request: httpx.Request) -> list[tuple[str, str, str, bytes]]:
    raw = b"Content-Type: " + request.headers["content-type"].encode() + b"\r\n\r\n" + request.content
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
    assert message.is_multipart()
    parts = []
    for part in message.iter_parts():
        parts.append(
            (
                part.get_param("name", header="content-disposition"),
                part.get_filename(),
                part.get_content_type(),
                part.get_payload(decode=True),
            )
        )
    return parts


@pytest.fixture
def input_files(tmp_path: Path) -> list[Path]:
    files = [
        (tmp_path / "report.pdf", b"%PDF-1.4 fake pdf\n" * 10),
        (tmp_path / "notes.txt", "plain text ünïcode".encode()),
        (tmp_path / "data.unknownext", b"\x00\x01\x02binary"),
        (tmp_path / "page.html", b"<html></html>"),
    ]
    for path, content in files:
        path.write_bytes(content)
    return [p for p, _ in files]


async def test_run_workflow_multipart_parts(
    api: Api, mock: respx.MockRouter, input_files: list[Path]
) -> None:
    route = mock.post(u(f"/workflows/{WID}/run")).mock(return_value=httpx.Response(200, json=JOB))
    job = await api("run_workflow", WID, files=[str(input_files[0]), *input_files[1:]])
    assert isinstance(job, Job)
    assert job.id == JID
    request = route.calls.last.request
    assert request.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert parse_multipart(request) == [
        ("input_files", "report.pdf", "application/pdf", input_files[0].read_bytes()),
        ("input_files", "notes.txt", "text/plain", input_files[1].read_bytes()),
        ("input_files", "data.unknownext", "application/octet-stream", input_files[2].read_bytes()),
        ("input_files", "page.html", "text/html", input_files[3].read_bytes()),
    ]


async def test_create_job_sends_request_data_and_one_input_files_part_per_file(
    api: Api, mock: respx.MockRouter, input_files: list[Path]
) -> None:
    route = mock.post(u("/jobs/")).mock(return_value=httpx.Response(200, json=JOB))
    await api("create_job", job_nodes=[NODE], files=[input_files[0], (input_files[1], "2024/notes.txt")])
    request = route.calls.last.request
    assert request.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert parse_multipart(request) == [
        ("request_data", None, "text/plain", json.dumps({"job_nodes": [NODE]}).encode()),
        ("input_files[]", "report.pdf", "application/pdf", input_files[0].read_bytes()),
        ("input_files[]", "2024/notes.txt", "text/plain", input_files[1].read_bytes()),
    ]


async def test_run_workflow_single_path_is_one_file(
    api: Api, mock: respx.MockRouter, input_files: list[Path]
) -> None:
    route = mock.post(u(f"/workflows/{WID}/run")).mock(return_value=httpx.Response(200, json=JOB))
    await api("run_workflow", WID, files=input_files[1])
    assert [p[:3] for p in parse_multipart(route.calls.last.request)] == [
        ("input_files", "notes.txt", "text/plain")
    ]


class _SinkHandler(BaseHTTPRequestHandler):
    """Drains a request body in 1 MiB reads, records what arrived, answers with a job."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "-1"))
        remaining, total, head = length, 0, b""
        while remaining > 0:
            chunk = self.rfile.read(min(1 << 20, remaining))
            if not chunk:
                break
            if len(head) < 512:
                head += chunk[: 512 - len(head)]
            total += len(chunk)
            remaining -= len(chunk)
        self.server.received.append(  # type: ignore[attr-defined]
            {
                "path": self.path,
                "content_length": length,
                "total": total,
                "head": head,
                "auth": self.headers.get("authorization"),
                "transfer_encoding": self.headers.get("transfer-encoding"),
            }
        )
        body = json.dumps(JOB).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def sink_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SinkHandler)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


async def test_large_upload_is_streamed_from_disk(
    kind: str, sink_server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    size = 200 * 1024 * 1024
    big = tmp_path / "big.pdf"
    with big.open("wb") as fh:  # sparse: no disk space, no memory
        fh.truncate(size)
    port = sink_server.server_address[1]
    client = Api(kind, make_settings(base_url=f"http://127.0.0.1:{port}/api/v1", max_retries=0))

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    tracemalloc.start()
    try:
        job = await client("run_workflow", WID, files=[big])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await client.close()
    rss_growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024

    assert isinstance(job, Job)
    [received] = sink_server.received  # type: ignore[attr-defined]
    assert received["path"] == f"/api/v1/workflows/{WID}/run"
    assert received["auth"] == f"Bearer {TOKEN}"
    # the length is known up front (from the file size), and all of the file arrived
    assert received["transfer_encoding"] is None
    assert received["total"] == received["content_length"] > size
    assert b'name="input_files"; filename="big.pdf"' in received["head"]
    assert b"Content-Type: application/pdf" in received["head"]
    # nothing near the file's size was held in memory (Python allocations, and the process peak)
    assert peak < 32 * 1024 * 1024, f"peak Python allocation {peak / 2**20:.0f} MiB"
    assert rss_growth_mib < 100, f"peak RSS grew {rss_growth_mib:.0f} MiB"


# --------------------------------------------------------------------------------------------------
# Download to a file: streamed, atomic


class Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body delivered in chunks, optionally dropping the connection after ``fail_after``."""

    def __init__(self, chunks: list[bytes], fail_after: int | None = None) -> None:
        self.chunks, self.fail_after = chunks, fail_after

    def __iter__(self) -> Iterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if index == self.fail_after:
                raise httpx.ReadError("connection reset by peer")
            yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


async def test_download_streams_to_file(api: Api, mock: respx.MockRouter, tmp_path: Path) -> None:
    payload = json.dumps(ELEMENTS).encode()
    chunks = [payload[i : i + 7] for i in range(0, len(payload), 7)]
    route = mock.get(u(f"/jobs/{JID}/download")).mock(
        side_effect=lambda request: httpx.Response(200, stream=Chunks(chunks))
    )
    target = tmp_path / "out" / "result.json"
    result = await api("download_job_output", JID, "f-1", "n-1", path=target)
    assert result == target
    assert target.read_bytes() == payload
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]
    assert dict(route.calls.last.request.url.params) == {"file_id": "f-1", "node_id": "n-1"}


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
async def test_downloaded_file_honours_the_umask(
    api: Api, mock: respx.MockRouter, tmp_path: Path, umask: int, mode: int
) -> None:
    mock.get(u(f"/jobs/{JID}/download")).mock(return_value=httpx.Response(200, json=ELEMENTS))
    previous = os.umask(umask)
    try:
        target = await api("download_job_output", JID, "f-1", "n-1", path=tmp_path / "result.json")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(target.stat().st_mode) == mode


async def test_download_failure_leaves_no_partial_file(
    kind: str, mock: respx.MockRouter, tmp_path: Path
) -> None:
    client = api_with(kind, max_retries=1)
    route = mock.get(u(f"/jobs/{JID}/download")).mock(
        side_effect=lambda request: httpx.Response(
            200, stream=Chunks([b"[", b'{"type":', b"..."], fail_after=2)
        )
    )
    target = tmp_path / "result.json"
    with pytest.raises(
        WorkflowServiceConnectionError, match=f"GET {BASE}/jobs/{JID}/download failed: ReadError"
    ):
        await client("download_job_output", JID, "f-1", "n-1", path=str(target))
    assert route.call_count == 2  # a GET is retried
    assert list(tmp_path.iterdir()) == []

    target.write_text("previous complete download")
    with pytest.raises(WorkflowServiceConnectionError):
        await client("download_job_output", JID, "f-1", "n-1", path=target)
    assert target.read_text() == "previous complete download"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    await client.close()


async def test_download_error_status_writes_nothing(api: Api, mock: respx.MockRouter, tmp_path: Path) -> None:
    mock.get(u(f"/jobs/{JID}/download")).mock(
        return_value=httpx.Response(404, json={"detail": "no such file"})
    )
    target = tmp_path / "result.json"
    with pytest.raises(WorkflowServiceNotFoundError, match="no such file"):
        await api("download_job_output", JID, "f-1", "n-1", path=target)
    assert list(tmp_path.iterdir()) == []


class _EndlessOutput(httpx.SyncByteStream, httpx.AsyncByteStream):
    """An output whose first element names its document, followed by more than anyone should read:
    a chunk past ``limit`` bytes fails the test."""

    def __init__(self, document: str, limit: int) -> None:
        element = {"type": "Title", "text": "Q3", "metadata": {"filename": document}}
        self.head = ("[" + json.dumps(element)).encode()
        self.limit, self.sent = limit, 0

    def _chunks(self) -> Iterator[bytes]:
        yield self.head
        self.sent = len(self.head)
        while True:
            assert self.sent < self.limit, "read past the start of the output"
            chunk = b', {"type": "NarrativeText", "text": "' + b"x" * 16_000 + b'"}'
            self.sent += len(chunk)
            yield chunk

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks():
            yield chunk


async def test_an_outputs_document_is_read_from_its_start_only(kind: str, mock: respx.MockRouter) -> None:
    """Issue #32: the document's name is read from the first 64 KiB of the output; the rest is never
    read (the stream is closed), and the body cap does not apply to what is not read."""
    from airflow_provider_workflowsvc.hooks._calls import OUTPUT_HEAD_BYTES

    stream = _EndlessOutput("sub/Q3 report.md", limit=OUTPUT_HEAD_BYTES + 20_000)
    route = mock.get(u(f"/jobs/{JID}/download")).mock(return_value=httpx.Response(200, stream=stream))
    client = Api(kind, make_settings(max_response_bytes=10_000))
    try:
        assert await client("get_output_document", JID, "f-1", "n-1") == "sub/Q3 report.md"
    finally:
        await client.close()
    assert stream.sent <= OUTPUT_HEAD_BYTES + 20_000
    assert route.calls.last.request.url.params["file_id"] == "f-1"
    assert route.calls.last.request.url.params["node_id"] == "n-1"


async def test_an_output_naming_no_document_gives_none_and_a_refusal_its_error(
    api: Api, mock: respx.MockRouter
) -> None:
    route = mock.get(u(f"/jobs/{JID}/download"))
    route.mock(return_value=httpx.Response(200, json=[{"type": "Title", "text": "no metadata"}]))
    assert await api("get_output_document", JID, "f-1") is None
    route.mock(return_value=httpx.Response(404, json={"detail": "no such file"}))
    with pytest.raises(WorkflowServiceNotFoundError, match="no such file"):
        await api("get_output_document", JID, "f-1")


# --------------------------------------------------------------------------------------------------
# Error mapping


@pytest.mark.parametrize(
    ("status", "body", "cls", "detail"),
    [
        (400, {"detail": "bad request"}, WorkflowServiceValidationError, "bad request"),
        (401, {"detail": "Invalid token"}, WorkflowServiceAuthError, "Invalid token"),
        (403, {"detail": "Not allowed here"}, WorkflowServiceAuthError, "Not allowed here"),
        (404, {"detail": "Job not found"}, WorkflowServiceNotFoundError, "Job not found"),
        (409, {"detail": "name already exists"}, WorkflowServiceConflictError, "name already exists"),
        (
            422,
            {
                "detail": [
                    {
                        "loc": ["query", "status"],
                        "msg": "Input should be 'a' or 'b'",
                        "type": "enum",
                        "input": "zzz",
                    },
                    {"loc": ["body", "name"], "msg": "Field required", "type": "missing"},
                ]
            },
            WorkflowServiceValidationError,
            "query.status: Input should be 'a' or 'b'; body.name: Field required",
        ),
        (429, {"detail": "slow down"}, WorkflowServiceRateLimitError, "slow down"),
        (402, {"detail": "Insufficient API quota"}, WorkflowServiceQuotaError, "Insufficient API quota"),
        (402, "", WorkflowServiceQuotaError, ""),
        (403, {"detail": "Insufficient API quota"}, WorkflowServiceQuotaError, "Insufficient API quota"),
        (429, {"detail": "Monthly quota exceeded"}, WorkflowServiceQuotaError, "Monthly quota exceeded"),
        (500, {"message": "internal failure"}, WorkflowServiceServerError, "internal failure"),
        (502, "<html>Bad Gateway</html>", WorkflowServiceServerError, "<html>Bad Gateway</html>"),
        (503, {"error": "maintenance"}, WorkflowServiceServerError, "maintenance"),
        (418, {"detail": "teapot"}, WorkflowServiceApiError, "teapot"),
        (500, "", WorkflowServiceServerError, ""),
        (500, '{"detail": "trunc', WorkflowServiceServerError, '{"detail": "trunc'),
    ],
)
async def test_error_mapping(
    kind: str, mock: respx.MockRouter, status: int, body: Any, cls: type, detail: str
) -> None:
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    mock.get(u(f"/jobs/{JID}")).mock(return_value=httpx.Response(status, content=content))
    client = api_with(kind, max_retries=0)
    with pytest.raises(cls) as info:
        await client("get_job", JID)
    await client.close()
    error = info.value
    assert type(error) is cls
    assert isinstance(error, WorkflowServiceError)
    assert (error.status_code, error.method, error.path) == (status, "GET", f"/api/v1/jobs/{JID}")
    assert error.detail == detail
    message = str(error)
    assert message.startswith(f"GET /api/v1/jobs/{JID} → {status} ")
    assert detail in message
    assert "zzz" not in message  # the server's echo of input values is not repeated
    assert_no_secrets(message, repr(error))


async def test_retry_after_recorded_on_error(kind: str, mock: respx.MockRouter) -> None:
    mock.get(u("/jobs/")).mock(return_value=httpx.Response(429, headers={"retry-after": "12"}))
    client = api_with(kind, max_retries=0)
    with pytest.raises(WorkflowServiceRateLimitError) as info:
        await client("list_jobs")
    assert info.value.retry_after == 12.0
    assert info.value.reason == "Too Many Requests"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"<html>not json</html>", "not JSON"),
        (b'[{"id": "job-1", "status": "compl', "not JSON"),
        (b'{"id": "job-1"}', "expected a list of Job records, got dict"),
        (b"", "expected a list of Job records, got NoneType"),
    ],
)
async def test_unexpected_success_body(api: Api, mock: respx.MockRouter, content: bytes, reason: str) -> None:
    mock.get(u("/jobs/")).mock(return_value=httpx.Response(200, content=content))
    with pytest.raises(WorkflowServiceResponseError) as info:
        await api("list_jobs")
    assert info.value.status_code == 200
    assert info.value.method == "GET"
    assert info.value.path == "/api/v1/jobs/"
    assert reason in str(info.value)
    assert str(info.value).startswith("GET /api/v1/jobs/ returned 200 with an unexpected body")


async def test_server_echoing_credentials_is_redacted(api: Api, mock: respx.MockRouter) -> None:
    mock.get(u("/jobs/")).mock(
        return_value=httpx.Response(401, json={"detail": f"token {TOKEN} with key {API_KEY} is not valid"})
    )
    with pytest.raises(WorkflowServiceAuthError) as info:
        await api("list_jobs")
    assert info.value.detail == "token *** with key *** is not valid"
    assert_no_secrets(info.value, info.value.detail, repr(info.value))


# --------------------------------------------------------------------------------------------------
# Retries


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(402, json={"detail": "Insufficient API quota"}),
        httpx.Response(429, json={"detail": "Insufficient API quota"}, headers={"retry-after": "1"}),
    ],
    ids=["402", "429-quota"],
)
async def test_a_used_up_quota_is_never_retried_and_says_what_to_do(
    api: Api, mock: respx.MockRouter, answer: httpx.Response
) -> None:
    route = mock.get(u("/jobs/")).mock(side_effect=[answer, httpx.Response(200, json=[])])
    with pytest.raises(WorkflowServiceQuotaError) as info:
        await api("list_jobs")
    assert route.call_count == 1
    assert api.waits == []
    message = str(info.value)
    assert "Insufficient API quota" in message
    assert "retrying cannot help" in message
    assert "usage, quota and billing" in message
    from airflow_provider_workflowsvc._compat import AirflowFailException

    assert isinstance(info.value, AirflowFailException)


async def test_get_retries_429_honouring_retry_after(api: Api, mock: respx.MockRouter) -> None:
    route = mock.get(u("/jobs/")).mock(
        side_effect=[
            httpx.Response(429, headers={"retry-after": "7"}),
            httpx.Response(429, headers={"retry-after": "0"}),
            httpx.Response(200, json=[JOB]),
        ]
    )
    jobs = await api("list_jobs")
    assert [j.id for j in jobs] == [JID]
    assert route.call_count == 3
    assert api.waits == [7.0, 0.0]


async def test_retry_after_http_date_and_cap(kind: str, mock: respx.MockRouter) -> None:
    in_20s = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    mock.get(u("/jobs/")).mock(
        side_effect=[
            httpx.Response(429, headers={"retry-after": in_20s}),
            httpx.Response(503, headers={"retry-after": "3600"}),
            httpx.Response(429, headers={"retry-after": "soon"}),
            httpx.Response(200, json=[]),
        ]
    )
    client = api_with(kind, retry_max_wait=30.0, retry_wait=1.0, max_retries=3)
    await client("list_jobs")
    date_wait, capped, fallback = client.waits
    assert 17 <= date_wait <= 20
    assert capped == 30.0  # Retry-After larger than retry_max_wait is capped
    assert 2.0 <= fallback <= 4.0  # unparseable Retry-After: the normal backoff (third attempt)


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_get_retries_gateway_errors_with_backoff(
    kind: str, mock: respx.MockRouter, status: int
) -> None:
    route = mock.get(u(f"/workflows/{WID}")).mock(
        side_effect=[
            httpx.Response(status),
            httpx.Response(status),
            httpx.Response(status),
            httpx.Response(200, json=WORKFLOW),
        ]
    )
    client = api_with(kind, retry_wait=0.5, retry_max_wait=1.5, max_retries=3)
    workflow = await client("get_workflow", WID)
    assert workflow.id == WID
    assert route.call_count == 4
    first, second, third = client.waits
    assert 0.25 <= first <= 0.5  # retry_wait * 2**0, jittered down to half
    assert 0.5 <= second <= 1.0  # doubled
    assert 0.75 <= third <= 1.5  # 2.0 capped at retry_max_wait, jittered


async def test_backoff_has_jitter(kind: str, mock: respx.MockRouter) -> None:
    mock.get(u("/jobs/")).mock(return_value=httpx.Response(503))
    client = api_with(kind, retry_wait=1.0, retry_max_wait=100.0, max_retries=20)
    with pytest.raises(WorkflowServiceServerError):
        await client("list_jobs")
    assert len(client.waits) == 20
    firsts = {round(w, 6) for w in client.waits[:1]}
    assert firsts
    assert all(0.5 <= w <= 1.0 for w in firsts)
    # the same attempt number does not always wait the same: run again and compare
    again = api_with(kind, retry_wait=1.0, retry_max_wait=100.0, max_retries=20)
    with pytest.raises(WorkflowServiceServerError):
        await again("list_jobs")
    assert client.waits != again.waits


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("connection refused"),
        httpx.ConnectTimeout("connect timed out"),
        httpx.ReadTimeout("read timed out"),
        httpx.ReadError("connection reset"),
        httpx.RemoteProtocolError("server disconnected without sending a response"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_get_retries_transport_errors(api: Api, mock: respx.MockRouter, error: Exception) -> None:
    route = mock.get(u("/jobs/")).mock(side_effect=[error, error, httpx.Response(200, json=[])])
    assert await api("list_jobs") == []
    assert route.call_count == 3
    assert len(api.waits) == 2


async def test_retries_are_bounded(kind: str, mock: respx.MockRouter) -> None:
    route = mock.get(u("/jobs/")).mock(return_value=httpx.Response(503, json={"detail": "down"}))
    client = api_with(kind, max_retries=2)
    with pytest.raises(WorkflowServiceServerError, match="503 Service Unavailable: down"):
        await client("list_jobs")
    assert route.call_count == 3
    route.reset()
    route.side_effect = httpx.ConnectError("refused")
    with pytest.raises(
        WorkflowServiceConnectionError, match=f"GET {BASE}/jobs/ failed: ConnectError: refused"
    ):
        await client("list_jobs")
    assert route.call_count == 3
    none = api_with(kind, max_retries=0)
    route.reset()
    with pytest.raises(WorkflowServiceConnectionError):
        await none("list_jobs")
    assert route.call_count == 1


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, WorkflowServiceNotFoundError),
        (401, WorkflowServiceAuthError),
        (500, WorkflowServiceServerError),
        (422, WorkflowServiceValidationError),
    ],
)
async def test_get_not_retried_on_permanent_errors(
    api: Api, mock: respx.MockRouter, status: int, cls: type
) -> None:
    route = mock.get(u(f"/jobs/{JID}")).mock(return_value=httpx.Response(status))
    with pytest.raises(cls):
        await api("get_job", JID)
    assert route.call_count == 1


CREATE_AND_RUN = [
    ("create_source", ("s", "s3", {"remote_url": "s3://b"}), "/sources/"),
    ("create_destination", ("d", "s3", {"remote_url": "s3://b"}), "/destinations/"),
    ("create_workflow", ("w", "basic"), "/workflows/"),
    ("run_workflow", (WID,), f"/workflows/{WID}/run"),
    ("create_job", (), "/jobs/"),
]
CREATE_KWARGS = {"create_job": {"template_id": "hi_res_partition"}}


@pytest.mark.parametrize(("name", "args", "path"), CREATE_AND_RUN, ids=[c[0] for c in CREATE_AND_RUN])
@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(500),
        httpx.Response(502),
        httpx.Response(503, headers={"retry-after": "1"}),
        httpx.Response(504),
        httpx.Response(429, headers={"retry-after": "1"}),
        httpx.ReadTimeout("read timed out"),
        httpx.ReadError("connection reset"),
        httpx.RemoteProtocolError("server disconnected without sending a response"),
        httpx.WriteTimeout("write timed out"),
    ],
    ids=lambda f: str(f.status_code) if isinstance(f, httpx.Response) else type(f).__name__,
)
async def test_create_and_run_never_retried_once_sent(
    api: Api, mock: respx.MockRouter, name: str, args: tuple[Any, ...], path: str, failure: Any
) -> None:
    route = mock.post(u(path)).mock(side_effect=[failure, httpx.Response(200, json=JOB)])
    with pytest.raises(WorkflowServiceError):
        await api(name, *args, **CREATE_KWARGS.get(name, {}))
    assert route.call_count == 1
    assert api.waits == []


@pytest.mark.parametrize(("name", "args", "path"), CREATE_AND_RUN, ids=[c[0] for c in CREATE_AND_RUN])
@pytest.mark.parametrize(
    "failure",
    [httpx.ConnectError("connection refused"), httpx.ConnectTimeout("timed out"), httpx.PoolTimeout("pool")],
    ids=lambda e: type(e).__name__,
)
async def test_create_and_run_retried_when_never_sent(
    api: Api, mock: respx.MockRouter, name: str, args: tuple[Any, ...], path: str, failure: Exception
) -> None:
    body = {"run_workflow": JOB, "create_job": JOB, "create_workflow": WORKFLOW}.get(
        name, SOURCE if "source" in name else DESTINATION
    )
    route = mock.post(u(path)).mock(side_effect=[failure, failure, httpx.Response(200, json=body)])
    await api(name, *args, **CREATE_KWARGS.get(name, {}))
    assert route.call_count == 3


async def test_run_with_files_retried_when_never_sent_resends_parts(
    api: Api, mock: respx.MockRouter, input_files: list[Path]
) -> None:
    route = mock.post(u(f"/workflows/{WID}/run")).mock(
        side_effect=[httpx.ConnectError("refused"), httpx.Response(200, json=JOB)]
    )
    await api("run_workflow", WID, files=input_files[:2])
    assert route.call_count == 2
    assert [p[1] for p in parse_multipart(route.calls.last.request)] == ["report.pdf", "notes.txt"]


@pytest.mark.parametrize(
    ("name", "args", "method", "path"),
    [
        ("cancel_job", (JID,), "POST", f"/jobs/{JID}/cancel"),
        ("start_source_connection_check", (SID,), "POST", f"/sources/{SID}/connection-check"),
        ("update_workflow", (WID,), "PUT", f"/workflows/{WID}"),
        ("delete_workflow", (WID,), "DELETE", f"/workflows/{WID}"),
    ],
)
async def test_idempotent_non_get_requests_are_retried(
    api: Api, mock: respx.MockRouter, name: str, args: tuple[Any, ...], method: str, path: str
) -> None:
    kwargs = {"name": "renamed"} if name == "update_workflow" else {}
    route = mock.route(method=method, url=u(path)).mock(
        side_effect=[
            httpx.Response(503),
            httpx.ReadTimeout("read timed out"),
            httpx.Response(429, headers={"retry-after": "2"}),
            httpx.Response(200, json=WORKFLOW if name == "update_workflow" else CHECK),
        ]
    )
    await api(name, *args, **kwargs)
    assert route.call_count == 4
    assert api.waits[2] == 2.0


async def test_retries_are_logged_without_secrets(
    api: Api, mock: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mock.get(u("/jobs/")).mock(
        side_effect=[httpx.Response(503, json={"detail": "busy"}), httpx.Response(200, json=[])]
    )
    await api("list_jobs")
    retry_logs = [r for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retry_logs) == 1
    assert "GET /api/v1/jobs/ → 503 Service Unavailable: busy; retrying in" in retry_logs[0].getMessage()
    assert "(attempt 2 of 4)" in retry_logs[0].getMessage()
    assert_no_secrets(caplog.text)


# --------------------------------------------------------------------------------------------------
# Redirects between the slash forms of a path


@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("absolute", [True, False])
async def test_post_redirect_keeps_method_and_body_and_is_remembered(
    api: Api, mock: respx.MockRouter, status: int, absolute: bool
) -> None:
    location = u("/workflows") if absolute else "/api/v1/workflows"
    old = mock.post(u("/workflows/")).mock(
        return_value=httpx.Response(status, headers={"location": location})
    )
    new = mock.post(u("/workflows")).mock(return_value=httpx.Response(201, json=WORKFLOW))
    first = await api("create_workflow", "wf", "basic", schedule="weekly")
    second = await api("create_workflow", "wf2", "advanced")
    assert first.id == second.id == WID
    assert old.call_count == 1  # the redirect was learned: the second call goes to the new form directly
    assert new.call_count == 2
    for call, body in zip(
        new.calls,
        [
            {"name": "wf", "workflow_type": "basic", "schedule": "weekly"},
            {"name": "wf2", "workflow_type": "advanced"},
        ],
        strict=True,
    ):
        assert call.request.method == "POST"
        assert json.loads(call.request.content) == body
        assert call.request.headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_multipart_run_redirect_keeps_files(
    api: Api, mock: respx.MockRouter, input_files: list[Path], status: int
) -> None:
    old = mock.post(u(f"/workflows/{WID}/run")).mock(
        return_value=httpx.Response(status, headers={"location": u(f"/workflows/{WID}/run/")})
    )
    new = mock.post(u(f"/workflows/{WID}/run/")).mock(return_value=httpx.Response(200, json=JOB))
    await api("run_workflow", WID, files=input_files[:2])
    assert (old.call_count, new.call_count) == (1, 1)
    assert parse_multipart(new.calls.last.request) == [
        ("input_files", "report.pdf", "application/pdf", input_files[0].read_bytes()),
        ("input_files", "notes.txt", "text/plain", input_files[1].read_bytes()),
    ]
    await api("run_workflow", WID)  # remembered, and without files no body is sent
    assert (old.call_count, new.call_count) == (1, 2)
    assert new.calls.last.request.content == b""


async def test_get_redirect_keeps_query(api: Api, mock: respx.MockRouter) -> None:
    old = mock.get(u("/sources/")).mock(
        return_value=httpx.Response(307, headers={"location": u("/sources?source_type=s3")})
    )
    new = mock.get(u("/sources")).mock(return_value=httpx.Response(200, json=[SOURCE]))
    assert len(await api("list_sources", source_type="s3")) == 1
    assert dict(new.calls.last.request.url.params) == {"source_type": "s3"}
    await api("list_sources")
    assert (old.call_count, new.call_count) == (1, 2)


async def test_get_redirect_to_another_resource_is_followed_but_not_remembered(
    api: Api, mock: respx.MockRouter
) -> None:
    other = "55555555-5555-4555-8555-555555555555"
    moved = mock.get(u(f"/sources/{SID}")).mock(
        side_effect=[
            httpx.Response(302, headers={"location": u(f"/sources/{other}")}),
            httpx.Response(200, json=SOURCE),
        ]
    )
    mock.get(u(f"/sources/{other}")).mock(return_value=httpx.Response(200, json={**SOURCE, "id": other}))
    assert str((await api("get_source", SID)).id) == other
    assert str((await api("get_source", SID)).id) == SID  # a 302 to another resource is not cached
    assert moved.call_count == 2


@pytest.mark.parametrize(
    ("seen", "status", "sent"),
    [
        ("im progress", JobStatus.IN_PROGRESS, "im progress"),
        ("IN_PROGRESS", JobStatus.IN_PROGRESS, "IN_PROGRESS"),
        ("COMPLETED", "completed", "completed"),
        ("COMPLETED", "in_progress", "IN_PROGRESS"),
        ("completed", "in_progress", "im progress"),
        ("COMPLETED", "im progress", "im progress"),
        ("completed", "FAILED", "FAILED"),
    ],
)
async def test_status_filter_follows_the_dialect_last_seen(
    api: Api, mock: respx.MockRouter, seen: str, status: Any, sent: str
) -> None:
    mock.get(u(f"/jobs/{JID}")).mock(return_value=httpx.Response(200, json={**JOB, "status": seen}))
    listing = mock.get(u("/jobs/")).mock(return_value=httpx.Response(200, json=[]))
    await api("get_job", JID)
    await api("list_jobs", status=status)
    assert listing.calls.last.request.url.params["status"] == sent


@pytest.mark.parametrize("dialect", ["platform", "spec"])
async def test_status_filter_spelling_is_learnt_from_an_exact_matching_service(
    api: Api, mock: respx.MockRouter, dialect: str
) -> None:
    """A service that matches ``status`` exactly, in its own listing's spelling: before a job record
    showed the dialect, the platform's spelling goes first, then the spec's when it finds nothing; the
    spelling of the records listed is kept, and later filters are sent in it alone."""
    own = "IN_PROGRESS" if dialect == "platform" else "im progress"
    running = {**JOB, "status": own}

    def exact(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[running] if request.url.params["status"] == own else [])

    listing = mock.get(u("/jobs/")).mock(side_effect=exact)
    assert [j.id for j in await api("list_jobs", status=JobStatus.IN_PROGRESS)] == [JID]
    assert [c.request.url.params["status"] for c in listing.calls] == (
        ["IN_PROGRESS"] if dialect == "platform" else ["IN_PROGRESS", "im progress"]
    )
    learnt = len(listing.calls)
    assert [j.id for j in await api("list_jobs", status="in_progress")] == [JID]
    assert await api("list_jobs", status=JobStatus.SCHEDULED) == []
    scheduled = "SCHEDULED" if dialect == "platform" else "scheduled"
    assert [c.request.url.params["status"] for c in listing.calls][learnt:] == [own, scheduled]


async def test_a_refused_status_spelling_is_sent_in_the_other(api: Api, mock: respx.MockRouter) -> None:
    """A 422 for one spelling of the filter (a service of the other dialect) tries the other, even once a
    spelling is known; both refused is the service's answer."""

    def refuse_upper(request: httpx.Request) -> httpx.Response:
        if request.url.params["status"].isupper():
            return httpx.Response(422, json={"detail": "unknown status"})
        return httpx.Response(200, json=[{**JOB, "status": "im progress"}])

    listing = mock.get(u("/jobs/")).mock(side_effect=refuse_upper)
    mock.get(u(f"/jobs/{JID}")).mock(return_value=httpx.Response(200, json={**JOB, "status": "FAILED"}))
    await api("get_job", JID)  # the records say: the platform's spelling
    assert [j.id for j in await api("list_jobs", status=JobStatus.IN_PROGRESS)] == [JID]
    assert [c.request.url.params["status"] for c in listing.calls] == ["IN_PROGRESS", "im progress"]
    listing.mock(return_value=httpx.Response(422, json={"detail": "no status filter here"}))
    with pytest.raises(WorkflowServiceValidationError, match="no status filter here"):
        await api("list_jobs", status=JobStatus.SCHEDULED)


async def test_cross_origin_redirect_not_followed(api: Api, mock: respx.MockRouter) -> None:
    mock.post(u("/workflows/")).mock(
        return_value=httpx.Response(307, headers={"location": "https://elsewhere.example/api/v1/workflows"})
    )
    elsewhere = mock.route(host="elsewhere.example").mock(return_value=httpx.Response(200, json=WORKFLOW))
    downgrade = mock.route(scheme="http").mock(return_value=httpx.Response(200, json=WORKFLOW))
    with pytest.raises(WorkflowServiceApiError) as info:
        await api("create_workflow", "wf", "basic")
    assert elsewhere.call_count == 0
    assert info.value.status_code == 307
    assert "redirect to https://elsewhere.example/api/v1/workflows not followed" in str(info.value)
    mock.get(u("/jobs/")).mock(
        return_value=httpx.Response(301, headers={"location": "http://wfsvc.example.test/api/v1/jobs/"})
    )
    with pytest.raises(WorkflowServiceApiError, match="301 Moved Permanently"):
        await api("list_jobs")
    assert downgrade.call_count == 0


async def test_post_redirect_to_another_path_not_followed(api: Api, mock: respx.MockRouter) -> None:
    mock.post(u(f"/workflows/{WID}/run")).mock(
        return_value=httpx.Response(302, headers={"location": "/login"})
    )
    login = mock.route(path="/login").mock(return_value=httpx.Response(200, json=JOB))
    with pytest.raises(WorkflowServiceApiError, match="302 Found"):
        await api("run_workflow", WID)
    other = mock.post(u("/other")).mock(return_value=httpx.Response(200, json=JOB))
    mock.post(u(f"/jobs/{JID}/cancel")).mock(
        return_value=httpx.Response(307, headers={"location": u("/other")})
    )
    with pytest.raises(WorkflowServiceApiError, match="307 Temporary Redirect"):
        await api("cancel_job", JID)
    assert login.call_count == other.call_count == 0


async def test_303_after_run_is_followed_with_get_not_a_second_run(api: Api, mock: respx.MockRouter) -> None:
    run = mock.post(u(f"/workflows/{WID}/run")).mock(
        return_value=httpx.Response(303, headers={"location": u(f"/jobs/{JID}")})
    )
    job = mock.get(u(f"/jobs/{JID}")).mock(return_value=httpx.Response(200, json=JOB))
    result = await api("run_workflow", WID)
    assert isinstance(result, Job)
    assert result.id == JID
    assert (run.call_count, job.call_count) == (1, 1)
    assert job.calls.last.request.content == b""
    await api("run_workflow", WID)
    assert run.call_count == 2  # a 303 is not remembered as the path of the run


async def test_redirect_loop_stops(api: Api, mock: respx.MockRouter) -> None:
    a = mock.get(u("/jobs/")).mock(return_value=httpx.Response(308, headers={"location": u("/jobs")}))
    b = mock.get(u("/jobs")).mock(return_value=httpx.Response(308, headers={"location": u("/jobs/")}))
    with pytest.raises(WorkflowServiceError, match="too many redirects"):
        await api("list_jobs")
    assert a.call_count + b.call_count == 4


# --------------------------------------------------------------------------------------------------
# Input checked before anything is sent


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "message"),
    [
        ("get_source", ("not-a-uuid",), {}, "source_id must be a UUID, got 'not-a-uuid'"),
        ("delete_destination", ("",), {}, "destination_id must be a UUID"),
        ("get_workflow", (None,), {}, "workflow_id must be a UUID"),
        ("get_job", ("",), {}, "job_id must be a non-empty job id"),
        ("get_job", ("a/b",), {}, "job_id must be a non-empty job id"),
        ("cancel_job", ("..",), {}, "job_id must be a non-empty job id"),
        ("list_sources", (), {"source_type": " "}, "source connector type must be a non-empty string"),
        ("list_destinations", (), {"destination_type": 3}, "destination connector type must be a non-empty"),
        ("list_jobs", (), {"status": "exploded"}, "no job is listed in status 'exploded'"),
        ("list_jobs", (), {"status": "COMPLETED_WITH_ERRORS"}, "no job is listed in status 'COMPLETED_WITH"),
        ("list_jobs", (), {"workflow_id": "x"}, "workflow_id must be a UUID"),
        ("list_workflows", (), {"pagesize": 10}, "pagesize: Extra inputs are not permitted"),
        ("list_workflows", (), {"status": "paused"}, "status: Input should be 'active' or 'inactive'"),
        ("create_source", ("", "s3", {"a": 1}), {}, "name: String should have at least 1 character"),
        (
            "create_source",
            ("c", "confluence", {"url": "https://w", "token": "x", "cloud": True}),
            {},
            "requires cloud=false",
        ),
        (
            "create_source",
            ("a", "azure", {"remote_url": "x", "sas_tokn": "x"}),
            {},
            "config.sas_tokn: Extra inputs are not permitted",
        ),
        (
            "create_destination",
            ("d", "astradb", {"collection_name": "c"}),
            {},
            "config.token: Field required",
        ),
        ("update_source", (SID, {}), {"source_type": "s3"}, "config must not be empty"),
        (
            "update_destination",
            (DID, {"x": 1}),
            {"destination_type": ""},
            "destination connector type must be a non-empty string",
        ),
        ("create_source", ("s", "s3", {"bucket": "b"}), {}, "s3': missing required setting 'remote_url'"),
        (
            "create_source",
            ("s", "s3", {"remote_url": "not-a-url", "anonymous": True}),
            {},
            "s3': setting 'remote_url' must be a URL",
        ),
        (
            "update_destination",
            (DID, {"hosts": ["localhost"], "index_name": "i"}),
            {"destination_type": "elasticsearch"},
            "missing required setting 'es_api_key'; setting 'hosts' must be a URL",
        ),
        ("create_workflow", ("w", "custom"), {}, "a custom workflow needs at least one node"),
        ("create_workflow", ("w", "basic"), {"schedule": "hourly"}, "schedule: Input should be"),
        ("update_workflow", (WID,), {}, "a workflow update needs at least one field"),
        ("update_workflow", (WID,), {"colour": "red"}, "colour: Extra inputs are not permitted"),
        ("run_workflow", (WID,), {"files": []}, "files is empty"),
        (
            "run_workflow",
            (WID,),
            {"files": ["/no/such/file.pdf"]},
            "input file '/no/such/file.pdf' does not exist",
        ),
        ("run_workflow", ("nope",), {}, "workflow_id must be a UUID"),
        ("download_job_output", (JID, "", "n"), {}, "file_id must not be empty"),
        ("download_job_output", (JID, "f", " "), {}, "node_id must not be empty"),
        ("get_template", ("",), {}, "template_id must be a non-empty template id"),
        ("get_template", ("a/b",), {}, "template_id must be a non-empty template id"),
        ("create_job", (), {}, "give template_id or job_nodes, not both and not neither"),
        (
            "create_job",
            (),
            {"template_id": "t", "job_nodes": [NODE]},
            "give template_id or job_nodes, not both and not neither",
        ),
        ("create_job", (), {"job_nodes": []}, "job_nodes: give at least one node"),
        ("create_job", (), {"job_nodes": [NODE, NODE]}, "job_nodes: node names must be unique"),
        ("create_job", (), {"job_nodes": [{**NODE, "colour": 1}]}, r"job_nodes.0: unknown field\(s\) colour"),
        ("create_job", (), {"template_id": " "}, "template_id: String should have at least 1 character"),
        ("create_job", (), {"template_id": "t", "files": []}, "files is empty"),
        ("list_notifications", (), {"limit": 0}, "limit: Input should be greater than or equal to 1"),
        ("list_notifications", (), {"limit": 101}, "limit: Input should be less than or equal to 100"),
        ("list_notifications", (), {"limit": "5"}, "limit: Input should be a valid integer"),
        ("list_notifications", (), {"event_types": []}, "event_types: Value should have at least 1 item"),
        ("list_notifications", (), {"event_types": "job.done"}, "event_types.0: Input should be 'job.sch"),
        ("list_notifications", (), {"since": "2026-11-29"}, "since: Input should be a valid datetime"),
        ("list_notifications", ("nope",), {}, "workflow_id: Input should be a valid UUID"),
        ("list_notifications", (), {"cursor": ""}, "cursor: String should have at least 1 character"),
        ("get_notification", (" ",), {}, "notification_id must be a non-empty notification id"),
        ("count_unread_notifications", ("nope",), {}, "workflow_id must be a UUID"),
        ("mark_notifications_read", (), {}, "give notification_ids or before, not both and not neither"),
        (
            "mark_notifications_read",
            ([str(i) for i in range(101)],),
            {},
            "List should have at most 100 items",
        ),
        ("mark_notifications_read", (["ev-1"],), {"workflow_id": WID}, "workflow_id narrows only a mark of"),
        ("mark_notifications_read", (), {"before": "2026-11-29"}, "before: Input should be a valid datetime"),
        (
            "create_workflow_channel",
            (WID, "webhook"),
            {"event_types": ["job.failed"], "url": "http://e.test"},
            "url: a webhook url must be an https:// URL with a host",
        ),
        (
            "create_workflow_channel",
            (WID, "webhook"),
            {"event_types": [], "url": "https://e.test"},
            "event_types: Value should have at least 1 item",
        ),
        (
            "create_workflow_channel",
            (WID, "webhook"),
            {"event_types": ["job.failed"]},
            "a webhook channel needs a url",
        ),
        (
            "create_workflow_channel",
            (WID, "email"),
            {"event_types": ["job.failed"], "url": "https://e.test"},
            "an email channel needs an email_config",
        ),
        (
            "create_workflow_channel",
            (WID, "sms"),
            {"event_types": ["job.failed"]},
            "channel_type: Input should be 'webhook' or 'email'",
        ),
        ("create_workflow_channel", ("nope", "webhook"), {}, "workflow_id must be a UUID"),
        (
            "create_workspace_channel",
            ("webhook",),
            {"event_types": ["job.failed"], "url": "https://e.test", "description": "d" * 256},
            "description: String should have at most 255 characters",
        ),
        (
            "create_workspace_channel",
            ("webhook",),
            {"event_types": ["job.failed"], "url": "https://e.test", "colour": "red"},
            "colour: Extra inputs are not permitted",
        ),
        ("update_workspace_channel", ("ch-1",), {}, "a channel update needs at least one field"),
        ("update_workflow_channel", (WID, "a/b"), {"enabled": True}, "channel_id must be a non-empty"),
        ("verify_workspace_channel", ("ch-1", " "), {}, "code must not be empty"),
    ],
)
async def test_input_errors_raised_before_any_request(
    api: Api, mock: respx.MockRouter, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    catch_all = mock.route().mock(return_value=httpx.Response(200, json={}))
    with pytest.raises(WorkflowServiceInputError, match=message):
        await api(name, *args, **kwargs)
    assert catch_all.call_count == 0
    assert mock.calls.call_count == 0


async def test_a_channel_secret_never_leaves_in_an_error_a_log_or_a_repr(
    api: Api, mock: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    short = "short-secret-0123456789"  # 23 bytes
    fields = {"event_types": ["job.failed"], "url": CHANNEL["url"]}
    with pytest.raises(WorkflowServiceInputError, match="a channel secret is 24 to 75 bytes long") as bad:
        await api("create_workspace_channel", "webhook", **fields, secret=short)
    echo = {"detail": f"secret {HOOK_SECRET} is already used by another channel"}
    route = mock.post(u("/notifications/channels")).mock(return_value=httpx.Response(409, json=echo))
    with caplog.at_level(logging.DEBUG), pytest.raises(WorkflowServiceApiError) as refused:
        await api("create_workspace_channel", "webhook", **fields, secret=HOOK_SECRET)
    assert json.loads(route.calls.last.request.content)["secret"] == HOOK_SECRET  # sent, and only there
    assert "secret *** is already used" in str(refused.value)
    assert route.call_count == 1  # a create is not sent twice
    body = CreateChannel(channel_type="webhook", **fields, secret=HOOK_SECRET)
    for text in (
        bad.value,
        refused.value,
        refused.value.detail,
        caplog.text,
        repr(body),
        body.model_dump_json(),
    ):
        assert HOOK_SECRET not in str(text)
        assert short not in str(text)


async def test_file_inputs_checked_before_sending(api: Api, mock: respx.MockRouter, tmp_path: Path) -> None:
    catch_all = mock.route().mock(return_value=httpx.Response(200, json={}))
    with pytest.raises(WorkflowServiceInputError, match="is a directory"):
        await api("run_workflow", WID, files=[tmp_path])
    with pytest.raises(WorkflowServiceInputError, match="is a directory; give a file path"):
        await api("download_job_output", JID, "f", "n", path=tmp_path)
    assert catch_all.call_count == 0


async def test_input_errors_are_value_errors_and_workflow_errors(api: Api) -> None:
    with pytest.raises(ValueError):
        await api("get_job", "")
    with pytest.raises(WorkflowServiceError):
        await api("get_job", "")


# --------------------------------------------------------------------------------------------------
# list_workflows / iter_workflows


def _workflows(start: int, count: int) -> list[dict[str, Any]]:
    return [{**WORKFLOW, "id": str(UUID(int=i + 1)), "name": f"wf{i}"} for i in range(start, start + count)]


async def test_iter_workflows_all_pages(api: Api, mock: respx.MockRouter) -> None:
    pages = {1: _workflows(0, 2), 2: _workflows(2, 2), 3: _workflows(4, 1), 4: []}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=pages[int(request.url.params["page"])])

    route = mock.get(u("/workflows/")).mock(side_effect=answer)
    workflows = await api.iter_workflows(page_size=2, status="active", name="nightly")
    assert [w.name for w in workflows] == ["wf0", "wf1", "wf2", "wf3", "wf4"]
    assert [dict(c.request.url.params) for c in route.calls] == [
        {"status": "active", "name": "nightly", "page": str(p), "page_size": "2"} for p in (1, 2, 3, 4)
    ]


async def test_iter_workflows_server_caps_page_size(api: Api, mock: respx.MockRouter) -> None:
    everything = _workflows(0, 45)

    def answer(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params["page"])
        return httpx.Response(200, json=everything[(page - 1) * 20 : page * 20])  # asked 100, gets 20

    mock.get(u("/workflows/")).mock(side_effect=answer)
    assert len(await api.iter_workflows()) == 45


async def test_iter_workflows_server_ignoring_page_stops(api: Api, mock: respx.MockRouter) -> None:
    route = mock.get(u("/workflows/")).mock(return_value=httpx.Response(200, json=_workflows(0, 3)))
    workflows = await api.iter_workflows(page_size=3)
    assert [w.name for w in workflows] == ["wf0", "wf1", "wf2"]
    assert route.call_count == 2


async def test_iter_workflows_starts_at_page_and_validates(api: Api, mock: respx.MockRouter) -> None:
    route = mock.get(u("/workflows/")).mock(
        side_effect=[httpx.Response(200, json=_workflows(0, 1)), httpx.Response(200, json=[])]
    )
    assert len(await api.iter_workflows(page=5)) == 1
    assert [c.request.url.params["page"] for c in route.calls] == ["5", "6"]
    with pytest.raises(WorkflowServiceInputError, match="bogus: Extra inputs are not permitted"):
        await api.iter_workflows(bogus=1)


# --------------------------------------------------------------------------------------------------
# Connection parsing (Airflow connection, from the environment)


def set_conn(monkeypatch: pytest.MonkeyPatch, value: str | dict[str, Any]) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", value if isinstance(value, str) else json.dumps(value)
    )


@pytest.mark.parametrize(
    ("conn", "expected"),
    [
        (
            {
                "conn_type": "workflowsvc",
                "host": "https://svc.example/api/v1",
                "password": TOKEN,
                "extra": {"api_key": API_KEY},
            },
            {
                "base_url": "https://svc.example/api/v1",
                "timeout": 60.0,
                "connect_timeout": 10.0,
                "verify": True,
                "max_retries": 5,
                "retry_wait": 1.0,
                "retry_max_wait": 60.0,
            },
        ),
        (
            {
                "conn_type": "workflowsvc",
                "host": "https://svc.example:8443/api/v1/",
                "password": TOKEN,
                "extra": {
                    "api_key": API_KEY,
                    "timeout": "15",
                    "connect_timeout": 3,
                    "verify": False,
                    "max_retries": "2",
                    "retry_wait": 0.1,
                    "retry_max_wait": 5,
                },
            },
            {
                "base_url": "https://svc.example:8443/api/v1",
                "timeout": 15.0,
                "connect_timeout": 3.0,
                "verify": False,
                "max_retries": 2,
                "retry_wait": 0.1,
                "retry_max_wait": 5.0,
            },
        ),
        (
            {
                "conn_type": "workflowsvc",
                "host": "svc.example",
                "password": TOKEN,
                "extra": {"api_key": API_KEY},
            },
            {"base_url": "https://svc.example/api/v1"},
        ),
        (
            {
                "conn_type": "workflowsvc",
                "host": "localhost",
                "port": 8080,
                "schema": "/custom/api/v1",
                "password": TOKEN,
                "extra": {"api_key": API_KEY, "protocol": "HTTP"},
            },
            {"base_url": "http://localhost:8080/custom/api/v1"},
        ),
        (
            {
                "conn_type": "workflowsvc",
                "host": "https://svc.example",
                "password": TOKEN,
                "extra": {
                    "extra__workflowsvc__api_key": API_KEY,
                    "extra__workflowsvc__timeout": 9,
                    "extra__workflowsvc__verify": "false",
                },
            },
            {"base_url": "https://svc.example/api/v1", "timeout": 9.0, "verify": False},
        ),
        (
            f"workflowsvc://:{TOKEN}@svc.example/api%2Fv1?api_key={API_KEY}",
            {"base_url": "https://svc.example/api/v1"},
        ),
        (
            f"workflowsvc://:{TOKEN}@svc.example:9000/api/v1?api_key={API_KEY}&verify=false&timeout=7&max_retries=1",
            {
                "base_url": "https://svc.example:9000/api/v1",
                "verify": False,
                "timeout": 7.0,
                "max_retries": 1,
            },
        ),
        (
            f"workflowsvc://:{TOKEN}@127.0.0.1:8000?protocol=http&api_key={API_KEY}&verify=true",
            {"base_url": "http://127.0.0.1:8000/api/v1", "verify": True},
        ),
        (
            f"workflowsvc://https://:{TOKEN}@svc.example:8443/api/v1?api_key={API_KEY}",
            {"base_url": "https://svc.example:8443/api/v1"},
        ),
    ],
)
def test_connection_forms(monkeypatch: pytest.MonkeyPatch, conn: Any, expected: dict[str, Any]) -> None:
    set_conn(monkeypatch, conn)
    hook = WorkflowServiceHook()
    settings = hook.settings
    for key, value in expected.items():
        assert getattr(settings, key) == value, key
    assert settings.token is not None
    assert settings.token.get_secret_value() == TOKEN
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == API_KEY
    assert_no_secrets(repr(hook), str(hook), repr(settings), str(settings), settings.model_dump_json())


async def test_connection_from_env_used_by_both_hooks(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, f"workflowsvc://:{TOKEN}@svc.example:8443/api%2Fv1?api_key={API_KEY}&max_retries=0")
    with respx.mock(assert_all_mocked=True) as router:
        route = router.get("https://svc.example:8443/api/v1/jobs/").mock(
            return_value=httpx.Response(200, json=[])
        )
        client = Api(kind)
        assert await client("list_jobs") == []
        await client.close()
    headers = route.calls.last.request.headers
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["service-api-key"] == API_KEY


def test_connection_without_credentials_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, {"conn_type": "workflowsvc", "host": "http://self-hosted.local:8000/api/v1"})
    settings = WorkflowServiceHook().settings
    assert settings.token is None
    assert settings.api_key is None
    assert "authorization" not in settings.headers()
    assert "service-api-key" not in settings.headers()


def test_ca_bundle_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not really a certificate")
    set_conn(
        monkeypatch,
        {
            "conn_type": "workflowsvc",
            "host": "https://svc.example/api/v1",
            "extra": {"ca_bundle": str(bundle)},
        },
    )
    hook = WorkflowServiceHook()
    assert hook.settings.verify == str(bundle)
    with pytest.raises(
        WorkflowServiceInputError, match="cannot load the CA certificates for TLS verification"
    ):
        hook.list_jobs()  # not a certificate: a clear error, not an ssl traceback
    set_conn(
        monkeypatch,
        {
            "conn_type": "workflowsvc",
            "host": "https://svc.example/api/v1",
            "extra": {"ca_bundle": str(bundle), "verify": False},
        },
    )
    assert WorkflowServiceHook().settings.verify is False


@pytest.mark.parametrize(
    ("conn", "message"),
    [
        ({"host": ""}, "host is empty"),
        ({"host": None}, "host is empty"),
        ({"host": "ftp://svc.example/api/v1"}, "base_url: must be an http\\(s\\) URL"),
        ({"host": "svc.example", "extra": {"protocol": "ftp"}}, "protocol must be http or https, got 'ftp'"),
        ({"host": "https://svc.example/api/v1?x=1"}, "must not have a query string"),
        ({"host": f"https://user:{TOKEN}@svc.example/api/v1"}, "must not carry credentials"),
        ({"host": "https://svc.example:99999/api/v1"}, "invalid port"),
        (
            {"host": "https://svc.example", "extra": {"timeout": "soon"}},
            "timeout: Input should be a valid number",
        ),
        ({"host": "https://svc.example", "extra": {"timeout": 0}}, "timeout: Input should be greater than 0"),
        (
            {"host": "https://svc.example", "extra": {"max_retries": -1}},
            "max_retries: Input should be greater",
        ),
        ({"host": "https://svc.example", "extra": {"max_retries": 99}}, "max_retries: Input should be less"),
        (
            {"host": "https://svc.example", "extra": {"verify": "/no/such/ca.pem"}},
            "verify: .*existing CA bundle",
        ),
        (
            {"host": "https://svc.example", "extra": {"retry_wait": "x"}},
            "retry_wait: Input should be a valid number",
        ),
    ],
)
def test_bad_connection_values(monkeypatch: pytest.MonkeyPatch, conn: dict[str, Any], message: str) -> None:
    set_conn(
        monkeypatch,
        {
            "conn_type": "workflowsvc",
            "password": TOKEN,
            **conn,
            "extra": {"api_key": API_KEY, **conn.get("extra", {})},
        },
    )
    hook = WorkflowServiceHook()
    with pytest.raises(
        WorkflowServiceInputError, match="connection 'workflowsvc_default' is misconfigured: "
    ) as info:
        hook.list_jobs()
    assert info.match(message)
    assert_no_secrets(info.value)


def test_settings_direct_construction_and_secrets() -> None:
    settings = ConnectionSettings(base_url="https://svc.example", token=TOKEN, api_key=API_KEY)
    assert settings.base_url == "https://svc.example/api/v1"
    assert settings.headers()["authorization"] == f"Bearer {TOKEN}"
    hook = WorkflowServiceHook(settings=settings)
    assert repr(hook) == "WorkflowServiceHook(workflowsvc_conn_id='workflowsvc_default')"
    assert_no_secrets(repr(settings), str(settings), settings.model_dump_json(), repr(hook), str(hook))
    assert_no_secrets(repr(WorkflowServiceAsyncHook(settings=settings)))
    assert hook.get_conn() is hook.get_conn()
    hook.close()


# --------------------------------------------------------------------------------------------------
# test_connection


def test_test_connection_success(mock: respx.MockRouter) -> None:
    route = mock.get(u("/workflows/")).mock(return_value=httpx.Response(200, json=[WORKFLOW]))
    ok, message = WorkflowServiceHook(settings=make_settings()).test_connection()
    assert ok is True
    assert message == f"Connection successful: {BASE} accepted the credentials."
    assert dict(route.calls.last.request.url.params) == {"page": "1", "page_size": "1"}
    assert route.calls.last.request.headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (
            httpx.Response(401, json={"detail": "Invalid API key"}),
            "Connection failed: 401 Unauthorized from GET /api/v1/workflows/: Invalid API key. "
            "Check the access token (password) and the API key.",
        ),
        (
            httpx.Response(403, json={"detail": f"key {API_KEY} belongs to another workspace"}),
            "Connection failed: 403 Forbidden from GET /api/v1/workflows/: "
            "key *** belongs to another workspace.",
        ),
        (
            httpx.Response(404, text="Not Found"),
            "Connection failed: 404 Not Found from GET /api/v1/workflows/: Not Found. Check the base URL",
        ),
        (
            httpx.Response(503, json={"detail": "maintenance"}),
            "Connection failed: 503 Service Unavailable from GET /api/v1/workflows/: maintenance",
        ),
        (
            httpx.Response(429),
            "Connection failed: 429 Too Many Requests from GET /api/v1/workflows/. The service",
        ),
        (
            httpx.Response(200, text="<html>login page</html>"),
            "Connection failed: GET /api/v1/workflows/ returned 200 with an unexpected body: not JSON",
        ),
        (
            httpx.ConnectError("[Errno 111] Connection refused"),
            f"Connection failed: GET {BASE}/workflows/ failed: ConnectError: [Errno 111] Connection refused. "
            "Is the service listening on wfsvc.example.test:443? Check the port",
        ),
    ],
)
def test_test_connection_failure(mock: respx.MockRouter, response: Any, expected: str) -> None:
    route = mock.get(u("/workflows/")).mock(side_effect=[response, httpx.Response(200, json=[])])
    ok, message = WorkflowServiceHook(settings=make_settings()).test_connection()
    assert ok is False
    assert message.startswith(expected), message
    assert route.call_count == 1  # no retries: the form answers at once
    assert_no_secrets(message)


def test_test_connection_misconfigured_or_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, {"conn_type": "workflowsvc", "host": "", "password": TOKEN})
    ok, message = WorkflowServiceHook().test_connection()
    assert ok is False
    assert message.startswith(
        "Connection failed: connection 'workflowsvc_default' is misconfigured: host is empty"
    )
    ok, message = WorkflowServiceHook("no_such_conn").test_connection()
    assert ok is False
    assert "no_such_conn" in message
    assert message.startswith("Connection failed: ")


# --------------------------------------------------------------------------------------------------
# Credentials never leak


async def test_secrets_absent_from_reprs_messages_and_logs(
    kind: str, mock: respx.MockRouter, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    client = api_with(kind, max_retries=1)
    texts: list[object] = [repr(client.hook), str(client.hook), repr(make_settings()), str(make_settings())]
    echo = {"detail": f"bad credentials {TOKEN} / {API_KEY}"}
    mock.get(u("/jobs/")).mock(side_effect=[httpx.Response(503, json=echo), httpx.Response(401, json=echo)])
    mock.get(u(f"/jobs/{JID}")).mock(side_effect=httpx.ConnectError(f"refused for {TOKEN}"))
    mock.post(u("/workflows/")).mock(return_value=httpx.Response(307, headers={"location": u("/workflows")}))
    mock.post(u("/workflows")).mock(
        return_value=httpx.Response(
            422, json={"detail": [{"loc": ["body", "name"], "msg": "bad", "input": TOKEN}]}
        )
    )
    mock.get(u(f"/jobs/{JID}/details")).mock(return_value=httpx.Response(200, text=f"<p>{API_KEY}</p>"))
    for name, args in [
        ("list_jobs", ()),
        ("get_job", (JID,)),
        ("create_workflow", ("w", "basic")),
        ("get_job_details", (JID,)),
        ("get_job", ("",)),
    ]:
        with pytest.raises(WorkflowServiceError) as info:
            await client(name, *args)
        texts += [info.value, repr(info.value), info.value.args, getattr(info.value, "detail", "")]
    await client.close()
    assert_no_secrets(*texts, caplog.text)
    assert "retrying in" in caplog.text  # the log was really captured


async def test_clients_keep_idle_connections_longer_than_the_default_poll_interval() -> None:
    """A wait polling every 30 s reuses one connection instead of opening one per poll."""
    settings = ConnectionSettings(base_url="https://svc.test/api/v1", token="t")
    with WorkflowServiceHook(settings=settings) as hook:
        sync_pool = hook.get_conn()._transport._pool  # type: ignore[attr-defined]
    async with WorkflowServiceAsyncHook(settings=settings) as ahook:
        lanes = (await ahook.get_async_conn())._transport._lanes  # type: ignore[attr-defined]
    for pool in (sync_pool, *(lane._pool for lane in lanes)):
        assert pool._keepalive_expiry > 30.0


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_first_attempt_failure_is_retried_once_through_the_retry_loop(
    kind: str, mock: respx.MockRouter
) -> None:
    client = api_with(kind, max_retries=2)
    route = mock.get(u(f"/jobs/{JID}")).mock(
        side_effect=[httpx.Response(503), httpx.Response(503), httpx.Response(200, json={"id": JID})]
    )
    job = await client("get_job", JID)
    assert job.id == JID
    assert route.call_count == 3
    await client.close()
