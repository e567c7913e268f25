"""Run a DAG end to end with ``dag.test()`` in the kit's Airflow: each task's state, XComs and error."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.testing.isolated_airflow import IsolatedAirflow

__all__ = [
    "DagFileError",
    "DagRunResult",
    "DagRunner",
    "dag_bag",
    "parse_dag_file",
    "serialize_dags",
    "sync_dags_to_db",
]

FAST_POLL_INTERVAL = 0.1
"""Seconds between the polls of the provider's waits in a kit run (the DAG's own intervals are for
production: a wait polling every minute would make a test last minutes)."""
_POLL_ATTRIBUTES = ("poll_interval", "poke_interval")
_MIN_POLL_ENV = "AIRFLOW__WORKFLOWSVC__MIN_POLL_INTERVAL"
_listener = pluggy.HookimplMarker("airflow")


class DagFileError(Exception):
    """A DAG file could not be imported, or does not hold the DAG asked for."""


@dataclass(frozen=True)
class DagRunResult:
    """
    What a DAG run left: its state, each task's state, XComs and error.

    Task keys are task ids; a mapped task's instances are ``task_id[0]``, ``task_id[1]``, ...
    """

    dag_id: str
    run_id: str
    state: str
    """``success`` or ``failed``."""
    task_states: dict[str, str | None]
    xcoms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Task key -> XCom key -> value (``return_value`` is what the task returned)."""
    errors: dict[str, str] = field(default_factory=dict)
    """Task key -> the text of the exception that failed it (its last try)."""

    @property
    def succeeded(self) -> bool:
        return self.state == "success"

    def xcom(self, task_key: str, key: str = "return_value") -> Any:
        """Return one XCom of a task; a KeyError names what the task did push."""
        pushed = self.xcoms.get(task_key, {})
        if key not in pushed:
            raise KeyError(
                f"task {task_key!r} ({self.task_states.get(task_key, 'not in the run')}) pushed no XCom "
                f"{key!r}; it pushed {sorted(pushed) or 'none'}"
            )
        return pushed[key]


# --------------------------------------------------------------------------------------------------
# Putting a DAG into the metadata database: dag.test() runs only a DAG Airflow has serialized


def dag_bag(folder: str | os.PathLike[str] = os.devnull, *, collect_dags: bool = False) -> Any:
    """
    Return a ``DagBag`` of ``folder`` (a folder or one file), from its home on the running Airflow; never
    with Airflow's example DAGs (before 3.3 a DagBag adds them when ``[core] load_examples`` is on, as it
    is by default).
    """
    from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_2_PLUS

    if AIRFLOW_V_3_2_PLUS:
        from airflow.dag_processing.dagbag import DagBag
    else:
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]
    options: dict[str, Any] = {"collect_dags": collect_dags}
    if "include_examples" in inspect.signature(DagBag).parameters:
        options["include_examples"] = False
    return DagBag(dag_folder=str(folder), **options)


