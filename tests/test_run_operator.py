"""RunWorkflowOperator against a respx-mocked service: submit, reconcile, wait, fail, defer, resume."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from airflow.sdk.exceptions import TaskDeferred
from helpers import FAKE_WORKFLOW_ID, TaskStateStore, details_json, failed_json, job_json

from airflow_provider_workflowsvc._tasks.submit import AmbiguousRunError
from airflow_provider_workflowsvc.exceptions import (
    InvalidJobEventError,
    InvalidTaskInputError,
    WorkflowJobError,
    WorkflowJobFailedError,
    WorkflowJobTimeoutError,
    WorkflowServiceError,
    WorkflowServiceInputError,
    WorkflowServiceValidationError,
)
from airflow_provider_workflowsvc.operators._lifecycle import DELIVERED_KEY
from airflow_provider_workflowsvc.operators.jobs import RunWorkflowOperator, WorkflowJobLink, job_url
from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger

WF = FAKE_WORKFLOW_ID
OTHER_WF = "6d1f0a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
SRC = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
RUN = f"/workflows/{WF}/run"
LINK_KEY = WorkflowJobLink().xcom_key


class FakeTI:
    def __init__(self, pulls: dict[tuple[str, str], Any] | None = None) -> None:
        self.pushed: dict[str, Any] = {}
        self.pulls = pulls or {}
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.pulls.get((task_ids, key))


def ctx(store: TaskStateStore | None = None) -> Any:
    return {"ti": FakeTI(), "task_state_store": store}


def ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json=data)


def op(**kwargs: Any) -> RunWorkflowOperator:
    args: dict[str, Any] = {"task_id": "run", "workflow_id": WF, "poll_interval": 0.01, "deferrable": False}
    return RunWorkflowOperator(**{**args, **kwargs})


@pytest.fixture
def mock_service(mock_service: Any) -> Any:
    """The conftest's router, with the workflow record (a local source: a run of files reads it first)."""
    mock_service.get(f"/workflows/{WF}").respond(json=workflow_json())
    return mock_service


def workflow_json(name: str = "local", wid: str = WF, sources: Any = ()) -> dict[str, Any]:
    return {"id": wid, "name": name, "workflow_type": "basic", "sources": list(sources), "destinations": []}


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    sleeps: list[float] = []
    monkeypatch.setattr(
        "airflow_provider_workflowsvc._tasks.submit.time", SimpleNamespace(sleep=sleeps.append)
    )
    return sleeps


def route_job(
    router: Any, job_id: str, status: str = "completed", failed: Any = (), message: str = ""
) -> None:
    """Answers for polling ``job_id`` until it has ``status``."""
    router.get(f"/jobs/{job_id}/details").mock(
        side_effect=[ok(details_json(job_id, "in progress"))]
        + [ok(details_json(job_id, status, message))] * 5
    )
    router.get(f"/jobs/{job_id}").mock(return_value=ok(job_json(job_id, status, outputs=[("f1", "n1")])))
    router.get(f"/jobs/{job_id}/failed-files").mock(return_value=ok(failed_json(*failed)))
    route_output(router, job_id, "a.txt")


def route_output(router: Any, job_id: str, document: str) -> Any:
    """Every output of ``job_id``, made from ``document`` (its elements name it)."""
    element = {"type": "Title", "element_id": "e1", "text": "A", "metadata": {"filename": document}}
    return router.get(f"/jobs/{job_id}/download").mock(return_value=ok([element]))


def route_run(router: Any, *runs: Any, listings: Any = ([],)) -> tuple[Any, Any]:
    listing = router.get("/jobs/", params={"workflow_id": WF}).mock(side_effect=[ok(x) for x in listings])
    run = router.post(RUN).mock(side_effect=list(runs))
    return run, listing


# -- input files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("files", [[], "", "   ", "missing.txt", "*.nothing", "empty_dir"])
def test_bad_file_lists_fail_before_any_request(
    mock_service: Any, tmp_path: Any, files: Any, monkeypatch: Any
) -> None:
    (tmp_path / "empty_dir").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkflowServiceInputError, match="files"):
        op(files=files).execute(ctx())
    assert not mock_service.calls


def test_files_expand_directories_globs_and_rendered_lists(tmp_path: Any) -> None:
    from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files

    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/b.txt", "d/a.md", "d/sub/c.csv", "d/.hidden", "x.json", "y.json"):
        (tmp_path / name).write_text("text")
    got = resolve_named_files([str(tmp_path / "d"), str(tmp_path / "*.json"), str(tmp_path / "x.json")])
    assert [p.removeprefix(str(tmp_path) + "/") for p, _ in got] == [
        "d/a.md",
        "d/b.txt",
        "d/sub/c.csv",
        "x.json",
        "y.json",
    ]
    assert resolve_named_files(repr([str(tmp_path / "x.json")])) == [(str(tmp_path / "x.json"), "x.json")]


# -- submit and reconcile ---------------------------------------------------------------------------


def test_deferrable_run_defers_with_the_job_and_pushes_the_link_first(
    mock_service: Any, tmp_path: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a.txt").write_text("hello")
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))
    context = ctx()
    started = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        op(files=str(tmp_path), deferrable=True, timeout=600, poll_interval=7, cancel_on_kill=False).execute(
            context
        )
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkflowJobTrigger)
    assert deferred.value.method_name == "execute_complete"
    _, kwargs = trigger.serialize()
    assert kwargs["job_id"] == "j1"
    assert kwargs["poll_interval"] == 7
    assert kwargs["cancel_on_kill"] is False
    assert kwargs["workflowsvc_conn_id"] == "workflowsvc_default"
    assert started + 600 <= kwargs["deadline"] <= time.time() + 600
    said = capfd.readouterr().out + caplog.text
    assert "Waiting in the triggerer (needs a running triggerer with this provider installed" in said
    assert "'Deferrable tasks'" in said, "where the docs say how to see a triggerer is missing"
    assert context["ti"].pushed == {"job_id": "j1", LINK_KEY: ""}, "no ui_url: no link to the API record"
    assert run.call_count == 1
    body = run.calls[0].request.content
    assert b'name="input_files"; filename="a.txt"' in body, "the user's own name (mark_uploads=False)"


def new_job(
    job_id: str, files: Any = ("a.txt",), *, age: float = 0.0, status: str = "scheduled"
) -> dict[str, Any]:
    """A job record created ``age`` seconds ago that lists ``files`` (platform dialect; None: spec)."""
    created = datetime.fromtimestamp(time.time() - age, tz=timezone.utc).isoformat()
    data = job_json(job_id, status, created_at=created)
    if files is not None:
        data["input_file_ids"] = list(files)
    return data


