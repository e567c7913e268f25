"""Test setup: an isolated Airflow home (set before anything imports airflow) and the emulator fixtures."""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import sys
import tempfile
from pathlib import Path

# ``scripts`` (the local-Airflow harness) is not part of the package: the checkout's root comes LAST on
# the path, after site-packages, so it never shadows the installed provider (the built wheel in CI).
REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if REPO_ROOT not in sys.path:
    sys.path.append(REPO_ROOT)

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="wfsvc-airflow-home-")
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)  # a test run leaves nothing behind
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).parent / "dags")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
# One Fernet key for this session and the task processes it starts (unit-test mode makes one per
# process otherwise): a Variable a killed worker wrote (the task state before 3.3) stays readable here.
os.environ["AIRFLOW__CORE__FERNET_KEY"] = base64.urlsafe_b64encode(os.urandom(32)).decode()
os.environ.pop("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", None)
# Tests poll every 0.02-0.5 s to stay fast; the floor for real deployments is 1 s (tests of the floor
# itself set it back). Subprocesses (local Airflow, task processes) inherit it.
os.environ["AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL"] = "0.01"

import json  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from helpers import (  # noqa: E402
    EMULATOR_DIALECTS,
    MOCK_BASE_URL,
    TEST_API_KEY,
    TEST_TOKEN,
    ConnectionStore,
    ManualClock,
    MetricsRecorder,
    TriggererSupervisor,
    connect,
    run_dag,
)

# --------------------------------------------------------------------------------------------------
# Airflow-version markers: @pytest.mark.airflow_min("3.3", reason=...) runs a test only on Airflow >= 3.3,
# @pytest.mark.airflow_below("3.3", reason=...) only on older Airflow (a fallback's own test). Elsewhere
# the test is skipped, the reason printed in pytest's skip summary.


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _version_gate(item: pytest.Item, running: tuple[int, int], shown: str) -> str | None:
    """Why ``item`` cannot run on Airflow ``running`` (None: it can)."""
    for mark in item.iter_markers("airflow_min"):
        if running < _minor(mark.args[0]):
            why = mark.kwargs.get("reason", "a feature of that release")
            return f"needs Airflow >= {mark.args[0]} ({why}); this is Airflow {shown}"
    for mark in item.iter_markers("airflow_below"):
        if running >= _minor(mark.args[0]):
            why = mark.kwargs.get("reason", "a fallback for older releases")
            return f"only on Airflow < {mark.args[0]} ({why}); this is Airflow {shown}"
    return None


