"""Issue #35 with #34: ``RunOnDemandJobOperator`` takes its files from a bucket (moto, on loopback,
through ObjectStoragePath and an ``aws`` connection) and writes its outputs into one. Sizes come from the
store's listing (the per-file limit is checked before any request); the objects are streamed into the
launches; the outputs keep the download rule's names; nothing touches local disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_on_demand_operator as on_demand_tests
from test_on_demand_operator import DrivenClock, ctx, documents_by_job, launches, op

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError, WorkflowServiceInputError

from ._helpers import Bucket

service = on_demand_tests.service
driven = on_demand_tests.driven
"""The on-demand tests' fixtures: the platform emulator with a launch gap, the launches' driven clock."""


def documents(count: int) -> dict[str, str]:
    return {f"in/doc{i:02d}.txt": f"Title {i}\n\nThe text of document number {i}." for i in range(count)}


def test_objects_of_a_prefix_are_launched_in_jobs_and_their_outputs_land_in_the_bucket(
    driven: DrivenClock,
    bucket: Bucket,
    tmp_path: Path,
) -> None:
    emulator = driven.emulator
    bucket.put({**documents(12), "in/sub/deep.txt": "Deep\n\nThe text of document number 12."})
    local = tmp_path / "local.txt"
    local.write_text("Local\n\nThe text of document number 13.")
    task = op(
        [bucket.uri("in/"), str(local)],
        files_conn_id=bucket.conn_id,
        output_dir=bucket.uri("out/run-1"),
        output_conn_id=bucket.conn_id,
    )
    summary = task.execute(ctx())

    sent = sorted(name for names in documents_by_job(emulator).values() for name in names)
    expected = sorted([*(f"doc{i:02d}.txt" for i in range(12)), "sub/deep.txt", "local.txt"])
    assert sent == expected  # names relative to the prefix, the local file by its base name
    assert sorted(len(names) for names in documents_by_job(emulator).values()) == [4, 10]
    assert summary["completed_count"] == 14
    prefix = f"s3://{bucket.name}/out/run-1/"
    outputs = {d["document"]: d["output_files"] for d in summary["documents"]}
    assert outputs["sub/deep.txt"] == [f"{prefix}sub/deep.txt.json"]  # the download rule's name
    assert outputs["local.txt"] == [f"{prefix}local.txt.json"]
    keys = bucket.listing("out/")
    assert sorted(keys) == sorted(f"out/run-1/{name}.json" for name in expected)
    assert not [k for k in keys if storage.STAGING_PREFIX in k], "a temporary key was left"
    for name in expected:
        elements = json.loads(bucket.read(f"out/run-1/{name}.json"))
        assert elements[0]["metadata"]["filename"] == name  # each object holds its own document
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.txt"]  # nothing staged on disk


def test_an_object_over_the_size_limit_fails_the_task_before_anything_is_sent(
    driven: DrivenClock,
    bucket: Bucket,
) -> None:
    """The size is the store's (its listing): nothing of the objects is read, no request is sent."""
    emulator = driven.emulator
    bucket.put({**documents(3), "in/big.pdf": b"%PDF" + b"x" * 2000})
    emulator.clear_requests()
    with pytest.raises(InvalidTaskInputError) as failed:
        op(bucket.uri("in/"), files_conn_id=bucket.conn_id, max_file_bytes=1000).execute(ctx())
    assert "'big.pdf' (2,004 bytes)" in str(failed.value)
    assert "Nothing was uploaded" in str(failed.value)
    assert emulator.requests() == []


def test_a_bad_output_folder_fails_before_anything_is_sent(
    driven: DrivenClock,
    bucket: Bucket,
) -> None:
    emulator = driven.emulator
    bucket.put(documents(2))
    emulator.clear_requests()
    task = op(
        bucket.uri("in/"),
        files_conn_id=bucket.conn_id,
        output_dir="s3://wfsvc-no-such-bucket/out/",
        output_conn_id=bucket.conn_id,
    )
    with pytest.raises(WorkflowServiceInputError, match="'wfsvc-no-such-bucket' does not exist"):
        task.execute(ctx())
    assert emulator.requests() == []
    assert launches(emulator) == []


def test_every_templated_argument_reaches_the_run(driven: DrivenClock, bucket: Bucket) -> None:
    from airflow.sdk import DAG

    bucket.put(documents(2))
    values = {
        "files": bucket.uri("in/"),
        "files_conn_id": bucket.conn_id,
        "template_id": "hi_res_partition",
        "output_dir": bucket.uri("out/rendered"),
        "output_conn_id": bucket.conn_id,
        "workflowsvc_conn_id": "workflowsvc_default",
    }
    with DAG("templated_on_demand", schedule=None, render_template_as_native_obj=True):
        task = op(**{field: f"{{{{ params.{field} }}}}" for field in values})
    untested = sorted(
        set(task.template_fields) - set(values) - {"job_nodes"}
    )  # job_nodes: instead of a template
    assert not untested, f"RunOnDemandJobOperator templates {untested}: add a rendered value to this test"
    task.render_template_fields({"params": values})

    summary = task.execute(ctx())  # an unrendered template_id or connection id fails it

    assert summary["completed_count"] == 2, "the rendered files (and their connection) did not reach the run"
    assert sorted(bucket.listing("out/")) == ["out/rendered/doc00.txt.json", "out/rendered/doc01.txt.json"]
    with driven.emulator.api_client() as api:
        assert [job["job_type"] for job in api.get("/jobs/").json()] == ["template"]
