"""Contract tests: every hook method against the emulator over real loopback sockets.

The sync hook is driven through every endpoint method (plus ``iter_workflows`` and
``test_connection``); the async hook through the methods a trigger or deferrable operator uses.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from helpers import accepted_code, job_spelling
from pydantic import SecretStr

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceApiError,
    WorkflowServiceAuthError,
    WorkflowServiceConflictError,
    WorkflowServiceConnectionError,
    WorkflowServiceInputError,
    WorkflowServiceNotFoundError,
    WorkflowServiceQuotaError,
    WorkflowServiceRateLimitError,
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
    ConfluenceSourceConfig,
    ConnectionCheckStatus,
    Element,
    Job,
    JobStatus,
    WorkflowNode,
    WorkflowStatus,
)

F = TypeVar("F", bound=Callable[..., Any])

CONFLUENCE = {"url": "https://wiki.example.com", "username": "me@example.com", "token": "tok-confluence-1"}
PLAN_CHUNK = "Project Plan\n\nWe build it, then ship it.\n\ndesign\n\nbuild"
"""plan.txt (``inputs``) after a basic workflow's nodes: its four elements in one chunk."""
ASTRA = {"collection_name": "docs", "api_endpoint": "https://db.example.com", "token": "astra-tok-2"}


@pytest.fixture
def hook(settings: ConnectionSettings) -> Iterator[WorkflowServiceHook]:
    with WorkflowServiceHook(settings=settings) as hook:
        yield hook


@pytest.fixture
def inputs(tmp_path: Path) -> list[Path]:
    good = tmp_path / "plan.txt"
    good.write_text("Project Plan\n\nWe build it, then ship it.\n\n- design\n- build\n")
    page = tmp_path / "page.html"
    page.write_text("<h1>Release Notes</h1><p>Version two is out.</p>")
    return [good, page]


def finish(emulator: Any, hook: WorkflowServiceHook, job_id: str) -> Job:
    """Move emulator time far enough for any small job to end, then fetch it."""
    emulator.advance_clock(60)
    job = hook.get_job(job_id)
    assert job.status.is_terminal
    return job


def local_job(hook: WorkflowServiceHook, files: list[Path], name: str = "local") -> Job:
    workflow = hook.create_workflow(name, "basic")
    job = hook.run_workflow(workflow.id, files=files)
    assert job is not None
    return job


def exercises(*names: str) -> Callable[[F], F]:
    """Declare the sync hook's endpoint methods a test is the contract test of (checked when it runs)."""

    def declare(test: F) -> F:
        test.endpoints = frozenset(names)  # type: ignore[attr-defined]
        return test

    return declare


