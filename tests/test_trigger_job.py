"""WorkflowJobTrigger against a respx-mocked service: one event per run, deadlines, transient errors."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import httpx
import pytest
from airflow.sdk._shared.module_loading import import_string
from helpers import FAKE_WORKFLOW_ID, details_json, failed_json, job_json, route_documents

from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger
from airflow_provider_workflowsvc.triggers.jobs import WorkflowJobsTrigger

NODES_RUNNING = (("partition", 1, 1, 0, 0), ("embed", 2, 0, 0, 0))
NODES_DONE = (("partition", 0, 0, 2, 0), ("embed", 0, 0, 2, 0))


def make(**kwargs: Any) -> WorkflowJobTrigger:
    args: dict[str, Any] = {"job_id": "j1", "deadline": time.time() + 10, "poll_interval": 0.01}
    return WorkflowJobTrigger(**{**args, **kwargs})


async def first_event(trigger: WorkflowJobTrigger, limit: float = 10) -> dict[str, Any]:
    event = await asyncio.wait_for(trigger.run().__anext__(), limit)
    return event.payload


def ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json=data)


def route_record(router: Any, status: str = "in progress") -> Any:
    """The job's record (a wait given only its job reads it first, to learn its workflow)."""
    return router.get("/jobs/j1").mock(return_value=ok(job_json("j1", status)))


def route_finish(router: Any, status: str = "completed", failed: Any = (), outputs: Any = ()) -> None:
    router.get("/jobs/j1").mock(return_value=ok(job_json("j1", status, outputs=outputs)))
    router.get("/jobs/j1/failed-files").mock(return_value=ok(failed_json(*failed)))
    route_documents(router, "j1", **{file_id: f"docs/{file_id}" for file_id, _ in outputs})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"job_id": "j1", "deadline": 1e9, "poll_interval": 30.0},
        {
            "job_id": None,
            "deadline": 1.5e9,
            "poll_interval": 5.0,
            "workflowsvc_conn_id": "other",
            "started_at": 1.4e9,
            "cancel_on_kill": False,
            "workflow_id": FAKE_WORKFLOW_ID,
            "created_after": "2026-01-01T00:00:00+00:00",
            "pick": "earliest",
        },
        {  # the sensor started in the triggerer: it ends the task itself when the job passes
            "job_id": "{{ params.job }}",
            "deadline": None,
            "poll_interval": 2.0,
            "cancel_on_kill": False,
            "end_on_success": True,
            "fail_on_failed_files": False,
            "push_summary": False,
        },
    ],
)
def test_serialize_round_trips(kwargs: dict[str, Any]) -> None:
    path, serialized = WorkflowJobTrigger(**kwargs).serialize()
    assert json.loads(json.dumps(serialized)) == serialized
    assert import_string(path)(**serialized).serialize() == (path, serialized)


def test_needs_a_job_or_a_workflow() -> None:
    with pytest.raises(ValueError, match="job_id"):
        WorkflowJobTrigger(job_id=None, deadline=1.0)


async def test_success_reports_outputs_and_node_stats(mock_service: Any, capsys: Any) -> None:
    details = mock_service.get("/jobs/j1/details")
    details.mock(
        side_effect=[
            ok(details_json("j1", "scheduled")),
            ok(details_json("j1", "im progress", nodes=NODES_RUNNING)),
            ok(details_json("j1", "completed", "all good", nodes=NODES_DONE)),
        ]
    )
    route_finish(mock_service, outputs=[("a.txt", "n1"), ("b.txt", "n1")])
    payload = await first_event(make())
    assert payload["status"] == "success"
    assert payload["job_id"] == "j1"
    assert payload["workflow_id"] == FAKE_WORKFLOW_ID
    assert payload["job_status"] == "completed"
    assert payload["message"] == "all good"
    assert payload["output_files"] == [
        {"file_id": "a.txt", "node_id": "n1", "document": "docs/a.txt"},
        {"file_id": "b.txt", "node_id": "n1", "document": "docs/b.txt"},
    ]
    assert [n["success"] for n in payload["node_stats"]] == [2, 2]
    assert payload["failed_files"] == []
    assert details.call_count == 3
    out = capsys.readouterr().out
    assert "scheduled → in progress" in out
    assert "→ completed" not in out  # the end is one line: the summary's (the task's, here the worker's)


