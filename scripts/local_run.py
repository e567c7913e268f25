"""
Your own DAG folder on a local Airflow against the emulator (``./dev airflow --dags DIR``), until Ctrl-C.

Starts the Workflow Service emulator and Airflow (api-server, scheduler, dag-processor, triggerer; SQLite,
LocalExecutor) on the DAG folder, points ``workflowsvc_default`` at the emulator, prints the UI's
address, the connection and where the logs are, then follows the folder: each DAG the dag-processor
adds or drops and each import error is printed as it appears. Everything Airflow needs for
event-driven DAGs (asset watchers) runs: ``airflow dags test`` cannot run those. Ctrl-C (or SIGTERM)
stops everything it started. Tasks run in the directory ``--workdir`` names (``./dev`` passes the one
you called it from), so relative paths in a DAG mean what they mean in your shell.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

from scripts.console import detail, raise_keyboard_interrupt, relative, say
from scripts.local_airflow import CONN_ENV, REPO_ROOT, LocalAirflow, LocalAirflowError, local_stack

HOME = REPO_ROOT / ".demo" / "airflow-dags"
"""The Airflow home (logs, SQLite database) by default: emptied at each start, kept after the stop."""
FOLLOW_INTERVAL = 3.0
"""Seconds between two looks at the DAGs and import errors the dag-processor reports."""


def passed_through(environ: dict[str, str]) -> dict[str, str]:
    """Return the caller's ``AIRFLOW_VAR_*`` and ``AIRFLOW_CONN_*`` (but ``workflowsvc_default``)."""
    return {
        name: value
        for name, value in environ.items()
        if name.startswith(("AIRFLOW_VAR_", "AIRFLOW_CONN_")) and name != CONN_ENV
    }


class FolderWatch:
    """Prints what changes in the DAG folder as the dag-processor sees it: DAGs and import errors."""

    def __init__(self, airflow: LocalAirflow) -> None:
        self.airflow = airflow
        self.dags: set[str] | None = None
        self.errors: dict[str, str] = {}

    def look(self) -> None:
        dags = {dag["dag_id"] for dag in self.airflow.api("GET", "/dags", params={"limit": 1000})["dags"]}
        errors = {e["filename"]: e.get("stack_trace") or "" for e in self.airflow.import_errors()}
        if self.dags is None:
            self.dags = set()
        for dag_id in sorted(dags - self.dags):
            detail(f"DAG {dag_id}: {self.airflow.base_url}/dags/{dag_id}")
        for dag_id in sorted(self.dags - dags):
            detail(f"DAG {dag_id} is gone")
        for filename, trace in sorted(errors.items()):
            if self.errors.get(filename) != trace:
                last = (trace.strip().splitlines() or ["?"])[-1]
                detail(f"import error in {relative(filename)}: {last}")
        for filename in sorted(set(self.errors) - set(errors)):
            detail(f"{relative(filename)} imports again")
        self.dags, self.errors = dags, errors


def follow(airflow: LocalAirflow, emulator: Any) -> None:
    """Print the folder's DAGs and import errors as they change, until Ctrl-C or something stops."""
    watch = FolderWatch(airflow)
    while True:
        try:
            watch.look()
        except LocalAirflowError as exc:  # the api-server busy for a moment: look again
            detail(f"(could not read the DAGs: {exc})")
        dead = next((c for c in airflow.components if not c.alive()), None)
        if dead is not None:
            raise LocalAirflowError(f"Airflow {dead.name} exited with code {dead.process.returncode}")
        try:
            emulator.health()
        except httpx.HTTPError as exc:
            raise LocalAirflowError(f"the emulator does not answer any more ({exc})") from exc
        time.sleep(FOLLOW_INTERVAL)


def print_access(airflow: LocalAirflow, emulator: Any, dags: Path) -> None:
    connection = json.loads(airflow.env[CONN_ENV])
    say(f"Airflow is up: open {airflow.base_url}/ in a browser")
    detail("login:      none needed (simple auth manager, every visitor is an admin: a throwaway box)")
    detail(f"DAGs:       {dags}")
    detail(f"emulator:   {emulator.base_url} (dialect {emulator.dialect})")
    detail(f"connection: workflowsvc_default = {json.dumps(connection)}")
    detail(f"logs:       {airflow.airflow_home / 'components'}/ and {airflow.logs_dir}/")
    detail(f"tasks run in {airflow.cwd}")
    detail("press Ctrl-C to stop Airflow and the emulator")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="./dev airflow", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--dags", type=Path, required=True, help="your DAG folder")
    parser.add_argument(
        "--dialect",
        choices=("spec", "platform"),
        default="spec",
        help="how the emulator answers: the spec's examples or the live service (default %(default)s)",
    )
    parser.add_argument("--port", type=int, default=0, help="the api-server's port (default: a free one)")
    parser.add_argument("--home", type=Path, default=HOME, help="the Airflow home (default %(default)s)")
    parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="where tasks run (default: here)")
    parser.add_argument(
        "--processing-delay", type=float, default=0.05, help="emulator seconds per file per node"
    )
    args = parser.parse_args(argv)
    args.dags = (args.workdir / args.dags).resolve()
    if not args.dags.is_dir():
        parser.error(f"--dags {args.dags}: no such folder")
    args.home = (args.workdir / args.home).resolve()
    if not may_empty(args.home):
        parser.error(f"--home {args.home}: it is emptied at each start, and holds more than an Airflow home")
    return args


def may_empty(home: Path) -> bool:
    """Whether ``home`` may be emptied: missing, empty, or an Airflow home (its database, config, logs)."""
    if not home.exists():
        return True
    known = {"airflow.db", "airflow.cfg", "components", "logs", "webserver_config.py", "simple_auth_manager"}
    return all(
        entry.name in known or entry.name.startswith(("airflow.db", "simple_auth"))
        for entry in home.iterdir()
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even where a shell ignored it
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    try:
        with local_stack(
            args.dags,
            emulator_options={"dialect": args.dialect, "processing_delay": args.processing_delay},
            env=passed_through(dict(os.environ)),
            home=args.home,
            db_template=REPO_ROOT / ".demo" / "cache" / f"airflow-{version('apache-airflow')}.db",
            progress=say,
            stop_timeout=30,
            airflow_options={"port": args.port, "workdir": args.workdir.resolve()},
        ) as (airflow, emulator):
            print_access(airflow, emulator, args.dags)
            follow(airflow, emulator)
    except KeyboardInterrupt:
        say("interrupted: everything started was stopped")
        return 0
    except LocalAirflowError as exc:
        say(f"stopped: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
