"""Issue #35, items 2 and 4: objects stream from the store into the run's multipart upload (no local
disk, bounded reads; a body sent again reads them again from their start), and an object that fails
while the body is sent aborts the request: the service holds no job, the task says so, a retry runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from helpers import TaskStateStore
from reliability._helpers import LoopbackServer, task_context
from reliability.test_local_inputs import job_answer

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc._tasks import inputs
from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files
from airflow_provider_workflowsvc.exceptions import InputReadError, WorkflowServiceInputError
from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator

from ._helpers import Bucket

WORKFLOW_ID = "0b8f3c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b"
MiB = 2**20


def through_loopback(
    use: Callable[[WorkflowServiceHook], Any], behaviour: Callable[[Any], None] = job_answer
) -> tuple[Any, list[str], list[bytearray]]:
    """Call ``use(hook)`` with a hook on a loopback server; return its result, the requests, their bodies."""
    bodies: list[bytearray] = []
    server = LoopbackServer(behaviour)

    def on_body(chunk: bytes) -> None:
        if len(server.requests) > len(bodies):  # a request is logged before its body is read
            bodies.append(bytearray())
        bodies[-1].extend(chunk)

    server.on_body = on_body
    try:
        with WorkflowServiceHook(settings=ConnectionSettings(base_url=server.url, token="tok-s3")) as hook:
            result = use(hook)
    finally:
        server.close()
    return result, server.requests, bodies


def new_workflow(name: str) -> str:
    with WorkflowServiceHook() as hook:
        return str(hook.create_workflow(name, "basic").id)


def run_of_prefix(workflow: str, bucket: Bucket) -> RunWorkflowOperator:
    """A task running ``workflow`` on every object under ``in/`` of the bucket."""
    return RunWorkflowOperator(
        task_id="run",
        workflow_id=workflow,
        files=bucket.uri("in/", with_conn=True),
        poll_interval=0.05,
        timeout=60,
    )


def jobs_of(emulator: Any, workflow_id: str) -> list[dict[str, Any]]:
    with emulator.api_client() as api:
        response = api.get("/jobs", params={"workflow_id": workflow_id})
        response.raise_for_status()
        return list(response.json())


def test_a_run_fed_from_a_bucket_writes_its_outputs_to_a_bucket(
    workflowsvc_conn: Any, bucket: Bucket
) -> None:
    """End to end against the emulator: inputs listed in S3, outputs written to S3 under the names of
    the download rule, nothing left under a temporary key, nothing on local disk."""
    bucket.put({"in/2024/q1.txt": "first quarter", "in/2024/q2.txt": "second quarter", "in/readme.md": "# R"})
    workflow = new_workflow("s3-fed")
    run = run_of_prefix(workflow, bucket)
    result = run.execute(task_context())
    assert result["status"] == "completed", result
    assert result["failed_files"] == []
    download = DownloadJobOutputOperator(
        task_id="download",
        job_id=result["job_id"],
        output_dir=bucket.uri("out/run-1"),
        output_conn_id=bucket.conn_id,
    )
    written = download.execute(task_context())
    prefix = f"s3://{bucket.name}/out/run-1/"
    assert sorted(written) == [
        f"{prefix}2024/q1.txt.json",
        f"{prefix}2024/q2.txt.json",
        f"{prefix}readme.md.json",
    ]
    keys = bucket.listing("out/")
    assert sorted(keys) == sorted(w.removeprefix(f"s3://{bucket.name}/") for w in written)
    assert all(size > 0 for size in keys.values())
    elements = json.loads(bucket.read("out/run-1/2024/q1.txt.json"))
    assert "first quarter" in json.dumps(elements)


def test_an_object_streams_into_the_body_in_small_reads(
    bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx asks the part for 64 KiB at a time (never the whole object); the object is fetched from the
    store in READ_BLOCK blocks; the service receives it byte for byte."""
    data = os.urandom(6 * MiB + 123)
    bucket.put({"big/blob.bin": data})
    reads: list[int] = []
    blocks: list[int] = []
    original_read, original_init = storage._ObjectReader.read, storage._ObjectReader.__init__

    def spying_init(self: Any, stored: Any) -> None:
        original_init(self, stored)
        blocks.append(self._file.blocksize)

    def spying_read(self: Any, size: int = -1) -> bytes:
        reads.append(size)
        return original_read(self, size)

    monkeypatch.setattr(storage._ObjectReader, "__init__", spying_init)
    monkeypatch.setattr(storage._ObjectReader, "read", spying_read)
    files = resolve_named_files(bucket.uri("big/"), conn_id=bucket.conn_id)
    job, _, (received,) = through_loopback(lambda hook: hook.run_workflow(WORKFLOW_ID, files=files))
    assert job is not None
    assert blocks == [storage.READ_BLOCK]
    assert max(reads) <= 64 * 1024, "httpx read more than a chunk at once"
    assert len(reads) > len(data) // (64 * 1024)
    assert b'filename="blob.bin"' in received
    assert received.count(data) == 1, "the object did not arrive byte for byte"


