"""Issue #35, item 4: a bad location in ``files`` or ``output_dir`` fails the task with an error naming
it, before any request reaches the service (the emulator's request log is empty).

What each bad location reports is the table of docs/provider/operators/object-storage.rst.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from reliability._helpers import task_context

from airflow_provider_workflowsvc.exceptions import (
    InvalidTaskInputError,
    ObjectStorageError,
    WorkflowServiceInputError,
)
from airflow_provider_workflowsvc.operators.jobs import DownloadJobOutputOperator, RunWorkflowOperator

from ._helpers import Bucket, S3Server, running_s3_server

WORKFLOW_ID = "0b8f3c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b"
JOB_ID = "5d6e7f80-1a2b-4c3d-8e9f-0a1b2c3d4e5f"


def run_with(files: Any, **kwargs: Any) -> Any:
    task = RunWorkflowOperator(task_id="run", workflow_id=WORKFLOW_ID, files=files, **kwargs)
    return task.execute(task_context())


def download_into(output_dir: Any, **kwargs: Any) -> Any:
    task = DownloadJobOutputOperator(task_id="download", job_id=JOB_ID, output_dir=output_dir, **kwargs)
    return task.execute(task_context())


@pytest.fixture
def quiet_service(workflowsvc_conn: Any) -> Iterator[Any]:
    """The emulator the tasks would call: each test checks it heard nothing."""
    yield workflowsvc_conn
    assert workflowsvc_conn.requests() == []


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        (
            "nope://bucket/in/",
            r"'nope://bucket/in/': Airflow has no filesystem for nope://; no installed Airflow ",
        ),
        (
            "gs://bucket/in/",
            r"'gs://bucket/in/': .* install apache-airflow-providers-google \(it brings gcsfs\)",
        ),
    ],
    ids=["unknown-scheme", "no-provider-for-the-scheme"],
)
def test_a_scheme_airflow_cannot_open_names_what_to_install(
    quiet_service: Any, location: str, expected: str
) -> None:
    with pytest.raises(InvalidTaskInputError, match=f"files {expected}"):
        run_with(location)
    with pytest.raises(InvalidTaskInputError, match=f"output_dir {expected}"):
        download_into(location)


def test_a_missing_store_library_names_the_package(
    quiet_service: Any, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Amazon provider installed without its s3fs extra: ``import s3fs`` fails as it does then."""
    monkeypatch.setenv("AIRFLOW_CONN_S3_NO_LIBRARY", json.dumps(s3_server.connection()))
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(
        InvalidTaskInputError,
        match=r"files 's3://bucket/in/': the filesystem for s3:// needs a library that is not installed "
        r".*; install apache-airflow-providers-amazon\[s3fs\] \(it brings s3fs\)",
    ):
        run_with("s3://bucket/in/", files_conn_id="s3_no_library")


def test_an_undefined_connection_is_named(quiet_service: Any, bucket: Bucket) -> None:
    """The Amazon provider alone would fall back to other credentials; the task refuses instead."""
    with pytest.raises(
        InvalidTaskInputError, match=r"'s3://[^']+/in/': the connection 'no_such_conn' is not"
    ):
        run_with(bucket.uri("in/"), files_conn_id="no_such_conn")
    with pytest.raises(InvalidTaskInputError, match="the connection 'no_such_conn' is not defined"):
        run_with(f"s3://no_such_conn@{bucket.name}/in/")
    with pytest.raises(InvalidTaskInputError, match=r"output_dir .* the connection 'no_such_conn' is not"):
        download_into(bucket.uri("out/"), output_conn_id="no_such_conn")
    from airflow.sdk.io.store import _STORE_CACHE

    # Refused before the path was built: building it attaches a store, which opens the filesystem
    # with the Amazon provider's fallback credentials for a connection it cannot find.
    assert not [alias for alias in _STORE_CACHE if "no_such_conn" in alias]


def test_credentials_in_a_uri_are_refused_and_never_shown(quiet_service: Any) -> None:
    """The user part of a URI names a connection; a password there is refused without being echoed."""
    with pytest.raises(InvalidTaskInputError) as caught:
        run_with("s3://AKIAEXAMPLE:wJalrXUtnFEMI-secret@bucket/in/")
    message = str(caught.value)
    assert message.startswith("files 's3://bucket/in/': the URI holds a password")
    assert "AKIAEXAMPLE" not in message
    assert "wJalrXUtnFEMI-secret" not in message


def test_a_missing_bucket_a_missing_key_and_an_empty_prefix(quiet_service: Any, bucket: Bucket) -> None:
    bucket.put({"in/a.txt": "a"})
    missing = f"{bucket.name}-missing"
    with pytest.raises(
        InvalidTaskInputError,
        match=rf"files 's3://{missing}/in/': the bucket '{missing}' does not exist \(connection 's3_test'\)",
    ):
        run_with(f"s3://{missing}/in/", files_conn_id=bucket.conn_id)
    with pytest.raises(InvalidTaskInputError, match=rf"files: 's3://{bucket.name}/in/b.txt' does not exist"):
        run_with(bucket.uri("in/b.txt"), files_conn_id=bucket.conn_id)
    with pytest.raises(
        InvalidTaskInputError, match=rf"the folder 's3://{bucket.name}/empty/' holds no objects"
    ):
        run_with(bucket.uri("empty/"), files_conn_id=bucket.conn_id)
    with pytest.raises(
        InvalidTaskInputError, match=rf"output_dir 's3://{missing}/out': the bucket '{missing}'"
    ):
        download_into(f"s3://{missing}/out", output_conn_id=bucket.conn_id)
    with pytest.raises(InvalidTaskInputError, match=r"output_dir 's3://[^']+/in/a.txt' is an object, not a"):
        download_into(bucket.uri("in/a.txt"), output_conn_id=bucket.conn_id)