def sync_dags_to_db(bag: Any) -> None:
    """Write a DagBag's DAGs to the database as the ``dags-folder`` bundle (whose row must exist first)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_2_PLUS

    DagBundlesManager().sync_bundles_to_db()
    if AIRFLOW_V_3_2_PLUS:
        from airflow.dag_processing.dagbag import sync_bag_to_db
    elif AIRFLOW_V_3_1_PLUS:
        from airflow.models.dagbag import sync_bag_to_db  # type: ignore[no-redef]
    else:  # Airflow 3.0: only a DagBag that parsed the file sets relative_fileloc, which the DB needs
        for dag in bag.dags.values():
            dag.relative_fileloc = dag.relative_fileloc or dag.fileloc
        bag.sync_to_db("dags-folder", None)
        return
    sync_bag_to_db(bag, "dags-folder", None)


def serialize_dags(*dags: Any) -> None:
    """
    Serialize DAG objects into the database, as the DAG processor does for the DAG folder's files.

    A DAG defined in a test (or anywhere outside the DAG folder) is otherwise unknown to the database,
    and ``dag.test()`` fails with "the dag is not serialized".
    """
    bag = dag_bag()
    for dag in dags:
        bag.bag_dag(dag)
    sync_dags_to_db(bag)


def parse_dag_file(path: Path, dag_id: str | None = None) -> tuple[Any, Any]:
    """Parse a DAG file as the DAG processor does; return its DagBag and the DAG asked for (or its one)."""
    bag = dag_bag(path, collect_dags=True)
    if bag.import_errors:
        errors = "\n".join(f"{file}: {error}" for file, error in bag.import_errors.items())
        raise DagFileError(f"{path} does not import:\n{errors}")
    if dag_id is None:
        if len(bag.dags) != 1:
            raise DagFileError(f"{path} holds {sorted(bag.dags) or 'no DAG'}: name one with dag_id=")
        [dag_id] = bag.dags
    if dag_id not in bag.dags:
        raise DagFileError(f"{path} holds no DAG {dag_id!r}, only {sorted(bag.dags)}")
    return bag, bag.dags[dag_id]


# --------------------------------------------------------------------------------------------------
# Running it


class DagRunner:
    """
    Run a DAG (an object, or a file of a DAG folder) end to end in the kit's Airflow; see ``__call__``.

    ``clock`` gives the moment the run is due (``run_after``, ``logical_date``): the emulator's time
    when the test uses the emulator, so that dates templated from the run (``{{ dag_run.run_after }}``)
    and the times the service writes (``created_at``) are read on one clock.
    """

    def __init__(self, airflow: IsolatedAirflow, clock: Callable[[], datetime] | None = None) -> None:
        self.airflow = airflow
        self.clock = clock

    def __call__(
        self,
        dag: Any,
        *,
        dag_id: str | None = None,
        run_conf: dict[str, Any] | None = None,
        poll_interval: float | None = FAST_POLL_INTERVAL,
    ) -> DagRunResult:
        """
        Run ``dag`` once with ``dag.test()``: every task in this process, deferred waits included
        (their triggers run inline). Returns the run's and each task's state, XComs and errors; a
        failed task does not raise.

        :param dag: a DAG object (defined in the test, or imported), or the path of a DAG file.
        :param dag_id: with a file holding several DAGs: which one.
        :param run_conf: the run's ``dag_run.conf``.
        :param poll_interval: seconds between the polls of this provider's waits (operators and
            sensors) during the run, instead of the DAG's own; None keeps the DAG's.
        """
        folder = Path(dag).resolve().parent if isinstance(dag, (str, os.PathLike)) else None
        extra = {_MIN_POLL_ENV: str(poll_interval)} if poll_interval is not None else {}
        with self.airflow.active(folder, extra):
            if folder is not None:
                path = Path(dag).resolve()
                bag, dag = parse_dag_file(path, dag_id)
                stamp = (path.stat().st_mtime_ns, path.stat().st_size)
                if self.airflow.synced.get(path) != stamp:  # an unchanged file is in the database
                    sync_dags_to_db(bag)
                    self.airflow.synced[path] = stamp
            else:
                serialize_dags(dag)
            with _polling_every(dag, poll_interval), _recording_failures() as errors, _one_api(self.airflow):
                due = {} if self.clock is None else dict.fromkeys(("run_after", "logical_date"), self.clock())
                run = dag.test(run_conf=run_conf, **due)  # without a clock: dag.test()'s own (now)
            return _result(run.dag_id, run.run_id, errors)


@contextlib.contextmanager
def _one_api(airflow: IsolatedAirflow) -> Iterator[None]:
    """
    Give the run's tasks and triggers the session's one in-process Execution API. Before 3.3 Airflow
    makes a new one (a FastAPI app, its thread, its start) for each task and trigger of a ``dag.test()``,
    about 20 s each on a busy machine; 3.3 keeps one per process (``lru_cache``), as the kit does here.
    """
    from airflow.sdk.execution_time import supervisor

    make = getattr(supervisor, "in_process_api_server", None)
    if make is None or hasattr(make, "cache_info"):  # 3.3+ keeps one itself
        yield
        return
    if airflow.execution_api is None:
        airflow.execution_api = make()
    supervisor.in_process_api_server = lambda: airflow.execution_api  # type: ignore[assignment]
    try:
        yield
    finally:
        supervisor.in_process_api_server = make


@contextlib.contextmanager
def _polling_every(dag: Any, seconds: float | None) -> Iterator[None]:
    """Give this provider's tasks of ``dag`` the poll interval ``seconds`` for the block."""
    from airflow_provider_workflowsvc._tasks.base import WorkflowServiceTaskMixin

    changed: list[tuple[Any, str, Any]] = []
    if seconds is not None:
        for task in dag.tasks:
            if not isinstance(task, WorkflowServiceTaskMixin):
                continue
            for name in _POLL_ATTRIBUTES:
                if hasattr(task, name):
                    changed.append((task, name, getattr(task, name)))
                    setattr(task, name, seconds)
    try:
        yield
    finally:
        for task, name, value in changed:
            setattr(task, name, value)


class _FailureRecorder:
    """An Airflow listener that keeps the error of each task instance that fails."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    @_listener
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        key = _task_key(task_instance.task_id, getattr(task_instance, "map_index", -1))
        self.errors[key] = "" if error is None else str(error)


@contextlib.contextmanager
def _recording_failures() -> Iterator[dict[str, str]]:
    """Register a listener for the block (Airflow calls listeners in the process that runs the task)."""
    try:  # where the task runner takes its listeners from: the Task SDK's own manager since 3.2
        from airflow.sdk.listener import get_listener_manager
    except ImportError:
        from airflow.listeners.listener import get_listener_manager  # type: ignore[assignment]

    recorder = _FailureRecorder()
    manager = get_listener_manager()
    manager.add_listener(recorder)
    try:
        yield recorder.errors
    finally:
        manager.pm.unregister(recorder)


def _task_key(task_id: str, map_index: int | None) -> str:
    return task_id if map_index is None or map_index < 0 else f"{task_id}[{map_index}]"


def _text(state: Any) -> str:
    return str(getattr(state, "value", state))


def _result(dag_id: str, run_id: str, errors: dict[str, str]) -> DagRunResult:
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        assert run is not None, f"dag.test() left no run {run_id} of {dag_id}"
        states = {
            _task_key(ti.task_id, ti.map_index): None if ti.state is None else _text(ti.state)
            for ti in run.get_task_instances(session=session)
        }
        xcoms: dict[str, dict[str, Any]] = {}
        rows = session.scalars(
            select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id)
        )
        for row in rows:
            key = _task_key(row.task_id, row.map_index)
            xcoms.setdefault(key, {})[row.key] = XComModel.deserialize_value(row)
        state = _text(run.state)
    failed = {key: text for key, text in errors.items() if states.get(key) == "failed"}
    return DagRunResult(dag_id, run_id, state, states, xcoms, failed)