_SENT_NAME = re.compile(rb'filename="([^"]+)"')


def names_sent(run: Any) -> list[str]:
    """The file names of the last run request (each with its try-unique marker)."""
    return [m.decode() for m in _SENT_NAME.findall(run.calls.last.request.content)]


def our_job(run: Any, job_id: str = "j1", **kwargs: Any) -> Any:
    """A job of the run ``run`` sent (its record lists the names sent), built once it was sent."""
    return lambda: new_job(job_id, names_sent(run), **kwargs)


def _spelled(status: str) -> str:
    return {"im progress": "in progress"}.get(
        status.lower().replace("_", " "), status.lower().replace("_", " ")
    )


def route_listings(router: Any, sleeps: list[float], *rounds: Any) -> Any:
    """
    The workflow's jobs, round by round (a round ends with each pause of the search; the last
    repeats); a job may be given as a callable (built when listed). Each ``status`` filter is applied.
    """

    def answer(request: httpx.Request) -> httpx.Response:
        jobs = rounds[min(len(sleeps), len(rounds) - 1)]
        built = [job() if callable(job) else job for job in jobs]
        wanted = request.url.params.get("status")
        return ok([j for j in built if wanted is None or _spelled(j["status"]) == _spelled(wanted)])

    return router.get("/jobs/", params={"workflow_id": WF}).mock(side_effect=answer)


@pytest.fixture
def a_file(tmp_path: Any) -> str:
    path = tmp_path / "a.txt"
    path.write_text("a")
    return str(path)


def test_run_response_without_a_job_finds_its_own(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    old = job_json("old", "completed")
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(202, json={"ok": True})])
    listing = route_listings(mock_service, no_backoff, [old], [old], [old, our_job(run)])
    route_job(mock_service, "j1")
    assert op(files=a_file, mark_uploads=True).execute(ctx())["job_id"] == "j1"
    assert run.call_count == 1
    assert {r.request.url.params.get("status") for r in listing.calls} <= {
        "scheduled",
        "im progress",
        "SCHEDULED",
        "IN_PROGRESS",
    }, "only the active jobs are read while the job is found among them"


@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(502),
        httpx.Response(504),
        httpx.RemoteProtocolError("dropped"),
        httpx.ReadTimeout("slow"),
        httpx.Response(202, json={"id": "j1", "status": "scheduled", "created_at": "the 24th at ten"}),
    ],
    ids=["502", "504", "dropped", "read-timeout", "unreadable-2xx"],
)
def test_ambiguous_failure_adopts_only_the_job_with_its_marker(
    mock_service: Any, no_backoff: list[float], failure: Any, a_file: str
) -> None:
    """Another client's jobs appearing in the window are ignored, even one whose file has the same
    name (``a.txt``) or another run's marker; this run's (its marker) is adopted."""
    same_name = new_job("same-name", ["a.txt"])
    other_marker = new_job("other", ["a__wfsvc-0123456789abcdef.txt"])
    run = mock_service.post(RUN).mock(side_effect=[failure])
    route_listings(mock_service, no_backoff, [], [same_name], [same_name, other_marker, our_job(run)])
    route_job(mock_service, "j1")
    assert op(files=a_file, mark_uploads=True).execute(ctx())["job_id"] == "j1"
    assert run.call_count == 1


def test_a_job_with_the_same_file_names_is_never_adopted(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """Scenario (same-named files, unit): the run's answer is lost before the service processed it;
    another client's run of ``a.txt`` is new and in the window. It is not this run's, and nothing
    proves the run was not processed: the task fails as ambiguous and the run is not sent again."""
    route_listings(mock_service, no_backoff, [new_job("theirs", ["a.txt"])])
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502), ok(new_job("j1"))])
    store = TaskStateStore()
    with pytest.raises(AmbiguousRunError, match=r"not sent again.*__wfsvc-") as error:
        op(files=a_file, run_grace_period=3, mark_uploads=True).execute(ctx(store))
    assert "theirs" not in str(error.value)
    assert run.call_count == 1
    assert store.values["workflowsvc_pending_run"]["marker"] in names_sent(run)[0], "the record stays"


@pytest.mark.parametrize("status", [429, 503])
def test_refusals_are_sent_again_without_a_search(
    mock_service: Any, no_backoff: list[float], status: int
) -> None:
    """429 and 503 prove the request was not processed: no job search, the run is sent after the pause."""
    listing = route_listings(mock_service, no_backoff, [])
    refusal = httpx.Response(status, headers={"retry-after": "3"})
    run = mock_service.post(RUN).mock(side_effect=[refusal, ok(new_job("j1"))])
    route_job(mock_service, "j1")
    assert op().execute(ctx())["job_id"] == "j1"
    assert run.call_count == 2
    assert listing.call_count == 0
    assert no_backoff == [3.0]  # the server's Retry-After


def test_a_500_is_never_sent_again(mock_service: Any, no_backoff: list[float], a_file: str) -> None:
    """A 500 does not prove the run was refused: its job is looked for, and when none is found the
    task fails as ambiguous with the pending-run record kept (never a second run request)."""
    route_listings(mock_service, no_backoff, [])
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(500)] * 2)
    store = TaskStateStore()
    with pytest.raises(AmbiguousRunError, match="500"):
        op(files=a_file, submit_attempts=2, run_grace_period=1).execute(ctx(store))
    assert run.call_count == 1
    assert "workflowsvc_pending_run" in store.values


