"""
Typed resources and request bodies of the Workflow Service API: answers read tolerantly, requests
written strictly (docs/decisions/wire.md); a secret leaves the process only through :func:`request_json`.
"""

from __future__ import annotations

import functools
import logging
import re
import typing
from collections.abc import Mapping
from datetime import datetime, timezone
from enum import Enum
from typing import Annotated, Any, ClassVar, Literal, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SecretStr,
    SerializationInfo,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from airflow_provider_workflowsvc import connectors_catalog
from airflow_provider_workflowsvc.connectors_catalog import Kind

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Secrets


def _serialize_secret(value: SecretStr, info: SerializationInfo) -> str:
    if info.context and info.context.get("reveal_secrets"):
        return value.get_secret_value()
    return str(value)


Secret = Annotated[SecretStr, PlainSerializer(_serialize_secret, return_type=str)]
"""A secret string: printed and dumped as ``**********`` unless revealed by :func:`request_json`."""

_SECRET_WORDS = frozenset(
    {
        *("token", "tokens", "password", "passwords", "passwd", "secret", "secrets", "key", "keys"),
        *("credential", "credentials", "passphrase", "pat", "pats"),
    }
)
_SECRET_NAMES = frozenset({"connection_string", "service_account_key", "private_key", "client_secret"})


def is_secret_field(name: str) -> bool:
    """Whether a config field name denotes a secret (``token``, ``api_key``, ``sas_token``, ...)."""
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(w in _SECRET_WORDS for w in re.split(r"[_\-.\s]+", lowered))


def _wrap_secrets(value: Any, secret: bool = False, secret_keys: frozenset[str] = frozenset()) -> Any:
    """
    Turn the strings under secret-looking keys, or top-level ``secret_keys`` (the settings the docs
    call secret, any name), or every string (``secret``) into ``SecretStr``, recursively: also inside
    a list or object such a key holds (a service-account key as an object).
    """
    if isinstance(value, str):
        return SecretStr(value) if secret else value
    if isinstance(value, Mapping):
        wrap = {k: secret or k in secret_keys or is_secret_field(str(k)) for k in value}
        return {k: _wrap_secrets(v, wrap[k]) for k, v in value.items()}
    if isinstance(value, list):
        return [_wrap_secrets(v, secret) for v in value]
    return value


def _unwrap_secrets(value: Any, reveal: bool) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value() if reveal else str(value)
    if isinstance(value, Mapping):
        return {k: _unwrap_secrets(v, reveal) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap_secrets(v, reveal) for v in value]
    return value


def request_json(model: BaseModel) -> dict[str, Any]:
    """Return a request's JSON body: spec field names, secrets revealed, unset optional fields left out."""
    return model.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})


# --------------------------------------------------------------------------------------------------
# Tolerant enums


@functools.lru_cache(maxsize=1024)
def _member_spelled(cls: type[Enum], value: str) -> Any:
    """
    Return the member of ``cls`` that ``value`` spells in any case or separators (or by an alias), else
    None. Remembered: every status a wait polls is parsed this way (the platform sends ``IN_PROGRESS``).
    """
    wanted = connectors_catalog.normalized(value)
    aliases = getattr(cls, "_aliases", None)
    if aliases is not None:
        wanted = aliases().get(wanted, wanted)
    return next((member for member in cls if connectors_catalog.normalized(member.value) == wanted), None)


class _StrictEnum(str, Enum):
    """An enum for request values: tolerant of case and separators, but unknown values are errors."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return _member_spelled(cls, value) if isinstance(value, str) else None

    def __str__(self) -> str:
        return str(self.value)


class _TolerantEnum(_StrictEnum):
    """An enum of response values: spelled as :class:`_StrictEnum` reads them; unknown values are UNKNOWN."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        member = super()._missing_(value)
        # Anything else (an unknown word, null, a number) is UNKNOWN: a response never fails on it.
        return member if member is not None else cls.__members__.get("UNKNOWN")


class SourceType(_StrictEnum):
    """The source connector types of the spec and of the live docs (``opensearch``, ``teradata``)."""

    AZURE = "azure"
    BOX = "box"
    CONFLUENCE = "confluence"
    COUCHBASE = "couchbase"
    DATABRICKS_VOLUMES = "databricks_volumes"
    DROPBOX = "dropbox"
    ELASTICSEARCH = "elasticsearch"
    GCS = "gcs"
    GOOGLE_DRIVE = "google_drive"
    KAFKA_CLOUD = "kafka-cloud"
    MONGODB = "mongodb"
    ONEDRIVE = "onedrive"
    OPENSEARCH = "opensearch"
    OUTLOOK = "outlook"
    POSTGRES = "postgres"
    S3 = "s3"
    SALESFORCE = "salesforce"
    SHAREPOINT = "sharepoint"
    SLACK = "slack"
    SNOWFLAKE = "snowflake"
    JIRA = "jira"
    TERADATA = "teradata"
    ZENDESK = "zendesk"


