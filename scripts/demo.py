"""
The one-command demo (``./dev demo [--keep] [--distributed]``): the local-files example on a real Airflow.

Starts the Workflow Service emulator and Airflow (api-server, scheduler, dag-processor, triggerer),
runs ``example_dags/example_local_files.py`` through the scheduler, the worker and the triggerer,
prints what happened and where the output is (``.demo/output/<job id>/``), then stops everything it
started, also on Ctrl-C or an error. ``--keep`` leaves Airflow up for a look at the UI until Ctrl-C.
``--distributed`` runs it on the distributed shape (PostgreSQL, CeleryExecutor with Redis, a Celery
worker, two triggerers; Debian packages installed with apt-get when missing) and prints which worker
ran each task and which triggerer held the wait. There the documents come from a bucket and the outputs
go to it (an S3-compatible server on loopback, moto, reached through an Airflow ``aws`` connection):
workers share no disk.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

from scripts.console import detail, raise_keyboard_interrupt, relative, say
from scripts.local_airflow import REPO_ROOT, DistributedAirflow, LocalAirflow, LocalAirflowError, local_stack
from scripts.s3_server import S3Server, running_s3_server

DAG_ID = "workflowsvc_example_local_files"
DEMO_BUCKET = "workflowsvc-demo"
DEMO_S3_CONN = "workflowsvc_demo_s3"
"""The Airflow connection of the distributed demo's bucket (an ``aws`` connection with ``endpoint_url``)."""
RUN_TASK = "run_workflow"
DEMO_DIR = REPO_ROOT / ".demo"
DISTRIBUTED_PROCESSING_DELAY = 1.0
"""Emulator seconds per file per node on the distributed shape: the wait lasts long enough to be seen."""
# Placeholders so the other examples can be triggered from the UI with --keep (the emulator accepts any
# credentials; against a real account these Variables hold real settings).
EMULATOR_VARIABLES = {
    "AIRFLOW_VAR_WORKFLOWSVC_CONFLUENCE_URL": "https://example.atlassian.net/wiki",
    "AIRFLOW_VAR_WORKFLOWSVC_CONFLUENCE_USER": "demo@example.com",
    "AIRFLOW_VAR_WORKFLOWSVC_CONFLUENCE_TOKEN": "emulator-accepts-any-token",
    "AIRFLOW_VAR_WORKFLOWSVC_ASTRA_ENDPOINT": "https://demo-db.apps.astra.example.com",
    "AIRFLOW_VAR_WORKFLOWSVC_ASTRA_TOKEN": "emulator-accepts-any-token",
}


class JobWatcher:
    """Prints task state changes and the job's status changes while the DAG run goes on."""

    def __init__(self, airflow: LocalAirflow, emulator: Any, run_id: str) -> None:
        self.airflow, self.run_id = airflow, run_id
        self.started = time.monotonic()
        self.tasks: dict[str, str | None] = {}
        self.job_id: str | None = None
        self.job_status: str | None = None
        self.triggerers: list[str] = []
        headers = {"authorization": f"Bearer {emulator.token}"}
        if emulator.api_key:
            headers["service-api-key"] = emulator.api_key
        self.service = httpx.Client(base_url=emulator.base_url, headers=headers, timeout=10)

    def close(self) -> None:
        self.service.close()

    def _note_triggerer(self) -> None:
        """On the distributed shape, note which triggerer holds the run task's trigger."""
        if not isinstance(self.airflow, DistributedAirflow):
            return
        held = self.airflow.deferred_tasks(DAG_ID, self.run_id).get(RUN_TASK)
        triggerer = held and held["triggerer"]
        if triggerer and triggerer not in self.triggerers:
            self.triggerers.append(triggerer)
            detail(f"{self._clock()} the trigger of {RUN_TASK} runs in {triggerer}")

    def _clock(self) -> str:
        return f"[{time.monotonic() - self.started:5.1f} s]"

    def __call__(self, run: dict[str, Any]) -> None:
        self._note_triggerer()
        for ti in self.airflow.task_instances(DAG_ID, self.run_id):
            task_id, state = ti["task_id"], ti.get("state")
            if self.tasks.get(task_id) != state and state:
                self.tasks[task_id] = state
                note = ""
                if task_id == RUN_TASK and state == "deferred":
                    note = " (no worker slot held: the triggerer polls the job)"
                detail(f"{self._clock()} task {task_id}: {state}{note}")
        if self.job_id is None:
            job_id = self.airflow.xcom(DAG_ID, self.run_id, RUN_TASK, key="job_id")
            if job_id:
                self.job_id = str(job_id)
                say(f"waiting for the job {self.job_id}…")
        if self.job_id is not None and self.tasks.get(RUN_TASK) not in ("success", "failed"):
            try:
                status = self.service.get(f"jobs/{self.job_id}").json().get("status")
            except (httpx.HTTPError, ValueError):
                return
            if status != self.job_status:
                self.job_status = status
                detail(f"{self._clock()} job status: {status}")


