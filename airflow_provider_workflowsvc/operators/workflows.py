"""
Operators that create, update and delete workflows (source → processing nodes → destination).

Values known when the DAG is parsed (schedule, workflow type, node list, ids) are checked when the
operator is built, so a typo fails the DAG import; templated values are checked when the task runs,
before any request is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_workflowsvc._tasks.base import (
    IF_EXISTS_CHOICES,
    WorkflowServiceBaseOperator,
    check_choice,
    check_uuid,
    input_error,
    invalid_input_fails,
    is_deferred_value,
    one_of,
    rendered,
    static_str,
)

if TYPE_CHECKING:
    from airflow.sdk import Context, XComArg

    from airflow_provider_workflowsvc._tasks.resources import Difference
    from airflow_provider_workflowsvc.models import CreateWorkflow, Workflow, WorkflowNode

__all__ = ["CreateWorkflowOperator", "DeleteWorkflowOperator", "UpdateWorkflowOperator"]

SCHEDULES = (
    "every 15 minutes", "every hour", "every 2 hours", "every 4 hours", "every 6 hours", "every 8 hours",
    "every 10 hours", "every 12 hours", "daily", "weekly", "monthly",
)  # fmt: skip
"""The schedule values the service accepts (kept equal to ``models.Schedule`` by a test)."""

WORKFLOW_TYPES = ("basic", "advanced", "platinum", "custom")
"""The workflow types (kept equal to ``models.WorkflowType`` by a test)."""

_WORKFLOW_FIELDS = (
    "name", "workflow_type", "source_id", "destination_id", "workflow_nodes", "schedule", "reprocess_all",
    "template_id",
)  # fmt: skip
_NODE_KEYS = ("name", "type", "subtype")


def _check_node(index: int, node: Any, field: str) -> str | None:
    """Check one node known at parse time; return its name when known."""
    where = f"{field}[{index}]"
    if hasattr(node, "model_dump") or is_deferred_value(node):
        return static_str(getattr(node, "name", None))
    if not isinstance(node, Mapping):
        raise input_error(f"{where} must be a dict with name, type and subtype, got {type(node).__name__}")
    for key in _NODE_KEYS:
        value = node.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise input_error(f"{where}: {key} is missing or empty")
        if not isinstance(value, str):
            raise input_error(f"{where}: {key} must be a string, got {type(value).__name__}")
    settings = node.get("settings")
    if settings is not None and not isinstance(settings, Mapping) and not is_deferred_value(settings):
        raise input_error(f"{where}: settings must be a dict, got {type(settings).__name__}")
    return static_str(node["name"])


def check_nodes(nodes: Any, field: str = "workflow_nodes") -> None:
    """
    Check a node list known at parse time (``field``: the argument that holds it): dicts with name,
    type and subtype; unique names.
    """
    if nodes is None or (is_deferred_value(nodes) and not isinstance(nodes, (list, tuple))):
        return
    if not isinstance(nodes, (list, tuple)):
        raise input_error(f"{field} must be a list of nodes, got {type(nodes).__name__}")
    names = [name for i, node in enumerate(nodes) if (name := _check_node(i, node, field)) is not None]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise input_error(f"{field}: node names must be unique, repeated: {', '.join(repeated)}")


def _check_fields(fields: Mapping[str, Any]) -> None:
    """Check the workflow settings that are known at parse time (``fields`` holds those given)."""
    name = static_str(fields.get("name"))
    if name is not None and not name.strip():
        raise input_error("name must not be empty")
    check_choice(fields.get("workflow_type"), WORKFLOW_TYPES, "workflow_type")
    check_choice(fields.get("schedule"), SCHEDULES, "schedule")
    check_uuid(fields.get("source_id"), "source_id")
    check_uuid(fields.get("destination_id"), "destination_id")
    check_nodes(fields.get("workflow_nodes"))


class _WorkflowOperator(WorkflowServiceBaseOperator):
    """An operator that sends workflow settings; node settings may hold secrets."""

    secret_fields: ClassVar[Sequence[str]] = ("workflow_nodes",)
    template_fields_renderers: ClassVar[dict[str, str]] = {"workflow_nodes": "json"}
    ui_color = "#fef3e8"

    name: Any
    workflow_type: Any
    source_id: Any
    destination_id: Any
    workflow_nodes: Any
    schedule: Any
    reprocess_all: Any
    template_id: Any

    def _set_fields(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Store the settings among ``arguments`` (an ``__init__``'s ``locals()``); return those given."""
        for key in _WORKFLOW_FIELDS:
            setattr(self, key, arguments[key])
        given = {k: arguments[k] for k in _WORKFLOW_FIELDS if arguments[k] is not None}
        _check_fields(given)
        return given

    def declared_fields(self) -> dict[str, Any]:
        """
        Return every setting as declared (rendered), None included: the workflow's whole state
        (``template_id``, how a workflow is built, only when given).
        """
        declared = {key: getattr(self, key) for key in _WORKFLOW_FIELDS}
        if declared["template_id"] is None:
            del declared["template_id"]
        return declared

    def given_fields(self) -> dict[str, Any]:
        """Return the settings to send (rendered): the ones that are not None."""
        return {k: v for k, v in self.declared_fields().items() if v is not None}