class DestinationType(_StrictEnum):
    """The destination connector types of the spec and of the live docs (azure, opensearch, teradata)."""

    ASTRADB = "astradb"
    AZURE = "azure"
    AZURE_AI_SEARCH = "azure_ai_search"
    COUCHBASE = "couchbase"
    DATABRICKS_VOLUMES = "databricks_volumes"
    DATABRICKS_VOLUME_DELTA_TABLES = "databricks_volume_delta_tables"
    DELTA_TABLE = "delta_table"
    ELASTICSEARCH = "elasticsearch"
    GCS = "gcs"
    KAFKA_CLOUD = "kafka-cloud"
    MILVUS = "milvus"
    MONGODB = "mongodb"
    MOTHERDUCK = "motherduck"
    NEO4J = "neo4j"
    ONEDRIVE = "onedrive"
    OPENSEARCH = "opensearch"
    PINECONE = "pinecone"
    POSTGRES = "postgres"
    REDIS = "redis"
    QDRANT_CLOUD = "qdrant-cloud"
    S3 = "s3"
    SNOWFLAKE = "snowflake"
    TERADATA = "teradata"
    WEAVIATE_CLOUD = "weaviate-cloud"
    IBM_WATSONX_S3 = "ibm_watsonx_s3"


class WorkflowType(_StrictEnum):
    """The workflow types of the spec."""

    BASIC = "basic"
    ADVANCED = "advanced"
    PLATINUM = "platinum"
    CUSTOM = "custom"


class WorkflowStatus(_TolerantEnum):
    """A workflow's status (``unknown``: one this provider does not know)."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    UNKNOWN = "unknown"


class Schedule(_StrictEnum):
    """
    The schedule values a create/update request accepts, each with the 5-field cron expression the
    service stores for it (:attr:`cron_expression`); responses carry a :class:`WorkflowSchedule`.
    """

    _value_: str
    cron_expression: str

    def __new__(cls, value: str, cron_expression: str) -> Schedule:
        member = str.__new__(cls, value)
        member._value_, member.cron_expression = value, cron_expression
        return member

    EVERY_15_MINUTES = "every 15 minutes", "*/15 * * * *"
    EVERY_HOUR = "every hour", "0 * * * *"
    EVERY_2_HOURS = "every 2 hours", "0 */2 * * *"
    EVERY_4_HOURS = "every 4 hours", "0 */4 * * *"
    EVERY_6_HOURS = "every 6 hours", "0 */6 * * *"
    EVERY_8_HOURS = "every 8 hours", "0 */8 * * *"
    EVERY_10_HOURS = "every 10 hours", "0 */10 * * *"
    EVERY_12_HOURS = "every 12 hours", "0 */12 * * *"
    DAILY = "daily", "0 0 * * *"
    WEEKLY = "weekly", "0 0 * * 0"
    MONTHLY = "monthly", "0 0 1 * *"


class JobStatus(_TolerantEnum):
    """A job's status, parsed from any spelling a server sends (``im progress``, ``IN_PROGRESS``, ...)."""

    SCHEDULED = "scheduled"
    IN_PROGRESS = "in progress"
    COMPLETED = "completed"
    COMPLETED_WITH_ERRORS = "completed with errors"
    """Platform dialect, details only: the job finished and some files failed."""
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"

    @classmethod
    def _aliases(cls) -> dict[str, str]:
        return {
            "im progress": "in progress",
            "inprogress": "in progress",
            "running": "in progress",
            "cancelled": "stopped",
            "canceled": "stopped",
            "succeeded": "completed",
            "success": "completed",
        }

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_JOB_STATUSES

    @property
    def is_success(self) -> bool:
        """The job finished processing (some files may have failed when COMPLETED_WITH_ERRORS)."""
        return self in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS)

    @property
    def is_active(self) -> bool:
        return self in ACTIVE_JOB_STATUSES

    @property
    def wire_value(self) -> str:
        """The spec dialect's spelling, as its job listing uses it (and its ``status`` filter takes)."""
        return "im progress" if self is JobStatus.IN_PROGRESS else self.value

    @property
    def platform_value(self) -> str:
        """The platform dialect's spelling (``IN_PROGRESS``)."""
        return self.name


_TERMINAL_JOB_STATUSES = frozenset(
    {JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS, JobStatus.FAILED, JobStatus.STOPPED}
)
ACTIVE_JOB_STATUSES = (JobStatus.SCHEDULED, JobStatus.IN_PROGRESS)
"""A job's active statuses in the order of its lifecycle, which only moves on (scheduled, in progress,
ended): listed one status after the other in this order, a job active throughout is in one of the
listings even when it moves on between them; in the other order it can be in neither."""
LISTED_JOB_STATUSES = (*ACTIVE_JOB_STATUSES, JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STOPPED)
"""The statuses a job's record shows, the only ones a listing's ``status`` filter takes (the service
refuses any other, 422): ``COMPLETED_WITH_ERRORS`` is the platform details' alone."""


