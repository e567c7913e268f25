"""
The ``airflow workflowsvc`` commands, declared for Airflow's command line (3.2+: the provider info's ``cli``).

Airflow imports this module at the start of every ``airflow`` command, so it imports only Airflow's CLI
declarations (already loaded by then) and the standard library; each command's code
(:mod:`.commands`: the hook, models, the console) is imported when that command runs.
"""

from __future__ import annotations

from airflow.cli.cli_config import (
    ARG_OUTPUT,
    ARG_VERBOSE,
    ARG_YES,
    ActionCommand,
    Arg,
    GroupCommand,
    lazy_load_command,
)

DEFAULT_CONN_ID = "workflowsvc_default"  # hooks.DEFAULT_CONN_ID (not imported: this module stays light)
_COMMANDS = "airflow_provider_workflowsvc.cli.commands"

ARG_CONN_ID = Arg(
    ("--conn-id",),
    help=f"The Workflow Service connection (default: {DEFAULT_CONN_ID})",
    default=DEFAULT_CONN_ID,
)
ARG_JOB_ID = Arg(("job_id",), help="The job's id")
ARG_WORKFLOW_ID = Arg(("--workflow-id",), help="Only the jobs of this workflow (its id)")
ARG_WORKFLOW_NAME = Arg(("--workflow-name",), help="Only the jobs of the one workflow named exactly this")
ARG_STATUS = Arg(
    ("--status",),
    help="Only the jobs in this status: scheduled, in_progress, completed, failed, stopped (either dialect's "
    "spelling)",
)
ARG_LIMIT = Arg(("--limit",), help="At most this many jobs, the newest (default: 100)", type=int, default=100)
ARG_NAME = Arg(("--name",), help="Only the workflows named exactly this")

COMMON = (ARG_CONN_ID, ARG_OUTPUT, ARG_VERBOSE)


def _action(name: str, help: str, function: str, *args: Arg) -> ActionCommand:
    return ActionCommand(name=name, help=help, func=lazy_load_command(f"{_COMMANDS}.{function}"), args=args)


def get_cli_commands() -> list[GroupCommand]:
    """Return the ``workflowsvc`` command group (Airflow calls this; see the provider info's ``cli``)."""
    jobs = GroupCommand(
        name="jobs",
        help="List, show and cancel jobs",
        subcommands=(
            _action(
                "list",
                "List jobs, newest first (of a workflow, in a status)",
                "jobs_list",
                ARG_WORKFLOW_ID,
                ARG_WORKFLOW_NAME,
                ARG_STATUS,
                ARG_LIMIT,
                *COMMON,
            ),
            _action(
                "show",
                "Show a job: status, per-node progress, failed files",
                "jobs_show",
                ARG_JOB_ID,
                *COMMON,
            ),
            _action("cancel", "Ask the service to stop a job", "jobs_cancel", ARG_JOB_ID, ARG_YES, *COMMON),
        ),
    )
    workflows = GroupCommand(
        name="workflows",
        help="List workflows",
        subcommands=(_action("list", "List the workflows", "workflows_list", ARG_NAME, *COMMON),),
    )
    templates = GroupCommand(
        name="templates",
        help="List workflow templates (the live service's platform API)",
        subcommands=(_action("list", "List the workflow templates", "templates_list", *COMMON),),
    )
    connection = GroupCommand(
        name="connection",
        help="Check the Workflow Service connection",
        subcommands=(
            _action(
                "check",
                "Make one authenticated call through the connection and say whether it worked",
                "connection_check",
                ARG_CONN_ID,
                ARG_VERBOSE,
            ),
        ),
    )
    return [
        GroupCommand(
            name="workflowsvc",
            help="Workflow Service: jobs, workflows, templates and the connection",
            subcommands=(jobs, workflows, templates, connection),
        )
    ]