def _other_dialect(item: pytest.Item) -> bool:
    """Whether ``item`` runs against an emulator dialect its ``dialect`` mark leaves out.

    ``@pytest.mark.dialect("platform", reason=...)``: a test whose claim the dialect cannot change (a
    mechanism below the wire's shapes: timeouts, pool lanes, signals, retries of faults) runs against
    that dialect only; the suites of the wire prove both. Where the leg runs no such dialect, it runs
    against those the leg has.
    """
    mark = item.get_closest_marker("dialect")
    callspec = getattr(item, "callspec", None)
    if mark is None or callspec is None or "emulator_server" not in callspec.params:
        return False
    wanted = set(mark.args) & set(EMULATOR_DIALECTS)
    return bool(wanted) and callspec.params["emulator_server"] not in wanted


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The installed release, read without importing Airflow: a unit file that needs no Airflow (models,
    # catalog) runs alone in a few seconds.
    from importlib.metadata import version

    shown = version("apache-airflow")
    for item in items:
        reason = _version_gate(item, _minor(shown), shown)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        (deselected if _other_dialect(item) else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(autouse=True)
def _fresh_secrets_masker() -> None:
    """Each test starts with no registered secrets, as each Airflow task process does (a connector
    config of unknown type masks all its strings; that must not carry over into later tests)."""
    if "airflow.sdk" not in sys.modules:
        return  # nothing imported Airflow yet: no secret registered (and none to import it for)
    try:
        from airflow.sdk._shared.secrets_masker import reset_secrets_masker
    except ImportError:  # pragma: no cover - older task SDK: nothing to reset between tests
        return
    reset_secrets_masker()


@pytest.fixture(autouse=True)
def _fresh_settings_cache() -> None:
    """Each test reads its connections again, and learns how its service spells job statuses, as a new
    process does (the async hooks cache settings; the transport remembers spellings by base URL)."""
    if "airflow_provider_workflowsvc.hooks._exchange" not in sys.modules:
        return  # no hook made yet in this process
    from airflow_provider_workflowsvc.hooks._exchange import _Transport
    from airflow_provider_workflowsvc.hooks._settings import SETTINGS_CACHE

    SETTINGS_CACHE.clear()
    _Transport.spellings.clear()


@pytest.fixture
def settings_clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """The settings cache's clock (and so the hooks'), moved by the test: ``settings_clock.now += 60``."""
    from airflow_provider_workflowsvc.hooks._settings import SETTINGS_CACHE

    clock = ManualClock()
    monkeypatch.setattr(SETTINGS_CACHE, "clock", clock)
    return clock


@pytest.fixture
def connection_store(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectionStore]:
    """The connection both hooks read, to the session emulator: rotatable, and able to fail."""
    store = ConnectionStore(emulator)
    store.install(monkeypatch)
    yield store
    emulator.configure(api_token=None)


@pytest.fixture(scope="session", params=EMULATOR_DIALECTS)
def emulator_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One emulator (real uvicorn on a loopback port) per dialect for the whole session.

    Every test that uses it runs against both dialects: ``spec`` (the spec's own examples) and
    ``platform`` (what the live service sends); the dialect is in the test id.
    """
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    with running_emulator(token=TEST_TOKEN, api_key=TEST_API_KEY, dialect=request.param) as emu:
        yield emu


@pytest.fixture
def emulator(emulator_server: Any) -> Any:
    """The session emulator, emptied before each test (no resources, jobs, faults or request log)."""
    emulator_server.reset()
    return emulator_server


@pytest.fixture(scope="session")
def platform_emulator_server() -> Iterator[Any]:
    """One emulator that speaks the platform dialect, for what only the live service has (on-demand jobs)."""
    from airflow_provider_workflowsvc.emulator.testing import running_emulator

    with running_emulator(token=TEST_TOKEN, api_key=TEST_API_KEY, dialect="platform") as emu:
        yield emu


@pytest.fixture
def platform_service(platform_emulator_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The platform emulator, emptied; ``workflowsvc_default`` points at it (with a ``ui_url``)."""
    platform_emulator_server.reset()
    connect(platform_emulator_server, monkeypatch)
    return platform_emulator_server


@pytest.fixture
def settings(emulator: Any) -> Any:
    """Hook settings pointing at the emulator, with short retry waits."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    return ConnectionSettings(
        base_url=emulator.base_url, token=emulator.token, api_key=emulator.api_key, retry_wait=0.05
    )


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A fresh Airflow metadata DB (SQLite in the temp AIRFLOW_HOME), once per session."""
    from airflow.utils import db

    db.resetdb()


@pytest.fixture
def workflowsvc_conn(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``workflowsvc_default`` pointing at the emulator, given as AIRFLOW_CONN_WORKFLOWSVC_DEFAULT JSON."""
    conn = {
        "conn_type": "workflowsvc",
        "host": emulator.base_url,
        "password": emulator.token,
        "extra": {"api_key": emulator.api_key, "retry_wait": 0.05},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))
    return emulator


@pytest.fixture
def dag_runner(airflow_db: None, workflowsvc_conn: Any) -> Any:
    """``run_dag`` with the DB ready and ``workflowsvc_default`` pointing at a clean emulator."""
    return run_dag


@pytest.fixture
def recorded_metrics(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The provider's metrics of this test, kept by a stand-in for Airflow's ``Stats``."""
    from airflow_provider_workflowsvc import metrics

    recorder = MetricsRecorder()
    monkeypatch.setattr(metrics, "_stats", lambda: recorder)
    return recorder


@pytest.fixture
def task_state(monkeypatch: pytest.MonkeyPatch) -> Any:
    """
    ``task_state(trigger, state="failed")``: the trigger runs for task ``d/r/t`` in a triggerer whose
    supervisor reports ``state`` for it (``failed``: the user marked it; ``deferred``: the trigger moved to
    another triggerer), as its ``on_kill`` asks before cancelling; returns the supervisor.
    """
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner

    def running_for(trigger: Any, state: Any = "failed", map_index: int = -1) -> TriggererSupervisor:
        trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=map_index)
        supervisor = TriggererSupervisor(state)
        monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
        return supervisor

    return running_for


@pytest.fixture
def mock_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``workflowsvc_default`` pointing at a respx-mocked service (one quick retry); yields the router."""
    import respx

    conn = {
        "conn_type": "workflowsvc",
        "host": MOCK_BASE_URL,
        "password": "tok-unit-3b9d51",
        "extra": {"api_key": "key-unit-77c1e0", "retry_wait": 0, "max_retries": 1},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))
    with respx.mock(base_url=MOCK_BASE_URL, assert_all_called=False) as router:
        yield router
