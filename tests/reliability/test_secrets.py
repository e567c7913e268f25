"""Item 6: no credential ever leaks.

A dedicated emulator with a known token and API key; connector secrets (a Confluence token, an AstraDB
token, an S3 secret key) come from Airflow variables and a connection through templates, as the docs
tell DAG authors to do. The variables' names say nothing secret (Airflow masks a variable named
``*token*`` by itself), so only the provider's own masking of secret-looking config keys hides them.
One ``dag.test()`` run uses every operator, the sensor (poke and deferrable),
a deferrable run, a job that fails and a task that fails on a bad config. Then every place a secret
could end up is searched for all of them: the captured output (task and trigger logs, printed by
``dag.test()``), every file under ``$AIRFLOW_HOME`` (log files), the whole metadata database file
(XComs, rendered template fields, serialized DAGs, task instances, ...), the emulator's request log and
the texts of the exceptions that failed tasks.
"""

from __future__ import annotations

import json
import secrets
import time
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.utils.state import TaskInstanceState
from helpers import MOCK_BASE_URL

from airflow_provider_workflowsvc.emulator.testing import running_emulator
from airflow_provider_workflowsvc.models import ConfluenceSourceConfig
from airflow_provider_workflowsvc.operators import connectors as conn_ops, workflows as wf_ops
from airflow_provider_workflowsvc.operators.jobs import (
    CancelJobOperator,
    DownloadJobOutputOperator,
    RunWorkflowOperator,
)
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

from ._helpers import database_file, database_files, places_to_scan, read_apart, table_rows, use_connection

_SUFFIX = secrets.token_hex(6)
SECRETS = {
    "token": f"tok-leak-{_SUFFIX}",
    "api_key": f"key-leak-{_SUFFIX}",
    "confluence_token": f"cfl-leak-{_SUFFIX}",
    "astra_token": f"astra-leak-{_SUFFIX}",
    "s3_secret_key": f"s3-leak-{_SUFFIX}",
}


@pytest.fixture
def private_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An emulator of its own with this test's token and API key, and connections/variables to it."""
    with running_emulator(token=SECRETS["token"], api_key=SECRETS["api_key"], processing_delay=0.02) as emu:
        use_connection(monkeypatch, emu, retry_wait=0.05)
        monkeypatch.setenv("AIRFLOW_VAR_WIKI_CRED", SECRETS["confluence_token"])
        monkeypatch.setenv("AIRFLOW_VAR_ASTRA_CRED", SECRETS["astra_token"])
        s3 = {"conn_type": "aws", "login": "AKIAEXAMPLE", "password": SECRETS["s3_secret_key"]}
        monkeypatch.setenv("AIRFLOW_CONN_S3_CREDS", json.dumps(s3))
        yield emu


