"""The shape #14 gave the task side: one way to get a hook, typed connector dispatch, a one-way wait."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import airflow_provider_workflowsvc as package
from airflow_provider_workflowsvc._tasks.base import WorkflowServiceBaseOperator, WorkflowServiceTaskMixin
from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
from airflow_provider_workflowsvc.operators import connectors, jobs, workflows
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

ROOT = Path(package.__path__[0])
WF = "0b7c6a9e-3f0e-4a51-9c7b-1d2e3f4a5b6c"


def _public_tasks() -> list[type]:
    modules = (connectors, jobs, workflows)
    found = [getattr(m, name) for m in modules for name in m.__all__]
    return [c for c in found if isinstance(c, type) and c.__name__.endswith("Operator")] + [WorkflowJobSensor]


def _provider_imports(path: Path) -> set[str]:
    """Every provider module ``path`` imports, at module level or inside functions (TYPE_CHECKING too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("airflow_provider_workflowsvc")}


# --------------------------------------------------------------------------------------------------
# One way to get the hook


def test_every_operator_and_the_sensor_get_their_hook_from_the_one_mixin() -> None:
    tasks = _public_tasks()
    assert WorkflowJobSensor in tasks
    assert jobs.RunWorkflowOperator in tasks
    for task in tasks:
        assert issubclass(task, WorkflowServiceTaskMixin), task.__name__
        assert "hook" not in vars(task), f"{task.__name__} makes its hook its own way"
    operators = [t for t in tasks if t is not WorkflowJobSensor]
    assert all(issubclass(t, WorkflowServiceBaseOperator) for t in operators)


def test_a_dag_default_connection_reaches_every_operator_and_the_sensor() -> None:
    from airflow.sdk import DAG

    with DAG("defaults", default_args={"workflowsvc_conn_id": "from_defaults"}):
        tasks = [
            connectors.DeleteSourceConnectorOperator(task_id="connector", connector_id=WF),
            workflows.DeleteWorkflowOperator(task_id="workflow", workflow_id=WF),
            jobs.RunWorkflowOperator(task_id="run", workflow_id=WF),
            jobs.CancelJobOperator(task_id="cancel", job_id="j"),
            WorkflowJobSensor(task_id="sensor", job_id="j"),
        ]
    assert {t.task_id: t.workflowsvc_conn_id for t in tasks} == dict.fromkeys(
        ("connector", "workflow", "run", "cancel", "sensor"), "from_defaults"
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda conn: jobs.RunWorkflowOperator(task_id="t", workflow_id=WF, workflowsvc_conn_id=conn),
        lambda conn: jobs.CancelJobOperator(task_id="t", job_id="j", workflowsvc_conn_id=conn),
        lambda conn: WorkflowJobSensor(task_id="t", job_id="j", workflowsvc_conn_id=conn),
        lambda conn: connectors.DeleteSourceConnectorOperator(
            task_id="t", connector_id=WF, workflowsvc_conn_id=conn
        ),
    ],
    ids=["run", "cancel", "sensor", "connector"],
)
def test_the_hook_is_made_once_for_the_task_connection_and_closed_after_each_step(make) -> None:  # type: ignore[no-untyped-def]
    task = make("my_conn")
    assert task.workflowsvc_conn_id == "my_conn"
    with task.closing_hook():
        pass  # nothing made yet: nothing to close, and still nothing made
    assert "hook" not in vars(task)
    hook = task.hook
    assert isinstance(hook, WorkflowServiceHook)
    assert hook.workflowsvc_conn_id == "my_conn"
    assert task.hook is hook
    hook._settings = ConnectionSettings(base_url="https://svc.test/api/v1", token="t")  # no connection lookup
    with pytest.raises(RuntimeError), task.closing_hook():
        assert hook.get_conn() is not None
        raise RuntimeError("the task's step failed")
    assert hook._client is None, "closing_hook closes the client of the hook the task made, also on an error"


def test_a_separate_hook_has_its_own_client_and_reuses_settings_already_read() -> None:
    task = jobs.RunWorkflowOperator(task_id="t", workflow_id=WF, workflowsvc_conn_id="my_conn")
    fresh = task.separate_hook()
    assert "hook" not in vars(task), "making a separate hook does not make the task's own"
    assert fresh._settings is None, "no hook yet: the separate one reads the connection itself"
    settings = ConnectionSettings(base_url="https://svc.test/api/v1", token="t")
    task.__dict__["hook"] = WorkflowServiceHook("my_conn", settings=settings)
    separate = task.separate_hook()
    assert separate is not task.hook
    assert separate.workflowsvc_conn_id == "my_conn"
    assert separate.settings is task.hook.settings


# --------------------------------------------------------------------------------------------------
# Typed connector dispatch


def test_public_connector_operators_have_their_own_summary_and_the_shared_parameters() -> None:
    public = [getattr(connectors, n) for n in connectors.__all__ if n.endswith("Operator")]
    assert {op.kind for op in public} == {"source", "destination"}
    for operator in public:
        doc = inspect.getdoc(operator) or ""
        kind = operator.kind
        summary = doc.splitlines()[0]
        assert f"{kind} connector" in summary, (operator.__name__, summary)
        assert ":param connector_id:" in doc or ":param name:" in doc, operator.__name__
        assert doc.count(summary) == 1, f"{operator.__name__}: summary repeated"


# --------------------------------------------------------------------------------------------------
# The wait: one package, one-way dependencies


def test_nothing_in_hooks_imports_the_wait() -> None:
    for path in (ROOT / "hooks").glob("*.py"):
        imports = _provider_imports(path)
        assert not {i for i in imports if i.startswith("airflow_provider_workflowsvc.wait")}, path.name


@pytest.mark.parametrize(
    ("module", "may_not_import"),
    [
        ("outcome", ("wait.watch", "wait.poll", "hooks", "_tasks", "operators", "sensors", "triggers")),
        ("watch", ("wait.poll", "hooks", "_tasks", "operators", "sensors", "triggers")),
        ("poll", ("_tasks", "operators", "sensors", "triggers")),
        ("source", ("wait.jobs", "_tasks", "operators", "sensors", "triggers")),
    ],
)
def test_the_wait_modules_depend_one_way(module: str, may_not_import: tuple[str, ...]) -> None:
    imports = _provider_imports(ROOT / "wait" / f"{module}.py")
    forbidden = {f"airflow_provider_workflowsvc.{name}" for name in may_not_import}
    assert not {i for i in imports if any(i == f or i.startswith(f + ".") for f in forbidden)}, imports
