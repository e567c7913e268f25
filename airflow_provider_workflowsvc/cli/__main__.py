"""
``python -m airflow_provider_workflowsvc.cli``: the ``airflow workflowsvc`` commands on any Airflow.

Airflow 3.2+ adds them to its own command line (``airflow workflowsvc jobs list``); Airflow 3.0 and
3.1 have no place for a provider's commands, so there the same commands, with the same arguments and
output, run as ``python -m airflow_provider_workflowsvc.cli jobs list``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


def parser() -> argparse.ArgumentParser:
    """Return the parser of the ``workflowsvc`` command group, built from its one declaration."""
    from airflow_provider_workflowsvc.cli.definition import get_cli_commands

    (group,) = get_cli_commands()
    top = argparse.ArgumentParser(prog="python -m airflow_provider_workflowsvc.cli", description=group.help)
    _add_subcommands(top, group.subcommands)
    return top


def _add_subcommands(parser: argparse.ArgumentParser, commands: Any) -> None:
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        if hasattr(command, "subcommands"):
            _add_subcommands(sub, command.subcommands)
        else:
            for arg in command.args:
                arg.add_to_parser(sub)
            sub.set_defaults(func=command.func)


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main(sys.argv[1:])
