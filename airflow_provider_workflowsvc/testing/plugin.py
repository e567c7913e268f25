"""
The pytest plugin of the test kit (entry point ``pytest11``): fixtures for testing DAGs against the emulator.

Nothing happens in a session that requests none of its fixtures: no autouse fixture, and importing this
module imports neither Airflow nor the emulator (only the fixtures do, when a test asks for them). An
Airflow that cannot be imported fails only the tests that ask for a fixture that runs it, saying so.

Fixtures:

* ``workflowsvc_emulator`` - a :class:`~airflow_provider_workflowsvc.testing.emulator.ServiceEmulator`:
  a real emulator on a free loopback port, one per dialect for the session, reset before each test.
* ``workflowsvc_connection`` - an Airflow connection (``workflowsvc_default``) pointing at it for the test.
* ``workflowsvc_run_dag`` - a :class:`~airflow_provider_workflowsvc.testing.dag_runs.DagRunner`: run a DAG
  object or DAG file end to end (``dag.test()``) in an Airflow home and database of the session's own.
* ``workflowsvc_job_events`` - start a :class:`~airflow_provider_workflowsvc.testing.job_events.JobEventWatch`
  on an asset-watcher DAG (or a trigger); stopped after the test.

Marker ``@pytest.mark.workflowsvc(dialect="platform", keep_state=True, conn_id="other")``: the emulator's
dialect (default ``spec``, or ``--workflowsvc-dialect``), keep what earlier tests left in the emulator,
the connection id. Option ``--workflowsvc-dialect``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.testing.dag_runs import DagRunner
    from airflow_provider_workflowsvc.testing.emulator import EmulatorConnection, ServiceEmulator
    from airflow_provider_workflowsvc.testing.isolated_airflow import IsolatedAirflow
    from airflow_provider_workflowsvc.testing.job_events import JobEventWatch

MARKER = "workflowsvc"
DIALECTS = ("spec", "platform")
DEFAULT_CONN_ID = "workflowsvc_default"
MARKER_OPTIONS = ("dialect", "keep_state", "conn_id")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workflowsvc", "Workflow Service test kit")
    group.addoption(
        "--workflowsvc-dialect",
        choices=DIALECTS,
        default="spec",
        help="how the emulator of workflowsvc_emulator answers (a test's workflowsvc marker overrides it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(dialect=None, keep_state=False, conn_id='{DEFAULT_CONN_ID}'): the Workflow Service "
        "test kit's emulator dialect, whether the test keeps the emulator's state, its connection id",
    )


def _airflow_for(fixture: str) -> None:
    """
    Import Airflow for a fixture that runs it: an Airflow that cannot be imported fails the test that asked
    for ``fixture``, saying so, never the session (the plugin imports no Airflow until then).
    """
    try:
        import airflow.sdk  # noqa: F401 - the Task SDK: Airflow 3
    except Exception as error:  # absent, too old, or failing as it starts (e.g. a broken airflow.cfg)
        # Only the first line, and raised outside this block (no chained traceback): the rest may quote
        # the lines of a configuration, secrets included.
        first_line = next(iter(str(error).splitlines()), "").rstrip(".")
        failure = f"{type(error).__name__}: {first_line}"
    else:
        return
    pytest.fail(
        f"{fixture} (the Workflow Service test kit) needs Airflow 3, which could not be imported: {failure}. "
        "Tests that use none of the kit's fixtures are not affected; `-p no:workflowsvc` turns the kit off.",
        pytrace=False,
    )


def _marker_option(request: pytest.FixtureRequest, name: str, default: Any) -> Any:
    """Return one keyword of the test's ``workflowsvc`` marker (``default`` without it)."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return default
    if marker.args or set(marker.kwargs) - set(MARKER_OPTIONS):
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes the keywords {', '.join(MARKER_OPTIONS)}")
    return marker.kwargs.get(name, default)