class ConnectionCheckStatus(_TolerantEnum):
    """The outcome of a connector's connectivity test (``unknown``: not known yet, or new)."""

    SCHEDULED = "scheduled"
    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"

    @classmethod
    def _aliases(cls) -> dict[str, str]:
        return {
            "succeeded": "success",
            "successful": "success",
            "failed": "failure",
            "error": "failure",
            "pending": "scheduled",
            "in progress": "scheduled",
            "running": "scheduled",
        }

    @property
    def is_terminal(self) -> bool:
        return self in (ConnectionCheckStatus.SUCCESS, ConnectionCheckStatus.FAILURE)


# --------------------------------------------------------------------------------------------------
# Base classes


class _Response(BaseModel):
    """A response shape: extra fields are kept, never an error; errors never echo inputs (secrets)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, hide_input_in_errors=True)


class _Request(BaseModel):
    """A request shape: unknown fields are an error, so a typo fails before anything is sent."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, str_strip_whitespace=True, hide_input_in_errors=True
    )


NonEmptyStr = Annotated[str, Field(min_length=1)]
T = TypeVar("T")
Items = Annotated[list[T], BeforeValidator(lambda value: [] if value is None else value)]
"""A list a response may send as ``null``: read as empty."""

_SHORT_OFFSET = re.compile(r"(\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)([+-]\d{2}):?(\d{2})?$")
"""A UTC offset written ``+HH`` or ``+HHMM`` at the end of a timestamp."""


def _iso_offset(value: Any) -> Any:
    """Read PostgreSQL's short offsets (``2026-11-24 10:00:00+00``, ``...-0530``) as ISO ones."""
    if isinstance(value, str):
        return _SHORT_OFFSET.sub(lambda m: f"{m[1]}{m[2]}:{m[3] or '00'}", value.strip())
    return value


def as_utc(moment: datetime) -> datetime:
    """``moment`` with a zone: as given, or (none given) read as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


Moment = Annotated[datetime, BeforeValidator(_iso_offset)]
"""A response's date-time, PostgreSQL's short offsets (``+00``) read too."""
Zoned = Annotated[datetime, Field(strict=True), AfterValidator(as_utc)]
"""A request's date-time: a ``datetime`` (never text), read as UTC when it has no zone."""

# --------------------------------------------------------------------------------------------------
# Connector configs (requests)


class AzureSourceConfig(_Request):
    """Settings of an ``azure`` source: its remote URL and credentials."""

    remote_url: NonEmptyStr
    account_name: str | None = None
    account_key: Secret | None = None
    connection_string: Secret | None = None
    sas_token: Secret | None = None
    recursive: bool | None = None


class ConfluenceSourceConfig(_Request):
    """
    Confluence source settings; exactly one authentication variant must be complete.

    1. API token: ``username`` + ``token`` (``cloud`` true for a cloud instance).
    2. Personal access token: ``token`` alone, with ``cloud`` false.
    3. Password: ``username`` + ``password``.
    """

    url: NonEmptyStr
    max_num_of_spaces: int = Field(default=500, ge=1)
    max_num_of_docs_from_each_space: int = Field(default=150, ge=1)
    spaces: list[str] | None = None
    extract_images: bool = False
    extract_files: bool = False
    username: str | None = None
    token: Secret | None = None
    password: Secret | None = None
    cloud: bool = False

    @model_validator(mode="after")
    def _one_auth_variant(self) -> ConfluenceSourceConfig:
        variant = confluence_auth_variant(self)
        if variant == "personal access token" and self.cloud:
            raise ValueError(
                "confluence personal access token authentication (token without username) requires "
                "cloud=false; for a cloud instance use an API token with username"
            )
        return self

    def model_post_init(self, context: Any, /) -> None:
        # Defaults the user did not pass are still sent, so the request carries every setting (PUT rule).
        fields = type(self).model_fields
        self.__pydantic_fields_set__.update(
            n for n, f in fields.items() if f.default is not None and not f.is_required()
        )


def confluence_auth_variant(config: ConfluenceSourceConfig) -> str:
    """Name the one complete auth variant of a confluence config, or raise a ``ValueError`` saying why."""
    has_user = bool(config.username and config.username.strip())
    has_token = config.token is not None and bool(config.token.get_secret_value().strip())
    has_password = config.password is not None and bool(config.password.get_secret_value())
    if has_token and has_password:
        raise ValueError(
            "confluence config mixes authentication variants: give either token (API token or personal "
            "access token) or password, not both"
        )
    if has_password:
        if not has_user:
            raise ValueError("confluence password authentication is incomplete: username is missing")
        return "password"
    if has_token:
        return "api token" if has_user else "personal access token"
    if has_user:
        raise ValueError(
            "confluence API token / password authentication is incomplete: username is set but neither "
            "token nor password is"
        )
    raise ValueError(
        "confluence config has no authentication: give username + token (API token), token alone "
        "(personal access token, cloud=false), or username + password"
    )


