"""
Helpers the test modules import (``from helpers import ...``): fake service answers, dialect spellings,
DAG-bag plumbing. Fixtures live in conftest.py, which imports from here too.
"""

from __future__ import annotations

import json
import os
from typing import Any

TEST_TOKEN = "tok-test-9f3c1e"
TEST_API_KEY = "key-test-47ab20"
"""The credentials of the session emulator (conftest's ``emulator_server``)."""

MOCK_BASE_URL = "https://svc.test/api/v1"
"""The base URL of the respx-mocked service (conftest's ``mock_service``)."""


def connect(emulator: Any, monkeypatch: Any) -> None:
    """Point ``workflowsvc_default`` at ``emulator`` (AIRFLOW_CONN_WORKFLOWSVC_DEFAULT JSON, a ``ui_url``)."""
    conn = {
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": emulator.token,
        "extra": {"api_key": emulator.api_key, "retry_wait": 0.05, "ui_url": "https://ui.example.test"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))


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


SHARED_STATUS_POLL_ENV = "AIRFLOW__WORKFLOWSVC__SHARED_STATUS_POLL"
"""``[workflowsvc] shared_status_poll`` (on by default): tests of the shared poll pin it, whatever the
environment says; tests of the per-job poll turn it off."""


def write_good_and_empty(folder: Any) -> Any:
    """Write ``good.txt`` (processed) and ``empty.txt`` (failed by the service) into ``folder``."""
    (folder / "good.txt").write_text("Some text that the emulator processes.")
    (folder / "empty.txt").write_text("")
    return folder


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
