"""Helpers of the reliability tests: a minimal task context, the emulator connection, where secrets hide."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from helpers import TaskStateStore


class FakeTI:
    """The part of a task instance the operators use outside ``dag.test()``: XCom push and pull."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return None


def task_context(store: TaskStateStore | None = None) -> dict[str, Any]:
    """A minimal task context: a task instance and (durable execution) a task state store."""
    return {"ti": FakeTI(), "task_state_store": store if store is not None else TaskStateStore()}


def use_connection(monkeypatch: pytest.MonkeyPatch, emulator: Any, **extra: Any) -> None:
    """Point ``workflowsvc_default`` at ``emulator`` with these connection extras."""
    conn = {
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": emulator.token,
        "extra": {"api_key": emulator.api_key, **extra},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))


def records_list_files(job: Any) -> bool:
    """Whether the service's job records list their input files (``input_file_ids``, platform dialect):
    the evidence that lets a task adopt a job whose run answer it never received."""
    return getattr(job, "input_file_ids", None) is not None


def pending_record(
    workflow_id: str, files: list[str], age: float = 0.0, marker: str | None = None
) -> dict[str, Any]:
    """A pending-run record, as a try that sent a run ``age`` seconds ago and died leaves it (``files``
    as sent: with ``marker`` in each name)."""
    import time

    return {"workflow_id": workflow_id, "sent_at": time.time() - age, "files": files, "marker": marker}


MARKER = re.compile(r"__wfsvc-[0-9a-f]{16}")
"""A run's marker in a name (``mark_uploads=True``); the tests' own file names never hold one."""


def documents_of(hook: Any, job_id: str) -> list[str]:
    """The file names a (completed) job processed, as the service wrote them into its outputs (in
    the user's names: any run's marker removed, also where the job record lists no files): the
    service's own record of which run a job belongs to, whatever its job records say."""
    job = hook.get_job(job_id)
    names = []
    for output in job.output_node_files:
        elements = hook.download_job_output(job_id, output.file_id, output.node_id)
        assert isinstance(elements, list)
        names.append(MARKER.sub("", str(elements[0].metadata.filename)))
    return sorted(names)


def texts_of(hook: Any, job_id: str) -> list[str]:
    """The text a (completed) job's outputs hold, per output: which file content the job processed
    (the truth when several runs send files of the same name)."""
    job = hook.get_job(job_id)
    texts = []
    for output in job.output_node_files:
        elements = hook.download_job_output(job_id, output.file_id, output.node_id)
        assert isinstance(elements, list)
        texts.append(" ".join(str(getattr(e, "text", "") or "") for e in elements))
    return sorted(texts)


class Sent(NamedTuple):
    """A request as the provider handed it to httpx's transport, with the timeouts it carried."""

    method: str
    path: str
    timeout: dict[str, float | None]
    """``connect``, ``read``, ``write``, ``pool`` seconds: what ends the request if no answer comes."""


def record_sent(monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """Record every request sent through httpx (sync and async clients), in order, with its timeouts:
    the evidence of what could end a request that gets no answer, whatever the machine's load."""
    sent: list[Sent] = []
    handle, ahandle = httpx.HTTPTransport.handle_request, httpx.AsyncHTTPTransport.handle_async_request

    def note(request: httpx.Request) -> None:
        sent.append(Sent(request.method, request.url.path, dict(request.extensions.get("timeout", {}))))

    def recorded(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        note(request)
        return handle(self, request)

    async def arecorded(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
        note(request)
        return await ahandle(self, request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", recorded)
    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", arecorded)
    return sent


Behaviour = Callable[[BaseHTTPRequestHandler], None]


class LoopbackServer:
    """A loopback HTTP server (a thread of this process) whose every request is answered by
    ``behaviour``, after its body is read; counts the bytes it sent."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.requests: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.on_body: Callable[[bytes], None] | None = None
        """Called with each chunk of a request body as it is read."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                server.requests.append(f"{self.command} {self.path}")
                left = int(self.headers.get("content-length") or 0)
                while left:
                    chunk = self.rfile.read(min(left, 65536))
                    left -= len(chunk)
                    if server.on_body is not None:
                        server.on_body(chunk)
                behaviour(self)

            def send(self, data: bytes) -> None:
                self.wfile.write(data)
                server.sent += len(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


# --------------------------------------------------------------------------------------------------
# Where a secret could end up after a dag.test() run


def database_file() -> Path:
    from airflow import settings

    assert settings.engine is not None
    assert settings.engine.url.get_backend_name() == "sqlite"
    return Path(str(settings.engine.url.database))


def database_files() -> list[Path]:
    """The metadata database's file and, where they exist, its ``-wal`` and ``-journal`` files."""
    db = database_file()
    return [p for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-journal")) if p.exists()]


_READ_EACH = (
    "import os, sys\nfor p in sys.argv[1:]: print(open(p, 'rb').read().hex() if os.path.exists(p) else '')"
)


def read_apart(paths: Sequence[Path]) -> list[bytes]:
    """
    The bytes of each of ``paths``, read by a child process. This process closing a descriptor of the
    metadata database would drop every SQLite lock it holds (POSIX); a worker process may then take
    itself for the last user and delete the ``-wal`` and ``-shm`` files this process's pooled
    connections still use, whose next reads fail with "disk I/O error" (docs/benchmarks.md).
    """
    command = [sys.executable, "-c", _READ_EACH, *map(str, paths)]
    read = subprocess.run(command, check=True, capture_output=True)
    return [bytes.fromhex(line) for line in read.stdout.decode().splitlines()]


def table_rows(model: Any, dag_id: str) -> list[Any]:
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(model).filter_by(dag_id=dag_id).all()
        session.expunge_all()
        return rows


def places_to_scan(output: Any, dag_id: str, emulator: Any) -> dict[str, str]:
    """
    Every place a secret could end up after a ``dag.test()`` run: the captured output (task and trigger
    logs), every file under ``$AIRFLOW_HOME``, the metadata database file (raw bytes), the run's XComs
    and rendered fields, and the emulator's request log.
    """
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel

    places: dict[str, str] = {"stdout": output.out, "stderr": output.err}
    airflow_home = Path(os.environ["AIRFLOW_HOME"])
    files = sorted(p for p in airflow_home.rglob("*") if p.is_file())
    for path, data in zip(files, read_apart(files), strict=True):
        places[f"file {path.relative_to(airflow_home)}"] = data.decode("utf-8", "replace")
    databases = database_files()
    for path, data in zip(databases, read_apart(databases), strict=True):
        places[f"database {path.name}"] = data.decode("latin-1")
    places["xcom values"] = json.dumps([str(x.value) for x in table_rows(XComModel, dag_id)])
    rendered = table_rows(RenderedTaskInstanceFields, dag_id)
    places["rendered fields"] = json.dumps([r.rendered_fields for r in rendered], default=str)
    places["emulator request log"] = json.dumps(emulator.requests())
    return places