class AstraDBDestinationConfig(_Request):
    """Settings of an ``astradb`` destination: the collection, its endpoint and token."""

    collection_name: NonEmptyStr
    keyspace: str | None = None
    batch_size: int | None = Field(default=None, ge=1)
    api_endpoint: NonEmptyStr
    token: Secret
    flatten_metadata: bool | None = None
    binary_encode_vectors: bool | None = None
    """The live docs (not the spec): false uploads vectors as lists of numbers."""
    enable_lexical_search: bool | None = None
    """The live docs (not the spec): lexical and hybrid search."""
    astra_generated_embeddings: bool | None = None
    """The live docs (not the spec): embeddings made by an Astra vectorize integration."""


class GenericConfig(_Request):
    """Config of a connector type with no typed schema: any fields; secret-looking ones are masked."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _mask(cls, data: Any) -> Any:
        return _wrap_secrets(data) if isinstance(data, Mapping) else data

    @model_serializer(mode="plain")
    def _dump(self, info: SerializationInfo) -> dict[str, Any]:
        reveal = bool(info.context and info.context.get("reveal_secrets"))
        return {k: _unwrap_secrets(v, reveal) for k, v in (self.model_extra or {}).items()}

    @model_validator(mode="after")
    def _not_empty(self) -> GenericConfig:
        if not self.model_extra:
            raise ValueError("config must not be empty")
        return self

    def model_post_init(self, context: Any, /) -> None:
        self.__pydantic_fields_set__.update(self.model_extra or {})


# GenericConfig comes last in every union: its serializer is a plain function, which a union would
# otherwise pick for any typed config placed after it (it dumps only a GenericConfig's own fields).
SourceConfig = AzureSourceConfig | ConfluenceSourceConfig | GenericConfig
DestinationConfig = AstraDBDestinationConfig | GenericConfig
ConnectorConfig = AzureSourceConfig | ConfluenceSourceConfig | AstraDBDestinationConfig | GenericConfig

_TYPED_CONFIGS: dict[str, type[_Request]] = {
    "source:azure": AzureSourceConfig,
    "source:confluence": ConfluenceSourceConfig,
    "destination:astradb": AstraDBDestinationConfig,
}


def config_model_for(kind: Kind, connector_type: str) -> type[_Request]:
    """Return the request config model of a connector type (the generic one where the spec gives none)."""
    return _TYPED_CONFIGS.get(f"{kind}:{connector_type}", GenericConfig)


def _coerce_config(kind: Kind, connector_type: Any, config: Any) -> Any:
    if isinstance(config, BaseModel):
        config = config.model_dump(exclude_unset=True, context={"reveal_secrets": True})
    model = config_model_for(kind, str(connector_type))
    if model is GenericConfig and isinstance(config, Mapping):
        config = _wrap_secrets(config, secret_keys=connectors_catalog.secret_settings(kind, connector_type))
    return model.model_validate(config)


def _check_by_docs(kind: Kind, connector_type: Any, config: Any) -> None:
    """Check a generic config by the docs (:func:`..connectors_catalog.check_config`); log its warnings."""
    if isinstance(config, GenericConfig) and connector_type is not None:
        name = connector_type_name(connector_type)
        for warning in connectors_catalog.check_config(kind, name, config.model_extra or {}):
            log.warning("%s", warning)


# --------------------------------------------------------------------------------------------------
# Connectors


class _CreateConnector(_Request):
    """The body that creates a connector: each subclass gives its kind, ``type`` and ``config`` models."""

    connector_kind: ClassVar[Kind]
    name: NonEmptyStr
    type: Any
    config: Any

    @model_validator(mode="before")
    @classmethod
    def _typed_config(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "config" not in data or "type" not in data:
            return data
        connector_type = parse_connector_type(cls.connector_kind, data["type"])
        try:
            config = _coerce_config(cls.connector_kind, connector_type_name(connector_type), data["config"])
        except ValidationError as exc:
            raise _under("config", exc) from None
        return {**data, "type": connector_type, "config": config}

    @model_validator(mode="after")
    def _by_docs(self) -> _CreateConnector:
        _check_by_docs(self.connector_kind, self.type, self.config)
        return self


class CreateSourceConnector(_CreateConnector):
    """The body that creates a source connector (a type the provider does not know is sent as given)."""

    connector_kind: ClassVar[Kind] = "source"
    type: SourceType | str
    config: SourceConfig


class CreateDestinationConnector(_CreateConnector):
    """The body that creates a destination connector (a type the provider does not know is sent as given)."""

    connector_kind: ClassVar[Kind] = "destination"
    type: DestinationType | str
    config: DestinationConfig


def parse_connector_type(kind: Kind, value: Any) -> SourceType | DestinationType | str:
    """
    Return the :class:`SourceType` / :class:`DestinationType` ``value`` spells, or (a type the provider
    does not know) the text as given, with a warning; a ``ValueError`` for an empty or non-string value.
    """
    types: type[SourceType] | type[DestinationType] = SourceType if kind == "source" else DestinationType
    if isinstance(value, types):
        return value
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{kind} connector type must be a non-empty string, got {value!r}")
    if not connectors_catalog.known_or_warned(kind, value.strip(), log.warning):
        return value.strip()
    return _member_spelled(types, value)  # the docs' types are the enums' (tests/test_models.py)


def connector_type_name(value: SourceType | DestinationType | str) -> str:
    """Return the wire name of a connector type, known (an enum member) or not (text)."""
    return value.value if isinstance(value, Enum) else str(value)


def _under(field: str, exc: ValidationError) -> ValidationError:
    """``exc`` with every error located under ``field`` (so a message says ``config.token: ...``)."""
    errors = exc.errors(include_url=False)
    for error in errors:
        error["loc"] = (field, *error["loc"])
    return ValidationError.from_exception_data(exc.title, errors)  # type: ignore[arg-type]


class UpdateConnector(_Request):
    """PUT body: the full config (every setting, changed or not). ``name`` and ``type`` cannot change."""

    config: ConnectorConfig

    @classmethod
    def for_type(cls, kind: Kind, connector_type: str | None, config: Any) -> UpdateConnector:
        """Validate ``config`` against the typed schema of ``connector_type`` (generic when unknown)."""
        if connector_type is None and isinstance(config, BaseModel):
            return cls(config=config)
        update = cls(config=_coerce_config(kind, connector_type or "", config))
        try:
            _check_by_docs(kind, connector_type, update.config)
        except ValueError as exc:
            error = {"type": "value_error", "loc": ("config",), "input": None, "ctx": {"error": exc}}
            raise ValidationError.from_exception_data(cls.__name__, [error]) from None  # type: ignore[list-item]
        return update


class _Connector(_Response):
    id: str
    name: str
    type: str
    config: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    connector_kind: ClassVar[Kind]

    @field_validator("config", mode="before")
    @classmethod
    def _mask_config(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, Mapping):
            return value or {}
        secret = connectors_catalog.secret_settings(cls.connector_kind, info.data.get("type"))
        return _wrap_secrets(value, secret_keys=secret)


class SourceConnector(_Connector):
    """A source connector as the service returns it (secret config values masked)."""

    connector_kind: ClassVar[Kind] = "source"


class DestinationConnector(_Connector):
    """A destination connector as the service returns it (secret config values masked)."""

    connector_kind: ClassVar[Kind] = "destination"


class ConnectionCheck(_Response):
    """A connector's connectivity test: its status, and the reason when it failed."""

    id: str | None = None
    status: ConnectionCheckStatus = ConnectionCheckStatus.UNKNOWN
    reason: str | None = None
    created_at: datetime | None = None
    reported_at: datetime | None = None


