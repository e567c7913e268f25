"""
An on-demand task's launches: its documents split into jobs within the service's limits, launched
paced through :func:`.submit.submit` (the one rule of what a failed request proves), the launch book
that remembers them across tries, and the plan a deferral carries. The whys:
docs/decisions/on-demand.md. Imported when a task runs, never at DAG-parse time.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeGuard

from airflow_provider_workflowsvc._marker import run_marker, unmarked
from airflow_provider_workflowsvc._tasks.evidence import base_name, may_retry_refused
from airflow_provider_workflowsvc._tasks.submit import (
    Sending,
    StoredRunJournal,
    failing_closed,
    job_of_earlier_try,
    submit,
)
from airflow_provider_workflowsvc.exceptions import WorkflowServiceNotFoundError
from airflow_provider_workflowsvc.models import JobStatus

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

Log = logging.Logger | Any

BOOK_KEY = "workflowsvc_on_demand"
"""Task state key of the launch book (like ``external_id_key``: never rename it)."""
SHOWN = 5
"""Documents named per line of a failure message (all are in the summary and the log)."""

clock: Callable[[], float] = time.monotonic
"""The clock the launches are paced by (tests drive it, with :data:`pause`)."""
pause: Callable[[float], None] = time.sleep
"""How the launches wait: for the interval, and for a refused launch's ``Retry-After``."""


# --------------------------------------------------------------------------------------------------
# Documents and batches


@dataclass(frozen=True)
class Document:
    """
    One input file: where it is read from (a local path, or a ``storage.StoredObject``), the name the service
    sees (the user's), its size. Known by its :attr:`source`, never by its name (two may share it).
    """

    path: Any
    name: str
    size: int

    @property
    def source(self) -> str:
        """Its identity: the local file's absolute path, or the object's URI (without credentials)."""
        return str(self.path)


def documents(named: Iterable[tuple[Any, str]], limit: int) -> tuple[list[Document], list[Document]]:
    """
    Return the resolved ``(source, name)`` pairs as documents, each with its size (a local file's from
    the disk, an object's as the store listed it: nothing of it is read here), and those over ``limit``
    bytes.
    """
    docs = [Document(source, name, _size(source)) for source, name in named]
    return docs, [doc for doc in docs if doc.size > limit]


def _size(source: Any) -> int:
    return os.stat(source).st_size if isinstance(source, str) else int(source.stat().st_size)


def too_large(big: Sequence[Document], limit: int) -> str:
    """Say which files are over the size limit, and what to do (nothing was uploaded)."""
    listed = ", ".join(f"{doc.name!r} ({doc.size:,} bytes)" for doc in big[:SHOWN])
    more = f" and {len(big) - SHOWN} more" if len(big) > SHOWN else ""
    return (
        f"{len(big)} input file(s) over the limit of {limit:,} bytes per file of an on-demand job "
        f"(max_file_bytes): {listed}{more}. Nothing was uploaded. Split or compress them, leave them out "
        "of files, or set oversized_files='skip' to process the others and report these as not processed"
    )


def left_out(doc: Document, limit: int) -> str:
    """Say why a file over the size limit was not uploaded (``oversized_files='skip'``)."""
    return f"not uploaded: {doc.size:,} bytes, over the limit of {limit:,} bytes per file (max_file_bytes)"


def split(docs: Sequence[Document], max_files: int) -> list[list[Document]]:
    """
    Split ``docs`` into batches of at most ``max_files`` (one job each), in order, each document in the first
    batch with room holding no other of its base name: a name the service gives then means one document.
    """
    batches: list[tuple[list[Document], set[str]]] = []
    for doc in docs:
        key = base_name(doc.name)
        batch, held = next(((b, h) for b, h in batches if len(b) < max_files and key not in h), ([], set()))
        if not batch:
            batches.append((batch, held))
        batch.append(doc)
        held.add(key)
    return [batch for batch, _ in batches]


# --------------------------------------------------------------------------------------------------
# Whether the service has the operation


MISSING = (
    "the service at {url} does not offer {what}: {request} answered {status}. Templates and on-demand "
    "jobs are operations of the live service's platform API; a service that implements only the "
    "Workflow Service spec has none. Run the files through a workflow instead (CreateWorkflowOperator "
    "with these nodes, then RunWorkflowOperator)"
)