class CreateWorkflowOperator(_WorkflowOperator):
    """
    Create a workflow, or reuse / update / refuse the one that already has its name.

    :param name: the workflow's name (unique: the service is asked for workflows of this name first).
    :param workflow_type: ``basic``, ``advanced``, ``platinum`` or ``custom``.
    :param source_id: the source connector id (for example the XCom of a create-connector task).
    :param destination_id: the destination connector id.
    :param workflow_nodes: the processing nodes, dicts with ``name``, ``type``, ``subtype`` and
        optional ``settings`` (or ``WorkflowNode`` models); required for a custom workflow.
    :param schedule: one of the service's schedules (``every hour``, ``daily``, ``weekly``, ...).
    :param reprocess_all: reprocess every file on each run, not only new ones.
    :param template_id: the live service's: the workflow template to build the workflow from.
    :param if_exists: when a workflow with this name exists: ``reuse`` it as is (default; a workflow of
        another type fails the task, every other difference is logged as a warning), ``update`` it to
        the declared settings (every one is sent, ``None`` included: a workflow declared without
        ``source_id`` has no source afterwards; each difference is logged, and a setting the service
        did not take fails the task), or ``fail``.
    :return: the workflow id (XCom).
    """

    template_fields: Sequence[str] = _WORKFLOW_FIELDS

    def __init__(
        self,
        *,
        name: str,
        workflow_type: str,
        source_id: str | XComArg | None = None,
        destination_id: str | XComArg | None = None,
        workflow_nodes: list[Any] | None = None,
        schedule: str | None = None,
        reprocess_all: bool | None = None,
        template_id: str | None = None,
        if_exists: str = "reuse",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.if_exists = one_of(if_exists, IF_EXISTS_CHOICES, "if_exists")
        self._set_fields(locals())
        if template_id is None:  # a template gives the nodes
            _check_custom_has_nodes(workflow_type, workflow_nodes)

    def execute(self, context: Context) -> str:
        from airflow_provider_workflowsvc._tasks.resources import UniqueName
        from airflow_provider_workflowsvc.exceptions import validate_input
        from airflow_provider_workflowsvc.hooks.workflowsvc import all_workflows
        from airflow_provider_workflowsvc.models import CreateWorkflow

        self.mask_secret_fields()
        fields = self.given_fields()
        with invalid_input_fails():
            body = validate_input(CreateWorkflow, "workflow", fields)
        hook = self.hook
        with self.closing_hook():
            return UniqueName(
                what="workflow",
                name=body.name,
                if_exists=self.if_exists,
                find=lambda: all_workflows(hook, name=body.name),
                create=lambda: hook.create_workflow(**fields),
                update=lambda existing: hook.update_workflow(str(existing.id), **self.declared_fields()),
                mismatch=lambda existing: self._mismatch(existing, body),
                drift=lambda existing: _drift(existing, body),
                log=self.log,
            ).ensure()

    def _mismatch(self, existing: Workflow, body: CreateWorkflow) -> str | None:
        """Say why a workflow of another type is not reused (an update may change the type), or None."""
        from airflow_provider_workflowsvc.connectors_catalog import normalized

        wanted, current = body.workflow_type.value, existing.workflow_type
        if self.if_exists == "update" or current is None or normalized(current) == wanted:
            return None
        return f"its workflow_type is {current!r}, not {wanted!r} (use if_exists='update')"


def _check_custom_has_nodes(workflow_type: Any, nodes: Any) -> None:
    """Check that a custom workflow known at parse time has a non-empty node list."""
    from airflow_provider_workflowsvc.connectors_catalog import normalized

    text = static_str(workflow_type)
    no_nodes = nodes is None or (isinstance(nodes, (list, tuple)) and not nodes)
    if text is not None and normalized(text) == "custom" and no_nodes:
        raise input_error("workflow_nodes: a custom workflow needs at least one node")


def _drift(existing: Workflow, body: CreateWorkflow) -> list[Difference]:
    """
    Every declared setting the existing workflow does not have, with both values (a setting declared ``None``
    differs from one it has); nodes declared ``None`` are the type's defaults: not compared.
    """
    from airflow_provider_workflowsvc.connectors_catalog import normalized

    differences: list[Difference] = []

    def compare(setting: str, current: Any, wanted: Any) -> None:
        if current != wanted:
            differences.append((setting, current, wanted))

    if existing.workflow_type is not None:
        compare("workflow_type", normalized(existing.workflow_type), body.workflow_type.value)
    compare("source_id", _one_or_all(existing.sources), _text(body.source_id))
    compare("destination_id", _one_or_all(existing.destinations), _text(body.destination_id))
    wanted_cron = body.schedule.cron_expression if body.schedule is not None else None
    compare("schedule", _one_or_all(_cron_expressions(existing)), wanted_cron)
    if existing.reprocess_all is not None:
        compare("reprocess_all", existing.reprocess_all, bool(body.reprocess_all))
    if body.workflow_nodes is not None:
        differences.extend(_node_drift(existing.workflow_nodes, body.workflow_nodes))
    return differences


def _one_or_all(values: Sequence[Any]) -> Any:
    """None for no value, the value for one, the list for several (as a user declares it)."""
    texts = [str(v) for v in values]
    return None if not texts else texts[0] if len(texts) == 1 else texts


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _node_drift(current: Sequence[WorkflowNode], wanted: Sequence[WorkflowNode]) -> list[Difference]:
    """
    Node list differences: the nodes themselves, then each requested setting of each node (a secret one listed
    as not compared: a service does not give them back).
    """
    from airflow_provider_workflowsvc._tasks.resources import NOT_SET, unseen_secret
    from airflow_provider_workflowsvc.models import is_secret_field

    if _node_keys(current) != _node_keys(wanted):
        return [("workflow_nodes", _node_keys(current), _node_keys(wanted))]
    differences: list[Difference] = []
    for have, want in zip(current, wanted, strict=True):
        have_settings = have.settings or {}
        for key, value in (want.settings or {}).items():
            setting = f"workflow_nodes[{want.name}].settings.{key}"
            if is_secret_field(key):
                differences.append(unseen_secret(setting))
            elif have_settings.get(key, NOT_SET) != value:
                differences.append((setting, have_settings.get(key, NOT_SET), value))
    return differences


def _cron_expressions(workflow: Workflow) -> list[str]:
    return [e.cron_expression for e in workflow.schedule.crontab_entries] if workflow.schedule else []


def _node_keys(nodes: Sequence[Any]) -> list[tuple[str, str, str]]:
    return [(n.name, n.type, n.subtype) for n in nodes]


class UpdateWorkflowOperator(_WorkflowOperator):
    """
    Change a workflow's settings; only the settings given (not None) are sent.

    :param workflow_id: the workflow's id.
    :param name: a new name.
    :param workflow_type: a new type.
    :param source_id: a new source connector id.
    :param destination_id: a new destination connector id.
    :param workflow_nodes: a new node list (replaces the old one).
    :param schedule: a new schedule (``every hour``, ``daily``, ...).
    :param reprocess_all: whether every file is reprocessed on each run.
    :param template_id: the live service's: a workflow template to rebuild the workflow from.
    :return: the workflow id (XCom).
    """

    template_fields: Sequence[str] = ("workflow_id", *_WORKFLOW_FIELDS)

    def __init__(
        self,
        *,
        workflow_id: str | XComArg,
        name: str | None = None,
        workflow_type: str | None = None,
        source_id: str | XComArg | None = None,
        destination_id: str | XComArg | None = None,
        workflow_nodes: list[Any] | None = None,
        schedule: str | None = None,
        reprocess_all: bool | None = None,
        template_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.workflow_id = rendered(workflow_id)
        check_uuid(workflow_id, "workflow_id")
        given = self._set_fields(locals())
        if not given:
            raise input_error("UpdateWorkflowOperator needs at least one setting to change")

    def execute(self, context: Context) -> str:
        self.mask_secret_fields()
        with self.closing_hook(), invalid_input_fails():
            updated = self.hook.update_workflow(self.workflow_id, **self.given_fields())
        self.log.info("Updated workflow %r (%s)", updated.name, updated.id)
        return str(updated.id)


class DeleteWorkflowOperator(WorkflowServiceBaseOperator):
    """
    Delete a workflow.

    :param workflow_id: the workflow's id.
    :param missing_ok: succeed when the workflow does not exist (already deleted); default True, so a
        teardown task can run again.
    """

    template_fields: Sequence[str] = ("workflow_id",)

    def __init__(self, *, workflow_id: str | XComArg, missing_ok: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workflow_id, self.missing_ok = rendered(workflow_id), missing_ok
        check_uuid(workflow_id, "workflow_id")

    def execute(self, context: Context) -> None:
        from airflow_provider_workflowsvc._tasks.resources import delete_resource

        with self.closing_hook():
            delete_resource(
                self.hook.delete_workflow,
                self.workflow_id,
                what="workflow",
                missing_ok=self.missing_ok,
                log=self.log,
                get=self.hook.get_workflow,
            )
