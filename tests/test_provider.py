"""Provider registration: the provider info, and Airflow's ProvidersManager discovering it.

Needs the package installed (``uv pip install -e .``, as ``./dev`` does) so the
``apache_airflow_provider`` entry point exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc import __version__
from airflow_provider_workflowsvc.get_provider_info import get_provider_info

PACKAGE = "airflow-provider-workflowsvc"
HOOK_CLASS = "airflow_provider_workflowsvc.hooks.workflowsvc.WorkflowServiceHook"
EXPECTED_FIELDS = {
    "api_key",
    "ui_url",
    "timeout",
    "connect_timeout",
    "verify",
    "ca_bundle",
    "max_retries",
    "retry_wait",
    "retry_max_wait",
    "max_response_bytes",
    "max_connections",
}


def _modules(info: dict[str, Any], key: str) -> list[str]:
    return [module for entry in info.get(key, []) for module in entry["python-modules"]]


def test_provider_info_shape() -> None:
    info = get_provider_info()
    assert info["package-name"] == PACKAGE
    assert info["name"]
    assert info["description"]
    assert info["versions"] == [__version__]
    assert _modules(info, "hooks") == ["airflow_provider_workflowsvc.hooks.workflowsvc"]
    assert _modules(info, "operators") == [
        "airflow_provider_workflowsvc.operators.connectors",
        "airflow_provider_workflowsvc.operators.workflows",
        "airflow_provider_workflowsvc.operators.jobs",
        "airflow_provider_workflowsvc.operators.on_demand",
    ]
    assert _modules(info, "sensors") == ["airflow_provider_workflowsvc.sensors.job"]
    assert _modules(info, "triggers") == [
        "airflow_provider_workflowsvc.triggers.job",
        "airflow_provider_workflowsvc.triggers.jobs",
        "airflow_provider_workflowsvc.triggers.job_events",
    ]
    integrations = {i["integration-name"] for i in info["integrations"]}
    for key in ("hooks", "operators", "sensors", "triggers"):
        assert {e["integration-name"] for e in info[key]} <= integrations

    [conn] = info["connection-types"]
    assert conn["connection-type"] == "workflowsvc"
    assert conn["hook-class-name"] == HOOK_CLASS
    behaviour = conn["ui-field-behaviour"]
    assert set(behaviour["hidden-fields"]) == {"schema", "login", "port"}
    assert behaviour["relabeling"] == {"host": "Base URL", "password": "Access token"}
    assert behaviour["placeholders"]["host"].endswith("/api/v1")
    fields = conn["conn-fields"]
    assert set(fields) == EXPECTED_FIELDS
    assert fields["api_key"]["schema"]["format"] == "password"  # secret in the form
    assert [name for name, f in fields.items() if f["schema"].get("format") == "password"] == ["api_key"]
    for name, field in fields.items():
        assert field["label"], name
        assert "null" in field["schema"]["type"], name  # every extra is optional


def test_provider_info_defaults_match_connection_settings() -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings

    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    names = ("timeout", "connect_timeout", "verify", "max_retries", "retry_wait", "retry_max_wait")
    for name in (*names, "max_response_bytes", "max_connections"):
        assert fields[name]["schema"]["default"] == ConnectionSettings.model_fields[name].default, name


def test_hook_class_attributes_match_provider_info() -> None:
    from airflow_provider_workflowsvc._compat import CONN_FIELDS_READ
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook

    for hook in (WorkflowServiceHook, WorkflowServiceAsyncHook):
        assert hook.conn_type == "workflowsvc"
        assert hook.default_conn_name == "workflowsvc_default"
        assert hook.conn_name_attr == "workflowsvc_conn_id"
        # Airflow >= 3.2 reads the form from the provider info; an older one asks the connection type's hook
        # (the sync one) through these methods, deprecated in 3.2, so they are only defined before it
        asks_hook = hook is WorkflowServiceHook and not CONN_FIELDS_READ
        assert ("get_ui_field_behaviour" in vars(hook)) is asks_hook, "set by CONN_FIELDS_READ"
        assert ("get_connection_form_widgets" in vars(hook)) is asks_hook, "set by CONN_FIELDS_READ"


def test_entry_point_registered() -> None:
    [entry] = [e for e in entry_points(group="apache_airflow_provider") if e.dist and e.dist.name == PACKAGE]
    assert entry.value == "airflow_provider_workflowsvc.get_provider_info:get_provider_info"
    assert entry.load()() == get_provider_info()


@pytest.fixture(scope="module")
def providers_manager() -> Any:
    from airflow.providers_manager import ProvidersManager

    return ProvidersManager()


def test_providers_manager_discovers_provider(providers_manager: Any) -> None:
    provider = providers_manager.providers[PACKAGE]
    assert provider.version == __version__
    assert provider.data["package-name"] == PACKAGE
    assert _modules(provider.data, "triggers") == [
        "airflow_provider_workflowsvc.triggers.job",
        "airflow_provider_workflowsvc.triggers.jobs",
        "airflow_provider_workflowsvc.triggers.job_events",
    ]


def test_providers_manager_discovers_hook_and_connection_type(providers_manager: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hook = providers_manager.hooks["workflowsvc"]
    assert hook is not None
    assert hook.hook_class_name == HOOK_CLASS
    assert hook.package_name == PACKAGE
    assert hook.connection_type == "workflowsvc"
    assert hook.connection_id_attribute_name == "workflowsvc_conn_id"
    assert hook.hook_name == "Workflow Service"
    assert hook.connection_testable is True


@pytest.mark.airflow_min("3.2", reason="conn-fields in the provider info")
def test_providers_manager_field_behaviours_and_widgets(providers_manager: Any) -> None:
    behaviour = providers_manager.field_behaviours["workflowsvc"]
    assert set(behaviour["hidden_fields"]) == {"schema", "login", "port"}
    assert behaviour["relabeling"] == {"host": "Base URL", "password": "Access token"}
    assert behaviour["placeholders"]["host"] == "https://platform.example.com/api/v1"

    widgets = {
        name: widget
        for name, widget in providers_manager.connection_form_widgets.items()
        if name.startswith("extra__workflowsvc__")
    }
    assert {w.field_name for w in widgets.values()} == EXPECTED_FIELDS
    assert all(w.hook_class_name == HOOK_CLASS and w.package_name == PACKAGE for w in widgets.values())
    api_key = widgets["extra__workflowsvc__api_key"]
    assert api_key.is_sensitive is True
    assert api_key.field["schema"]["title"] == "API key"
    assert [w.field_name for w in widgets.values() if w.is_sensitive] == ["api_key"]
    verify = widgets["extra__workflowsvc__verify"].field
    assert verify["value"] is True
    assert verify["schema"]["type"] == ["boolean", "null"]
    assert widgets["extra__workflowsvc__timeout"].field["value"] == 60
    assert widgets["extra__workflowsvc__max_retries"].field["schema"]["type"] == ["integer", "null"]


@pytest.mark.filterwarnings("ignore:ProvidersManager.hooks is deprecated")
def test_connection_form_test_button_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the UI's Test button does: a core Connection resolves our hook and calls test_connection."""
    import json

    import httpx
    import respx
    from airflow.models import Connection

    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    token, api_key = "tok-provider-test-5521", "key-provider-test-8830"
    conn = Connection(
        conn_id="wf_ui_test",
        conn_type="workflowsvc",
        host="https://ui.example.test/api/v1",
        password=token,
        extra=json.dumps({"api_key": api_key, "verify": True, "timeout": 30}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_WF_UI_TEST", conn.get_uri())
    assert isinstance(conn.get_hook(), WorkflowServiceHook)
    with respx.mock(assert_all_mocked=True) as router:
        route = router.get("https://ui.example.test/api/v1/workflows/").mock(
            side_effect=[httpx.Response(401, json={"detail": "Invalid token"}), httpx.Response(200, json=[])]
        )
        ok, message = conn.test_connection()
        assert ok is False
        assert message.startswith(
            "Connection failed: 401 Unauthorized from GET /api/v1/workflows/: Invalid token"
        )
        assert token not in message
        assert api_key not in message
        ok, message = conn.test_connection()
        assert ok is True, message
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {token}"
    assert request.headers["service-api-key"] == api_key


def test_the_docs_list_every_schedule_and_the_full_providers_get() -> None:
    """Issue #15: the docs show the full schedule list, and the command that shows everything."""
    from airflow_provider_workflowsvc.operators.workflows import SCHEDULES

    docs = Path(__file__).parents[1] / "docs" / "provider"
    operators = " ".join((docs / "operators" / "workflows.rst").read_text().split())
    assert [s for s in SCHEDULES if f"``{s}``" not in operators] == []
    installation = (docs / "installation.rst").read_text()
    assert "airflow providers get airflow-provider-workflowsvc --full -o yaml" in installation


def test_providers_get_full_shows_hooks_operators_and_the_connection_type(tmp_path: Path) -> None:
    """What ``airflow providers get ... --full -o yaml`` prints (the README describes it)."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "airflow", "providers", "get", "airflow-provider-workflowsvc"]
    done = subprocess.run(
        [*command, "--full", "-o", "yaml"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "connection-type: workflowsvc",
        "hook-class-name: airflow_provider_workflowsvc.hooks.workflowsvc.WorkflowServiceHook",
        "- airflow_provider_workflowsvc.operators.jobs",
        "- airflow_provider_workflowsvc.sensors.job",
        "- airflow_provider_workflowsvc.triggers.job",
        "- airflow_provider_workflowsvc.operators.jobs.WorkflowJobLink",
        "description: Run Workflow Service jobs (source connector, processing nodes, destination)",
    ):
        assert expected in out, expected


def test_provider_info_is_valid_for_airflows_schema() -> None:
    import json

    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_declared_settings_defaults_are_the_codes() -> None:
    """The ``[workflowsvc]`` options Airflow lists (``airflow config list``) default to what the code
    falls back to when they are not set."""
    from airflow_provider_workflowsvc._tasks.base import MIN_POLL_INTERVAL
    from airflow_provider_workflowsvc.triggers.job import SHARED_STATUS_POLL

    options = get_provider_info()["config"]["workflowsvc"]["options"]
    assert float(options["min_poll_interval"]["default"]) == MIN_POLL_INTERVAL
    assert options["shared_status_poll"]["default"] == str(SHARED_STATUS_POLL)


def test_airflow_reads_the_declared_defaults(tmp_path: Path) -> None:
    """Airflow's own CLI knows the provider's settings and their defaults (nothing set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__WORKFLOWSVC__")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    command = [sys.executable, "-m", "airflow", "config", "get-value", "workflowsvc"]
    for option, expected in (("shared_status_poll", "True"), ("min_poll_interval", "1.0")):
        done = subprocess.run([*command, option], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == expected, (option, done.stdout)  # after any log


def test_provider_info_points_to_no_placeholder_page() -> None:
    """No public page of the provider or the service exists yet (docs/decisions/project.md, Packaging)."""
    for integration in get_provider_info()["integrations"]:
        assert "external-doc-url" not in integration


def test_the_hook_user_agent_carries_the_package_version() -> None:
    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook

    with WorkflowServiceHook(settings=ConnectionSettings(base_url="http://127.0.0.1:9/api/v1")) as hook:
        assert hook.get_conn().headers["user-agent"] == f"airflow-provider-workflowsvc/{__version__}"
