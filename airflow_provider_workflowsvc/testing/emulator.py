"""The emulator as a test sees it: a small typed handle to script the service and see what it was asked."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle

__all__ = [
    "DestinationWrite",
    "EmulatedFile",
    "EmulatedJob",
    "EmulatorConnection",
    "RecordedRequest",
    "ServiceEmulator",
    "emulator_for_tests",
]

API_PREFIX = "/api/v1"
FAULT_SEED = 0
"""The seed of the emulator's random choices after each reset: a flaky test fails the same requests."""
Status = Literal[429, 500, 502, 503, 504, "drop", "unreadable"]
"""What a failed request gets: an error status, a connection cut inside the answer (``drop``), or a
2xx answer nobody can read (``unreadable``)."""


@dataclass(frozen=True)
class EmulatedFile:
    """One input of a job: its name as the service received it, and why it failed (None: processed)."""

    name: str
    error: str | None

    @property
    def failed(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class EmulatedJob:
    """One job of the emulator, as it is now (its status in the spec's spelling: ``in progress``, ...)."""

    id: str
    workflow_id: str
    workflow_name: str
    status: str
    created_at: datetime
    scheduled: bool
    """Started by the workflow's own schedule (not by a run request)."""
    files: tuple[EmulatedFile, ...]

    @property
    def failed_files(self) -> list[str]:
        return [f.name for f in self.files if f.failed]


@dataclass(frozen=True)
class DestinationWrite:
    """One document a destination connector received: its job, its name, the elements written."""

    job_id: str
    document: str
    elements: list[dict[str, Any]]
    """As the workflow's nodes left them: chunks (``CompositeElement``...), ``embeddings`` if embedded."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the service received: ``status`` None when no answer was delivered."""

    method: str
    path: str
    query: str
    status: int | None
    fault: str | None
    """What the emulator did to it (``503``, ``drop after processing``, ``clock +60s``, ...), or None."""


def route_regex(route: str) -> str:
    """
    Return the regex of the API paths a route names: a path under ``/api/v1`` where ``*`` stands for any
    characters (``/`` too), with or without a trailing slash (``/workflows/*/run``, ``/jobs*``).
    """
    if not route.startswith("/"):
        raise ValueError(f"a route starts with '/', as /workflows/*/run does: got {route!r}")
    literal = "".join(".*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", route))
    return f"^{re.escape(API_PREFIX)}{literal.rstrip('/')}/?$"