def every_operator_dag(inputs: Path, out: Path) -> DAG:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    files = [str(inputs / "a.txt")]
    job_of_run = "{{ ti.xcom_pull(task_ids='run', key='job_id') }}"
    with DAG("reliability_secrets", schedule=None, start_date=start, catchup=False) as dag:
        wiki = conn_ops.CreateSourceConnectorOperator(
            task_id="create_source",
            name="wiki",
            connector_type="confluence",
            config=ConfluenceSourceConfig(
                url="https://wiki.example.com", username="bot@example.com", token="{{ var.value.wiki_cred }}"
            ),
        )
        bucket = conn_ops.CreateSourceConnectorOperator(
            task_id="create_s3_source",
            name="bucket",
            connector_type="s3",
            config={
                "remote_url": "s3://bucket/docs",
                "key": "{{ conn.s3_creds.login }}",
                "secret": "{{ conn.s3_creds.password }}",
                "emulator_documents": 2,
            },
        )
        vectors = conn_ops.CreateDestinationConnectorOperator(
            task_id="create_destination",
            name="vectors",
            connector_type="astradb",
            config={
                "collection_name": "docs",
                "keyspace": "default",
                "api_endpoint": "https://astra.example.com",
                "token": "{{ var.value.astra_cred }}",
            },
        )
        checks = [
            conn_ops.SourceConnectionCheckOperator(
                task_id="check_source", connector_id=wiki.output, poll_interval=0.05, timeout=30
            ),
            conn_ops.DestinationConnectionCheckOperator(
                task_id="check_destination", connector_id=vectors.output, poll_interval=0.05, timeout=30
            ),
        ]
        updates = [
            conn_ops.UpdateSourceConnectorOperator(
                task_id="update_source",
                connector_id=wiki.output,
                connector_type="confluence",
                config={
                    "url": "https://wiki.example.com",
                    "username": "bot@example.com",
                    "token": "{{ var.value.wiki_cred }}",
                    "max_num_of_spaces": 2,
                },
            ),
            conn_ops.UpdateDestinationConnectorOperator(
                task_id="update_destination",
                connector_id=vectors.output,
                config={
                    "collection_name": "docs",
                    "keyspace": "default",
                    "api_endpoint": "https://astra.example.com",
                    "token": "{{ var.value.astra_cred }}",
                    "batch_size": 20,
                },
            ),
        ]
        remote = wf_ops.CreateWorkflowOperator(
            task_id="create_remote_workflow",
            name="wiki-to-astra",
            workflow_type="basic",
            source_id=wiki.output,
            destination_id=vectors.output,
        )
        checks >> remote  # type: ignore[operator]
        updates >> remote  # type: ignore[operator]
        update_wf = wf_ops.UpdateWorkflowOperator(
            task_id="update_workflow", workflow_id=remote.output, schedule="daily"
        )
        run_remote = RunWorkflowOperator(
            task_id="run_remote", workflow_id=remote.output, poll_interval=0.1, deferrable=True
        )
        local = wf_ops.CreateWorkflowOperator(
            task_id="create_local_workflow", name="local", workflow_type="basic"
        )
        run = RunWorkflowOperator(task_id="run", workflow_id=local.output, files=files, poll_interval=0.1)
        download = DownloadJobOutputOperator(task_id="download", run_task_id="run", output_dir=str(out))
        sensor = WorkflowJobSensor(task_id="sensor", job_id=job_of_run, poke_interval=0.1, timeout=30)
        deferred_sensor = WorkflowJobSensor(
            task_id="sensor_deferrable", job_id=job_of_run, poke_interval=0.1, timeout=30, deferrable=True
        )
        failing = RunWorkflowOperator(
            task_id="run_failing",
            workflow_id=local.output,
            files=[str(inputs / "empty.txt")],
            poll_interval=0.1,
        )
        submit = RunWorkflowOperator(
            task_id="submit", workflow_id=local.output, files=files, wait_for_completion=False
        )
        cancel = CancelJobOperator(
            task_id="cancel", job_id="{{ ti.xcom_pull(task_ids='submit', key='job_id') }}"
        )
        bad_config = conn_ops.CreateSourceConnectorOperator(
            task_id="bad_config",
            name="blob",
            connector_type="azure",
            config={"remote_url": "az://c", "account_key": "{{ var.value.wiki_cred }}", "recursive": "maybe"},
        )
        teardown = [
            wf_ops.DeleteWorkflowOperator(task_id="delete_remote_workflow", workflow_id=remote.output),
            wf_ops.DeleteWorkflowOperator(task_id="delete_local_workflow", workflow_id=local.output),
        ]
        deletes = [
            conn_ops.DeleteSourceConnectorOperator(task_id="delete_source", connector_id=wiki.output),
            conn_ops.DeleteSourceConnectorOperator(task_id="delete_s3_source", connector_id=bucket.output),
            conn_ops.DeleteDestinationConnectorOperator(
                task_id="delete_destination", connector_id=vectors.output
            ),
        ]
        remote >> update_wf >> run_remote  # type: ignore[operator]
        run >> [download, sensor, deferred_sensor]  # type: ignore[operator]
        local >> [failing, submit]  # type: ignore[operator]
        submit >> cancel  # type: ignore[operator]
        for task in teardown:
            task.trigger_rule = "all_done"
            [run_remote, download, sensor, deferred_sensor, failing, cancel] >> task  # type: ignore[operator]
        for task in deletes:
            task.trigger_rule = "all_done"
            teardown >> task  # type: ignore[operator]
        bad_config.trigger_rule = "all_done"
    return dag


def leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def test_no_secret_anywhere_after_every_operator_ran(
    figures: dict[str, Any],
    dag_runner: Any,
    private_emulator: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel

    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_text("A document about the service.")
    (inputs / "empty.txt").write_text("")
    dag = every_operator_dag(inputs, tmp_path / "out")
    started = time.monotonic()
    dr = dag_runner(dag)
    seconds = time.monotonic() - started
    output = capfd.readouterr()

    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    expected_failures = {"run_failing", "bad_config"}
    assert {t for t, s in states.items() if s != TaskInstanceState.SUCCESS} == expected_failures, states
    assert "Workflow Service job" in output.out
    assert "All 1 file(s) failed" in output.out
    assert "config.recursive" in output.out  # the bad config's error is shown, without its values
    rendered = table_rows(RenderedTaskInstanceFields, dag.dag_id)
    assert '"token": "***"' in json.dumps([r.rendered_fields for r in rendered])

    places = places_to_scan(output, dag.dag_id, private_emulator)
    db, xcoms = database_file(), table_rows(XComModel, dag.dag_id)
    found = {where: leaks(text) for where, text in places.items() if leaks(text)}
    assert not found, f"secrets found in: {found}"
    # The scan had something to look at, and would have seen a secret there: the scanner finds each
    # one in text; the tasks' logs (stdout), the DB, the XComs, the service's request log were scanned;
    # and each templated secret was rendered (its masked form is in the rendered fields).
    assert leaks(" ".join(SECRETS.values())) == list(SECRETS)
    assert len(output.out) > 20_000, "the tasks' logs were not captured"
    assert len(places[f"database {db.name}"]) > 100_000
    assert xcoms
    assert private_emulator.requests()
    assert places["rendered fields"].count('"***"') >= 3, "the templated secrets were never rendered"
    files = [p for p in places if p.startswith("file ")]
    figures.update(
        tasks=len(states),
        tasks_failed_on_purpose=sorted(expected_failures),
        secrets=len(SECRETS),
        places_scanned=len(places),
        airflow_home_files_scanned=len(files),
        log_files_scanned=len([p for p in files if ".log" in p]),  # dag.test() logs to stdout
        xcoms_scanned=len(xcoms),
        rendered_field_rows_scanned=len(rendered),
        database_bytes_scanned=db.stat().st_size,
        output_chars_scanned=len(output.out) + len(output.err),
        leaks=0,
        dag_test_seconds=round(seconds, 1),
    )


def test_errors_never_echo_secret_inputs() -> None:
    """A config model built in a DAG or a task with a wrong value: pydantic's own message names the
    field but never shows the values (it used to print the whole input, secrets included)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        ConfluenceSourceConfig(
            url="https://wiki.example.com",
            username="bot",
            token=SECRETS["confluence_token"],
            password=SECRETS["astra_token"],
        )
    text = "".join(traceback.format_exception(caught.value))  # what a log shows
    assert "mixes authentication variants" in text
    assert not leaks(text)


def test_a_placeholder_credential_does_not_garble_messages() -> None:
    """Credentials shorter than Airflow's ``min_length_masked_secret`` (5) are not redacted (Airflow
    does not mask them either); a one-letter placeholder token used to turn every message into
    ``ReadTimeou***: ***imed ou***``. Real credentials are still redacted wherever they appear."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, _Transport

    short = _Transport(ConnectionSettings(base_url="https://svc.test", token="t", api_key="k"))
    assert short.redact("ReadTimeout: timed out") == "ReadTimeout: timed out"
    real = _Transport(ConnectionSettings(base_url="https://svc.test", token=SECRETS["token"]))
    assert real.redact(f"bad token {SECRETS['token']}!") == "bad token ***!"


# --------------------------------------------------------------------------------------------------
# Issue #12: credentials a header cannot carry, secrets under any name, redaction before the cut


