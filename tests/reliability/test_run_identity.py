"""Issue #11, item 1: tasks running the same workflow at once never report each other's job.

Several "tasks" (threads, each with its own hook, its own pending-run record store and its own input
file per run) run ONE workflow at the same time through the real submit logic (``submit_run``) and a
real HTTP emulator that disturbs 20 % of the requests: refusals (429, 503), ambiguous failures before
processing (502, 504, dropped connection), answers lost after processing (502, 504, dropped
connection), and late processing (a run held longer than the client waits, processed after the
client's read timeout).

The truth comes from the service, not from the provider: every input file has a unique name, and
the emulator writes that name into every output of the job that processed it. A task's reported job
is its own when that job's outputs name exactly the task's file; when the job records carry
``input_file_ids`` (platform dialect) those must equal the task's file too. Every task must either
report its own job or fail with :class:`AmbiguousRunError`: 0 foreign adoptions. Jobs that process
the same file twice (duplicate runs) are counted and reported.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook
from airflow_provider_workflowsvc.operators._submit import AmbiguousRunError, StoredRunJournal, submit_run
from airflow_provider_workflowsvc.operators.jobs import PENDING_RUN_KEY

from ._helpers import FakeStore, documents_of, records_list_files

pytestmark = pytest.mark.timeout(240)

RUN_ROUTE = r"/workflows/[0-9a-f-]{36}/run$"
CLIENT_TIMEOUT = 1.0
LATE = 1.6
"""Seconds a late run is held before processing: longer than the client waits (``CLIENT_TIMEOUT``)."""
GRACE = 2.5
"""The run grace period of the test's tasks: covers the late processing (``LATE - CLIENT_TIMEOUT``)."""
FAULTS = [
    {
        "path_regex": RUN_ROUTE,
        "method": "POST",
        "errors": [429, 502, 503, 504, "drop"],
        "rate": 0.09,
        "retry_after": 0.05,
    },
    {"path_regex": RUN_ROUTE, "method": "POST", "errors": [502, 504, "drop"], "rate": 0.09, "phase": "after"},
    {"path_regex": RUN_ROUTE, "method": "POST", "latency": LATE, "rate": 0.07},
    {"method": "GET", "errors": [429, 502, 503, 504, "drop"], "rate": 0.25, "retry_after": 0.05},
]
"""About one run request in five, and one job listing in five, is disturbed."""
log = logging.getLogger(__name__)


def _settings(emulator: Any) -> ConnectionSettings:
    return ConnectionSettings(
        base_url=emulator.base_url,
        token=emulator.token,
        api_key=emulator.api_key,
        timeout=CLIENT_TIMEOUT,
        retry_wait=0.02,
        retry_max_wait=0.2,
        max_retries=8,
    )


class Task(threading.Thread):
    """One task: ``runs`` runs of the workflow in turn, each with one file of its own."""

    def __init__(self, index: int, runs: int, workflow_id: str, settings: ConnectionSettings, root: Path):
        super().__init__(name=f"task-{index}", daemon=True)
        self.index, self.runs, self.workflow_id, self.settings, self.root = (
            index,
            runs,
            workflow_id,
            settings,
            root,
        )
        self.results: list[tuple[str, str | None, BaseException | None]] = []
        """(file name, reported job id, error) per run."""

    def run(self) -> None:
        with WorkflowServiceHook(settings=self.settings) as hook:
            for run in range(self.runs):
                path = self.root / f"task{self.index}-run{run}.txt"
                path.write_text(f"Text of task {self.index}, run {run}.")
                journal = StoredRunJournal(FakeStore(), PENDING_RUN_KEY, log=log)  # a new task instance
                try:
                    job = submit_run(
                        hook,
                        self.workflow_id,
                        [str(path)],
                        log,
                        attempts=6,
                        backoff=0.05,
                        grace=GRACE,
                        journal=journal,
                    )
                except Exception as exc:
                    self.results.append((path.name, None, exc))
                else:
                    journal.clear()
                    self.results.append((path.name, job.id, None))


@pytest.mark.parametrize(("tasks", "runs"), [(2, 50), (8, 13)], ids=["2-tasks", "8-tasks"])
def test_concurrent_tasks_report_only_their_own_jobs(
    figures: dict[str, Any], emulator: Any, settings: Any, tmp_path: Path, tasks: int, runs: int
) -> None:
    """Scenario: ``tasks`` tasks run the same workflow at once, ``runs`` times each, under 20 % faults
    (429, 502, 503, 504, drops before and after processing, late processing after a client timeout).
    Every task reports a job that processed exactly its own file (and whose ``input_file_ids`` are its
    file, where records carry them), or fails with AmbiguousRunError: 0 foreign adoptions."""
    emulator.configure(processing_delay=0.01)
    with WorkflowServiceHook(settings=settings) as hook:
        workflow_id = str(hook.create_workflow("shared-by-tasks", "basic").id)
    emulator.clear_requests()
    emulator.set_faults(rules=FAULTS, seed=11 * tasks)
    started = time.monotonic()
    threads = [Task(i, runs, workflow_id, _settings(emulator), tmp_path) for i in range(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(200)
    elapsed = time.monotonic() - started
    request_log = emulator.requests()
    emulator.clear_faults()
    emulator.advance_clock(3600)  # every job completes: its outputs name the files it processed

    results = [result for thread in threads for result in thread.results]
    with WorkflowServiceHook(settings=settings) as hook:
        jobs = hook.list_jobs(workflow_id=workflow_id)
        processed = {job.id: documents_of(hook, job.id) for job in jobs}
    records = {job.id: job for job in jobs}
    foreign, ambiguous, other_errors, adopted_with_file_ids = [], [], [], 0
    for name, job_id, error in results:
        if error is not None:
            (ambiguous if isinstance(error, AmbiguousRunError) else other_errors).append((name, error))
            continue
        assert job_id is not None
        if processed.get(job_id) != [name]:
            foreign.append((name, job_id, processed.get(job_id)))
        if records_list_files(records[job_id]):
            assert records[job_id].input_file_ids == [name], (name, records[job_id].input_file_ids)
            adopted_with_file_ids += 1
    per_file = collections.Counter(name for names in processed.values() for name in names)
    faults = collections.Counter(r["fault"] for r in request_log if r["fault"])
    figures.update(
        tasks=tasks,
        runs=len(results),
        requests=len(request_log),
        faults_injected=sum(faults.values()),
        faults_by_kind=dict(sorted(faults.items())),
        reported_own_job=len(results) - len(ambiguous) - len(other_errors),
        foreign_adoptions=len(foreign),
        failed_as_ambiguous=len(ambiguous),
        failed_otherwise=len(other_errors),
        jobs_created=len(jobs),
        duplicates=sum(count - 1 for count in per_file.values()),
        job_records_list_files=any(records_list_files(job) for job in jobs),
        seconds=round(elapsed, 1),
    )
    print(f"\nrun identity, {tasks} concurrent tasks: {figures}")
    assert len(results) == tasks * runs, "a task did not finish its runs"
    assert foreign == [], f"tasks reported jobs they did not create: {foreign}"
    assert other_errors == [], f"tasks failed for another reason than ambiguity: {other_errors}"
    assert all("job(s) " in str(error) and "clear this task" in str(error) for _, error in ambiguous)
    assert sum(faults.values()) >= 0.12 * len(request_log), "the faults were not injected"
    assert faults[f"latency {LATE:g}s"] > 0, "no run was processed late"
    assert elapsed < 60
