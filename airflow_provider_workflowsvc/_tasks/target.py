"""
Which workflow a run means (by id, or by its unique name) and whether the run's input fits it: local
files only for a workflow without a source connector, no files only for one with a source connector.

Checked at DAG parse time where the DAG says it (the workflow comes from a ``CreateWorkflowOperator``
whose ``source_id`` is declared), and again when the task runs, before anything is uploaded. Imported
when a DAG file is parsed: module-level imports are the standard library and :mod:`.base` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc._tasks.base import check_uuid, input_error, invalid_input_fails, static_str

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Workflow


NO_SOURCE_FIX = (
    "declare the workflow without source_id (CreateWorkflowOperator(source_id=None, if_exists='update') "
    "removes it), or run it without files"
)
NEEDS_FILES_FIX = (
    "give files= (a path, directory or glob of local files), or give the workflow a source connector"
)


def check_run_target(workflow_id: Any, workflow_name: Any, files: Any) -> None:
    """
    Check at parse time: exactly one of ``workflow_id`` and ``workflow_name``; and, when the workflow
    is the output of a ``CreateWorkflowOperator`` in this DAG, that ``files`` fits its declared source.
    """
    if (workflow_id is None) == (workflow_name is None):
        raise input_error(
            "give exactly one of workflow_id and workflow_name (the run never creates a workflow; "
            f"got {'both' if workflow_id is not None else 'neither'})"
        )
    check_uuid(workflow_id, "workflow_id")
    name = static_str(workflow_name)
    if name is not None and not name.strip():
        raise input_error("workflow_name must not be empty")
    _check_declared_source(workflow_id, files)


def _check_declared_source(workflow_id: Any, files: Any) -> None:
    """Fail when the workflow's creating task in this DAG declares a source that ``files`` contradicts."""
    creator: Any = getattr(workflow_id, "operator", None)
    if getattr(workflow_id, "key", None) != "return_value" or not hasattr(creator, "if_exists"):
        return  # not the return value of a task that creates a workflow by name
    source_id = getattr(creator, "source_id", None)
    where = f"the workflow comes from task {creator.task_id!r}"
    if files is not None and source_id is not None:
        raise input_error(
            f"files are given, but {where}, which declares a source connector (source_id): a workflow "
            f"with a source connector reads its input from there. To run local files, {NO_SOURCE_FIX}"
        )
    if files is None and source_id is None:
        raise input_error(
            f"no files are given, but {where}, which declares no source connector (source_id=None): "
            f"such a workflow runs only on uploaded files. {NEEDS_FILES_FIX.capitalize()}"
        )


def resolve_workflow(hook: WorkflowServiceHook, workflow_id: Any, workflow_name: Any) -> Workflow:
    """Return the workflow of that id, or the one workflow of that exact name (none or several fail)."""
    from airflow_provider_workflowsvc._tasks.resources import only_one_named
    from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError
    from airflow_provider_workflowsvc.hooks.workflowsvc import all_workflows

    if workflow_name is None:
        return hook.get_workflow(str(workflow_id).strip())
    name = str(workflow_name)
    if not name.strip():
        raise InvalidTaskInputError("workflow_name rendered to an empty string")
    found = only_one_named(all_workflows(hook, name=name), name, "workflow")
    if found is None:
        raise InvalidTaskInputError(
            f"no workflow is named {name!r}; RunWorkflowOperator never creates one (create it with "
            "CreateWorkflowOperator, or check the name and the connection)"
        )
    return found


def check_input_fits(hook: WorkflowServiceHook, workflow: Workflow, with_files: bool) -> None:
    """
    Fail before anything is uploaded when local files go to a workflow with a source connector, or
    no files to a workflow without one; the message names the connector and what to change.
    """
    from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError

    label = f"workflow {workflow.name!r} ({workflow.id})"
    if with_files and workflow.sources:
        raise InvalidTaskInputError(
            f"local files cannot be run on {label}: it has the source connector "
            f"{_connectors(hook, workflow)}, which the service reads its input from. To run local "
            f"files, {NO_SOURCE_FIX}"
        )
    if not with_files and not workflow.sources:
        raise InvalidTaskInputError(
            f"{label} has no source connector (a local source), so a run needs files: {NEEDS_FILES_FIX}"
        )


def _connectors(hook: WorkflowServiceHook, workflow: Workflow) -> str:
    """Name the workflow's source connectors: ``'name' (type, id)``, the id alone when unreadable."""
    named = []
    for source_id in workflow.sources:
        try:
            source = hook.get_source(source_id)
        except Exception:
            named.append(str(source_id))
        else:
            named.append(f"{source.name!r} ({source.type}, {source_id})")
    return ", ".join(named)


@invalid_input_fails()
def resolve_target(
    hook: WorkflowServiceHook, workflow_id: Any, workflow_name: Any, with_files: bool, log: Any
) -> str | None:
    """
    Return the id of the workflow meant (found by name, when named), checked to fit the run's input
    before anything is uploaded; None when it is not read: a run without files by id is not delayed
    by a read (the service's refusal of it is explained by :func:`explain_refusal`).
    """
    if workflow_name is None and not with_files:
        return None
    workflow = resolve_workflow(hook, workflow_id, workflow_name)
    if workflow_name is not None:
        log.info("Workflow %r is %s", workflow.name, workflow.id)
    check_input_fits(hook, workflow, with_files=with_files)
    return str(workflow.id)


def explain_refusal(hook: WorkflowServiceHook, workflow_id: str, refusal: Exception) -> None:
    """After a refused run without files: a workflow without a source connector fails clearly."""
    from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError

    try:
        workflow = hook.get_workflow(workflow_id)
    except Exception:
        return  # the refusal itself is the clearest account left
    try:
        check_input_fits(hook, workflow, with_files=False)
    except InvalidTaskInputError as exc:
        raise exc from refusal
