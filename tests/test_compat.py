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

import httpx
import pytest
from helpers import FAKE_WORKFLOW_ID, details_json, failed_json, job_json

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


# -- durable execution (3.3), and none on 3.0-3.2 --------------------------------------------------------


@pytest.mark.airflow_min("3.3", reason="durable execution: the task state store")
def test_run_operator_has_durable_execution() -> None:
    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

    assert _compat.HAS_DURABLE_EXECUTION
    assert RunWorkflowOperator(task_id="run", workflow_id=FAKE_WORKFLOW_ID).durable is True
    assert RunWorkflowOperator(task_id="off", workflow_id=FAKE_WORKFLOW_ID, durable=False).durable is False


def _route_one_job(router: Any, job_ids: list[str]) -> Any:
    """Each run request starts the next job of ``job_ids``; every job completes at once."""
    run = router.post(f"/workflows/{FAKE_WORKFLOW_ID}/run").mock(
        side_effect=[httpx.Response(200, json=job_json(job_id, "scheduled")) for job_id in job_ids]
    )
    router.get("/jobs/", params={"workflow_id": FAKE_WORKFLOW_ID}).mock(
        return_value=httpx.Response(200, json=[])
    )
    for job_id in job_ids:
        router.get(f"/jobs/{job_id}").mock(
            return_value=httpx.Response(200, json=job_json(job_id, "completed"))
        )
        router.get(f"/jobs/{job_id}/details").mock(
            return_value=httpx.Response(200, json=details_json(job_id, "completed"))
        )
        router.get(f"/jobs/{job_id}/failed-files").mock(return_value=httpx.Response(200, json=failed_json()))
    return run


class _TaskInstance:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.mark.airflow_below("3.3", reason="no task state store before 3.3")
def test_without_durable_execution_every_try_runs_a_new_job(mock_service: Any) -> None:
    """Without a task state store (``durable`` accepted and ignored) a second try submits again."""
    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator

    assert not _compat.HAS_DURABLE_EXECUTION
    run = _route_one_job(mock_service, ["j1", "j2"])
    task = RunWorkflowOperator(
        task_id="run", workflow_id=FAKE_WORKFLOW_ID, poll_interval=0.01, deferrable=False, durable=True
    )
    assert task.durable is False

    first = task.execute({"ti": _TaskInstance()})
    second = task.execute({"ti": _TaskInstance()})

    assert (first["job_id"], first["status"]) == ("j1", "completed")
    assert second["job_id"] == "j2"
    assert run.call_count == 2


# -- the connection form: conn-fields (3.2+) or the hook's methods (3.0, 3.1) ------------------------


@pytest.mark.airflow_min("3.2", reason="conn-fields in the provider info")
def test_hook_leaves_the_deprecated_form_methods_to_older_airflow() -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    assert "get_connection_form_widgets" not in WorkflowServiceHook.__dict__
    assert "get_ui_field_behaviour" not in WorkflowServiceHook.__dict__


@pytest.mark.airflow_below("3.2", reason="get_connection_form_widgets / get_ui_field_behaviour")
def test_connection_form_from_the_hook_methods_as_the_ui_gets_it() -> None:
    """What the UI's connection form reads on Airflow < 3.2: the hook meta service, from our hook methods."""
    pytest.importorskip("wtforms", reason="Airflow < 3.2 shows no extra connection fields without WTForms")
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    from airflow_provider_workflowsvc.get_provider_info import get_provider_info

    HookMetaService.hook_meta_data.cache_clear()
    (meta,) = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "workflowsvc"]

    assert meta.hook_class_name == HOOK_CLASS
    assert meta.standard_fields.host.title == "Base URL"
    assert meta.standard_fields.password.title == "Access token"
    assert meta.standard_fields.login.hidden
    assert meta.standard_fields.port.hidden
    assert meta.standard_fields.host.placeholder == "https://platform.example.com/api/v1"
    fields = {name: param["schema"] | {"value": param["value"]} for name, param in meta.extra_fields.items()}
    (declared,) = [c["conn-fields"] for c in get_provider_info()["connection-types"]]
    assert set(fields) == set(declared)  # every declared field, as the 3.2+ form shows them
    assert {"api_key", "ui_url", "timeout", "verify", "max_retries"} <= set(fields)
    assert fields["api_key"]["format"] == "password"
    assert fields["api_key"]["title"] == "API key"
    assert [name for name, field in fields.items() if field.get("format") == "password"] == ["api_key"]
    assert fields["verify"]["type"] == ["boolean", "null"]
    assert fields["verify"]["value"] is True
    assert fields["max_retries"]["type"] == ["integer", "null"]
    assert fields["max_retries"]["value"] == 5
    assert fields["timeout"] == {"title": "Read timeout (s)", "type": ["string", "null"], "value": "60"}


@pytest.mark.airflow_below("3.2", reason="the form's number fields are text fields before 3.2")
def test_numbers_typed_in_the_older_form_are_read_as_numbers() -> None:
    """Airflow < 3.2 has no number field: the timeouts arrive as the text the user typed."""
    from airflow.sdk import Connection

    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    conn = Connection(
        conn_id="form",
        conn_type="workflowsvc",
        host="https://svc.test/api/v1",
        password="tok-form-1",
        extra=json.dumps({"timeout": "120", "connect_timeout": "2.5", "retry_wait": "0.5", "verify": True}),
    )
    settings = ConnectionSettings.from_connection(conn)
    assert (settings.timeout, settings.connect_timeout, settings.retry_wait) == (120.0, 2.5, 0.5)