def test_two_jobs_with_its_marker_are_never_guessed(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    route_listings(mock_service, no_backoff, [], [our_job(run, "j1"), our_job(run, "j2")])
    with pytest.raises(AmbiguousRunError, match="j1, j2") as error:
        op(files=a_file, mark_uploads=True).execute(ctx())
    assert "workflowsvc_pending_run" in str(error.value)
    assert "clear this task" in str(error.value)
    assert run.call_count == 1


def test_a_job_whose_record_lists_no_files_is_never_adopted(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """Spec dialect: a lone new job in the window is not proof (another client may have run it). The
    listing may leave fields out: the job's own record is read, and lists no files either."""
    route_listings(mock_service, no_backoff, [], [new_job("j1", None)])
    record = mock_service.get("/jobs/j1").mock(return_value=ok(new_job("j1", None)))
    run = mock_service.post(RUN).mock(side_effect=[httpx.RemoteProtocolError("dropped")])
    with pytest.raises(AmbiguousRunError, match=r"j1.*no input_file_ids"):
        op(files=a_file, mark_uploads=True).execute(ctx())
    assert run.call_count == 1
    assert record.call_count == 1


def test_history_listed_last_stays_outside_the_window_an_earlier_listing_read(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """The service's clock is read from every listing of the search and the largest reading kept (each
    is a lower bound): the workflow's history, listed at the end (a job of an hour ago whose record
    lists no files), is not placed in the window the active listing read (another run's job, made just
    now). Nothing of it is read, and the task, its run not found, fails closed without naming it."""
    history = new_job("history-job", None, age=3600, status="completed")
    route_listings(mock_service, no_backoff, [new_job("theirs", ["b__wfsvc-0123456789abcdef.txt"]), history])
    record = mock_service.get("/jobs/history-job").mock(return_value=ok(history))
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    with pytest.raises(AmbiguousRunError, match="no job of this task's run") as error:
        op(files=a_file, mark_uploads=True, run_grace_period=1).execute(ctx())
    assert "history-job" not in str(error.value)
    assert record.call_count == 0
    assert run.call_count == 1


def test_a_listing_without_file_ids_is_completed_from_the_job_record(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """The listing leaves ``input_file_ids`` out but the job record has them: the record proves it."""
    route_listings(mock_service, no_backoff, [], [new_job("j1", None)])
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(504)])
    route_job(mock_service, "j1")
    mock_service.get("/jobs/j1").mock(
        side_effect=lambda request: ok({**new_job("j1", names_sent(run)), "status": "completed"})
    )
    assert op(files=a_file, mark_uploads=True).execute(ctx())["job_id"] == "j1"


def other_runs_and_ours(
    run: Any, ours_age: float, count: int = 40, others_age: float = 0.0
) -> tuple[list[Any], Any]:
    """
    ``count`` jobs of other runs made over two seconds ending ``others_age`` seconds ago, and this run's
    made ``ours_age`` seconds before the listing; the listing shows no input files; each record
    (``GET /jobs/{id}``) does, counted.
    """
    others = {
        f"other-{i}": new_job(f"other-{i}", None, age=others_age + 2.0 * i / count) for i in range(count)
    }
    records = {
        job_id: {**job, "input_file_ids": [f"o{i}__wfsvc-{i:016x}.txt"]}
        for i, (job_id, job) in enumerate(others.items())
    }

    def record(request: httpx.Request, job_id: str) -> httpx.Response:
        if job_id == "j1":
            return ok(new_job("j1", names_sent(run), age=ours_age, status="completed"))
        return ok(records[job_id])

    listing = [*others.values(), lambda: new_job("j1", None, age=ours_age)]
    return listing, record


def test_proving_a_lost_answer_reads_few_records_however_many_runs_went_with_it(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """Issue #31: 40 other runs' jobs appeared with this run's and the listing leaves files out: the
    records made closest to the run's answer are read first; its own is the first (a marked run: only a
    marker makes a record proof)."""
    from airflow_provider_workflowsvc._tasks.evidence import PROOF_READS

    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    # the others well before the run: how long a busy machine takes between the failed answer and the
    # listing must not decide which record is closest (ours is dated at the listing)
    listing, record = other_runs_and_ours(run, ours_age=0.0, others_age=5.0)
    route_listings(mock_service, no_backoff, listing)
    records = mock_service.get(path__regex=r"/jobs/(?P<job_id>[^/]+)$").mock(side_effect=record)
    route_job(mock_service, "j1")
    assert op(files=a_file, mark_uploads=True).execute(ctx())["job_id"] == "j1"
    reads = [r.request.url.path.rsplit("/", 1)[-1] for r in records.calls]
    assert reads[0] == "j1", reads
    assert len([r for r in reads if r != "j1"]) <= PROOF_READS


def test_a_proof_that_needs_many_reads_still_adopts_its_own_job(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """Issue #43 (4): this run's job was made long before its answer came back (held, late): the 40
    records closest in time are others'. Every active job of the send window may be this run's and
    only its record tells: each is read once, and the task adopts its own (it failed closed past
    PROOF_READS before)."""
    from airflow_provider_workflowsvc._tasks.evidence import PROOF_READS

    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    listing, record = other_runs_and_ours(run, ours_age=1.9)
    route_listings(mock_service, no_backoff, listing)
    records = mock_service.get(path__regex=r"/jobs/(?P<job_id>[^/]+)$").mock(side_effect=record)
    route_job(mock_service, "j1")
    assert op(files=a_file, run_grace_period=1, mark_uploads=True).execute(ctx())["job_id"] == "j1"
    reads = [r.request.url.path.rsplit("/", 1)[-1] for r in records.calls]
    searched = reads[: reads.index("j1") + 1]
    assert len(searched) == len(set(searched)), "each record once"
    assert len(searched) > PROOF_READS, "the closest records were others': the search went on past them"
    assert run.call_count == 1


def test_records_of_jobs_not_listed_active_are_read_at_most_proof_reads(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """The run made no job, and 40 jobs of the send window had ended before they were looked for
    (listed among the ended only, their files left out): PROOF_READS of their records are read, and
    the task fails closed naming those it could not rule out."""
    from airflow_provider_workflowsvc._tasks.evidence import PROOF_READS

    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    ended = [new_job(f"other-{i}", None, age=2.0 * i / 40, status="completed") for i in range(40)]
    route_listings(mock_service, no_backoff, ended)
    records = mock_service.get(path__regex=r"/jobs/(?P<job_id>[^/]+)$").mock(
        side_effect=lambda request, job_id: ok(
            {**new_job(job_id, None, status="completed"), "input_file_ids": [f"{job_id}__wfsvc-{0:016x}.txt"]}
        )
    )
    with pytest.raises(AmbiguousRunError, match=r"other-") as error:
        op(files=a_file, run_grace_period=1, mark_uploads=True).execute(ctx())
    assert records.call_count == PROOF_READS
    read = {r.request.url.path.rsplit("/", 1)[-1] for r in records.calls}
    named = set(re.findall(r"other-\d+", str(error.value)))
    assert named == {job["id"] for job in ended} - read, "the jobs whose records were read are ruled out"
    assert run.call_count == 1


def test_a_job_that_ended_before_it_was_looked_for_is_found_among_the_ended(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """A fast job has ended before the first look: the active jobs never show it, the ended ones
    (read once, at the end of the grace period) do."""
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(504)])
    listing = route_listings(mock_service, no_backoff, [our_job(run, status="completed")])
    route_job(mock_service, "j1")
    assert op(files=a_file, run_grace_period=2, mark_uploads=True).execute(ctx())["job_id"] == "j1"
    statuses = [r.request.url.params.get("status") for r in listing.calls]
    assert statuses.count("completed") + statuses.count("COMPLETED") == 1, "the ended jobs are read once"


def test_an_error_before_sending_leaves_no_pending_record(mock_service: Any, tmp_path: Any) -> None:
    """A run that never left (its file vanished between the check and the send) removes the record
    written for it: a retry must not look for (or adopt) a job of a run that never happened."""
    path = tmp_path / "a.txt"
    path.write_text("a")
    route_listings(mock_service, [])
    run = mock_service.post(RUN).mock(side_effect=[ok(new_job("j1"))])
    store = TaskStateStore()
    task = op(files=str(path))

    def vanished(*args: Any, **kwargs: Any) -> Any:
        raise WorkflowServiceInputError("input file 'a.txt' does not exist")

    task.hook.run_workflow = vanished  # type: ignore[method-assign]
    with pytest.raises(WorkflowServiceInputError):
        task.execute(ctx(store))
    assert store.values == {}
    assert run.call_count == 0


def test_success_needs_the_job_record_to_agree(mock_service: Any, a_file: str) -> None:
    """The details say completed, but the job record read right after still says in progress: the
    wait goes on until the record agrees (never success from the details alone)."""
    route_listings(mock_service, [])
    mock_service.post(RUN).mock(side_effect=[ok(new_job("j1"))])
    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "completed")))
    record = mock_service.get("/jobs/j1").mock(
        side_effect=[ok(job_json("j1", "in progress")), ok(job_json("j1", "completed", outputs=[("f", "n")]))]
    )
    mock_service.get("/jobs/j1/failed-files").mock(return_value=ok(failed_json()))
    route_output(mock_service, "j1", "a.txt")
    result = op(files=a_file).execute(ctx())
    assert result["status"] == "completed"
    assert result["output_files"] == [{"file_id": "f", "node_id": "n", "document": "a.txt"}]
    assert record.call_count == 2


def test_a_refused_run_is_not_reconciled(mock_service: Any) -> None:
    mock_service.get(f"/workflows/{WF}").respond(json=workflow_json(sources=[SRC]))
    run, listing = route_run(mock_service, httpx.Response(422, json={"detail": "bad workflow"}))
    with pytest.raises(WorkflowServiceValidationError, match="bad workflow"):
        op().execute(ctx())
    assert run.call_count == 1
    assert listing.call_count == 0, "a refusal proves no job: nothing is looked for (and no snapshot is read)"


def test_a_refused_run_still_has_its_link_xcom_so_airflow_logs_no_error(mock_service: Any) -> None:
    mock_service.get(f"/workflows/{WF}").respond(json=workflow_json(sources=[SRC]))
    route_run(mock_service, httpx.Response(422, json={"detail": "bad workflow"}))
    context = ctx()
    with pytest.raises(WorkflowServiceValidationError):
        op().execute(context)
    assert context["ti"].pushed == {LINK_KEY: ""}  # the task runner reads it when the task ends


# -- which workflow, and whether the input fits it ---------------------------------------------------


def test_files_for_a_workflow_with_a_source_fail_before_anything_is_uploaded(
    mock_service: Any, a_file: str
) -> None:
    mock_service.get(f"/workflows/{WF}").respond(json=workflow_json(sources=[SRC]))
    mock_service.get(f"/sources/{SRC}").respond(
        json={"id": SRC, "name": "reports-bucket", "type": "s3", "config": {"remote_url": "s3://r/"}}
    )
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))

    with pytest.raises(InvalidTaskInputError) as raised:
        op(files=a_file).execute(ctx())

    assert run.call_count == 0
    assert str(raised.value) == (
        f"local files cannot be run on workflow 'local' ({WF}): it has the source connector "
        f"'reports-bucket' (s3, {SRC}), which the service reads its input from. To run local files, "
        "declare the workflow without source_id (CreateWorkflowOperator(source_id=None, "
        "if_exists='update') removes it), or run it without files"
    )


