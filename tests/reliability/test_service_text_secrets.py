"""
Text from the service is masked too (issue #31, item 7).

The service's job message and failed-file errors may quote a location the user gave with credentials
in it (a ``mongodb://user:pass@host`` URI, an Azure SAS, a presigned S3 URL, a ``?token=``). The
emulator plants such text (``failure_detail``) in every failed file's error and so in a failed job's
message. Every exit of that text is then searched for the credentials: the task logs and exceptions
(captured output, log files), the XCom summaries and the trigger events (the metadata database, raw),
the job-event watcher's payload (the asset event's extra), and the service's error details in an
exception. The locations (scheme, host, path) stay readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncGenerator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote

import httpx
import pytest
from airflow.sdk import DAG
from airflow.utils.state import TaskInstanceState
from helpers import FAKE_WORKFLOW_ID

from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

from ._helpers import places_to_scan

_SUFFIX = secrets.token_hex(6)
PLANTED = {
    "mongodb_password": f"Mg{_SUFFIX}pw",
    "sas_sig": f"sAsSig{_SUFFIX}Q%2Bv4%3D",
    "amz_credential": f"AKIASVC{_SUFFIX.upper()}",
    "amz_signature": f"f00d{_SUFFIX}beef0123",
    "token": f"tok{_SUFFIX}svc",
}
DETAIL = (
    f"cannot read mongodb://etl:{PLANTED['mongodb_password']}@db.example.com:27017/docs, "
    "https://acct.blob.core.windows.net/in/doc.pdf?sv=2022-11-02&sp=r"
    f"&sig={PLANTED['sas_sig']}, "
    "https://bucket.s3.amazonaws.com/doc.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    f"&X-Amz-Credential={PLANTED['amz_credential']}%2F20300101%2Fus-east-1%2Fs3%2Faws4_request"
    f"&X-Amz-Signature={PLANTED['amz_signature']} or https://wiki.example.com/?token={PLANTED['token']}"
)
READABLE = ("mongodb://***@db.example.com:27017/docs", "https://acct.blob.core.windows.net/in/doc.pdf?")
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def leaks(text: str) -> list[str]:
    return [name for name, value in PLANTED.items() if value in text or unquote(value) in text]


def test_planted_text_carries_every_credential() -> None:
    assert leaks(DETAIL) == list(PLANTED)  # the search below would see each one


def test_service_text_reaches_no_log_xcom_event_or_exception_in_clear(
    dag_runner: Any,
    emulator: Any,
    settings: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    figures: dict[str, Any],
) -> None:
    """Scenario: jobs fail (some files, all files) with the planted text; the run operator (sync and
    deferred) and the sensor (poke and deferred) report them."""
    emulator.configure(processing_delay=0.02, failure_detail=DETAIL)
    (tmp_path / "good.txt").write_text("some text")
    (tmp_path / "bad.txt").write_text("")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)
    files = {
        "some": [str(tmp_path / "good.txt"), str(tmp_path / "bad.txt")],
        "all": str(tmp_path / "bad.txt"),
    }
    with DAG("reliability_service_text", schedule=None, start_date=START, catchup=False) as dag:
        for deferrable in (False, True):
            mode = "deferred" if deferrable else "sync"
            for which, inputs in files.items():
                run = RunWorkflowOperator(
                    task_id=f"run_{which}_{mode}",
                    workflow_id=workflow,
                    files=inputs,
                    deferrable=deferrable,
                    poll_interval=0.05,
                )
                sensor = WorkflowJobSensor(
                    task_id=f"sensor_{which}_{mode}",
                    job_id=f"{{{{ ti.xcom_pull(task_ids='run_{which}_{mode}', key='job_id') }}}}",
                    fail_on_failed_files=False,
                    deferrable=deferrable,
                    poke_interval=0.05,
                    trigger_rule="all_done",
                )
                run >> sensor
    dr = dag_runner(dag)
    output = capfd.readouterr()
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    failed = {t for t, s in states.items() if s == TaskInstanceState.FAILED}
    # failed files fail a run (fail_on_failed_files) and a failed job fails its sensor too
    assert failed == {"run_some_sync", "run_all_sync", "run_some_deferred", "run_all_deferred"} | {
        "sensor_all_sync",
        "sensor_all_deferred",
    }, states
    places = places_to_scan(output, dag.dag_id, emulator)
    found = {where: leaks(text) for where, text in places.items() if leaks(text)}
    assert not found, f"credentials from the service's text found in: {found}"
    summaries = places["xcom values"]
    assert all(location in summaries for location in READABLE), summaries  # masked, still readable
    with WorkflowServiceHook(settings=settings) as hook:  # the service did say them
        job_id = dr.get_task_instance("run_all_sync").xcom_pull(task_ids="run_all_sync", key="job_id")
        assert leaks(hook.get_job_failed_files(job_id).model_dump_json()) == list(PLANTED)
    figures.update(planted=len(PLANTED), places_scanned=len(places), leaks=0)


async def test_the_job_event_watchers_payload_is_masked(
    workflowsvc_conn: Any, settings: Any, tmp_path: Path
) -> None:
    """Scenario: a job that fails after the watch began: its event's payload (the asset event's
    extra) carries the job's message and failed files, masked."""
    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger

    emulator = workflowsvc_conn
    emulator.configure(processing_delay=3600, failure_detail=DETAIL)  # the job ends when the clock moves
    (tmp_path / "bad.txt").write_text("")
    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)
        hook.run_workflow(workflow, files=[tmp_path / "bad.txt"])
    trigger = WorkflowJobEventTrigger(workflow_id=workflow, poll_interval=0.05)
    events = cast("AsyncGenerator[Any, None]", trigger.run())
    first = asyncio.ensure_future(events.__anext__())
    try:
        while trigger._memory is None and not first.done():  # its first cursor: the watch has begun
            await asyncio.sleep(0.02)
        emulator.advance_clock(3600 * 10)  # the job fails now, after the watch began
        payload = (await first).payload
    finally:
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await first
        await events.aclose()
    text = json.dumps(payload)
    assert payload["failed_count"] == 1
    assert not leaks(text), text
    assert READABLE[0] in payload["message"]
    assert READABLE[1] in payload["failed_files"][0]["error"]


def test_error_details_from_the_service_are_masked(mock_service: Any) -> None:
    mock_service.get(f"/workflows/{FAKE_WORKFLOW_ID}").mock(
        return_value=httpx.Response(409, json={"detail": DETAIL})
    )
    with WorkflowServiceHook() as hook, pytest.raises(Exception) as caught:
        hook.get_workflow(FAKE_WORKFLOW_ID)
    assert not leaks(str(caught.value)), str(caught.value)
    assert READABLE[0] in str(caught.value)


def test_a_connection_checks_reason_is_masked(mock_service: Any) -> None:
    from airflow_provider_workflowsvc.exceptions import ConnectionCheckFailedError
    from airflow_provider_workflowsvc.operators.connectors import SourceConnectionCheckOperator

    path = f"/sources/{FAKE_WORKFLOW_ID}/connection-check"
    failure = {"id": "chk-1", "status": "failure", "reason": DETAIL}
    mock_service.post(path).respond(json={"id": "chk-1", "status": "scheduled", "reason": None})
    mock_service.get(path).respond(json=failure)
    task = SourceConnectionCheckOperator(task_id="check", connector_id=FAKE_WORKFLOW_ID, poll_interval=0.01)
    with pytest.raises(ConnectionCheckFailedError) as caught:
        task.execute({})
    assert not leaks(f"{caught.value} {caught.value.reason}")
    assert READABLE[0] in str(caught.value)
