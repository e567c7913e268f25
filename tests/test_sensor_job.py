"""WorkflowJobSensor against a respx-mocked service: poke, defer, find a workflow's job, soft_fail."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from helpers import FAKE_WORKFLOW_ID, TaskStateStore, details_json, failed_json, job_json, route_documents
from structlog.testing import capture_logs

from airflow_provider_workflowsvc.exceptions import InvalidJobEventError, WorkflowJobWaitError
from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor

WF = FAKE_WORKFLOW_ID


class FakeTI:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.pushed.get(key)


def ctx(store: TaskStateStore | None = None) -> Any:
    return {"ti": FakeTI(), **({"task_state_store": store} if store is not None else {})}


def ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json=data)


def sensor(**kwargs: Any) -> WorkflowJobSensor:
    args: dict[str, Any] = {"task_id": "wait", "poke_interval": 0.01, "timeout": 5, "deferrable": False}
    if "workflow_id" not in kwargs:
        args["job_id"] = "j1"
    return WorkflowJobSensor(**{**args, **kwargs})


def value(result: Any) -> Any:
    """The XCom value of a successful poke."""
    assert isinstance(result, PokeReturnValue)
    assert result.is_done
    return result.xcom_value


def route(router: Any, *statuses: str, failed: Any = (), message: str = "") -> Any:
    details = router.get("/jobs/j1/details").mock(
        side_effect=[ok(details_json("j1", s, message)) for s in statuses]
    )
    router.get("/jobs/j1").mock(return_value=ok(job_json("j1", statuses[-1], outputs=[("f", "n")])))
    router.get("/jobs/j1/failed-files").mock(return_value=ok(failed_json(*failed)))
    route_documents(router, "j1", f="Q3 report.pdf")
    return details


def test_poke_until_the_job_completes(mock_service: Any) -> None:
    route(mock_service, "scheduled", "in progress", "completed")
    task, context = sensor(), ctx()
    assert task.poke(context) is False
    assert task.poke(context) is False
    summary = value(task.poke(context))
    assert summary["status"] == "completed"
    assert summary["output_files"] == [{"file_id": "f", "node_id": "n", "document": "Q3 report.pdf"}]
    assert context["ti"].pushed["job_id"] == "j1"


def test_an_output_whose_document_cannot_be_read_is_named_none(mock_service: Any) -> None:
    """Issue #32: an output the service will not serve (404) leaves its document unknown (a warning);
    the outcome stands. A marked run's marker (in the job record's names) is taken out of the name."""
    route(mock_service, "completed")
    mock_service.get("/jobs/j1").respond(
        json={
            **job_json("j1", "completed", outputs=[("f", "n"), ("g", "n")]),
            "input_file_ids": ["a__wfsvc-0123456789abcdef.txt", "b__wfsvc-0123456789abcdef.txt"],
        }
    )
    route_documents(mock_service, "j1", f="a__wfsvc-0123456789abcdef.txt")
    mock_service.get("/jobs/j1/download", params={"file_id": "g"}).respond(404, json={"detail": "gone"})
    with capture_logs() as logs:
        summary = sensor().execute(ctx())
    assert summary["output_files"] == [
        {"file_id": "f", "node_id": "n", "document": "a.txt"},
        {"file_id": "g", "node_id": "n", "document": None},
    ]
    assert any("could not read which document output g was made from" in e["event"] for e in logs)


def test_poke_mode_execute_returns_the_summary(mock_service: Any) -> None:
    route(mock_service, "in progress", "completed")
    assert sensor().execute(ctx())["job_id"] == "j1"


def test_a_failed_job_fails_without_retry(mock_service: Any) -> None:
    route(mock_service, "failed", failed=[("a.pdf", "bad")], message="all failed")
    context = ctx()
    with pytest.raises(AirflowFailException, match="all failed"):
        sensor().execute(context)
    assert context["ti"].pushed["return_value"]["failed_files"] == [{"document": "a.pdf", "error": "bad"}]


def test_failed_files_fail_or_pass(mock_service: Any) -> None:
    route(mock_service, "completed", "completed", failed=[("a.pdf", "bad")])
    context = ctx()
    with pytest.raises(AirflowFailException, match=r"a\.pdf: bad"):
        sensor().execute(context)
    assert context["ti"].pushed["return_value"]["outcome"] == "failed_files", "the task's verdict"
    passed = sensor(fail_on_failed_files=False).execute(ctx())
    assert (passed["failed_file_count"], passed["outcome"]) == (1, "success")


def test_soft_fail_skips(mock_service: Any) -> None:
    route(mock_service, "stopped")
    with pytest.raises(AirflowSkipException):
        sensor(soft_fail=True).execute(ctx())


def test_soft_fail_skips_a_failed_job_before_deferring(mock_service: Any) -> None:
    route(mock_service, "failed", "failed")
    with pytest.raises(AirflowSkipException):
        sensor(soft_fail=True, deferrable=True).execute(ctx())
    with pytest.raises(AirflowFailException):
        sensor(deferrable=True).execute(ctx())


def test_transient_errors_do_not_fail_a_poke(mock_service: Any) -> None:
    mock_service.get("/jobs/j1/details").mock(side_effect=[httpx.Response(503), httpx.Response(503)])
    assert sensor().poke(ctx()) is False


def test_deferrable_defers_with_the_job(mock_service: Any) -> None:
    route(mock_service, "in progress")
    started = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        sensor(deferrable=True, timeout=100, poke_interval=9).execute(ctx())
    _, kwargs = deferred.value.trigger.serialize()
    assert kwargs["job_id"] == "j1"
    assert kwargs["cancel_on_kill"] is False
    assert kwargs["poll_interval"] == 9
    assert started + 100 <= kwargs["deadline"] <= time.time() + 100


def test_deferrable_does_not_defer_a_finished_job(mock_service: Any) -> None:
    route(mock_service, "completed")
    assert sensor(deferrable=True).execute(ctx())["status"] == "completed"


def test_workflow_mode_finds_the_latest_job_after_a_time(mock_service: Any) -> None:
    jobs = [
        job_json("early", "completed", created_at="2026-01-01T00:00:00Z"),
        job_json("j1", "in progress", created_at="2026-01-02T00:00:00Z"),
        job_json("j0", "completed", created_at="2026-01-01T12:00:00Z"),
    ]
    mock_service.get("/jobs/", params={"workflow_id": WF}).mock(return_value=ok(jobs))
    route(mock_service, "in progress", "completed")
    task, context = sensor(workflow_id=WF, created_after="2026-01-01T06:00:00"), ctx()
    assert task.poke(context) is False
    assert value(task.poke(context))["job_id"] == "j1"
    assert context["ti"].pushed["job_id"] == "j1"


@pytest.mark.parametrize("durable", [True, False], ids=["task-state-store", "xcom"])
def test_workflow_mode_follows_the_job_it_found_across_reschedules(mock_service: Any, durable: bool) -> None:
    """Scenario: a reschedule-mode sensor finds j1; a newer job j2 appears before the next poke (a new
    sensor instance, as after a reschedule). The sensor still follows j1, and j1 failing fails it."""
    first = job_json("j1", "in progress", created_at="2026-01-02T00:00:00Z")
    newer = job_json("j2", "completed", created_at="2026-01-03T00:00:00Z")
    listing = mock_service.get("/jobs/", params={"workflow_id": WF})
    listing.mock(side_effect=[ok([first]), ok([first, newer])])
    mock_service.get("/jobs/j1/details").mock(
        side_effect=[ok(details_json("j1", "in progress")), ok(details_json("j1", "failed", "broken"))]
    )
    mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", "failed")))
    mock_service.get("/jobs/j1/failed-files").mock(return_value=ok(failed_json()))
    store = TaskStateStore() if durable else None
    context = ctx(store)
    assert sensor(workflow_id=WF).poke(context) is False
    if store is not None:
        assert store.values == {"workflowsvc_sensor_job": {"workflow_id": WF, "job_id": "j1"}}
    with pytest.raises(AirflowFailException, match="j1 failed: broken"):
        sensor(workflow_id=WF).poke(context)
    assert listing.call_count == 1, "the job was searched for again"
    assert store is None or store.values == {}, "the pin outlived the job's wait"


def test_a_found_event_pins_the_job_and_defers_for_it(mock_service: Any) -> None:
    store = TaskStateStore()
    context = ctx(store)
    found = event(status="found", job_id="j1", job_status="scheduled", elapsed=5.0)
    with pytest.raises(TaskDeferred) as deferred:
        sensor(workflow_id=WF, deferrable=True).execute_complete(context, found)
    _, kwargs = deferred.value.trigger.serialize()
    assert kwargs["job_id"] == "j1"
    assert kwargs["workflow_id"] == WF  # the pinned job's workflow: its wait shares the workflow's poll
    assert kwargs["started_at"] == pytest.approx(time.time() - 5.0, abs=2)
    assert kwargs["deadline"] == pytest.approx(kwargs["started_at"] + 5, abs=0.01)
    assert store.values["workflowsvc_sensor_job"]["job_id"] == "j1"


def test_workflow_mode_earliest(mock_service: Any) -> None:
    jobs = [
        job_json("j2", "completed", created_at="2026-01-02T00:00:00Z"),
        job_json("j1", "completed", created_at="2026-01-01T12:00:00Z"),
    ]
    mock_service.get("/jobs/", params={"workflow_id": WF}).mock(return_value=ok(jobs))
    route(mock_service, "completed")
    assert value(sensor(workflow_id=WF, pick="earliest").poke(ctx()))["job_id"] == "j1"


def test_deferrable_workflow_mode_defers_to_find_the_job(mock_service: Any) -> None:
    mock_service.get("/jobs/", params={"workflow_id": WF}).mock(return_value=ok([]))
    with pytest.raises(TaskDeferred) as deferred:
        sensor(workflow_id=WF, created_after="2026-01-01T06:00:00", deferrable=True).execute(ctx())
    _, kwargs = deferred.value.trigger.serialize()
    assert kwargs["job_id"] is None
    assert kwargs["workflow_id"] == WF
    assert kwargs["created_after"] == "2026-01-01T06:00:00+00:00"


def event(**kwargs: Any) -> dict[str, Any]:
    return {"status": "success", "job_id": "j1", "workflow_id": WF, "job_status": "completed", **kwargs}


def test_execute_complete_outcomes() -> None:
    context = ctx()
    assert sensor().execute_complete(context, event())["job_id"] == "j1"
    assert context["ti"].pushed["job_id"] == "j1"
    with pytest.raises(AirflowFailException, match="was stopped"):
        sensor().execute_complete(ctx(), event(status="stopped", job_status="stopped"))
    with pytest.raises(AirflowSensorTimeout, match="did not finish in time"):
        sensor().execute_complete(ctx(), event(status="timeout", job_status="in progress"))
    with pytest.raises(AirflowSensorTimeout, match="no job of workflow"):
        sensor().execute_complete(
            ctx(), event(status="timeout", job_id=None, message="no job of workflow x appeared")
        )
    with pytest.raises(InvalidJobEventError):
        sensor().execute_complete(ctx(), {"status": "weird"})


def test_soft_fail_skips_after_deferral() -> None:
    failed = {"event": event(status="failed", job_status="failed", message="boom")}
    with pytest.raises(AirflowSkipException):
        sensor(soft_fail=True).resume_execution("execute_complete", failed, ctx())
    with pytest.raises(AirflowFailException, match="boom"):
        sensor().resume_execution("execute_complete", failed, ctx())


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        WorkflowJobSensor(task_id="s", job_id="j", workflow_id=WF)
    with pytest.raises(ValueError, match="exactly one"):
        WorkflowJobSensor(task_id="s")
    with pytest.raises(ValueError, match="pick"):
        WorkflowJobSensor(task_id="s", workflow_id=WF, pick="newest")


# --------------------------------------------------------------------------------------------------
# Only the job's own verdict forbids a retry (issue #31, item 5): a wait that could not observe its job
# (a 404 from a replica that does not have the job yet, a refusal, an unreadable answer) fails the task
# retryably in every mode, and soft_fail does not skip it.

BROKEN = "GET /api/v1/jobs/j1/details → 404 Not Found: job not found"


def not_found(router: Any) -> None:
    router.get("/jobs/j1/details").mock(return_value=httpx.Response(404, json={"detail": "job not found"}))


def test_the_error_of_a_broken_wait_lets_retries_apply() -> None:
    assert not issubclass(WorkflowJobWaitError, (AirflowFailException, AirflowSensorTimeout))


@pytest.mark.parametrize("soft_fail", [False, True])
def test_a_broken_wait_is_retryable_after_the_trigger(soft_fail: bool) -> None:
    """Deferred from a worker, or started in the triggerer: the trigger's ``error`` event resumes the task."""
    broken = {"event": event(status="error", job_status=None, message=BROKEN)}
    with pytest.raises(WorkflowJobWaitError, match="404"):
        sensor(soft_fail=soft_fail, deferrable=True).resume_execution("execute_complete", broken, ctx())