# --------------------------------------------------------------------------------------------------
# Workflows


class WorkflowNode(_Response):
    """
    One processing step of a workflow (partitioner, chunker, embedder, ...). Any type and subtype is
    kept (the service may add some); a request's nodes need non-empty names, types and subtypes.
    """

    id: str | None = None
    name: str
    type: str
    subtype: str
    settings: dict[str, Any] | None = None


class CronTabEntry(_Response):
    """One cron expression of a workflow's schedule."""

    cron_expression: str


class WorkflowSchedule(_Response):
    """When a workflow runs on its own: its cron entries."""

    crontab_entries: list[CronTabEntry] = Field(default_factory=list)


def _check_nodes(nodes: list[WorkflowNode] | None, field: str = "workflow_nodes") -> None:
    """Check workflow nodes of a request (``field``: where given): only the spec's fields, unique names."""
    if not nodes:
        return
    for index, node in enumerate(nodes):
        empty = [f for f in ("name", "type", "subtype") if not getattr(node, f).strip()]
        if empty:
            raise ValueError(f"{field}.{index}: {', '.join(empty)} must not be empty")
        if node.model_extra:
            unknown = ", ".join(sorted(node.model_extra))
            raise ValueError(
                f"{field}.{index}: unknown field(s) {unknown}; a node has id, name, type, "
                "subtype and settings"
            )
    names = [n.name for n in nodes]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{field}: node names must be unique, repeated: {', '.join(repeated)}")


