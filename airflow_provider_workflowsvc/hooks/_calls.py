"""
Every endpoint of the Workflow Service, once: a builder that checks its arguments and returns an
:class:`~._exchange.ApiCall`; each hook gets a real method of its name, signature and docstring.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
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
    CreateDestinationConnector,
    CreateJob,
    CreateSourceConnector,
    CreateWorkflow,
    DestinationConnector,
    DestinationType,
    Element,
    Job,
    JobDetails,
    JobFailedFiles,
    JobStatus,
    ListWorkflowsParams,
    SourceConnector,
    SourceType,
    TemplateDetail,
    TemplateListItem,
    UpdateConnector,
    UpdateWorkflow,
    Workflow,
    as_utc,
    connector_type_name,
    parse_connector_type,
    request_json,
)
from airflow_provider_workflowsvc.storage import StagedObject

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

P = ParamSpec("P")
T = TypeVar("T")
Kind = Literal["source", "destination"]


class Endpoint(Generic[P, T]):
    """One endpoint's builder; on a hook, a method returning ``T`` (sync) or an awaitable of ``T`` (async)."""

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
        """
        Return ``owner``'s method that builds this endpoint's call and sends it with ``owner._send`` (async:
        in a task of its own, whose suspensions resume only its frames), named, typed and documented as it.
        """
        endpoint, name = self, self.name

        def send(hook: Any, *args: Any, **kwargs: Any) -> Any:
            return hook._send(endpoint.build(*args, **kwargs), operation=name)

        async def send_async(hook: Any, *args: Any, **kwargs: Any) -> Any:
            return await asyncio.ensure_future(hook._send(endpoint.build(*args, **kwargs), operation=name))

        method: Callable[..., Any] = send_async if asynchronous else send
        qualname = f"{owner.__qualname__}.{self.name}"
        if sys.version_info >= (3, 11):  # a traceback names the endpoint
            method.__code__ = method.__code__.replace(co_name=self.name, co_qualname=qualname)
        else:  # pragma: no cover - Python 3.10
            method.__code__ = method.__code__.replace(co_name=self.name)
        signature = inspect.signature(self.build)
        answer = str(self.build.__annotations__["return"]).removeprefix("ApiCall[").removesuffix("]")
        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        method.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_parameter, *signature.parameters.values()], return_annotation=answer
        )
        hints = typing.get_type_hints(self.build)  # resolved here: the method's own module lacks the names
        method.__annotations__ = {**hints, "return": typing.get_args(hints["return"])[0]}
        method.__name__, method.__qualname__, method.__module__ = self.name, qualname, owner.__module__
        method.__doc__ = self.build.__doc__
        return method


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


