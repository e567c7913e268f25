"""The lifecycle both job operators share around their jobs (a workflow's run, on-demand jobs)."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, NoReturn, cast
from urllib.parse import quote, urlsplit, urlunsplit

from airflow_provider_workflowsvc._compat import HAS_TASK_STATE_STORE
from airflow_provider_workflowsvc._tasks.base import (
    WorkflowServiceBaseOperator,
    input_error,
    interval_seconds,
    positive_seconds,
)

if TYPE_CHECKING:
    from collections.abc import Collection
    from datetime import timedelta

    from airflow.sdk import Context


JOB_SETTINGS = (
    "files",
    "files_conn_id",
    "poll_interval",
    "timeout",
    "fail_on_failed_files",
    "cancel_on_timeout",
    "cancel_on_kill",
    "submit_attempts",
    "mark_uploads",
    "skip_if_no_files",
    "durable",
)
"""The parameters both job operators take alike (each declares them, with its defaults and docs)."""


def job_settings(arguments: dict[str, Any]) -> dict[str, Any]:
    """Return the :data:`JOB_SETTINGS` among a job operator's ``arguments`` (its ``locals()``)."""
    return {name: arguments[name] for name in JOB_SETTINGS}


def job_url(ui_url: str | None, job_id: str) -> str:
    """
    Return ``ui_url`` with ``{job_id}`` filled in, else ``{ui_url}/jobs/{job_id}``; "" without ``ui_url``
    (none is guessed from the API's address: the spec says nothing of a web interface). Any
    ``user:password@`` is dropped: a link ends up in XCom and the UI.
    """
    ui = (ui_url or "").strip()
    parts = urlsplit(ui)
    if "@" in parts.netloc:
        ui = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    if not ui:
        return ""
    quoted = quote(str(job_id), safe="")
    if "{job_id}" in ui:
        return ui.replace("{job_id}", quoted)
    return f"{ui.rstrip('/')}/jobs/{quoted}"