def print_placement(airflow: LocalAirflow, run_id: str, triggerers: list[str]) -> None:
    """Print where each task ran (its worker's hostname) and which triggerer held the wait."""
    say("where things ran")
    for ti in airflow.task_instances(DAG_ID, run_id):
        detail(f"task {ti['task_id']:<22} ran on {ti.get('hostname') or '?'} (try {ti.get('try_number')})")
    detail(f"the wait of {RUN_TASK} was held by: {wait_holder(airflow, run_id, triggerers)}")


def wait_holder(airflow: LocalAirflow, run_id: str, triggerers: list[str]) -> str:
    """
    Say which triggerer held the wait, from what was seen: the triggerers caught holding it (two in
    the distributed shape), else the trigger's own log (the local shape has one triggerer only).
    """
    if triggerers:
        return ", ".join(triggerers)
    logs = airflow.trigger_log_files(DAG_ID, run_id, RUN_TASK)
    if not logs:
        return "no triggerer (the task did not defer)"
    log = relative(logs[0])
    if isinstance(airflow, DistributedAirflow):
        return f"a triggerer, which one was not caught between two looks (the trigger's log: {log})"
    return f"the triggerer, the only one of this local Airflow (the trigger's log: {log})"


def durations(summary: dict[str, Any]) -> str:
    """Name both times: the job's own run time (where its record gives it) and the wait's."""
    wait = f"the wait took {summary['elapsed_seconds']} s"
    if summary.get("job_seconds") is None:
        return wait
    if summary.get("job_seconds_from") == "runtime":
        return f"the job ran {summary['job_seconds']} s (its runtime); {wait}"
    return f"the job ran at most {summary['job_seconds']} s (created_at to the read that saw it end); {wait}"


def print_summary(airflow: LocalAirflow, run_id: str, run: dict[str, Any]) -> bool:
    """Print what happened; return whether the run succeeded."""
    summary = airflow.xcom(DAG_ID, run_id, "summarize")
    if run.get("state") != "success" or not isinstance(summary, dict):
        say(f"the DAG run ended {run.get('state')}")
        for ti in airflow.task_instances(DAG_ID, run_id):
            detail(f"task {ti['task_id']}: {ti.get('state')}")
            if ti.get("state") == "failed":
                with_log = airflow.task_log(DAG_ID, run_id, ti["task_id"]).splitlines()[-15:]
                for line in with_log:
                    detail(f"  | {line[:200]}")
        return False
    say("the DAG run succeeded")
    detail(f"job id:        {summary['job_id']}")
    detail(f"final status:  {summary['status']} ({durations(summary)})")
    detail("node stats:")
    for node in summary["node_stats"]:
        detail(
            f"  {node['node_name']:<12} {node['node_type']}/{node['node_subtype']}: "
            f"{node['success']} succeeded, {node['failure']} failed"
        )
    failed = summary["failed_files"]
    detail(f"failed documents ({len(failed)}):" if failed else "failed documents: none")
    for item in failed:
        detail(f"  {item['document']}: {item['error']}")
    paths = [str(p) for p in summary.get("output_paths") or []]
    detail(f"output files ({len(paths)}) in {output_folder(paths)}/:")
    for path in paths:
        detail(f"  {path.rsplit('/', 1)[-1]}")
    triggers = airflow.trigger_log_files(DAG_ID, run_id, RUN_TASK)
    if triggers:
        detail(f"the wait ran in the triggerer; its log: {relative(triggers[0])}")
    return True


def output_folder(paths: list[str]) -> str:
    """Name the folder of the outputs: a local directory (relative to here), or a bucket's prefix."""
    if not paths:
        return "(none)"
    if "://" in paths[0]:
        return paths[0].rsplit("/", 1)[0]
    return relative(Path(paths[0]).parent)


