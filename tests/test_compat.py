"""The provider on the running Airflow (3.0-3.3): where its Airflow names come from, registration, fallbacks.

Marked ``compat``: ``./dev test`` runs these on every Airflow of its matrix, also on the minors that do
not get the full suite. Each fallback is tested where it is real (``airflow_below``), and the feature
that replaces it where that exists (``airflow_min``).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import FAKE_WORKFLOW_ID

import airflow_provider_workflowsvc
from airflow_provider_workflowsvc import _compat

pytestmark = pytest.mark.compat

PACKAGE = "airflow-provider-workflowsvc"
PACKAGE_DIR = Path(airflow_provider_workflowsvc.__file__).parent
HOOK_CLASS = "airflow_provider_workflowsvc.hooks.workflowsvc.WorkflowServiceHook"
PROVIDER_MODULES = sorted(
    module.name
    for module in pkgutil.walk_packages(
        airflow_provider_workflowsvc.__path__, "airflow_provider_workflowsvc."
    )
    if ".emulator" not in module.name
)


@pytest.mark.parametrize(
    ("version", "minor"),
    [("3.0.6", (3, 0)), ("3.3.0rc1", (3, 3)), ("3.1.8.dev0", (3, 1)), ("3.10.2", (3, 10)), ("4.0", (4, 0))],
)
def test_minor_of_a_version(version: str, minor: tuple[int, int]) -> None:
    assert _compat._minor(version) == minor


def test_minor_of_a_non_version_is_an_error() -> None:
    with pytest.raises(ValueError, match="not an Airflow version: 'main'"):
        _compat._minor("main")


# Each name, the Airflow from which the Task SDK has it, its home there and its home before.
HOMES = [
    ("BaseHook", (3, 1), "airflow.sdk", "airflow.hooks.base"),
    ("AirflowException", (3, 1), "airflow.sdk.exceptions", "airflow.exceptions"),
    ("conf", (3, 2), "airflow.sdk", "airflow.configuration"),
    ("AirflowFailException", (3, 2), "airflow.sdk.exceptions", "airflow.exceptions"),
    ("AirflowSensorTimeout", (3, 2), "airflow.sdk.exceptions", "airflow.exceptions"),
    ("AirflowSkipException", (3, 2), "airflow.sdk.exceptions", "airflow.exceptions"),
    ("AirflowTaskTimeout", (3, 2), "airflow.sdk.exceptions", "airflow.exceptions"),
]


@pytest.mark.parametrize(("name", "since", "new_home", "old_home"), HOMES, ids=[h[0] for h in HOMES])
def test_each_name_comes_from_its_newest_home(
    name: str, since: tuple[int, int], new_home: str, old_home: str
) -> None:
    home = new_home if since <= _compat.AIRFLOW_VERSION else old_home
    assert getattr(_compat, name) is getattr(importlib.import_module(home), name)


def test_airflow_stats_comes_from_its_newest_home() -> None:
    home = "airflow.sdk.observability.stats" if _compat.AIRFLOW_V_3_2_PLUS else "airflow.stats"
    assert _compat.airflow_stats() is importlib.import_module(home).Stats


def test_the_task_sdk_has_what_the_fallbacks_stand_in_for_from_their_release() -> None:
    """A fallback is dropped as soon as the Task SDK has the name: none is used longer than needed."""
    import airflow.sdk
    import airflow.sdk.exceptions

    for name, since, new_home, _ in HOMES:
        module = airflow.sdk if new_home == "airflow.sdk" else airflow.sdk.exceptions
        assert hasattr(module, name) is (since <= _compat.AIRFLOW_VERSION), name


def test_every_provider_module_imports_without_a_deprecation_warning_of_ours() -> None:
    """
    A fresh interpreter imports each module; no warning points at a line of the provider.

    Airflow is imported first: it sends warnings to its logs when it configures logging, which would
    empty the record (the probe proves the record still works after the imports).
    """
    script = """
import importlib, json, sys, warnings
import airflow.sdk
package_dir = sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in json.loads(sys.argv[1]):
        importlib.import_module(name)
    warnings.warn_explicit("probe", DeprecationWarning, package_dir + "/probe.py", 1)
ours = [w for w in caught if w.filename.startswith(package_dir)]
print(json.dumps([f"{w.filename}:{w.lineno}: {w.message}" for w in ours]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(PROVIDER_MODULES), str(PACKAGE_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [f"{PACKAGE_DIR}/probe.py:1: probe"]
    assert "airflow_provider_workflowsvc.operators.jobs" in PROVIDER_MODULES


def _airflow_cli(*args: str) -> tuple[list[dict[str, Any]], str]:
    """Run ``airflow ARGS -o json``; its JSON table (log lines may come before it) and all its output."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), *args, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (table,) = [line for line in done.stdout.splitlines() if line.startswith(("[{", "[]"))]
    return json.loads(table), done.stdout + done.stderr


def test_airflow_providers_get_lists_the_provider() -> None:
    table, _ = _airflow_cli("providers", "get", PACKAGE)
    assert table == [{"Provider": PACKAGE, "Version": airflow_provider_workflowsvc.__version__}]


def test_airflow_providers_hooks_imports_the_hook() -> None:
    table, _output = _airflow_cli("providers", "hooks")
    # Only our row is ours to judge: another installed provider's hook may fail to import (the Amazon
    # provider of the test tools lists a duckdb hook without duckdb installed), and Airflow lists it so.
    (hook,) = [row for row in table if row["connection_type"] == "workflowsvc"]
    assert (hook["class"], hook["package_name"]) == (HOOK_CLASS, PACKAGE)


# -- durable execution on every minor: the task state store (3.3), else a Variable ------------------------


def test_run_operator_has_durable_execution() -> None:
    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

    assert RunWorkflowOperator(task_id="run", workflow_id=FAKE_WORKFLOW_ID).durable is True
    assert RunWorkflowOperator(task_id="off", workflow_id=FAKE_WORKFLOW_ID, durable=False).durable is False


def test_the_variable_store_names_its_task_and_fits_airflows_key_length() -> None:
    """The Variable a task's state is kept in before 3.3 says whose it is, within Airflow's 250 characters,
    with no ``/`` (3.0's execution API refuses one); a run id that is not plain is hashed."""
    from types import SimpleNamespace

    from airflow_provider_workflowsvc.operators._lifecycle import VariableStore

    def key(dag_id: str = "d", run_id: str = "manual__2026-01-01T00:00:00+00:00", map_index: int = -1) -> str:
        ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id="g.t", map_index=map_index)
        return VariableStore(ti).key

    assert key() == "workflowsvc.task_state:d:g.t:-1:manual__2026-01-01T00:00:00+00:00"
    long = [key("d" * 250, "r" * 250, index) for index in (3, 4)]
    assert all(len(k) <= 250 for k in long)
    assert long[0] != long[1]
    odd = [key(run_id=run_id) for run_id in ("a/b", "a?b", "a b")]
    assert all("/" not in k and "?" not in k and " " not in k for k in odd)
    assert len(set(odd)) == 3
