"""RunOnDemandJobOperator against the emulator (platform dialect) over loopback: batches, the launch gap on
a clock the test drives, limits, refusals midway, retries that launch only what was not processed, lost
answers, both dialects, and the wait in one deferral through the trigger."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from helpers import TaskStateStore, connect
from reliability._helpers import FakeTI

from airflow_provider_workflowsvc import RunOnDemandJobOperator
from airflow_provider_workflowsvc._compat import AirflowFailException
from airflow_provider_workflowsvc._tasks import launches as _launches
from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle
from airflow_provider_workflowsvc.exceptions import (
    AmbiguousRunError,
    InvalidJobEventError,
    InvalidTaskInputError,
    UnprocessedDocumentsError,
    UnprocessedDocumentsNoRetryError,
    WorkflowServiceInputError,
    WorkflowServiceQuotaError,
)
from airflow_provider_workflowsvc.operators._lifecycle import DELIVERED_KEY
from airflow_provider_workflowsvc.operators.on_demand import OnDemandJobLink
from airflow_provider_workflowsvc.triggers.jobs import WorkflowJobsTrigger

GAP = 3600.0
"""The launch gap the emulator enforces in these tests (emulator seconds): no pause of a busy machine
reaches it, so a launch sent too early is always refused; the test's clock steps over it."""
JOBS = "/api/v1/jobs/"


class DrivenClock:
    """The launches' clock: a pause moves it and the emulator's clock by as much, at once."""

    def __init__(self, emulator: EmulatorHandle) -> None:
        self.emulator, self.now, self.pauses = emulator, 0.0, []
        self.before_pause: list[Any] = []
        """Called with the number of the pause before it is taken (to change the service midway)."""

    def clock(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        for action in self.before_pause:
            action(len(self.pauses) + 1)
        self.pauses.append(seconds)
        self.now += seconds
        self.emulator.advance_clock(seconds)


@pytest.fixture
def service(platform_service: EmulatorHandle) -> EmulatorHandle:
    """The platform emulator with a launch gap of an hour."""
    platform_service.configure(on_demand_launch_interval=GAP, processing_delay=0.05)
    return platform_service


@pytest.fixture
def driven(service: EmulatorHandle, monkeypatch: pytest.MonkeyPatch) -> DrivenClock:
    clock = DrivenClock(service)
    monkeypatch.setattr(_launches, "clock", clock.clock)
    monkeypatch.setattr(_launches, "pause", clock.pause)
    return clock


def folder(root: Path, count: int, *, empty: tuple[str, ...] = ()) -> Path:
    """``count`` text files ``doc00.txt``... (and empty ones the service fails) in ``root/in``."""
    inputs = root / "in"
    inputs.mkdir(exist_ok=True)
    for i in range(count):
        (inputs / f"doc{i:02d}.txt").write_text(f"Title {i}\n\nThe text of document {i}.")
    for name in empty:
        (inputs / name).write_text("")
    return inputs


def op(files: Any, **kwargs: Any) -> RunOnDemandJobOperator:
    args: dict[str, Any] = {
        "task_id": "parse",
        "files": str(files),
        "template_id": "hi_res_partition",
        "poll_interval": 0.05,
        "deferrable": False,
        "launch_interval": GAP,
    }
    return RunOnDemandJobOperator(**{**args, **kwargs})


def ctx(store: TaskStateStore | None = None) -> dict[str, Any]:
    return {"ti": FakeTI(), "task_state_store": store}


def launches(emulator: EmulatorHandle) -> list[dict[str, Any]]:
    return [
        r
        for r in emulator.requests(method="POST", path_contains="/jobs")
        if r["path"].rstrip("/") == JOBS[:-1]
    ]


def accepted(emulator: EmulatorHandle) -> list[dict[str, Any]]:
    return [r for r in launches(emulator) if r["status"] == 200]


def documents_by_job(emulator: EmulatorHandle) -> dict[str, list[str]]:
    """Every on-demand job the service holds, with its input files (what it was asked to process)."""
    with emulator.api_client() as api:
        jobs = api.get("/jobs/").json()
    return {job["id"]: job["input_file_ids"] for job in jobs if job["workflow_name"].startswith("job-")}


def statuses(summary: dict[str, Any]) -> dict[str, str]:
    return {d["document"]: d["status"] for d in summary["documents"]}


# --------------------------------------------------------------------------------------------------
# Checks when the DAG is parsed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"template_id": None}, "give template_id .* or job_nodes"),
        ({"job_nodes": [{"name": "P", "type": "partition", "subtype": "fast"}]}, "not both"),
        ({"template_id": " "}, "template_id must be a non-empty string"),
        (
            {"template_id": None, "job_nodes": [{"name": "P", "type": "partition"}]},
            r"job_nodes\[0\]: subtype",
        ),
        ({"max_files_per_job": 0}, "max_files_per_job must be a positive whole number"),
        ({"max_file_bytes": 1.5}, "max_file_bytes must be a positive whole number"),
        ({"oversized_files": "truncate"}, "oversized_files must be one of 'fail', 'skip', got 'truncate'"),
        # compared exactly when a file is too big: any other spelling would have skipped it silently
        ({"oversized_files": "FAIL"}, "oversized_files must be one of 'fail', 'skip', got 'FAIL'"),
        ({"oversized_files": None}, "oversized_files must be one of 'fail', 'skip', got None"),
        ({"launch_interval": -1}, "launch_interval must not be negative"),
        ({"submit_attempts": 0}, "submit_attempts must be at least 1"),
    ],
)
def test_arguments_are_checked_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkflowServiceInputError, match=message):
        op("in", **kwargs)