@pytest.mark.parametrize("status", ["failed", "stopped"])
async def test_failed_and_stopped_jobs(mock_service: Any, status: str) -> None:
    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", status, "it broke")))
    route_finish(mock_service, status, failed=[("x.pdf", "bad pdf")])
    payload = await first_event(make())
    assert payload["status"] == status
    assert payload["message"] == "it broke"
    assert payload["failed_files"] == [{"document": "x.pdf", "error": "bad pdf"}]


async def test_completed_with_failed_files_is_reported_not_judged(mock_service: Any) -> None:
    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "completed")))
    route_finish(mock_service, failed=[("x.bin", "unsupported")])
    payload = await first_event(make())
    assert payload["status"] == "success"  # the operator decides (fail_on_failed_files)
    assert payload["failed_files"] == [{"document": "x.bin", "error": "unsupported"}]


async def test_deadline_gives_timeout_and_bounded_requests(mock_service: Any) -> None:
    details = mock_service.get("/jobs/j1/details")
    details.mock(return_value=ok(details_json("j1", "in progress")))
    record = route_record(mock_service)
    interval, budget = 0.1, 0.55
    started = time.time()
    payload = await first_event(make(deadline=started + budget, poll_interval=interval, started_at=started))
    assert payload["status"] == "timeout"
    assert payload["job_status"] == "in progress"
    assert payload["elapsed"] >= budget - 0.15  # it lasts its timeout (a busy loop only makes it later)
    # and polls no more than it allows
    assert details.call_count + record.call_count <= math.ceil(budget / interval) + 1
    assert record.call_count == 0  # one request a poll: no wait reads its record to learn its workflow


async def test_a_hanging_request_does_not_outlive_the_deadline(mock_service: Any) -> None:
    cut = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        try:
            await asyncio.Event().wait()  # no answer, ever: only the deadline can end this wait
        finally:
            cut.set()
        return ok(details_json("j1", "completed"))

    mock_service.get("/jobs/j1/details").mock(side_effect=hang)
    route_record(mock_service)
    payload = await first_event(make(deadline=time.time() + 0.4, poll_interval=0.05))
    assert payload["status"] == "timeout"
    assert cut.is_set()  # the request was cut at the deadline, not left running


async def test_transient_errors_keep_the_wait_going(mock_service: Any, capsys: Any) -> None:
    # The hook retries a GET once (mock_service); each failing pair is one failed poll.
    mock_service.get("/jobs/j1/details").mock(
        side_effect=[
            httpx.Response(503),
            httpx.Response(502),
            httpx.RemoteProtocolError("connection dropped"),
            httpx.ReadTimeout("slow"),
            httpx.Response(429, headers={"retry-after": "0"}),
            httpx.Response(504),
            ok(details_json("j1", "im progress")),
            ok(details_json("j1", "completed")),
        ]
    )
    route_finish(mock_service)
    payload = await first_event(make())
    assert payload["status"] == "success"
    assert capsys.readouterr().out.count("status check failed") == 3


async def test_unknown_status_is_never_success(mock_service: Any, capsys: Any) -> None:
    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "archived-ish")))
    job = mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", "archived-ish")))
    payload = await first_event(make(deadline=time.time() + 0.3, poll_interval=0.02))
    assert payload["status"] == "timeout"
    assert payload["job_status"] == "archived-ish"
    assert job.call_count > 2
    out = capsys.readouterr().out
    assert out.count("does not know") == 1
    assert "archived-ish" in out


async def test_node_progress_is_logged_only_when_it_changes(mock_service: Any, capsys: Any) -> None:
    running = ok(details_json("j1", "in progress", nodes=NODES_RUNNING))
    mock_service.get("/jobs/j1/details").mock(
        side_effect=[running, running, running, ok(details_json("j1", "completed", nodes=NODES_DONE))]
    )
    route_finish(mock_service)
    await first_event(make())
    assert capsys.readouterr().out.count("progress: partition") == 1  # the end's is in the event