@pytest.mark.parametrize(
    ("field", "bad"),
    [("password", "\r\nX-Injected: 1"), ("password", "\n"), ("api_key", "\x00"), ("api_key", "\r")],
    ids=["token-crlf", "token-lf", "api-key-nul", "api-key-cr"],
)
def test_a_credential_with_cr_lf_or_nul_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
    workflowsvc_conn: Any,
    caplog: pytest.LogCaptureFixture,
    field: str,
    bad: str,
) -> None:
    """httpx refused such a header when the request was sent, with an error quoting the whole value
    (printed in the task log). Now the connection is refused when read: the field is named, the value
    appears nowhere (message, repr, exception chain, logs) and no request is sent."""
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    head, tail = f"cred-{_SUFFIX}-head", f"tail-{_SUFFIX}"
    value = head + bad + tail
    conn = {"conn_type": "workflowsvc", "host": workflowsvc_conn.base_url, "password": workflowsvc_conn.token}
    conn["extra"] = {"api_key": workflowsvc_conn.api_key}
    if field == "password":
        conn["password"] = value
    else:
        conn["extra"] = {"api_key": value}
    monkeypatch.setenv("AIRFLOW_CONN_PASTED", json.dumps(conn))
    workflowsvc_conn.clear_requests()

    with pytest.raises(WorkflowServiceInputError) as caught, WorkflowServiceHook("pasted") as hook:
        hook.list_jobs()
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value) + caplog.text
    chain = [caught.value.__cause__, caught.value.__context__]
    assert ("password (token)" if field == "password" else "api_key") in str(caught.value)
    assert head not in shown
    assert tail not in shown
    assert all(link is None or head not in "".join(traceback.format_exception(link)) for link in chain)
    assert workflowsvc_conn.requests() == []

    with pytest.raises(Exception) as direct:  # built in code, not from a connection: same rule
        ConnectionSettings(
            base_url="https://svc.test", **{"token" if field == "password" else "api_key": value}
        )
    assert head not in "".join(traceback.format_exception(direct.value))


CONFIG_CASES = [
    pytest.param(
        "box",
        {
            "client_cred": "box-cred-{s}",
            "box_app_config": {"boxAppSettings": {"appAuth": {"pk": "box-pk-{s}"}}},
        },
        ["box-cred-{s}", "box-pk-{s}"],
        [],
        id="box-unlisted-names",
    ),
    pytest.param(
        "mongodb",
        {"uri": "mongodb://reader:mongo-pw-{s}@db.example.com:27017/app", "database": "app-db-{s}"},
        ["mongo-pw-{s}", "mongodb://reader:mongo-pw-{s}@db.example.com:27017/app"],
        ["app-db-{s}"],  # the live docs: a database name, no secret
        id="mongodb-uri",
    ),
    pytest.param(
        "s3",
        {
            "remote_url": "s3://docs-{s}/in",
            "endpoint_url": "https://ak:s3-pw-{s}@minio.example.com",
            "aws_key": "s3-key-{s}",
            "recursive": True,
        },
        ["s3-pw-{s}", "s3-key-{s}"],
        ["s3://docs-{s}/in"],
        id="s3-allow-list-and-uri-password",
    ),
    pytest.param(
        "confluence",
        {
            "url": "https://wiki-{s}.example.com",
            "username": "bot-{s}",
            "token": "cfl-{s}",
            "spaces": ["ENG-{s}"],
        },
        ["cfl-{s}"],
        ["https://wiki-{s}.example.com", "bot-{s}", "ENG-{s}"],
        id="confluence-typed",
    ),
    pytest.param(
        None,
        {"url": "https://wiki-{s}.example.com", "token": "cfl-{s}"},
        ["cfl-{s}", "https://wiki-{s}.example.com"],
        [],
        id="type-unknown-masks-every-string",
    ),
]


@pytest.mark.parametrize(("connector_type", "config", "secret", "clear"), CONFIG_CASES)
def test_config_secrets_do_not_depend_on_field_names(
    connector_type: str | None, config: dict[str, Any], secret: list[str], clear: list[str]
) -> None:
    """Every string of a connector config is a secret unless its key is a known non-secret setting of
    the connector's type; URI passwords always are."""
    from airflow_provider_workflowsvc._tasks.secrets import config_secrets

    def fill(value: Any) -> Any:
        return json.loads(json.dumps(value).replace("{s}", _SUFFIX))

    found = config_secrets(fill(config), connector_type)
    assert set(fill(secret)) <= set(found)
    assert not set(fill(clear)) & set(found)


