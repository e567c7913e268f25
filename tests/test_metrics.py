"""The provider's metrics: the registry against the docs, what each place reports, and Airflow's own path.

* The docs' table (docs/provider/metrics.rst) lists exactly the registry's metrics, with their kind
  and tags; every registry metric is emitted by some report, and the reports emit nothing else.
* What the transport, the waits, the run evidence, the pool, the connection re-read and the shared
  poll report, each where it happens (a stand-in for Airflow's ``Stats`` keeps it).
* Through Airflow's own StatsD logger to a UDP socket of the test: names under Airflow's prefix, tags
  (InfluxDB style), and ``[metrics] metrics_block_list`` / ``metrics_allow_list`` applied by Airflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from helpers import MOCK_BASE_URL, MetricsRecorder
from metric_receivers import StatsdReceiver

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceConnectionError,
    WorkflowServiceRateLimitError,
)
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.wait.outcome import FailedDocument, JobOutcome

DOCS = Path(__file__).resolve().parents[1] / "docs" / "provider" / "metrics.rst"
JOB = "job-metrics-1"
CONN = "workflowsvc_metrics"


# --------------------------------------------------------------------------------------------------
# The registry, the docs and the reports


def docs_table() -> list[tuple[str, str, str]]:
    """``(name, kind, tags)`` of each row of the docs' metrics table (a list-table of 4 columns)."""
    text = DOCS.read_text()
    lines = text[text.index(".. list-table:: Every metric") :].splitlines()[1:]
    rows: list[list[str]] = []
    for line in lines:
        if line.startswith("   * - "):
            rows.append([line[len("   * - ") :]])
        elif line.startswith("     - "):
            rows[-1].append(line[len("     - ") :])
        elif rows and line.strip() and not line.startswith("       "):
            break  # past the table
    return [(row[0].strip("`"), row[1], row[2]) for row in rows[1:]]  # the header row first


def test_the_docs_table_lists_exactly_the_metrics_the_provider_emits() -> None:
    documented = docs_table()
    registry = [(m.name, m.kind, ", ".join(f"``{t}``" for t in m.tags) or "none") for m in metrics.METRICS]
    assert documented == registry


def test_every_metric_has_the_one_prefix_and_a_name_every_backend_takes() -> None:
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"workflowsvc\.[a-z_]+\.[a-z0-9_]+", name) for name in names), names
    assert all(
        tag in ("operation", "conn_id", "workflow", "reason", "if_running", "dag_id", "task_id")
        for m in metrics.METRICS
        for tag in m.tags
    )


def outcome(status: str, failed: int = 0, **fields: Any) -> JobOutcome:
    documents = [FailedDocument(document=f"f{i}.txt", error="bad") for i in range(failed)]
    values: dict[str, Any] = {"status": status, "job_id": JOB, "failed_files": documents, "elapsed": 2.5}
    return JobOutcome(**{**values, **fields})


def test_the_reports_emit_every_registered_metric_and_nothing_else(recorded_metrics: MetricsRecorder) -> None:
    for status in (200, 302, 404, 429, 503):
        metrics.answered("get_job", CONN, status)
    metrics.no_answer("get_job", CONN)
    metrics.retrying(
        "get_job", CONN, WorkflowServiceRateLimitError(429, "GET", "/jobs/j", "", retry_after=1.0), 1.0
    )
    metrics.run_adopted("wf", CONN)
    metrics.run_failed_closed(None, CONN)
    metrics.found_running("wf", CONN, "wait")
    for ended in (outcome("success"), outcome("success", 2), outcome("failed"), outcome("stopped")):
        metrics.job_ended(ended, CONN, "wf")
    metrics.job_ended(outcome("timeout", job_seconds=3.0), CONN, "wf")
    metrics.job_ended(outcome("error"), CONN, metrics.ON_DEMAND)
    metrics.shared_listing("wf", CONN)
    metrics.shared_listing("wf", CONN, failed=True)
    metrics.shared_poll_served("wf", CONN)
    metrics.lane_retired()
    metrics.read_moved_to_overflow(True)
    metrics.read_moved_to_overflow(False)
    metrics.connection_reread(CONN)
    metrics.connection_reread(CONN, failed=True)
    metrics.watcher_listing(None, CONN)
    metrics.watcher_listing("wf", CONN, failed=True)
    metrics.watcher_event("wf", CONN, lag=4.0)

    assert recorded_metrics.names() == {m.name for m in metrics.METRICS}
    for name, _, tags in recorded_metrics.sent:
        (metric,) = [m for m in metrics.METRICS if m.name == name]
        assert tuple(tags) == metric.tags  # exactly its declared tags, every time


