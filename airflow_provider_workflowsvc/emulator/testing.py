"""
Run an emulator for tests: ``with running_emulator() as emu: ...``.

In-process mode serves a real uvicorn server on a free loopback port from a background thread;
``subprocess=True`` runs ``python -m airflow_provider_workflowsvc.emulator`` instead (for restarts and
signal tests). Either way the :class:`EmulatorHandle` talks to the ``/_emulator`` control endpoints over
HTTP, so its methods behave the same in both modes.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess as sp
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from airflow_provider_workflowsvc.emulator.config import (
    API_PREFIX,
    CONTROL_PREFIX,
    DEFAULT_TOKEN,
    EmulatorConfig,
    ServerSettings,
)
from airflow_provider_workflowsvc.emulator.dialect import DIALECTS, Dialect

__all__ = ["EmulatorHandle", "running_emulator"]

START_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0
_URL_MARKER = "listening on "


class EmulatorHandle:
    """A running emulator: where it is, its credentials, and its control API."""

    def __init__(
        self,
        root_url: str,
        token: str,
        api_key: str | None,
        pid: int | None = None,
        dialect: Dialect = "spec",
    ) -> None:
        self.root_url = root_url
        self.base_url = root_url + API_PREFIX
        self.token, self.api_key, self.pid, self.dialect = token, api_key, pid, dialect
        self._client = httpx.Client(
            base_url=root_url + CONTROL_PREFIX, headers={"authorization": f"Bearer {token}"}, timeout=30.0
        )

    def __repr__(self) -> str:
        return f"EmulatorHandle(base_url={self.base_url!r}, pid={self.pid}, dialect={self.dialect!r})"

    def close(self) -> None:
        self._client.close()

    def control_headers(self) -> dict[str, str]:
        """Return the headers a request to the control API (``/_emulator/...``) needs."""
        return {"authorization": f"Bearer {self.token}"}

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._client.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def api_client(self, **kwargs: Any) -> httpx.Client:
        """Return an httpx.Client for ``/api/v1`` with this emulator's credentials; close it when done."""
        headers = {"authorization": f"Bearer {self.token}"}
        if self.api_key:
            headers["service-api-key"] = self.api_key
        return httpx.Client(base_url=self.base_url, headers=headers, **{"timeout": 30.0, **kwargs})

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/health")
        return result

    def reset(self) -> None:
        """Drop every resource and job; clear faults and the request log; default config and clock."""
        self._call("POST", "/reset")

    def configure(self, *, processing_delay: float | None = None, **settings: Any) -> dict[str, Any]:
        """Change run-time settings (``processing_delay`` in emulator seconds per file per node, ...)."""
        if processing_delay is not None:
            settings["processing_delay"] = processing_delay
        result: dict[str, Any] = self._call("PUT", "/config", json=settings)
        return result

    def config(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/config")
        return result

    def set_faults(self, **spec: Any) -> dict[str, Any]:
        """Replace the fault rules: ``rules=[{...}, ...], seed=n`` or one rule's fields directly."""
        result: dict[str, Any] = self._call("PUT", "/faults", json=spec)
        return result

    def add_fault(self, **rule: Any) -> dict[str, Any]:
        """Add one fault rule (its fields: ``method``, ``path``, ``errors``, ...) after the active ones."""
        result: dict[str, Any] = self._call("POST", "/faults/rules", json=rule)
        return result

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    def jobs(self) -> list[dict[str, Any]]:
        """Return every job, oldest first: id, workflow, status, created_at, scheduled, files as received."""
        result: list[dict[str, Any]] = self._call("GET", "/jobs")
        return result

    def destination_writes(self, destination: str) -> list[dict[str, Any]]:
        """Return what a destination connector (id or name) received: job_id, document, elements."""
        result: list[dict[str, Any]] = self._call(
            "GET", f"/destinations/{quote(destination, safe='')}/writes"
        )
        return result

    def requests(
        self, *, method: str | None = None, path_contains: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the request log (oldest first): method, path, query, status, fault, time, duration_ms."""
        params = {k: v for k, v in (("method", method), ("path_contains", path_contains)) if v is not None}
        result: list[dict[str, Any]] = self._call("GET", "/requests", params=params)
        return result

    def clear_requests(self) -> None:
        self._call("DELETE", "/requests")

    def advance_clock(self, seconds: float) -> None:
        """Move emulator time forward: jobs progress and due schedules fire."""
        self._call("POST", "/clock/advance", json={"seconds": seconds})

    def now(self) -> datetime:
        """Emulator time."""
        return datetime.fromisoformat(self._call("GET", "/clock")["now"])


class _ThreadedServer:
    """A uvicorn server on its own event loop in a daemon thread."""

    def __init__(self, settings: ServerSettings, config: EmulatorConfig) -> None:
        from airflow_provider_workflowsvc.emulator.app import create_app
        from airflow_provider_workflowsvc.emulator.server import EmulatorServer, bind_socket, uvicorn_config

        self.sock = bind_socket("127.0.0.1", 0)
        self.server = EmulatorServer(uvicorn_config(create_app(settings, config)))
        self.thread = threading.Thread(target=self._run, name="workflowsvc-emulator", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as exc:  # reported by start()
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the emulator did not start: {self.error!r}")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(STOP_TIMEOUT)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(STOP_TIMEOUT)
        self.sock.close()


def _read_url(proc: sp.Popen[str], timeout: float) -> str:
    """Return the base URL the emulator prints, or an error when it exits or stays silent."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                if not line:
                    break
                if _URL_MARKER in line:
                    return line.split(_URL_MARKER, 1)[1].strip()
    raise RuntimeError(f"the emulator subprocess did not report its URL (exit code {proc.poll()})")


def stop_process(proc: sp.Popen[Any], timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM the process, wait, SIGKILL if it is still running; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except sp.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return int(proc.returncode)


def emulator_command(
    *,
    db: str | None = None,
    processing_delay: float | None = None,
    dialect: Dialect | None = None,
    extra_args: list[str] | None = None,
) -> list[str]:
    """Return the command line of an emulator subprocess on a free loopback port."""
    command = [
        sys.executable,
        "-m",
        "airflow_provider_workflowsvc.emulator",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    if db:
        command += ["--db", db]
    if processing_delay is not None:
        command += ["--processing-delay", repr(processing_delay)]
    if dialect is not None:
        command += ["--dialect", dialect]
    return command + list(extra_args or [])


@contextlib.contextmanager
def _subprocess_emulator(
    token: str, api_key: str | None, db: str | None, processing_delay: float, dialect: Dialect
) -> Iterator[EmulatorHandle]:
    env = {**os.environ, "WORKFLOWSVC_EMULATOR_TOKEN": token, "PYTHONUNBUFFERED": "1"}
    env.pop("WORKFLOWSVC_EMULATOR_API_KEY", None)
    if api_key:
        env["WORKFLOWSVC_EMULATOR_API_KEY"] = api_key
    command = emulator_command(db=db, processing_delay=processing_delay, dialect=dialect)
    with sp.Popen(command, stdout=sp.PIPE, text=True, env=env) as proc:
        try:
            base_url = _read_url(proc, START_TIMEOUT)
            root = base_url.removesuffix(API_PREFIX)
            handle = EmulatorHandle(root, token, api_key, pid=proc.pid, dialect=dialect)
            try:
                yield handle
            finally:
                handle.close()
        finally:
            stop_process(proc)


@contextlib.contextmanager
def running_emulator(
    *,
    token: str = DEFAULT_TOKEN,
    api_key: str | None = None,
    db: str | None = None,
    processing_delay: float = 0.05,
    subprocess: bool = False,
    dialect: Dialect = "spec",
    **fault_options: Any,
) -> Iterator[EmulatorHandle]:
    """
    Run an emulator for the duration of the block (in this process, or as a subprocess).

    ``dialect`` is how it answers: ``spec`` (the spec's examples) or ``platform`` (the live service).

    ``fault_options`` are the fields of one fault rule (``latency``, ``errors``, ``rate``, ``count``,
    ``method``, ``path``, ``seed``, ...) or ``rules=[...]``; they are set once it is up.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unknown emulator dialect {dialect!r}; expected one of: {', '.join(DIALECTS)}")
    if subprocess:
        with _subprocess_emulator(token, api_key, db, processing_delay, dialect) as handle:
            if fault_options:
                handle.set_faults(**fault_options)
            yield handle
        return
    server = _ThreadedServer(
        ServerSettings(token, api_key, db, dialect), EmulatorConfig(processing_delay=processing_delay)
    )
    server.start()
    from airflow_provider_workflowsvc.emulator.server import root_url

    handle = EmulatorHandle(root_url(server.sock), token, api_key, dialect=dialect)
    try:
        if fault_options:
            handle.set_faults(**fault_options)
        yield handle
    finally:
        handle.close()
        server.stop()
