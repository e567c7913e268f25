"""The pieces of an on-demand task without a service: batches, the launch book, the summary, the verdict."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import TaskStateStore

from airflow_provider_workflowsvc._compat import AirflowFailException
from airflow_provider_workflowsvc.exceptions import (
    UnprocessedDocumentsError,
    UnprocessedDocumentsNoRetryError,
)
from airflow_provider_workflowsvc.operators import _on_demand as od
from airflow_provider_workflowsvc.operators._submit import SentRun
from airflow_provider_workflowsvc.wait.outcome import JobOutcome


def docs(*names: str) -> list[od.Document]:
    return [od.Document(f"/in/{name}", name, 10) for name in names]


def test_split_keeps_the_order_in_jobs_of_at_most_n() -> None:
    batches = od.split(docs(*(f"d{i}" for i in range(7))), 3)
    assert [[d.name for d in batch] for batch in batches] == [["d0", "d1", "d2"], ["d3", "d4", "d5"], ["d6"]]
    assert od.split([], 3) == []


def test_the_book_records_a_job_and_drops_its_pending_launch_in_one_write() -> None:
    store = TaskStateStore()
    book = od.LaunchBook(store, log=None)
    sent_at = time.time()
    book.journal.sending(SentRun(None, sent_at, ("a.txt", "2024/b.txt"), None))
    assert book.journal.pending(None) == SentRun(
        None, sent_at, ("a.txt", "2024/b.txt"), None, record_key=od.BOOK_KEY
    )
    writes = store.writes
    book.launched(od.LaunchedJob("job-1", ("a.txt", "2024/b.txt")))
    assert store.writes == writes + 1
    assert store.values == {
        od.BOOK_KEY: {"jobs": [{"job_id": "job-1", "documents": ["a.txt", "2024/b.txt"]}]}
    }
    assert book.journal.pending(None) is None
    book.forget()
    assert store.values == {}


def test_an_unreadable_book_is_ignored() -> None:
    store = TaskStateStore()
    store.values[od.BOOK_KEY] = {"jobs": [{"job_id": 3}]}
    assert od.LaunchBook(store, log=_Log()).jobs() == []
    assert not od.LaunchBook(None, log=None).durable


class _Log:
    def warning(self, *args: Any) -> None:
        pass


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
    jobs = [od.LaunchedJob("j1", ("a.txt", "2024/b.txt")), od.LaunchedJob("j2", ("c.txt",))]
    return od.Plan(jobs=jobs, **kwargs)


def test_each_document_gets_the_outcome_of_its_own_job() -> None:
    outcomes = {
        "j1": outcome("j1", "success", failed=("b.txt",)),  # a service that names files by base name
        "j2": outcome("j2", "stopped", message="cancelled by a user"),
    }
    summary = od.summarize(
        plan(unlaunched=["d.txt"], skipped=[("big.txt", "too large")], refusal="402 Insufficient API quota"),
        outcomes,
        {"a.txt": ["/out/a.txt.json"]},
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
    the_plan = plan(skipped=[("big.txt", "too large")])
    summary = od.summarize(the_plan, outcomes, {}, {}, fail_on_failed_files=fail_on_failed_files)
    error = od.failure(summary, the_plan, durable=True, fail_on_failed_files=fail_on_failed_files)
    assert (error is None) is passes
    assert summary["outcome"] == ("success" if passes else "failed")


def test_the_verdict_says_what_a_retry_does() -> None:
    names = [f"doc{i}.txt" for i in range(8)]
    the_plan = od.Plan(jobs=[od.LaunchedJob("j1", tuple(names))])
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
    assert od.is_named("2024/report.txt", ["report.txt"])
    assert od.is_named("2024/report.txt", ["2024/report.txt"])
    assert not od.is_named("2024/report.txt", ["report__wfsvc-0123456789abcdef.txt"])  # marker not taken out
    assert not od.is_named("2024/report.txt", ["report.pdf"])


def test_a_launched_jobs_marker_is_kept_in_the_book_and_the_plan() -> None:
    """The marker a job's record shows travels with it (book, deferral) so its names lose it later."""
    job = od.LaunchedJob("j1", ("a.txt",), "__wfsvc-0123456789abcdef")
    assert od.LaunchedJob.from_json(job.to_json()) == job
    assert od.LaunchedJob.from_json({"job_id": "j2", "documents": ["b.txt"]}).marker is None
    plan = od.Plan(jobs=[job])
    assert od.Plan.from_json(plan.to_json()).jobs == [job]
