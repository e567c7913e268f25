"""End-to-end test DAG: on-demand jobs for several folders at once, one mapped task per folder, each
folder in several jobs (``dag_run.conf``: ``folders``, ``output_dir``); a ``@task`` reads the elements."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_workflowsvc.operators.on_demand import RunOnDemandJobOperator

with DAG(
    dag_id="workflowsvc_e2e_on_demand_mapped",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "e2e"],
):

    @task
    def folders(**context: Any) -> list[str]:
        return list(context["dag_run"].conf["folders"])

    parsed = RunOnDemandJobOperator.partial(
        task_id="parse",
        template_id="hi_res_partition",
        max_files_per_job=3,  # several jobs per folder
        output_dir="{{ dag_run.conf['output_dir'] }}/{{ ti.map_index }}",
        poll_interval=1,
        timeout=300,
    ).expand(files=folders())

    @task
    def count_elements(summaries: list[dict[str, Any]]) -> dict[str, int]:
        """Each document's element count, read from the files the mapped tasks downloaded."""
        counts = {}
        for summary in summaries:
            for document in summary["documents"]:
                paths = document["output_files"]
                counts[document["document"]] = sum(len(json.loads(Path(p).read_text())) for p in paths)
        return counts

    count_elements(parsed.output)