@pytest.mark.parametrize("soft_fail", [False, True])
@pytest.mark.parametrize("deferrable", [False, True])
def test_a_broken_wait_is_retryable_in_a_poke(mock_service: Any, soft_fail: bool, deferrable: bool) -> None:
    """Poke mode, and a deferrable sensor's first poke in a worker: the same error as after the trigger."""
    not_found(mock_service)
    context = ctx()
    with pytest.raises(WorkflowJobWaitError, match="404"):
        sensor(soft_fail=soft_fail, deferrable=deferrable).execute(context)
    assert context["ti"].pushed["return_value"]["outcome"] == "error"  # the summary, as for a verdict


def test_a_broken_wait_keeps_the_job_a_retry_follows(mock_service: Any) -> None:
    store = TaskStateStore()
    store.set("workflowsvc_sensor_job", {"workflow_id": WF, "job_id": "j1"})
    with pytest.raises(WorkflowJobWaitError, match="404"):
        sensor(workflow_id=WF).execute_complete(ctx(store), event(status="error", message=BROKEN))
    assert store.values == {"workflowsvc_sensor_job": {"workflow_id": WF, "job_id": "j1"}}


def test_the_jobs_verdict_and_the_sensors_timeout_still_forbid_a_retry() -> None:
    for status, raised in (("failed", AirflowFailException), ("stopped", AirflowFailException)):
        with pytest.raises(raised):
            sensor().execute_complete(ctx(), event(status=status, job_status=status))
    with pytest.raises(AirflowFailException, match="file"):
        failed_files = [{"document": "a.pdf", "error": "bad"}]
        sensor().execute_complete(ctx(), event(failed_files=failed_files))
    with pytest.raises(AirflowSensorTimeout):
        sensor().execute_complete(ctx(), event(status="timeout", job_status="in progress"))
    for status in ("failed", "timeout"):
        verdict = {"event": event(status=status, job_status="failed")}
        with pytest.raises(AirflowSkipException):
            sensor(soft_fail=True).resume_execution("execute_complete", verdict, ctx())