def missing_operation(exc: BaseException, base_url: str, what: str = "on-demand jobs") -> Exception | None:
    """Return the error for a request refused as an operation the service lacks (404, 405), else None."""
    from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError, WorkflowServiceApiError

    if not isinstance(exc, WorkflowServiceApiError) or exc.status_code not in (404, 405):
        return None
    request, status = f"{exc.method} {exc.path}", f"{exc.status_code} {exc.reason}".strip()
    return InvalidTaskInputError(MISSING.format(url=base_url, what=what, request=request, status=status))


# --------------------------------------------------------------------------------------------------
# The launch book


@dataclass(frozen=True)
class LaunchedJob:
    """
    A job launched for this task: the names it was sent (``documents``, the user's), the ``sources``
    of those documents (same order: what they are known by), ``marker``: the one its record shows in
    every name (``mark_uploads=True``), taken out of what the service gives back; ``handed_over``: the
    sources of its documents a later try launched again (a failed file), no longer this job's to report.
    """

    job_id: str
    documents: tuple[str, ...]
    sources: tuple[str, ...]
    marker: str | None = None
    handed_over: frozenset[str] = frozenset()

    def own(self) -> list[tuple[str, str]]:
        """Return the ``(source, name)`` of each document this job is responsible for."""
        pairs = zip(self.sources, self.documents, strict=True)
        return [(source, name) for source, name in pairs if source not in self.handed_over]

    def meant(self, given: str) -> list[str]:
        """Return the sources of the documents a name the service gave (without the marker) can mean."""
        return [self.sources[i] for i in meant_by(given, self.documents)]

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"job_id": self.job_id, "documents": list(self.documents)}
        value |= {"sources": list(self.sources)} | ({"marker": self.marker} if self.marker else {})
        return value | ({"handed_over": sorted(self.handed_over)} if self.handed_over else {})

    @classmethod
    def from_json(cls, value: Any) -> LaunchedJob:
        if not isinstance(value, Mapping) or not isinstance(value.get("job_id"), str):
            raise ValueError(f"not a launched job: {value!r}")
        docs, sources = value.get("documents"), value.get("sources")
        if not _strings(docs):
            raise ValueError(f"not a launched job's documents: {docs!r}")
        if not _strings(sources) or len(sources) != len(docs):
            raise ValueError(f"not a launched job's sources: {sources!r}")
        handed = value.get("handed_over", [])
        if not _strings(handed):
            raise ValueError(f"not a launched job's documents launched again: {handed!r}")
        marker = value.get("marker")
        return cls(
            value["job_id"],
            tuple(docs),
            tuple(sources),
            marker if isinstance(marker, str) else None,
            frozenset(handed),
        )


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def meant_by(given: str, names: Sequence[str]) -> list[int]:
    """
    Return the positions of the names sent that a name the service gave can mean: exactly that name, else (a
    service keeping base names) those of that base name. Several or none: it cannot say which.
    """
    exact = [i for i, name in enumerate(names) if name == given]
    return exact or [i for i, name in enumerate(names) if base_name(name) == given]


class LaunchBook(StoredRunJournal):
    """
    The jobs this task launched (each with its documents) and the launch in flight, across tries: the run
    journal :func:`.submit.submit` keeps, its record in the book's ``pending`` field. One task state key holds
    both, so recording a launched job and dropping its pending record is one write. Without a store
    (``durable=False``) it lives as long as the try.
    """

    def __init__(self, store: Any | None, log: Log) -> None:
        super().__init__(store, BOOK_KEY, log=log)
        self.sources: Sequence[str] = ()
        """The sources of the batch being launched (written with its pending record)."""
        self._read: dict[str, Any] | None = None

    def record(self) -> Any:
        """Return the pending launch's record: the book's ``pending`` field."""
        return self.value().get("pending")

    def write_record(self, value: dict[str, Any]) -> None:
        sources = list(self.sources) or self.value().get("sending")  # kept when marked failed
        self.write(pending=value, sending=sources)

    def clear(self) -> None:
        self.write(pending=None, sending=None)

    def value(self) -> dict[str, Any]:
        """Return the book as stored: read once, then kept as written (this try is its only writer)."""
        if self._read is None:
            value = self.store.get(BOOK_KEY) if self.store is not None else None
            self._read = dict(value) if isinstance(value, dict) else {}
        return copy.deepcopy(self._read)

    def write(self, **changes: Any) -> None:
        value = {k: v for k, v in {**self.value(), **changes}.items() if v is not None}
        if self.store is not None:
            self.store.set(BOOK_KEY, value)
        self._read = copy.deepcopy(value)

    def jobs(self) -> list[LaunchedJob]:
        """Return the jobs earlier launches recorded (an unreadable book is ignored, with a warning)."""
        try:
            return [LaunchedJob.from_json(item) for item in self.value().get("jobs", [])]
        except (TypeError, ValueError) as exc:
            self.log.warning("Ignoring the launch book this version cannot read (%s)", exc)
            self.write(jobs=None)
            return []

    def pending_sources(self, count: int) -> tuple[str, ...]:
        """Return the sources of the pending launch's ``count`` documents; () when its record has none."""
        sources = self.value().get("sending")
        return tuple(sources) if _strings(sources) and len(sources) == count else ()

    def launched(self, job: LaunchedJob) -> None:
        """Record a launched job and drop the pending record, in one write."""
        jobs = [*self.jobs(), job]
        self.write(jobs=[job.to_json() for job in jobs], pending=None, sending=None)

    def keep(self, jobs: Sequence[LaunchedJob]) -> None:
        """Keep only ``jobs`` (their documents as given)."""
        self.write(jobs=[job.to_json() for job in jobs] or None)


