"""
Credentials rotated under a running wait (issue #24): a refused request (401/403) reads the connection
again, bypassing the settings cache, and is sent again with the new credentials; a wait longer than the
cache's lifetime picks rotated credentials up within it; a token that stays wrong fails, naming the
connection. Over loopback against the emulator (whose accepted token the test rotates), and in
``dag.test()`` runs with a connection stored in Airflow's metadata DB, both waiting modes.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from helpers import ConnectionStore

from airflow_provider_workflowsvc.exceptions import WorkflowServiceAuthError
from airflow_provider_workflowsvc.hooks._settings import SETTINGS_CACHE, SETTINGS_TTL
from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

ROTATED = "tok-rotated-2c6e94"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def rotate(connection_store: ConnectionStore, emulator: Any, token: str = ROTATED) -> None:
    """Rotate as an operator would: the connection gets the new token, then the old one is revoked."""
    connection_store.rotate_to(token)
    emulator.configure(api_token=token)


def refused(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.requests() if r["status"] == 401]


async def test_a_refused_request_reads_the_connection_again_and_is_sent_again(
    emulator: Any, connection_store: ConnectionStore
) -> None:
    async with WorkflowServiceAsyncHook("rotating") as hook:
        assert await hook.list_workflows() == []
        rotate(connection_store, emulator)
        assert await hook.list_workflows() == []  # 401, connection read again, sent again: 200
    assert connection_store.reads == 2
    assert len(refused(emulator)) == 1


async def test_hooks_refused_together_read_the_connection_once(
    emulator: Any, connection_store: ConnectionStore
) -> None:
    hooks = [WorkflowServiceAsyncHook("rotating") for _ in range(20)]
    await asyncio.gather(*(h.list_workflows() for h in hooks))
    rotate(connection_store, emulator)
    await asyncio.gather(*(h.list_workflows() for h in hooks))
    await asyncio.gather(*(h.aclose() for h in hooks))
    assert connection_store.reads == 2  # once at the start, once after the refusals (one read shared)


async def test_a_long_wait_picks_up_rotated_credentials_within_the_cache_lifetime(
    emulator: Any, connection_store: ConnectionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(SETTINGS_CACHE, "clock", lambda: clock[0])
    async with WorkflowServiceAsyncHook("rotating") as hook:
        await hook.list_workflows()
        connection_store.rotate_to(ROTATED)  # the connection changed; the service still accepts both for now
        clock[0] += SETTINGS_TTL - 1
        await hook.list_workflows()
        assert connection_store.reads == 1
        clock[0] += 1
        emulator.configure(api_token=ROTATED)  # the old token is revoked only now: no refusal follows
        await hook.list_workflows()
    assert connection_store.reads == 2
    assert refused(emulator) == []


async def test_a_token_that_stays_wrong_fails_naming_the_connection(
    emulator: Any, connection_store: ConnectionStore
) -> None:
    async with WorkflowServiceAsyncHook("rotating") as hook:
        await hook.list_workflows()
        emulator.configure(api_token=ROTATED)  # revoked, and the connection was never updated
        with pytest.raises(WorkflowServiceAuthError) as caught:
            await hook.list_workflows()
    text = str(caught.value)
    assert "connection 'rotating' was read again" in text
    assert caught.value.status_code == 401
    assert connection_store.token not in text
    assert ROTATED not in text
    assert connection_store.reads == 2


def test_the_sync_hook_reads_the_connection_again_when_refused(
    emulator: Any, connection_store: ConnectionStore
) -> None:
    with WorkflowServiceHook("rotating") as hook:
        hook.list_workflows()
        rotate(connection_store, emulator)
        assert hook.list_workflows() == []
        emulator.configure(api_token="tok-never-given-0000")
        with pytest.raises(WorkflowServiceAuthError, match="connection 'rotating' was read again"):
            hook.list_workflows()
    assert connection_store.reads == 3


def test_settings_given_directly_are_never_read_again(emulator: Any, settings: Any) -> None:
    with WorkflowServiceHook(settings=settings) as hook:
        hook.list_workflows()
        emulator.configure(api_token=ROTATED)
        try:
            with pytest.raises(WorkflowServiceAuthError) as caught:
                hook.list_workflows()
        finally:
            emulator.configure(api_token=None)
    assert "read again" not in str(caught.value)


# --------------------------------------------------------------------------------------------------
# dag.test(): a connection in Airflow's metadata DB, rotated while the task waits (both modes)

DB_CONN = "workflowsvc_rotating_db"


@pytest.fixture
def db_connection(airflow_db: None, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """
    A connection stored in the metadata DB. ``dag.test()`` runs the trigger inline, where the Task SDK
    looks connections up in the environment only; the real triggerer's supervisor reads them from the
    DB. The trigger's hook reads this one from the DB, freshly each time, as there (the e2e test
    covers the real triggerer).
    """
    from airflow.models import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == DB_CONN).delete()
        session.add(
            Connection(
                conn_id=DB_CONN,
                conn_type="workflowsvc",
                host=emulator.base_url,
                password=emulator.token,
                extra=json.dumps({"api_key": emulator.api_key, "retry_wait": 0.05}),
            )
        )
    from asgiref.sync import sync_to_async

    async def from_the_db(hook: Any) -> Any:
        return await sync_to_async(Connection.get_connection_from_secrets)(hook.workflowsvc_conn_id)

    monkeypatch.setattr(WorkflowServiceAsyncHook, "_aget_connection", from_the_db)
    yield DB_CONN
    emulator.configure(api_token=None)
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == DB_CONN).delete()


def rotate_in_db(emulator: Any, token: str) -> None:
    from airflow.models import Connection
    from airflow.utils.session import create_session

    with create_session() as session:
        connection = session.query(Connection).filter(Connection.conn_id == DB_CONN).one()
        connection.password = token
        connection.extra = json.dumps({"api_key": token, "retry_wait": 0.05})
    emulator.configure(api_token=token)


@pytest.mark.parametrize("deferrable", [False, True])
def test_a_db_connection_rotated_mid_wait_fails_no_wait(
    dag_runner: Any, emulator: Any, settings: Any, db_connection: str, tmp_path: Path, deferrable: bool
) -> None:
    """The job runs until the rotation has been seen and survived (a refusal, then a poll with the new
    token): only then does the test let it complete, so the wait cannot end before the rotation."""
    from airflow.utils.state import TaskInstanceState

    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

    with WorkflowServiceHook(settings=settings) as hook:
        workflow = str(hook.create_workflow(f"wf-{time.time_ns()}", "basic").id)
    emulator.configure(processing_delay=HELD)
    (tmp_path / "a.txt").write_text("one")
    with DAG(f"wfsvc_rotation_{deferrable}", schedule=None, start_date=START, catchup=False) as dag:
        RunWorkflowOperator(
            task_id="run",
            workflow_id=workflow,
            files=str(tmp_path / "a.txt"),
            workflowsvc_conn_id=db_connection,
            poll_interval=0.2,
            timeout=HELD,
            deferrable=deferrable,
        )
    ended = threading.Event()

    def rotate_then_let_the_job_complete() -> None:
        if not until(lambda: len(polls(emulator)) >= 3, ended):
            return
        rotate_in_db(emulator, ROTATED)
        if until(lambda: [r["status"] for r in polls(emulator)][-2:] == [401, 200], ended):
            emulator.advance_clock(HELD * 10)

    rotator = threading.Thread(target=rotate_then_let_the_job_complete)
    rotator.start()
    try:
        dr = dag_runner(dag)
    finally:
        ended.set()
        rotator.join()
    assert dr.get_task_instance("run").state == TaskInstanceState.SUCCESS
    statuses = [r["status"] for r in polls(emulator)]
    assert statuses.count(401) == 1, statuses
    assert statuses[-1] == 200  # polled on with the new token after the refusal


HELD = 3600.0
"""Emulator seconds per file per node: the job runs until the test moves the emulator's clock."""


def polls(emulator: Any) -> list[dict[str, Any]]:
    return emulator.requests(path_contains="/details")


def until(happened: Any, ended: threading.Event) -> bool:
    """Wait for an event (True), or for the run to end first (False)."""
    while not happened():
        if ended.wait(0.05):
            return False
    return True


def test_a_long_sync_wait_reads_its_connection_again_after_the_lifetime(
    emulator: Any, connection_store: ConnectionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(SETTINGS_CACHE, "clock", lambda: clock[0])
    with WorkflowServiceHook("rotating") as hook:
        hook.list_workflows()
        connection_store.rotate_to(ROTATED)
        clock[0] += SETTINGS_TTL
        emulator.configure(api_token=ROTATED)
        assert hook.list_workflows() == []
    assert connection_store.reads == 2
    assert refused(emulator) == []