class VariableStore:
    """
    The task state store where Airflow has none (3.0-3.2): one Airflow Variable per task instance, its
    keys in one JSON object, read once a try, each write read back (docs/decisions/runs.md).
    """

    PREFIX = "workflowsvc.task_state:"
    DESCRIPTION = "airflow-provider-workflowsvc: the task's state between its tries; deleted when it succeeds"

    def __init__(self, ti: Any) -> None:
        name = f"{ti.dag_id}:{ti.task_id}:{ti.map_index}:{ti.run_id}"
        # hashed when long or not plain: Airflow 3.0's execution API takes no "/" in a Variable key
        if len(self.PREFIX + name) > 250 or not re.fullmatch(r"[\w.~:+-]+", name, re.ASCII):
            import hashlib  # only for such a name: operators import little at DAG parse

            name = f"{ti.dag_id[:80]}:{hashlib.sha256(name.encode()).hexdigest()}"
        self.key = self.PREFIX + name
        self._values: dict[str, Any] | None = None

    def _stored(self) -> dict[str, Any]:
        import json  # when a task runs: operators import little at DAG parse

        from airflow.sdk import Variable

        text = Variable.get(self.key, default=None)  # 3.0's deserialize_json made pydantic warn
        try:
            value = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            value = None
        return value if isinstance(value, dict) else {}

    def values(self) -> dict[str, Any]:
        if self._values is None:
            self._values = self._stored()
        return dict(self._values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values().get(key, default)

    def set(self, key: str, value: Any) -> None:
        self._write({**self.values(), key: value})

    def delete(self, key: str) -> None:
        values = self.values()
        if values.pop(key, None) is not None:
            self._write(values)

    def _write(self, values: dict[str, Any]) -> None:
        import json

        from airflow.sdk import Variable

        self._values = None  # read again after a write that failed
        if not values:
            Variable.delete(self.key)
            self._values = {}
            return
        Variable.set(self.key, json.dumps(values), self.DESCRIPTION)
        stored = self._stored()
        if stored != values:
            raise RuntimeError(f"Could not keep the task's state in the Airflow Variable {self.key}")
        self._values = stored


DELIVERED_KEY = "workflowsvc_delivered"
"""Task state key: the ``max_tries`` of the clear in which the task succeeded (never rename it)."""


class JobOperator(WorkflowServiceBaseOperator):
    """
    What both job operators do around their jobs: the settings of the wait, the task state store
    (durable execution), the job link, the wait's deadline and deferral, the cancel after a timeout or
    on kill, and a failure that pushes its summary first.
    """

    def __init__(
        self,
        *,
        files: Any,
        files_conn_id: str | None,
        poll_interval: float | timedelta,
        timeout: float | timedelta,
        deferrable: bool,
        fail_on_failed_files: bool,
        cancel_on_timeout: bool,
        cancel_on_kill: bool,
        submit_attempts: int,
        mark_uploads: bool,
        skip_if_no_files: bool,
        durable: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if submit_attempts < 1:
            raise input_error(f"submit_attempts must be at least 1, got {submit_attempts}")
        self.files = files
        self.files_conn_id = files_conn_id
        self.poll_interval = interval_seconds(poll_interval, "poll_interval")
        self.timeout = positive_seconds(timeout, "timeout")
        self.deferrable = deferrable
        self.fail_on_failed_files = fail_on_failed_files
        self.cancel_on_timeout = cancel_on_timeout
        self.cancel_on_kill = cancel_on_kill
        self.submit_attempts = submit_attempts
        self.mark_uploads = mark_uploads
        self.skip_if_no_files = skip_if_no_files
        self.durable = durable

    def state_keys(self) -> tuple[str, ...]:
        """Return the task state keys of the task's jobs: kept after its success, dropped after a clear."""
        raise NotImplementedError

    def jobs_to_cancel_on_kill(self) -> list[str]:
        """Return the jobs a kill cancels: those this task started, known so far."""
        raise NotImplementedError

    def on_kill(self) -> None:
        """Send a cancel for every job this task started and return (the worker is killed moments later)."""
        job_ids = self.jobs_to_cancel_on_kill() if self.cancel_on_kill else []
        if not job_ids:
            return
        from airflow_provider_workflowsvc.wait.poll import CANCEL_BUDGET, cancel_quietly

        until = time.time() + CANCEL_BUDGET
        try:
            with self.separate_hook() as hook:
                for job_id in job_ids:
                    cancel_quietly(hook, job_id, self.log, within=max(until - time.time(), 0.1))
        except Exception as exc:
            self.log.warning("Could not cancel job(s) %s: %s", ", ".join(job_ids), exc)

    def state_store(self, context: Context) -> Any:
        """
        Return the store kept across tries when durable execution is on, else None: the context's task
        state store (Airflow 3.3+ always gives one), else a :class:`VariableStore`, kept in the try's
        context (one store a try: it keeps what it read and wrote).
        """
        if not self.durable:
            return None
        if not HAS_TASK_STATE_STORE and "task_state_store" not in context:
            cast("dict[str, Any]", context)["task_state_store"] = VariableStore(context["ti"])
        return context.get("task_state_store")

    def delivered(self, context: Context) -> None:
        """
        Keep the task's jobs in the store after its success, marked with this clear's ``max_tries``: a
        retry of the same clear (Airflow failed the try after it delivered, before its success was
        recorded) goes on with them instead of running them twice; after a person's clear (Airflow
        raises ``max_tries``) :meth:`forget_if_cleared` drops them. The Variable store (Airflow < 3.3) is
        deleted instead, as Variables would pile up: that window stays there.
        """
        store = self.state_store(context)
        clear = getattr(context["ti"], "max_tries", None)
        if store is None or isinstance(store, VariableStore) or not isinstance(clear, int):
            self.forget(context, *self.state_keys())
            return
        try:
            store.set(DELIVERED_KEY, clear)
        except Exception as exc:  # kept unmarked, a later clear goes on with the ended jobs: no duplicate
            self.log.warning("Could not mark the task's jobs delivered in the task state store: %s", exc)

    def forget_if_cleared(self, context: Context) -> None:
        """Drop the jobs a success before a person's clear kept (:meth:`delivered`): the task runs anew."""
        store = self.state_store(context)
        delivered = None if store is None else store.get(DELIVERED_KEY)
        if delivered is None or delivered == getattr(context["ti"], "max_tries", None):
            return
        self.log.info("This task succeeded before it was cleared: its jobs are done with, it runs anew")
        self.forget(context, *self.state_keys(), DELIVERED_KEY)

    def forget(self, context: Context, *keys: str) -> None:
        """Remove ``keys`` from the task state store (a failure to is only warned of)."""
        store = self.state_store(context)
        for key in keys if store is not None else ():
            try:
                store.delete(key)
            except Exception as exc:
                self.log.warning("Could not remove %s from the task state store: %s", key, exc)

    def job_links(self, job_ids: Collection[str]) -> dict[str, str]:
        """Each job's link (:func:`job_url`), from the connection's ``ui_url`` extra ("" without it)."""
        if not job_ids:
            return {}
        extra = self.hook.get_connection(self.workflowsvc_conn_id).extra_dejson or {}
        return {job_id: job_url(extra.get("ui_url"), job_id) for job_id in job_ids}

    def push_links(self, context: Context, job_ids: Collection[str] = ()) -> dict[str, str]:
        """
        Push the extra link's URL, the first job's; return each job's link ("" without ``ui_url``). ""
        is pushed from the start until a job is known, for Airflow reads every extra link as the task
        ends and logs a missing one as an error, which after a refused run read as a second failure.
        """
        links = self.job_links(job_ids)
        first = next(iter(links.values()), "")
        context["ti"].xcom_push(key=next(iter(self.operator_extra_links)).xcom_key, value=first)
        return links

    def cancel_after_timeout(self, job_id: str) -> str:
        """Cancel a job whose wait timed out (when ``cancel_on_timeout``); a note of what became of it."""
        from airflow_provider_workflowsvc.wait.poll import CANCEL_BUDGET, cancel_quietly

        if not self.cancel_on_timeout:
            return "the job was left running (cancel_on_timeout=False)"
        try:
            cancelled = cancel_quietly(self.hook, job_id, self.log, within=CANCEL_BUDGET)
        except Exception as exc:
            return f"cancelling it failed: {exc}"
        return "the job was cancelled" if cancelled else "the job had just ended"

    def fail(self, context: Context, summary: dict[str, Any], error: BaseException) -> NoReturn:
        """Push ``summary`` as the return value (when XComs are pushed), then raise ``error``."""
        if self.do_xcom_push:
            context["ti"].xcom_push(key="return_value", value=summary)
        raise error
