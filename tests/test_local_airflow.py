"""The local-Airflow harness's own guarantees, without starting Airflow: stragglers are killed, and a
component that dies while starting is reported with its log."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from scripts.component_path.local_airflow_host import HOST_ENV, component_hostname
from scripts.local_airflow import (
    COMPONENT_PATH,
    HOSTNAME_CALLABLE,
    REPO_ROOT,
    Component,
    DistributedAirflow,
    LocalAirflow,
    LocalAirflowError,
    _group_members,
    connection_json,
    free_port,
)

# A process group whose leader and child both ignore SIGTERM.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
print("ready", flush=True)
time.sleep(120)
"""


def _component(name: str, code: str, log: Path) -> Component:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Component(name, process, log)


def test_stop_kills_a_process_group_that_ignores_sigterm(tmp_path: Path) -> None:
    airflow = LocalAirflow(dags_folder=tmp_path, home=tmp_path / "home")
    component = _component("scheduler", STUBBORN, tmp_path / "stubborn.log")
    airflow.components.append(component)
    while len(_group_members(component.pid)) < 2:  # the process and its child are up
        time.sleep(0.05)

    airflow.stop(timeout=1)  # returns at all: SIGTERM is ignored, so only the SIGKILL ended the group

    assert _group_members(component.pid) == []
    assert component.process.returncode == -9
    assert airflow.components == []


def test_a_component_dying_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    airflow = LocalAirflow(dags_folder=tmp_path, home=tmp_path / "home", port=free_port())
    code = "print('ImportError: no module named kaboom'); raise SystemExit(3)"
    component = _component("triggerer", code, tmp_path / "triggerer.log")
    airflow.components.append(component)
    component.process.wait(20)
    try:
        with pytest.raises(LocalAirflowError) as info:
            airflow.wait_healthy(deadline=time.monotonic() + 20)
    finally:
        airflow.stop(timeout=1)
    message = str(info.value)
    assert "triggerer exited with code 3" in message
    assert "ImportError: no module named kaboom" in message


def test_the_environment_is_isolated_and_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    airflow = LocalAirflow(dags_folder=tmp_path, env={"EXTRA": "1"})
    try:
        env = airflow.component_env()
    finally:
        airflow.stop()
    assert "AIRFLOW__CORE__UNIT_TEST_MODE" not in env  # the caller's Airflow settings do not leak in
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__API__BASE_URL"] == f"http://localhost:{airflow.port}"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(tmp_path.resolve())
    assert env["EXTRA"] == "1"
    assert not Path(env["AIRFLOW_HOME"]).exists()  # a temp home is removed by stop()


def test_connection_json() -> None:
    conn = json.loads(connection_json("http://127.0.0.1:1/api/v1", "tok", "key", retry_wait=0.1))
    assert conn == {
        "conn_type": "workflowsvc",
        "host": "http://127.0.0.1:1/api/v1",
        "password": "tok",
        "extra": {"retry_wait": 0.1, "api_key": "key"},
    }
    assert "password" not in json.loads(connection_json("http://h/api/v1", None, None))


def test_group_members_ignores_other_groups() -> None:
    assert _group_members(os.getpgrp()) != []
    assert _group_members(2**22 + 12345) == []


# --------------------------------------------------------------------------------------------------
# The distributed shape's settings and helpers (starting it is tests/test_e2e_distributed.py's job)


def test_the_distributed_shape_runs_celery_on_postgres_with_two_triggerers(tmp_path: Path) -> None:
    airflow = DistributedAirflow(dags_folder=tmp_path, env={"EXTRA": "1"})
    try:
        env = airflow.component_env()
        names = [name for name, _ in airflow.component_specs()]
    finally:
        airflow.stop()
    assert names == [
        "api-server",
        "scheduler",
        "dag-processor",
        "triggerer-1",
        "triggerer-2",
        "celery-worker-1",
    ]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        f"postgresql+psycopg2://airflow@127.0.0.1:{airflow.pg_port}/airflow"
    )
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CELERY__BROKER_URL"] == f"redis://127.0.0.1:{airflow.redis_port}/0"
    # failover in seconds: a triggerer silent for 5 s is dead, a task silent for 15 s failed
    assert env["AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD"] == "5"
    assert env["AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC"] == "1"
    assert env["AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT"] == "15"
    assert env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] == HOSTNAME_CALLABLE
    assert env["AIRFLOW__CORE__FERNET_KEY"]
    assert env["EXTRA"] == "1"
    assert len({airflow.port, airflow.pg_port, airflow.redis_port}) == 3


def test_each_component_reports_its_name_as_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_ENV, "triggerer-2")
    assert component_hostname() == "triggerer-2"
    monkeypatch.delenv(HOST_ENV)
    assert component_hostname() == socket.getfqdn()


