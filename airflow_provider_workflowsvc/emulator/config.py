"""Settings of the emulator: fixed start-up settings, run-time tunables and fault-injection rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from airflow_provider_workflowsvc.emulator.dialect import Dialect

__all__ = [
    "API_PREFIX",
    "CONTROL_PREFIX",
    "DEFAULT_CONNECTION_CHECK_DELAY",
    "DEFAULT_PROCESSING_DELAY",
    "DEFAULT_TOKEN",
    "EmulatorConfig",
    "FaultRule",
    "FaultSpec",
    "JobEnding",
    "ServerSettings",
    "WebhookSettings",
]

API_PREFIX = "/api/v1"
CONTROL_PREFIX = "/_emulator"
DEFAULT_TOKEN = "emulator-token"
DEFAULT_PROCESSING_DELAY = 0.05
DEFAULT_CONNECTION_CHECK_DELAY = 0.2

RedirectMode = Literal["off", "spec", "add", "strip"]
TimestampStyle = Literal["iso", "naive", "postgres"]
ListOrder = Literal["newest-first", "oldest-first"]
FaultKind = Literal[404, 429, 500, 502, 503, 504, "drop", "unreadable"]
FaultPhase = Literal["before", "after"]
JobEnding = Literal["failed", "stopped"]


@dataclass(frozen=True)
class ServerSettings:
    """What is fixed for the emulator's life: credentials and where state is kept."""

    token: str = DEFAULT_TOKEN
    api_key: str | None = None
    db: str | None = None
    dialect: Dialect = "spec"
    """How answers are spelled: ``spec`` (the spec's examples) or ``platform`` (the live service)."""

    def __repr__(self) -> str:
        api_key = "***" if self.api_key else None
        return f"ServerSettings(token='***', api_key={api_key}, db={self.db!r}, dialect={self.dialect!r})"