@pytest.mark.parametrize("mark_uploads", [False, True])
def test_two_inputs_sent_under_one_name_fail_before_anything_is_uploaded(
    mock_service: Any, tmp_path: Any, mark_uploads: bool
) -> None:
    """
    Issue #43 item 2: day1/ and day2/ both hold report.txt. The service knows a job's files by name
    only: the run is refused before any upload, naming both (a marker is the same in every name of a
    run, so marked names collide too); from their common folder the names differ and the run is sent.
    """
    for day in ("day1", "day2"):
        (tmp_path / day).mkdir()
        (tmp_path / day / "report.txt").write_text(day)
    (tmp_path / "day1" / "notes.txt").write_text("notes")
    run, _ = route_run(mock_service, ok(job_json("j1", "completed")))
    files = [f"{tmp_path / 'day1'}/", f"{tmp_path / 'day2'}/"]
    with pytest.raises(InvalidTaskInputError) as raised:
        op(files=files, mark_uploads=mark_uploads).execute(ctx())
    assert run.call_count == 0
    day1, day2 = (tmp_path / day / "report.txt" for day in ("day1", "day2"))
    assert f"'report.txt' from {day1} and {day2}" in str(raised.value)
    assert "Nothing was uploaded" in str(raised.value)
    route_job(mock_service, "j1", "completed")
    op(files=str(tmp_path), mark_uploads=mark_uploads).execute(ctx())
    assert run.call_count == 1


def test_no_files_for_a_workflow_without_a_source_explain_the_refusal(mock_service: Any) -> None:
    run, _ = route_run(mock_service, httpx.Response(422, json={"detail": "send input_files"}))

    with pytest.raises(InvalidTaskInputError, match="has no source connector") as raised:
        op().execute(ctx())

    assert run.call_count == 1  # nothing was uploaded: the body was empty
    assert "give files=" in str(raised.value)
    assert isinstance(raised.value.__cause__, WorkflowServiceValidationError)


def test_run_by_name_runs_the_one_workflow_of_that_name(mock_service: Any, a_file: str) -> None:
    listing = mock_service.get("/workflows/").mock(
        side_effect=[ok([workflow_json(), workflow_json("local-2", OTHER_WF)]), ok([])]
    )
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1")

    summary = op(workflow_id=None, workflow_name="local", files=a_file).execute(ctx())

    assert listing.calls[0].request.url.params["name"] == "local"
    assert run.call_count == 1
    assert summary["workflow_id"] == WF
    assert not [
        c
        for c in mock_service.calls
        if c.request.method in ("POST", "PUT") and "/run" not in str(c.request.url)
    ]


