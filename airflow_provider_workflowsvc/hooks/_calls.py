"""
Every endpoint of the Workflow Service, once: its signature, docstring and wire facts (:class:`Endpoints`).

Each endpoint validates its arguments (raising :class:`WorkflowServiceInputError` before anything is
sent) and returns an :class:`~._exchange.ApiCall`: method, path, query, body, how to parse the answer
and whether the request may be retried after an ambiguous failure. Each hook gets one real method per
endpoint from it (sync or async, by its ``_send``), with the endpoint's name, signature and docstring.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceInputError,
    validate_input,
)
from airflow_provider_workflowsvc.hooks._endpoint import (
    Endpoint,
    _channel_list,
    _channel_verify,
    _channel_write,
    _channels,
    _connector,
    _connector_type,
    _count,
    _creation,
    _deletion,
    _enum,
    _given,
    _job_id,
    _moment,
    _output_params,
    _path_id,
    _update_connector,
    _uuid,
    _workflow,
)
from airflow_provider_workflowsvc.hooks._exchange import (
    ApiCall,
    ignore_body,
    list_parser,
    parse_check_started,
    parse_run_result,
    parser,
)
from airflow_provider_workflowsvc.hooks._files import (  # operators import the upload checks from here
    OUTPUT_HEAD_BYTES,
    LocalFile,
    check_upload_name as check_upload_name,
    document_name_in,
    download_target,
    upload_files,
)
from airflow_provider_workflowsvc.models import (
    LISTED_JOB_STATUSES,
    ConnectionCheck,
    CreateChannel,
    CreateDestinationConnector,
    CreateJob,
    CreateSourceConnector,
    CreateWorkflow,
    DestinationConnector,
    DestinationType,
    Element,
    Job,
    JobDetails,
    JobEventType,
    JobFailedFiles,
    JobStatus,
    ListNotificationsParams,
    ListWorkflowsParams,
    MarkNotificationsRead,
    Notification,
    NotificationChannel,
    NotificationPage,
    SourceConnector,
    SourceType,
    TemplateDetail,
    TemplateListItem,
    UpdateChannel,
    UpdateWorkflow,
    Workflow,
    request_json,
)
from airflow_provider_workflowsvc.storage import StagedObject

if TYPE_CHECKING:
    pass


class Endpoints:
    """
    Every endpoint of the spec, once; a hook class that defines ``_send`` gets one method per endpoint.

    A hook class's ``_send`` decides the methods' kind: coroutine functions for an async ``_send``.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        send = inspect.getattr_static(cls, "_send", None)
        if send is None:
            return
        asynchronous = inspect.iscoroutinefunction(send)
        for each in ENDPOINTS:  # a subclass keeps the methods it inherits or defines
            if isinstance(inspect.getattr_static(cls, each.name), Endpoint):
                setattr(cls, each.name, each.method(cls, asynchronous))

    # -- sources ------------------------------------------------------------------------------------

    @Endpoint
    def list_sources(source_type: SourceType | str | None = None) -> ApiCall[list[SourceConnector]]:
        """List source connectors, optionally only those of one type."""
        params = None if source_type is None else {"source_type": _connector_type("source", source_type)}
        return ApiCall("GET", "/sources/", list_parser(SourceConnector), params=params)

    @Endpoint
    def get_source(source_id: str | UUID) -> ApiCall[SourceConnector]:
        """Fetch one source connector."""
        return ApiCall("GET", _connector("source", source_id), parser(SourceConnector))

    @Endpoint
    def create_source(
        name: str, type: SourceType | str, config: Mapping[str, Any] | Any
    ) -> ApiCall[SourceConnector]:
        """Create a source connector (config is a typed config model or a dict)."""
        fields = {"name": name, "type": type, "config": config}
        return _creation("/sources/", CreateSourceConnector, "source connector", fields, SourceConnector)

    @Endpoint
    def update_source(
        source_id: str | UUID, config: Mapping[str, Any] | Any, source_type: SourceType | str | None = None
    ) -> ApiCall[SourceConnector]:
        """Replace a source connector's config (every setting must be sent, changed or not)."""
        body = _update_connector("source", source_type, config)
        return ApiCall(
            "PUT", _connector("source", source_id), parser(SourceConnector), json=request_json(body)
        )

    @Endpoint
    def delete_source(source_id: str | UUID) -> ApiCall[None]:
        """Delete a source connector."""
        return _deletion(_connector("source", source_id))

    @Endpoint
    def start_source_connection_check(source_id: str | UUID) -> ApiCall[ConnectionCheck]:
        """
        Start a connectivity test of a source connector.

        Read its outcome with ``get_source_connection_check``.
        """
        return ApiCall("POST", _connector("source", source_id, "/connection-check"), parse_check_started)

    @Endpoint
    def get_source_connection_check(source_id: str | UUID) -> ApiCall[ConnectionCheck]:
        """Fetch the most recent connectivity test of a source connector."""
        return ApiCall("GET", _connector("source", source_id, "/connection-check"), parser(ConnectionCheck))

    # -- destinations -------------------------------------------------------------------------------

    @Endpoint
    def list_destinations(
        destination_type: DestinationType | str | None = None,
    ) -> ApiCall[list[DestinationConnector]]:
        """List destination connectors, optionally only those of one type."""
        kind = None if destination_type is None else _connector_type("destination", destination_type)
        params = None if kind is None else {"destination_type": kind}
        return ApiCall("GET", "/destinations/", list_parser(DestinationConnector), params=params)

    @Endpoint
    def get_destination(destination_id: str | UUID) -> ApiCall[DestinationConnector]:
        """Fetch one destination connector."""
        return ApiCall("GET", _connector("destination", destination_id), parser(DestinationConnector))

    @Endpoint
    def create_destination(
        name: str, type: DestinationType | str, config: Mapping[str, Any] | Any
    ) -> ApiCall[DestinationConnector]:
        """Create a destination connector (config is a typed config model or a dict)."""
        fields = {"name": name, "type": type, "config": config}
        what = "destination connector"
        return _creation("/destinations/", CreateDestinationConnector, what, fields, DestinationConnector)

    @Endpoint
    def update_destination(
        destination_id: str | UUID,
        config: Mapping[str, Any] | Any,
        destination_type: DestinationType | str | None = None,
    ) -> ApiCall[DestinationConnector]:
        """Replace a destination connector's config (every setting must be sent, changed or not)."""
        body = _update_connector("destination", destination_type, config)
        path = _connector("destination", destination_id)
        return ApiCall("PUT", path, parser(DestinationConnector), json=request_json(body))

    @Endpoint
    def delete_destination(destination_id: str | UUID) -> ApiCall[None]:
        """Delete a destination connector."""
        return _deletion(_connector("destination", destination_id))

    @Endpoint
    def start_destination_connection_check(destination_id: str | UUID) -> ApiCall[ConnectionCheck]:
        """
        Start a connectivity test of a destination connector.

        Read its outcome with ``get_destination_connection_check``.
        """
        path = _connector("destination", destination_id, "/connection-check")
        return ApiCall("POST", path, parse_check_started)

    @Endpoint
    def get_destination_connection_check(destination_id: str | UUID) -> ApiCall[ConnectionCheck]:
        """Fetch the most recent connectivity test of a destination connector."""
        path = _connector("destination", destination_id, "/connection-check")
        return ApiCall("GET", path, parser(ConnectionCheck))

    # -- workflows ----------------------------------------------------------------------------------

    @Endpoint
    def create_workflow(
        name: str,
        workflow_type: str,
        *,
        source_id: str | UUID | None = None,
        destination_id: str | UUID | None = None,
        workflow_nodes: list[Any] | None = None,
        schedule: str | None = None,
        reprocess_all: bool | None = None,
        template_id: str | None = None,
    ) -> ApiCall[Workflow]:
        """
        Create a workflow; ``schedule`` is one of the spec's values (``every hour``, ``daily``, ...);
        ``template_id`` (the live service's) builds it from a workflow template.
        """
        fields = {
            "name": name,
            "workflow_type": workflow_type,
            "source_id": source_id,
            "destination_id": destination_id,
            "workflow_nodes": workflow_nodes,
            "schedule": schedule,
            "reprocess_all": reprocess_all,
            "template_id": template_id,
        }
        given = {k: v for k, v in fields.items() if v is not None}
        return _creation("/workflows/", CreateWorkflow, "workflow", given, Workflow)

    @Endpoint
    def list_workflows(**params: Any) -> ApiCall[list[Workflow]]:
        """List one page of workflows; every query parameter of the spec is accepted by name."""
        query = validate_input(ListWorkflowsParams, "list_workflows parameters", params).query()
        return ApiCall("GET", "/workflows/", list_parser(Workflow), params=query)

    @Endpoint
    def get_workflow(workflow_id: str | UUID) -> ApiCall[Workflow]:
        """Fetch one workflow."""
        return ApiCall("GET", f"/workflows/{_uuid(workflow_id, 'workflow_id')}", parser(Workflow))

    @Endpoint
    def update_workflow(workflow_id: str | UUID, **fields: Any) -> ApiCall[Workflow]:
        """Change a workflow's settings; only the fields given are sent."""
        body = validate_input(UpdateWorkflow, "workflow update", fields)
        path = f"/workflows/{_uuid(workflow_id, 'workflow_id')}"
        return ApiCall("PUT", path, parser(Workflow), json=request_json(body))

    @Endpoint
    def delete_workflow(workflow_id: str | UUID) -> ApiCall[None]:
        """Delete a workflow."""
        return _deletion(f"/workflows/{_uuid(workflow_id, 'workflow_id')}")

    @Endpoint
    def run_workflow(
        workflow_id: str | UUID, files: Iterable[LocalFile] | str | os.PathLike[str] | None = None
    ) -> ApiCall[Job | None]:
        """
        Run a workflow once: no body, or one streamed ``input_files`` part per local file (a path, or
        ``(path, name)`` to send it under another name).

        Returns the created job when the server answers with one. Never retried once it may have reached
        the server, so a run is never duplicated by a retry.
        """
        path = f"/workflows/{_uuid(workflow_id, 'workflow_id')}/run"
        uploads = upload_files(files) if files is not None else ()
        return ApiCall("POST", path, parse_run_result, files=uploads, retry="unsent-only")

    # -- jobs ---------------------------------------------------------------------------------------

    @Endpoint
    def list_jobs(
        workflow_id: str | UUID | None = None,
        status: JobStatus | str | None = None,
        created_since: datetime | None = None,
    ) -> ApiCall[list[Job]]:
        """
        List jobs, optionally of one workflow and/or in one status (both filters combine).

        ``status`` is sent as the service spells statuses (``im progress`` in the spec's listing,
        ``IN_PROGRESS`` in the platform's), learnt from the job records it sent; until one showed it,
        the platform's spelling is sent first, then the spec's when that finds nothing. A status given
        as text in one dialect's exact spelling is sent as written.

        ``created_since`` keeps only the jobs created at or after it (a date-time without a zone is UTC),
        and jobs without a readable ``created_at``. The service has no such filter: the answer is read item
        by item as it arrives, the others are dropped unread, and once the service's listings have shown
        they come newest first, reading stops past the jobs asked for (:mod:`._listing`).
        """
        params: dict[str, str] = {}
        status_filter = None
        if workflow_id is not None:
            params["workflow_id"] = _uuid(workflow_id, "workflow_id")
        if status is not None:
            parsed = _enum(JobStatus, status, "job status")
            if parsed not in LISTED_JOB_STATUSES:
                listed = ", ".join(s.name.lower() for s in LISTED_JOB_STATUSES)
                raise WorkflowServiceInputError(
                    f"no job is listed in status {status!r}: expected one of {listed} "
                    "(either dialect's spelling)"
                )
            if not isinstance(status, JobStatus) and status in (parsed.wire_value, parsed.platform_value):
                params["status"] = str(status)
            else:
                status_filter = parsed
        since = _moment(created_since, "created_since")
        return ApiCall(
            "GET",
            "/jobs/",
            list_parser(Job),
            params=params or None,
            status_filter=status_filter,
            job_listing=True,
            created_since=since,
        )

    @Endpoint
    def get_job(job_id: str) -> ApiCall[Job]:
        """Fetch one job."""
        return ApiCall("GET", f"/jobs/{_job_id(job_id)}", parser(Job))

    @Endpoint
    def get_job_details(job_id: str) -> ApiCall[JobDetails]:
        """Fetch a job's processing status, message and per-node file counts."""
        return ApiCall("GET", f"/jobs/{_job_id(job_id)}/details", parser(JobDetails))

    @Endpoint
    def get_job_failed_files(job_id: str) -> ApiCall[JobFailedFiles]:
        """Fetch the files a job failed to process, each with its error."""
        return ApiCall("GET", f"/jobs/{_job_id(job_id)}/failed-files", parser(JobFailedFiles))

    @Endpoint
    def cancel_job(job_id: str) -> ApiCall[None]:
        """Ask the service to stop a running job (cancelling twice is harmless, so it is retried)."""
        return ApiCall("POST", f"/jobs/{_job_id(job_id)}/cancel", ignore_body, wants_body=False)

    @Endpoint
    def download_job_output(
        job_id: str,
        file_id: str,
        node_id: str | None = None,
        path: str | os.PathLike[str] | StagedObject | None = None,
    ) -> ApiCall[list[Element] | Path]:
        """
        Download one output of a local-to-local job: parsed elements, or streamed to ``path`` when given.

        Without ``node_id`` the service chooses the node (the live service: the last node's output; the
        spec requires one). A file written to ``path`` appears only once complete (written beside it,
        then renamed).
        """
        params = _output_params(file_id, node_id)
        target = download_target(path)
        if isinstance(target, Path) and target.is_dir():
            raise WorkflowServiceInputError(f"download path {str(target)!r} is a directory; give a file path")
        path_of = f"/jobs/{_job_id(job_id)}/download"
        return ApiCall("GET", path_of, parser(list[Element]), params=params, download_to=target)

    @Endpoint
    def get_output_document(job_id: str, file_id: str, node_id: str | None = None) -> ApiCall[str | None]:
        """
        Read the name of the document one output of a job was made from (the download, its first
        ``OUTPUT_HEAD_BYTES`` only); None when the output names none. A reading of the download endpoint.
        """
        path = f"/jobs/{_job_id(job_id)}/download"
        params = _output_params(file_id, node_id)
        return ApiCall("GET", path, document_name_in, params=params, head_bytes=OUTPUT_HEAD_BYTES)

    # -- templates and on-demand jobs (the live service's; the spec has none) ----------------------

    @Endpoint
    def list_templates() -> ApiCall[list[TemplateListItem]]:
        """List the service's workflow templates (the live service's; the spec dialect has none)."""
        return ApiCall("GET", "/templates/", list_parser(TemplateListItem))

    @Endpoint
    def get_template(template_id: str) -> ApiCall[TemplateDetail]:
        """Fetch one workflow template with its nodes (``hi_res_partition``, ...)."""
        path = f"/templates/{_path_id(template_id, 'template_id')}"
        return ApiCall("GET", path, parser(TemplateDetail))

    @Endpoint
    def create_job(
        *,
        template_id: str | None = None,
        job_nodes: list[Any] | None = None,
        files: Iterable[LocalFile] | str | os.PathLike[str] | None = None,
    ) -> ApiCall[Job | None]:
        """
        Launch an on-demand job: local ``files`` (as a run takes them) processed by a template
        (``template_id``) or by the nodes given (``job_nodes``, a custom workflow's nodes), with no
        workflow to create. The service answers with the job; its temporary workflow is not listed.

        Sent as the service's SDK sends it: a ``request_data`` text part holding the JSON of the
        template id or the nodes, and one ``input_files[]`` part per file. Never retried once it may
        have reached the server, so a job is never launched twice by a retry.
        """
        fields = {"template_id": template_id, "job_nodes": job_nodes}
        body = validate_input(CreateJob, "on-demand job", {k: v for k, v in fields.items() if v is not None})
        uploads = upload_files(files) if files is not None else ()
        form = {"request_data": json.dumps(request_json(body))}
        return ApiCall(
            "POST",
            "/jobs/",
            parse_run_result,
            files=uploads,
            files_part="input_files[]",
            form=form,
            retry="unsent-only",
        )

    # -- job events (the live service's; the spec has none) -----------------------------------------

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


ENDPOINTS: tuple[Endpoint[Any, Any], ...] = tuple(
    value for value in vars(Endpoints).values() if isinstance(value, Endpoint)
)
"""Every endpoint of the spec, in the order declared: each hook has one method of its name per endpoint."""
