"""
Receivers of Airflow's metrics on loopback, for the tests: StatsD (a UDP socket) and OpenTelemetry (an
OTLP/HTTP endpoint, its protobuf decoded with ``opentelemetry-proto``). Each records every metric that
arrives and wakes the tests waiting for one: a test waits for the metric itself, never for a time.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

RECEIVE_TIMEOUT = 120.0
"""Stops a wait for a metric that never comes (what the test waited for before has sent it)."""

Found = TypeVar("Found")


@dataclass(frozen=True)
class ReceivedMetric:
    """
    One metric as received: its full name, its kind as the protocol says it (StatsD's type, ``c`` or
    ``ms``; OTLP's data field, ``sum``, ``gauge``, ``histogram`` or ``exponential_histogram``), its tags
    (OTLP: the data point's attributes), its value (a histogram's: the sum of what it holds) and, for a
    histogram, how many values it holds.
    """

    name: str
    kind: str
    tags: dict[str, str]
    value: float
    count: int | None = None
    source: str = field(default="", compare=False)
    """The StatsD line, as sent."""
    sender: tuple[tuple[str, str], ...] = ()
    """OTLP: the sending resource's attributes and the point's start time (nanoseconds): a cumulative
    series (one process's) is the points of one name, tags and sender."""


class MetricArrivals:
    """The metrics received so far, in order of arrival; each arrival wakes the waits."""

    def __init__(self) -> None:
        self.received: list[ReceivedMetric] = []
        self._arrived = threading.Condition()

    def record(self, metrics: Iterable[ReceivedMetric]) -> None:
        with self._arrived:
            self.received.extend(metrics)
            self._arrived.notify_all()

    def wait_until(self, find: Callable[[list[ReceivedMetric]], Found], what: str) -> Found:
        """What ``find`` finds in the metrics received, once it finds something (the timeout stops a hang)."""
        with self._arrived:
            found = self._arrived.wait_for(lambda: find(self.received), RECEIVE_TIMEOUT)
            if not found:
                names = sorted({metric.name for metric in self.received})
                raise AssertionError(f"no {what} among the metrics received: {names}")
            return found

    def wait_for(self, name: str, *, at_least: int = 1, **tags: str) -> list[ReceivedMetric]:
        """The metrics named ``name`` whose tags include ``tags``, once ``at_least`` of them have arrived."""

        def matching(received: list[ReceivedMetric]) -> list[ReceivedMetric]:
            found = [m for m in received if m.name == name and tags.items() <= m.tags.items()]
            return found if len(found) >= at_least else []

        return self.wait_until(matching, f"{at_least} x {name} {tags}")


class StatsdReceiver(MetricArrivals):
    """A StatsD server on loopback (UDP), reading the InfluxDB line form: ``name,tag=v:1|c``."""

    def __init__(self) -> None:
        super().__init__()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        threading.Thread(target=self._receive, name="statsd-receiver", daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def lines(self) -> list[str]:
        """Every line received, as sent."""
        return [metric.source for metric in self.received]

    def wait_for_lines(self, count: int) -> list[str]:
        """Every line received, once at least ``count`` have arrived."""
        self.wait_until(lambda received: len(received) >= count, f"{count} lines")
        return self.lines

    def env(self) -> dict[str, str]:
        """Airflow's ``[metrics]`` sending to this receiver, tags included (InfluxDB line form)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        }

    def _receive(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:  # closed
                return
            self.record(map(parse_statsd, data.decode(errors="replace").splitlines()))

    def close(self) -> None:
        self.sock.close()


def parse_statsd(line: str) -> ReceivedMetric:
    """``name,tag=value,...:value|type`` (a value that is no number reads as NaN)."""
    head, _, rest = line.partition(":")
    name, *pairs = head.split(",")
    value, _, kind = rest.partition("|")
    tags = dict(pair.partition("=")[::2] for pair in pairs)
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    return ReceivedMetric(name, kind, tags, number, source=line)


class OtlpReceiver(MetricArrivals):
    """
    An OpenTelemetry collector's OTLP/HTTP metrics endpoint on loopback: ``POST /v1/metrics`` with an
    ``ExportMetricsServiceRequest`` (protobuf, gzip or not), each data point recorded. A body it cannot
    read is answered 400 and kept in :attr:`refused`. ``GET /received?name=...`` answers once a metric
    of that name has arrived (504 if none comes): for a sender that must see its metrics go out.
    """

    PATH = "/v1/metrics"
    WAIT_PATH = "/received"

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []
        self.exports = 0
        """The export requests taken."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _otlp_handler(self))
        threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return self._url(self.PATH)

    @property
    def wait_url(self) -> str:
        return self._url(self.WAIT_PATH)

    def _url(self, path: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def airflow_options(self, interval_ms: int = 1000) -> dict[str, str]:
        """Airflow's ``[metrics]`` options exporting to this receiver (deprecated from 3.2, still read)."""
        host, port = self.server.server_address[:2]
        return {
            **_otel_on(),
            "AIRFLOW__METRICS__OTEL_HOST": str(host),
            "AIRFLOW__METRICS__OTEL_PORT": str(port),
            "AIRFLOW__METRICS__OTEL_SSL_ACTIVE": "False",
            "AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS": str(interval_ms),
        }

    def otel_environment(self, interval_ms: int = 1000) -> dict[str, str]:
        """The OpenTelemetry SDK's own variables exporting to this receiver (Airflow 3.2+ reads them)."""
        return {
            **_otel_on(),
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
            "OTEL_METRIC_EXPORT_INTERVAL": str(interval_ms),
        }

    def take(self, path: str, encoding: str | None, body: bytes) -> int:
        """Record what one POST carried; return the HTTP status to answer."""
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        if path != self.PATH:
            self.refused.append(f"POST {path}")
            return 404
        request = ExportMetricsServiceRequest()
        try:
            request.ParseFromString(gzip.decompress(body) if encoding == "gzip" else body)
        except (DecodeError, OSError) as exc:
            self.refused.append(f"POST {path}: {exc!r}")
            return 400
        with self._arrived:
            self.exports += 1
        self.record(otlp_points(request))
        return 200

    def series(self, name: str, **tags: str) -> list[ReceivedMetric]:
        """
        The latest point of each series named ``name`` whose tags include ``tags`` (once one has
        arrived). A series is one process's: every export repeats its cumulative count, its histogram,
        its gauge's last value; processes tell theirs apart by the resource's ``service.instance.id``.
        """
        latest = {(tuple(sorted(m.tags.items())), m.sender): m for m in self.wait_for(name, **tags)}
        return list(latest.values())

    def answer_wait(self, target: str) -> int:
        """The HTTP status of a ``GET /received?name=...``: 200 once that metric has arrived."""
        url = urlsplit(target)
        names = parse_qs(url.query).get("name", [])
        if url.path != self.WAIT_PATH or len(names) != 1:
            return 404
        try:
            self.wait_for(names[0])
        except AssertionError:
            return 504
        return 200

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _otel_on() -> dict[str, str]:
    # StatsD, when on, wins over OpenTelemetry in Airflow's choice of its metrics logger
    return {"AIRFLOW__METRICS__OTEL_ON": "True", "AIRFLOW__METRICS__STATSD_ON": "False"}


def _otlp_handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = receiver.take(self.path, self.headers.get("Content-Encoding"), body)
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")  # an empty ExportMetricsServiceResponse: all taken
            self.end_headers()

        def do_GET(self) -> None:
            self.send_response(receiver.answer_wait(self.path))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def otlp_points(request: Any) -> list[ReceivedMetric]:
    """Every data point of an ``ExportMetricsServiceRequest``."""
    return [
        _point(metric.name, kind, point, _attributes(resource_metrics.resource.attributes))
        for resource_metrics in request.resource_metrics
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        if (kind := metric.WhichOneof("data"))
        for point in getattr(metric, kind).data_points
    ]


def _point(name: str, kind: str, point: Any, resource: dict[str, str]) -> ReceivedMetric:
    tags = _attributes(point.attributes)
    sender = (*sorted(resource.items()), ("start_time_unix_nano", str(point.start_time_unix_nano)))
    if kind in ("histogram", "exponential_histogram"):
        return ReceivedMetric(name, kind, tags, float(point.sum), int(point.count), sender=sender)
    number = point.WhichOneof("value")  # a sum's or a gauge's: as_int or as_double
    value = float(getattr(point, number)) if number else 0.0
    return ReceivedMetric(name, kind, tags, value, sender=sender)


def _attributes(attributes: Any) -> dict[str, str]:
    return {attribute.key: _any_value(attribute.value) for attribute in attributes}


def _any_value(value: Any) -> str:
    kind = value.WhichOneof("value")
    return str(getattr(value, kind)) if kind else ""