class EmulatorConfig(BaseModel):
    """Behaviour that tests may change at run time (``PUT /_emulator/config``)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    processing_delay: float = Field(default=DEFAULT_PROCESSING_DELAY, ge=0, le=3600)
    """Emulator seconds each file spends in each workflow node (also the time a job stays scheduled)."""
    connection_check_delay: float = Field(default=DEFAULT_CONNECTION_CHECK_DELAY, ge=0, le=3600)
    """Emulator seconds before a connection check reports its result."""
    redirect_slashes: RedirectMode = "off"
    """``off``: both slash forms served; ``spec``: the non-spec form of each collection redirects to the
    spec's form; ``add``: every path without a trailing slash redirects to the slash form; ``strip``:
    every path with a trailing slash redirects to the form without."""
    redirect_status: Literal[301, 302, 307, 308] = 307
    abandon_on_disconnect: bool = False
    """A request held by injected latency (before processing) whose client disconnects meanwhile is
    dropped unprocessed (the emulator's old behaviour). Default: it is processed all the same."""
    clock_skew: float = Field(default=0.0, ge=-86400, le=86400)
    """Seconds the service's clock is ahead (negative: behind) of the real time, in the job times it
    writes (``created_at``)."""
    timestamp_style: TimestampStyle = "iso"
    """How job times are written: ``iso`` (UTC, with its offset), ``naive`` (the local time of a
    service ``naive_zone_hours`` east of UTC, without a zone), ``postgres`` (``2026-11-24 10:00:00+00``)."""
    naive_zone_hours: float = Field(default=2.0, ge=-14, le=14)
    job_stamp_offset: float = Field(default=0.0, ge=-1e9, le=1e9)
    """Seconds added to the ``created_at`` written on the jobs created from now on: a replica whose clock
    is off, or a transaction stamped when it began and committed later (such a job appears in the
    listing after newer ones). Listings order jobs by the time written."""
    feed_faults: list[Literal["duplicate", "reorder"]] = Field(default_factory=list)
    """Faults of the job-event feed's answers: each event twice (``duplicate``), each page oldest first
    (``reorder``)."""
    feed_lag: dict[str, float] = Field(default_factory=dict)
    """Event type -> emulator seconds its events stay out of the feed (then appear with their own time:
    a reader that went past that time has lost them, a later catch-up finds them)."""
    jobs_list_order: ListOrder = "newest-first"
    jobs_list_file_ids: bool = True
    """Whether job listings show ``input_file_ids`` (platform dialect); False: only the job's own record
    (``GET /jobs/{id}``) does, as a service that lists fewer fields than it records."""
    jobs_list_cap: int | None = Field(default=None, ge=1)
    """At most this many jobs in a ``GET /jobs`` answer (after the filters, in ``jobs_list_order``)."""
    api_token: SecretStr | None = None
    """One credential the API accepts instead of the start-up ones (a credential rotated under running
    clients): as the bearer token, the ``service-api-key`` and the ``unstructured-api-key``; the start-up
    ones are then refused. The control API keeps the start-up token. Never shown in answers."""
    failure_detail: str | None = Field(default=None, max_length=2000)
    """Text added to the error of every file a job cannot process (and so to a failed job's message),
    as the live service quotes a location it could not read: what clients do with service text (which
    may hold credentials the user put in a URL) can be tested. Fixed per job when it is created."""
    allow_remote_source_download: bool = False
    """Let jobs of remote-source, local-destination workflows be downloaded (the spec allows only
    local-to-local), so element permissions from a remote source can be inspected."""
    failing_files: list[str] = Field(default_factory=list, max_length=100)
    """Glob patterns (case-sensitive) of file names that fail in the first node whatever their content:
    the names of uploads as the service receives them, and of a remote source's documents. Applies to
    the jobs created while it is set."""
    job_endings: dict[str, JobEnding] = Field(default_factory=dict, max_length=100)
    """Workflow name glob -> the status its new jobs end with once their files are through (``failed``
    or ``stopped``) instead of what the files decide; the first matching glob counts."""
    on_demand_max_files: int = Field(default=10, ge=1)
    """Most files one on-demand job (``POST /jobs/``) takes; more: 422."""
    on_demand_max_file_bytes: int = Field(default=10_000_000, ge=1)
    """Largest file (bytes) an on-demand job takes, the docs' 10 MB; larger: 413."""
    on_demand_launch_interval: float = Field(default=1.0, ge=0, le=86400)
    """Least emulator seconds between two on-demand job launches; sooner: 429 with ``Retry-After``."""
    on_demand_max_running: int = Field(default=5, ge=1)
    """Most on-demand jobs running at once; more stay ``SCHEDULED`` until one ends."""
    quota_exhausted: bool = False
    """Answer 402 "Insufficient API quota" to every request that would start processing (a run, an
    on-demand job)."""


class WebhookSettings(BaseModel):
    """
    Test-only switches of webhook delivery (``PUT /_emulator/webhooks``). Each fault's rate is the
    fraction of deliveries it affects (1: every one), drawn from a generator seeded by ``seed``.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    allow_http_loopback: bool = False
    """Accept ``http://`` channel URLs whose host is a loopback name or address (live: HTTPS only)."""
    delay: float = Field(default=0.0, ge=0, le=60)
    """Real seconds each delivery waits before it is sent (a change of these switches ends the wait)."""
    duplicate_rate: float = Field(default=0.0, ge=0, le=1)
    """Deliveries sent twice (the same message: the same ``webhook-id``, as a retry)."""
    drop_rate: float = Field(default=0.0, ge=0, le=1)
    """Deliveries never sent (recorded as ``dropped``)."""
    bad_signature_rate: float = Field(default=0.0, ge=0, le=1)
    """Deliveries signed with a wrong key."""
    reorder: int = Field(default=0, ge=0, le=100)
    """At least 2: deliveries are held until this many are due, then sent newest first (setting it
    below 2 releases the held ones at the next look)."""
    seed: int | None = None


class FaultRule(BaseModel):
    """
    Which requests to disturb and how.

    A rule matches requests by method and path (a glob on the full path, or a regex). Of the matching
    requests it affects a ``rate`` fraction, at most ``count`` of them: each affected request waits
    ``latency`` seconds, then gets one of ``errors`` (chosen at random) instead of being processed.
    ``advance_clock`` moves the emulator's clock forward as such a request arrives.

    With ``phase="after"`` the request is processed first (a run creates its job, a cancel stops
    it), then the latency and the error replace its answer: the work is done but the client never
    hears of it, like a gateway that times out after the backend answered.
    """

    model_config = ConfigDict(extra="forbid")

    method: str = "*"
    path: str = f"{API_PREFIX}/*"
    path_regex: str | None = None
    latency: float = Field(default=0.0, ge=0)
    errors: list[FaultKind] = Field(default_factory=list)
    rate: float = Field(default=1.0, ge=0, le=1)
    count: int | None = Field(default=None, ge=0)
    retry_after: float = Field(default=1.0, ge=0)
    phase: FaultPhase = "before"
    advance_clock: float = Field(default=0.0, ge=0)
    """Seconds the emulator's clock moves forward when an affected request arrives, before it is
    processed (due schedules fire): time passes at the moment a client asks."""

    @field_validator("errors", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, (str, int)):
            value = [value]
        if isinstance(value, list):
            return [_fault_kind(v) for v in value]
        return value

    @field_validator("method")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


def _fault_kind(value: Any) -> Any:
    if isinstance(value, str):
        for part in value.replace(",", " ").split():
            return int(part) if part.isdigit() else part.lower()
    return value


class FaultSpec(BaseModel):
    """Every active fault rule, plus the seed of the random choices (``None``: not reproducible)."""

    model_config = ConfigDict(extra="forbid")

    rules: list[FaultRule] = Field(default_factory=list)
    seed: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _single_rule(cls, data: Any) -> Any:
        """Accept the flat form ``{"latency": 2, "errors": [503], "seed": 1}`` as a one-rule spec."""
        if not isinstance(data, dict) or "rules" in data:
            return data
        rule = {k: v for k, v in data.items() if k != "seed"}
        return {"rules": [rule] if rule else [], "seed": data.get("seed")}
