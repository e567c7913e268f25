"""The pieces of an on-demand task without a service: batches, the launch book, the summary, the verdict."""

from __future__ import annotations

import json
import time
import types
from typing import Any, cast

import pytest
from helpers import TaskStateStore

from airflow_provider_workflowsvc import metrics
from airflow_provider_workflowsvc._compat import AirflowFailException
from airflow_provider_workflowsvc._tasks import launches, on_demand as od
from airflow_provider_workflowsvc._tasks.evidence import SentRun
from airflow_provider_workflowsvc.exceptions import (
    AmbiguousRunError,
    InvalidJobEventError,
    UnprocessedDocumentsError,
    UnprocessedDocumentsNoRetryError,
    WorkflowServiceConnectionError,
)
from airflow_provider_workflowsvc.wait.outcome import JobOutcome


def docs(*names: str) -> list[launches.Document]:
    return [launches.Document(f"/in/{name}", name, 10) for name in names]


def test_split_keeps_the_order_in_jobs_of_at_most_n() -> None:
    batches = launches.split(docs(*(f"d{i}" for i in range(7))), 3)
    assert [[d.name for d in batch] for batch in batches] == [["d0", "d1", "d2"], ["d3", "d4", "d5"], ["d6"]]
    assert launches.split([], 3) == []


def test_split_never_puts_two_documents_of_one_base_name_in_one_job() -> None:
    """Sent under one name (two folders' report.txt) or one base name (x.txt, sub/x.txt): different jobs."""
    same = [launches.Document(f"/{d}/report.txt", "report.txt", 10) for d in ("day1", "day2", "day3")]
    given = [*docs("a.txt", "x.txt", "sub/x.txt", "b.txt"), *same]
    batches = launches.split(given, 4)
    assert [[d.source for d in batch] for batch in batches] == [
        ["/in/a.txt", "/in/x.txt", "/in/b.txt", "/day1/report.txt"],
        ["/in/sub/x.txt", "/day2/report.txt"],
        ["/day3/report.txt"],
    ]
    for batch in batches:
        assert len({launches.base_name(d.name) for d in batch}) == len(batch)


def test_the_book_records_a_job_and_drops_its_pending_launch_in_one_write() -> None:
    store = TaskStateStore()
    book = launches.LaunchBook(store, log=None)
    sent_at = time.time()
    book.sending(SentRun(None, sent_at, ("a.txt", "2024/b.txt"), None))
    assert book.pending(None) == SentRun(
        None, sent_at, ("a.txt", "2024/b.txt"), None, record_key=launches.BOOK_KEY
    )
    writes = store.writes
    book.launched(launches.LaunchedJob("job-1", ("a.txt", "2024/b.txt"), ("/a.txt", "/2024/b.txt")))
    assert store.writes == writes + 1
    job = {"job_id": "job-1", "documents": ["a.txt", "2024/b.txt"], "sources": ["/a.txt", "/2024/b.txt"]}
    assert store.values == {launches.BOOK_KEY: {"jobs": [job]}}
    assert book.pending(None) is None


def test_the_book_remembers_the_sources_of_the_launch_in_flight() -> None:
    """A lost answer's job is adopted with its documents' sources (their names alone can be two inputs')."""
    store = TaskStateStore()
    book = launches.LaunchBook(store, log=None)
    book.sources = ["/day2/report.txt", "/day2/z.txt"]
    book.sending(SentRun(None, time.time(), ("report.txt", "z.txt"), None))
    assert launches.LaunchBook(store, log=None).pending_sources(2) == ("/day2/report.txt", "/day2/z.txt")
    assert launches.LaunchBook(store, log=None).pending_sources(3) == ()  # not this record's
    later = launches.LaunchBook(store, log=None)  # a retry fails closed on that launch: its sources stay
    later.failed_closed()
    assert later.pending_sources(2) == ("/day2/report.txt", "/day2/z.txt")
    book.clear()
    assert store.values == {launches.BOOK_KEY: {}}  # both gone in one write


@pytest.mark.parametrize("proven", [False, None], ids=["nothing-proves-the-job", "search-cut-short"])
def test_a_launch_in_doubt_fails_closed_only_when_nothing_proves_its_job(
    monkeypatch: pytest.MonkeyPatch, proven: bool | None
) -> None:
    """The launch an earlier try sent and never recorded: a search that ends without proof marks it (no
    retry; a clear decides what to send) and counts the run failed closed; a search cut short (the
    service unreachable) leaves it pending as it was, so the task's retry looks again, not sends again."""
    failure: Exception = AmbiguousRunError("no job proven")
    if proven is None:
        failure = WorkflowServiceConnectionError("GET", "/jobs/", "connection refused")

    def search(*args: Any) -> None:
        raise failure

    counted: list[tuple[Any, ...]] = []
    monkeypatch.setattr(launches, "job_of_earlier_try", search)
    monkeypatch.setattr(metrics, "run_failed_closed", lambda *args: counted.append(args))
    store = TaskStateStore()
    launches.LaunchBook(store, log=None).sending(SentRun(None, time.time(), ("a.txt",), None))
    book = launches.LaunchBook(store, log=None)
    hook = types.SimpleNamespace(workflowsvc_conn_id="conn")
    with pytest.raises(type(failure)):
        launches.adopt_pending(cast("Any", hook), book, grace=0.0, log=_Log())
    earlier = launches.LaunchBook(store, log=None).pending(None)
    assert earlier is not None
    assert earlier.files == ("a.txt",)
    assert earlier.failed_closed is (proven is False)
    assert counted == ([(None, "conn")] if proven is False else [])