def test_connector_secrets_under_any_name_never_reach_logs_or_rendered_fields(
    figures: dict[str, Any],
    dag_runner: Any,
    workflowsvc_conn: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``client_cred``, ``box_app_config`` and a password inside a ``uri`` were stored in clear in the
    rendered template fields (metadata DB, UI). Templates bring them from innocently named variables."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    values = {"box_cred": f"boxc-{_SUFFIX}", "box_pk": f"boxk-{_SUFFIX}", "mongo_pw": f"mpw-{_SUFFIX}"}
    for name, value in values.items():
        monkeypatch.setenv(f"AIRFLOW_VAR_{name.upper()}", value)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with DAG("reliability_secret_names", schedule=None, start_date=start, catchup=False) as dag:
        box = conn_ops.CreateSourceConnectorOperator(
            task_id="box",
            name="box",
            connector_type="box",
            config={
                "remote_url": "box://folder",
                "client_cred": "{{ var.value.box_cred }}",
                "box_app_config": {"boxAppSettings": {"appAuth": {"privateKey": "{{ var.value.box_pk }}"}}},
            },
        )
        mongo = conn_ops.CreateDestinationConnectorOperator(
            task_id="mongo",
            name="mongo",
            connector_type="mongodb",
            config={
                "uri": "mongodb://reader:{{ var.value.mongo_pw }}@db.example.com/app",
                "database": "app",
                "collection": "docs",
            },
        )
        s3 = conn_ops.CreateSourceConnectorOperator(
            task_id="s3",
            name="bucket",
            connector_type="s3",
            config={"remote_url": f"s3://visible-{_SUFFIX}/docs", "key": "{{ var.value.box_cred }}"},
        )
        for source in (box, s3):
            source >> conn_ops.DeleteSourceConnectorOperator(  # type: ignore[operator]
                task_id=f"delete_{source.task_id}", connector_id=source.output
            )
        mongo >> conn_ops.DeleteDestinationConnectorOperator(  # type: ignore[operator]
            task_id="delete_mongo", connector_id=mongo.output
        )
    dr = dag_runner(dag)
    output = capfd.readouterr()
    assert {ti.state for ti in dr.get_task_instances()} == {TaskInstanceState.SUCCESS}
    rendered = json.dumps([r.rendered_fields for r in table_rows(RenderedTaskInstanceFields, dag.dag_id)])
    db = "".join(data.decode("latin-1") for data in read_apart(database_files()))
    places = {"rendered": rendered, "stdout": output.out, "stderr": output.err, "database": db}
    for where, text in places.items():
        assert not [n for n, v in values.items() if v in text], where
    assert f"s3://visible-{_SUFFIX}/docs" in rendered  # a known non-secret setting stays readable
    assert '"client_cred": "***"' in rendered
    assert '"uri": "***"' in rendered
    figures.update(secrets=len(values), places_scanned=len(places), database_bytes_scanned=len(db), leaks=0)


@pytest.mark.parametrize("kind", ["json-detail", "plain-text", "not-json-success"])
def test_error_bodies_are_redacted_before_they_are_cut(mock_service: Any, kind: str) -> None:
    """A credential crossing the cut used to leak in part (30 of its 67 characters): the text was
    cut first and redacted after, when the cut copy no longer held the whole credential."""
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceError
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    token = f"tok-{_SUFFIX}-" + "x" * 50  # 67 characters
    limit = {"json-detail": 1000, "plain-text": 300, "not-json-success": 120}[kind]
    text = "e" * (limit - 30) + f" token {token} was refused"
    route = mock_service.get("/jobs/")
    if kind == "json-detail":
        route.respond(400, json={"detail": text})
    elif kind == "plain-text":
        route.respond(400, text=text)
    else:
        route.respond(200, text=text)
    settings = ConnectionSettings(base_url=MOCK_BASE_URL, token=token, max_retries=0)
    with WorkflowServiceHook(settings=settings) as hook, pytest.raises(WorkflowServiceError) as caught:
        hook.list_jobs()
    message = str(caught.value)
    assert "***" in message
    assert token[:8] not in message
    assert token[-8:] not in message


# --------------------------------------------------------------------------------------------------
# Secrets inside URLs under keys known to hold no secret (issue #24): an Azure SAS, a presigned S3 URL,
# a ``?token=`` on a Confluence URL, a password in an endpoint's user info.

URL_SECRETS = {
    "sas_sig": f"sAsSig{_SUFFIX}Q%2Bv4%3D",
    "amz_signature": f"a1b2c3d4{_SUFFIX}e5f6a7b8c9d0",
    "amz_credential": f"AKIAURL{_SUFFIX.upper()}",
    "confluence_token": f"cflurl{_SUFFIX}tok",
    "endpoint_password": f"pw{_SUFFIX}astra",
}
URL_VARIABLES = {
    "AIRFLOW_VAR_BLOB_LOCATION": (
        "https://acct.blob.core.windows.net/docs/in?sv=2022-11-02&ss=b&sp=rl&se=2030-01-01T00%3A00%3A00Z"
        f"&sig={URL_SECRETS['sas_sig']}"
    ),
    "AIRFLOW_VAR_BUCKET_ENDPOINT": (
        "https://bucket.s3.amazonaws.com/?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={URL_SECRETS['amz_credential']}%2F20300101%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date=20300101T000000Z&X-Amz-Expires=3600&X-Amz-Signature={URL_SECRETS['amz_signature']}"
    ),
    "AIRFLOW_VAR_WIKI_LOCATION": f"https://wiki.example.com/?token={URL_SECRETS['confluence_token']}",
    "AIRFLOW_VAR_VECTORS_LOCATION": f"https://bot:{URL_SECRETS['endpoint_password']}@astra.example.com",
}


def url_leaks(text: str) -> list[str]:
    from urllib.parse import unquote

    return [name for name, value in URL_SECRETS.items() if value in text or unquote(value) in text]


def test_url_embedded_secrets_are_found_nowhere(
    figures: dict[str, Any],
    dag_runner: Any,
    private_emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.lineage import connector_datasets

    for name, value in URL_VARIABLES.items():
        monkeypatch.setenv(name, value)
    configs = {
        "azure": {"remote_url": "{{ var.value.blob_location }}", "account_name": "acct"},
        "s3": {"remote_url": "s3://bucket/docs", "endpoint_url": "{{ var.value.bucket_endpoint }}"},
        "confluence": {"url": "{{ var.value.wiki_location }}", "username": "bot", "token": "t0ken-plain"},
    }
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with DAG("reliability_url_secrets", schedule=None, start_date=start, catchup=False) as dag:
        for connector_type, config in configs.items():
            conn_ops.CreateSourceConnectorOperator(
                task_id=f"create_{connector_type}",
                name=f"url-{connector_type}",
                connector_type=connector_type,
                config=config,
            )
        conn_ops.CreateDestinationConnectorOperator(
            task_id="create_astradb",
            name="url-astradb",
            connector_type="astradb",
            config={
                "collection_name": "docs",
                "api_endpoint": "{{ var.value.vectors_location }}",
                "token": "astra-plain-token",
            },
        )
        conn_ops.CreateSourceConnectorOperator(  # fails on a bad setting: its error text is scanned too
            task_id="bad_azure",
            name="url-bad",
            connector_type="azure",
            config={"remote_url": "{{ var.value.blob_location }}", "recursive": "maybe"},
        )
    dr = dag_runner(dag)
    output = capfd.readouterr()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert {t for t, s in states.items() if s != TaskInstanceState.SUCCESS} == {"bad_azure"}, states

    places = places_to_scan(output, dag.dag_id, private_emulator)
    with WorkflowServiceHook("workflowsvc_default") as hook:  # what the service answers
        sources = [s.model_dump(mode="json") for s in hook.list_sources()]
        destinations = [d.model_dump(mode="json") for d in hook.list_destinations()]
    places["emulator answers"] = json.dumps([sources, destinations])
    rendered = {**{k: v for k, v in URL_VARIABLES.items()}}
    identities = [
        connector_datasets(
            "azure", {"remote_url": rendered["AIRFLOW_VAR_BLOB_LOCATION"], "account_name": "acct"}
        ),
        connector_datasets(
            "s3", {"remote_url": "s3://bucket/docs?" + rendered["AIRFLOW_VAR_BUCKET_ENDPOINT"]}
        ),
        connector_datasets("confluence", {"url": rendered["AIRFLOW_VAR_WIKI_LOCATION"]}),
        connector_datasets(
            "astradb", {"api_endpoint": rendered["AIRFLOW_VAR_VECTORS_LOCATION"], "collection_name": "d"}
        ),
    ]
    places["lineage and asset identities"] = json.dumps([[i.uri for i in found] for found in identities])
    found = {where: url_leaks(text) for where, text in places.items() if url_leaks(text)}
    assert not found, f"URL-embedded secrets found in: {found}"
    # The scan would have seen them: each is in the URLs the tasks rendered, the locations stayed readable.
    assert url_leaks(" ".join(URL_VARIABLES.values())) == list(URL_SECRETS)
    assert "acct.blob.core.windows.net/docs/in" in places["rendered fields"]
    assert "wiki.example.com" in places["emulator answers"]
    assert all(identities), identities
    figures.update(url_secrets_planted=len(URL_SECRETS), url_places_scanned=len(places), url_leaks=0)
