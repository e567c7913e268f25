"""
The emulated Workflow Service: connectors, workflows, jobs, on-demand jobs, connection checks, schedules.

Every method takes already-parsed arguments, reads and writes the :class:`Store`, and returns JSON-ready
data shaped by the emulator's own models (``schema.py``) and spelled as its dialect says, or raises
:class:`ApiError` / :class:`InvalidRequest`.
"""

from __future__ import annotations

import fnmatch
import json
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO, Literal, get_args

from croniter import croniter
from pydantic import ValidationError

from airflow_provider_workflowsvc.emulator.clock import Clock, to_datetime
from airflow_provider_workflowsvc.emulator.config import EmulatorConfig
from airflow_provider_workflowsvc.emulator.dialect import (
    DIALECTS,
    Dialect,
    JobSpelling,
    check_status,
    connector_types,
    details_status,
    job_status,
)
from airflow_provider_workflowsvc.emulator.errors import ApiError, InvalidRequest
from airflow_provider_workflowsvc.emulator.jobs import JobFile, JobNode, JobRecord
from airflow_provider_workflowsvc.emulator.limits import (
    LaunchBook,
    admit,
    check_file_limits,
    check_launch_gap,
    check_quota,
)
from airflow_provider_workflowsvc.emulator.masking import looks_like_credential, mask_config
from airflow_provider_workflowsvc.emulator.nodes import run_nodes
from airflow_provider_workflowsvc.emulator.partition import PartitionError, make_elements, partition
from airflow_provider_workflowsvc.emulator.remote import remote_documents
from airflow_provider_workflowsvc.emulator.schema import (
    SCHEDULE_CRON,
    ConnectionCheck,
    Connector,
    CreateWorkflow,
    CronTabEntry,
    FailedFile,
    Job,
    JobDetails,
    JobFailedFiles,
    JobState,
    ListWorkflowsParams,
    NodeStats,
    OnDemandJobRequest,
    OutputNodeFile,
    UpdateWorkflow,
    Workflow,
    WorkflowNode,
    WorkflowSchedule,
    canonical,
    typed_config_model,
)
from airflow_provider_workflowsvc.emulator.store import Store
from airflow_provider_workflowsvc.emulator.templates import TEMPLATES

__all__ = ["Kind", "Service", "Upload"]

Kind = Literal["source", "destination"]

_NAMESPACE = uuid.UUID("0d3f8c7e-5b1a-4f7e-9c51-6f2d8a9e4b10")
_CONNECTOR_FIELDS = frozenset({"name", "type", "config"})
_SORT_FIELDS = frozenset({"id", "name", "created_at", "updated_at", "status", "workflow_type"})
MAX_SCHEDULED_JOBS_PER_CHECK = 50
JOB_CACHE_SIZE = 20_000
MAX_PROCESSED_FILE_BYTES = 64 * 1024 * 1024
"""Larger uploads fail (as files of the job) without being read into memory."""
_DEFAULT_NODES: dict[str, tuple[tuple[str, str, str], ...]] = {
    kind: (
        ("Partitioner", "partition", strategy),
        ("Chunker", "chunk", "chunk_by_title"),
        ("Embedder", "embed", "text-embedding-3-small"),
    )
    for kind, strategy in (("basic", "fast"), ("advanced", "hi_res"), ("platinum", "vlm"))
}
_STATUS_FILTER_ALIASES = {
    "running": JobState.IN_PROGRESS,
    "cancelled": JobState.STOPPED,
    "canceled": JobState.STOPPED,
    "succeeded": JobState.COMPLETED,
    "success": JobState.COMPLETED,
}
_NO_SCHEDULED_INPUT = (
    "No input files: this workflow has a local source, which takes its files from an on-demand run "
    "(multipart input_files); a scheduled run has none."
)
_NO_ON_DEMAND_INPUT = (
    "No input files: an on-demand job processes the files sent with it (multipart input_files); "
    "this one had none."
)


@dataclass(frozen=True)
class Upload:
    """One ``input_files`` part of a run request; its content stays in a (disk-spooled) file until read."""

    filename: str
    media_type: str | None
    file: BinaryIO
    size: int

    def content(self) -> bytes:
        """Return the whole content, read only when it is small enough to process."""
        if self.size > MAX_PROCESSED_FILE_BYTES:
            raise PartitionError(
                f"file too large for the emulator: {self.size / 2**20:.1f} MiB, at most "
                f"{MAX_PROCESSED_FILE_BYTES // 2**20} MiB are processed per file"
            )
        self.file.seek(0)
        return self.file.read(MAX_PROCESSED_FILE_BYTES + 1)


def _label(kind: Kind) -> str:
    return f"{kind} connector"