@pytest.mark.parametrize(
    ("found", "message"),
    [
        ([], "no workflow is named 'local'; RunWorkflowOperator never creates one"),
        (
            [workflow_json(), workflow_json(wid=OTHER_WF)],
            f"2 workflows are named 'local' \\({WF}, {OTHER_WF}\\)",
        ),
    ],
)
def test_run_by_name_fails_on_none_or_several_and_creates_nothing(
    mock_service: Any, found: Any, message: str
) -> None:
    mock_service.get("/workflows/").mock(side_effect=[ok(found), ok([])])
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))

    with pytest.raises(WorkflowServiceError, match=message):
        op(workflow_id=None, workflow_name="local").execute(ctx())

    assert run.call_count == 0
    assert {c.request.method for c in mock_service.calls} == {"GET"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workflow_id": None}, "exactly one of workflow_id and workflow_name .*got neither"),
        ({"workflow_name": "local"}, "exactly one of workflow_id and workflow_name .*got both"),
        ({"workflow_id": None, "workflow_name": " "}, "workflow_name must not be empty"),
    ],
)
def test_workflow_id_or_name_exactly_one_at_parse_time(kwargs: Any, message: str) -> None:
    with pytest.raises(WorkflowServiceInputError, match=message):
        op(**kwargs)


def test_the_declared_source_is_checked_at_parse_time() -> None:
    from airflow.sdk import DAG

    from airflow_provider_workflowsvc.operators.workflows import CreateWorkflowOperator

    with DAG("declared", schedule=None):
        remote = CreateWorkflowOperator(task_id="remote", name="r", workflow_type="basic", source_id=SRC)
        local = CreateWorkflowOperator(task_id="local", name="l", workflow_type="basic")
        with pytest.raises(WorkflowServiceInputError, match="task 'remote', which declares a source"):
            op(task_id="files_on_remote", workflow_id=remote.output, files="in/*.pdf")
        with pytest.raises(WorkflowServiceInputError, match="task 'local', which declares no source"):
            op(task_id="nothing_on_local", workflow_id=local.output)
        op(task_id="remote_ok", workflow_id=remote.output)
        op(task_id="local_ok", workflow_id=local.output, files="in/*.pdf")


# -- waiting and outcomes ---------------------------------------------------------------------------


def test_success_returns_the_summary_and_forgets_the_job(mock_service: Any, capsys: Any) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1", message="done")
    store = TaskStateStore()
    context = ctx(store)
    summary = op().execute(context)
    assert summary == {
        "job_id": "j1",
        "workflow_id": WF,
        "status": "completed",
        "outcome": "success",
        "message": "done",
        "node_stats": [],
        "failed_file_count": 0,
        "failed_files": [],
        "output_files": [{"file_id": "f1", "node_id": "n1", "document": "a.txt"}],
        "elapsed_seconds": summary["elapsed_seconds"],
        "job_seconds": summary["job_seconds"],
        "job_seconds_from": "created_at",  # the record (spec dialect) has no runtime
        "started_by_task": True,
    }
    assert summary["job_seconds"] > 3600  # created_at is 2026-01-01: the job's time, not the wait's
    assert summary["elapsed_seconds"] < summary["job_seconds"]  # the wait's own time, not the job's
    assert context["ti"].pushed["job_id"] == "j1"
    assert store.values == {}  # stored during the wait, dropped after success
    out = capsys.readouterr().out
    assert "Submitted job j1" in out
    assert "the job ran at most " in out
    assert " s (its created_at to the read that saw it end), the wait took " in out
    assert "tok-unit" not in out
    assert "key-unit" not in out


@pytest.mark.parametrize("status", ["failed", "stopped"])
def test_failed_or_stopped_job_fails_with_its_message(mock_service: Any, status: str) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1", status, message="source unreachable")
    context = ctx()
    with pytest.raises(WorkflowJobFailedError, match="source unreachable") as err:
        op().execute(context)
    assert "j1" in str(err.value)
    assert context["ti"].pushed["return_value"]["status"] == status


def test_failed_files_fail_the_task_listing_documents(mock_service: Any, capsys: Any) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    failed = [(f"doc{i}.pdf", f"error {i}") for i in range(7)]
    route_job(mock_service, "j1", failed=failed)
    context = ctx()
    with pytest.raises(WorkflowJobFailedError) as err:
        op().execute(context)
    text = str(err.value)
    assert "7 file(s) failed" in text
    assert "doc0.pdf: error 0" in text
    assert "doc4.pdf" in text
    assert "doc5.pdf" not in text
    assert "and 2 more" in text
    summary = context["ti"].pushed["return_value"]
    assert len(summary["failed_files"]) == 7
    assert (summary["outcome"], summary["status"]) == ("failed_files", "completed"), (
        "outcome is the task's verdict (an all_done branch reads it); status stays the job's"
    )
    assert "doc6.pdf: error 6" in capsys.readouterr().out


def test_deferred_failed_files_summary_says_failed_files(mock_service: Any) -> None:
    context = ctx()
    failed = [{"document": "2024/report.txt", "error": "file is empty"}]
    with pytest.raises(WorkflowJobFailedError, match=r"2024/report\.txt: file is empty"):
        op().execute_complete(context, event(job_status="completed with failed files", failed_files=failed))
    assert context["ti"].pushed["return_value"]["outcome"] == "failed_files"


def test_failed_files_can_be_tolerated(mock_service: Any) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1", failed=[("x.bin", "unsupported")])
    summary = op(fail_on_failed_files=False).execute(ctx())
    assert summary["failed_file_count"] == 1
    assert summary["outcome"] == "success"


def test_timeout_is_the_one_set_and_the_summary_names_the_workflow(mock_service: Any, capsys: Any) -> None:
    """``timeout=4`` waits 4 s, not 3.0 (issue #15), polling no more than that allows; the workflow id
    is known."""
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    details = mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "in progress")))
    mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    context = ctx()
    with pytest.raises(WorkflowJobTimeoutError) as err:
        op(timeout=4, poll_interval=1).execute(context)
    summary = context["ti"].pushed["return_value"]
    assert summary["elapsed_seconds"] >= 4.0  # a busy machine only makes it later
    assert details.call_count <= 5  # ceil(timeout / poll_interval) + the last poll
    assert str(err.value).startswith(
        f"Workflow Service job j1 did not finish in time: the wait took {summary['elapsed_seconds']:.1f} s, "
        "last status in progress"
    )
    assert (summary["outcome"], summary["workflow_id"], summary["status"]) == ("timeout", WF, "in progress")


