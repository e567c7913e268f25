"""Issue #35, inputs from object storage: what a location of ``files`` means in S3 (moto, on loopback),
reached through Airflow's ObjectStoragePath and an ``aws`` connection, as in a deployment.

The rules are those of local paths: a tree built twice, on local disk and in the bucket, resolves to the
same names for each pattern.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc._tasks import inputs as _files
from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files
from airflow_provider_workflowsvc.exceptions import NoFilesMatchedError, WorkflowServiceInputError
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.storage import StoredObject

from ._helpers import Bucket

TREE = {
    "a.txt": "alpha",
    "notes.md": "notes",
    "sub/b.txt": "bravo",
    "sub/deep/c.md": "charlie",
    "sub/deep/d.txt": "delta",
    "x/y.txt": "yankee",
    ".hidden": "not sent",
    "sub/.cache/e.txt": "not sent either",
    "odd[1].txt": "a name with glob characters",
}


def names(resolved: list[tuple[Any, str]]) -> list[str]:
    return [name for _, name in resolved]


@pytest.fixture
def trees(bucket: Bucket, tmp_path: Path) -> tuple[Path, Bucket]:
    """The same tree under ``tmp_path/docs`` and under ``docs/`` of the bucket."""
    local = tmp_path / "docs"
    for key, text in TREE.items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_text(text)
    bucket.put({f"docs/{key}": text for key, text in TREE.items()})
    return local, bucket


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "**",
        "**/*.txt",
        "*.md",
        "sub/*",
        "sub/**/*.md",
        "*/b.txt",
        "*/*/*",
        "?.txt",
        "odd[1].txt",
        "a.txt",
    ],
)
def test_a_location_in_the_bucket_means_what_the_same_local_path_means(
    trees: tuple[Path, Bucket], pattern: str
) -> None:
    local, bucket = trees
    on_disk = resolve_named_files(str(local / pattern) if pattern else str(local))
    in_bucket = resolve_named_files(bucket.uri(f"docs/{pattern}"), conn_id=bucket.conn_id)
    assert names(in_bucket) == names(on_disk)
    assert names(in_bucket)  # each pattern matches something
    assert all(isinstance(source, StoredObject) for source, _ in in_bucket)
    assert all(str(source).startswith(f"s3://{bucket.name}/docs/") for source, _ in in_bucket)


def test_a_prefix_sends_every_object_below_it_sorted_with_names_relative_to_it(bucket: Bucket) -> None:
    bucket.put(
        {"in/2024/b.txt": "b", "in/2024/a.txt": "a", "in/z.txt": "z", "in/.tmp/x": "x", "other.txt": "o"}
    )
    resolved = resolve_named_files(bucket.uri("in/"), conn_id=bucket.conn_id)
    assert names(resolved) == ["2024/a.txt", "2024/b.txt", "z.txt"]
    assert [source.size for source, _ in resolved] == [1, 1, 1]


def test_every_kind_of_location_is_taken_alone_or_mixed_with_local_paths(
    bucket: Bucket, tmp_path: Path
) -> None:
    bucket.put({"in/a.txt": "a", "in/sub/b.txt": "b"})
    local = tmp_path / "local.txt"
    local.write_text("local")
    via_file_uri = tmp_path / "via uri.txt"
    via_file_uri.write_text("file uri")
    resolved = resolve_named_files(
        [
            bucket.path("in/a.txt"),  # an ObjectStoragePath with its own connection
            bucket.uri("in/sub/", with_conn=True),  # Airflow's form: the connection in the URI
            str(local),
            "file://" + str(via_file_uri).replace(" ", "%20"),
        ]
    )
    assert names(resolved) == ["a.txt", "b.txt", "local.txt", "via uri.txt"]
    assert resolved[2][0] == str(local)
    assert resolved[3][0] == str(via_file_uri)
    # a URI without a connection of its own takes the task's files_conn_id
    alone = resolve_named_files(bucket.uri("in/a.txt"), conn_id=bucket.conn_id)
    assert names(alone) == ["a.txt"]
    assert alone[0][0].path.conn_id == bucket.conn_id


def test_an_object_reached_twice_is_sent_once(bucket: Bucket) -> None:
    bucket.put({"in/a.txt": "a", "in/b.txt": "b"})
    resolved = resolve_named_files(
        [bucket.uri("in/a.txt"), bucket.uri("in/"), bucket.uri("in/*.txt", with_conn=True)],
        conn_id=bucket.conn_id,
    )
    assert names(resolved) == ["a.txt", "b.txt"]


def test_empty_prefixes_and_patterns_follow_the_local_rules(bucket: Bucket) -> None:
    bucket.put({"in/a.txt": "a", "in/.hidden": "h"})
    with pytest.raises(NoFilesMatchedError, match=r"the folder 's3://[^']+/empty/' holds no objects"):
        resolve_named_files(bucket.uri("empty/"), conn_id=bucket.conn_id)
    with pytest.raises(NoFilesMatchedError, match=r"the pattern 's3://[^']+/in/\*\.pdf' matches no objects"):
        resolve_named_files(bucket.uri("in/*.pdf"), conn_id=bucket.conn_id)
    with pytest.raises(
        WorkflowServiceInputError, match=r"files: 's3://[^']+/in/missing\.txt' does not exist"
    ):
        resolve_named_files(bucket.uri("in/missing.txt"), conn_id=bucket.conn_id)
    # empty_ok (skip_if_no_files): an empty prefix or pattern adds nothing; a missing key still fails
    kept = resolve_named_files(
        [bucket.uri("empty/"), bucket.uri("in/")], conn_id=bucket.conn_id, empty_ok=True
    )
    assert names(kept) == ["a.txt"]
    with pytest.raises(WorkflowServiceInputError, match="does not exist"):
        resolve_named_files(bucket.uri("in/missing.txt"), conn_id=bucket.conn_id, empty_ok=True)


def test_a_listing_is_bounded(bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket.put({f"in/{n}.txt": "x" for n in range(5)})
    monkeypatch.setattr(_files, "MAX_WALK_ENTRIES", 3)
    with pytest.raises(WorkflowServiceInputError, match="more than 3 objects"):
        resolve_named_files(bucket.uri("in/"), conn_id=bucket.conn_id)


def test_the_bucket_is_read_as_it_is_now(bucket: Bucket) -> None:
    """s3fs keeps listings for its process; a resolution never works from an old one."""
    bucket.put({"in/a.txt": "a"})
    for location in ("in/", "in/*.txt", "in/a.txt"):
        assert names(resolve_named_files(bucket.uri(location), conn_id=bucket.conn_id)) == ["a.txt"]
    bucket.put({"in/b.txt": "b"})
    bucket.delete("in/a.txt")
    for location in ("in/", "in/*.txt"):
        assert names(resolve_named_files(bucket.uri(location), conn_id=bucket.conn_id)) == ["b.txt"]
    with pytest.raises(WorkflowServiceInputError, match="does not exist"):
        resolve_named_files(bucket.uri("in/a.txt"), conn_id=bucket.conn_id)


def test_files_and_files_conn_id_are_templated_also_an_object_storage_path(bucket: Bucket) -> None:
    from airflow.sdk import ObjectStoragePath

    task = RunWorkflowOperator(
        task_id="run",
        workflow_id="0b8f3c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b",
        files=[
            ObjectStoragePath(f"s3://{bucket.name}/{{{{ ds }}}}/", conn_id=bucket.conn_id),
            "s3://{{ params.bucket }}/{{ ds }}/extra.txt",
        ],
        files_conn_id="{{ params.conn }}",
    )
    context: Any = {"ds": "2024-05-01", "params": {"bucket": bucket.name, "conn": bucket.conn_id}}
    task.render_template_fields(context)
    rendered, text = task.files
    assert isinstance(rendered, ObjectStoragePath)
    assert (rendered.path, rendered.conn_id) == (f"{bucket.name}/2024-05-01", bucket.conn_id)
    assert text == f"s3://{bucket.name}/2024-05-01/extra.txt"
    assert task.files_conn_id == bucket.conn_id
    bucket.put({"2024-05-01/a.txt": "a", "2024-05-01/extra.txt": "e"})
    resolved = resolve_named_files(task.files, conn_id=task.files_conn_id)
    assert names(resolved) == ["a.txt", "extra.txt"]


def test_a_list_rendered_to_text_may_hold_uris(bucket: Bucket) -> None:
    bucket.put({"in/a.txt": "a", "in/b.txt": "b"})
    text = json.dumps([bucket.uri("in/a.txt", with_conn=True), bucket.uri("in/b.txt", with_conn=True)])
    assert names(resolve_named_files(text)) == ["a.txt", "b.txt"]
