"""
What every Workflow Service task shares: the connection and its hook, input checks, secret masking, job
ids. Imported when a DAG file is parsed, so it imports only ``airflow.sdk``, the standard library and
typing; the hook and models are imported when a task runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import BaseOperator

from airflow_provider_workflowsvc._compat import conf
from airflow_provider_workflowsvc.hooks import DEFAULT_CONN_ID

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import Context, XComArg

    from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceHook


IF_EXISTS_CHOICES = ("reuse", "update", "fail")

_JINJA_MARKERS = ("{{", "{%", "{#")
_PLAIN_SCALARS = (str, int, float, bool, type(None))


def is_deferred_value(value: Any) -> bool:
    """
    Whether ``value`` is only known when the task runs (a Jinja template, an XComArg or similar): a
    container when any item is; a pydantic model never.
    """
    if isinstance(value, str):
        return any(marker in value for marker in _JINJA_MARKERS)
    if isinstance(value, _PLAIN_SCALARS) or hasattr(value, "model_dump"):
        return False
    if isinstance(value, Mapping):
        return any(is_deferred_value(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(is_deferred_value(v) for v in value)
    return True


def static_str(value: Any) -> str | None:
    """``value`` if it is a string known at DAG parse time, else None."""
    return value if isinstance(value, str) and not is_deferred_value(value) else None


def rendered(value: str | XComArg) -> str:
    """``value`` typed as it is when the task runs: templates rendered and XComArgs resolved."""
    return cast("str", value)


def positive_seconds(value: float | timedelta, what: str) -> float:
    """``value`` (seconds or a timedelta) in seconds; an input error unless positive."""
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else float(value)
    if seconds <= 0:
        raise input_error(f"{what} must be positive, got {value!r}")
    return seconds


MIN_POLL_INTERVAL = 1.0
"""The default floor of every poll and poke interval, in seconds: ``[workflowsvc] min_poll_interval``."""


def min_poll_interval() -> float:
    """Return the smallest poll interval allowed here: ``[workflowsvc] min_poll_interval`` (default 1 s)."""
    return conf.getfloat("workflowsvc", "min_poll_interval", fallback=MIN_POLL_INTERVAL)


def interval_seconds(value: float | timedelta, what: str) -> float:
    """
    ``value`` in seconds; an input error when under :func:`min_poll_interval` (a poll loop must not
    hammer the service: ``0`` meant hundreds of requests a second).
    """
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else float(value)
    floor = min_poll_interval()
    if seconds < floor or seconds <= 0:
        raise input_error(
            f"{what} must be a positive number of seconds, at least {floor:g} s (the [workflowsvc] "
            f"min_poll_interval setting), got {value!r}"
        )
    return seconds


def input_error(message: str) -> Exception:
    """Make the provider's input error (imported only when there is an error to raise)."""
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError

    return WorkflowServiceInputError(message)


@contextmanager
def invalid_input_fails() -> Iterator[None]:
    """Turn input errors raised inside the block into :class:`InvalidTaskInputError` (no retries)."""
    from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError, WorkflowServiceInputError

    try:
        yield
    except InvalidTaskInputError:
        raise
    except WorkflowServiceInputError as exc:
        raise InvalidTaskInputError(str(exc)) from None


def check_choice(value: Any, allowed: Collection[str], what: str) -> None:
    """Raise an input error when ``value`` is known now and is not one of ``allowed`` (any spelling)."""
    if value is None or is_deferred_value(value):
        return
    if not isinstance(value, str):
        raise input_error(f"{what} must be a string, got {type(value).__name__}")
    from airflow_provider_workflowsvc.connectors_catalog import normalized

    if normalized(value) not in {normalized(a) for a in allowed}:
        raise input_error(f"unknown {what} {value!r}; expected one of: {', '.join(allowed)}")


def check_uuid(value: Any, what: str) -> None:
    """Raise an input error when ``value`` is known now and is not a UUID."""
    text = static_str(value)
    if text is None:
        return
    try:
        uuid.UUID(text.strip())
    except ValueError:
        raise input_error(f"{what} must be a UUID, got {text!r}") from None