def test_components_import_the_installed_provider_and_find_the_hostname_callable(tmp_path: Path) -> None:
    """Only the hostname's folder is on the components' path: the provider is the installed one (the
    built wheel in CI), never the checkout's source put first by the harness."""
    import airflow_provider_workflowsvc

    env = LocalAirflow(dags_folder=tmp_path, home=tmp_path / "home").component_env()
    path = env["PYTHONPATH"].split(os.pathsep)
    assert path[0] == str(COMPONENT_PATH)
    assert str(REPO_ROOT) not in path
    module, _, function = HOSTNAME_CALLABLE.rpartition(".")
    code = (
        f"import {module}, airflow_provider_workflowsvc as p; print({module}.{function}()); print(p.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, HOST_ENV: "scheduler"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == ["scheduler", airflow_provider_workflowsvc.__file__]


def test_kill_component_sigkills_the_whole_group_and_forgets_it(tmp_path: Path) -> None:
    airflow = LocalAirflow(dags_folder=tmp_path, home=tmp_path / "home")
    component = _component("triggerer-1", STUBBORN, tmp_path / "stubborn.log")
    airflow.components.append(component)
    deadline = time.monotonic() + 20
    while len(_group_members(component.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        killed = airflow.kill_component("triggerer-1")
    finally:
        airflow.stop(timeout=1)
    assert killed is component
    assert component.process.returncode == -9
    assert _group_members(component.pid) == []  # the child too
    with pytest.raises(LocalAirflowError, match="no component 'triggerer-1'"):
        airflow.component("triggerer-1")


def test_missing_debian_packages_are_named_with_the_command_when_not_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import scripts.local_airflow as harness

    monkeypatch.setattr(harness, "postgres_bindir", lambda: None)
    monkeypatch.setattr(harness.shutil, "which", lambda program: None)
    monkeypatch.setattr(harness.os, "geteuid", lambda: 1000)
    assert harness.missing_debian_packages() == ["postgresql", "redis-server"]
    with pytest.raises(LocalAirflowError) as info:
        harness.ensure_debian_packages()
    assert "apt-get install -y --no-install-recommends postgresql redis-server" in str(info.value)


def test_installed_debian_packages_install_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import scripts.local_airflow as harness

    monkeypatch.setattr(harness, "postgres_bindir", lambda: Path("/usr/lib/postgresql/15/bin"))
    monkeypatch.setattr(harness.shutil, "which", lambda program: f"/usr/bin/{program}")
    monkeypatch.setattr(harness.subprocess, "run", lambda *a, **k: pytest.fail("ran a command"))
    assert harness.ensure_debian_packages() == []


def test_a_get_answered_5xx_is_asked_again_and_other_methods_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = {"GET": [500, 503, 200], "POST": [500, 200]}
    seen: list[str] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        return httpx.Response(answers[request.method].pop(0), json={"ok": True})

    monkeypatch.setattr("scripts.local_airflow.time.sleep", lambda seconds: None)
    airflow = LocalAirflow(dags_folder=tmp_path, home=tmp_path / "home")
    airflow._client = httpx.Client(base_url="http://airflow.test", transport=httpx.MockTransport(reply))
    assert airflow.api("GET", "/assets/events") == {"ok": True}
    with pytest.raises(LocalAirflowError, match="POST /api/v2/dags -> 500"):
        airflow.api("POST", "/dags")
    assert seen == ["GET", "GET", "GET", "POST"]


# --------------------------------------------------------------------------------------------------
# ./dev airflow's arguments (scripts/local_run.py): what it runs on, and what it may empty


def test_local_run_resolves_the_folders_against_the_callers_directory(tmp_path: Path) -> None:
    from scripts.local_run import parse_args

    (tmp_path / "my_dags").mkdir()
    args = parse_args(["--dags", "my_dags", "--home", "airflow-home", "--workdir", str(tmp_path)])
    assert (args.dags, args.home) == (tmp_path / "my_dags", tmp_path / "airflow-home")


def test_local_run_refuses_to_empty_a_folder_that_is_not_an_airflow_home(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from scripts.local_run import parse_args

    (tmp_path / "dags").mkdir()
    home = tmp_path / "home"
    (home / "components").mkdir(parents=True)
    (home / "airflow.db").write_text("")
    assert parse_args(["--dags", str(tmp_path / "dags"), "--home", str(home)]).home == home
    (home / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exited:
        parse_args(["--dags", str(tmp_path / "dags"), "--home", str(home)])
    assert exited.value.code == 2
    assert f"--home {home}: it is emptied at each start" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--dags", str(tmp_path / "missing"), "--home", str(tmp_path / "new")])


def test_local_run_passes_the_shells_variables_and_connections_but_its_own() -> None:
    from scripts.local_run import passed_through

    environ = {
        "AIRFLOW_VAR_BUCKET": "b",
        "AIRFLOW_CONN_MY_DB": "postgres://x",
        "AIRFLOW_CONN_WORKFLOWSVC_DEFAULT": "{}",
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "HOME": "/root",
    }
    assert passed_through(environ) == {"AIRFLOW_VAR_BUCKET": "b", "AIRFLOW_CONN_MY_DB": "postgres://x"}