@pytest.mark.parametrize(
    ("record", "seconds", "source"),
    [
        ({"runtime": "3.2"}, 3.2, "runtime"),
        ({"runtime": 3.2}, 3.2, "runtime"),
        ({"runtime": "01:02.5"}, 62.5, "runtime"),
        ({"runtime": "soon", "created_at": None}, None, None),
        ({"created_at": None}, None, None),
    ],
)
def test_the_summary_names_the_jobs_own_run_time_and_the_waits(
    mock_service: Any, capsys: Any, record: dict[str, Any], seconds: float | None, source: str | None
) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1")
    mock_service.get("/jobs/j1").mock(return_value=ok({**job_json("j1", "completed"), **record}))

    summary = op().execute(ctx())

    assert (summary["job_seconds"], summary["job_seconds_from"]) == (seconds, source)
    line = next(x for x in capsys.readouterr().out.splitlines() if "finished waiting" in x)
    wait = f"the wait took {summary['elapsed_seconds']:.1f} s"
    shown = "" if seconds is None else f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"
    assert (f"the job ran {shown} s (its runtime), {wait}" if seconds else f"; {wait};") in line


@pytest.mark.parametrize(("cancel", "note"), [(True, "the job was cancelled"), (False, "left running")])
def test_timeout_fails_and_cancels(mock_service: Any, cancel: bool, note: str) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    mock_service.get("/jobs/j1/details").mock(return_value=ok(details_json("j1", "in progress")))
    cancelled = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    with pytest.raises(WorkflowJobTimeoutError) as err:
        op(timeout=0.3, poll_interval=0.05, cancel_on_timeout=cancel).execute(ctx())
    text = str(err.value)
    assert "j1" in text
    assert "in progress" in text
    assert "the wait took " in text
    assert note in text
    assert cancelled.call_count == int(cancel)


def test_wait_for_completion_false_returns_at_once(mock_service: Any) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    context = ctx()
    assert op(wait_for_completion=False).execute(context) == {
        "job_id": "j1",
        "workflow_id": WF,
        "status": "submitted",
        "started_by_task": True,
    }
    assert context["ti"].pushed["job_id"] == "j1"


# -- trigger events ---------------------------------------------------------------------------------


def event(**kwargs: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"status": "success", "job_id": "j1", "workflow_id": WF, "job_status": "completed"}
    return {**base, **kwargs}


def test_execute_complete_accepts_a_good_event(mock_service: Any) -> None:
    good = event(
        output_files=[{"file_id": "f", "node_id": "n"}],
        elapsed=3,
        node_stats=[{"node_name": "p", "success": 1}],
    )
    summary = op().execute_complete(ctx(), good)
    assert summary["output_files"] == [{"file_id": "f", "node_id": "n", "document": None}]
    assert summary["elapsed_seconds"] == 3


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "success",
        {},
        event(status="done"),
        event(job_id=""),
        event(node_stats=[{"node_name": "p", "success": "1"}]),
        event(failed_files=[{"document": 1}]),
        event(surprise=True),
        {k: v for k, v in event().items() if k != "job_id"},
    ],
    ids=[
        "missing",
        "not-a-dict",
        "empty",
        "unknown-status",
        "empty-id",
        "bad-count",
        "bad-file",
        "extra",
        "no-id",
    ],
)
def test_execute_complete_fails_closed(mock_service: Any, bad: Any) -> None:
    with pytest.raises(InvalidJobEventError):
        op().execute_complete(ctx(), bad)


def test_execute_complete_timeout_cancels(mock_service: Any) -> None:
    cancelled = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(409))
    with pytest.raises(WorkflowJobTimeoutError, match="had just ended"):
        op().execute_complete(ctx(), event(status="timeout", job_status="in progress", elapsed=60.0))
    assert cancelled.call_count == 1


def test_execute_complete_error_event_fails(mock_service: Any) -> None:
    with pytest.raises(WorkflowJobError, match="401 Unauthorized"):
        op().execute_complete(
            ctx(), event(status="error", job_status=None, message="GET /jobs/j1 → 401 Unauthorized")
        )


# -- on_kill ----------------------------------------------------------------------------------------


def test_on_kill_cancels_the_running_job(mock_service: Any) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    cancel = mock_service.post("/jobs/j1/cancel").mock(return_value=httpx.Response(200))
    task = op(wait_for_completion=False)
    task.execute(ctx())
    task.on_kill()
    assert cancel.call_count == 1


def test_on_kill_of_an_ended_job_is_quiet(mock_service: Any, capsys: Any) -> None:
    mock_service.post("/jobs/j1/cancel").mock(
        return_value=httpx.Response(409, json={"detail": "already done"})
    )
    task = op()
    task._job_id = "j1"
    task.on_kill()
    assert "already ended" in capsys.readouterr().out


def test_on_kill_without_a_job_sends_nothing(mock_service: Any) -> None:
    op().on_kill()
    assert not mock_service.calls


# -- durable execution ------------------------------------------------------------------------------


def test_retry_reconnects_to_the_running_job(mock_service: Any) -> None:
    run, _ = route_run(mock_service, ok(job_json("new", "scheduled")))
    mock_service.get("/jobs/j0").mock(
        side_effect=[ok(job_json("j0", "im progress"))] + [ok(job_json("j0", "completed"))] * 2
    )
    mock_service.get("/jobs/j0/details").mock(return_value=ok(details_json("j0", "completed")))
    mock_service.get("/jobs/j0/failed-files").mock(return_value=ok(failed_json()))
    store = TaskStateStore(workflowsvc_job_id="j0")
    assert op().execute(ctx(store))["job_id"] == "j0"
    assert run.call_count == 0
    assert store.values == {}


def test_retry_returns_a_job_that_finished_meanwhile(mock_service: Any) -> None:
    run, _ = route_run(mock_service, ok(job_json("new", "scheduled")))
    mock_service.get("/jobs/j0").mock(return_value=ok(job_json("j0", "completed")))
    mock_service.get("/jobs/j0/details").mock(return_value=ok(details_json("j0", "completed")))
    mock_service.get("/jobs/j0/failed-files").mock(return_value=ok(failed_json()))
    summary = op().execute(ctx(TaskStateStore(workflowsvc_job_id="j0")))
    assert summary["job_id"] == "j0"
    assert summary["status"] == "completed"
    assert run.call_count == 0


@pytest.mark.parametrize("previous", ["failed", "stopped", "completed-with-failed-files", "gone"])
def test_retry_after_a_failed_job_runs_again(mock_service: Any, previous: str) -> None:
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1")
    if previous == "gone":
        mock_service.get("/jobs/j0").mock(return_value=httpx.Response(404))
    else:
        status = "completed" if previous.startswith("completed") else previous
        mock_service.get("/jobs/j0").mock(return_value=ok(job_json("j0", status)))
        mock_service.get("/jobs/j0/failed-files").mock(return_value=ok(failed_json(("a.pdf", "bad"))))
    seen: list[Any] = []

    class RecordingStore(TaskStateStore):
        def set(self, key: str, value: Any, **kwargs: Any) -> None:
            seen.append((key, value))
            super().set(key, value)

    store = RecordingStore(workflowsvc_job_id="j0")
    assert op().execute(ctx(store))["job_id"] == "j1"
    assert run.call_count == 1
    assert [v for k, v in seen if k == "workflowsvc_job_id"] == ["j1"]