class UpdateWorkflow(_Request):
    """PUT body for a workflow: the create fields, all optional; only the fields given are sent."""

    name: NonEmptyStr | None = None
    workflow_type: WorkflowType | None = None
    source_id: UUID | None = None
    destination_id: UUID | None = None
    workflow_nodes: list[WorkflowNode] | None = None
    schedule: Schedule | None = None
    reprocess_all: bool | None = None
    template_id: NonEmptyStr | None = None
    """Platform dialect: the id of a workflow template to build (or rebuild) the workflow from."""

    @model_validator(mode="after")
    def _valid_nodes(self) -> UpdateWorkflow:
        _check_nodes(self.workflow_nodes)
        if not self.model_fields_set:
            raise ValueError("a workflow update needs at least one field")
        return self


class CreateWorkflow(UpdateWorkflow):
    """The body that creates a workflow: a name and a type, and any other field of an update."""

    name: NonEmptyStr
    workflow_type: WorkflowType

    @model_validator(mode="after")
    def _nodes_fit_type(self) -> CreateWorkflow:
        if self.workflow_type is WorkflowType.CUSTOM and not self.workflow_nodes and not self.template_id:
            raise ValueError("workflow_nodes: a custom workflow needs at least one node")
        return self


class Workflow(_Response):
    """A workflow: its connectors, nodes, schedule and status."""

    id: str
    name: str
    sources: Items[str] = Field(default_factory=list)
    destinations: Items[str] = Field(default_factory=list)
    workflow_type: str | None = None
    workflow_nodes: Items[WorkflowNode] = Field(default_factory=list)
    schedule: WorkflowSchedule | None = None
    status: WorkflowStatus = WorkflowStatus.UNKNOWN
    created_at: datetime | None = None
    updated_at: datetime | None = None
    reprocess_all: bool | None = None


class _Query(_Request):
    """Query parameters: only the ones given are sent, booleans spelled as JSON does, lists comma-joined."""

    def query(self) -> dict[str, str]:
        """Return the query string values."""
        data = self.model_dump(mode="json", exclude_none=True)
        return {k: _query_value(v) for k, v in data.items()}


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


class ListWorkflowsParams(_Query):
    """Query parameters of ``GET /workflows/``; only the ones given are sent."""

    dag_node_configuration_id: str | None = None
    source_id: UUID | None = None
    destination_id: UUID | None = None
    status: Literal["active", "inactive"] | None = None
    page: int | None = Field(default=None, ge=1)
    page_size: int | None = Field(default=None, ge=1)
    created_since: datetime | None = None
    created_before: datetime | None = None
    name: str | None = None
    sort_by: str | None = None
    sort_direction: Literal["asc", "desc"] | None = None
    show_only_soft_deleted: bool | None = None
    show_recommender_workflows: bool | None = None


# --------------------------------------------------------------------------------------------------
# Templates and on-demand jobs (platform dialect)


class TemplateListItem(_Response):
    """A workflow template of the service's catalogue (``GET /templates/``): its id and description."""

    id: str
    name: str | None = None
    description: str | None = None
    version: str | None = None
    last_updated: str | None = None
    """As the service writes it (the SDK types it as text, not a date)."""


class TemplateNode(WorkflowNode):
    """One node of a template: a workflow node like any other (it can be given in ``job_nodes``)."""


class TemplateDetail(TemplateListItem):
    """A template with its nodes (``GET /templates/{template_id}``)."""

    nodes: Items[TemplateNode] = Field(default_factory=list)


class CreateJob(_Request):
    """
    The ``request_data`` of an on-demand job (``POST /jobs/``): a template's id, or the nodes to run
    (a custom workflow's nodes), never both.
    """

    template_id: NonEmptyStr | None = None
    job_nodes: list[WorkflowNode] | None = None

    @model_validator(mode="after")
    def _template_or_nodes(self) -> CreateJob:
        if (self.template_id is None) == (self.job_nodes is None):
            raise ValueError("give template_id or job_nodes, not both and not neither")
        if self.job_nodes is not None and not self.job_nodes:
            raise ValueError("job_nodes: give at least one node")
        _check_nodes(self.job_nodes, "job_nodes")
        return self


# --------------------------------------------------------------------------------------------------
# Jobs


class OutputNodeFile(_Response):
    """One output file of a job, named by file id and node id (what a download asks for)."""

    file_id: str
    node_id: str
    node_type: str | None = None
    node_subtype: str | None = None


