"""Test setup: an isolated Airflow home (set before anything imports airflow) and the emulator fixtures."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="wfsvc-airflow-home-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).parent / "dags")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ.pop("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", None)
# Tests poll every 0.02-0.5 s to stay fast; the floor for real deployments is 1 s (tests of the floor
# itself set it back). Subprocesses (local Airflow, task processes) inherit it.
os.environ["AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL"] = "0.01"

import json  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

# --------------------------------------------------------------------------------------------------
# Airflow-version markers: @pytest.mark.airflow_min("3.3", reason=...) runs a test only on Airflow >= 3.3,
# @pytest.mark.airflow_below("3.3", reason=...) only on older Airflow (a fallback's own test). Elsewhere
# the test is skipped, the reason printed in pytest's skip summary.


def _version_gate(item: pytest.Item, running: tuple[int, int], shown: str) -> str | None:
    """Why ``item`` cannot run on Airflow ``running`` (None: it can)."""
    from airflow_provider_workflowsvc._compat import _minor

    for mark in item.iter_markers("airflow_min"):
        if running < _minor(mark.args[0]):
            why = mark.kwargs.get("reason", "a feature of that release")
            return f"needs Airflow >= {mark.args[0]} ({why}); this is Airflow {shown}"
    for mark in item.iter_markers("airflow_below"):
        if running >= _minor(mark.args[0]):
            why = mark.kwargs.get("reason", "a fallback for older releases")
            return f"only on Airflow < {mark.args[0]} ({why}); this is Airflow {shown}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import airflow

    from airflow_provider_workflowsvc._compat import AIRFLOW_VERSION

    for item in items:
        reason = _version_gate(item, AIRFLOW_VERSION, airflow.__version__)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


TEST_TOKEN = "tok-test-9f3c1e"
TEST_API_KEY = "key-test-47ab20"


@pytest.fixture(autouse=True)
def _fresh_secrets_masker() -> None:
    """Each test starts with no registered secrets, as each Airflow task process does (a connector
    config of unknown type masks all its strings; that must not carry over into later tests)."""
    try:
        from airflow.sdk._shared.secrets_masker import reset_secrets_masker
    except ImportError:  # pragma: no cover - older task SDK: nothing to reset between tests
        return
    reset_secrets_masker()


@pytest.fixture(autouse=True)
def _fresh_settings_cache() -> None:
    """Each test reads its connections again, as a new process does (the async hooks cache them)."""
    from airflow_provider_workflowsvc.hooks._settings import SETTINGS_CACHE

    SETTINGS_CACHE.clear()


EMULATOR_DIALECTS = tuple(os.environ.get("WORKFLOWSVC_TEST_DIALECTS", "spec,platform").split(","))
"""The emulator dialects the suite runs against; ``./dev``'s matrix narrows it on older Airflow legs."""


@pytest.fixture(scope="session", params=EMULATOR_DIALECTS)
def emulator_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One emulator (real uvicorn on a loopback port) per dialect for the whole session.

    Every test that uses it runs against both dialects: ``spec`` (the spec's own examples) and
    ``platform`` (what the live service sends); the dialect is in the test id.
    """
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    with running_emulator(token=TEST_TOKEN, api_key=TEST_API_KEY, dialect=request.param) as emu:
        yield emu


@pytest.fixture
def emulator(emulator_server: Any) -> Any:
    """The session emulator, emptied before each test (no resources, jobs, faults or request log)."""
    emulator_server.reset()
    return emulator_server


@pytest.fixture
def settings(emulator: Any) -> Any:
    """Hook settings pointing at the emulator, with short retry waits."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    return ConnectionSettings(
        base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key, retry_wait=0.05
    )


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A fresh Airflow metadata DB (SQLite in the temp AIRFLOW_HOME), once per session."""
    from airflow.utils import db

    db.resetdb()


@pytest.fixture
def workflowsvc_conn(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``workflowsvc_default`` pointing at the emulator, given as AIRFLOW_CONN_WORKFLOWSVC_DEFAULT JSON."""
    conn = {
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": emulator.token,
        "extra": {"api_key": emulator.api_key, "retry_wait": 0.05},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))
    return emulator


def dag_bag(folder: str | os.PathLike[str] = os.devnull, *, collect_dags: bool = False) -> Any:
    """A ``DagBag`` of ``folder`` (from its home on the running Airflow: it moved in 3.2)."""
    from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_2_PLUS

    if AIRFLOW_V_3_2_PLUS:
        from airflow.dag_processing.dagbag import DagBag
    else:
        from airflow.models.dagbag import DagBag
    return DagBag(dag_folder=str(folder), collect_dags=collect_dags)


def sync_dags_to_db(bag: Any) -> None:
    """Write a DagBag's DAGs to the DB as the ``dags-folder`` bundle, so that ``dag.test()`` can run them.

    The ``dags-folder`` bundle row must exist before a DAG of that bundle is written.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_2_PLUS

    DagBundlesManager().sync_bundles_to_db()
    if AIRFLOW_V_3_2_PLUS:
        from airflow.dag_processing.dagbag import sync_bag_to_db
    elif AIRFLOW_V_3_1_PLUS:
        from airflow.models.dagbag import sync_bag_to_db
    else:  # Airflow 3.0: only a DagBag that parsed the file sets relative_fileloc, which the DB needs
        for dag in bag.dags.values():
            dag.relative_fileloc = dag.relative_fileloc or dag.fileloc
        bag.sync_to_db("dags-folder", None)
        return
    sync_bag_to_db(bag, "dags-folder", None)


def run_dag(dag: Any, **kwargs: Any) -> Any:
    """Serialize a DAG defined in a test to the DB, then ``dag.test()`` it; returns the DagRun."""
    bag = dag_bag()
    bag.bag_dag(dag)
    sync_dags_to_db(bag)
    return dag.test(**kwargs)


@pytest.fixture
def dag_runner(airflow_db: None, workflowsvc_conn: Any) -> Any:
    """``run_dag`` with the DB ready and ``workflowsvc_default`` pointing at a clean emulator."""
    return run_dag


MOCK_BASE_URL = "https://svc.test/api/v1"


@pytest.fixture
def mock_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``workflowsvc_default`` pointing at a respx-mocked service (one quick retry); yields the router."""
    import respx

    conn = {
        "conn_type": "workflowsvc",
        "host": MOCK_BASE_URL,
        "password": "tok-unit-3b9d51",
        "extra": {"api_key": "key-unit-77c1e0", "retry_wait": 0, "max_retries": 1},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))
    with respx.mock(base_url=MOCK_BASE_URL, assert_all_called=False) as router:
        yield router


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