async def test_fast_polls_log_progress_once_per_status(mock_service: Any, capsys: Any) -> None:
    """Progress that changes at every poll is not a line per poll (issue #17): the first poll's; the
    final status's is the summary's to say (and the event's to carry)."""
    mock_service.get("/jobs/j1/details").mock(
        side_effect=[
            ok(details_json("j1", "in progress", nodes=(("partition", 9 - i, 1, i, 0),))) for i in range(6)
        ]
        + [ok(details_json("j1", "completed", nodes=NODES_DONE))]
    )
    route_finish(mock_service)
    assert (await first_event(make()))["status"] == "success"
    out = capsys.readouterr().out
    assert out.count("progress: partition") == 1
    assert "partition: ready 9, in progress 1, success 0" in out


async def test_a_missing_job_is_an_error_event(mock_service: Any) -> None:
    gone = httpx.Response(404, json={"detail": "no such job"})
    mock_service.get("/jobs/j1/details").mock(return_value=gone)
    payload = await first_event(make())
    assert payload["status"] == "error"
    assert payload["job_id"] == "j1"
    assert "no such job" in payload["message"]


async def test_find_phase_ends_with_the_job_found(mock_service: Any) -> None:
    """The trigger reports the job it found (the task pins it, then waits for it): it does not wait
    for it itself, so a triggerer restart cannot make the wait switch to a newer job."""
    old = job_json("old", "completed", created_at="2025-12-31T23:00:00Z")
    new = job_json("j1", "scheduled", created_at="2026-01-01T01:00:00Z")
    listing = mock_service.get("/jobs/", params={"workflow_id": FAKE_WORKFLOW_ID})
    listing.mock(side_effect=[ok([old]), ok([old]), ok([old, new])])
    details = mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "completed")))
    trigger = make(job_id=None, workflow_id=FAKE_WORKFLOW_ID, created_after="2026-01-01T00:00:00Z")
    payload = await first_event(trigger)
    assert payload["status"] == "found"
    assert payload["job_id"] == "j1"
    assert payload["job_status"] == "scheduled"
    assert payload["workflow_id"] == FAKE_WORKFLOW_ID
    assert listing.call_count == 3
    assert details.call_count == 0


async def test_find_phase_times_out_without_a_job(mock_service: Any) -> None:
    mock_service.get("/jobs/").mock(return_value=ok([]))
    trigger = make(job_id=None, workflow_id=FAKE_WORKFLOW_ID, deadline=time.time() + 0.2, poll_interval=0.05)
    payload = await first_event(trigger)
    assert payload["status"] == "timeout"
    assert payload["job_id"] is None
    assert "no job of workflow" in payload["message"]


def waiting_for_j1(kind: str) -> WorkflowJobTrigger | WorkflowJobsTrigger:
    """A trigger of either kind that waits for job ``j1``."""
    if kind == "job":
        return make()
    return WorkflowJobsTrigger(job_ids=["j1"], deadline=time.time() + 10, poll_interval=0.01)


BOTH_TRIGGERS = pytest.mark.parametrize("kind", ["job", "jobs"])


@BOTH_TRIGGERS
@pytest.mark.parametrize(
    "state", ["failed", "success", "skipped", None, "scheduled", "running", "restarting"]
)
async def test_on_kill_cancels_when_the_task_is_no_longer_deferred(
    mock_service: Any, task_state: Any, kind: str, state: str | None
) -> None:
    """A user marked the task (failed, success, skipped) or cleared it (None, then on its way to run
    again): the trigger asks the supervisor for its task's state, then cancels."""
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    trigger = waiting_for_j1(kind)
    supervisor = task_state(trigger, state)
    await trigger.on_kill()
    assert cancel.call_count == 1
    (asked,) = supervisor.asked
    assert (asked.dag_id, asked.run_ids, asked.task_ids, asked.map_index) == ("d", ["r"], ["t"], -1)


@BOTH_TRIGGERS
@pytest.mark.parametrize("state", ["deferred", "up_for_retry"])
async def test_on_kill_of_a_trigger_another_triggerer_holds_cancels_nothing(
    mock_service: Any, task_state: Any, capsys: Any, kind: str, state: str
) -> None:
    """Airflow 3.3.0 to 3.3.2 runs on_kill on a triggerer that lost the trigger (apache/airflow PR
    #73454): the task is still deferred, its wait goes on elsewhere, so the job is left running."""
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    trigger = waiting_for_j1(kind)
    task_state(trigger, state)
    await trigger.on_kill()
    assert cancel.call_count == 0
    assert f"j1 running: the task is still {state}" in capsys.readouterr().out