def _iso(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else to_datetime(timestamp)


def _timestamp(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()


def check_failure(config: Mapping[str, Any]) -> str | None:
    """
    Why a connection check of this (revealed) config fails, or None when it succeeds.

    A check fails when any config value contains ``fail-check``, or names a URL whose host is in the
    reserved ``.invalid`` domain. The reason names the field, never its value.
    """
    for key, value in _leaves(config, ""):
        if not isinstance(value, str):
            continue
        if "fail-check" in value.lower():
            if looks_like_credential(key.rsplit(".", 1)[-1]):
                return f"authentication failed: the credentials in config field '{key}' were rejected"
            return f"connection failed: the resource in config field '{key}' could not be reached"
        host = value.split("://", 1)[1].split("/", 1)[0].split(":", 1)[0].lower() if "://" in value else ""
        if host == "invalid" or host.endswith(".invalid"):
            return f"connection failed: the host in config field '{key}' could not be resolved"
    return None


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, path)
    else:
        yield path, value


class Service:
    """The state and rules of the emulated service."""

    def __init__(self, store: Store, clock: Clock, config: EmulatorConfig, dialect: Dialect = "spec") -> None:
        self.store, self.clock, self.config, self.dialect = store, clock, config, dialect
        self._next_due: float | None = None
        self._jobs: dict[str, JobRecord] = {}
        self.launches = LaunchBook(store)

    def reset(self) -> None:
        """Forget every connector, workflow, job and check; clock back to real time."""
        self.store.clear()
        self._jobs.clear()
        self.launches.load()
        self.clock.offset = 0.0
        self._next_due = None

    def apply_config(self, config: EmulatorConfig) -> None:
        """Change the run-time settings; the on-demand queue is settled under the old ones until now."""
        now = self.clock.time()
        self._admit_on_demand(now)
        self.launches.settled_at = now
        self.config = config

    def advance_clock(self, seconds: float) -> int:
        """Move emulator time forward and fire the schedules that fall due; the number of jobs created."""
        self.clock.advance(seconds)
        self.store.set_meta("clock_offset", repr(self.clock.offset))
        return self.fire_due_schedules()

    # -- connectors ------------------------------------------------------------------------------

    def list_connectors(self, kind: Kind, connector_type: str | None) -> list[dict[str, Any]]:
        rows = self.store.all("connectors", kind=kind)
        if connector_type is not None:
            wanted = self._connector_type(kind, connector_type, ("query", f"{kind}_type"))
            rows = [r for r in rows if r["type"] == wanted]
        return [self._connector_json(kind, r) for r in sorted(rows, key=lambda r: (r["created_at"], r["id"]))]

    def get_connector(self, kind: Kind, connector_id: str) -> dict[str, Any]:
        return self._connector_json(kind, self._connector(kind, connector_id))

    def create_connector(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        name, connector_type, config = self._create_connector_request(kind, body)
        self._unique_connector_name(kind, name)
        now, connector_id = self.clock.time(), str(uuid.uuid4())
        row = {
            "id": connector_id,
            "kind": kind,
            "name": name,
            "type": connector_type,
            "created_at": now,
            "updated_at": None,
            **self._stored_config(kind, connector_type, config),
        }
        self.store.put("connectors", connector_id, row, kind=kind)
        return self._connector_json(kind, row)

    def update_connector(self, kind: Kind, connector_id: str, body: dict[str, Any]) -> dict[str, Any]:
        row = self._connector(kind, connector_id)
        errors = [
            {"loc": ["body", key], "msg": f"{key} cannot be changed", "type": "value_error"}
            for key in ("name", "type")
            if key in body and body[key] != row[key]
        ]
        errors += self._unknown_fields(body, {"name", "type", "config"})
        config = self._validated_config(kind, row["type"], body, errors)
        if errors or config is None:
            raise InvalidRequest(errors)
        row.update(self._stored_config(kind, row["type"], config), updated_at=self.clock.time())
        self.store.put("connectors", connector_id, row, kind=kind)
        return self._connector_json(kind, row)

    def delete_connector(self, kind: Kind, connector_id: str) -> dict[str, Any]:
        self._connector(kind, connector_id)
        users = [w["id"] for w in self._workflows() if w[f"{kind}_id"] == connector_id]
        if users:
            raise ApiError(
                409,
                f"{_label(kind)} {connector_id} is used by workflow(s) {', '.join(users)}; "
                "delete those workflows or change their connector first",
            )
        self.store.delete("connectors", connector_id)
        self.store.delete("checks", connector_id)
        return {"detail": f"{_label(kind)} {connector_id} deleted"}

    def start_connection_check(self, kind: Kind, connector_id: str) -> dict[str, Any]:
        row = self._connector(kind, connector_id)
        now = self.clock.time()
        check = {
            "id": str(uuid.uuid4()),
            "created_at": now,
            "resolve_at": now + self.config.connection_check_delay,
            "failure": row.get("check_failure"),
        }
        self.store.put("checks", connector_id, check)
        return self._check_json(check)

    def get_connection_check(self, kind: Kind, connector_id: str) -> dict[str, Any]:
        self._connector(kind, connector_id)
        check = self.store.get("checks", connector_id)
        if check is None:
            raise ApiError(404, f"no connection check has been run for {_label(kind)} {connector_id}")
        return self._check_json(check)

    def _connector(self, kind: Kind, connector_id: str) -> dict[str, Any]:
        row = self.store.get("connectors", connector_id)
        if row is None or row["kind"] != kind:
            raise ApiError(404, f"{_label(kind)} {connector_id} not found")
        return row

    def _connector_json(self, kind: Kind, row: dict[str, Any]) -> dict[str, Any]:
        return Connector(
            id=row["id"],
            name=row["name"],
            type=row["type"],
            config=row["config"],
            created_at=to_datetime(row["created_at"]),
            updated_at=_iso(row["updated_at"]),
        ).model_dump(mode="json")

    def _check_json(self, check: dict[str, Any]) -> dict[str, Any]:
        resolved = self.clock.time() >= check["resolve_at"]
        return ConnectionCheck(
            id=check["id"],
            status=check_status(resolved, check["failure"], self.dialect),
            reason=check["failure"] if resolved else None,
            created_at=to_datetime(check["created_at"]),
            reported_at=_iso(check["resolve_at"]) if resolved else None,
        ).model_dump(mode="json")

    def _connector_type(self, kind: Kind, value: Any, loc: tuple[str, ...]) -> str:
        try:
            return canonical(value, connector_types(kind, self.dialect), f"{_label(kind)} type")
        except ValueError as exc:
            raise InvalidRequest.one(loc, str(exc), "enum") from None

    def _create_connector_request(self, kind: Kind, body: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        """Return the name, type and validated config of a create request."""
        errors = self._unknown_fields(body, _CONNECTOR_FIELDS)
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            errors.append({"loc": ["body", "name"], "msg": "a non-empty name is required", "type": "missing"})
        connector_type = None
        if "type" not in body:
            errors.append({"loc": ["body", "type"], "msg": "Field required", "type": "missing"})
        else:
            try:
                connector_type = self._connector_type(kind, body["type"], ("body", "type"))
            except InvalidRequest as exc:
                errors += exc.errors
        config = self._validated_config(kind, connector_type, body, errors) if connector_type else None
        if errors or config is None or connector_type is None or not isinstance(name, str):
            raise InvalidRequest(errors)
        return name.strip(), connector_type, config

    @staticmethod
    def _unknown_fields(body: Mapping[str, Any], allowed: Iterable[str]) -> list[dict[str, Any]]:
        return [
            {"loc": ["body", key], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
            for key in body
            if key not in set(allowed)
        ]

    @staticmethod
    def _validated_config(
        kind: Kind, connector_type: str, body: Mapping[str, Any], errors: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Return a request's config checked against its type's schema; None (and ``errors``) if invalid."""
        config = body.get("config")
        if "config" not in body:
            errors.append({"loc": ["body", "config"], "msg": "Field required", "type": "missing"})
            return None
        if not isinstance(config, Mapping):
            errors.append({"loc": ["body", "config"], "msg": "config must be an object", "type": "dict_type"})
            return None
        model = typed_config_model(kind, connector_type)
        if model is None:
            if not config:
                errors.append(
                    {"loc": ["body", "config"], "msg": "config must not be empty", "type": "value_error"}
                )
                return None
            return dict(config)
        try:
            return model.model_validate(config).model_dump(mode="json", exclude_none=True)
        except ValidationError as exc:
            errors += InvalidRequest.from_pydantic(exc, ("body", "config")).errors
            return None

    @staticmethod
    def _stored_config(kind: Kind, connector_type: str, config: dict[str, Any]) -> dict[str, Any]:
        """
        Return the config as responses show it (secrets masked) and the outcome of future checks.

        Secret values are never stored: only their check outcome is kept.
        """
        shown = mask_config(kind, connector_type, config)
        if connector_type == "astradb":
            shown.pop("flatten_metadata", None)
        return {"config": shown, "check_failure": check_failure(config)}

    def _unique_connector_name(self, kind: Kind, name: str) -> None:
        for row in self.store.all("connectors", kind=kind):
            if row["name"] == name:
                raise ApiError(409, f"a {_label(kind)} with this name already exists (id {row['id']})")

    # -- workflows -------------------------------------------------------------------------------

    def _workflows(self, deleted: bool = False) -> list[dict[str, Any]]:
        return [w for w in self.store.all("workflows") if bool(w["deleted_at"]) == deleted]

    def _workflow(self, workflow_id: str) -> dict[str, Any]:
        row = self.store.get("workflows", workflow_id)
        if row is None or row["deleted_at"]:
            raise ApiError(404, f"workflow {workflow_id} not found")
        return row

    def create_workflow(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            request = CreateWorkflow.model_validate(body)
        except ValidationError as exc:
            raise InvalidRequest.from_pydantic(exc, ("body",)) from None
        self._spec_has_no_template(request)
        self._check_references(request.source_id, request.destination_id)
        self._unique_workflow_name(request.name, None)
        now, workflow_id = self.clock.time(), str(uuid.uuid4())
        row = {
            "id": workflow_id,
            "name": request.name,
            "workflow_type": request.workflow_type,
            "source_id": str(request.source_id) if request.source_id else None,
            "destination_id": str(request.destination_id) if request.destination_id else None,
            # A template's own nodes are not known here: the emulator stands in a basic pipeline.
            "nodes": self._nodes(
                workflow_id,
                "basic" if request.template_id else request.workflow_type,
                request.workflow_nodes,
            ),
            "schedule": request.schedule,
            "schedule_anchor": now,
            "status": "active",
            "reprocess_all": bool(request.reprocess_all),
            "created_at": now,
            "updated_at": None,
            "deleted_at": None,
        }
        self.store.put("workflows", workflow_id, row)
        self._next_due = None
        return self._workflow_json(row)

    def get_workflow(self, workflow_id: str) -> dict[str, Any]:
        return self._workflow_json(self._workflow(workflow_id))

    def update_workflow(self, workflow_id: str, body: dict[str, Any]) -> dict[str, Any]:
        row = self._workflow(workflow_id)
        fields = dict(body)
        status = self._status_field(fields.pop("status", None))
        try:
            request = UpdateWorkflow.model_validate(fields) if fields else None
        except ValidationError as exc:
            raise InvalidRequest.from_pydantic(exc, ("body",)) from None
        if request is None and status is None:
            raise InvalidRequest.one(["body"], "a workflow update needs at least one field", "missing")
        if request is not None:
            self._spec_has_no_template(request)
        if request is not None:
            self._apply_update(row, request)
        if status is not None:
            row["status"] = status
        row["updated_at"] = self.clock.time()
        self.store.put("workflows", workflow_id, row)
        self._next_due = None
        return self._workflow_json(row)

    def _spec_has_no_template(self, request: CreateWorkflow | UpdateWorkflow) -> None:
        """Refuse a ``template_id`` in the spec dialect (the spec's workflows have none; the SDK's do)."""
        if self.dialect == "spec" and request.template_id is not None:
            raise InvalidRequest.one(
                ["body", "template_id"], "Extra inputs are not permitted", "extra_forbidden"
            )

    @staticmethod
    def _status_field(value: Any) -> str | None:
        if value is None:
            return None
        if value not in ("active", "inactive"):
            raise InvalidRequest.one(
                ["body", "status"], "Input should be 'active' or 'inactive'", "literal_error"
            )
        return str(value)

    def _apply_update(self, row: dict[str, Any], request: UpdateWorkflow) -> None:
        given = request.model_fields_set
        if "name" in given and request.name is not None:
            self._unique_workflow_name(request.name, row["id"])
            row["name"] = request.name
        for field in ("source_id", "destination_id"):
            if field in given:
                value = getattr(request, field)
                row[field] = str(value) if value else None
        self._check_references(row["source_id"], row["destination_id"])
        if "workflow_type" in given and request.workflow_type is not None:
            row["workflow_type"] = request.workflow_type
        if "workflow_nodes" in given or "workflow_type" in given:
            nodes = request.workflow_nodes if "workflow_nodes" in given else self._kept_nodes(row)
            if row["workflow_type"] == "custom" and not nodes:
                raise InvalidRequest.one(
                    ["body", "workflow_nodes"], "a custom workflow needs at least one node", "value_error"
                )
            row["nodes"] = self._nodes(row["id"], row["workflow_type"], nodes)
        if "schedule" in given:
            row["schedule"] = request.schedule
            row["schedule_anchor"] = self.clock.time()
        if "reprocess_all" in given:
            row["reprocess_all"] = bool(request.reprocess_all)

    @staticmethod
    def _kept_nodes(row: dict[str, Any]) -> list[WorkflowNode] | None:
        """Return the nodes a workflow keeps when its type changes: its own if now custom, else defaults."""
        if row["workflow_type"] != "custom":
            return None
        return [WorkflowNode.model_validate(n) for n in row["nodes"]] or None

    def delete_workflow(self, workflow_id: str) -> dict[str, Any]:
        row = self._workflow(workflow_id)
        row["deleted_at"] = self.clock.time()
        self.store.put("workflows", workflow_id, row)
        self._next_due = None
        return {"detail": f"workflow {workflow_id} deleted"}

    def list_workflows(self, query: Mapping[str, str]) -> list[dict[str, Any]]:
        known = {k: v for k, v in query.items() if k in ListWorkflowsParams.model_fields and v != ""}
        try:
            params = ListWorkflowsParams.model_validate(known)
        except ValidationError as exc:
            raise InvalidRequest.from_pydantic(exc, ("query",)) from None
        sort_by = params.sort_by
        if sort_by not in _SORT_FIELDS:
            raise InvalidRequest.one(
                ["query", "sort_by"], f"sort_by must be one of: {', '.join(sorted(_SORT_FIELDS))}", "enum"
            )
        rows = [w for w in self._workflows(bool(params.show_only_soft_deleted)) if _matches(w, params)]
        rows.sort(key=lambda w: _sort_key(w, sort_by), reverse=params.sort_direction == "desc")
        page, size = params.page, params.page_size
        return [self._workflow_json(w) for w in rows[(page - 1) * size : page * size]]

    def _check_references(self, source_id: Any, destination_id: Any) -> None:
        errors = []
        references: tuple[tuple[Kind, Any], ...] = (("source", source_id), ("destination", destination_id))
        for kind, value in references:
            if value is None:
                continue
            row = self.store.get("connectors", str(value))
            if row is None or row["kind"] != kind:
                errors.append(
                    {
                        "loc": ["body", f"{kind}_id"],
                        "msg": f"{_label(kind)} does not exist",
                        "type": "value_error",
                    }
                )
        if errors:
            raise InvalidRequest(errors)

    def _unique_workflow_name(self, name: str, own_id: str | None) -> None:
        for row in self._workflows():
            if row["name"] == name and row["id"] != own_id:
                raise ApiError(409, f"a workflow with this name already exists (id {row['id']})")

    @staticmethod
    def _nodes(
        workflow_id: str, workflow_type: str, given: list[WorkflowNode] | None
    ) -> list[dict[str, Any]]:
        if given:
            specs = [(n.name, n.type, n.subtype, n.settings or {}, n.id) for n in given]
        else:
            specs = [(name, t, sub, {}, None) for name, t, sub in _DEFAULT_NODES.get(workflow_type, ())]
        return [
            {
                "id": str(node_id or uuid.uuid5(_NAMESPACE, f"{workflow_id}/{index}/{name}")),
                "name": name,
                "type": node_type,
                "subtype": subtype,
                "settings": settings,
            }
            for index, (name, node_type, subtype, settings, node_id) in enumerate(specs)
        ]

    @staticmethod
    def _workflow_json(row: dict[str, Any]) -> dict[str, Any]:
        schedule = None
        if row["schedule"]:
            entry = CronTabEntry(cron_expression=SCHEDULE_CRON[row["schedule"]])
            schedule = WorkflowSchedule(crontab_entries=[entry])
        return Workflow(
            id=row["id"],
            name=row["name"],
            sources=[row["source_id"]] if row["source_id"] else [],
            destinations=[row["destination_id"]] if row["destination_id"] else [],
            workflow_type=row["workflow_type"],
            workflow_nodes=row["nodes"],
            schedule=schedule,
            status=row["status"],
            created_at=to_datetime(row["created_at"]),
            updated_at=_iso(row["updated_at"]),
            reprocess_all=row["reprocess_all"],
        ).model_dump(mode="json")

    # -- runs and jobs ---------------------------------------------------------------------------

    def run_workflow(self, workflow_id: str, uploads: list[Upload]) -> dict[str, Any]:
        row = self._workflow(workflow_id)
        local_source = row["source_id"] is None
        if local_source and not uploads:
            raise InvalidRequest.one(
                ["body", "input_files"],
                "this workflow has a local source: send at least one input_files part (multipart/form-data)",
                "missing",
            )
        if uploads and not local_source:
            raise InvalidRequest.one(
                ["body", "input_files"],
                "input files are accepted only by workflows with a local source; this one has a source "
                "connector, so the run request has no body",
                "value_error",
            )
        check_quota(self.config)
        job = self._start_job(row, self.clock.time(), uploads, scheduled=False)
        return self._job_json(job, "listing")

    # -- on-demand jobs (platform dialect) ----------------------------------------------------------

    def create_job(self, request_data: str | None, uploads: list[Upload]) -> dict[str, Any]:
        """
        Launch an on-demand job: the files through a template's nodes or nodes given inline, on a
        temporary workflow of its own. Checks, in order: the request (422), the file limits (422, 413),
        the quota (402), the launch gap (429); a refused request creates nothing.
        """
        request = self._on_demand_request(request_data)
        check_file_limits([(u.filename, u.size) for u in uploads], self.config)
        check_quota(self.config)
        now = self._now()
        check_launch_gap(self.launches.last_launch, now, self.config)
        job_id, workflow_id = str(uuid.uuid4()), str(uuid.uuid4())
        if request.template_id is not None:
            given = [n.model_dump() for n in TEMPLATES[request.template_id].nodes]
        else:
            given = self._nodes(workflow_id, "custom", request.job_nodes)
        nodes = [JobNode(n["id"], n["name"], n["type"], n["subtype"]) for n in given]
        files, outputs = self._process_uploads(job_id, uploads, given)
        job = JobRecord(
            id=job_id,
            workflow_id=workflow_id,
            workflow_name=f"job-{job_id[:8]}",
            created_at=now,
            delay=self.config.processing_delay,
            nodes=nodes,
            files=files,
            local_source=True,
            local_destination=True,
            empty_message=None if files else _NO_ON_DEMAND_INPUT,
            on_demand=True,
            template_id=request.template_id,
            stamp_offset=self.config.job_stamp_offset,
        )
        with self.store.transaction():
            self._save_job(job)
            self.store.put_outputs(job_id, outputs)
            self.launches.launched(job_id, now)
        self._admit_on_demand(now)
        return self._job_json(job, "listing", now)

    @staticmethod
    def _on_demand_request(raw: str | None) -> OnDemandJobRequest:
        """Return ``request_data`` read as JSON and validated; 422 naming what is wrong, never its value."""
        loc = ("body", "request_data")
        if raw is None:
            message = "Field required (a multipart/form-data part holding a JSON object)"
            raise InvalidRequest.one(loc, message, "missing")
        try:
            data = json.loads(raw)
        except ValueError:
            raise InvalidRequest.one(loc, "request_data is not valid JSON", "json_invalid") from None
        if not isinstance(data, dict):
            raise InvalidRequest.one(loc, "request_data must be a JSON object", "dict_type")
        try:
            request = OnDemandJobRequest.model_validate(data)
        except ValidationError as exc:
            raise InvalidRequest.from_pydantic(exc, loc) from None
        if request.template_id is not None and request.template_id not in TEMPLATES:
            raise InvalidRequest.one(
                (*loc, "template_id"), f"unknown template_id; expected one of: {', '.join(TEMPLATES)}", "enum"
            )
        return request

    def _now(self) -> float:
        """Emulator time, with the on-demand jobs admitted that the running cap lets in by then."""
        now = self.clock.time()
        self._admit_on_demand(now)
        return now

    def _admit_on_demand(self, now: float) -> None:
        if not self.launches.job_ids:
            return
        jobs = [self._job(job_id) for job_id in self.launches.job_ids]
        admitted, watched = admit(jobs, self.config.on_demand_max_running, now, self.launches.settled_at)
        for job in admitted:
            self._save_job(job)
        self.launches.keep([j.id for j in watched])

    def _start_job(
        self, workflow: dict[str, Any], at: float, uploads: list[Upload], *, scheduled: bool
    ) -> JobRecord:
        job_id = str(uuid.uuid4())
        local_destination = workflow["destination_id"] is None
        if workflow["source_id"] is None:
            files, outputs = self._process_uploads(job_id, uploads, workflow["nodes"])
        else:
            files, outputs = self._process_remote(job_id, workflow["source_id"], workflow["nodes"])
        detail = self.config.failure_detail
        if detail:
            files = [f if f.error is None else replace(f, error=f"{f.error}: {detail}") for f in files]
        job = JobRecord(
            id=job_id,
            workflow_id=workflow["id"],
            workflow_name=workflow["name"],
            created_at=at,
            delay=self.config.processing_delay,
            nodes=[JobNode(n["id"], n["name"], n["type"], n["subtype"]) for n in workflow["nodes"]],
            files=files,
            local_source=workflow["source_id"] is None,
            local_destination=local_destination,
            destination_id=workflow["destination_id"],
            empty_message=_NO_SCHEDULED_INPUT if workflow["source_id"] is None and not files else None,
            scheduled=scheduled,
            stamp_offset=self.config.job_stamp_offset,
            ending=self._ending(workflow["name"]),
        )
        with self.store.transaction():  # a destination connector's writes are kept too (destination_writes)
            self._save_job(job)
            self.store.put_outputs(job_id, outputs)
        return job

    @staticmethod
    def _file_id(job_id: str, index: int, name: str) -> str:
        return str(uuid.uuid5(_NAMESPACE, f"{job_id}/{index}/{name}"))

    def _ending(self, workflow_name: str) -> str | None:
        """Return the status a test chose for this workflow's new jobs (``job_endings``), or None."""
        for pattern, status in self.config.job_endings.items():
            if fnmatch.fnmatchcase(workflow_name, pattern):
                return status
        return None

    def _told_to_fail(self, name: str) -> str | None:
        """Return why a file of this name fails because a test said so (``failing_files``), or None."""
        for pattern in self.config.failing_files:
            if fnmatch.fnmatchcase(name, pattern):
                return f"document could not be processed (the emulator fails files named {pattern!r})"
        return None

    def _process_uploads(
        self, job_id: str, uploads: list[Upload], nodes: list[dict[str, Any]]
    ) -> tuple[list[JobFile], list[tuple[str, str]]]:
        files, outputs = [], []
        for index, upload in enumerate(uploads):
            file_id = self._file_id(job_id, index, upload.filename)
            told = self._told_to_fail(upload.filename)
            if told is not None:
                files.append(JobFile(upload.filename, file_id, told))
                continue
            try:
                elements = run_nodes(nodes, partition(upload.filename, upload.media_type, upload.content()))
            except PartitionError as exc:
                files.append(JobFile(upload.filename, file_id, str(exc)))
                continue
            files.append(JobFile(upload.filename, file_id))
            outputs.append((file_id, json.dumps(elements)))
        return files, outputs

    def _process_remote(
        self, job_id: str, source_id: str, nodes: list[dict[str, Any]]
    ) -> tuple[list[JobFile], list[tuple[str, str]]]:
        source = self.store.get("connectors", source_id)
        if source is None:
            raise ApiError(409, f"the workflow's source connector {source_id} no longer exists")
        files, outputs = [], []
        for index, doc in enumerate(remote_documents(source["type"], source["config"])):
            file_id = self._file_id(job_id, index, doc.name)
            error = doc.error or self._told_to_fail(doc.name)
            if error is None:
                try:
                    elements = make_elements(doc.name, doc.filetype, list(doc.blocks), doc.data_source)
                    outputs.append((file_id, json.dumps(run_nodes(nodes, elements))))
                except PartitionError as exc:
                    error = str(exc)
            files.append(JobFile(doc.name, file_id, error))
        return files, outputs

    def _job(self, job_id: str) -> JobRecord:
        job = self._jobs.get(job_id)
        if job is None:
            data = self.store.get("jobs", job_id)
            if data is None:
                raise ApiError(404, f"job {job_id} not found")
            job = self._cache_job(JobRecord.from_dict(data))
        return job

    def _cache_job(self, job: JobRecord) -> JobRecord:
        if len(self._jobs) >= JOB_CACHE_SIZE:
            del self._jobs[next(iter(self._jobs))]
        self._jobs[job.id] = job
        return job

    def _save_job(self, job: JobRecord) -> None:
        self.store.put("jobs", job.id, job.to_dict(), workflow_id=job.workflow_id, created=job.stamped_at)
        self._cache_job(job)

    def _job_json(self, job: JobRecord, spelling: JobSpelling, now: float | None = None) -> dict[str, Any]:
        now = self._now() if now is None else now
        data = Job(
            id=job.id,
            workflow_id=job.workflow_id,
            workflow_name=job.workflow_name,
            status=job_status(job.status(now), self.dialect, spelling),
            created_at=to_datetime(job.stamped_at),
            job_type=job.job_type,
            input_file_ids=[f.name for f in job.files],
            output_node_files=[
                OutputNodeFile(
                    file_id=file_id, node_id=node.id, node_type=node.type, node_subtype=node.subtype
                )
                for file_id, node in job.outputs(now)
            ],
        ).model_dump(mode="json")
        if self.config.clock_skew or self.config.timestamp_style != "iso":
            data["created_at"] = self._written_time(job.stamped_at)
        if self.dialect == "spec":  # the spec shows no more than these
            del data["job_type"], data["input_file_ids"]
            data["output_node_files"] = [
                {"file_id": f["file_id"], "node_id": f["node_id"]} for f in data["output_node_files"]
            ]
        return data

    def _written_time(self, at: float) -> str:
        """Write a job time as the configured service does (its clock skew, its timestamp style)."""
        config = self.config
        moment = to_datetime(at + config.clock_skew)
        if config.timestamp_style == "naive":
            local = moment + timedelta(hours=config.naive_zone_hours)
            return local.replace(tzinfo=None).isoformat()
        if config.timestamp_style == "postgres":
            return moment.strftime("%Y-%m-%d %H:%M:%S.%f+00")
        return moment.isoformat()

    def list_jobs(self, workflow_id: str | None, status: str | None) -> list[dict[str, Any]]:
        wanted = None if status is None else self._status_filter(status)
        rows = self.store.all("jobs", workflow_id=workflow_id) if workflow_id else self.store.all("jobs")
        now = self._now()
        if self.config.jobs_list_order == "newest-first":
            rows = list(reversed(rows))
        jobs = self._records(rows)
        listed = [j for j in jobs if wanted is None or j.status(now) is wanted]
        answer = [self._job_json(j, "listing", now) for j in listed[: self.config.jobs_list_cap]]
        if not self.config.jobs_list_file_ids:
            for item in answer:
                item.pop("input_file_ids", None)
        return answer

    def _status_filter(self, value: str) -> JobState:
        """Return the job state a ``status`` filter names, in any dialect's spelling."""
        spellings = {
            **_STATUS_FILTER_ALIASES,
            **{
                job_status(state, dialect, spelling): state
                for state in JobState
                for dialect in DIALECTS
                for spelling in get_args(JobSpelling)
            },
        }
        try:
            return spellings[canonical(value, tuple(spellings), "job status")]
        except ValueError:
            allowed = ", ".join(job_status(s, self.dialect, "listing") for s in JobState)
            raise InvalidRequest.one(
                ["query", "status"], f"unknown job status; expected one of: {allowed}", "enum"
            ) from None

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self._job_json(self._job(job_id), "record")

    def job_records(self) -> list[dict[str, Any]]:
        """
        Every job as the emulator knows it, oldest first, for tests (the control API): status in its
        canonical spelling, the file names as received and why each failed.
        """
        now = self.clock.time()
        return [
            {
                "id": job.id,
                "workflow_id": job.workflow_id,
                "workflow_name": job.workflow_name,
                "status": job.status(now).value,
                "created_at": to_datetime(job.created_at).isoformat(),
                "scheduled": job.scheduled,
                "files": [{"name": f.name, "error": f.error} for f in job.files],
            }
            for job in self._records(self.store.all("jobs"))
        ]

    def timelines(self) -> tuple[list[JobRecord], float]:
        """Every job's record and the emulator time to read them at (queued on-demand jobs admitted)."""
        now = self._now()
        return [self._job(key) for key in self.store.keys("jobs")], now

    def destination_writes(self, destination: str) -> list[dict[str, Any]]:
        """
        Return what a destination connector (id or name) has received, for tests (the control API): one
        entry per document through every node of a job writing to it, oldest job first, with the
        elements written (after the workflow's chunk and embed nodes).
        """
        rows = self.store.all("connectors", kind="destination")
        ids = {r["id"] for r in rows if destination in (r["id"], r["name"])}
        if not ids:
            raise ApiError(404, "no destination connector has this id or name")
        now = self._now()
        return [
            {
                "job_id": job.id,
                "document": f.name,
                "elements": json.loads(self.store.output(job.id, f.file_id) or "[]"),
            }
            for job in self._records(self.store.all("jobs"))
            if job.destination_id in ids
            for f in job.written_files(now)
        ]

    def _records(self, rows: list[dict[str, Any]]) -> list[JobRecord]:
        return [self._jobs.get(r["id"]) or self._cache_job(JobRecord.from_dict(r)) for r in rows]

    def job_details(self, job_id: str) -> dict[str, Any]:
        job, now = self._job(job_id), self._now()
        return JobDetails(
            id=job.id,
            processing_status=details_status(job.status(now), bool(job.failed_files(now)), self.dialect),
            message=job.message(now),
            node_stats=[NodeStats(**s) for s in job.node_stats(now)],
        ).model_dump(mode="json")

    def job_failed_files(self, job_id: str) -> dict[str, Any]:
        job = self._job(job_id)
        failed = [FailedFile(document=f.name, error=f.error or "") for f in job.failed_files(self._now())]
        return JobFailedFiles(failed_files=failed).model_dump(mode="json")

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        job, now = self._job(job_id), self._now()
        status = job.status(now)
        if not status.is_active:
            raise ApiError(409, f"job already completed: its status is {self._listed(status)}")
        job.stopped_at = now
        self._save_job(job)
        return {"id": job.id, "status": self._listed(JobState.STOPPED), "message": "Job cancelled."}

    def _listed(self, state: JobState) -> str:
        return job_status(state, self.dialect, "listing")

    def download(self, job_id: str, file_id: str, node_id: str | None) -> str:
        """One output file's elements; without ``node_id`` (platform dialect) the last node's output."""
        job, now = self._job(job_id), self._now()
        if not job.local_destination or not (job.local_source or self.config.allow_remote_source_download):
            raise ApiError(
                409,
                "download is available only for jobs of workflows with a local source and a local "
                "destination (no source and no destination connector)",
            )
        status = job.status(now)
        if status is not JobState.COMPLETED:
            raise ApiError(409, f"job has no downloadable output: its status is {self._listed(status)}")
        outputs = {(f, node.id) for f, node in job.outputs(now)}
        file_id = self._named_file_id(job, file_id)
        if (file_id, node_id or (job.nodes[-1].id if job.nodes else "")) not in outputs:
            raise ApiError(404, f"job {job_id} has no output with this file_id and node_id")
        text = self.store.output(job_id, file_id)
        if text is None:
            raise ApiError(404, f"job {job_id} has no stored output for this file_id")
        return text

    def _named_file_id(self, job: JobRecord, file_id: str) -> str:
        """
        Return the file id a download's ``file_id`` names: a file id, or (platform) a value of the job's
        ``input_file_ids``, which the live docs give as the id to download a file's last-node output by.
        """
        if self.dialect != "platform" or any(f.file_id == file_id for f in job.files):
            return file_id
        named = [f.file_id for f in job.files if f.name == file_id]
        if len(named) > 1:
            raise ApiError(
                409,
                "this file_id is the name of several files of the job; download each by the file_id "
                "of output_node_files",
            )
        return named[0] if named else file_id

    # -- schedules -------------------------------------------------------------------------------

    def fire_due_schedules(self) -> int:
        """
        Create a job for each schedule occurrence due by now; the number of jobs created.

        At most :data:`MAX_SCHEDULED_JOBS_PER_CHECK` per workflow per call: older occurrences beyond
        that are skipped.
        """
        now = self.clock.time()
        if self._next_due is not None and now < self._next_due:
            return 0
        created, next_due = 0, math.inf
        for row in self._workflows():
            if not row["schedule"] or row["status"] != "active":
                continue
            created += self._fire_workflow(row, now)
            next_due = min(next_due, _cron_next(row["schedule"], row["schedule_anchor"]))
        self._next_due = next_due
        return created

    def _fire_workflow(self, row: dict[str, Any], now: float) -> int:
        fired, due = 0, _cron_next(row["schedule"], row["schedule_anchor"])
        while due <= now and fired < MAX_SCHEDULED_JOBS_PER_CHECK:
            self._start_job(row, due, [], scheduled=True)
            row["schedule_anchor"], fired = due, fired + 1
            due = _cron_next(row["schedule"], due)
        if fired:
            if due <= now:
                row["schedule_anchor"] = now
            self.store.put("workflows", row["id"], row)
        return fired


def _cron_next(schedule: str, after: float) -> float:
    return float(croniter(SCHEDULE_CRON[schedule], to_datetime(after)).get_next(float))


def _matches(row: dict[str, Any], params: ListWorkflowsParams) -> bool:
    checks = (
        params.show_recommender_workflows or not row["name"].casefold().startswith("recommender"),
        params.dag_node_configuration_id is None
        or any(n["id"] == params.dag_node_configuration_id for n in row["nodes"]),
        params.source_id is None or row["source_id"] == str(params.source_id),
        params.destination_id is None or row["destination_id"] == str(params.destination_id),
        params.status is None or row["status"] == params.status,
        params.created_since is None or row["created_at"] >= _timestamp(params.created_since),
        params.created_before is None or row["created_at"] < _timestamp(params.created_before),
        params.name is None or params.name.casefold() in row["name"].casefold(),
    )
    return all(checks)


def _sort_key(row: dict[str, Any], field: str) -> tuple[bool, Any, str]:
    value = row.get(field)
    if isinstance(value, str):
        value = value.casefold()
    return (value is None, value if value is not None else 0, row["id"])