def test_an_unreadable_book_is_ignored() -> None:
    store = TaskStateStore()
    store.values[launches.BOOK_KEY] = {"jobs": [{"job_id": 3}]}
    assert launches.LaunchBook(store, log=_Log()).jobs() == []
    store.values[launches.BOOK_KEY] = {"jobs": [{"job_id": "j1", "documents": ["a.txt"]}]}  # no sources
    assert launches.LaunchBook(store, log=_Log()).jobs() == []
    alone = launches.LaunchBook(None, log=None)  # durable=False: the book lasts as long as the try
    alone.launched(launches.LaunchedJob("j1", ("a.txt",), ("/a.txt",)))
    assert [job.job_id for job in alone.jobs()] == ["j1"]


class _Log:
    def warning(self, *args: Any) -> None:
        pass

    info = warning


def outcome(job_id: str, status: str, *, failed: tuple[str, ...] = (), message: str = "") -> JobOutcome:
    failed_files = [{"document": name, "error": "no text"} for name in failed]
    return JobOutcome.model_validate(
        {
            "status": status,
            "job_id": job_id,
            "job_status": status,
            "message": message,
            "failed_files": failed_files,
        }
    )


def plan(**kwargs: Any) -> od.Plan:
    jobs = [
        launches.LaunchedJob("j1", ("a.txt", "2024/b.txt"), sources=("/in/a.txt", "/in/2024/b.txt")),
        launches.LaunchedJob("j2", ("c.txt",), sources=("/in/c.txt",)),
    ]
    return od.Plan(jobs=jobs, **kwargs)


def test_each_document_gets_the_outcome_of_its_own_job() -> None:
    outcomes = {
        "j1": outcome("j1", "success", failed=("b.txt",)),  # a service that names files by base name
        "j2": outcome("j2", "stopped", message="cancelled by a user"),
    }
    summary = od.summarize(
        plan(
            unlaunched=[("/in/d.txt", "d.txt")],
            skipped=[("/in/big.txt", "big.txt", "too large")],
            refusal="402 Insufficient API quota",
        ),
        outcomes,
        {"/in/a.txt": ["/out/a.txt.json"]},
        {"j1": "https://ui/jobs/j1"},
        fail_on_failed_files=True,
    )
    by_name = {
        d["document"]: (d["job_id"], d["status"], d["error"], d["output_files"]) for d in summary["documents"]
    }
    assert by_name == {
        "a.txt": ("j1", "completed", None, ["/out/a.txt.json"]),
        "2024/b.txt": ("j1", "failed", "no text", []),
        "c.txt": ("j2", "stopped", "cancelled by a user", []),
        "d.txt": (None, "not_launched", "402 Insufficient API quota", []),
        "big.txt": (None, "skipped", "too large", []),
    }
    assert (summary["outcome"], summary["completed_count"], summary["unprocessed_count"]) == ("failed", 1, 4)
    assert [j["job_url"] for j in summary["jobs"]] == ["https://ui/jobs/j1", ""]


@pytest.mark.parametrize(("fail_on_failed_files", "passes"), [(True, False), (False, True)])
def test_failed_and_skipped_files_fail_the_task_only_when_failed_files_do(
    fail_on_failed_files: bool, passes: bool
) -> None:
    outcomes = {"j1": outcome("j1", "success", failed=("a.txt",)), "j2": outcome("j2", "success")}
    the_plan = plan(skipped=[("/in/big.txt", "big.txt", "too large")])
    summary = od.summarize(the_plan, outcomes, {}, {}, fail_on_failed_files=fail_on_failed_files)
    error = od.failure(summary, the_plan, durable=True, fail_on_failed_files=fail_on_failed_files)
    assert (error is None) is passes
    assert summary["outcome"] == ("success" if passes else "failed")