def test_each_wait_outcome_has_its_counter_and_the_job_its_times(recorded_metrics: MetricsRecorder) -> None:
    metrics.job_ended(outcome("success", 3, job_seconds=40.0), CONN, "nightly")
    metrics.job_ended(outcome("timeout"), CONN, "nightly")

    assert recorded_metrics.total("job.completed_with_failed_files", workflow="nightly") == 1
    assert recorded_metrics.total("job.completed") == 0  # with failed files: its own counter
    assert recorded_metrics.total("job.failed_documents", conn_id=CONN) == 3
    assert recorded_metrics.total("job.timed_out") == 1
    assert [v for _, v, _ in recorded_metrics.named("job.wait_time")] == [2.5, 2.5]
    assert [v for _, v, _ in recorded_metrics.named("job.run_time")] == [40.0]  # the timeout's job: unknown


def test_the_workflow_tag_is_the_records_name_else_its_id_else_what_the_task_knows() -> None:
    assert metrics.workflow_of(outcome("success", workflow_name="Nightly docs", workflow_id="w-1")) == (
        "Nightly docs"
    )
    assert metrics.workflow_of(outcome("success", workflow_id="w-1"), "given") == "w-1"
    assert metrics.workflow_of(outcome("timeout"), "given") == "given"


def test_tag_values_are_cut_to_the_characters_every_backend_takes(recorded_metrics: MetricsRecorder) -> None:
    metrics.run_adopted("Nightly docs, prod=1 (eu)|x:y", "conn")
    metrics.run_adopted(None, "")
    (_, _, tags), (_, _, empty) = recorded_metrics.named("run.adopted")
    no_task = {"dag_id": "none", "task_id": "none"}  # no task runs in this process
    assert tags == {"workflow": "Nightly_docs__prod_1__eu__x_y", "conn_id": "conn", **no_task}
    assert empty == {"workflow": metrics.ON_DEMAND, "conn_id": "none", **no_task}


@contextlib.contextmanager
def running_task(dag_id: str, task_id: str) -> Iterator[None]:
    """As Airflow's task runner sets the context of the task it runs (what ``get_current_context`` reads)."""
    from types import SimpleNamespace

    from airflow.sdk.execution_time.context import set_current_context

    with set_current_context({"ti": SimpleNamespace(dag_id=dag_id, task_id=task_id)}):  # type: ignore[typeddict-item]
        yield


