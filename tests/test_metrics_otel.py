"""
The provider's metrics through Airflow's OpenTelemetry path, received on loopback (issue #37): a DAG run
(a deferrable run refused once with 429, one of its two files failing; its trigger inline under
``dag.test()``) in a process of its own with ``[metrics] otel_on``, its metrics exported by the
OTLP/HTTP exporter Airflow builds to this test's receiver (tests/metric_receivers.py), which decodes
them with ``opentelemetry-proto``. Airflow's own dependencies bring both, on every minor.

Airflow builds its metrics logger once per process, from its configuration: the run gets the settings
through its environment, in the two ways a deployment gives them, each proving one way out:

* Airflow's ``[metrics]`` options, with an export interval longer than the run: only the flush at the
  process's exit can send the metrics (Airflow's ``atexit`` hook, from 3.1: a ``force_flush`` of its
  meter provider, which it builds with ``shutdown_on_exit=False``). A worker's task process relies on it.
* The OpenTelemetry SDK's own variables (Airflow reads them from 3.2; before, its options), with a
  short interval: the run's process waits, before it ends, until the receiver has its metrics: the
  periodic export of a living process, which a triggerer relies on.

The tests wait for the metrics themselves, not for a time.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import run_pytest
from metric_receivers import OtlpReceiver, ReceivedMetric

from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_2_PLUS, AIRFLOW_V_3_3_PLUS

CONN = "workflowsvc_default"
WORKFLOW = "otel-metrics"
OURS = "airflow.workflowsvc."
LAST_OF_THE_RUN = f"{OURS}job.completed_with_failed_files"
"""Counted when the run's wait has ended: an export holding it holds the whole run's (cumulative)."""
TIMER_KIND = "exponential_histogram" if AIRFLOW_V_3_3_PLUS else "gauge"
"""How a timer arrives: Airflow 3.3 records it in a histogram (exponential buckets), before as a gauge."""

NO_PERIODIC_EXPORT_MS = 3_600_000
"""An export interval no run of this test reaches: only the exit flush sends."""
PERIODIC_EXPORT_MS = 500


RUN_TEST = textwrap.dedent(
    f"""
    import json
    import os
    from datetime import datetime
    from pathlib import Path

    import httpx
    from airflow.sdk import DAG

    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
    from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator


    def test_a_deferrable_run(workflowsvc_connection, workflowsvc_emulator, workflowsvc_run_dag):
        Path("report.txt").write_text("One report.")
        Path("broken-scan.txt").write_text("Unreadable.")
        workflowsvc_emulator.fail_files("*broken-scan*")
        workflowsvc_emulator.fail_requests("POST", "/workflows/*/run", status=429, times=1)
        with DAG("otel_metrics", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
            workflow = CreateWorkflowOperator(task_id="workflow", name="{WORKFLOW}", workflow_type="basic")
            RunWorkflowOperator(
                task_id="run",
                workflow_id=workflow.output,
                files=[str(Path("report.txt").resolve()), str(Path("broken-scan.txt").resolve())],
                fail_on_failed_files=False,
                deferrable=True,
            )
        result = workflowsvc_run_dag(dag)
        assert result.state == "success", str(result.errors)[-2000:]
        ran = {{"jobs": [job.id for job in workflowsvc_emulator.jobs()]}}
        ran["files"] = workflowsvc_emulator.received_files()
        Path("ran.json").write_text(json.dumps(ran))
    """
)
WAIT_WHILE_ALIVE = textwrap.indent(
    textwrap.dedent(
        f"""
        # the process ends only once the receiver has the run's metrics: the periodic export sent them
        wait = {{"name": "{LAST_OF_THE_RUN}"}}
        received = httpx.get(os.environ["OTLP_WAIT_URL"], params=wait, timeout=300)
        assert received.status_code == 200, received
        """
    ),
    "    ",
)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver()
    yield otlp
    otlp.close()


@pytest.mark.airflow_min("3.1", reason="Airflow 3.0 sends nothing at a process's exit (no flush)")
def test_the_exit_flush_sends_a_runs_metrics(receiver: OtlpReceiver, tmp_path: Path) -> None:
    env = receiver.airflow_options(interval_ms=NO_PERIODIC_EXPORT_MS)
    run = run_in_a_process(tmp_path, RUN_TEST, env)
    assert_the_runs_metrics(receiver, run, "the exit flush")


def test_the_periodic_export_sends_a_runs_metrics_while_its_process_lives(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    # the OpenTelemetry SDK's variables where Airflow reads them (3.2+, its [metrics] options deprecated)
    configure = receiver.otel_environment if AIRFLOW_V_3_2_PLUS else receiver.airflow_options
    env = {**configure(interval_ms=PERIODIC_EXPORT_MS), "OTLP_WAIT_URL": receiver.wait_url}
    run = run_in_a_process(tmp_path, RUN_TEST + WAIT_WHILE_ALIVE, env)
    assert_the_runs_metrics(receiver, run, "the periodic export")


def run_in_a_process(folder: Path, test_file: str, env: dict[str, str]) -> dict[str, list[str]]:
    """Run the child's test with ``env``; return its job ids and the file names the service received."""
    (folder / "test_run.py").write_text(test_file)
    ran = run_pytest(sys.executable, folder, "test_run.py", env_extra=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    run: dict[str, list[str]] = json.loads((folder / "ran.json").read_text())
    assert len(run["jobs"]) == 1, run
    assert len(run["files"]) == 2, run
    return run


def assert_the_runs_metrics(receiver: OtlpReceiver, run: dict[str, list[str]], sent_by: str) -> None:
    # requests by status class, tagged with the endpoint and the connection (counters: cumulative sums)
    answered = receiver.series(f"{OURS}request.2xx", conn_id=CONN)
    assert {m.kind for m in answered} == {"sum"}
    assert {"create_workflow", "run_workflow", "get_job_details"} <= {m.tags["operation"] for m in answered}
    run_call = {"operation": "run_workflow", "conn_id": CONN}
    assert total(receiver.series(f"{OURS}request.4xx", **run_call)) == 1
    assert total(receiver.series(f"{OURS}request.throttled", **run_call)) == 1
    assert total(receiver.series(f"{OURS}request.retried", reason="429", **run_call)) == 1
    # the run's outcome and its failed document, tagged with the workflow
    of_workflow = {"workflow": WORKFLOW, "conn_id": CONN}
    assert total(receiver.series(LAST_OF_THE_RUN, **of_workflow)) == 1
    assert total(receiver.series(f"{OURS}job.failed_documents", **of_workflow)) == 1
    # the timers, in milliseconds: the Retry-After pause (1 s), the wait, the job's run time
    one = 1 if AIRFLOW_V_3_3_PLUS else None  # a histogram's count; a gauge has none
    pause = receiver.series(f"{OURS}request.retry_after", **run_call)
    assert [(m.kind, m.value, m.count) for m in pause] == [(TIMER_KIND, 1000.0, one)], pause
    for timer in ("job.wait_time", "job.run_time"):
        timed = receiver.series(f"{OURS}{timer}", **of_workflow)
        assert [(m.kind, m.count) for m in timed] == [(TIMER_KIND, one)], timed
        assert timed[0].value > 0, timed

    ours = [m for m in receiver.received if m.name.startswith(OURS)]
    # each process's own series: its resource names the service and this instance of it
    assert all({"service.name", "service.instance.id"} <= dict(m.sender).keys() for m in ours), ours
    assert not receiver.refused
    assert not [m for m in ours if leaks(m, run["jobs"] + run["files"])], ours
    print(f"[otel] {sent_by}: {receiver.exports} exports, {len(ours)} points of ours; each series' last:")
    for metric in sorted({(m.name, tuple(m.tags.items()), m.sender): m for m in ours}.values(), key=str):
        print(f"[otel]   {metric.name} {metric.tags} {metric.kind} {metric.value:g} (count {metric.count})")


def total(series: list[ReceivedMetric]) -> float:
    """A counter's total: the sum of its series' cumulative counts."""
    return sum(m.value for m in series)


def leaks(metric: ReceivedMetric, private: list[str]) -> bool:
    """Whether a job id or a file name shows in the metric's tags (names or values)."""
    return any(secret in text for secret in private for text in (*metric.tags, *metric.tags.values()))