@BOTH_TRIGGERS
@pytest.mark.parametrize("unreadable", ["no task instance", "supervisor fails", "supervisor hangs"])
async def test_on_kill_that_cannot_read_the_task_state_cancels_nothing(
    mock_service: Any,
    task_state: Any,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    unreadable: str,
) -> None:
    """Fail closed: without the task's state there is no evidence a user ended it; warn, cancel nothing."""
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    trigger = waiting_for_j1(kind)
    if unreadable == "supervisor fails":
        task_state(trigger, RuntimeError("the supervisor is gone"))
    elif unreadable == "supervisor hangs":
        monkeypatch.setattr("airflow_provider_workflowsvc.wait.poll.CANCEL_BUDGET", 0.05)
        task_state(trigger, asyncio.Event())
    await trigger.on_kill()
    assert cancel.call_count == 0
    out = capsys.readouterr().out
    assert "j1 running: could not read the task's state" in out
    assert "()" not in out  # the reason is named (a timeout's is empty)
    assert "[warning" in out.lower()


async def test_on_kill_reads_the_state_of_its_mapped_task(mock_service: Any, task_state: Any) -> None:
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    trigger = make()
    supervisor = task_state(trigger, "failed", map_index=3)
    await trigger.on_kill()
    assert cancel.call_count == 1
    assert supervisor.asked[0].map_index == 3


async def test_on_kill_of_an_ended_job_is_quiet(mock_service: Any, task_state: Any, capsys: Any) -> None:
    mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(409, json={"detail": "job ended"}))
    trigger = make()
    task_state(trigger)
    await trigger.on_kill()
    assert "already ended" in capsys.readouterr().out


@pytest.mark.parametrize(("status", "said"), [("stopped", "is stopped"), ("in progress", "Could not cancel")])
async def test_a_cancel_whose_answer_is_lost_is_verified(
    mock_service: Any, task_state: Any, capsys: Any, status: str, said: str
) -> None:
    """The cancel fails ambiguously (502 after the hook's retry): the job is read; stopped means the
    cancel took effect, still running means it did not (reported, as on_kill never raises)."""
    mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(502))
    read = mock_service.get("/jobs/j1").mock(return_value=ok(job_json("j1", status)))
    trigger = make()
    task_state(trigger)
    await trigger.on_kill()
    assert said in capsys.readouterr().out
    assert read.call_count == 1


async def test_a_trigger_started_past_its_deadline_polls_once(mock_service: Any) -> None:
    details = mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "completed")))
    route_finish(mock_service)
    payload = await first_event(make(deadline=time.time() - 60))
    assert payload["status"] == "success"
    assert details.call_count == 1


async def test_on_kill_respects_cancel_on_kill(mock_service: Any, task_state: Any) -> None:
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    trigger = make(cancel_on_kill=False)
    task_state(trigger)
    await trigger.on_kill()
    assert cancel.call_count == 0


