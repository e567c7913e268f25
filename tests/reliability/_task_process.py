"""A worker for the crash and kill tests: run one RunWorkflowOperator task with ``dag.test()`` here.

``python _task_process.py SPEC`` (SPEC is JSON: ``dag_id``, ``logical_date``, ``task`` keyword
arguments) serializes the DAG to the metadata DB of ``$AIRFLOW_HOME`` and runs it, in this process,
so a signal sent to this process reaches the task: SIGKILL is a worker crash, SIGTERM is what the
supervisor sends before killing a task. The test process builds the same DAG with :func:`build_dag`
to run the retry in the same DAG run (same ``task_state_store``).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta
from typing import Any


def build_dag(spec: dict[str, Any]) -> Any:
    from airflow.sdk import DAG

    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

    task = dict(spec["task"])
    if "retry_delay" in task:
        task["retry_delay"] = timedelta(seconds=task["retry_delay"])
    with DAG(spec["dag_id"], schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        RunWorkflowOperator(task_id="run", **task)
    return dag


def logical_date(spec: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(spec["logical_date"])


def serialize(dag: Any) -> None:
    """Write a DAG defined outside the dags folder to the DB (``conftest.run_dag`` does the same)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def main() -> int:
    spec = json.loads(sys.argv[1])
    dag = build_dag(spec)
    serialize(dag)
    print("worker: running the task", flush=True)
    dr = dag.test(logical_date=logical_date(spec))
    print(f"worker: dag run ended {dr.state}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
