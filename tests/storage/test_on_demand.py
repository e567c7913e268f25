"""Issue #35 with #34: RunOnDemandJobOperator takes ``files`` and ``output_dir`` in object storage through
the same resolver and download folder as a run (the platform emulator over loopback, moto's S3 server)."""

from __future__ import annotations

from typing import Any

import pytest
from reliability._helpers import task_context

from airflow_provider_workflowsvc import RunOnDemandJobOperator, storage
from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError

from ._helpers import Bucket


def on_demand(bucket: Bucket, **kwargs: Any) -> RunOnDemandJobOperator:
    args: dict[str, Any] = {
        "task_id": "parse",
        "files": bucket.uri("in/"),
        "files_conn_id": bucket.conn_id,
        "template_id": "hi_res_partition",
        "poll_interval": 0.05,
        "deferrable": False,
        "launch_interval": 0,
        "max_files_per_job": 2,
    }
    return RunOnDemandJobOperator(**{**args, **kwargs})


def test_on_demand_jobs_read_a_bucket_and_write_their_outputs_to_one(
    platform_service: Any, bucket: Bucket
) -> None:
    """Three objects under a prefix, two jobs: each document's output lands in the bucket under the
    download rule's name, nothing under a temporary key."""
    bucket.put({"in/2024/q1.txt": "first quarter", "in/2024/q2.txt": "second quarter", "in/readme.md": "# R"})
    task = on_demand(bucket, output_dir=bucket.uri("out/od-1"), output_conn_id=bucket.conn_id)
    summary = task.execute(task_context())
    prefix = f"s3://{bucket.name}/out/od-1/"
    files = {doc["document"]: doc["output_files"] for doc in summary["documents"]}
    assert files == {
        "2024/q1.txt": [f"{prefix}2024/q1.txt.json"],
        "2024/q2.txt": [f"{prefix}2024/q2.txt.json"],
        "readme.md": [f"{prefix}readme.md.json"],
    }, summary
    assert len(summary["jobs"]) == 2
    keys = bucket.listing("out/")
    assert sorted(keys) == [
        f"out/od-1/{name}" for name in ("2024/q1.txt.json", "2024/q2.txt.json", "readme.md.json")
    ]
    assert not [k for k in keys if storage.STAGING_PREFIX in k]
    assert "first quarter" in bucket.read("out/od-1/2024/q1.txt.json").decode()


def test_on_demand_refuses_a_bad_location_before_any_request(platform_service: Any, bucket: Bucket) -> None:
    with pytest.raises(InvalidTaskInputError, match=rf"files 's3://{bucket.name}-missing/in/': the bucket"):
        on_demand(bucket, files=f"s3://{bucket.name}-missing/in/").execute(task_context())
    bucket.put({"in/a.txt": "a"})
    with pytest.raises(InvalidTaskInputError, match=r"output_dir .*: the connection 'nope' is not defined"):
        on_demand(bucket, output_dir=bucket.uri("out/"), output_conn_id="nope").execute(task_context())
    assert platform_service.requests() == []