def one_of(value: str, allowed: Sequence[str], what: str) -> str:
    """``value`` if it is exactly one of ``allowed`` (an argument never templated), else an input error."""
    if value not in allowed:
        raise input_error(f"{what} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def default_deferrable(deferrable: bool | None) -> bool:
    """Return ``deferrable``, or ``[operators] default_deferrable`` when it is None."""
    if deferrable is not None:
        return deferrable
    return conf.getboolean("operators", "default_deferrable", fallback=False)


# --------------------------------------------------------------------------------------------------
# The job id in XCom


XCOM_JOB_ID = "job_id"


def job_id_of(job_id: Any, run_task_id: str | None, context: Context) -> str:
    """Return the job id given or pulled from XCom; an empty one fails the task without retries."""
    from airflow_provider_workflowsvc.exceptions import InvalidTaskInputError

    if (job_id is None or str(job_id).strip() in ("", "None")) and run_task_id:
        job_id = context["ti"].xcom_pull(task_ids=run_task_id, key=XCOM_JOB_ID)
    text = "" if job_id is None else str(job_id).strip()
    if not text or text == "None":
        where = f" (XCom {XCOM_JOB_ID!r} of task {run_task_id!r} is empty)" if run_task_id else ""
        raise InvalidTaskInputError(f"job_id is empty{where}")
    return text


# --------------------------------------------------------------------------------------------------
# The base of every operator and sensor


class WorkflowServiceTaskMixin:
    """
    What every Workflow Service operator and sensor has: its connection, a hook made on first use (after
    templates are rendered), masking.

    :meth:`closing_hook` closes the hook's client after each step (a deferred task resumes with a new one).
    ``secret_fields`` name the fields that may hold secrets, registered with Airflow's masker once rendered
    (:func:`.secrets.mask_fields`; docs/decisions/operators.md, "Secrets in configs and rendered fields").

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    """

    secret_fields: ClassVar[Sequence[str]] = ()

    def __init__(self, *, workflowsvc_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workflowsvc_conn_id = workflowsvc_conn_id

    @cached_property
    def hook(self) -> WorkflowServiceHook:
        """The hook for ``workflowsvc_conn_id`` (made on first use)."""
        return self._make_hook()

    def separate_hook(self) -> WorkflowServiceHook:
        """
        Make a second hook with its own client, for a request sent while the task's may be in use
        (``on_kill``: the task's client may be mid-request), with the settings the task's hook already read.
        """
        own = self.__dict__.get("hook")
        return self._make_hook(own.settings if own is not None else None)

    def _make_hook(self, settings: ConnectionSettings | None = None) -> WorkflowServiceHook:
        from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

        return WorkflowServiceHook(self.workflowsvc_conn_id, settings=settings)

    @contextmanager
    def closing_hook(self) -> Iterator[None]:
        """Close the hook's client when the block ends, if one was made (a new one opens when it is used)."""
        try:
            yield
        finally:
            own = self.__dict__.get("hook")
            if own is not None:
                own.close()

    def _do_render_template_fields(self, parent: Any, *args: Any, **kwargs: Any) -> None:
        # The one step both plain and mapped (expanded) tasks render their fields through; Airflow
        # stores the rendered fields right after it returns.
        from airflow_provider_workflowsvc._tasks.secrets import plain_fields

        if parent is self and self.secret_fields:
            plain_fields(self)
        super()._do_render_template_fields(parent, *args, **kwargs)  # type: ignore[misc]
        if parent is self:
            self.mask_secret_fields()

    def mask_secret_fields(self) -> None:
        """Register the secrets of the rendered fields with Airflow's secret masker (:func:`.mask_fields`)."""
        from airflow_provider_workflowsvc._tasks.secrets import mask_fields

        mask_fields(self)


class WorkflowServiceBaseOperator(WorkflowServiceTaskMixin, BaseOperator):
    """
    Base of the Workflow Service operators: :class:`WorkflowServiceTaskMixin` on an Airflow operator.

    :param workflowsvc_conn_id: Airflow connection of type ``workflowsvc``.
    """

    # Declared here, not only on the mixin: Airflow fills a DAG's ``default_args`` into the parameters
    # of the ``__init__`` methods of operator classes, and the mixin is not one.
    def __init__(self, *, workflowsvc_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(workflowsvc_conn_id=workflowsvc_conn_id, **kwargs)