def cleared_ctx(store: TaskStateStore, max_tries: int) -> Any:
    """A try's context whose task instance carries ``max_tries`` (Airflow raises it at each clear)."""
    context = ctx(store)
    context["ti"].max_tries = max_tries
    return context


def test_a_success_keeps_its_job_marked_with_its_clear(mock_service: Any) -> None:
    route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1")
    store = TaskStateStore()
    assert op().execute(cleared_ctx(store, max_tries=1))["job_id"] == "j1"
    assert store.values == {"workflowsvc_job_id": "j1", DELIVERED_KEY: 1}


def test_a_retry_after_a_success_airflow_did_not_record_goes_on_with_the_job(mock_service: Any) -> None:
    """Airflow failed the try after it delivered (before its success was recorded): no second run."""
    run, _ = route_run(mock_service, ok(job_json("new", "scheduled")))
    route_job(mock_service, "j0")
    store = TaskStateStore(workflowsvc_job_id="j0", **{DELIVERED_KEY: 1})
    assert op().execute(cleared_ctx(store, max_tries=1))["job_id"] == "j0"
    assert run.call_count == 0


def test_a_clear_after_a_success_runs_the_workflow_anew(mock_service: Any) -> None:
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1")
    store = TaskStateStore(workflowsvc_job_id="j0", **{DELIVERED_KEY: 1})
    assert op().execute(cleared_ctx(store, max_tries=3))["job_id"] == "j1"  # cleared at try 2, 1 retry
    assert run.call_count == 1
    assert store.values == {"workflowsvc_job_id": "j1", DELIVERED_KEY: 3}


def test_deferrable_retry_defers_on_the_stored_job(mock_service: Any) -> None:
    run, _ = route_run(mock_service, ok(job_json("new", "scheduled")))
    mock_service.get("/jobs/j0").mock(return_value=ok(job_json("j0", "scheduled")))
    with pytest.raises(TaskDeferred) as deferred:
        op(deferrable=True).execute(ctx(TaskStateStore(workflowsvc_job_id="j0")))
    assert deferred.value.trigger.serialize()[1]["job_id"] == "j0"
    assert run.call_count == 0


@pytest.mark.parametrize(
    ("stored", "goes_on"),
    [
        ("archived-ish", True),
        ("im progress", True),
        ("SCHEDULED", True),
        ("completed", True),
        ("failed", False),
    ],
)
def test_a_stored_job_in_a_status_nobody_knows_is_waited_for_rather_than_run_again(
    mock_service: Any, stored: str, goes_on: bool
) -> None:
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))
    route_job(mock_service, "j1")
    ended = "completed" if goes_on else stored  # the record read when the wait sees the job end
    mock_service.get("/jobs/j0").mock(
        side_effect=[ok(job_json("j0", stored))] + [ok(job_json("j0", ended))] * 3
    )
    mock_service.get("/jobs/j0/details").mock(return_value=ok(details_json("j0", "completed")))
    mock_service.get("/jobs/j0/failed-files").mock(return_value=ok(failed_json()))
    summary = op().execute(ctx(TaskStateStore(workflowsvc_job_id="j0")))
    assert (summary["job_id"], run.call_count) == (("j0", 0) if goes_on else ("j1", 1))


# -- link -------------------------------------------------------------------------------------------


def test_job_url_forms() -> None:
    assert job_url("https://ui.h/", "a/b") == "https://ui.h/jobs/a%2Fb"
    assert job_url("https://ui.h/#/runs/{job_id}/view", "j1") == "https://ui.h/#/runs/j1/view"
    assert job_url("https://u:secret@ui.h", "j1") == "https://ui.h/jobs/j1"
    assert job_url(None, "j1") == job_url("  ", "j1") == "", "no UI known: no link (never the API record)"


def test_link_pushed_only_with_ui_url(mock_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = json.loads(os.environ["AIRFLOW_CONN_WORKFLOWSVC_DEFAULT"])
    task = op()
    context = ctx()
    task._known(context, "j1")
    assert context["ti"].pushed == {"job_id": "j1", LINK_KEY: ""}
    conn["extra"]["ui_url"] = "https://ui.example.com/runs/{job_id}"
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))
    task = op()
    context = ctx()
    task._known(context, "j1")
    assert context["ti"].pushed == {"job_id": "j1", LINK_KEY: "https://ui.example.com/runs/j1"}


def test_operator_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="poll_interval"):
        op(poll_interval=0)
    with pytest.raises(ValueError, match="timeout"):
        op(timeout=-1)
    with pytest.raises(ValueError, match="submit_attempts"):
        op(submit_attempts=0)


# -- input that a retry would not change (issue #15) -------------------------------------------------


def test_missing_file_and_empty_job_id_fail_without_retries(mock_service: Any, tmp_path: Any) -> None:
    from airflow_provider_workflowsvc._compat import AirflowFailException
    from airflow_provider_workflowsvc.operators.jobs import CancelJobOperator

    with pytest.raises(AirflowFailException, match=r"files: '.*nope\.txt' does not exist"):
        op(files=str(tmp_path / "nope.txt")).execute(ctx())
    with pytest.raises(AirflowFailException, match=r"files: the pattern '.*\*\.pdf' matches no files"):
        op(files=str(tmp_path / "*.pdf")).execute(ctx())
    with pytest.raises(AirflowFailException, match=r"^job_id is empty$"):
        CancelJobOperator(task_id="cancel", job_id="").execute(ctx())
    assert not mock_service.calls


def test_skip_if_no_files_skips_only_when_nothing_matches(mock_service: Any, tmp_path: Any) -> None:
    from airflow_provider_workflowsvc._compat import AirflowSkipException

    (tmp_path / "in").mkdir()
    with pytest.raises(
        AirflowSkipException, match=r"match no files: nothing to run \(skip_if_no_files=True\)"
    ):
        op(files=[str(tmp_path / "in" / "*.pdf"), str(tmp_path / "in")], skip_if_no_files=True).execute(ctx())
    with pytest.raises(WorkflowServiceInputError, match="does not exist"):  # a wrong path is no empty inbox
        op(files=str(tmp_path / "missing" / "a.pdf"), skip_if_no_files=True).execute(ctx())
    (tmp_path / "in" / "a.pdf").write_bytes(b"%PDF-1.4")
    run, _ = route_run(mock_service, ok(job_json("j1", "scheduled")))
    task = op(
        files=[str(tmp_path / "in" / "*.txt"), str(tmp_path / "in" / "*.pdf")],
        skip_if_no_files=True,
        wait_for_completion=False,
    )
    assert task.execute(ctx())["job_id"] == "j1", (
        "a pattern matching nothing is tolerated beside one that matches"
    )
    assert b'filename="a.pdf"' in run.calls.last.request.content


