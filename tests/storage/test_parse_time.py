"""Issue #35: a DAG that reads from and writes to object storage parses as cheaply as one on local paths:
no module more than the same DAG on local paths, nothing of s3fs, botocore or the Amazon provider's code."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

DAG = textwrap.dedent(
    """
    from datetime import datetime
    from airflow.sdk import DAG
    from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator

    with DAG(dag_id="parse_cost", schedule=None, start_date=datetime(2025, 1, 1)):
        run = RunWorkflowOperator(
            task_id="run",
            workflow_id="0b8f3c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b",
            files={files!r},
            files_conn_id={conn!r},
        )
        DownloadJobOutputOperator(
            task_id="download", run_task_id="run", output_dir={output!r}, output_conn_id={conn!r}
        )
    """
)
STORE_LIBRARIES = ("s3fs", "botocore", "boto3", "aiobotocore", "aiohttp", "gcsfs", "adlfs")
"""fsspec itself (and its local filesystem) Airflow's Task SDK loads for every DAG: not these."""


def modules_after_parsing(tmp_path: Path, name: str, **fields: object) -> set[str]:
    dag_file = tmp_path / f"{name}.py"
    dag_file.write_text(DAG.format(**fields))
    code = (
        "import json, runpy, sys; "
        f"runpy.run_path({str(dag_file)!r}); "
        "print('MODULES', json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    [line] = [line for line in out.splitlines() if line.startswith("MODULES ")]
    return set(json.loads(line.removeprefix("MODULES ")))


def test_parsing_a_dag_on_object_storage_imports_nothing_of_the_stores(tmp_path: Path) -> None:
    stored = modules_after_parsing(
        tmp_path,
        "stored",
        files=["s3://bucket/in/", "s3://bucket/more/**/*.pdf", "/data/local.txt"],
        output="s3://bucket/out/{{ run_id }}",
        conn="aws_default",
    )
    local = modules_after_parsing(tmp_path, "local", files="/data/in/", output="/data/out", conn=None)
    assert "airflow_provider_workflowsvc.operators.jobs" in stored  # the DAG was parsed
    assert sorted(stored - local) == []
    assert [m for m in stored if m.startswith(STORE_LIBRARIES)] == []
    assert [m for m in stored if m.startswith("airflow.providers.amazon.aws")] == []