def adopt_pending(hook: WorkflowServiceHook, book: LaunchBook, grace: float, log: Log) -> None:
    """
    Resolve the launch an earlier try sent and never recorded: its job, proven, is recorded with its
    documents; unproven, the task fails closed (:class:`AmbiguousRunError`, as a run's does).
    """
    earlier = book.pending(None)
    if earlier is None:
        return
    with failing_closed(book, None, hook.workflowsvc_conn_id):
        job = job_of_earlier_try(hook, earlier, grace, log, pause)
    if job is None:
        book.clear()
        return
    names = tuple(unmarked(name, earlier.marker) for name in earlier.files or ())
    book.launched(
        LaunchedJob(job.id, names, book.pending_sources(len(names)), run_marker(job.input_file_ids))
    )


def redo(
    hook: WorkflowServiceHook, book: LaunchBook, fail_on_failed_files: bool, log: Log
) -> list[LaunchedJob]:
    """
    Read the jobs earlier tries launched and keep those that processed (or may be processing) their documents;
    the documents of a job that failed, was stopped or is gone, and a completed job's failed files when those
    fail the task, are launched again. A document processed, or maybe processing, never is.
    """
    kept: list[LaunchedJob] = []
    again: set[str] = set()
    for job in book.jobs():
        own = {source for source, _ in job.own()}
        try:
            record = hook.get_job(job.job_id)
        except WorkflowServiceNotFoundError:
            log.warning("Job %s of an earlier try is gone: its documents are launched again", job.job_id)
            again.update(own)
            continue
        status = record.status
        if status.is_active or status is JobStatus.UNKNOWN:
            kept.append(job)
        elif status.is_success:
            failed: set[str] = set()
            if fail_on_failed_files:
                failures = hook.get_job_failed_files(job.job_id).failed_files
                meant = [job.meant(unmarked(f.document, job.marker)) for f in failures]
                failed = {sources[0] for sources in meant if len(sources) == 1} & own
            again.update(failed)
            if failed < own:
                kept.append(replace(job, handed_over=job.handed_over | failed))
        else:
            log.info(
                "Job %s of an earlier try ended %s: its documents are launched again", job.job_id, status
            )
            again.update(own)
    book.keep(kept)
    if kept or again:
        log.info(
            "Earlier tries launched %d job(s) still counted; %d document(s) are launched again",
            len(kept),
            len(again),
        )
    return kept


# --------------------------------------------------------------------------------------------------
# Launching


@dataclass
class Plan:
    """What the wait is for: the jobs and their documents, and what was not launched (and why)."""

    jobs: list[LaunchedJob]
    unlaunched: list[tuple[str, str]] = field(default_factory=list)
    """The ``(source, name)`` of each document not launched."""
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    """Documents left out before launching (over the size limit): ``(source, name, why)`` each."""
    refusal: str | None = None
    """Why the launches stopped (the error's words), when they did."""
    final: bool = False
    """Whether a retry cannot help (then the task fails without retries)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": [job.to_json() for job in self.jobs],
            "unlaunched": [list(item) for item in self.unlaunched],
            "skipped": [list(item) for item in self.skipped],
            "refusal": self.refusal,
            "final": self.final,
        }

    @classmethod
    def from_json(cls, value: Any) -> Plan:
        """Read the plan a deferral carried; anything unexpected fails the task (closed)."""
        from airflow_provider_workflowsvc.exceptions import InvalidJobEventError

        try:
            return cls(
                jobs=[LaunchedJob.from_json(item) for item in value["jobs"]],
                unlaunched=[_named(*item) for item in value["unlaunched"]],
                skipped=[(*_named(*item[:-1]), str(item[-1])) for item in value["skipped"]],
                refusal=None if value["refusal"] is None else str(value["refusal"]),
                final=value["final"] is True,
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise InvalidJobEventError(f"the deferred task's plan cannot be read: {exc}") from None


def _named(source: Any, name: Any) -> tuple[str, str]:
    """Return a planned document's ``(source, name)``."""
    return str(source), str(name)


