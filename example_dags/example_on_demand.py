"""
Parse a folder of local files with the service's on-demand jobs, then read the elements in a ``@task``.

1. ``parse_folder``: every file of ``params.input_dir`` (by default ``sample_docs/`` next to this file)
   is processed by the service's ``hi_res_partition`` template: no workflow to create or clean up. The
   files go in jobs of at most 10 (the service's limit), launched at least a second apart; the task
   then defers, and the triggerer waits for every job in one deferral (no worker slot is held). Each
   output is downloaded into ``params.output_dir/<run id>/``, named after its document.
2. ``read_elements``: reads each document's elements (JSON) from the summary's output files and
   returns, per document, how many elements of each type it has, and its title.

One sample (``empty.txt``) is empty, so the service fails that one file; the parse task sets
``fail_on_failed_files=False`` and the summary reports it (``status: failed`` with the service's
error). On-demand jobs are an operation of the live service's platform API: run this against an
account of it, or the emulator in its platform dialect (``workflowsvc-emulator --dialect platform``),
with the Airflow connection ``workflowsvc_default``, e.g.::

    export AIRFLOW_CONN_WORKFLOWSVC_DEFAULT='{"conn_type": "workflowsvc",
        "host": "https://platform.example.com/api/v1", "extra": {"api_key": "<api key>"}}'
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import dag, task

from airflow_provider_workflowsvc.operators.on_demand import RunOnDemandJobOperator

SAMPLE_DOCS = Path(__file__).resolve().parent / "sample_docs"
DEFAULT_OUTPUT_DIR = str(Path(tempfile.gettempdir()) / "workflowsvc-example-on-demand")


@dag(
    dag_id="workflowsvc_example_on_demand",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "example"],
    params={"input_dir": str(SAMPLE_DOCS), "output_dir": DEFAULT_OUTPUT_DIR},
    doc_md=__doc__,
)
def workflowsvc_example_on_demand() -> None:
    # [START howto_operator_workflowsvc_run_on_demand_job]
    parsed = RunOnDemandJobOperator(
        task_id="parse_folder",
        files="{{ params.input_dir }}",  # a directory: all its files; also a path, glob or list
        template_id="hi_res_partition",  # or job_nodes=[...], a custom workflow's nodes
        output_dir="{{ params.output_dir }}/{{ run_id }}",
        poll_interval=5,  # small samples finish in seconds; poll less often for big batches
        timeout=3600,
        fail_on_failed_files=False,  # report the documents the service failed instead of failing
    )
    # [END howto_operator_workflowsvc_run_on_demand_job]

    # [START howto_operator_workflowsvc_read_elements]
    @task
    def read_elements(summary: dict[str, Any]) -> dict[str, Any]:
        """Per document: its element types counted and its first title; the failed ones with why."""
        read = {}
        for document in summary["documents"]:
            if document["status"] != "completed":
                print(f"{document['document']}: {document['status']} ({document['error']})")
                continue
            elements = [e for path in document["output_files"] for e in json.loads(Path(path).read_text())]
            title = next((e["text"] for e in elements if e["type"] == "Title"), None)
            read[document["document"]] = {
                "elements": dict(Counter(e["type"] for e in elements)),
                "title": title,
            }
            print(f"{document['document']}: {len(elements)} element(s), title {title!r}")
        return read

    read_elements(parsed.output)
    # [END howto_operator_workflowsvc_read_elements]


workflowsvc_example_on_demand()