def test_the_verdict_says_what_a_retry_does() -> None:
    names = [f"doc{i}.txt" for i in range(8)]
    the_plan = od.Plan(jobs=[launches.LaunchedJob("j1", tuple(names), tuple(names))])
    summary = od.summarize(
        the_plan, {"j1": outcome("j1", "failed", message="boom")}, {}, {}, fail_on_failed_files=True
    )
    retried = od.failure(summary, the_plan, durable=True, fail_on_failed_files=True)
    assert isinstance(retried, UnprocessedDocumentsError)
    assert not isinstance(retried, AirflowFailException)
    assert "8 of 8 document(s) were not processed" in str(retried)
    assert "8 job failed: boom: doc0.txt, doc1.txt, doc2.txt, doc3.txt, doc4.txt and 3 more" in str(retried)
    assert retried.summary == summary
    for final in (od.failure(summary, the_plan, durable=False, fail_on_failed_files=True),):
        assert isinstance(final, UnprocessedDocumentsNoRetryError)
        assert isinstance(final, AirflowFailException)
    refused = od.Plan(jobs=the_plan.jobs, refusal="402", final=True)
    assert isinstance(
        od.failure(summary, refused, durable=True, fail_on_failed_files=True), AirflowFailException
    )


def test_the_names_a_service_gives_match_the_documents() -> None:
    assert launches.meant_by("report.txt", ["2024/report.txt"]) == [0]  # a service keeping base names only
    assert launches.meant_by("2024/report.txt", ["2024/report.txt"]) == [0]
    assert (
        launches.meant_by("report__wfsvc-0123456789abcdef.txt", ["2024/report.txt"]) == []
    )  # marker not taken out
    assert launches.meant_by("report.pdf", ["2024/report.txt"]) == []
    assert launches.meant_by("x.txt", ["x.txt", "sub/x.txt"]) == [0]  # exactly: never sub/x.txt as well
    assert launches.meant_by("sub/x.txt", ["x.txt", "sub/x.txt"]) == [1]
    assert launches.meant_by("x.txt", ["a/x.txt", "b/x.txt"]) == [0, 1]  # cannot say which: unknown
    assert launches.meant_by("report.txt", ["report.txt", "report.txt"]) == [0, 1]


def test_a_failed_file_the_answer_cannot_tell_apart_is_unknown_and_never_launched_again() -> None:
    """A job sent a/x.txt and b/x.txt; a service keeping base names fails "x.txt"."""
    job = launches.LaunchedJob(
        "j1", ("a/x.txt", "b/x.txt", "c.txt"), sources=("/a/x.txt", "/b/x.txt", "/c.txt")
    )
    the_plan = od.Plan(jobs=[job])
    summary = od.summarize(
        the_plan, {"j1": outcome("j1", "success", failed=("x.txt",))}, {}, {}, fail_on_failed_files=True
    )
    assert {d["source"]: d["status"] for d in summary["documents"]} == {
        "/a/x.txt": "unknown",
        "/b/x.txt": "unknown",
        "/c.txt": "completed",
    }
    error = od.failure(summary, the_plan, durable=True, fail_on_failed_files=True)
    assert isinstance(error, UnprocessedDocumentsNoRetryError)  # a retry would launch nothing
    assert "x.txt from /a/x.txt" not in str(error)  # different names: each shown by its own
    assert "2 unknown: the service names 'x.txt' failed" in str(error)
    lenient = od.summarize(
        the_plan, {"j1": outcome("j1", "success", failed=("x.txt",))}, {}, {}, fail_on_failed_files=False
    )
    assert od.failure(lenient, the_plan, durable=True, fail_on_failed_files=False) is None


def test_a_launched_jobs_marker_is_kept_in_the_book_and_the_plan() -> None:
    """The marker a job's record shows travels with it (book, deferral) so its names lose it later."""
    job = launches.LaunchedJob("j1", ("a.txt",), ("/a.txt",), "__wfsvc-0123456789abcdef")
    assert launches.LaunchedJob.from_json(job.to_json()) == job
    unmarked = {"job_id": "j2", "documents": ["b.txt"], "sources": ["/b.txt"]}
    assert launches.LaunchedJob.from_json(unmarked).marker is None
    plan = od.Plan(jobs=[job])
    assert od.Plan.from_json(plan.to_json()).jobs == [job]


def test_the_plan_carries_each_documents_source() -> None:
    job = launches.LaunchedJob(
        "j1", ("report.txt",), ("/day1/report.txt",), None, frozenset({"/day1/report.txt"})
    )
    the_plan = od.Plan(
        jobs=[job],
        unlaunched=[("/day2/report.txt", "report.txt")],
        skipped=[("/day3/report.txt", "report.txt", "too large")],
    )
    assert od.Plan.from_json(json.loads(json.dumps(the_plan.to_json()))) == the_plan
    with pytest.raises(InvalidJobEventError):
        od.Plan.from_json({**the_plan.to_json(), "skipped": [[]]})
    with pytest.raises(InvalidJobEventError):  # a document is known by its source, never by its name
        od.Plan.from_json({**the_plan.to_json(), "unlaunched": ["report.txt"]})