def refusal_is_final(exc: BaseException) -> bool:
    """Whether a stopped launch cannot be cured by a retry (a used-up quota, a refused request, ...)."""
    from airflow_provider_workflowsvc._compat import AirflowFailException

    return isinstance(exc, AirflowFailException) or not may_retry_refused(exc)


def launch(
    hook: WorkflowServiceHook,
    docs: Sequence[Document],
    big: Sequence[Document],
    book: LaunchBook,
    send: Callable[[WorkflowServiceHook, list[tuple[str, str]] | None], Any],
    *,
    max_files: int,
    max_bytes: int,
    interval: float,
    attempts: int,
    grace: float,
    mark: bool,
    fail_on_failed_files: bool,
    on_launch: Callable[[str], None],
) -> Plan:
    """
    Launch the documents no earlier try processed (:func:`adopt_pending`, :func:`redo`) in batches of
    ``max_files`` (``big``, those over ``max_bytes``, left out), one job each, ``interval`` seconds apart at
    least; return the plan. The first launch that fails stops the launches (its documents and those
    after it are not launched); when nothing was launched at all, it fails the task. ``on_launch``
    hears of each job as soon as it is counted (those of earlier tries first).
    """
    log = book.log
    adopt_pending(hook, book, grace, log)
    kept = redo(hook, book, fail_on_failed_files, log)
    for earlier in kept:
        on_launch(earlier.job_id)  # a kill from now on cancels what was launched
    covered = {source for job in kept for source, _ in job.own()}
    todo = [doc for doc in docs if doc not in big and doc.source not in covered]
    batches = split(todo, max_files)
    log.info(
        "%d document(s): %d job(s) to launch (at most %d file(s) each)%s%s%s",
        len(docs),
        len(batches),
        max_files,
        f", {len(covered)} document(s) in {len(kept)} job(s) of earlier tries" if kept else "",
        f", {len(big)} over the size limit left out" if big else "",
        ", more jobs than the files need: files of one name (or base name) never share a job, where "
        "the service's answers could not tell them apart"
        if len(batches) > -(-len(todo) // max_files)
        else "",
    )
    plan = Plan(jobs=list(kept), skipped=[(doc.source, doc.name, left_out(doc, max_bytes)) for doc in big])
    answered: float | None = None  # when the last launch was answered: the next leaves interval s after
    for index, batch in enumerate(batches):
        left = 0.0 if answered is None else answered + interval - clock()
        if left > 0:
            log.debug("Waiting %.2f s before the next launch", left)
            pause(left)
        book.sources = [doc.source for doc in batch]
        try:
            job = submit(
                hook,
                Sending(None, send),  # a launch: its job belongs to no workflow
                [(doc.path, doc.name) for doc in batch],
                log,
                attempts=attempts,
                grace=grace,
                sleep=pause,
                journal=book,
                mark=mark,
            )
        except Exception as exc:
            plan.unlaunched = [(doc.source, doc.name) for rest in batches[index:] for doc in rest]
            log.error(
                "Launching job %d of %d failed (%s): %d document(s) are not launched",
                index + 1,
                len(batches),
                exc,
                len(plan.unlaunched),
            )
            refusal = missing_operation(exc, hook.settings.base_url) or exc
            if not plan.jobs and refusal is exc:
                raise
            if not plan.jobs:
                raise refusal from None
            plan.refusal, plan.final = str(refusal), refusal_is_final(refusal)
            break
        finally:
            answered = clock()
        names, sources = tuple(doc.name for doc in batch), tuple(doc.source for doc in batch)
        launched = LaunchedJob(job.id, names, sources, run_marker(job.input_file_ids))
        book.launched(launched)
        plan.jobs.append(launched)
        on_launch(job.id)
        log.info("Launched job %s (%d of %d) for %d file(s)", job.id, index + 1, len(batches), len(batch))
    return plan
