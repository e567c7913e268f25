"""Issue #35, item 3: ``output_dir`` in object storage. Outputs get the names of the download rule, stay
inside the folder, and never appear under their name before they are whole: S3 has no rename, so each
is written under a hidden temporary key, its size checked, then copied to its name and the temporary
key deleted. ``file://`` is a local directory (atomic rename).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from reliability._helpers import task_context
from reliability.test_downloads import HOSTILE_NAMES, run_with_names

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc.exceptions import ObjectStorageError, WorkflowServiceError
from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator

from ._helpers import Bucket


def download(job_id: str, output_dir: Any, **kwargs: Any) -> tuple[DownloadJobOutputOperator, list[str]]:
    task = DownloadJobOutputOperator(task_id="download", job_id=job_id, output_dir=output_dir, **kwargs)
    return task, list(task.execute(task_context()))


def test_outputs_in_a_bucket_keep_the_download_names_inside_the_folder(
    workflowsvc_conn: Any, settings: Any, bucket: Bucket, tmp_path: Path
) -> None:
    """The names the service gives are those of a local download, under the folder's prefix."""
    job_id = run_with_names(workflowsvc_conn, settings, HOSTILE_NAMES)
    _, local = download(job_id, str(tmp_path / "out"))
    _, stored = download(job_id, bucket.uri("runs/1"), output_conn_id=bucket.conn_id)
    prefix = f"s3://{bucket.name}/runs/1/"
    assert all(uri.startswith(prefix) for uri in stored)
    local_names = sorted(str(Path(p).relative_to((tmp_path / "out").resolve())) for p in local)
    assert sorted(uri.removeprefix(prefix) for uri in stored) == local_names
    keys = bucket.listing()
    assert sorted(keys) == sorted(uri.removeprefix(f"s3://{bucket.name}/") for uri in stored)
    assert not [k for k in keys if storage.STAGING_PREFIX in k], "a temporary key was left"
    numbers = {int(n) for k in keys for n in re.findall(r"document number (\d+)", bucket.read(k).decode())}
    assert numbers == set(range(len(HOSTILE_NAMES)))  # each object holds its own document, whole


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ({"errors": ["drop"]}, r"RemoteProtocolError|incomplete|closed"),
        ({"errors": [500]}, r"→ 500"),
        ({"errors": ["drop"], "count": 1}, None),
    ],
    ids=["dropped-mid-body", "500", "dropped-once-then-ok"],
)
def test_a_failed_download_leaves_nothing_under_a_name_in_the_bucket(
    workflowsvc_conn: Any, settings: Any, bucket: Bucket, fault: dict[str, Any], error: str | None
) -> None:
    emulator = workflowsvc_conn
    job_id = run_with_names(emulator, settings, ["first.txt", "second.txt"])
    earlier = b'["an earlier, complete download"]'
    bucket.put({"out/first.txt.json": earlier})
    emulator.set_faults(method="GET", path="/api/v1/jobs/*/download", **fault)
    if error is not None:
        with pytest.raises(WorkflowServiceError, match=error):
            download(job_id, bucket.uri("out"), output_conn_id=bucket.conn_id)
        assert bucket.listing() == {"out/first.txt.json": len(earlier)}, (
            "a partial or temporary object was left"
        )
        assert bucket.read("out/first.txt.json") == earlier  # untouched
    else:
        download(job_id, bucket.uri("out"), output_conn_id=bucket.conn_id)
        assert sorted(bucket.listing()) == ["out/first.txt.json", "out/second.txt.json"]
        assert json.loads(bucket.read("out/first.txt.json"))[0]["metadata"]["filename"] == "first.txt"
    for key in bucket.listing():
        json.loads(bucket.read(key))  # every object there is complete JSON


def test_an_output_is_published_only_at_the_size_written(bucket: Bucket) -> None:
    """The size check of the publish rule: a temporary object that does not hold what was written (a
    store that kept less) is not copied to its name."""
    folder = storage.StoredFolder(storage.location(bucket.uri("out"), bucket.conn_id, "output_dir"))
    staged = folder.staging()
    with staged.write_atomically() as fh:
        fh.write(b"0123456789")
    assert staged.written == 10
    staged.written = 11  # what the hook counted; the store holds 10
    with pytest.raises(ObjectStorageError, match=r"holds 10 bytes, 11 were written: not published as"):
        folder.publish(staged, "a.json")
    folder.discard(staged)
    assert bucket.listing() == {}


def test_a_failed_write_leaves_no_object(bucket: Bucket) -> None:
    """A write abandoned half way (its multipart upload aborted) leaves nothing under its key."""
    folder = storage.StoredFolder(storage.location(bucket.uri("out"), bucket.conn_id, "output_dir"))
    staged = folder.staging()
    with pytest.raises(RuntimeError, match="the download broke"), staged.write_atomically() as fh:
        for _ in range(3):
            fh.write(b"x" * storage.WRITE_BLOCK)  # parts of a multipart upload already sent
        raise RuntimeError("the download broke")
    assert staged.written is None
    assert bucket.listing() == {}
    uploads = bucket.server.client().list_multipart_uploads(Bucket=bucket.name)
    assert not uploads.get("Uploads"), "an unfinished multipart upload was left"


def test_file_uri_output_dir_is_a_local_directory(
    workflowsvc_conn: Any, settings: Any, tmp_path: Path
) -> None:
    job_id = run_with_names(workflowsvc_conn, settings, ["a.txt"])
    out = tmp_path / "file uri out"
    _, written = download(job_id, "file://" + str(out).replace(" ", "%20"))
    assert written == [str(out / "a.txt.json")]
    assert sorted(p.name for p in out.iterdir()) == ["a.txt.json"]


def test_the_download_lineage_names_the_prefix_as_openlineage_does(
    workflowsvc_conn: Any, settings: Any, bucket: Bucket
) -> None:
    job_id = run_with_names(workflowsvc_conn, settings, ["a.txt"])
    task, _ = download(job_id, bucket.uri("runs/7/", with_conn=True))
    lineage = task.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.outputs] == [(f"s3://{bucket.name}", "runs/7")]
    assert lineage.inputs[0].name.endswith(f"/jobs/{job_id}/output")


def test_a_key_too_long_for_the_store_is_shortened_and_the_rest_written(
    workflowsvc_conn: Any, settings: Any, bucket: Bucket
) -> None:
    """
    Issue #43, item 7: S3 refuses a key over 1,024 bytes (moto's server does not: each key is checked
    here). Every part of the name is under 255 bytes; the key is over the limit only as a whole.
    """
    from reliability.test_downloads import SHORTENED

    deep = "/".join(f"{i:02d}{'k' * 98}" for i in range(10)) + "/report.txt"  # 1,020 bytes
    job_id = run_with_names(workflowsvc_conn, settings, ["first.txt", deep, "last.txt"])
    _, stored = download(job_id, bucket.uri("runs/1"), output_conn_id=bucket.conn_id)
    keys = bucket.listing()
    assert len(keys) == 3
    too_long = [key for key in keys if len(key.encode()) > 1024]
    assert not too_long, f"{len(too_long)} of {len(keys)} keys over S3's 1,024 bytes"
    (shortened,) = [key for key in keys if key.startswith("runs/1/00")]
    assert SHORTENED.fullmatch(shortened.rsplit("/", 1)[1])
    assert json.loads(bucket.read(shortened))[0]["metadata"]["filename"] == deep
    assert download(job_id, bucket.uri("runs/1"), output_conn_id=bucket.conn_id)[1] == stored  # stable