@pytest.fixture(scope="session")
def _workflowsvc_emulators() -> Iterator[Callable[[str], ServiceEmulator]]:
    """One emulator per dialect for the session, started when a test first asks for that dialect."""
    from airflow_provider_workflowsvc.testing.emulator import emulator_for_tests

    running: dict[str, ServiceEmulator] = {}
    with contextlib.ExitStack() as stack:

        def get(dialect: str) -> ServiceEmulator:
            if dialect not in DIALECTS:
                raise pytest.UsageError(f"unknown emulator dialect {dialect!r}; expected one of {DIALECTS}")
            if dialect not in running:
                running[dialect] = stack.enter_context(emulator_for_tests(dialect))
            return running[dialect]

        yield get


@pytest.fixture
def workflowsvc_emulator(
    request: pytest.FixtureRequest, _workflowsvc_emulators: Callable[[str], ServiceEmulator]
) -> ServiceEmulator:
    """Give the test the Workflow Service emulator, emptied first unless the test keeps its state."""
    dialect = _marker_option(request, "dialect", None) or request.config.getoption("workflowsvc_dialect")
    emulator = _workflowsvc_emulators(dialect)
    if not _marker_option(request, "keep_state", False):
        emulator.reset()
    return emulator


@pytest.fixture
def workflowsvc_connection(
    request: pytest.FixtureRequest, workflowsvc_emulator: ServiceEmulator, monkeypatch: pytest.MonkeyPatch
) -> EmulatorConnection:
    """Point an Airflow connection at the emulator (``AIRFLOW_CONN_<ID>``) for the test's length."""
    from airflow_provider_workflowsvc.testing.emulator import EmulatorConnection

    conn_id = _marker_option(request, "conn_id", DEFAULT_CONN_ID)
    connection = EmulatorConnection(conn_id, workflowsvc_emulator)
    monkeypatch.setenv(connection.env_var, workflowsvc_emulator.connection())
    return connection


@pytest.fixture(scope="session")
def _workflowsvc_airflow(tmp_path_factory: pytest.TempPathFactory) -> IsolatedAirflow:
    from airflow_provider_workflowsvc.testing.isolated_airflow import IsolatedAirflow

    _airflow_for("workflowsvc_run_dag")
    return IsolatedAirflow(tmp_path_factory.mktemp("workflowsvc-airflow-home"))


@pytest.fixture
def workflowsvc_run_dag(request: pytest.FixtureRequest, _workflowsvc_airflow: IsolatedAirflow) -> DagRunner:
    """
    Run a DAG end to end: ``workflowsvc_run_dag(dag)`` or ``workflowsvc_run_dag("dags/file.py")``.

    In a test that uses the emulator, the run is due at the emulator's time (its clock may have moved).
    """
    from airflow_provider_workflowsvc.testing.dag_runs import DagRunner

    clock = None
    if "workflowsvc_emulator" in request.fixturenames:
        clock = request.getfixturevalue("workflowsvc_emulator").now
    return DagRunner(_workflowsvc_airflow, clock)


@pytest.fixture
def workflowsvc_job_events() -> Iterator[Callable[..., JobEventWatch]]:
    """
    Start a job-event watch: ``workflowsvc_job_events(dag)`` (a DAG object or file scheduled on one
    job-event watcher) or ``workflowsvc_job_events(trigger)``; ``workflow_id=`` watches a test's
    workflow instead of the watcher's own. Every watch is stopped after the test.
    """
    from airflow_provider_workflowsvc.testing.job_events import JobEventWatch, job_event_trigger

    _airflow_for("workflowsvc_job_events")
    watches: list[JobEventWatch] = []

    def start(watched: Any, *, workflow_id: str | None = None, dag_id: str | None = None) -> JobEventWatch:
        watch = JobEventWatch(job_event_trigger(watched, dag_id=dag_id), workflow_id=workflow_id)
        watches.append(watch)
        return watch.start()

    try:
        yield start
    finally:
        for watch in watches:
            watch.stop()