class Job(_Response):
    """One run of a workflow: its status and the output files of a local-to-local run."""

    id: str
    status: JobStatus = JobStatus.UNKNOWN
    workflow_id: str | None = None
    workflow_name: str | None = None
    created_at: Moment | None = None
    runtime: str | float | None = None
    job_type: str | None = None
    """Platform dialect: ``ephemeral``, ``persistent``, ``scheduled`` or ``template`` (an on-demand job of
    a template); kept as sent, so a kind the service adds later is read, never a failure."""
    input_file_ids: list[str] | None = None
    """Platform dialect: the uploaded files' names (or the source's documents); None when not sent."""
    output_node_files: Items[OutputNodeFile] = Field(default_factory=list)
    raw_status: str | None = Field(default=None, exclude=True)
    """The status exactly as the server spelled it (useful when ``status`` is UNKNOWN)."""

    @model_validator(mode="before")
    @classmethod
    def _keep_raw_status(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("status") is not None:
            return {**data, "raw_status": str(data["status"])}
        return data

    @property
    def created_utc(self) -> datetime | None:
        """
        ``created_at`` with a zone: as sent, or (none sent) read as UTC. The run's evidence does not
        use it: there a time without a zone proves nothing (``_tasks.submit``).
        """
        return None if self.created_at is None else as_utc(self.created_at)


_CREATED_AT: TypeAdapter[datetime] = TypeAdapter(Moment)


def listed_created_utc(item: Any) -> datetime | None:
    """Return a raw job item's ``created_at`` as :attr:`Job.created_utc` (None: absent or unreadable)."""
    value = item.get("created_at") if isinstance(item, Mapping) else None
    if value is None:
        return None
    try:
        return as_utc(_CREATED_AT.validate_python(value))
    except ValidationError:
        return None


class NodeCounts(BaseModel):
    """How many files one node of a job has ready, in progress, done and failed (the fields, once)."""

    node_name: str | None = None
    node_type: str | None = None
    node_subtype: str | None = None
    ready: int = 0
    in_progress: int = 0
    success: int = 0
    failure: int = 0


class NodeStats(_Response, NodeCounts):
    """A node's file counts as the service sends them (extra fields kept)."""


class JobDetails(_Response):
    """A job's processing status and message, with per-node file counts."""

    id: str
    processing_status: JobStatus = JobStatus.UNKNOWN
    message: str | None = None
    node_stats: Items[NodeStats] = Field(default_factory=list)


class FailedFile(_Response):
    """A file a job failed to process, with the error."""

    document: str
    error: str = ""


class JobFailedFiles(_Response):
    """The files a job failed to process."""

    failed_files: list[FailedFile] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Job events (platform dialect): the feed


JobEventType = Literal["job.scheduled", "job.in_progress", "job.completed", "job.stopped", "job.failed"]
"""The service's job event types (feed, channels, webhooks). ``job.completed``: the job finished
processing, not that every file succeeded (its details say that)."""
JOB_EVENT_TYPES: tuple[str, ...] = typing.get_args(JobEventType)


def _comma_list(value: Any) -> Any:
    return [part.strip() for part in value.split(",")] if isinstance(value, str) else value


EventTypes = Annotated[list[JobEventType], BeforeValidator(_comma_list), Field(min_length=1)]
"""At least one of the five event types (a list, or one comma-separated string)."""


class ListNotificationsParams(_Query):
    """Query parameters of ``GET /notifications``; only the ones given are sent."""

    workflow_id: UUID | None = None
    event_types: EventTypes | None = None
    since: Zoned | None = None
    limit: Annotated[int, Field(strict=True, ge=1, le=100)] | None = None
    cursor: NonEmptyStr | None = None
    unread_only: bool | None = None


class JobEventPayload(_Response):
    """What a job event is about: the job and the status it reached."""

    job_id: str | None = None
    status: JobStatus = JobStatus.UNKNOWN


class Notification(_Response):
    """
    One job event of the service's feed. ``event_type`` is kept as sent: one of :data:`JOB_EVENT_TYPES`,
    or a type the service adds later (never an error). ``workflow_id`` None: an account-level event.
    """

    id: str
    event_type: str
    payload: JobEventPayload = Field(default_factory=JobEventPayload)
    created_at: Moment | None = None
    workflow_id: str | None = None
    is_read: bool | None = None


class NotificationPage(_Response):
    """One page of the feed, newest first; ``next_cursor`` asks for the next (older) page, None at the end."""

    events: Items[Notification] = Field(default_factory=list)
    next_cursor: str | None = None


class MarkNotificationsRead(_Request):
    """The body of ``POST /notifications/mark-read``: up to 100 events by id, or all created ``before``."""

    notification_ids: Annotated[list[NonEmptyStr], Field(min_length=1, max_length=100)] | None = None
    before: Zoned | None = None
    workflow_id: UUID | None = None

    @model_validator(mode="after")
    def _ids_or_before(self) -> MarkNotificationsRead:
        if (self.notification_ids is None) == (self.before is None):
            raise ValueError("give notification_ids or before, not both and not neither")
        if self.workflow_id is not None and self.before is None:
            raise ValueError("workflow_id narrows only a mark of the events before a time")
        return self


class NotificationCount(_Response):
    """How many events: the unread count's ``unread_count``, a mark-read's ``marked_count``."""

    count: int = Field(validation_alias=AliasChoices("unread_count", "marked_count", "count"))


# --------------------------------------------------------------------------------------------------
# Notification channels (platform dialect): where the service pushes job events


def _https_url(value: str) -> str:
    """Check a webhook URL: HTTPS (plain HTTP only to a loopback host, which the live service refuses)."""
    parts = urlsplit(value)
    loopback = parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1", "::1")
    if not parts.hostname or (parts.scheme != "https" and not loopback):
        raise ValueError("a webhook url must be an https:// URL with a host")
    return value


def _secret_size(value: SecretStr) -> SecretStr:
    size = len(value.get_secret_value().encode())
    if size and not 24 <= size <= 75:  # the value is never in the message
        raise ValueError(f"a channel secret is 24 to 75 bytes long (or empty: the service's own); got {size}")
    return value


class EmailChannelConfig(_Request):
    """Where an email channel sends: one recipient, a reply-to and copies."""

    recipient_email: NonEmptyStr
    reply_to: str | None = None
    cc: list[str] | None = None


class UpdateChannel(_Request):
    """The body of a channel update (``PATCH``): only the fields given are sent."""

    event_types: EventTypes | None = None
    description: Annotated[str, Field(max_length=255)] | None = None
    enabled: bool | None = None
    url: Annotated[str, AfterValidator(_https_url)] | None = None
    secret: Annotated[Secret, AfterValidator(_secret_size)] | None = None
    """Write-only: signs the webhook deliveries (24 to 75 bytes); an empty string removes it."""
    email_config: EmailChannelConfig | None = None

    @model_validator(mode="after")
    def _some_field(self) -> UpdateChannel:
        if not self.model_fields_set:
            raise ValueError("a channel update needs at least one field")
        return self


class CreateChannel(UpdateChannel):
    """The body of a channel create: a webhook (``url``) or an email channel (``email_config``)."""

    channel_type: Literal["webhook", "email"]
    event_types: EventTypes

    @model_validator(mode="after")
    def _destination(self) -> CreateChannel:
        if self.channel_type == "webhook" and (self.url is None or self.email_config is not None):
            raise ValueError("a webhook channel needs a url (and no email_config)")
        if self.channel_type == "email" and (self.email_config is None or self.url or self.secret):
            raise ValueError("an email channel needs an email_config (and no url or secret)")
        return self


class NotificationChannel(_Response):
    """
    A notification channel as the service answers it (never with its secret). A value under a
    secret-looking key a service may add is kept as a secret all the same (:func:`is_secret_field`).
    """

    id: str
    channel_type: str | None = None
    event_types: Items[str] = Field(default_factory=list)
    description: str | None = None
    enabled: bool | None = None
    url: str | None = None
    email_config: dict[str, Any] | None = None
    created_at: Moment | None = None
    updated_at: Moment | None = None

    @model_validator(mode="before")
    @classmethod
    def _secrets_kept_secret(cls, data: Any) -> Any:
        return _wrap_secrets(data)


def _channels_in(data: Any) -> Any:
    """Read a channel listing: a list, or the SDK's ``{"items": [...]}``."""
    return data.get("items", data.get("channels")) if isinstance(data, Mapping) else data


ChannelList = Annotated[list[NotificationChannel], BeforeValidator(_channels_in)]


# --------------------------------------------------------------------------------------------------
# Output elements


class PermissionGrant(_Response):
    """The users and groups granted one action on a document."""

    users: Items[str] = Field(default_factory=list)
    groups: Items[str] = Field(default_factory=list)


PermissionAction = Literal["read", "update", "delete"]


class DataSource(_Response):
    """
    ``metadata.data_source``: ``permissions_data`` is a list of single-key objects
    (``read``/``update``/``delete`` → users and groups). Other keys a newer server adds are kept.
    """

    permissions_data: list[dict[str, PermissionGrant]] | None = None

    def permissions(self, action: PermissionAction) -> PermissionGrant:
        """Every user and group granted ``action``, merged over all entries (empty when none)."""
        users: list[str] = []
        groups: list[str] = []
        for entry in self.permissions_data or []:
            grant = entry.get(action)
            if grant is not None:
                users.extend(u for u in grant.users if u not in users)
                groups.extend(g for g in grant.groups if g not in groups)
        return PermissionGrant(users=users, groups=groups)


class ElementMetadata(_Response):
    """Where an element came from: file name and type, page, data source and permissions."""

    filename: str | None = None
    filetype: str | None = None
    page_number: int | None = None
    data_source: DataSource | None = None


class Element(_Response):
    """One element of a processed document (title, paragraph, table, ...) with its metadata."""

    type: str
    element_id: str
    text: str = ""
    metadata: ElementMetadata = Field(default_factory=ElementMetadata)