class ServiceEmulator:
    """
    A running emulator of the Workflow Service, reset before each test that uses it (see the pytest
    fixture ``workflowsvc_emulator``).

    Script what the test needs: requests that fail (:meth:`fail_requests`) or are slow
    (:meth:`slow_requests`), files that fail (:meth:`fail_files`), how long processing takes
    (:meth:`set_processing_time`), how a workflow's jobs end (:meth:`end_jobs`), the clock
    (:meth:`advance_clock`). Then look at what happened: :meth:`jobs`, :meth:`received_files`,
    :meth:`destination_writes`, :meth:`requests`. Everything goes through the emulator's control API
    (``/_emulator``).
    """

    def __init__(self, handle: EmulatorHandle) -> None:
        self._handle = handle

    def __repr__(self) -> str:
        return f"ServiceEmulator(base_url={self.base_url!r}, dialect={self.dialect!r})"

    @property
    def base_url(self) -> str:
        """The API's base URL (``http://127.0.0.1:PORT/api/v1``): the connection's host."""
        return self._handle.base_url

    @property
    def dialect(self) -> str:
        """How it answers: ``spec`` (the spec's examples) or ``platform`` (the live service)."""
        return self._handle.dialect

    def connection(self, **extra: Any) -> str:
        """Return an Airflow connection to this emulator as ``AIRFLOW_CONN_<ID>`` JSON (``extra`` added)."""
        handle = self._handle
        extras = {"api_key": handle.api_key, "retry_wait": 0.1, "retry_max_wait": 1.0, **extra}
        conn = {"conn_type": "workflowsvc", "host": self.base_url, "password": handle.token, "extra": extras}
        return json.dumps(conn)

    # -- scripting -----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every connector, workflow and job; no faults, default settings, real time."""
        self._handle.reset()
        self._handle.set_faults(rules=[], seed=FAULT_SEED)

    def fail_requests(
        self,
        method: str,
        route: str,
        *,
        status: Status = 503,
        times: int | None = None,
        rate: float = 1.0,
        after: bool = False,
        latency: float = 0.0,
    ) -> None:
        """
        Make requests to a route fail: ``fail_requests("POST", "/workflows/*/run", status=502)``.

        :param method: ``GET``, ``POST``, ... or ``*`` for any.
        :param route: the path under ``/api/v1``; ``*`` matches any characters.
        :param status: 429, 500, 502, 503, 504; ``drop`` (the connection is cut inside the answer) or
            ``unreadable`` (a 2xx answer nobody can read).
        :param times: how many requests fail (None: every one).
        :param rate: the fraction of the matching requests that fail (seeded: the same ones each run).
        :param after: the service acts on the request first (a run creates its job), then the answer
            is lost: what a gateway timing out after the backend answered does.
        :param latency: seconds the answer is held before it fails.
        """
        self._add_rule(method, route, errors=[status], count=times, rate=rate, latency=latency, after=after)

    def slow_requests(self, method: str, route: str, *, seconds: float, times: int | None = None) -> None:
        """Hold the answers to a route for ``seconds`` (the service acts on them afterwards)."""
        self._add_rule(method, route, latency=seconds, count=times)

    def fail_files(self, *patterns: str) -> None:
        """
        Make the files whose names match one of ``patterns`` (globs, e.g. ``*.pdf``) fail in new jobs,
        whatever their content. The names are those the service receives (uploads, a source's
        documents); a provider that marks upload names adds its marker before the extension.
        """
        current = self._handle.config()["failing_files"]
        self._handle.configure(failing_files=[*current, *patterns])

    def end_jobs(self, status: Literal["failed", "stopped"], *, workflow: str = "*") -> None:
        """Make the new jobs of the workflows named like ``workflow`` (a glob) end with ``status``."""
        current = self._handle.config()["job_endings"]
        self._handle.configure(job_endings={**current, workflow: status})

    def set_processing_time(self, seconds: float) -> None:
        """Set the emulator seconds each file spends in each node of a workflow (default 0.05)."""
        self._handle.configure(processing_delay=seconds)

    def advance_clock(self, seconds: float, *, when: tuple[str, str] | None = None) -> None:
        """
        Move the emulator's clock forward: jobs progress, due schedules start their jobs.

        :param when: ``(method, route)``: move it only when the first such request arrives, before
            the service answers it (e.g. ``("GET", "/jobs")``: when a sensor first lists the jobs).
        """
        if when is None:
            self._handle.advance_clock(seconds)
            return
        method, route = when
        self._add_rule(method, route, advance_clock=seconds, count=1)

    def now(self) -> datetime:
        """Return the emulator's time: real time plus every :meth:`advance_clock` since the reset."""
        return self._handle.now()

    def _add_rule(self, method: str, route: str, *, after: bool = False, **fields: Any) -> None:
        rule = {"method": method, "path_regex": route_regex(route), **fields}
        self._handle.add_fault(**rule, phase="after" if after else "before")

    # -- what happened ---------------------------------------------------------------------------------

    def jobs(self, *, workflow: str | None = None) -> list[EmulatedJob]:
        """Return the jobs (oldest first), or those of the workflow of that name or id."""
        jobs = [_job(record) for record in self._handle.jobs()]
        if workflow is None:
            return jobs
        return [j for j in jobs if workflow in (j.workflow_name, j.workflow_id)]

    def received_files(self) -> list[str]:
        """Return the names of every file the service received, job after job."""
        return [f.name for job in self.jobs() for f in job.files]

    def destination_writes(self, destination: str) -> list[DestinationWrite]:
        """
        Return what a destination connector (its name or id) received, document by document, oldest job
        first: the documents through every node of the workflow by now (a failed file writes nothing).
        """
        return [
            DestinationWrite(w["job_id"], w["document"], w["elements"])
            for w in self._handle.destination_writes(destination)
        ]

    def requests(self, method: str | None = None, route: str | None = None) -> list[RecordedRequest]:
        """Return the API requests received (oldest first), those of a method and route if given."""
        pattern = re.compile(route_regex(route)) if route is not None else None
        return [
            RecordedRequest(r["method"], r["path"], r["query"], r["status"], r["fault"])
            for r in self._handle.requests(method=method if method not in (None, "*") else None)
            if pattern is None or pattern.search(r["path"])
        ]


@dataclass(frozen=True)
class EmulatorConnection:
    """An Airflow connection to the emulator, given to Airflow as the environment variable ``env_var``."""

    conn_id: str
    emulator: ServiceEmulator

    @property
    def env_var(self) -> str:
        return f"AIRFLOW_CONN_{self.conn_id.upper()}"


def _job(record: dict[str, Any]) -> EmulatedJob:
    return EmulatedJob(
        id=record["id"],
        workflow_id=record["workflow_id"],
        workflow_name=record["workflow_name"],
        status=record["status"],
        created_at=datetime.fromisoformat(record["created_at"]),
        scheduled=record["scheduled"],
        files=tuple(EmulatedFile(f["name"], f["error"]) for f in record["files"]),
    )


@contextlib.contextmanager
def emulator_for_tests(dialect: str = "spec") -> Iterator[ServiceEmulator]:
    """Run an emulator on a free loopback port with credentials of its own, for as long as the block."""
    try:
        from airflow_provider_workflowsvc.emulator.app import create_app  # noqa: F401 - needs the extra
        from airflow_provider_workflowsvc.emulator.testing import running_emulator
    except ImportError as exc:  # fastapi, uvicorn, ...: the extra is missing
        raise RuntimeError(
            f"the Workflow Service test kit needs the emulator: pip install "
            f"'airflow-provider-workflowsvc[emulator]' ({exc})"
        ) from exc
    token, api_key = f"kit-{secrets.token_hex(8)}", f"kit-{secrets.token_hex(8)}"
    with running_emulator(token=token, api_key=api_key, dialect=dialect) as handle:  # type: ignore[arg-type]
        emulator = ServiceEmulator(handle)
        emulator.reset()
        yield emulator