def test_a_body_sent_again_reads_each_object_again_from_its_start(bucket: Bucket) -> None:
    """A 307 to the run path's other slash form makes the client send the body again (as it does a
    retry of a request that never left): both bodies hold every object whole."""
    objects = {"in/a.bin": os.urandom(3 * MiB), "in/b.bin": os.urandom(MiB + 7)}
    bucket.put(objects)
    answered: list[int] = []

    def redirect_then_job(handler: Any) -> None:
        answered.append(1)
        if len(answered) == 1:
            handler.send_response(307)
            handler.send_header("location", handler.path.rstrip("/") + "/")
            handler.send_header("content-length", "0")
            handler.end_headers()
            return
        job_answer(handler)

    files = resolve_named_files(bucket.uri("in/*.bin"), conn_id=bucket.conn_id)
    job, requests, bodies = through_loopback(
        lambda hook: hook.run_workflow(WORKFLOW_ID, files=files), redirect_then_job
    )
    assert job is not None
    assert [r.split()[0] for r in requests] == ["POST", "POST"]
    assert requests[1].endswith("/run/")
    assert len(bodies) == 2
    for body in bodies:
        assert all(body.count(data) == 1 for data in objects.values())


def test_an_object_gone_after_listing_aborts_the_run_and_no_job_exists(
    workflowsvc_conn: Any, bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second object is deleted once the inputs are resolved (the first is sent whole): the request
    is aborted mid-body; the service holds no job; the task fails saying so, with no pending run left;
    its retry, once the object is back, runs the workflow once."""
    bucket.put({"in/a.txt": "first", "in/b.txt": "second"})
    workflow = new_workflow("s3-gone")
    resolve = inputs.resolve_task_files

    def resolve_then_delete(*args: Any, **kwargs: Any) -> Any:
        resolved = resolve(*args, **kwargs)
        bucket.delete("in/b.txt")
        return resolved

    monkeypatch.setattr(inputs, "resolve_task_files", resolve_then_delete)
    store = TaskStateStore()
    task = run_of_prefix(workflow, bucket)
    with pytest.raises(InputReadError) as caught:
        task.execute(task_context(store))
    message = str(caught.value)
    assert f"input file 's3://{bucket.name}/in/b.txt' failed after 0 of its 6 bytes" in message
    assert "the service received no complete request, so this request created no job" in message
    assert jobs_of(workflowsvc_conn, workflow) == []
    assert store.values == {}  # no pending run: nothing for a retry to look for

    monkeypatch.setattr(inputs, "resolve_task_files", resolve)
    bucket.put({"in/b.txt": "second"})
    result = task.execute(task_context(store))
    assert result["status"] == "completed"
    assert [job["id"] for job in jobs_of(workflowsvc_conn, workflow)] == [result["job_id"]]


def test_a_read_failing_inside_an_object_aborts_the_run(
    workflowsvc_conn: Any, bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The object is deleted once its first block was fetched: the next block's read fails mid-object."""
    monkeypatch.setattr(storage, "READ_BLOCK", MiB)
    bucket.put({"in/big.bin": os.urandom(4 * MiB)})
    workflow = new_workflow("s3-midway")
    original_read = storage._ObjectReader.read
    deleted: list[int] = []

    def read_then_delete(self: Any, size: int = -1) -> bytes:
        chunk = original_read(self, size)
        if not deleted:
            bucket.delete("in/big.bin")
            deleted.append(len(chunk))
        return chunk

    monkeypatch.setattr(storage._ObjectReader, "read", read_then_delete)
    task = run_of_prefix(workflow, bucket)
    with pytest.raises(
        InputReadError, match=r"'s3://[^']+/in/big.bin' failed after [1-9]\d* of its 4194304 bytes"
    ):
        task.execute(task_context())
    assert deleted
    assert jobs_of(workflowsvc_conn, workflow) == []


def test_the_hook_takes_objects_as_it_takes_local_files(bucket: Bucket) -> None:
    """``hook.run_workflow(files=...)``: an ObjectStoragePath, a URI naming its connection, or either
    with the name to send; a prefix is not a file."""
    bucket.put({"in/a.txt": "alpha", "in/b.txt": "bravo"})
    files = [bucket.path("in/a.txt"), (bucket.uri("in/b.txt", with_conn=True), "2024/renamed.txt")]

    def run_then_refuse_a_folder(hook: WorkflowServiceHook) -> Any:
        job = hook.run_workflow(WORKFLOW_ID, files=files)
        with pytest.raises(WorkflowServiceInputError, match=r"input file 's3://[^']+/in' is a folder"):
            hook.run_workflow(WORKFLOW_ID, files=[bucket.path("in")])
        return job

    job, requests, (received,) = through_loopback(run_then_refuse_a_folder)
    assert job is not None
    assert len(requests) == 1
    assert b'filename="a.txt"' in received
    assert b'filename="2024/renamed.txt"' in received
    assert b"alpha" in received
    assert b"bravo" in received
