"""
The Workflow Service as its spec describes it: the emulator's own request and response models.

Written from the service's API description (and, for what it leaves out, the platform dialect: see
``docs/provider/service-api.rst``), never imported from the provider, so a mistake in the provider's
models cannot hide behind the emulator. Requests forbid unknown fields; enum-like values are matched case- and
separator-insensitively, as the service does.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DESTINATION_TYPES",
    "PLATFORM_DESTINATION_TYPES",
    "PLATFORM_SOURCE_TYPES",
    "SCHEDULE_CRON",
    "SOURCE_TYPES",
    "WORKFLOW_TYPES",
    "AstraDBDestinationConfig",
    "AzureSourceConfig",
    "ConfluenceSourceConfig",
    "ConnectionCheck",
    "Connector",
    "CreateWorkflow",
    "CronTabEntry",
    "Element",
    "ElementMetadata",
    "FailedFile",
    "Job",
    "JobDetails",
    "JobFailedFiles",
    "JobState",
    "ListWorkflowsParams",
    "NodeStats",
    "OnDemandJobRequest",
    "OutputNodeFile",
    "TemplateDetail",
    "TemplateListItem",
    "TemplateNode",
    "UpdateWorkflow",
    "Workflow",
    "WorkflowNode",
    "WorkflowSchedule",
    "canonical",
    "typed_config_model",
]

SOURCE_TYPES = (
    *("azure", "box", "confluence", "couchbase", "databricks_volumes", "dropbox", "elasticsearch", "gcs"),
    *("google_drive", "kafka-cloud", "mongodb", "onedrive", "outlook", "postgres", "s3", "salesforce"),
    *("sharepoint", "slack", "snowflake", "jira", "zendesk"),
)
DESTINATION_TYPES = (
    *("astradb", "azure_ai_search", "couchbase", "databricks_volumes", "databricks_volume_delta_tables"),
    *("delta_table", "elasticsearch", "gcs", "kafka-cloud", "milvus", "mongodb", "motherduck", "neo4j"),
    *("onedrive", "pinecone", "postgres", "redis", "qdrant-cloud", "s3", "snowflake", "weaviate-cloud"),
    "ibm_watsonx_s3",
)
PLATFORM_SOURCE_TYPES = (*SOURCE_TYPES, "opensearch", "teradata")
"""The live service's source types: the spec's and those of its public docs."""
PLATFORM_DESTINATION_TYPES = (*DESTINATION_TYPES, "azure", "opensearch", "teradata")
"""The live service's destination types: the spec's and those of its public docs."""
WORKFLOW_TYPES = ("basic", "advanced", "platinum", "custom")
SCHEDULE_CRON: dict[str, str] = {
    "every 15 minutes": "*/15 * * * *",
    "every hour": "0 * * * *",
    "every 2 hours": "0 */2 * * *",
    "every 4 hours": "0 */4 * * *",
    "every 6 hours": "0 */6 * * *",
    "every 8 hours": "0 */8 * * *",
    "every 10 hours": "0 */10 * * *",
    "every 12 hours": "0 */12 * * *",
    "daily": "0 0 * * *",
    "weekly": "0 0 * * 0",
    "monthly": "0 0 1 * *",
}


def _normalize(value: str) -> str:
    return re.sub(r"[\s_\-]+", " ", value.strip().lower())


def canonical(value: Any, allowed: tuple[str, ...] | dict[str, str], what: str) -> str:
    """Return the allowed spelling ``value`` stands for (any case, ``_``/``-``/space), else ValueError."""
    if isinstance(value, str):
        wanted = _normalize(value)
        for option in allowed:
            if _normalize(option) == wanted:
                return option
    raise ValueError(f"unknown {what}; expected one of: {', '.join(allowed)}")


class JobState(str, Enum):
    """Where a job is in its life; each dialect spells it its own way (see ``dialect.py``)."""

    SCHEDULED = "scheduled"
    IN_PROGRESS = "in progress"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_active(self) -> bool:
        return self in (JobState.SCHEDULED, JobState.IN_PROGRESS)


# --------------------------------------------------------------------------------------------------
# Requests


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, hide_input_in_errors=True)


NonEmptyStr = Annotated[str, Field(min_length=1)]


class AzureSourceConfig(_Request):
    """The config of an ``azure`` source connector (the spec's schema)."""

    remote_url: NonEmptyStr
    account_name: str | None = None
    account_key: str | None = None
    connection_string: str | None = None
    sas_token: str | None = None
    recursive: bool | None = None


class ConfluenceSourceConfig(_Request):
    """Exactly one complete auth variant: username + token, token alone (cloud false), username + password."""

    url: NonEmptyStr
    max_num_of_spaces: int = Field(default=500, ge=1)
    max_num_of_docs_from_each_space: int = Field(default=150, ge=1)
    spaces: list[str] | None = None
    extract_images: bool = False
    extract_files: bool = False
    username: str | None = None
    token: str | None = None
    password: str | None = None
    cloud: bool = False

    @model_validator(mode="after")
    def _one_auth_variant(self) -> ConfluenceSourceConfig:
        has_user, has_token, has_password = bool(self.username), bool(self.token), bool(self.password)
        if has_token and has_password:
            raise ValueError("confluence config mixes authentication variants: give token or password")
        if has_password and not has_user:
            raise ValueError("confluence password authentication is incomplete: username is missing")
        if has_user and not (has_token or has_password):
            raise ValueError("confluence authentication is incomplete: username without token or password")
        if not (has_token or has_password):
            raise ValueError("confluence config has no authentication")
        if has_token and not has_user and self.cloud:
            raise ValueError("confluence personal access token authentication requires cloud=false")
        return self


class AstraDBDestinationConfig(_Request):
    """The config of an ``astradb`` destination connector (the spec's schema)."""

    collection_name: NonEmptyStr
    keyspace: str | None = None
    batch_size: int | None = Field(default=None, ge=1)
    api_endpoint: NonEmptyStr
    token: NonEmptyStr
    flatten_metadata: bool | None = None


_TYPED_CONFIGS: dict[tuple[str, str], type[_Request]] = {
    ("source", "azure"): AzureSourceConfig,
    ("source", "confluence"): ConfluenceSourceConfig,
    ("destination", "astradb"): AstraDBDestinationConfig,
}


def typed_config_model(kind: str, connector_type: str) -> type[_Request] | None:
    """Return the spec's config schema of a connector type, or None where the spec gives none (any object)."""
    return _TYPED_CONFIGS.get((kind, connector_type))


class WorkflowNode(BaseModel):
    """One node of a workflow as a request gives it."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    id: UUID | None = None
    name: NonEmptyStr
    type: NonEmptyStr
    subtype: NonEmptyStr
    settings: dict[str, Any] | None = None


def _unique_node_names(nodes: list[WorkflowNode] | None) -> None:
    names = [n.name for n in nodes or []]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"workflow_nodes: node names must be unique, repeated: {', '.join(repeated)}")


class _WorkflowFields(_Request):
    name: NonEmptyStr | None = None
    workflow_type: str | None = None
    source_id: UUID | None = None
    destination_id: UUID | None = None
    workflow_nodes: list[WorkflowNode] | None = None
    schedule: str | None = None
    reprocess_all: bool | None = None
    template_id: NonEmptyStr | None = None
    """Platform dialect only (the live service's SDK): the workflow template to build from."""

    @field_validator("workflow_type", mode="before")
    @classmethod
    def _workflow_type(cls, value: Any) -> Any:
        return None if value is None else canonical(value, WORKFLOW_TYPES, "workflow_type")

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule(cls, value: Any) -> Any:
        return None if value is None else canonical(value, SCHEDULE_CRON, "schedule")


class CreateWorkflow(_WorkflowFields):
    """A POST body of ``/workflows/``: a name and type are required; a custom type needs nodes."""

    name: NonEmptyStr
    workflow_type: str

    @model_validator(mode="after")
    def _nodes_fit_type(self) -> CreateWorkflow:
        if self.workflow_type == "custom" and not self.workflow_nodes and not self.template_id:
            raise ValueError("workflow_nodes: a custom workflow needs at least one node")
        _unique_node_names(self.workflow_nodes)
        return self


class UpdateWorkflow(_WorkflowFields):
    """A PUT body: the create fields, all optional (``status`` is handled by the service)."""

    @model_validator(mode="after")
    def _valid_nodes(self) -> UpdateWorkflow:
        _unique_node_names(self.workflow_nodes)
        return self


class OnDemandJobRequest(_Request):
    """The ``request_data`` of ``POST /jobs/`` (platform dialect): a template's id or nodes given inline."""

    template_id: NonEmptyStr | None = None
    job_nodes: list[WorkflowNode] | None = None

    @model_validator(mode="after")
    def _one_way_to_give_nodes(self) -> OnDemandJobRequest:
        given = [name for name in ("template_id", "job_nodes") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of template_id and job_nodes")
        names = [n.name for n in self.job_nodes or []]
        if self.job_nodes is not None and not names:
            raise ValueError("job_nodes: an on-demand job needs at least one node")
        if len(set(names)) != len(names):
            raise ValueError("job_nodes: node names must be unique")
        return self


class ListWorkflowsParams(_Request):
    """The query parameters of the workflow listing."""

    dag_node_configuration_id: str | None = None
    source_id: UUID | None = None
    destination_id: UUID | None = None
    status: Literal["active", "inactive"] | None = None
    page: int = Field(default=1, ge=1)
    page_size: int = Field(default=20, ge=1)
    created_since: datetime | None = None
    created_before: datetime | None = None
    name: str | None = None
    sort_by: str = "id"
    sort_direction: Literal["asc", "desc"] | None = None
    show_only_soft_deleted: bool = False
    show_recommender_workflows: bool = False


# --------------------------------------------------------------------------------------------------
# Responses (dumped with ``mode="json"``)


class Connector(BaseModel):
    """A source or destination connector as responses show it."""

    id: str
    name: str
    type: str
    config: dict[str, Any]
    created_at: datetime
    updated_at: datetime | None = None


class ConnectionCheck(BaseModel):
    """A connector's connection check as responses show it."""

    id: str
    status: str
    reason: str | None = None
    created_at: datetime
    reported_at: datetime | None = None


class CronTabEntry(BaseModel):
    """One cron expression of a workflow's schedule."""

    cron_expression: str


class WorkflowSchedule(BaseModel):
    """A workflow's schedule as responses show it."""

    crontab_entries: list[CronTabEntry]


class Workflow(BaseModel):
    """A workflow as responses show it."""

    id: str
    name: str
    sources: list[str]
    destinations: list[str]
    workflow_type: str
    workflow_nodes: list[dict[str, Any]]
    schedule: WorkflowSchedule | None = None
    status: Literal["active", "inactive"]
    created_at: datetime
    updated_at: datetime | None = None
    reprocess_all: bool


class OutputNodeFile(BaseModel):
    """One output file of a job: which node produced which file."""

    file_id: str
    node_id: str
    node_type: str
    node_subtype: str


class Job(BaseModel):
    """A job record as responses show it."""

    id: str
    workflow_id: str
    workflow_name: str
    status: str
    created_at: datetime
    job_type: Literal["ephemeral", "persistent", "scheduled", "template"]
    input_file_ids: list[str] | None = None
    output_node_files: list[OutputNodeFile] | None = None


class TemplateNode(BaseModel):
    """One node of a workflow template."""

    id: str
    name: str
    type: str
    subtype: str
    settings: dict[str, Any] | None = None


class TemplateListItem(BaseModel):
    """A workflow template as the template listing shows it."""

    id: str
    name: str
    description: str
    version: str
    last_updated: str


class TemplateDetail(TemplateListItem):
    """A workflow template with its nodes."""

    nodes: list[TemplateNode]


class NodeStats(BaseModel):
    """The file counts of one workflow node in job details."""

    node_name: str | None
    node_type: str | None
    node_subtype: str | None
    ready: int
    in_progress: int
    success: int
    failure: int


class JobDetails(BaseModel):
    """A job's processing status, message and per-node counts."""

    id: str
    processing_status: str
    message: str | None
    node_stats: list[NodeStats]


class FailedFile(BaseModel):
    """One file a job failed to process, with the error."""

    document: str
    error: str


class JobFailedFiles(BaseModel):
    """The files a job failed to process."""

    failed_files: list[FailedFile]


class ElementMetadata(BaseModel):
    """The metadata of one document element (extra keys allowed)."""

    model_config = ConfigDict(extra="allow")

    filename: str
    filetype: str
    page_number: int | None = None
    data_source: dict[str, Any] | None = None


class Element(BaseModel):
    """One document element of a job's output (type, id, text, metadata)."""

    type: str
    element_id: str
    text: str
    metadata: ElementMetadata