@contextlib.contextmanager
def demo_storage(
    distributed: bool, local_output: Path
) -> Iterator[tuple[S3Server | None, dict[str, str], dict[str, str]]]:
    """
    Yield where the run reads and writes: on the distributed shape, a bucket of an S3 server started
    here (the sample documents put into it), with the connection's environment and the run's conf;
    locally, the example's own folder and ``local_output``.
    """
    if not distributed:
        yield None, {}, {"output_dir": str(local_output)}
        return
    say("starting an S3-compatible server (moto) for the documents and the outputs")
    with running_s3_server() as s3:
        documents = sorted((REPO_ROOT / "example_dags" / "sample_docs").iterdir())
        s3.put_tree(DEMO_BUCKET, {f"sample_docs/{doc.name}": doc.read_bytes() for doc in documents})
        bucket = f"s3://{DEMO_S3_CONN}@{DEMO_BUCKET}"
        detail(f"S3 on {s3.endpoint}: {len(documents)} documents in s3://{DEMO_BUCKET}/sample_docs/")
        yield (
            s3,
            s3.connection_env(DEMO_S3_CONN),
            {
                "input_dir": f"{bucket}/sample_docs/",
                "output_dir": f"{bucket}/output",
            },
        )


def print_bucket(s3: S3Server) -> None:
    """List what the bucket holds under output/ (the store's own listing, not the task's word)."""
    keys = s3.keys(DEMO_BUCKET, "output/")
    say(f"the bucket holds {len(keys)} output object(s) under s3://{DEMO_BUCKET}/output/")
    for key, size in sorted(keys.items()):
        detail(f"  {key} ({size} bytes)")


def keep_running(airflow: LocalAirflow) -> None:
    say(f"Airflow keeps running: open {airflow.base_url}/ in a browser")
    detail("login: none needed (simple auth manager, every visitor is an admin: a throwaway box)")
    detail(f"DAG:   {airflow.base_url}/dags/{DAG_ID}")
    detail(f"logs:  {relative(airflow.airflow_home)}/components/ and {relative(airflow.logs_dir)}/")
    detail("press Ctrl-C to stop Airflow and the emulator")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep Airflow running until Ctrl-C")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="PostgreSQL, CeleryExecutor with Redis, a Celery worker and two triggerers (apt-get installs "
        "postgresql and redis-server when missing)",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the DAG run")
    parser.add_argument(
        "--dialect",
        choices=("spec", "platform"),
        default="spec",
        help="how the emulator answers: the spec's examples or the live service (default %(default)s)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # stop cleanly when killed, too

    started = time.monotonic()
    output_dir = DEMO_DIR / "output"
    ok = False
    try:
        with (
            demo_storage(args.distributed, output_dir) as (s3, storage_env, conf),
            local_stack(
                REPO_ROOT / "example_dags",
                emulator_options={
                    "token": secrets.token_urlsafe(16),
                    "api_key": secrets.token_urlsafe(16),
                    "dialect": args.dialect,
                    **({"processing_delay": DISTRIBUTED_PROCESSING_DELAY} if args.distributed else {}),
                },
                env={**EMULATOR_VARIABLES, **storage_env},
                home=DEMO_DIR / ("airflow-distributed" if args.distributed else "airflow"),
                db_template=DEMO_DIR / "cache" / f"airflow-{version('apache-airflow')}.db",
                progress=say,
                start_timeout=300 if args.distributed else 180,
                stop_timeout=30,
                distributed=args.distributed,
            ) as (airflow, emulator),
        ):
            say(f"waiting for the dag-processor to parse {DAG_ID}")
            airflow.wait_for_dag(DAG_ID)
            run_id = f"demo__{time.strftime('%Y%m%dT%H%M%S')}"
            airflow.trigger_dag(DAG_ID, run_id, conf=conf)
            say(f"triggered DAG run {run_id}")
            watcher = JobWatcher(airflow, emulator, run_id)
            try:
                run = airflow.wait_for_run(DAG_ID, run_id, timeout=args.timeout, on_poll=watcher)
            finally:
                watcher.close()
            ok = print_summary(airflow, run_id, run)
            print_placement(airflow, run_id, watcher.triggerers)
            if s3 is not None:
                print_bucket(s3)
            if args.keep:
                keep_running(airflow)
    except KeyboardInterrupt:
        say("interrupted: everything started was stopped")
        return 130
    except (LocalAirflowError, RuntimeError) as exc:
        say(f"the demo failed: {exc}")
        detail(f"component logs: {relative(DEMO_DIR / 'airflow' / 'components')}/")
        return 1
    finally:
        say(f"total wall time {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
