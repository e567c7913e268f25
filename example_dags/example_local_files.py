"""
Process local files with the Workflow Service, waiting in the triggerer (deferrable).

1. ``create_workflow``: create a workflow with no connectors (a local source and a local destination:
   files are sent with the run, output is downloaded), or reuse the one of the same name.
2. ``run_workflow``: upload every file of ``params.input_dir`` (by default ``sample_docs/`` next to
   this file), then defer: while the job runs, the triggerer polls it and no worker slot is held.
3. ``download_output``: write each output file (JSON elements) into ``params.output_dir/<job id>/``.

Both folders may be in object storage, as on workers that share no disk: trigger the DAG with
``{"input_dir": "s3://aws_default@my-bucket/incoming/", "output_dir": "s3://aws_default@my-bucket/out"}``
(the connection id before ``@``, Airflow's form); objects stream from and to the bucket.
4. ``summarize``: log job id, status, per-node counts, failed documents and output paths.

One sample (``empty.txt``) is empty, so the service fails that one file. The run task sets
``fail_on_failed_files=False``: the job's other outputs are still used and ``summarize`` lists the
failed document. Set it to True (the default) to fail the task when any file fails.

Uses the Airflow connection ``workflowsvc_default``; it runs unchanged against the emulator or a real
account, e.g.::

    export AIRFLOW_CONN_WORKFLOWSVC_DEFAULT='{"conn_type": "workflowsvc",
        "host": "https://platform.example.com/api/v1", "password": "<token>",
        "extra": {"api_key": "<api key>"}}'
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import dag, task

from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator
from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

SAMPLE_DOCS = Path(__file__).resolve().parent / "sample_docs"
DEFAULT_OUTPUT_DIR = str(Path(tempfile.gettempdir()) / "workflowsvc-example-output")


@dag(
    dag_id="workflowsvc_example_local_files",
    schedule=None,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    tags=["workflowsvc", "example"],
    params={"input_dir": str(SAMPLE_DOCS), "output_dir": DEFAULT_OUTPUT_DIR},
    doc_md=__doc__,
)
def workflowsvc_example_local_files() -> None:
    # [START howto_operator_workflowsvc_create_workflow]
    workflow_id = CreateWorkflowOperator(
        task_id="create_workflow",
        name="airflow-example-local-files",
        workflow_type="basic",  # partition → chunk → embed; no source or destination: local files
        if_exists="reuse",
    ).output
    # [END howto_operator_workflowsvc_create_workflow]

    # [START howto_operator_workflowsvc_run_workflow_local_files]
    run = RunWorkflowOperator(
        task_id="run_workflow",
        workflow_id=workflow_id,
        files="{{ params.input_dir }}",  # a directory: all its files; a path, glob, list, s3:// location
        deferrable=True,
        poll_interval=5,  # small samples finish in seconds; poll less often for big batches
        timeout=3600,
        fail_on_failed_files=False,  # report failed documents (see summarize) instead of failing
    )
    # [END howto_operator_workflowsvc_run_workflow_local_files]

    # [START howto_operator_workflowsvc_download_job_output]
    download = DownloadJobOutputOperator(
        task_id="download_output",
        run_task_id="run_workflow",
        output_dir="{{ params.output_dir }}/{{ ti.xcom_pull(task_ids='run_workflow', key='job_id') }}",
    )
    # [END howto_operator_workflowsvc_download_job_output]

    @task
    def summarize(result: dict[str, Any], paths: list[str]) -> dict[str, Any]:
        """Log what happened; the return value (XCom) is what the demo prints."""
        ran = result.get("job_seconds")
        took = f"the job ran {ran} s ({result['job_seconds_from']}), " if ran is not None else ""
        waited = result["elapsed_seconds"]
        print(f"Job {result['job_id']}: {result['status']}; {took}the wait took {waited} s")
        for node in result["node_stats"]:
            print(
                f"  node {node['node_name']} ({node['node_type']}/{node['node_subtype']}): "
                f"{node['success']} succeeded, {node['failure']} failed"
            )
        for failed in result["failed_files"]:
            print(f"  failed document {failed['document']}: {failed['error']}")
        print(f"{len(paths)} output file(s):")
        for path in paths:
            print(f"  {path}")
        return {**result, "output_paths": paths}

    run >> download  # run_task_id alone does not order the tasks
    summarize(run.output, download.output)


workflowsvc_example_local_files()