def _given(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _connector_type(kind: Kind, value: Any) -> str:
    """Return a connector type's wire name; one the provider does not know passes with a warning."""
    try:
        return connector_type_name(parse_connector_type(kind, value))
    except ValueError as exc:
        raise WorkflowServiceInputError(str(exc)) from None


# --------------------------------------------------------------------------------------------------
# The shapes several endpoints share

_CONNECTORS: dict[str, Any] = {"source": SourceConnector, "destination": DestinationConnector}


def _connector(kind: Kind, connector_id: str | UUID, below: str = "") -> str:
    return f"/{kind}s/{_uuid(connector_id, f'{kind}_id')}{below}"


def _connector_list(kind: Kind, connector_type: Any) -> ApiCall[Any]:
    params = None if connector_type is None else {f"{kind}_type": _connector_type(kind, connector_type)}
    return ApiCall("GET", f"/{kind}s/", list_parser(_CONNECTORS[kind]), params=params)


def _connector_update(kind: Kind, connector_id: str | UUID, config: Any, connector_type: Any) -> ApiCall[Any]:
    if connector_type is not None:
        connector_type = _connector_type(kind, connector_type)
    try:
        body = UpdateConnector.for_type(kind, connector_type, config)
    except ValidationError as exc:
        details = format_validation_errors(exc.errors(include_input=False, include_url=False))
        raise WorkflowServiceInputError(f"invalid {kind} connector config: {details}") from None
    path = _connector(kind, connector_id)
    return ApiCall("PUT", path, parser(_CONNECTORS[kind]), json=request_json(body))


def _connection_check(kind: Kind, connector_id: str | UUID, start: bool) -> ApiCall[ConnectionCheck]:
    path = _connector(kind, connector_id, "/connection-check")
    return ApiCall(
        "POST" if start else "GET", path, parse_check_started if start else parser(ConnectionCheck)
    )


def _creation(path: str, model: Any, what: str, fields: Mapping[str, Any], answer: Any) -> ApiCall[Any]:
    """Return a create call: ``fields`` checked as ``model``, never retried once it may have been sent."""
    body = validate_input(model, what, fields)
    return ApiCall("POST", path, parser(answer), json=request_json(body), retry="unsent-only")


def _deletion(path: str) -> ApiCall[None]:
    return ApiCall("DELETE", path, ignore_body)


# --------------------------------------------------------------------------------------------------
# The endpoints


def _output_params(file_id: str, node_id: str | None) -> dict[str, str]:
    params = {"file_id": _non_empty(file_id, "file_id")}
    if node_id is not None:
        params["node_id"] = _non_empty(node_id, "node_id")
    return params


class Endpoints:
    """Every endpoint of the spec, once; a class defining ``_send`` gets a method per endpoint."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        send = inspect.getattr_static(cls, "_send", None)
        if send is None:
            return
        asynchronous = inspect.iscoroutinefunction(send)
        for each in endpoints_of(cls):  # a subclass keeps the methods it inherits or defines
            if isinstance(inspect.getattr_static(cls, each.name), Endpoint):
                setattr(cls, each.name, each.method(cls, asynchronous))

    # -- sources ------------------------------------------------------------------------------------

    @Endpoint
    def list_sources(source_type: SourceType | str | None = None) -> ApiCall[list[SourceConnector]]:
        """List source connectors, optionally only those of one type."""
        return _connector_list("source", source_type)

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
        return _connector_update("source", source_id, config, source_type)

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
        return _connection_check("source", source_id, start=True)

    @Endpoint
    def get_source_connection_check(source_id: str | UUID) -> ApiCall[ConnectionCheck]:
        """Fetch the most recent connectivity test of a source connector."""
        return _connection_check("source", source_id, start=False)

    # -- destinations -------------------------------------------------------------------------------

    @Endpoint
    def list_destinations(
        destination_type: DestinationType | str | None = None,
    ) -> ApiCall[list[DestinationConnector]]:
        """List destination connectors, optionally only those of one type."""
        return _connector_list("destination", destination_type)

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
        return _connector_update("destination", destination_id, config, destination_type)

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
        return _connection_check("destination", destination_id, start=True)

    @Endpoint
    def get_destination_connection_check(destination_id: str | UUID) -> ApiCall[ConnectionCheck]:
        """Fetch the most recent connectivity test of a destination connector."""
        return _connection_check("destination", destination_id, start=False)

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
        return _creation("/workflows/", CreateWorkflow, "workflow", _given(fields), Workflow)

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

        ``status`` is sent as the service spells statuses (``im progress``, ``IN_PROGRESS``: learnt from
        its job records; text in one dialect's exact spelling is sent as written). ``created_since`` keeps
        only the jobs created at or after it (no zone: UTC) and undated ones, read as the answer arrives.
        """
        params: dict[str, str] = {}
        status_filter = None
        if workflow_id is not None:
            params["workflow_id"] = _uuid(workflow_id, "workflow_id")
        if status is not None:
            parsed = JobStatus(status)  # tolerant: any other word is UNKNOWN, which no listing shows
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
        return ApiCall("GET", f"/jobs/{_path_id(job_id, 'job_id')}", parser(Job))

    @Endpoint
    def get_job_details(job_id: str) -> ApiCall[JobDetails]:
        """Fetch a job's processing status, message and per-node file counts."""
        return ApiCall("GET", f"/jobs/{_path_id(job_id, 'job_id')}/details", parser(JobDetails))

    @Endpoint
    def get_job_failed_files(job_id: str) -> ApiCall[JobFailedFiles]:
        """Fetch the files a job failed to process, each with its error."""
        return ApiCall("GET", f"/jobs/{_path_id(job_id, 'job_id')}/failed-files", parser(JobFailedFiles))

    @Endpoint
    def cancel_job(job_id: str) -> ApiCall[None]:
        """Ask the service to stop a running job (cancelling twice is harmless, so it is retried)."""
        return ApiCall("POST", f"/jobs/{_path_id(job_id, 'job_id')}/cancel", ignore_body)

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
        path_of = f"/jobs/{_path_id(job_id, 'job_id')}/download"
        return ApiCall("GET", path_of, parser(list[Element]), params=params, download_to=target)

    @Endpoint
    def get_output_document(job_id: str, file_id: str, node_id: str | None = None) -> ApiCall[str | None]:
        """
        Read the name of the document one output of a job was made from (the download, its first
        ``OUTPUT_HEAD_BYTES`` only); None when the output names none. A reading of the download endpoint.
        """
        path = f"/jobs/{_path_id(job_id, 'job_id')}/download"
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

        Sent as the service's SDK sends it (``request_data``, ``input_files[]``). Never retried once it may
        have reached the server, so a job is never launched twice by a retry.
        """
        fields = {"template_id": template_id, "job_nodes": job_nodes}
        body = validate_input(CreateJob, "on-demand job", _given(fields))
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


def endpoints_of(cls: type) -> tuple[Endpoint[Any, Any], ...]:
    """Every endpoint ``cls`` declares or inherits, in the order declared (base classes' first)."""
    found = (v for klass in reversed(cls.__mro__) for v in vars(klass).values() if isinstance(v, Endpoint))
    return tuple(found)