@pytest.fixture(autouse=True)
def _calls_what_it_declares(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Fail a test that does not call every endpoint method it declares with :func:`exercises`."""
    declared: frozenset[str] = getattr(request.function, "endpoints", frozenset())
    called: set[str] = set()
    for name in declared:
        monkeypatch.setattr(WorkflowServiceHook, name, _recording(getattr(WorkflowServiceHook, name), called))
    yield
    assert sorted(declared - called) == [], "declared with @exercises but never called"


def _recording(method: Callable[..., Any], called: set[str]) -> Callable[..., Any]:
    @functools.wraps(method)
    def record(self: WorkflowServiceHook, *args: Any, **kwargs: Any) -> Any:
        called.add(method.__name__)
        return method(self, *args, **kwargs)

    return record


def test_every_endpoint_method_has_a_contract_test() -> None:
    declared = [getattr(test, "endpoints", frozenset()) for test in globals().values() if callable(test)]
    assert set().union(*declared) == set(ENDPOINT_NAMES)


# --------------------------------------------------------------------------------------------------
# Connectors


@exercises("list_sources", "get_source", "create_source", "update_source", "delete_source")
def test_source_connector_round_trip(emulator: Any, hook: WorkflowServiceHook) -> None:
    created = hook.create_source("wiki", "confluence", ConfluenceSourceConfig(**CONFLUENCE))
    assert created.type == "confluence"
    assert created.config["token"].get_secret_value() == "**********"
    other = hook.create_source("bucket", "s3", {"remote_url": "s3://b", "aws_secret_key": "k"})
    assert [s.name for s in hook.list_sources()] == ["wiki", "bucket"]
    assert [s.id for s in hook.list_sources(source_type="s3")] == [other.id]
    assert hook.get_source(created.id) == created
    updated = hook.update_source(created.id, {**CONFLUENCE, "spaces": ["ENG"]}, source_type="confluence")
    assert updated.config["spaces"] == ["ENG"]
    assert updated.updated_at is not None
    hook.delete_source(other.id)
    with pytest.raises(WorkflowServiceNotFoundError):
        hook.get_source(other.id)


@exercises(
    "list_destinations", "get_destination", "create_destination", "update_destination", "delete_destination"
)
def test_destination_connector_round_trip(hook: WorkflowServiceHook) -> None:
    created = hook.create_destination("astra", "astradb", {**ASTRA, "flatten_metadata": False})
    assert "flatten_metadata" not in created.config
    bucket = hook.create_destination("out", "s3", {"remote_url": "s3://out"})
    assert [d.name for d in hook.list_destinations()] == ["astra", "out"]
    assert [d.id for d in hook.list_destinations(destination_type="astradb")] == [created.id]
    assert hook.get_destination(bucket.id).name == "out"
    updated = hook.update_destination(created.id, {**ASTRA, "batch_size": 50}, destination_type="astradb")
    assert updated.config["batch_size"] == 50
    hook.delete_destination(bucket.id)
    assert [d.id for d in hook.list_destinations()] == [created.id]


@exercises(
    "start_source_connection_check",
    "get_source_connection_check",
    "start_destination_connection_check",
    "get_destination_connection_check",
)
def test_connection_checks(emulator: Any, hook: WorkflowServiceHook) -> None:
    source = hook.create_source("wiki", "confluence", CONFLUENCE)
    broken = hook.create_destination("broken", "astradb", {**ASTRA, "token": "fail-check"})
    with pytest.raises(WorkflowServiceNotFoundError, match="no connection check"):
        hook.get_source_connection_check(source.id)
    started = hook.start_source_connection_check(source.id)
    assert started.status is ConnectionCheckStatus.SCHEDULED
    assert started.reason is None
    assert hook.start_destination_connection_check(broken.id).status is ConnectionCheckStatus.SCHEDULED
    emulator.advance_clock(5)
    done = hook.get_source_connection_check(source.id)
    assert done.status is ConnectionCheckStatus.SUCCESS
    assert done.id == started.id
    assert done.reported_at
    failed = hook.get_destination_connection_check(broken.id)
    assert failed.status is ConnectionCheckStatus.FAILURE
    assert "config field 'token'" in (failed.reason or "")


def test_connector_errors_map_to_exceptions(hook: WorkflowServiceHook) -> None:
    hook.create_source("wiki", "confluence", CONFLUENCE)
    with pytest.raises(WorkflowServiceConflictError, match="already exists"):
        hook.create_source("wiki", "confluence", CONFLUENCE)
    source = hook.list_sources()[0]
    with pytest.raises(WorkflowServiceValidationError, match=r"config: .*mixes authentication"):
        hook.update_source(source.id, {**CONFLUENCE, "password": "pw"})  # untyped: only the server checks
    with pytest.raises(WorkflowServiceInputError):
        hook.update_source(source.id, {**CONFLUENCE, "password": "pw"}, source_type="confluence")


# --------------------------------------------------------------------------------------------------
# Workflows


@exercises("create_workflow", "list_workflows", "get_workflow", "update_workflow", "delete_workflow")
def test_workflow_round_trip(hook: WorkflowServiceHook) -> None:
    source = hook.create_source("s3", "s3", {"remote_url": "s3://b"})
    nodes = [WorkflowNode(name="Parse", type="partition", subtype="fast")]
    workflow = hook.create_workflow(
        "wf", "custom", source_id=source.id, workflow_nodes=nodes, schedule="daily"
    )
    assert workflow.sources == [source.id]
    assert workflow.status is WorkflowStatus.ACTIVE
    assert workflow.schedule is not None
    assert workflow.schedule.crontab_entries[0].cron_expression == "0 0 * * *"
    assert [n.name for n in workflow.workflow_nodes] == ["Parse"]
    assert workflow.workflow_nodes[0].id
    assert hook.get_workflow(workflow.id) == workflow
    updated = hook.update_workflow(workflow.id, name="renamed", schedule="every 2 hours", reprocess_all=True)
    assert updated.name == "renamed"
    assert updated.reprocess_all is True
    assert updated.schedule is not None
    assert updated.schedule.crontab_entries[0].cron_expression == "0 */2 * * *"
    assert [w.id for w in hook.list_workflows(source_id=source.id)] == [workflow.id]
    hook.delete_workflow(workflow.id)
    assert hook.list_workflows() == []
    assert [w.id for w in hook.list_workflows(show_only_soft_deleted=True)] == [workflow.id]
    with pytest.raises(WorkflowServiceNotFoundError):
        hook.get_workflow(workflow.id)


def test_iter_workflows_pages(emulator: Any, hook: WorkflowServiceHook) -> None:
    names = [f"wf-{i}" for i in range(7)]
    for name in names:
        hook.create_workflow(name, "basic")
    emulator.clear_requests()
    assert [w.name for w in hook.iter_workflows(page_size=3, sort_by="name")] == names
    queries = [r["query"] for r in emulator.requests(method="GET", path_contains="/workflows")]
    pages = [q.split("page=")[1].split("&")[0] for q in queries]
    assert pages[:3] == ["1", "2", "3"]
    assert len(pages) <= 4
    assert all("page_size=3" in q for q in queries)


def test_test_connection(emulator: Any, settings: ConnectionSettings) -> None:
    ok, message = WorkflowServiceHook(settings=settings).test_connection()
    assert ok
    assert emulator.base_url in message
    # no token, and an API key that is not the service's (the platform takes the key alone)
    wrong = settings.model_copy(update={"token": None, "api_key": SecretStr("key-not-the-services")})
    ok, message = WorkflowServiceHook(settings=wrong).test_connection()
    assert not ok
    assert "401" in message


def test_wrong_credentials_raise_auth_error(emulator: Any, settings: ConnectionSettings) -> None:
    # the spec's service wants the token; the platform takes the API key alone, so that one is wrong there
    api_key = settings.api_key if emulator.dialect == "spec" else "key-nope"
    wrong = ConnectionSettings(base_url=settings.base_url, token="nope", api_key=api_key)
    with WorkflowServiceHook(settings=wrong) as hook, pytest.raises(WorkflowServiceAuthError):
        hook.list_sources()


# --------------------------------------------------------------------------------------------------
# Runs and jobs


@exercises(
    "run_workflow",
    "list_jobs",
    "get_job",
    "get_job_details",
    "get_job_failed_files",
    "download_job_output",
    "get_output_document",
)
def test_local_run_poll_and_download(
    emulator: Any, hook: WorkflowServiceHook, inputs: list[Path], tmp_path: Path
) -> None:
    emulator.configure(processing_delay=5)  # still scheduled when the run's answer is made, however busy
    job = local_job(hook, inputs)
    assert job.status is JobStatus.SCHEDULED
    assert job.output_node_files == []
    assert [j.id for j in hook.list_jobs(workflow_id=job.workflow_id)] == [job.id]
    done = finish(emulator, hook, job.id)
    assert done.status is JobStatus.COMPLETED
    assert len(done.output_node_files) == 2
    details = hook.get_job_details(job.id)
    assert details.processing_status is JobStatus.COMPLETED
    assert [(n.node_name, n.success, n.failure) for n in details.node_stats] == [
        ("Partitioner", 2, 0),
        ("Chunker", 2, 0),
        ("Embedder", 2, 0),
    ]
    assert hook.get_job_failed_files(job.id).failed_files == []
    first, second = done.output_node_files
    elements = hook.download_job_output(job.id, first.file_id, first.node_id)
    assert isinstance(elements, list)
    assert all(isinstance(e, Element) for e in elements)
    # the basic workflow's Chunker and Embedder: one chunk of the four elements, embedded
    assert [(e.type, e.text) for e in elements] == [("CompositeElement", PLAN_CHUNK)]
    assert len(elements[0].model_dump()["embeddings"]) == 1536
    assert elements[0].metadata.filename == "plan.txt"
    assert elements[0].metadata.page_number == 1
    assert hook.get_output_document(job.id, first.file_id, first.node_id) == elements[0].metadata.filename
    target = tmp_path / "out" / "page.json"
    saved = hook.download_job_output(job.id, second.file_id, second.node_id, path=target)
    assert saved == target
    assert [e["text"] for e in json.loads(target.read_text())] == ["Release Notes\n\nVersion two is out."]
    assert list(target.parent.iterdir()) == [target]


def test_failed_files_and_failed_jobs(emulator: Any, hook: WorkflowServiceHook, tmp_path: Path) -> None:
    good, binary, empty = tmp_path / "good.md", tmp_path / "blob.txt", tmp_path / "empty.txt"
    good.write_text("# Good\n\nFine text.")
    binary.write_bytes(b"\x00\x01\x02\x03")
    empty.write_bytes(b"")
    partial = finish(emulator, hook, local_job(hook, [good, binary], "partial").id)
    assert partial.status is JobStatus.COMPLETED
    assert len(partial.output_node_files) == 1
    (failed_file,) = hook.get_job_failed_files(partial.id).failed_files
    assert failed_file.document == "blob.txt"
    assert "NUL bytes" in failed_file.error
    failed = finish(emulator, hook, local_job(hook, [binary, empty], "all-bad").id)
    assert failed.status is JobStatus.FAILED
    assert failed.output_node_files == []
    details = hook.get_job_details(failed.id)
    assert details.processing_status is JobStatus.FAILED
    assert (details.message or "").startswith("All 2 file(s) failed")
    assert [j.id for j in hook.list_jobs(status=JobStatus.FAILED)] == [failed.id]
    with pytest.raises(
        WorkflowServiceConflictError, match=f"status is {job_spelling(emulator.dialect, 'failed')[0]}"
    ):
        hook.download_job_output(failed.id, "x", "y")


def test_in_progress_is_recognised_in_every_spelling(
    emulator: Any, hook: WorkflowServiceHook, inputs: list[Path]
) -> None:
    emulator.configure(processing_delay=100)
    job = local_job(hook, inputs)
    emulator.advance_clock(150)
    record, details = hook.get_job(job.id), hook.get_job_details(job.id)
    (listed,) = hook.list_jobs(status="in_progress")
    listing, recorded, _ = job_spelling(emulator.dialect, "in progress")
    assert (record.raw_status, listed.raw_status) == (recorded, listing)
    assert record.status is listed.status is details.processing_status is JobStatus.IN_PROGRESS
    assert (details.node_stats[0].ready, details.node_stats[0].in_progress) == (1, 1)


@exercises("cancel_job")
def test_cancel(emulator: Any, hook: WorkflowServiceHook, inputs: list[Path]) -> None:
    emulator.configure(processing_delay=100)
    job = local_job(hook, inputs)
    emulator.advance_clock(150)
    hook.cancel_job(job.id)
    assert hook.get_job(job.id).status is JobStatus.STOPPED
    assert hook.get_job_details(job.id).processing_status is JobStatus.STOPPED
    with pytest.raises(WorkflowServiceConflictError, match="job already completed"):
        hook.cancel_job(job.id)
    with pytest.raises(WorkflowServiceNotFoundError):
        hook.cancel_job("5b0c1d9e-8f57-4c39-9a7e-2d9f2f0d1a11")


def test_remote_run_without_files(emulator: Any, hook: WorkflowServiceHook) -> None:
    source = hook.create_source("s3", "s3", {"remote_url": "s3://b", "emulator_documents": 2})
    destination = hook.create_destination("astra", "astradb", ASTRA)
    workflow = hook.create_workflow("remote", "advanced", source_id=source.id, destination_id=destination.id)
    job = hook.run_workflow(workflow.id)
    assert job is not None
    assert job.workflow_name == "remote"
    done = finish(emulator, hook, job.id)
    assert done.status is JobStatus.COMPLETED
    assert done.output_node_files == []
    with pytest.raises(WorkflowServiceValidationError, match="input_files"):
        hook.run_workflow(hook.create_workflow("local", "basic").id)


# --------------------------------------------------------------------------------------------------
# Templates and on-demand jobs (the live service's: platform dialect only)


@exercises("list_templates", "get_template", "create_job")
def test_templates_and_an_on_demand_job(emulator: Any, hook: WorkflowServiceHook, inputs: list[Path]) -> None:
    if emulator.dialect == "spec":  # the spec has none of the three operations
        with pytest.raises(WorkflowServiceNotFoundError):
            hook.list_templates()
        with pytest.raises(WorkflowServiceNotFoundError):
            hook.get_template("hi_res_partition")
        with pytest.raises(WorkflowServiceApiError) as refused:
            hook.create_job(template_id="hi_res_partition", files=inputs)
        assert refused.value.status_code == 405
        return
    listed = {t.id: t for t in hook.list_templates()}
    assert {"hi_res_partition", "hi_res_and_enrichment"} <= set(listed)
    template = hook.get_template("hi_res_and_enrichment")
    assert template.name == listed["hi_res_and_enrichment"].name
    assert [n.type for n in template.nodes] == ["partition", "prompter", "prompter"]
    with pytest.raises(WorkflowServiceNotFoundError):
        hook.get_template("no_such_template")

    job = hook.create_job(template_id="hi_res_partition", files=[inputs[0], (inputs[1], "2024/page.html")])
    assert job is not None
    assert (job.status, job.job_type) == (JobStatus.SCHEDULED, "template")
    assert job.input_file_ids == ["plan.txt", "2024/page.html"]
    assert [j.id for j in hook.list_jobs(workflow_id=job.workflow_id)] == [job.id]
    done = finish(emulator, hook, job.id)
    assert done.status is JobStatus.COMPLETED
    elements = hook.download_job_output(job.id, done.output_node_files[0].file_id)
    assert elements[0].metadata.filename == "plan.txt"

    emulator.configure(on_demand_launch_interval=3600)
    nodes = [{"name": "Partitioner", "type": "partition", "subtype": "fast"}]
    with pytest.raises(WorkflowServiceRateLimitError) as too_soon:  # within the launch gap
        hook.create_job(job_nodes=nodes, files=inputs[0])
    assert too_soon.value.retry_after is not None
    assert too_soon.value.retry_after > 3000
    assert len(emulator.requests(method="POST", path_contains="/jobs")) == 2  # a launch is never retried
    emulator.advance_clock(3600)
    custom = hook.create_job(job_nodes=nodes, files=inputs[0])
    assert custom is not None
    assert custom.job_type == "ephemeral"
    emulator.configure(quota_exhausted=True)
    emulator.advance_clock(3600)
    with pytest.raises(WorkflowServiceQuotaError, match=r"Insufficient API quota.*retrying cannot help"):
        hook.create_job(template_id="hi_res_partition", files=inputs)


# --------------------------------------------------------------------------------------------------
# Job events (the live service's: platform dialect only)


@exercises("list_notifications")
def test_the_job_event_feed(emulator: Any, hook: WorkflowServiceHook, inputs: list[Path]) -> None:
    if emulator.dialect == "spec":  # the spec has no job events
        with pytest.raises(WorkflowServiceNotFoundError):
            hook.list_notifications()
        return
    job = local_job(hook, inputs)
    finish(emulator, hook, job.id)
    page = hook.list_notifications(workflow_id=job.workflow_id)
    assert [e.event_type for e in page.events] == ["job.completed", "job.in_progress", "job.scheduled"]
    assert {(e.payload.job_id, e.workflow_id, e.is_read) for e in page.events} == {
        (job.id, job.workflow_id, False)
    }
    assert page.events[0].payload.status is JobStatus.COMPLETED
    assert page.next_cursor is None

    first = hook.list_notifications(workflow_id=job.workflow_id, limit=2)
    rest = hook.list_notifications(workflow_id=job.workflow_id, limit=2, cursor=first.next_cursor)
    assert [e.id for e in first.events + rest.events] == [e.id for e in page.events]
    ended = hook.list_notifications(event_types=["job.completed", "job.failed"], unread_only=True)
    assert [e.id for e in ended.events] == [page.events[0].id]
    created = page.events[0].created_at
    assert created is not None
    assert hook.list_notifications(since=created + timedelta(seconds=1)).events == []


@exercises("get_notification", "count_unread_notifications", "mark_notifications_read")
def test_the_feeds_read_state(emulator: Any, hook: WorkflowServiceHook, inputs: list[Path]) -> None:
    if emulator.dialect == "spec":
        with pytest.raises(WorkflowServiceNotFoundError):
            hook.count_unread_notifications()
        with pytest.raises(WorkflowServiceNotFoundError):
            hook.get_notification("5b0c1d9e-8f57-4c39-9a7e-2d9f2f0d1a11")
        with pytest.raises(WorkflowServiceNotFoundError):
            hook.mark_notifications_read(["5b0c1d9e-8f57-4c39-9a7e-2d9f2f0d1a11"])
        return
    job = local_job(hook, inputs)
    finish(emulator, hook, job.id)
    newest, *older = hook.list_notifications(workflow_id=job.workflow_id).events
    assert hook.get_notification(newest.id) == newest
    assert hook.count_unread_notifications(job.workflow_id) == hook.count_unread_notifications() == 3
    assert hook.mark_notifications_read([newest.id]) == 1
    assert hook.get_notification(newest.id).is_read is True
    assert older[0].created_at is not None
    before = older[0].created_at + timedelta(microseconds=1)
    assert hook.mark_notifications_read(before=before, workflow_id=job.workflow_id) == 2
    assert hook.count_unread_notifications() == 0
    with pytest.raises(WorkflowServiceNotFoundError):
        hook.get_notification("5b0c1d9e-8f57-4c39-9a7e-2d9f2f0d1a11")


CHANNEL_SECRET = "contract-channel-secret-0123456789"
LEVELS = ("workflow", "workspace")


CHANNEL_VERBS = ("create", "get", "update", "delete", "verify")


@exercises(
    *(f"{verb}_{level}_channel" for verb in CHANNEL_VERBS for level in LEVELS),
    *(f"list_{level}_channels" for level in LEVELS),
)
def test_notification_channels(emulator: Any, hook: WorkflowServiceHook) -> None:
    workflow = hook.create_workflow("channels", "basic")
    webhook = {"event_types": ["job.completed"], "url": "https://hooks.example.test/in"}
    webhook["secret"] = CHANNEL_SECRET
    if emulator.dialect == "spec":  # the spec has no job events: each operation is not found
        one = "5b0c1d9e-8f57-4c39-9a7e-2d9f2f0d1a11"
        calls = [("create_{}_channel", ("webhook",), webhook), ("list_{}_channels", (), {})]
        calls += [(f"{verb}_{{}}_channel", (one,), {}) for verb in ("get", "delete", "verify")]
        calls += [("update_{}_channel", (one,), {"enabled": False})]
        for level, scope in {"workflow": (workflow.id,), "workspace": ()}.items():
            for name, args, kwargs in calls:
                with pytest.raises(WorkflowServiceNotFoundError):
                    getattr(hook, name.format(level))(*scope, *args, **kwargs)
        return
    email = {"event_types": ["job.failed"], "email_config": {"recipient_email": "ops@example.test"}}
    hooked = hook.create_workflow_channel(workflow.id, "webhook", **webhook)
    mailed = hook.create_workspace_channel("email", **email, description="failures")
    assert (hooked.channel_type, hooked.url, hooked.enabled) == ("webhook", webhook["url"], True)
    assert (mailed.channel_type, mailed.description) == ("email", "failures")
    assert [c.id for c in hook.list_workflow_channels(workflow.id)] == [hooked.id]
    assert [c.id for c in hook.list_workspace_channels()] == [mailed.id]
    assert hook.get_workflow_channel(workflow.id, hooked.id).event_types == ["job.completed"]
    assert hook.get_workspace_channel(mailed.id).email_config["recipient_email"] == "ops@example.test"
    assert CHANNEL_SECRET not in json.dumps([c.model_dump(mode="json") for c in (hooked, mailed)])

    changed = hook.update_workflow_channel(workflow.id, hooked.id, enabled=False, secret="")
    assert (changed.enabled, changed.updated_at is not None) == (False, True)
    assert hook.update_workspace_channel(mailed.id, event_types="job.failed,job.stopped").event_types == [
        "job.failed",
        "job.stopped",
    ]
    assert hook.verify_workspace_channel(mailed.id, "123456").model_extra["verified"] is True
    verified = hook.verify_workflow_channel(workflow.id, hooked.id)
    assert verified is not None
    assert verified.id == hooked.id
    hook.delete_workflow_channel(workflow.id, hooked.id)
    hook.delete_workspace_channel(mailed.id)
    assert hook.list_workflow_channels(workflow.id) == hook.list_workspace_channels() == []
    with pytest.raises(WorkflowServiceNotFoundError):
        hook.get_workspace_channel(mailed.id)


# --------------------------------------------------------------------------------------------------
# Faults seen through the hook


def test_idempotent_requests_are_retried(emulator: Any, hook: WorkflowServiceHook) -> None:
    emulator.set_faults(method="GET", errors=[503, 502, "drop"], count=3, seed=1)
    assert hook.list_sources() == []
    log = emulator.requests()
    assert [r["fault"] is not None for r in log] == [True, True, True, False]
    assert log[-1]["status"] == 200


def test_rate_limit_retry_after_is_honoured(emulator: Any, hook: WorkflowServiceHook) -> None:
    emulator.set_faults(errors=[429], count=1, retry_after=0.2)
    assert hook.list_workflows() == []
    first, second = emulator.requests()
    assert first["status"] == 429
    assert second["status"] == 200


def test_creates_are_not_retried_once_sent(emulator: Any, hook: WorkflowServiceHook) -> None:
    emulator.set_faults(method="POST", errors=[503], count=1)
    with pytest.raises(WorkflowServiceServerError):
        hook.create_workflow("wf", "basic")
    emulator.set_faults(method="POST", errors=["drop"], count=1)
    with pytest.raises(WorkflowServiceConnectionError):
        hook.create_workflow("wf", "basic")
    assert hook.list_workflows() == []
    emulator.set_faults(method="GET", errors=[429], retry_after=0.01)
    with pytest.raises(WorkflowServiceRateLimitError) as info:
        hook.list_jobs()
    assert info.value.retry_after == pytest.approx(0.01)


# --------------------------------------------------------------------------------------------------
# Redirects between the slash forms


def test_add_slash_redirects_keep_methods_and_files(
    emulator: Any, hook: WorkflowServiceHook, inputs: list[Path]
) -> None:
    emulator.configure(redirect_slashes="add", redirect_status=307)
    source = hook.create_source("s3", "s3", {"remote_url": "s3://b"})
    assert [s.id for s in hook.list_sources()] == [source.id]
    job = local_job(hook, inputs)
    runs = emulator.requests(method="POST", path_contains="/run")
    accepted = accepted_code(emulator.dialect)
    assert [(r["path"].endswith("/run/"), r["status"]) for r in runs] == [(False, 307), (True, accepted)]
    done = finish(emulator, hook, job.id)
    assert len(done.output_node_files) == 2  # both files survived the redirect
    output = done.output_node_files[0]
    assert hook.download_job_output(job.id, output.file_id, output.node_id)[0].text == PLAN_CHUNK
    emulator.clear_requests()
    hook.list_sources()
    assert [r["status"] for r in emulator.requests()] == [200]  # the form was remembered


@pytest.mark.parametrize("status", [301, 308])
def test_strip_slash_redirects(emulator: Any, hook: WorkflowServiceHook, status: int) -> None:
    emulator.configure(redirect_slashes="strip", redirect_status=status)
    destination = hook.create_destination("out", "s3", {"remote_url": "s3://o"})
    workflow = hook.create_workflow("wf", "basic", destination_id=destination.id)
    assert [w.id for w in hook.list_workflows()] == [workflow.id]
    assert [d.id for d in hook.list_destinations()] == [destination.id]
    statuses = [(r["method"], r["status"]) for r in emulator.requests()]
    assert statuses.count(("POST", status)) == 2
    assert ("POST", 200) in statuses


def test_spec_redirect_mode_costs_one_redirect_per_collection(
    emulator: Any, hook: WorkflowServiceHook
) -> None:
    """The hook sends the platform's slash forms; a server redirecting to the spec's forms is followed
    once per collection, then the form is remembered."""
    emulator.configure(redirect_slashes="spec")
    lists = (hook.list_sources, hook.list_destinations, hook.list_workflows, hook.list_jobs)
    for list_collection in lists:
        list_collection()
    first = [(r["path"], r["status"]) for r in emulator.requests() if r["status"] != 200]
    assert sorted(first) == [(f"/api/v1/{c}/", 307) for c in ("destinations", "jobs", "sources")]
    emulator.clear_requests()
    for list_collection in lists:
        list_collection()
    assert {r["status"] for r in emulator.requests()} == {200}


# --------------------------------------------------------------------------------------------------
# The async hook


async def test_async_hook_run_poll_download(
    emulator: Any, settings: ConnectionSettings, inputs: list[Path], tmp_path: Path
) -> None:
    emulator.configure(processing_delay=5)  # still scheduled when the run's answer is made, however busy
    async with WorkflowServiceAsyncHook(settings=settings) as hook:
        workflow = await hook.create_workflow("async-wf", "basic")
        job = await hook.run_workflow(workflow.id, files=inputs)
        assert job is not None
        assert job.status is JobStatus.SCHEDULED
        emulator.advance_clock(60)
        done = await hook.get_job(job.id)
        assert done.status is JobStatus.COMPLETED
        assert [j.id for j in await hook.list_jobs(workflow_id=workflow.id, status="completed")] == [job.id]
        details = await hook.get_job_details(job.id)
        assert details.processing_status is JobStatus.COMPLETED
        assert (await hook.get_job_failed_files(job.id)).failed_files == []
        output = done.output_node_files[0]
        elements = await hook.download_job_output(job.id, output.file_id, output.node_id)
        assert isinstance(elements, list)
        assert elements[0].text == PLAN_CHUNK
        saved = await hook.download_job_output(
            job.id, output.file_id, output.node_id, path=tmp_path / "o.json"
        )
        assert isinstance(saved, Path)
        assert json.loads(saved.read_text())[0]["text"] == PLAN_CHUNK
        assert [w.name async for w in hook.iter_workflows(page_size=1)] == ["async-wf"]


async def test_async_hook_cancel_checks_and_redirects(
    emulator: Any, settings: ConnectionSettings, inputs: list[Path]
) -> None:
    emulator.configure(processing_delay=100, redirect_slashes="add")
    async with WorkflowServiceAsyncHook(settings=settings) as hook:
        source = await hook.create_source("wiki", "confluence", CONFLUENCE)
        assert [s.id for s in await hook.list_sources()] == [source.id]
        await hook.start_source_connection_check(source.id)
        emulator.advance_clock(1)
        assert (await hook.get_source_connection_check(source.id)).status is ConnectionCheckStatus.SUCCESS
        workflow = await hook.create_workflow("wf", "basic")
        job = await hook.run_workflow(workflow.id, files=inputs)
        assert job is not None
        emulator.advance_clock(150)
        assert (await hook.get_job(job.id)).status is JobStatus.IN_PROGRESS
        await hook.cancel_job(job.id)
        assert (await hook.get_job(job.id)).status is JobStatus.STOPPED
        with pytest.raises(WorkflowServiceConflictError):
            await hook.cancel_job(job.id)
    emulator.set_faults(method="GET", errors=[503], count=1)
    async with WorkflowServiceAsyncHook(settings=settings) as hook:
        assert (await hook.get_job(job.id)).status is JobStatus.STOPPED
    statuses = [r["status"] for r in emulator.requests(method="GET")]
    assert statuses[-3:] == [503, 307, 200]  # a new hook learns the slash form again
