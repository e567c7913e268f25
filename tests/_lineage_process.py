"""Run DAGs with ``dag.test()`` and the OpenLineage provider's listener on, in a process of its own.

``python _lineage_process.py EVENTS FOLDER DAG_ID[=RUN_CONF_JSON]...`` parses FOLDER, writes its DAGs
to a fresh metadata DB (a temp ``$AIRFLOW_HOME``, set by ``conftest``) and runs each DAG id; the
OpenLineage provider's plugin emits every event through its ``file`` transport into EVENTS (one JSON
event a line). A process of its own because the plugin reads ``[openlineage]`` when Airflow loads its
plugins, once per process: the test session's own Airflow has lineage off. Prints the task states of
each run as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> int:
    events, folder, *runs = sys.argv[1:]
    transport = {"type": "file", "log_file_path": events, "append": True}
    os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(transport)
    os.environ["AIRFLOW__OPENLINEAGE__NAMESPACE"] = "workflowsvc-tests"
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    connection = os.environ.get("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", "")
    import conftest  # noqa: F401, TID251  (its side effect: sets AIRFLOW_HOME, a temp dir, and the test settings before Airflow is imported)
    import helpers

    os.environ["AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"] = connection  # conftest drops it

    from airflow.utils import db

    db.resetdb()
    bag = helpers.dag_bag(folder, collect_dags=True)
    assert not bag.import_errors, bag.import_errors
    helpers.sync_dags_to_db(bag)
    for run in runs:
        dag_id, _, conf = run.partition("=")
        dr = helpers.dag_test(bag.dags[dag_id], run_conf=json.loads(conf) if conf else None)
        states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
        result = json.dumps({"dag_id": dag_id, "state": str(dr.state), "tasks": states})
        with open(os.environ["WORKFLOWSVC_LINEAGE_STATES"], "a") as out:  # not stdout: logs interleave
            out.write(result + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
