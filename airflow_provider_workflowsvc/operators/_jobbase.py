"""
What the job operators share: the hook, the job id and link in XCom, argument checks.

Imported when a DAG file is parsed: only the Task SDK, the standard library and typing at module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

from airflow_provider_workflowsvc._compat import conf

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

XCOM_JOB_ID = "job_id"
LINK_XCOM_KEY = "_link_WorkflowJobLink"
"""Where the job link is pushed: ``WorkflowJobLink.xcom_key`` (the default for that class name)."""


def _default_deferrable(deferrable: bool | None) -> bool:
    if deferrable is not None:
        return deferrable
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def job_url(ui_url: str | None, job_id: str) -> str:
    """
    ``ui_url`` with ``{job_id}`` filled in, else ``{ui_url}/jobs/{job_id}``; "" without ``ui_url``.

    The spec says nothing of a web interface, so none is guessed from the API's address (the API's
    job record answers 401 in a browser): without the ``ui_url`` extra there is no link.
    """
    ui = _without_userinfo((ui_url or "").strip())
    if not ui:
        return ""
    quoted = quote(str(job_id), safe="")
    if "{job_id}" in ui:
        return ui.replace("{job_id}", quoted)
    return f"{ui.rstrip('/')}/jobs/{quoted}"


def _without_userinfo(url: str) -> str:
    """The URL without any ``user:password@`` (a link ends up in XCom and the UI)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


class _JobTask:
    """What the job operators share: a lazily made hook (closed after each step) and the job link."""

    workflowsvc_conn_id: str
    log: Any
    _hook: WorkflowServiceHook | None = None

    @property
    def hook(self) -> WorkflowServiceHook:
        if self._hook is None:
            from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

            self._hook = WorkflowServiceHook(self.workflowsvc_conn_id)
        return self._hook

    def _close_hook(self) -> None:
        if self._hook is not None:
            self._hook.close()

    def _announce(self, context: Context, job_id: str) -> None:
        """
        Push the job id and its link (XCom; "" without ``ui_url``) before any waiting, so the UI
        shows them at once.
        """
        ui_url = (self.hook.get_connection(self.workflowsvc_conn_id).extra_dejson or {}).get("ui_url")
        url = job_url(ui_url, job_id)
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=job_id)
        # Pushed even when empty: the task runner reads every extra link when the task ends, and a
        # missing XCom is logged there as an error.
        context["ti"].xcom_push(key=LINK_XCOM_KEY, value=url)
        if url:
            self.log.info("Job %s: %s", job_id, url)
        else:
            self.log.info("Job %s (set the connection extra ui_url to get a link to it)", job_id)


def _job_id_of(job_id: Any, run_task_id: str | None, context: Context) -> str:
    """The job id given or pulled from XCom; an empty one fails the task without retries."""
    from airflow_provider_workflowsvc.operators._execution import InvalidTaskInputError

    if (job_id is None or str(job_id).strip() in ("", "None")) and run_task_id:
        job_id = context["ti"].xcom_pull(task_ids=run_task_id, key=XCOM_JOB_ID)
    text = "" if job_id is None else str(job_id).strip()
    if not text or text == "None":
        where = f" (XCom {XCOM_JOB_ID!r} of task {run_task_id!r} is empty)" if run_task_id else ""
        raise InvalidTaskInputError(f"job_id is empty{where}")
    return text
