"""
The provider's metrics through Airflow's OpenTelemetry path, received on loopback: a DAG run (a
deferrable run, its trigger inline) in a process of its own with ``[metrics] otel_on``, its metrics
exported by the OTLP/HTTP exporter Airflow builds, to a receiver in this test that decodes them with
``opentelemetry-proto`` (Airflow's own dependencies bring both).

Airflow initializes its metrics once per process, from its configuration, when a component starts (the
task runner of a worker, the triggerer; under ``dag.test()`` the Task SDK's serializer): the run gets the
setting through its environment. The process's exit flushes what it recorded (the OpenTelemetry SDK's
shutdown); the test waits for the metrics to arrive, not for a time.
"""

from __future__ import annotations

import gzip
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import run_pytest

pytestmark = pytest.mark.airflow_min("3.2", reason="the Task SDK's metrics (airflow.sdk.observability)")

RECEIVE_TIMEOUT = 120.0
"""Stops a wait for metrics that never come (the child process has exited when the test waits)."""

JOB_ID_ATTRIBUTES = ("job_id", "file", "filename")


class OtlpReceiver:
    """An OTLP/HTTP metrics endpoint on loopback: every data point received, as (name, attributes, value)."""

    def __init__(self) -> None:
        self.points: list[tuple[str, dict[str, str], float]] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True).start()

    def env(self) -> dict[str, str]:
        """Airflow's ``[metrics]`` exporting to this receiver over OTLP/HTTP."""
        return {
            "AIRFLOW__METRICS__OTEL_ON": "True",
            "AIRFLOW__METRICS__OTEL_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__OTEL_PORT": str(self.server.server_address[1]),
            "AIRFLOW__METRICS__OTEL_SSL_ACTIVE": "False",
            "AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS": "1000",
        }

    def take(self, path: str, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        if path != "/v1/metrics":
            return
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        points = [
            (metric.name, _attributes(point), _value(point))
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in _data_points(metric)
        ]
        with self._arrived:
            self.points.extend(points)
            self._arrived.notify_all()

    def wait_for(self, name: str) -> list[tuple[str, dict[str, str], float]]:
        """The points named ``name``, once one has arrived (each arrival wakes the wait)."""
        with self._arrived:
            found = self._arrived.wait_for(lambda: [p for p in self.points if p[0] == name], RECEIVE_TIMEOUT)
            assert found, f"no {name} among {sorted({p[0] for p in self.points})}"
            return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _data_points(metric: Any) -> list[Any]:
    kind = metric.WhichOneof("data")
    return list(getattr(metric, kind).data_points) if kind else []


def _attributes(point: Any) -> dict[str, str]:
    return {a.key: a.value.string_value for a in point.attributes}


def _value(point: Any) -> float:
    if "value" in point.DESCRIPTOR.oneofs_by_name:  # a counter's or a gauge's number
        kind = point.WhichOneof("value")
        return float(getattr(point, kind)) if kind else 0.0
    return float(point.sum)  # a histogram (a timer): the sum of what it recorded


RUN_TEST = textwrap.dedent(
    """
    from datetime import datetime

    from airflow.sdk import DAG

    from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator
    from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator


    def test_a_deferrable_run(workflowsvc_connection, workflowsvc_run_dag, tmp_path):
        (tmp_path / "report.txt").write_text("One report.")
        with DAG("otel_metrics", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
            workflow = CreateWorkflowOperator(task_id="workflow", name="otel-metrics", workflow_type="basic")
            RunWorkflowOperator(
                task_id="run",
                workflow_id=workflow.output,
                files=str(tmp_path / "report.txt"),
                deferrable=True,
            )
        result = workflowsvc_run_dag(dag)
        assert result.state == "success", str(result.errors)[-2000:]
    """
)


@pytest.fixture
def receiver() -> Any:
    otlp = OtlpReceiver()
    yield otlp
    otlp.close()


def test_a_runs_metrics_reach_an_otlp_receiver(receiver: OtlpReceiver, tmp_path: Path) -> None:
    (tmp_path / "test_run.py").write_text(RUN_TEST)
    ran = run_pytest(sys.executable, tmp_path, "test_run.py", env_extra=receiver.env())
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]

    requests = receiver.wait_for("airflow.workflowsvc.request.2xx")
    operations = {attributes["operation"] for _, attributes, _ in requests}
    assert {"create_workflow", "run_workflow", "get_job_details"} <= operations, operations
    assert {attributes["conn_id"] for _, attributes, _ in requests} == {"workflowsvc_default"}
    completed = receiver.wait_for("airflow.workflowsvc.job.completed")  # each export repeats the sum
    assert {(attributes["workflow"], value) for _, attributes, value in completed} == {("otel-metrics", 1)}
    assert receiver.wait_for("airflow.workflowsvc.job.wait_time")  # a timer: an OpenTelemetry histogram
    ours = [p for p in receiver.points if p[0].startswith("airflow.workflowsvc.")]
    assert not [p for p in ours if set(p[1]) & set(JOB_ID_ATTRIBUTES)], ours
    received = sorted({(name, tuple(sorted(tags.items())), value) for name, tags, value in ours})
    print(f"[otel] {len(ours)} points of ours: {received}")
