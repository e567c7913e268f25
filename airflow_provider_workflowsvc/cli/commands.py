"""What each ``airflow workflowsvc`` command does (docs/provider/cli.rst): read through the hook, print."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    import argparse

    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook
    from airflow_provider_workflowsvc.models import Job, JobDetails, JobFailedFiles, Workflow

F = TypeVar("F", bound=Callable[..., Any])


def command(func: F) -> F:
    """
    Run a command as Airflow runs its own: its logs and warnings quiet (``--verbose`` shows them), the
    providers' configuration loaded; an error of the service or of the input is the command's message.
    """
    from airflow.utils.cli import suppress_logs_and_warning
    from airflow.utils.providers_configuration_loader import providers_configuration_loaded

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> None:
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceError

        # as `airflow connections test`: a connection stored in the metadata database is found
        os.environ["_AIRFLOW_PROCESS_CONTEXT"] = "server"
        try:
            func(args)
        except WorkflowServiceError as exc:
            raise SystemExit(f"Error: {_as_text(str(exc), 'plain')}") from None

    return cast("F", suppress_logs_and_warning(providers_configuration_loaded(run)))


@contextmanager
def _hook(args: argparse.Namespace) -> Iterator[WorkflowServiceHook]:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

    with WorkflowServiceHook(args.conn_id) as hook:
        yield hook


def _print(args: argparse.Namespace, rows: Iterable[dict[str, Any]]) -> None:
    from airflow.cli.simple_table import AirflowConsole

    if args.output in ("table", "plain"):  # json and yaml escape what they must themselves
        rows = [{key: _as_text(value, args.output) for key, value in row.items()} for row in rows]
    AirflowConsole().print_as(data=list(rows), output=args.output)


_CONTROLS = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))},
    **{ord(c): repr(c)[1:-1] for c in "\t\n\r"},
}
"""C0, DEL and C1 control characters (ESC starts a terminal's escape sequences, C1 CSI too), each
written as its Python escape (``\\x1b``): shown, never sent to the terminal."""


def _as_text(value: Any, output: str) -> Any:
    """
    ``value`` (the service's: a name, a message) printed as the text it is: control characters escaped
    and, in a table (printed by rich), ``[`` escaped so that rich reads no markup in it.
    """
    if isinstance(value, list):
        return [_as_text(item, output) for item in value]
    if not isinstance(value, str):
        return value
    text = value.translate(_CONTROLS)
    if output == "table":
        from rich.markup import escape

        return escape(text)
    return text


def _when(value: Any) -> str | None:
    return None if value is None else value.isoformat()


# --------------------------------------------------------------------------------------------------
# jobs


def _job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "status": job.raw_status or job.status.value,
        "workflow_id": job.workflow_id,
        "workflow_name": job.workflow_name,
        "created_at": _when(job.created_at),
        "job_type": job.job_type,
    }


@command
def jobs_list(args: argparse.Namespace) -> None:
    """List jobs, newest first: of one workflow (by id or exact name), in one status, at most ``--limit``."""
    from airflow_provider_workflowsvc.models import JobStatus

    with _hook(args) as hook:
        workflow_id = _workflow_id(hook, args.workflow_id, args.workflow_name)
        jobs = hook.list_jobs(workflow_id=workflow_id, status=args.status)
    if args.status is not None:  # a service that ignores the filter does not show other statuses
        wanted = JobStatus(args.status)
        jobs = [job for job in jobs if job.status is wanted]
    newest_first = sorted(jobs, key=lambda job: (job.created_utc is not None, job.created_utc), reverse=True)
    _print(args, [_job_row(job) for job in newest_first[: args.limit]])


def _workflow_id(hook: WorkflowServiceHook, workflow_id: str | None, name: str | None) -> str | None:
    """Return the workflow given by id, or the id of the one workflow named exactly ``name``."""
    if name is None:
        return workflow_id
    from airflow_provider_workflowsvc._tasks.resources import only_one_named
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError
    from airflow_provider_workflowsvc.hooks.workflowsvc import all_workflows

    if workflow_id is not None:
        raise WorkflowServiceInputError("give --workflow-id or --workflow-name, not both")
    found = only_one_named(all_workflows(hook, name=name), name, "workflow")
    if found is None:
        raise WorkflowServiceInputError(f"no workflow is named {name!r} (check the name and --conn-id)")
    return str(found.id)


@command
def jobs_show(args: argparse.Namespace) -> None:
    """Show one job: its record, its per-node progress and message, and the files it failed to process."""
    with _hook(args) as hook:
        job = hook.get_job(args.job_id)
        details = hook.get_job_details(args.job_id)
        failed = hook.get_job_failed_files(args.job_id)
    if args.output in ("json", "yaml"):
        _print(args, [_job_in_full(job, details, failed)])
        return
    _print(args, [{**_job_row(job), "message": _service_text(details.message or "", job)}])
    _print(args, [_node_row(node) for node in details.node_stats])
    _print(args, _failed_rows(failed, job))


def _job_in_full(job: Job, details: JobDetails, failed: JobFailedFiles) -> dict[str, Any]:
    return {
        **_job_row(job),
        "runtime": job.runtime,
        "message": _service_text(details.message or "", job),
        "node_stats": [_node_row(node) for node in details.node_stats],
        "failed_files": _failed_rows(failed, job),
        "output_files": [{"file_id": o.file_id, "node_id": o.node_id} for o in job.output_node_files],
    }


def _node_row(node: Any) -> dict[str, Any]:
    fields = ("ready", "in_progress", "success", "failure")
    return {"node": node.node_name or node.node_type, **{field: getattr(node, field) for field in fields}}


def _failed_rows(failed: JobFailedFiles, job: Job) -> list[dict[str, str]]:
    return [
        {"document": _service_text(f.document, job), "error": _service_text(f.error or "", job)}
        for f in failed.failed_files
    ]


def _service_text(text: str, job: Job) -> str:
    """
    Return the service's ``text`` as the operators show it: a marked run's marker out where ``job``'s
    record shows it (never from an unmarked name), and what a URL in it carries as credentials masked.
    """
    from airflow_provider_workflowsvc._marker import run_marker, unmarked
    from airflow_provider_workflowsvc._url_secrets import mask_url_secrets

    return mask_url_secrets(unmarked(text, run_marker(job.input_file_ids)))


@command
def jobs_cancel(args: argparse.Namespace) -> None:
    """Ask the service to stop a job (confirmed first, unless ``--yes``); a job that had ended is said so."""
    from airflow_provider_workflowsvc.wait.poll import cancel_quietly

    if not args.yes and not _confirmed(f"Cancel job {args.job_id}? [y/N] "):
        raise SystemExit("Not cancelled")
    with _hook(args) as hook:
        job = hook.get_job(args.job_id)
        before = job.raw_status or job.status.value
        cancelled = not job.status.is_terminal and cancel_quietly(hook, args.job_id, _Quiet())
    _print(args, [{"id": args.job_id, "status_before": before, "cancelled": cancelled}])


def _confirmed(question: str) -> bool:
    """Ask ``question``; only "y" or "yes" confirms. No terminal to answer (a script, CI) is a no."""
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        no_answer = "Not cancelled: no answer on standard input (pass --yes to cancel without asking)"
        raise SystemExit(no_answer) from None


class _Quiet:
    """A log for :func:`~..wait.poll.cancel_quietly` that says nothing: the command prints its result."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


# --------------------------------------------------------------------------------------------------
# workflows, templates, the connection


def _workflow_row(workflow: Workflow) -> dict[str, Any]:
    schedule = workflow.schedule
    return {
        "id": workflow.id,
        "name": workflow.name,
        "type": workflow.workflow_type,
        "status": workflow.status.value,
        "schedule": ", ".join(e.cron_expression for e in schedule.crontab_entries) if schedule else None,
        "sources": workflow.sources,
        "destinations": workflow.destinations,
    }


@command
def workflows_list(args: argparse.Namespace) -> None:
    """List the workflows (every page), or those named exactly ``--name``."""
    from airflow_provider_workflowsvc.hooks.workflowsvc import all_workflows

    with _hook(args) as hook:
        listed = all_workflows(hook, **({"name": args.name} if args.name else {}))
    workflows = [w for w in listed if not args.name or w.name == args.name]
    _print(args, [_workflow_row(w) for w in sorted(workflows, key=lambda w: w.name)])


@command
def templates_list(args: argparse.Namespace) -> None:
    """List the service's workflow templates (the live service's; a service without them is said so)."""
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceError, WorkflowServiceNotFoundError

    with _hook(args) as hook:
        try:
            templates = hook.list_templates()
        except WorkflowServiceNotFoundError as exc:
            raise WorkflowServiceError(
                f"{exc}. This service has no workflow templates: they are an operation of the live "
                "service's platform API"
            ) from None
    rows = [
        {"id": t.id, "name": t.name, "version": t.version, "description": t.description} for t in templates
    ]
    _print(args, sorted(rows, key=lambda row: row["id"]))


@command
def connection_check(args: argparse.Namespace) -> None:
    """Make one cheap authenticated call through the connection; say whether it worked (status 1 if not)."""
    with _hook(args) as hook:
        ok, message = hook.test_connection()
    print(_as_text(message, "plain"), file=sys.stdout if ok else sys.stderr)
    if not ok:
        raise SystemExit(1)
