"""``./dev airflow --dags DIR``: a user's DAG folder on a local Airflow against the emulator, until Ctrl-C.

The script is started as ``./dev`` starts it (the same module and arguments, in a folder of the user's),
on a folder holding an asset-watcher DAG, which ``airflow dags test`` cannot run. Everything is proven
by events: the lines it prints, the watcher's first listing in the emulator's request log, the
downstream DAG run read from Airflow's API, the script's exit and its processes gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.airflow_min("3.3", reason="the e2e harness runs on the newest Airflow"),
    pytest.mark.timeout(600, method="signal"),
]

REPO = Path(__file__).resolve().parents[1]
# `python -m scripts.local_run ...` as ./dev runs it, with the checkout's root AFTER site-packages (the
# provider under test is the installed one) and the user's folder as the working directory.
LAUNCH = (
    "import runpy, sys; sys.path.append(sys.argv.pop(1)); "
    "runpy.run_module('scripts.local_run', run_name='__main__', alter_sys=True)"
)
CONSUMER = "local_run_consumer"
WATCHER_DAG = """
from datetime import datetime
from typing import Any

from airflow.sdk import Asset, AssetWatcher, Variable, dag, task

from airflow_provider_workflowsvc import WorkflowJobEventTrigger

JOBS = Asset(
    "local-run-jobs",
    watchers=[AssetWatcher(name="local_run_jobs", trigger=WorkflowJobEventTrigger(poll_interval=1))],
)


@dag(dag_id="local_run_consumer", schedule=[JOBS], start_date=datetime(2025, 1, 1), catchup=False)
def local_run_consumer() -> None:
    @task
    def report(*, triggering_asset_events: Any = None) -> dict[str, Any]:
        jobs = [event.extra["payload"]["job_id"] for event in triggering_asset_events[JOBS]]
        return {"jobs": jobs, "variable": Variable.get("local_run_marker")}

    report()


local_run_consumer()
"""


class Output:
    """The script's output, line by line, read by a thread as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process, self.lines, self._queue = process, [], queue.Queue[str]()
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(target=lambda: [self._queue.put(line) for line in stdout], daemon=True).start()

    def wait_for(self, text: str, timeout: float) -> str:
        """Return the first line containing ``text``; fail when the script ends or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        seen = next((line for line in self.lines if text in line), None)
        while seen is None:
            try:
                line = self._queue.get(timeout=min(1.0, max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                if self.process.poll() is not None and self._queue.empty():
                    pytest.fail(f"the script exited {self.process.returncode} before {text!r}:\n{self.text}")
                if time.monotonic() > deadline:
                    pytest.fail(f"no {text!r} within {timeout:.0f} s:\n{self.text}")
                continue
            self.lines.append(line)
            seen = line if text in line else None
        return seen

    @property
    def text(self) -> str:
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return "".join(self.lines[-80:])


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)
    return found


def processes_of(home: Path) -> list[int]:
    """The live processes whose environment has ``AIRFLOW_HOME=home`` (Airflow's components)."""
    marker = f"AIRFLOW_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def listening(url: str) -> bool:
    host, port = httpx.URL(url).host, httpx.URL(url).port
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=2):
        return True
    return False


@pytest.fixture
def local_run(tmp_path: Path) -> Iterator[tuple[Output, Path]]:
    """The script started on ``tmp_path/dags`` from ``tmp_path``; interrupted (then killed) at the end."""
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "local_run_consumer.py").write_text(WATCHER_DAG)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_VAR_LOCAL_RUN_MARKER"] = "from the shell"
    command = [sys.executable, "-c", LAUNCH, str(REPO), "--dags", "dags", "--home", str(home)]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: Ctrl-C is SIGINT to the group
    )
    try:
        yield Output(process), home
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        for pid in processes_of(home):  # only after a failed stop: the components this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class AirflowApi:
    def __init__(self, base_url: str) -> None:
        token = httpx.get(f"{base_url}/auth/token", timeout=30).json()["access_token"]
        self.client = httpx.Client(
            base_url=f"{base_url}/api/v2", headers={"authorization": f"Bearer {token}"}, timeout=30
        )

    def get(self, path: str) -> Any:
        response = self.client.get(path)
        return response.json() if response.status_code == 200 else None


def test_a_dag_folder_with_an_asset_watcher_runs_until_ctrl_c(local_run: tuple[Output, Path]) -> None:
    from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    output, home = local_run
    output.wait_for("press Ctrl-C to stop", timeout=300)
    ui = output.wait_for("Airflow is up: open ", 1).split("open ", 1)[1].split("/ in a browser")[0]
    connection = json.loads(output.wait_for("connection: workflowsvc_default = ", 1).split(" = ", 1)[1])
    assert connection["conn_type"] == "workflowsvc"
    base_url, token = connection["host"], connection["password"]
    emulator = EmulatorHandle(base_url.removesuffix("/api/v1"), token, None)
    output.wait_for(f"DAG {CONSUMER}: {ui}/dags/{CONSUMER}", timeout=120)

    # The watcher's first listing (of every job: no status filter): from then on, every job that ends is
    # reported. Not any listing: the shared source's probe (active jobs only) can come seconds before it.
    wait_until(
        lambda: [
            r
            for r in emulator.requests(method="GET", path_contains="/jobs")
            if r["path"].rstrip("/").endswith("/jobs") and "status=" not in r["query"]
        ],
        120,
        "the watcher's listing",
    )
    (home / "hello.txt").write_text("Hello from a local run.")
    with WorkflowServiceHook(settings=ConnectionSettings(base_url=base_url, token=token)) as hook:
        workflow = hook.create_workflow("local-run", "basic")
        job = hook.run_workflow(str(workflow.id), files=[home / "hello.txt"])
    assert job is not None

    api = AirflowApi(ui)
    run = wait_until(
        lambda: next(
            (
                r
                for r in (api.get(f"/dags/{CONSUMER}/dagRuns") or {}).get("dag_runs", [])
                if r["state"] == "success"
            ),
            None,
        ),
        180,
        "the consumer's run after the job ended",
    )
    assert run["run_type"] == "asset_triggered"
    entry = api.get(
        f"/dags/{CONSUMER}/dagRuns/{run['dag_run_id']}/taskInstances/report/xcomEntries/return_value"
    )
    value = entry["value"]
    reported = json.loads(value) if isinstance(value, str) else value
    assert reported == {"jobs": [job.id], "variable": "from the shell"}

    # Ctrl-C: SIGINT to the script's process group, as a terminal sends it.
    script = output.process
    os.killpg(script.pid, signal.SIGINT)
    assert script.wait(timeout=120) == 0, output.text
    assert "interrupted: everything started was stopped" in output.text
    assert processes_of(home) == []
    assert not listening(ui)
    assert not listening(base_url)