@contextlib.contextmanager
def legacy_names(on: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Airflow's ``[metrics] legacy_names_on`` (read once per process: read again here)."""
    monkeypatch.setenv("AIRFLOW__METRICS__LEGACY_NAMES_ON", str(on))
    metrics._legacy_names.cache_clear()
    try:
        yield
    finally:
        metrics._legacy_names.cache_clear()


PER_TASK = [m for m in metrics.METRICS if m.per_task]


def test_what_a_task_did_carries_its_dag_and_task_as_airflows_task_metrics_do(
    recorded_metrics: MetricsRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ti.finish`` style: tags for a tagging backend, and the name ``<metric>.<dag_id>.<task_id>``."""
    assert {m.name.split(".")[1] for m in PER_TASK} == {"run", "job"}
    with legacy_names(True, monkeypatch), running_task("team_a.docs", "group.parse"):
        metrics.job_ended(outcome("success", 2, job_seconds=9.0), CONN, metrics.ON_DEMAND)
        metrics.run_adopted(None, CONN)
    task = {"dag_id": "team_a.docs", "task_id": "group.parse"}
    assert recorded_metrics.named("job.completed_with_failed_files") == [
        ("workflowsvc.job.completed_with_failed_files", 1, {"workflow": "on-demand", "conn_id": CONN, **task})
    ]
    under_its_name = (
        "job.completed_with_failed_files.team_a__docs.group__parse"  # a dot is "__", as Airflow's
    )
    assert recorded_metrics.named(under_its_name) == [
        (f"workflowsvc.{under_its_name}", 1, {"workflow": "on-demand", "conn_id": CONN})
    ]
    assert recorded_metrics.total("job.failed_documents.team_a__docs.group__parse") == 2
    assert recorded_metrics.total("run.adopted.team_a__docs.group__parse") == 1
    sent = {name for name, _, _ in recorded_metrics.sent}
    assert len(sent) == 2 * len(sent - {n for n in sent if n.endswith(".team_a__docs.group__parse")})


def test_a_trigger_names_its_own_task_and_legacy_names_off_sends_only_the_tagged_name(
    recorded_metrics: MetricsRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    ti = SimpleNamespace(dag_id="nightly", task_id="wait")
    with legacy_names(False, monkeypatch):
        metrics.job_ended(outcome("failed"), CONN, "wf", ti)
    assert recorded_metrics.sent == [
        (
            "workflowsvc.job.failed",
            1,
            {"workflow": "wf", "conn_id": CONN, "dag_id": "nightly", "task_id": "wait"},
        ),
        (
            "workflowsvc.job.wait_time",
            2.5,
            {"workflow": "wf", "conn_id": CONN, "dag_id": "nightly", "task_id": "wait"},
        ),
    ]


def test_a_backend_that_fails_never_fails_the_caller(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    class Broken:
        def incr(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("statsd host unreachable")

    monkeypatch.setattr(metrics, "_stats", Broken)
    monkeypatch.setattr(metrics, "_FAILED", [])
    metrics.lane_retired()
    metrics.lane_retired()
    said = [r.getMessage() for r in caplog.records if "Sending a metric failed" in r.getMessage()]
    assert said == [
        "Sending a metric failed (OSError: statsd host unreachable); the metrics of this process may be "
        "missing"
    ]


# --------------------------------------------------------------------------------------------------
# Where it happens: the transport's send loop


def _hook(**extra: Any) -> WorkflowServiceHook:
    settings = ConnectionSettings(base_url=MOCK_BASE_URL, token="tok-metrics-5e1a", retry_wait=0, **extra)
    hook = WorkflowServiceHook(settings=settings)
    hook._sleep = lambda seconds: None  # type: ignore[method-assign]
    return hook


def job_json(status: str = "COMPLETED") -> dict[str, Any]:
    return {"id": JOB, "workflow_id": "w-1", "status": status}


@respx.mock(base_url=MOCK_BASE_URL, assert_all_called=True)
def test_each_answer_is_counted_by_endpoint_and_status_class(
    respx_mock: respx.MockRouter, recorded_metrics: MetricsRecorder
) -> None:
    respx_mock.get(f"/jobs/{JOB}").mock(
        side_effect=[
            httpx.Response(429, headers={"retry-after": "3"}, json={"detail": "slow down"}),
            httpx.Response(503, json={"detail": "busy"}),
            httpx.Response(200, json=job_json()),
        ]
    )
    with _hook() as hook:
        hook.get_job(JOB)

    op = {"operation": "get_job", "conn_id": "none"}  # settings given directly: no connection id
    assert recorded_metrics.total("request.4xx", **op) == 1
    assert recorded_metrics.total("request.throttled", **op) == 1
    assert recorded_metrics.total("request.5xx", **op) == 1
    assert recorded_metrics.total("request.2xx", **op) == 1
    assert [tags["reason"] for _, _, tags in recorded_metrics.named("request.retried", **op)] == [
        "429",
        "503",
    ]
    assert [value for _, value, _ in recorded_metrics.named("request.retry_after", **op)] == [3.0]


@respx.mock(base_url=MOCK_BASE_URL, assert_all_called=True)
def test_a_request_without_an_answer_is_counted_as_such(
    respx_mock: respx.MockRouter, recorded_metrics: MetricsRecorder
) -> None:
    respx_mock.get(f"/jobs/{JOB}").mock(side_effect=httpx.ConnectError("Connection refused"))
    with _hook(max_retries=1) as hook, pytest.raises(WorkflowServiceConnectionError):
        hook.get_job(JOB)

    assert recorded_metrics.total("request.no_answer", operation="get_job") == 2
    assert [tags["reason"] for _, _, tags in recorded_metrics.named("request.retried")] == ["refused"]
    assert recorded_metrics.named("request.retry_after") == []  # no Retry-After: nothing asked for


@respx.mock(base_url=MOCK_BASE_URL, assert_all_called=True)
async def test_the_async_hook_counts_as_the_sync_one(
    respx_mock: respx.MockRouter, recorded_metrics: MetricsRecorder
) -> None:
    respx_mock.get(f"/jobs/{JOB}/details").mock(
        return_value=httpx.Response(200, json={"id": JOB, "processing_status": "IN_PROGRESS"})
    )
    settings = ConnectionSettings(base_url=MOCK_BASE_URL, token="tok-metrics-5e1a")
    async with WorkflowServiceAsyncHook(settings=settings) as hook:
        await asyncio.gather(*(hook.get_job_details(JOB) for _ in range(3)))
    assert recorded_metrics.total("request.2xx", operation="get_job_details") == 3


def test_a_connection_read_again_is_counted_with_its_failures(
    monkeypatch: pytest.MonkeyPatch, recorded_metrics: MetricsRecorder
) -> None:
    import json

    conn = {"conn_type": "workflowsvc", "host": MOCK_BASE_URL, "password": "tok-metrics-5e1a"}
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_METRICS", json.dumps(conn))
    hook = WorkflowServiceHook(CONN)
    assert hook._reread()  # the first read: not a re-read
    assert recorded_metrics.sent == []
    hook._reread()
    monkeypatch.delenv("AIRFLOW_CONN_WORKFLOWSVC_METRICS")
    assert not hook._reread()  # a failed re-read keeps the settings in use (#31), counted as failed
    assert hook.settings.base_url == MOCK_BASE_URL
    assert recorded_metrics.total("connection.reread", conn_id=CONN) == 1
    assert recorded_metrics.total("connection.reread_failed", conn_id=CONN) == 1


async def test_the_triggerers_settings_cache_counts_its_re_reads(
    monkeypatch: pytest.MonkeyPatch, recorded_metrics: MetricsRecorder
) -> None:
    from airflow_provider_workflowsvc.hooks._settings import SettingsCache

    settings = ConnectionSettings(base_url=MOCK_BASE_URL)
    answers: list[Any] = [settings, settings, RuntimeError("secrets backend down")]

    async def read() -> ConnectionSettings:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cache = SettingsCache(ttl=0.0)
    await cache.get(CONN, read)
    await cache.get(CONN, read)
    with pytest.raises(RuntimeError):
        await cache.get(CONN, read)
    with pytest.raises(RuntimeError):  # within its retry time the failed read is not repeated (#31)
        await cache.get(CONN, read)
    assert recorded_metrics.total("connection.reread", conn_id=CONN) == 1
    assert recorded_metrics.total("connection.reread_failed", conn_id=CONN) == 1


# --------------------------------------------------------------------------------------------------
# Through Airflow's own metrics, to a UDP socket


@contextlib.contextmanager
def statsd_receiver() -> Iterator[StatsdReceiver]:
    """A StatsD receiver on loopback (UDP) for the test's length."""
    receiver = StatsdReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


@contextlib.contextmanager
def airflow_statsd(monkeypatch: pytest.MonkeyPatch, port: int, **options: str) -> Iterator[None]:
    """Airflow's metrics set up as its task runner sets them up, from ``[metrics]`` (env), to ``port``."""
    from airflow_provider_workflowsvc._compat import AIRFLOW_V_3_3_PLUS

    env = {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(port), **options}
    for key, value in env.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{key.upper()}", value)
    from airflow.sdk.observability.metrics import stats_utils
    from airflow.sdk.observability.stats import Stats

    if AIRFLOW_V_3_3_PLUS:
        from airflow.sdk.observability import stats

        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    else:
        Stats.initialize(factory=stats_utils.get_stats_factory(Stats))
    try:
        yield
    finally:
        from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

        if AIRFLOW_V_3_3_PLUS:
            stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        else:
            Stats.initialize(factory=NoStatsLogger)


@pytest.mark.airflow_min("3.2", reason="Airflow's metrics are set up by the Task SDK from 3.2")
def test_the_metrics_go_out_through_airflows_statsd_with_its_prefix_and_tags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with (
        statsd_receiver() as statsd,
        airflow_statsd(monkeypatch, statsd.port, statsd_influxdb_enabled="True"),
    ):
        metrics.answered("get_job", "workflowsvc_default", 200)
        metrics.job_ended(outcome("success", 1, job_seconds=12.0), "workflowsvc_default", "Nightly docs")
        lines = statsd.wait_for_lines(5)

    assert "airflow.workflowsvc.request.2xx,operation=get_job,conn_id=workflowsvc_default:1|c" in lines
    tags = "workflow=Nightly_docs,conn_id=workflowsvc_default,dag_id=none,task_id=none"  # no task here
    assert f"airflow.workflowsvc.job.completed_with_failed_files,{tags}:1|c" in lines
    assert f"airflow.workflowsvc.job.failed_documents,{tags}:1|c" in lines
    assert f"airflow.workflowsvc.job.wait_time,{tags}:2500.000000|ms" in lines
    assert f"airflow.workflowsvc.job.run_time,{tags}:12000.000000|ms" in lines


def dashboard_per_dag() -> list[str]:
    """The plain-StatsD queries of the docs' per-DAG dashboard (``name.<dag_id>.<task_id>``, as ``.*.*``)."""
    text = DOCS.read_text()
    section = text[text.index("Per DAG and task") :]
    section = section[: section.index("\nAlerts\n")]
    return re.findall(r"``(airflow\.workflowsvc\.[a-z_.]+\.\*\.\*)``", section)


@pytest.mark.airflow_min("3.2", reason="Airflow's metrics are set up by the Task SDK from 3.2")
@pytest.mark.parametrize("influxdb", [False, True], ids=["plain StatsD", "StatsD with tags"])
def test_the_per_dag_dashboard_works_on_plain_statsd_and_with_tags(
    monkeypatch: pytest.MonkeyPatch, influxdb: bool
) -> None:
    """Two teams' on-demand jobs (``workflow=on-demand`` both) told apart on a real StatsD socket."""
    queries = dashboard_per_dag()
    assert len(queries) >= 4, queries
    with (
        statsd_receiver() as statsd,
        airflow_statsd(monkeypatch, statsd.port, statsd_influxdb_enabled=str(influxdb)),
        legacy_names(True, monkeypatch),
    ):
        for dag_id in ("team_a_docs", "team_b_docs"):
            with running_task(dag_id, "parse"):
                metrics.job_ended(
                    outcome("success", 1, job_seconds=3.0), CONN, metrics.ON_DEMAND
                )  # 4 metrics
                metrics.job_ended(outcome("success"), CONN, metrics.ON_DEMAND)  # 2
                metrics.job_ended(outcome("failed"), CONN, metrics.ON_DEMAND)  # 2
                metrics.run_failed_closed(None, CONN)  # 1
        lines = statsd.wait_for_lines(2 * 2 * 9)  # 2 teams x 2 names x 9 metrics
    print("\n".join(lines))
    for query in queries:
        pattern = re.compile(re.escape(query).replace(r"\*", r"[^.,:]+") + "[,:]")
        assert {m.group(0) for line in lines if (m := pattern.match(line))}, (query, lines)
    for team in ("team_a_docs", "team_b_docs"):
        name = f"airflow.workflowsvc.job.failed_documents.{team}.parse"
        tags = ",workflow=on-demand,conn_id=workflowsvc_metrics" if influxdb else ""
        assert f"{name}{tags}:1|c" in lines
        if influxdb:  # the tagged name: grouped by the tag dag_id
            full = f"workflow=on-demand,conn_id=workflowsvc_metrics,dag_id={team},task_id=parse"
            assert f"airflow.workflowsvc.job.failed_documents,{full}:1|c" in lines
    if not influxdb:
        assert lines.count("airflow.workflowsvc.job.failed_documents:1|c") == 2  # all teams together


@pytest.mark.airflow_min("3.2", reason="Airflow's metrics are set up by the Task SDK from 3.2")
@pytest.mark.parametrize(
    ("option", "value", "passed"),
    [
        ("metrics_block_list", "workflowsvc.request", "airflow.workflowsvc.pool.lane_retired:1|c"),
        ("metrics_allow_list", "workflowsvc.request.2xx", "airflow.workflowsvc.request.2xx:1|c"),
    ],
)
def test_airflows_allow_and_block_lists_apply_to_the_providers_metrics(
    monkeypatch: pytest.MonkeyPatch, option: str, value: str, passed: str
) -> None:
    with statsd_receiver() as statsd, airflow_statsd(monkeypatch, statsd.port, **{option: value}):
        for _ in range(2):  # the second round's line that passes comes after the first round's lines
            metrics.answered("get_job", "c", 200)
            metrics.answered("get_job", "c", 503)
            metrics.lane_retired()
        assert statsd.wait_for_lines(2) == [passed, passed]
