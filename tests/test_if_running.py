"""RunWorkflowOperator(if_running=...): a running job of its workflow is run beside, waited for, refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from airflow.sdk.exceptions import TaskDeferred
from helpers import FAKE_WORKFLOW_ID, TaskStateStore, details_json, job_json
from reliability import _helpers as reliability_helpers
from test_run_operator import _spelled, ok, op, route_job

from airflow_provider_workflowsvc.exceptions import (
    WorkflowAlreadyRunningError,
    WorkflowJobTimeoutError,
    WorkflowServiceInputError,
)
from airflow_provider_workflowsvc.operators.jobs import RUNNING_JOB_KEY
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

WF = FAKE_WORKFLOW_ID
RUN = f"/workflows/{WF}/run"
DURABLE = [
    pytest.param(True, id="task-state-store"),
    pytest.param(False, id="xcom"),
]


class FakeTI(reliability_helpers.FakeTI):
    """A pull reads what this try pushed (as Airflow keeps a try's XCom across a deferral)."""

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.pushed.get(key)


def ctx(store: TaskStateStore | None = None) -> Any:
    return {"ti": FakeTI(), "task_state_store": store}


def job(job_id: str, status: str, created_at: str | None = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {**job_json(job_id, status), "created_at": created_at}


@pytest.fixture
def service(mock_service: Any) -> Any:
    """The mocked service: the workflow's record; a run gives job ``mine``, which completes."""
    mock_service.get(f"/workflows/{WF}").respond(
        json={"id": WF, "name": "wf", "workflow_type": "basic", "sources": [], "destinations": []}
    )
    mock_service.post(RUN).mock(return_value=ok(job_json("mine", "scheduled")))
    route_job(mock_service, "mine")
    mock_service.post(url__regex=r"/jobs/[^/]+/cancel$").mock(return_value=httpx.Response(200))
    return mock_service


def route_listing(router: Any, *jobs: dict[str, Any], honour_filter: bool = True) -> Any:
    """The workflow's jobs; each ``status`` filter applied (or ignored, as some services do)."""

    def answer(request: httpx.Request) -> httpx.Response:
        wanted = request.url.params.get("status")
        if not (honour_filter and wanted):
            return ok(list(jobs))
        return ok([j for j in jobs if _spelled(j["status"]) == _spelled(wanted)])

    return router.get("/jobs/", params={"workflow_id": WF}).mock(side_effect=answer)


def runs(router: Any) -> int:
    sent = [call.request for call in router.calls]
    return sum(1 for request in sent if request.method == "POST" and request.url.path.endswith(RUN))


def cancels(router: Any) -> int:
    return sum(1 for call in router.calls if call.request.url.path.endswith("/cancel"))


def test_the_default_runs_beside_a_running_job_without_looking(service: Any) -> None:
    listing = route_listing(service, job("j0", "in progress"))
    summary = op().execute(ctx())
    assert (summary["job_id"], summary["started_by_task"]) == ("mine", True)
    assert runs(service) == 1
    assert not [c for c in listing.calls if "status" in c.request.url.params], "'run' lists nothing"


@pytest.mark.parametrize("status", ["in progress", "scheduled", "IN_PROGRESS", "SCHEDULED"])
def test_fail_refuses_beside_a_running_job_and_sends_nothing(service: Any, status: str) -> None:
    route_listing(service, job("j0", status))
    with pytest.raises(WorkflowAlreadyRunningError, match=r"job j0 of workflow .* if_running='fail'") as err:
        op(if_running="fail").execute(ctx())
    assert "A retry runs it once that job has ended" in str(err.value)
    assert runs(service) == 0
    assert cancels(service) == 0


@pytest.mark.parametrize("spelling", ["spec", "platform"])
def test_a_job_that_starts_between_the_two_listings_is_seen(service: Any, spelling: str) -> None:
    """Issue #43 (5): the running job moves on (scheduled → in progress) right after the first listing
    is answered, whichever status that listing asked for. Listed in the lifecycle's order it is in one
    of the two listings, and if_running='fail' sends nothing (in the other order it was in neither: the
    workflow was run beside it)."""
    statuses = {"spec": ("scheduled", "im progress"), "platform": ("SCHEDULED", "IN_PROGRESS")}[spelling]
    asked: list[str] = []  # each status filter (in any spelling the hook tries), in the order asked

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(_spelled(request.url.params["status"]))
        now = job("j0", statuses[len(set(asked)) > 1])  # it moves on once the second status is asked
        return ok([now] if _spelled(now["status"]) == asked[-1] else [])

    service.get("/jobs/", params={"workflow_id": WF}).mock(side_effect=answer)
    with pytest.raises(WorkflowAlreadyRunningError, match=r"job j0 of workflow"):
        op(if_running="fail").execute(ctx())
    assert runs(service) == 0


@pytest.mark.parametrize("if_running", ["wait", "fail"])
def test_no_running_job_runs_the_workflow(service: Any, if_running: str) -> None:
    route_listing(service, job("old", "completed"), job("older", "failed"), honour_filter=False)
    context = ctx()
    summary = op(if_running=if_running).execute(context)
    assert (summary["job_id"], summary["started_by_task"]) == ("mine", True)
    assert runs(service) == 1
    assert RUNNING_JOB_KEY not in context["ti"].pushed


@pytest.mark.parametrize("durable", DURABLE)
def test_wait_reports_the_running_job_marked_not_started_and_never_cancels_it(
    service: Any, capsys: Any, durable: bool
) -> None:
    route_listing(service, job("j0", "in progress"))
    route_job(service, "j0")
    store = TaskStateStore() if durable else None
    context = ctx(store)
    task = op(if_running="wait", durable=durable)
    summary = task.execute(context)
    assert (summary["job_id"], summary["status"], summary["started_by_task"]) == ("j0", "completed", False)
    assert runs(service) == 0
    assert context["ti"].pushed["job_id"] == "j0"
    assert context["ti"].pushed[RUNNING_JOB_KEY] == "j0"
    out = capsys.readouterr().out
    assert "This task did NOT start it" in out
    assert "Job j0 was not started by this task" in out
    if store is not None:
        assert store.values == {}, "forgotten once reported: clearing the task looks anew"
    task.on_kill()
    assert cancels(service) == 0


@pytest.mark.parametrize("honour_filter", [True, False])
def test_wait_waits_for_the_newest_of_several_running_jobs(service: Any, honour_filter: bool) -> None:
    route_listing(
        service,
        job("first", "scheduled", "2026-01-01T00:00:00Z"),
        job("newest", "in progress", "2026-01-01T02:00:00Z"),
        job("second", "in progress", "2026-01-01T01:00:00Z"),
        job("ended-later", "completed", "2026-01-01T03:00:00Z"),  # ended: not running
        honour_filter=honour_filter,
    )
    route_job(service, "newest")
    summary = op(if_running="wait").execute(ctx())
    assert (summary["job_id"], summary["started_by_task"]) == ("newest", False)
    assert runs(service) == 0


def test_several_running_jobs_without_a_creation_time_fail_naming_them(service: Any) -> None:
    route_listing(service, job("a", "in progress", None), job("b", "scheduled", "2026-01-01T00:00:00Z"))
    with pytest.raises(WorkflowAlreadyRunningError, match=r"2 running jobs \(a, b\), not all with"):
        op(if_running="wait").execute(ctx())
    assert runs(service) == 0


@pytest.mark.parametrize("if_running", ["wait", "fail"])
def test_a_running_job_the_provider_cannot_read_fails_closed(service: Any, if_running: str) -> None:
    route_listing(service, {"status": "in progress", "workflow_id": WF})  # no id
    with pytest.raises(WorkflowAlreadyRunningError, match="the provider cannot read"):
        op(if_running=if_running).execute(ctx())
    assert runs(service) == 0


@pytest.mark.parametrize("if_running", ["wait", "fail"])
def test_a_listing_that_fails_sends_no_run(service: Any, if_running: str) -> None:
    service.get("/jobs/", params={"workflow_id": WF}).mock(
        return_value=httpx.Response(403, json={"detail": "forbidden"})
    )
    with pytest.raises(Exception, match="403"):
        op(if_running=if_running).execute(ctx())
    assert runs(service) == 0


def test_wait_times_out_leaving_the_job_it_did_not_start_running(service: Any) -> None:
    route_listing(service, job("j0", "in progress"))
    service.get("/jobs/j0/details").mock(return_value=ok(details_json("j0", "in progress")))
    context = ctx()
    with pytest.raises(WorkflowJobTimeoutError, match="left running: this task did not start it"):
        op(if_running="wait", timeout=0.2, poll_interval=0.05, cancel_on_timeout=True).execute(context)
    assert cancels(service) == 0
    assert context["ti"].pushed["return_value"]["started_by_task"] is False


@pytest.mark.parametrize("durable", DURABLE)
def test_deferred_wait_never_cancels_and_resumes_marked_not_started(service: Any, durable: bool) -> None:
    route_listing(service, job("j0", "in progress"))
    context = ctx(TaskStateStore() if durable else None)
    with pytest.raises(TaskDeferred) as deferred:
        op(if_running="wait", deferrable=True, durable=durable).execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkflowJobTrigger)
    _, kwargs = trigger.serialize()
    assert (kwargs["job_id"], kwargs["cancel_on_kill"]) == ("j0", False)
    event = {"status": "success", "job_id": "j0", "workflow_id": WF, "job_status": "completed"}
    resumed = op(if_running="wait", deferrable=True, durable=durable)  # a new process: nothing in memory
    summary = resumed.execute_complete(context, event)
    assert (summary["job_id"], summary["started_by_task"]) == ("j0", False)
    assert runs(service) == 0


def test_fire_and_forget_wait_returns_the_running_job_marked(service: Any) -> None:
    route_listing(service, job("j0", "scheduled"))
    summary = op(if_running="wait", wait_for_completion=False).execute(ctx())
    expected = {"job_id": "j0", "workflow_id": WF, "status": "already running", "started_by_task": False}
    assert summary == expected
    assert runs(service) == 0


def test_a_retry_goes_on_waiting_for_the_running_job_still_marked(service: Any) -> None:
    route_job(service, "j0")
    store = TaskStateStore(workflowsvc_job_id="j0", **{RUNNING_JOB_KEY: "j0"})
    service.get("/jobs/j0").mock(
        side_effect=[ok(job_json("j0", "in progress"))] + [ok(job_json("j0", "completed"))] * 3
    )
    summary = op(if_running="wait").execute(ctx(store))
    assert (summary["job_id"], summary["started_by_task"]) == ("j0", False)
    assert runs(service) == 0


def test_if_running_is_checked_at_parse_time() -> None:
    with pytest.raises(WorkflowServiceInputError, match=r"if_running must be one of 'run', 'wait', 'fail'"):
        op(if_running="skip")


@pytest.mark.parametrize("if_running", ["wait", "fail"])
def test_an_earlier_tries_unrecorded_run_decides_before_if_running(service: Any, if_running: str) -> None:
    """
    An earlier try sent the run and died before recording its job; the job now running may be that run's.
    Neither waited for as "not started by this task" nor refused as another's: the earlier run's evidence
    rule decides (unmarked: the task fails closed, naming the candidates), and nothing is sent.
    """
    import time

    from airflow_provider_workflowsvc.exceptions import AmbiguousRunError
    from airflow_provider_workflowsvc.operators.jobs import PENDING_RUN_KEY

    route_listing(service, job("j0", "in progress"))
    route_job(service, "j0")
    sent = {"workflow_id": WF, "sent_at": time.time() - 600, "files": None, "marker": None}
    store = TaskStateStore(**{PENDING_RUN_KEY: sent})
    with pytest.raises(AmbiguousRunError):
        op(if_running=if_running, run_grace_period=0.01).execute(ctx(store))
    assert runs(service) == 0
    assert cancels(service) == 0