def test_templated_arguments_wait_for_the_task_which_defers_by_default() -> None:
    # every templated argument rendered and run: tests/storage/test_on_demand.py
    task = op("{{ params.folder }}", template_id="{{ params.template }}")
    assert (task.files, task.template_id) == ("{{ params.folder }}", "{{ params.template }}")
    assert RunOnDemandJobOperator(task_id="d", files="x", template_id="t").deferrable is True


# --------------------------------------------------------------------------------------------------
# Batches, the gap, the summary


def test_any_number_of_files_in_jobs_within_the_limits(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 23, empty=("empty.txt",))
    out = tmp_path / "out"
    context = ctx()
    summary = op(inputs, output_dir=str(out), fail_on_failed_files=False).execute(context)

    held = documents_by_job(service)
    assert sorted(len(names) for names in held.values()) == [4, 10, 10]
    assert sorted(name for names in held.values() for name in names) == sorted(statuses(summary))
    assert len(launches(service)) == 3  # no launch refused: each waited out the gap on the driven clock
    assert driven.pauses == [GAP, GAP]
    assert summary["outcome"] == "success"
    assert (summary["document_count"], summary["completed_count"]) == (24, 23)
    empty = next(d for d in summary["documents"] if d["document"] == "empty.txt")
    assert empty["status"] == "failed"
    assert "empty" in empty["error"]
    assert empty["output_files"] == []
    first = next(d for d in summary["documents"] if d["document"] == "doc00.txt")
    assert first["status"] == "completed"
    assert first["job_id"] in held
    assert first["output_files"] == [str(out / "doc00.txt.json")]
    assert json.loads(Path(first["output_files"][0]).read_text())[0]["metadata"]["filename"] == "doc00.txt"
    assert sorted(p.name for p in out.iterdir()) == sorted(f"doc{i:02d}.txt.json" for i in range(23))
    pushed = context["ti"].pushed
    assert sorted(pushed["job_ids"]) == sorted(held)
    assert pushed["job_links"] == {j: f"https://ui.example.test/jobs/{j}" for j in pushed["job_ids"]}
    assert pushed[OnDemandJobLink().xcom_key] == pushed["job_links"][pushed["job_ids"][0]]
    assert {j["job_id"]: j["documents"] for j in summary["jobs"]} == held