def test_run_identity_uses_the_relative_names_sent(tmp_path: Any) -> None:
    """The names sent are the paths relative to the folder, each with the marker before its
    extension; a service that keeps only base names still shows the marker, one that lists other
    files (the same names without the marker among them) does not prove the job."""
    from airflow_provider_workflowsvc._marker import run_marker, unmarked
    from airflow_provider_workflowsvc._tasks.evidence import SentRun
    from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files
    from airflow_provider_workflowsvc._tasks.submit import named_files
    from airflow_provider_workflowsvc.models import Job

    for year in ("2024", "2025"):
        (tmp_path / year).mkdir()
        (tmp_path / year / "report.txt").write_text(year)
    marker = "__wfsvc-0123456789abcdef"
    sent = named_files(resolve_named_files(str(tmp_path)), marker)
    assert sent is not None
    names = tuple(name for _, name in sent)
    assert names == (f"2024/report{marker}.txt", f"2025/report{marker}.txt")
    assert run_marker(names) == marker
    assert tuple(unmarked(n, marker) for n in names) == ("2024/report.txt", "2025/report.txt")
    single = named_files(resolve_named_files(str(tmp_path / "2024" / "report.txt")), marker)
    assert single is not None
    assert [n for _, n in single] == [f"report{marker}.txt"]
    run = SentRun(WF, 0.0, names, marker)

    def job(*ids: str) -> Job:
        return Job.model_validate({"id": "j", "input_file_ids": list(ids)})

    assert run.carried_by(job(*reversed(names))) is True
    assert run.carried_by(job(f"report{marker}.txt", f"report{marker}.txt")) is True, "base names only"
    assert run.carried_by(job("2024/report.txt", "2025/report.txt")) is False, "the same names: not proof"
    assert run.carried_by(job("report__wfsvc-ffffffffffffffff.txt")) is False, "another run's marker"
    assert run.carried_by(Job.model_validate({"id": "j"})) is None, "a record without file names"
    unmarked = SentRun(WF, 0.0, ("2024/report.txt", "2025/report.txt"), None)
    assert unmarked.carried_by(job("2024/report.txt", "2025/report.txt")) is None, "the same names: no proof"
    assert unmarked.carried_by(job("report.txt")) is None, "the same base name: may be ours"
    assert unmarked.carried_by(job("invoice.pdf")) is False, "other names only: another's"
    assert unmarked.carried_by(Job.model_validate({"id": "j"})) is None


def test_a_status_spelling_the_service_refuses_is_skipped(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """Before a job record shows the dialect, both spellings of the active filters are sent; a service
    that refuses one (422) is still searched with the other."""
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(504)])
    answer = route_listings(mock_service, no_backoff, [our_job(run)]).side_effect

    def refuse_upper(request: httpx.Request) -> httpx.Response:
        if (request.url.params.get("status") or "").isupper():
            return httpx.Response(422, json={"detail": "unknown status"})
        return answer(request)

    mock_service.get("/jobs/", params={"workflow_id": WF}).mock(side_effect=refuse_upper)
    route_job(mock_service, "j1")
    assert op(files=a_file, mark_uploads=True).execute(ctx())["job_id"] == "j1"
    assert run.call_count == 1


def test_unmarked_uploads_keep_their_names_and_never_adopt(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """Issue #32, the default (``mark_uploads=False``): the file is sent as ``a.txt``; after a lost
    answer a job listing exactly that name is not proof (another run may have sent the same name): the
    task fails as ambiguous, naming it (and saying it lists exactly these names) and how to resume;
    the run is not sent again."""
    run = mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    route_listings(mock_service, no_backoff, [new_job("j1", ["a.txt"]), new_job("j2", ["b.txt"])])
    store = TaskStateStore()
    with pytest.raises(AmbiguousRunError) as error:
        op(files=a_file).execute(ctx(store))
    message = str(error.value)
    # j2's record lists none of the names sent: another's (issue #34's rule), so it is not a candidate
    assert "job(s) j1 appeared while its run request was in flight" in message
    assert "(job(s) j1 list exactly this run's file names)" in message
    assert "mark_uploads=False, the default" in message
    assert "clear this task" in message
    assert "WorkflowJobSensor(job_id=...)" in message
    assert names_sent(run) == ["a.txt"]
    assert run.call_count == 1
    assert store.values["workflowsvc_pending_run"]["marker"] is None
    assert store.values["workflowsvc_pending_run"]["files"] == ["a.txt"]


def test_an_unmarked_lost_answer_with_no_job_in_sight_fails_closed_naming_the_files(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """No job appears in the grace period (the answer may have been lost before processing): the
    task fails closed, saying which job to look for (one listing ``a.txt``), never sending again."""
    run = mock_service.post(RUN).mock(side_effect=[httpx.RemoteProtocolError("dropped")])
    route_listings(mock_service, no_backoff, [])
    with pytest.raises(AmbiguousRunError, match=r"not sent again.*a job of this workflow listing a\.txt"):
        op(files=a_file, run_grace_period=1).execute(ctx())
    assert run.call_count == 1


def test_a_cleared_task_after_an_unmarked_ambiguity_runs_again_without_looking(
    mock_service: Any, no_backoff: list[float], a_file: str
) -> None:
    """A person clears the task after reading the ambiguity error: nothing can prove which job the
    unmarked run created, so the cleared try runs the workflow (no search, no adoption)."""
    mock_service.post(RUN).mock(side_effect=[httpx.Response(502)])
    listing = route_listings(mock_service, no_backoff, [new_job("j1", ["a.txt"])])
    store = TaskStateStore()
    with pytest.raises(AmbiguousRunError):
        op(files=a_file).execute(ctx(store))
    looked = listing.call_count
    assert store.values["workflowsvc_pending_run"]["failed_closed"] is True
    mock_service.post(RUN).mock(side_effect=[ok(new_job("j2"))])
    route_job(mock_service, "j2")
    assert op(files=a_file).execute(ctx(store))["job_id"] == "j2"
    assert listing.call_count == looked, "the cleared try did not look for the earlier run's job"