async def test_the_trigger_never_blocks(mock_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("blocking call inside the trigger")

    monkeypatch.setattr(time, "sleep", forbidden)
    monkeypatch.setattr(
        "airflow_provider_workflowsvc.hooks.workflowsvc.WorkflowServiceHook.__init__", forbidden
    )
    monkeypatch.setattr("airflow.sdk.BaseHook.get_connection", forbidden)
    mock_service.get("/jobs/j1/details").mock(
        side_effect=[ok(details_json("j1", "in progress")), ok(details_json("j1", "completed"))]
    )
    route_finish(mock_service)
    assert (await first_event(make()))["status"] == "success"


async def test_one_http_client_for_the_whole_wait(mock_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    created = []
    original = httpx.AsyncClient.__init__

    def counting(self: httpx.AsyncClient, *args: Any, **kwargs: Any) -> None:
        created.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "__init__", counting)
    running = ok(details_json("j1", "in progress"))
    mock_service.get("/jobs/j1/details").mock(
        side_effect=[running] * 5 + [ok(details_json("j1", "completed"))]
    )
    route_finish(mock_service)
    await first_event(make())
    assert len(created) == 1


# --------------------------------------------------------------------------------------------------
# end_on_success (the sensor started in the triggerer): a job that passes ends the task here


async def last_event(trigger: WorkflowJobTrigger) -> Any:
    return await asyncio.wait_for(trigger.run().__anext__(), 10)


def summary_of(event: Any, *, fail_on_failed_files: bool = True) -> dict[str, Any]:
    from airflow_provider_workflowsvc.wait.outcome import parse_event

    return parse_event(event.payload).summary(fail_on_failed_files=fail_on_failed_files)


@pytest.mark.parametrize(
    ("fail_on_failed_files", "push_summary"), [(True, True), (False, True), (True, False)]
)
async def test_a_passing_job_ends_the_task_in_the_triggerer(
    mock_service: Any, fail_on_failed_files: bool, push_summary: bool
) -> None:
    from airflow.triggers.base import TaskSuccessEvent
    from airflow.utils.state import TaskInstanceState

    failed = [] if fail_on_failed_files else [("x.bin", "unsupported")]
    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "completed", "done")))
    route_finish(mock_service, failed=failed, outputs=[("a.txt", "n1")])
    flags = {"fail_on_failed_files": fail_on_failed_files, "push_summary": push_summary}
    event = await last_event(make(end_on_success=True, **flags))
    assert isinstance(event, TaskSuccessEvent)
    assert event.task_instance_state == TaskInstanceState.SUCCESS
    assert event.xcoms is not None
    assert event.xcoms["job_id"] == "j1"
    if not push_summary:
        assert set(event.xcoms) == {"job_id"}
        return
    summary = event.xcoms["return_value"]
    assert json.loads(json.dumps(summary)) == summary  # the triggerer stores it as JSON
    assert (summary["job_id"], summary["workflow_id"]) == ("j1", FAKE_WORKFLOW_ID)
    assert summary["status"] == "completed"
    assert summary["outcome"] == "success"
    assert summary["output_files"] == [{"file_id": "a.txt", "node_id": "n1", "document": "docs/a.txt"}]
    assert summary["failed_file_count"] == len(failed)
    # the same summary the default trigger's event gives the task (bar the times, read later)
    plain_event = await last_event(make(fail_on_failed_files=fail_on_failed_files))
    plain = summary_of(plain_event, fail_on_failed_files=fail_on_failed_files)
    timings = {"elapsed_seconds": None, "job_seconds": None}
    assert {**summary, **timings} == {**plain, **timings}


@pytest.mark.parametrize(
    ("status", "failed", "verdict"),
    [
        ("completed", [("x.bin", "unsupported")], "success"),  # failed files fail the task (default)
        ("failed", [("x.pdf", "bad pdf")], "failed"),
        ("stopped", [], "stopped"),
    ],
)
async def test_any_other_outcome_resumes_the_task_in_a_worker(
    mock_service: Any, status: str, failed: list[tuple[str, str]], verdict: str
) -> None:
    from airflow.triggers.base import BaseTaskEndEvent

    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", status, "it broke")))
    route_finish(mock_service, status, failed=failed)
    event = await last_event(make(end_on_success=True))
    assert not isinstance(event, BaseTaskEndEvent)
    assert event.payload["status"] == verdict
    assert len(event.payload["failed_files"]) == len(failed)


async def test_a_timeout_or_an_error_resumes_the_task_in_a_worker(mock_service: Any) -> None:
    from airflow.triggers.base import BaseTaskEndEvent

    details = mock_service.get("/jobs/j1/details")
    details.mock(return_value=ok(details_json("j1", "in progress")))
    route_record(mock_service)
    event = await last_event(make(end_on_success=True, deadline=time.time() + 0.3, poll_interval=0.1))
    assert not isinstance(event, BaseTaskEndEvent)
    assert event.payload["status"] == "timeout"
    details.mock(return_value=httpx.Response(404, json={"detail": "no such job"}))
    event = await last_event(make(end_on_success=True))
    assert not isinstance(event, BaseTaskEndEvent)
    assert event.payload["status"] == "error"


async def test_by_default_a_passing_job_still_resumes_the_task(mock_service: Any) -> None:
    from airflow.triggers.base import BaseTaskEndEvent

    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "completed")))
    route_finish(mock_service)
    trigger = make()
    assert trigger.serialize()[1]["end_on_success"] is False
    event = await last_event(trigger)
    assert not isinstance(event, BaseTaskEndEvent)
    assert event.payload["status"] == "success"
