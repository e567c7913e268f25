"""
Helpers the test modules import (``from helpers import ...``): fake service answers, dialect spellings,
DAG-bag plumbing, a task state store, a connection store and a clock the test moves. Fixtures live in
conftest.py, which imports from here too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, cast

# The DAG-bag plumbing is the test kit's (re-exported for the suite's modules).
from airflow_provider_workflowsvc.testing.dag_runs import (
    _one_api,
    dag_bag as dag_bag,
    serialize_dags,
    sync_dags_to_db as sync_dags_to_db,
)

TEST_TOKEN = "tok-test-9f3c1e"
TEST_API_KEY = "key-test-47ab20"
"""The credentials of the session emulator (conftest's ``emulator_server``)."""

MOCK_BASE_URL = "https://svc.test/api/v1"
"""The base URL of the respx-mocked service (conftest's ``mock_service``)."""

EMULATOR_DIALECTS = tuple(os.environ.get("WORKFLOWSVC_TEST_DIALECTS", "spec,platform").split(","))
"""The emulator dialects the suite runs against; ``./dev``'s matrix narrows it on older Airflow legs."""


def connect(emulator: Any, monkeypatch: Any) -> None:
    """Point ``workflowsvc_default`` at ``emulator`` (AIRFLOW_CONN_WORKFLOWSVC_DEFAULT JSON, a ``ui_url``)."""
    conn = {
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": emulator.token,
        "extra": {"api_key": emulator.api_key, "retry_wait": 0.05, "ui_url": "https://ui.example.test"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))


def hourly_workflow(name: str, conn_id: str = "workflowsvc_default") -> str:
    """Create a workflow the service runs every hour on two documents of an S3 source; return its id."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    with WorkflowServiceHook(conn_id) as hook:
        config = {"remote_url": "s3://scheduled/in/", "emulator_documents": 2}
        source = hook.create_source(f"{name}-in", "s3", config)
        return str(hook.create_workflow(name, "basic", source_id=source.id, schedule="every hour").id)


def load_ci_script(name: str) -> ModuleType:
    """Import the script ``ci/<name>.py`` (not a package) as the module ``name``."""
    path = Path(__file__).resolve().parents[1] / "ci" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_pytest(
    python: str | Path, folder: Path, *args: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """
    Run pytest in ``folder`` with ``python``, in an environment with no setting of this repository's
    (``env_extra``: the settings the test gives it).
    """
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "WORKFLOWSVC", "PYTEST", "OTEL_"))
    }
    env.pop("PYTHONPATH", None)
    env.update(env_extra or {})
    env["HOME"] = str(folder / "home")  # a CI runner's own home: Airflow writes ~/airflow when imported
    command = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def run_dag(dag: Any, **kwargs: Any) -> Any:
    """Serialize a DAG defined in a test to the DB, then ``dag.test()`` it; returns the DagRun."""
    serialize_dags(dag)
    return dag_test(dag, **kwargs)


_EXECUTION_API = SimpleNamespace(execution_api=None)


def dag_test(dag: Any, **kwargs: Any) -> Any:
    """
    ``dag.test()`` with one in-process Execution API for the process, as the test kit gives it: before
    3.3 Airflow builds one for each task (Cadwyn's versioned routers: 3.2's lineage runs spent 2.7x the
    CPU of 3.3's on it); 3.3 keeps one itself.
    """
    with _one_api(cast("Any", _EXECUTION_API)):
        return dag.test(**kwargs)


# --------------------------------------------------------------------------------------------------
# Run-and-wait surface (operators/jobs.py, sensors/job.py, triggers/job.py): service answers for respx

FAKE_WORKFLOW_ID = "0b7c6a9e-3f0e-4a51-9c7b-1d2e3f4a5b6c"


def job_json(
    job_id: str,
    status: str,
    *,
    workflow_id: str = FAKE_WORKFLOW_ID,
    outputs: Any = (),
    created_at: str | None = None,
) -> dict[str, Any]:
    """A job record as the service returns it; ``outputs`` are ``(file_id, node_id)`` pairs."""
    return {
        "id": job_id,
        "status": status,
        "workflow_id": workflow_id,
        "workflow_name": "wf",
        "created_at": created_at or "2026-01-01T00:00:00Z",
        "output_node_files": [{"file_id": f, "node_id": n} for f, n in outputs],
    }


def route_documents(router: Any, job_id: str, **documents: str) -> None:
    """Answer the download of each output file of ``job_id`` (``file_id=document``): its elements
    name the document it was made from."""
    for file_id, document in documents.items():
        element = {"type": "Title", "element_id": "e1", "text": "A", "metadata": {"filename": document}}
        router.get(f"/jobs/{job_id}/download", params={"file_id": file_id}).respond(json=[element])


def details_json(job_id: str, status: str, message: str = "", nodes: Any = ()) -> dict[str, Any]:
    """Job details; ``nodes`` are ``(name, ready, in_progress, success, failure)`` tuples."""
    stats = [
        {"node_name": n, "node_type": "partition", "node_subtype": "fast", "ready": r, "in_progress": i}
        | {"success": s, "failure": f}
        for n, r, i, s, f in nodes
    ]
    return {"id": job_id, "processing_status": status, "message": message, "node_stats": stats}


def failed_json(*files: tuple[str, str]) -> dict[str, Any]:
    """The failed-files answer for ``(document, error)`` pairs."""
    return {"failed_files": [{"document": d, "error": e} for d, e in files]}


# --------------------------------------------------------------------------------------------------
# What each emulator dialect sends (docs/emulator.md, "Dialects"), for tests that check raw answers.


def job_spelling(dialect: str, state: str, *, some_failed: bool = False) -> tuple[str, str, str]:
    """``(listing, record, details)`` spellings of a job ``state`` (``scheduled``, ``in progress``, ...)."""
    if dialect == "spec":
        listing = "im progress" if state == "in progress" else state
        return listing, state, state.upper().replace(" ", "_")
    upper = state.upper().replace(" ", "_")
    details = upper
    if state == "completed":
        details = "COMPLETED_WITH_ERRORS" if some_failed else "SUCCESS"
    return upper, upper, details


def check_spelling(dialect: str, status: str) -> str:
    """A connection-check status (``scheduled``, ``success``, ``failure``) as the dialect spells it."""
    return status.upper() if dialect == "platform" else status


def accepted_code(dialect: str) -> int:
    """The status code of a run or a connection-check start."""
    return 202 if dialect == "platform" else 200


SHARED_STATUS_POLL_ENV = "AIRFLOW__WORKFLOWSVC__SHARED_STATUS_POLL"
"""``[workflowsvc] shared_status_poll`` (on by default): tests of the shared poll pin it, whatever the
environment says; tests of the per-job poll turn it off."""


def write_good_and_empty(folder: Any) -> Any:
    """Write ``good.txt`` (processed) and ``empty.txt`` (failed by the service) into ``folder``."""
    (folder / "good.txt").write_text("Some text that the emulator processes.")
    (folder / "empty.txt").write_text("")
    return folder


def events_built(emulator: Any, job_id: str) -> int:
    """
    Events a trigger built for ``job_id``: the one read of the job's failed files a trigger makes, to
    build the event it fires (the emulator's request log: an event no busy log can drop).
    """
    reads = emulator.requests(method="GET", path_contains=f"/jobs/{job_id}/failed-files")
    return sum(1 for r in reads if r["status"] == 200)


# --------------------------------------------------------------------------------------------------
# The Airflow connection as the hooks read it, and the settings cache's clock


class ManualClock:
    """A monotonic clock (seconds) that only the test moves: ``clock.now += 60``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TaskStateStore:
    """
    The task state store durable execution gives a task (Airflow 3.3's ``task_state_store``): it keeps
    JSON, as the real one does, so a task writing what JSON cannot hold fails here too; ``writes``
    counts the ``set`` calls.
    """

    def __init__(self, **values: Any) -> None:
        self.values: dict[str, Any] = {key: _as_json(value) for key, value in values.items()}
        self.writes = 0

    def get(self, key: str, default: Any = None) -> Any:
        return _as_json(self.values[key]) if key in self.values else default

    def set(self, key: str, value: Any, **kwargs: Any) -> None:
        self.writes += 1
        self.values[key] = _as_json(value)

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


class ConnectionStore:
    """
    Airflow's connection store for connections to one emulator, as the hooks read them (``install``):
    credentials the test can rotate, a store that can fail (``failing``: ``timeout``, ``absent`` or
    ``empty``), and the count of reads that worked (``reads``) and failed (``failed``).
    """

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.token, self.api_key = emulator.token, emulator.api_key
        self.failing: str | None = None
        self.reads = self.failed = 0
        self._lock = threading.Lock()

    def install(self, monkeypatch: Any) -> None:
        """Make both hooks read their connection from this store."""
        from airflow_provider_workflowsvc.hooks.workflowsvc import (
            WorkflowServiceAsyncHook,
            WorkflowServiceHook,
        )

        monkeypatch.setattr(WorkflowServiceAsyncHook, "_aget_connection", lambda hook: self.aconnection(hook))
        monkeypatch.setattr(
            WorkflowServiceHook, "get_connection", lambda hook, conn_id: self.connection(conn_id)
        )

    def rotate_to(self, credential: str) -> None:
        """The connection gets the new credential, as its token and its API key (the live service's)."""
        self.token = self.api_key = credential

    def connection(self, conn_id: str) -> Any:
        from airflow.sdk import Connection
        from airflow.sdk.exceptions import AirflowNotFoundException

        with self._lock:
            failing = self.failing
            if failing is None:
                self.reads += 1
            else:
                self.failed += 1
        if failing == "timeout":
            raise TimeoutError("the secrets backend did not answer within 5 s")
        if failing == "absent":
            raise AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
        extra = json.dumps({"api_key": self.api_key, "retry_wait": 0.05})
        host = "" if failing == "empty" else self.emulator.base_url
        return Connection(
            conn_id=conn_id, conn_type="workflowsvc", host=host, password=self.token, extra=extra
        )

    async def aconnection(self, hook: Any) -> Any:
        await asyncio.sleep(0)
        return self.connection(hook.workflowsvc_conn_id)


class MetricsRecorder:
    """Stands in for Airflow's ``Stats`` (conftest's ``recorded_metrics``): keeps what the provider emits."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float, dict[str, str]]] = []
        """``(name, value, tags)``: a counter's count, a timer's seconds."""

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, str] | None = None) -> None:
        self.sent.append((stat, count, dict(tags or {})))

    def timing(self, stat: str, dt: Any, *, tags: dict[str, str] | None = None) -> None:
        self.sent.append((stat, dt.total_seconds(), dict(tags or {})))

    def named(self, name: str, **tags: str) -> list[tuple[str, float, dict[str, str]]]:
        """What was sent under ``name`` (``workflowsvc.`` added), with at least these tags."""
        full = f"workflowsvc.{name}"
        return [s for s in self.sent if s[0] == full and all(s[2].get(k) == v for k, v in tags.items())]

    def total(self, name: str, **tags: str) -> float:
        return sum(value for _, value, _ in self.named(name, **tags))

    def names(self) -> set[str]:
        return {name for name, _, _ in self.sent}


class TriggererSupervisor:
    """
    The triggerer's supervisor as a trigger's ``on_kill`` meets it (``SUPERVISOR_COMMS``): it answers
    ``GetTaskStates`` with ``state`` for the asked task (an exception: raised instead; an
    ``asyncio.Event``: no answer until it is set) and keeps those
    asks; anything else (the secrets a hook masks) it takes without an answer.
    """

    def __init__(self, state: Any) -> None:
        self.state = state
        self.asked: list[Any] = []

    def send(self, msg: Any) -> None:
        return None

    async def asend(self, msg: Any) -> Any:
        from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

        if not isinstance(msg, GetTaskStates):
            return None
        self.asked.append(msg)
        if isinstance(self.state, BaseException):
            raise self.state
        if isinstance(self.state, asyncio.Event):  # no answer before the event is set
            await self.state.wait()
            return None
        (task_id,) = msg.task_ids
        key = task_id if msg.map_index is None or msg.map_index < 0 else f"{task_id}_{msg.map_index}"
        return TaskStatesResult(task_states={run_id: {key: self.state} for run_id in msg.run_ids})