def test_an_empty_prefix_skips_the_task_when_asked(quiet_service: Any, bucket: Bucket) -> None:
    from airflow_provider_workflowsvc._compat import AirflowSkipException

    with pytest.raises(AirflowSkipException, match=r"/empty/' match no files: nothing to run"):
        run_with(bucket.uri("empty/"), files_conn_id=bucket.conn_id, skip_if_no_files=True)


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[tuple[S3Server, dict[str, str]]]:
    """
    A second S3 server checking IAM policies: a reader may use bucket ``open`` and nothing else.

    pytest may start it more than once in a session (tests grouped by the emulator's dialect); Airflow
    keeps one filesystem per scheme and connection id for the life of the process, so each server gets a
    connection id of its own (its port).
    """
    setup_requests = 6  # the requests below; every later one is checked against the signer's policies
    with running_s3_server(guarded=setup_requests) as server:
        s3, iam = server.client(), server.client("iam")
        s3.create_bucket(Bucket="open")
        s3.create_bucket(Bucket="closed")
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        allowed = ["arn:aws:s3:::open", "arn:aws:s3:::open/*"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": allowed}],
        }
        iam.put_user_policy(UserName="reader", PolicyName="open-only", PolicyDocument=json.dumps(policy))
        s3.put_object(Bucket="closed", Key="in/a.txt", Body=b"secret plans")
        yield server, {"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"]}


def reader_conn_id(server: S3Server) -> str:
    return f"s3_reader_{server.endpoint.rsplit(':', 1)[1]}"


def test_no_permission_is_named_with_the_location(
    quiet_service: Any, guarded_server: tuple[S3Server, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, reader = guarded_server
    conn_id = reader_conn_id(server)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(server.connection(**reader)))
    with pytest.raises(
        InvalidTaskInputError,
        match=rf"files 's3://closed/in/': no permission to (list|read) it \(connection '{conn_id}'\): "
        r"PermissionError: (Forbidden|Access Denied)",
    ):
        run_with(f"s3://{conn_id}@closed/in/")
    with pytest.raises(InvalidTaskInputError, match=r"output_dir 's3://closed/out': no permission to"):
        download_into(f"s3://{conn_id}@closed/out")


def test_a_store_that_cannot_be_reached_may_pass_on_a_retry(
    quiet_service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the location's fault: ObjectStorageError, which Airflow retries (not InvalidTaskInputError)."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    conn = {
        "conn_type": "aws",
        "login": "AKIAUNREACHABLE",
        "password": "unreachable-secret",
        "extra": {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "region_name": "us-east-1",
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_S3_UNREACHABLE", json.dumps(conn))
    with pytest.raises(
        ObjectStorageError, match=r"files 's3://bucket/in/': could not .* \(connection 's3_unreachable'\)"
    ) as caught:
        run_with("s3://s3_unreachable@bucket/in/")
    assert not isinstance(caught.value, WorkflowServiceInputError)


def test_credentials_in_a_uri_are_masked_in_the_rendered_fields(
    dag_runner: Any, quiet_service: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """
    Issue #43, item 9: the URI was refused, but Airflow stores a task's rendered fields (what the UI shows)
    right after rendering, before ``execute()`` refuses it: the credentials must be masked by then. The
    secret comes through a template from a variable whose name says nothing secret, as a DAG's would.
    """
    from datetime import datetime, timezone

    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.sdk import DAG
    from airflow.utils.state import TaskInstanceState
    from reliability._helpers import places_to_scan, table_rows

    from airflow_provider_workflowsvc.operators.on_demand import RunOnDemandJobOperator

    secret = f"wJalrXUtnFEMI-{JOB_ID[:8]}-render"
    monkeypatch.setenv("AIRFLOW_VAR_BUCKET_PART", secret)
    inputs, outputs = (
        f"s3://AKIAEXAMPLE:{{{{ var.value.bucket_part }}}}@bucket/{part}/" for part in ("in", "out")
    )
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with DAG("uri_credentials_rendered", schedule=None, start_date=start, catchup=False) as dag:
        RunWorkflowOperator(task_id="run", workflow_id=WORKFLOW_ID, files=inputs)
        DownloadJobOutputOperator(task_id="download", job_id=JOB_ID, output_dir=outputs)
        RunOnDemandJobOperator(task_id="on_demand", files=[inputs], template_id="hi_res_partition")
    dr = dag_runner(dag)
    output = capfd.readouterr()

    assert {ti.task_id: ti.state for ti in dr.get_task_instances()} == dict.fromkeys(
        ("run", "download", "on_demand"), TaskInstanceState.FAILED
    )
    assert output.out.count("the URI holds a password") >= 3  # each refused it
    rows = table_rows(RenderedTaskInstanceFields, dag.dag_id)
    rendered = {row.task_id: row.rendered_fields for row in rows}
    assert set(rendered) == {"run", "download", "on_demand"}  # stored, before execute() refused
    shown = json.dumps(rendered)
    in_clear = [task for task, fields in rendered.items() if secret in json.dumps(fields)]
    assert not in_clear, f"the secret in clear in the rendered fields of {in_clear}"
    assert shown.count("s3://***@bucket/") == 3  # masked where it was: the files of two, one output_dir
    places = places_to_scan(output, dag.dag_id, quiet_service)
    found = [where for where, text in places.items() if secret in text]
    assert not found, f"the secret found in: {found}"