def test_the_log_names_the_failed_documents_when_they_do_not_fail_the_task(
    service: EmulatorHandle,
    driven: DrivenClock,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As RunWorkflowOperator's log does: a user reading "4 of 6 processed" learns which two, and why."""
    inputs = folder(tmp_path, 4, empty=("blank-a.txt", "blank-b.txt"))
    summary = op(inputs, fail_on_failed_files=False).execute(ctx())

    assert (summary["outcome"], summary["completed_count"], summary["document_count"]) == ("success", 4, 6)
    said = capfd.readouterr().out + caplog.text
    assert "4 of 6 document(s) processed (success)" in said
    assert "2 document(s) not processed:" in said
    failed = {d["document"]: d["error"] for d in summary["documents"] if d["status"] == "failed"}
    assert sorted(failed) == ["blank-a.txt", "blank-b.txt"]
    for name, error in failed.items():
        assert f"{name} ({error})" in said


def test_a_launch_refused_for_the_gap_is_sent_again_after_retry_after(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    """Another task launched a moment ago: the service's 429 says how long to wait, and the launch waits."""
    service.configure(on_demand_launch_interval=30)
    inputs = folder(tmp_path, 12)
    with service.api_client() as api:
        other = api.post("/jobs/", data={"request_data": '{"template_id": "hi_res_partition"}'})
    assert other.status_code == 200
    summary = op(inputs, launch_interval=30).execute(ctx())
    assert summary["completed_count"] == 12
    assert [r["status"] for r in launches(service)] == [200, 429, 200, 200]
    assert driven.pauses[0] >= 29  # the Retry-After of the refusal (whole seconds), then the gap
    assert driven.pauses[1:] == [30.0]


def test_a_file_over_the_size_limit_fails_the_task_before_anything_is_uploaded(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 3)
    (inputs / "big.pdf").write_bytes(b"%PDF" + b"x" * 2000)
    service.clear_requests()
    with pytest.raises(InvalidTaskInputError) as failed:
        op(inputs, max_file_bytes=1000).execute(ctx())
    message = str(failed.value)
    assert "'big.pdf' (2,004 bytes)" in message
    assert "limit of 1,000 bytes per file" in message
    assert "Nothing was uploaded" in message
    assert service.requests() == []
    assert isinstance(failed.value, AirflowFailException)


def test_oversized_files_can_be_left_out_and_reported(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 3)
    (inputs / "big.txt").write_text("x" * 2000)
    with pytest.raises(UnprocessedDocumentsError) as failed:
        op(inputs, max_file_bytes=1000, oversized_files="skip").execute(ctx(TaskStateStore()))
    assert statuses(failed.value.summary) == {
        "doc00.txt": "completed",
        "doc01.txt": "completed",
        "doc02.txt": "completed",
        "big.txt": "skipped",
    }
    assert "1 skipped: not uploaded: 2,000 bytes, over the limit of 1,000 bytes" in str(failed.value)
    assert [names for names in documents_by_job(service).values()] == [
        ["doc00.txt", "doc01.txt", "doc02.txt"]
    ]
    service.advance_clock(GAP)  # a later task: the launch gap has passed
    summary = op(inputs, max_file_bytes=1000, oversized_files="skip", fail_on_failed_files=False).execute(
        ctx()
    )
    assert summary["outcome"] == "success"


# --------------------------------------------------------------------------------------------------
# Refused midway; retries


def test_a_quota_refusal_midway_reports_the_launched_jobs_and_fails_without_retry(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 25)
    driven.before_pause.append(lambda n: n == 2 and service.configure(quota_exhausted=True))
    context = ctx(TaskStateStore())
    with pytest.raises(UnprocessedDocumentsNoRetryError) as failed:
        op(inputs).execute(context)
    summary = failed.value.summary
    assert context["ti"].pushed["return_value"] == summary
    launched = [d for d in summary["documents"] if d["status"] == "completed"]
    never = [d["document"] for d in summary["documents"] if d["status"] == "not_launched"]
    assert len(launched) == 20  # the two jobs launched before the refusal, waited for and reported
    assert never == [f"doc{i:02d}.txt" for i in range(20, 25)]
    message = str(failed.value)
    assert "5 of 25 document(s) were not processed" in message
    assert "402 Payment Required: Insufficient API quota" in message
    assert "retrying cannot help" in message
    assert "doc20.txt, doc21.txt, doc22.txt, doc23.txt, doc24.txt" in message
    assert isinstance(failed.value, AirflowFailException)


def test_a_retry_launches_only_the_documents_never_launched(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 25)
    store = TaskStateStore()

    def refuse_third(n: int) -> None:
        if n == 2:  # the third launch meets a busy service, through every attempt
            service.set_faults(method="POST", path=JOBS, errors=[503], count=2)

    driven.before_pause.append(refuse_third)
    with pytest.raises(UnprocessedDocumentsError) as failed:
        op(inputs, submit_attempts=2).execute(ctx(store))
    assert not isinstance(failed.value, AirflowFailException)  # a retry can help: Airflow retries
    assert "A retry launches only these" in str(failed.value)
    driven.before_pause.clear()
    service.clear_faults()
    service.advance_clock(GAP)  # Airflow's retry comes later: the launch gap has passed

    summary = op(inputs, submit_attempts=2).execute(ctx(store))
    held = documents_by_job(service)
    assert sorted(len(names) for names in held.values()) == [5, 10, 10]
    everything = [name for names in held.values() for name in names]
    assert sorted(everything) == sorted(set(everything))  # never a document twice
    assert summary["completed_count"] == 25
    assert store.values == {}  # the task succeeded: a later clear launches every document anew


def test_a_success_keeps_its_jobs_for_a_retry_and_a_clear_launches_anew(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    """A retry of the same clear (Airflow failed the try after it delivered) launches nothing again; a
    try after a person's clear (Airflow raised ``max_tries``) launches every document anew."""
    inputs = folder(tmp_path, 2)
    store = TaskStateStore()

    def attempt(max_tries: int) -> list[str]:
        context = ctx(store)
        context["ti"].max_tries = max_tries
        summary = op(inputs).execute(context)
        service.advance_clock(GAP)  # the next try comes later
        return [job["job_id"] for job in summary["jobs"]]

    first = attempt(max_tries=1)
    assert store.get(DELIVERED_KEY) == 1
    assert attempt(max_tries=1) == first
    assert len(accepted(service)) == 1
    assert attempt(max_tries=3) != first
    assert len(accepted(service)) == 2
    assert store.get(DELIVERED_KEY) == 3


def test_a_retry_launches_again_only_what_failed(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 4, empty=("empty.txt",))
    store = TaskStateStore()
    with pytest.raises(UnprocessedDocumentsError, match=r"1 failed: empty\.txt"):
        op(inputs).execute(ctx(store))
    (inputs / "empty.txt").write_text("Now it has text.")
    service.advance_clock(GAP)  # the retry comes later
    summary = op(inputs).execute(ctx(store))
    jobs = list(documents_by_job(service).values())
    assert sorted(jobs) == sorted(
        [["doc00.txt", "doc01.txt", "doc02.txt", "doc03.txt", "empty.txt"], ["empty.txt"]]
    )
    assert statuses(summary) == dict.fromkeys(
        [*(f"doc{i:02d}.txt" for i in range(4)), "empty.txt"], "completed"
    )
    first, second = (j["job_id"] for j in summary["jobs"])
    assert {d["document"]: d["job_id"] for d in summary["documents"]}["empty.txt"] == second != first


def test_without_a_task_state_store_a_failure_after_a_launch_is_not_retried(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 2, empty=("empty.txt",))
    with pytest.raises(UnprocessedDocumentsNoRetryError, match="a retry would launch every document again"):
        op(inputs).execute(ctx(None))


def test_a_kill_while_launching_cancels_the_jobs_launched_so_far(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    service.configure(processing_delay=3600)
    task = op(folder(tmp_path, 15), timeout=1)
    killed: list[str] = []

    def kill_before_the_second_launch(n: int) -> None:
        if n == 1:
            killed.extend(task._job_ids)
            task.on_kill()  # Airflow's SIGTERM handler, while the task is still launching

    driven.before_pause.append(kill_before_the_second_launch)
    with pytest.raises(UnprocessedDocumentsError):
        task.execute(ctx(TaskStateStore()))
    assert len(killed) == 1
    with service.api_client() as api:
        assert api.get(f"/jobs/{killed[0]}").json()["status"] == "STOPPED"


# --------------------------------------------------------------------------------------------------
# A document is known by its source, never by its name (issue #43, items 2 and 3)


def days(root: Path, counts: dict[str, int]) -> list[str]:
    """
    Folders ``root/<day>/``, each holding ``report.txt`` (its text names its day; last when sorted)
    and ``count - 1`` notes: given as ``files=[".../day1/", ".../day2/"]`` both send ``report.txt``.
    """
    for day, count in counts.items():
        (root / day).mkdir()
        (root / day / "report.txt").write_text(f"Report of {day}\n\nWhat happened on {day}.")
        for i in range(count - 1):
            (root / day / f"{day}-{i}.txt").write_text(f"Note {i}\n\nA note of {day}.")
    return [f"{root / day}/" for day in counts]


def sent(emulator: EmulatorHandle) -> list[str]:
    """Every name the service was sent, over all its on-demand jobs (a name twice: two uploads)."""
    return sorted(name for names in documents_by_job(emulator).values() for name in names)


def texts(output: str) -> str:
    return " ".join(element["text"] for element in json.loads(Path(output).read_text()))


def test_a_retry_launches_the_input_never_launched_though_another_of_its_name_was(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    """
    Item 2 as filed: day1/ and day2/ both hold report.txt (11 documents); the second launch is refused
    (503 through every attempt), then the retry must launch day2's report.txt: before, it counted it
    as launched (day1's has its name), sent nothing and succeeded with 10 documents of 11.
    """
    files = days(tmp_path, {"day1": 6, "day2": 5})
    store = TaskStateStore()
    refuse = {"method": "POST", "path": JOBS, "errors": [503], "count": 2}
    driven.before_pause.append(lambda n: n == 1 and service.set_faults(**refuse))
    with pytest.raises(UnprocessedDocumentsError) as failed:
        op(files, submit_attempts=2).execute(ctx(store))
    never = [d for d in failed.value.summary["documents"] if d["status"] == "not_launched"]
    assert [d["document"] for d in never] == ["report.txt"]
    driven.before_pause.clear()
    service.clear_faults()
    service.advance_clock(GAP)  # Airflow's retry comes later

    summary = op(files, submit_attempts=2).execute(ctx(store))
    assert (summary["document_count"], summary["completed_count"]) == (11, 11)
    assert sent(service).count("report.txt") == 2  # day1's in the first job, day2's in the retry's
    assert len(sent(service)) == 11  # and nothing twice
    inputs = sorted(str(path) for path in tmp_path.glob("day*/*.txt"))
    assert sorted(d["source"] for d in summary["documents"]) == inputs
    assert never[0]["source"] == str(tmp_path / "day2" / "report.txt")


def test_inputs_sent_under_one_name_go_to_different_jobs_each_with_its_own_outputs(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = days(tmp_path, {"day1": 2, "day2": 2})
    out = tmp_path / "out"
    summary = op(files, output_dir=str(out)).execute(ctx())
    assert "files of one name (or base name) never share a job" in capsys.readouterr().out  # the reason
    held = documents_by_job(service)
    assert all(len(set(names)) == len(names) for names in held.values()), held  # a name once per job
    assert sent(service).count("report.txt") == 2
    reports = {d["source"]: d for d in summary["documents"] if d["document"] == "report.txt"}
    for day, other in (("day1", "day2"), ("day2", "day1")):
        report = reports[str(tmp_path / day / "report.txt")]
        assert report["status"] == "completed"
        (output,) = report["output_files"]
        assert f"What happened on {day}" in texts(output)
        assert other not in texts(output)
    assert (
        reports[str(tmp_path / "day1" / "report.txt")]["job_id"]
        != reports[str(tmp_path / "day2" / "report.txt")]["job_id"]
    )


def nested(root: Path, *, empty: bool) -> Path:
    """``x.txt`` (empty: the service fails it) and ``sub/x.txt`` in one folder, with ``y.txt``."""
    inputs = root / "in"
    (inputs / "sub").mkdir(parents=True)
    (inputs / "x.txt").write_text("" if empty else "Top\n\nThe text of the top x.")
    (inputs / "sub" / "x.txt").write_text("Sub\n\nThe text of the x in sub.")
    (inputs / "y.txt").write_text("Y\n\nThe text of y.")
    return inputs


def test_a_failed_file_marks_only_its_own_document_failed(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    """Item 3, checks 1 and 2: x.txt fails; sub/x.txt (its base name) is not failed with it."""
    with pytest.raises(UnprocessedDocumentsError) as failed:
        op(nested(tmp_path, empty=True)).execute(ctx(TaskStateStore()))
    summary = failed.value.summary
    assert statuses(summary)["sub/x.txt"] == "completed"
    assert statuses(summary)["y.txt"] == "completed"
    assert statuses(summary)["x.txt"] in ("failed", "job_failed")  # alone in its job, the job fails
    assert "1 of 3 document(s) were not processed" in str(failed.value)


def test_a_durable_retry_launches_again_only_the_failed_file(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    """Item 3, check 3: the retry sends x.txt again, never sub/x.txt (its elements would arrive twice)."""
    inputs = nested(tmp_path, empty=True)
    store = TaskStateStore()
    with pytest.raises(UnprocessedDocumentsError):
        op(inputs).execute(ctx(store))
    (inputs / "x.txt").write_text("Top\n\nNow it has text.")
    service.advance_clock(GAP)
    summary = op(inputs).execute(ctx(store))
    assert sent(service).count("sub/x.txt") == 1
    assert sent(service).count("x.txt") == 2
    assert statuses(summary) == dict.fromkeys(["x.txt", "sub/x.txt", "y.txt"], "completed")


def test_outputs_are_credited_to_their_own_document(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    """Item 3, check 4: x.txt and sub/x.txt both processed: each document's outputs are its own."""
    out = tmp_path / "out"
    summary = op(nested(tmp_path, empty=False), output_dir=str(out)).execute(ctx())
    files = {d["document"]: d["output_files"] for d in summary["documents"]}
    assert [len(files[name]) for name in ("x.txt", "sub/x.txt")] == [1, 1]
    assert "the top x" in texts(files["x.txt"][0])
    assert "the x in sub" in texts(files["sub/x.txt"][0])


# --------------------------------------------------------------------------------------------------
# A lost launch answer


def test_a_lost_launch_answer_fails_closed_naming_the_job_it_may_have_created(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 3)
    service.set_faults(method="POST", path=JOBS, errors=["drop"], count=1, phase="after")
    with pytest.raises(AmbiguousRunError) as failed:
        op(inputs, launch_grace_period=0.5).execute(ctx(TaskStateStore()))
    (created,) = documents_by_job(service)
    message = str(failed.value)
    assert created in message
    assert "launch of an on-demand job" in message
    assert len(launches(service)) == 1  # never sent again


def test_a_lost_launch_answer_is_adopted_with_marked_names(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    inputs = folder(tmp_path, 3)
    out = tmp_path / "out"
    service.set_faults(method="POST", path=JOBS, errors=["drop"], count=1, phase="after")
    summary = op(inputs, mark_uploads=True, output_dir=str(out), launch_grace_period=0.5).execute(ctx())
    ((created, sent),) = documents_by_job(service).items()
    assert all("__wfsvc-" in name for name in sent)
    assert len(launches(service)) == 1
    assert statuses(summary) == dict.fromkeys(["doc00.txt", "doc01.txt", "doc02.txt"], "completed")
    assert {d["job_id"] for d in summary["documents"]} == {created}
    assert sorted(p.name for p in out.iterdir()) == ["doc00.txt.json", "doc01.txt.json", "doc02.txt.json"]


# --------------------------------------------------------------------------------------------------
# Both dialects: the spec's service has no on-demand jobs


@pytest.mark.parametrize("given", ["template_id", "job_nodes"])
def test_a_service_without_the_operation_fails_clearly(
    emulator: EmulatorHandle, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str
) -> None:
    connect(emulator, monkeypatch)
    inputs = folder(tmp_path, 2)
    nodes = [{"name": "Partitioner", "type": "partition", "subtype": "fast"}]
    args = (
        {"template_id": "hi_res_partition"}
        if given == "template_id"
        else {"template_id": None, "job_nodes": nodes}
    )
    task = op(inputs, launch_interval=0, **args)
    if emulator.dialect == "platform":
        assert task.execute(ctx())["completed_count"] == 2
        return
    with pytest.raises(InvalidTaskInputError) as failed:
        task.execute(ctx())
    message = str(failed.value)
    assert "does not offer" in message
    assert "platform API" in message
    assert "RunWorkflowOperator" in message
    if given == "template_id":  # found out before any upload
        assert "GET /api/v1/templates/ answered 404" in message
        assert not emulator.requests(method="POST")
    else:
        assert "POST /api/v1/jobs/ answered 405" in message


def test_an_unknown_template_fails_before_any_upload_naming_the_known_ones(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    with pytest.raises(
        InvalidTaskInputError, match="'hi_res' is not one of the service's templates: hi_res_partition"
    ):
        op(folder(tmp_path, 1), template_id="hi_res").execute(ctx())
    assert not service.requests(method="POST")


# --------------------------------------------------------------------------------------------------
# One deferral for every job


def _trigger_event(trigger: WorkflowJobsTrigger) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    return asyncio.run(first())


def test_the_jobs_are_waited_for_in_one_deferral_and_queue_beyond_the_running_cap(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers import SHARED_STATUS_POLL_ENV

    monkeypatch.setenv(SHARED_STATUS_POLL_ENV, "True")
    service.configure(on_demand_launch_interval=10, processing_delay=100, on_demand_max_running=5)
    inputs = folder(tmp_path, 12)
    task = op(inputs, deferrable=True, launch_interval=10, max_files_per_job=2, poll_interval=0.05)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(ctx())
    trigger = deferred.value.trigger
    assert isinstance(trigger, WorkflowJobsTrigger)
    path, kwargs = trigger.serialize()
    assert WorkflowJobsTrigger(**kwargs).serialize() == (path, kwargs)
    assert path == "airflow_provider_workflowsvc.triggers.jobs.WorkflowJobsTrigger"
    assert len(trigger.job_ids) == 6
    service.advance_clock(150)  # past each job's first (scheduled) slot; none has ended yet
    with service.api_client() as api:
        listed = {j["id"]: j["status"] for j in api.get("/jobs/").json()}
    assert sorted(listed.values()) == ["IN_PROGRESS"] * 5 + ["SCHEDULED"]  # the service queues the sixth

    service.clear_requests()
    service.advance_clock(10_000)  # every job, the queued one too, has ended by now
    event = _trigger_event(trigger)
    assert deferred.value.kwargs is None  # the plan travels with the trigger: dag.test() drops kwargs
    summary = task.execute_complete(ctx(), event=event)
    assert summary["completed_count"] == 12
    polls = [r for r in service.requests(method="GET") if r["path"].startswith(JOBS)]
    assert all(r["path"] != JOBS or "workflow_id" not in r["query"] for r in polls)


def test_a_resumed_task_fails_closed_on_an_unexpected_event_or_plan(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    task = op(folder(tmp_path, 1))
    plan = {
        "jobs": [{"job_id": "j1", "documents": ["a.txt"], "sources": ["/a.txt"]}],
        "unlaunched": [],
        "skipped": [],
        "refusal": None,
        "final": False,
    }
    with pytest.raises(InvalidJobEventError):
        task.execute_complete(ctx(), event={"outcomes": [], "resume_with": plan})
    ended_j2 = {"outcomes": [{"status": "success", "job_id": "j2"}], "resume_with": plan}
    with pytest.raises(InvalidJobEventError, match="no outcome for job"):
        task.execute_complete(ctx(), event=ended_j2)
    for unreadable in ({"jobs": 3}, None):
        event = {"outcomes": [{"status": "success", "job_id": "j1"}], "resume_with": unreadable}
        with pytest.raises(InvalidJobEventError, match="plan cannot be read"):
            task.execute_complete(ctx(), event=event)


def test_a_wait_that_times_out_cancels_the_jobs(
    service: EmulatorHandle, driven: DrivenClock, tmp_path: Path
) -> None:
    service.configure(processing_delay=3600)
    with pytest.raises(UnprocessedDocumentsError) as failed:
        op(folder(tmp_path, 2), timeout=0.5).execute(ctx(TaskStateStore()))
    (job,) = failed.value.summary["jobs"]
    assert job["outcome"] == "timeout"
    assert "the job was cancelled" in job["message"]
    with service.api_client() as api:
        assert api.get(f"/jobs/{job['job_id']}").json()["status"] == "STOPPED"


# --------------------------------------------------------------------------------------------------
# A used-up quota fails any operator without retries


def test_a_run_refused_for_quota_fails_without_retries(service: EmulatorHandle, tmp_path: Path) -> None:
    from airflow_provider_workflowsvc import RunWorkflowOperator

    with service.api_client() as api:
        workflow = api.post("/workflows/", json={"name": "local", "workflow_type": "basic"}).json()
    service.configure(quota_exhausted=True)
    task = RunWorkflowOperator(
        task_id="run", workflow_id=workflow["id"], files=str(folder(tmp_path, 1)), deferrable=False
    )
    with pytest.raises(WorkflowServiceQuotaError) as failed:
        task.execute(ctx())
    assert isinstance(failed.value, AirflowFailException)
    assert "Insufficient API quota" in str(failed.value)
    assert len(service.requests(method="POST", path_contains="/run")) == 1
