"""
Errors raised by the Workflow Service provider.

Every message names what went wrong and where; none carries a token, API key or secret config value
(pydantic's own messages echo input values, so validation errors are re-rendered without them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_workflowsvc._compat import AirflowException, AirflowFailException

if TYPE_CHECKING:
    from pydantic import BaseModel

    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

M = TypeVar("M", bound="BaseModel")

__all__ = [
    "AmbiguousRunError",
    "ConnectionCheckFailedError",
    "ExistingResourceError",
    "InputReadError",
    "InvalidJobEventError",
    "InvalidTaskInputError",
    "NoFilesMatchedError",
    "ObjectStorageError",
    "UnprocessedDocumentsError",
    "UnprocessedDocumentsNoRetryError",
    "WebhookVerificationError",
    "WorkflowJobError",
    "WorkflowJobFailedError",
    "WorkflowJobTimeoutError",
    "WorkflowJobWaitError",
    "WorkflowServiceApiError",
    "WorkflowServiceAuthError",
    "WorkflowServiceAuthUnconfirmedError",
    "WorkflowServiceConflictError",
    "WorkflowServiceConnectionError",
    "WorkflowServiceError",
    "WorkflowServiceInputError",
    "WorkflowServiceNotFoundError",
    "WorkflowServiceQuotaError",
    "WorkflowServiceRateLimitError",
    "WorkflowServiceResponseError",
    "WorkflowServiceServerError",
    "WorkflowServiceValidationError",
    "error_for_status",
    "format_validation_errors",
    "validate_input",
]


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls)
    BaseException.__init__(error, *args)
    error.__dict__.update(state)
    return error


class WorkflowServiceError(AirflowException):
    """Base class of every error this provider raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        # The subclasses take several constructor arguments but pass one message up: pickle the
        # message and the attributes, not the constructor call (errors cross process boundaries).
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class WorkflowServiceInputError(WorkflowServiceError, ValueError):
    """Input refused before any request was sent."""


def format_validation_errors(errors: Sequence[Any]) -> str:
    """Render pydantic error dicts as ``field.path: message`` lines, never echoing input values."""
    lines = []
    for err in errors:
        location = ".".join(str(part) for part in err.get("loc", ()) if not _is_union_tag(part))
        message = str(err.get("msg", "invalid value"))
        message = message.removeprefix("Value error, ")
        lines.append(f"{location}: {message}" if location else message)
    return "; ".join(dict.fromkeys(lines))


def _is_union_tag(part: Any) -> bool:
    text = str(part)
    return text.startswith("function-") or text[:1].isupper()


def validate_input(model: type[M], what: str, data: Any) -> M:
    """Validate ``data`` as ``model``; raise :class:`WorkflowServiceInputError` naming ``what``."""
    from pydantic import ValidationError

    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = format_validation_errors(exc.errors(include_input=False, include_url=False))
        raise WorkflowServiceInputError(f"invalid {what}: {details}") from None


class WorkflowServiceConnectionError(WorkflowServiceError):
    """
    The request did not get an HTTP response (connection refused or dropped, timeout, TLS, DNS).

    ``sent`` is False only when the request provably never reached the server (the connection was
    never established), which is the one case where a run or create may be sent again. ``url`` is the
    full URL (no credentials, no query), ``conn_id`` the Airflow connection, ``kind`` what failed
    (``tls_version``, ``certificate``, ``dns``, ``dns_temporary``, ``refused``, ``connect_timeout``,
    ``connect``, ``read_timeout``, ``dropped``, ``deadline``) and ``hint`` what to check ("" when
    nothing in the connection is to blame). ``permanent``: the same request would fail the same way
    again (a TLS or certificate mismatch, a host name that does not exist), so it is not retried.
    """

    def __init__(
        self,
        method: str,
        path: str,
        reason: str,
        *,
        sent: bool = True,
        url: str = "",
        conn_id: str = "",
        kind: str = "other",
        hint: str = "",
        permanent: bool = False,
    ) -> None:
        self.method, self.path, self.reason, self.sent = method, path, reason, sent
        self.url, self.conn_id, self.kind, self.hint, self.permanent = url, conn_id, kind, hint, permanent
        where = f" (connection {conn_id!r})" if conn_id else ""
        text = f"{method} {url or path} failed{where}: {reason}"
        super().__init__(f"{text}. {hint}" if hint else text)


class WorkflowServiceResponseError(WorkflowServiceError):
    """The server answered, but not with the shape the spec describes (non-JSON, truncated, wrong fields)."""

    status_code: int  # type: ignore[assignment]  # the HTTP status received (AirflowException: HTTPStatus)

    def __init__(self, method: str, path: str, status_code: int, reason: str) -> None:
        self.method, self.path, self.status_code, self.reason = method, path, status_code, reason
        super().__init__(f"{method} {path} returned {status_code} with an unexpected body: {reason}")


class WorkflowServiceApiError(WorkflowServiceError):
    """
    The server answered with an error status.

    ``status_code``, ``method``, ``path`` (full URL path), ``detail`` (the server's explanation, a 422
    detail list rendered as ``field: message`` lines), ``reason`` (the HTTP reason phrase) and
    ``retry_after`` (seconds, when the server sent ``Retry-After``); ``retryable`` False when the body
    said ``"retryable": false`` (the request is then not sent again, whatever its status).
    """

    status_code: int  # type: ignore[assignment]  # the HTTP status received (AirflowException: HTTPStatus)

    def __init__(
        self,
        status_code: int,
        method: str,
        path: str,
        detail: str,
        reason: str = "",
        *,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        self.status_code, self.method, self.path, self.detail = status_code, method, path, detail
        self.reason, self.retry_after, self.retryable = reason, retry_after, retryable
        status = f"{status_code} {reason}".strip()
        super().__init__(f"{method} {path} → {status}: {detail}" if detail else f"{method} {path} → {status}")


class WorkflowServiceAuthError(WorkflowServiceApiError):
    """401 or 403: the token or API key is missing, wrong, or lacks access."""


class WorkflowServiceAuthUnconfirmedError(WorkflowServiceAuthError):
    """
    401 or 403 while the Airflow connection could not be read again: the credentials may have been
    rotated, so the refusal is not final. A wait goes on (its next poll tries again); a task fails,
    and its retries apply.
    """


class WorkflowServiceNotFoundError(WorkflowServiceApiError):
    """404: the resource does not exist."""


class WorkflowServiceConflictError(WorkflowServiceApiError):
    """409: the request conflicts with the current state (for example a duplicate name)."""


class WorkflowServiceValidationError(WorkflowServiceApiError):
    """400 or 422: the server refused the request body or parameters."""


class WorkflowServiceRateLimitError(WorkflowServiceApiError):
    """429: too many requests; ``retry_after`` is the server's wish in seconds, when it gave one."""


class WorkflowServiceServerError(WorkflowServiceApiError):
    """5xx: the server failed."""


class WorkflowServiceQuotaError(WorkflowServiceApiError, AirflowFailException):
    """
    402, or a refusal saying the account's API quota is used up ("Insufficient API quota"): retrying
    cannot cure it, so it is never retried and the task fails without retries, saying what to do.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.args = (f"{self.args[0]}. {QUOTA_ADVICE}",)


QUOTA_ADVICE = (
    "The service refuses work until the account's quota is raised or its payment is made: retrying "
    "cannot help. Check the usage, quota and billing of the account that owns the API key in the "
    "service's dashboard (or ask its owner), then clear the task"
)
"""What to do about a quota refusal (the docs' advice, in short), added to its message."""

_QUOTA_WORDS = re.compile(r"insufficient\b.*\bquota|\bquota\b.*\b(exceeded|exhausted|reached|used up)", re.I)
"""How a refusal that is not a 402 says the quota is used up (the docs: "Insufficient API quota")."""


_STATUS_CLASSES: dict[int, type[WorkflowServiceApiError]] = {
    400: WorkflowServiceValidationError,
    401: WorkflowServiceAuthError,
    403: WorkflowServiceAuthError,
    404: WorkflowServiceNotFoundError,
    409: WorkflowServiceConflictError,
    422: WorkflowServiceValidationError,
    429: WorkflowServiceRateLimitError,
}


def error_for_status(status_code: int, detail: str = "") -> type[WorkflowServiceApiError]:
    """
    Return the exception class for an HTTP error status and the server's ``detail``: a 402, or a
    4xx whose detail says the quota is used up, is a :class:`WorkflowServiceQuotaError`.
    """
    if status_code >= 500:
        return WorkflowServiceServerError
    if status_code == 402 or _QUOTA_WORDS.search(detail):
        return WorkflowServiceQuotaError
    return _STATUS_CLASSES.get(status_code, WorkflowServiceApiError)


# --------------------------------------------------------------------------------------------------
# Errors of tasks: bad task input, runs, waits and connection checks


class InvalidTaskInputError(WorkflowServiceInputError, AirflowFailException):
    """The task's input is invalid: the task fails without retries (a retry would render the same input)."""


class NoFilesMatchedError(WorkflowServiceInputError):
    """A directory or glob pattern of ``files`` matches no file."""


class InputReadError(WorkflowServiceError):
    """
    An input file or object failed to read while the run request was sending it: the request was
    aborted before its body reached its declared length, so no complete request reached the service.
    """


class ObjectStorageError(WorkflowServiceError):
    """
    Object storage could not be listed, read or written for a reason other than the location itself
    (the store unreachable, throttling, a server error): a retry of the task may pass.
    """


class ExistingResourceError(WorkflowServiceError, AirflowFailException):
    """A resource with the requested name exists and cannot be used (``if_exists='fail'``, other type)."""


class AmbiguousRunError(WorkflowServiceError, AirflowFailException):
    """
    Whether (or which) job a run created cannot be proven; nothing is run again.

    The task fails without retries: a retry could only guess, or (without durable execution) run the
    workflow a second time.
    """


class WorkflowAlreadyRunningError(WorkflowServiceError):
    """
    A job of the workflow is running (scheduled or in progress), and ``RunWorkflowOperator`` was told not to
    run it beside one (``if_running='fail'``), or cannot tell which one to wait for (``'wait'``).

    Retries apply: a later try finds the job ended, and runs the workflow.
    """


class WebhookVerificationError(WorkflowServiceError, ValueError):
    """
    A webhook delivery not proven to come from the service (:func:`~.webhooks.verify_webhook`):
    ``reason`` is ``missing_header``, ``malformed_header``, ``timestamp``, ``signature``, ``body`` or
    ``secret``. The message never holds the secret or a signature.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class InvalidJobEventError(WorkflowServiceError):
    """The trigger's event is missing or not what the trigger sends: the task fails (closed)."""


class WorkflowJobError(WorkflowServiceError):
    """A job did not end the way the task needs; ``outcome`` holds everything known about it."""

    def __init__(self, message: str, outcome: JobOutcome | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome


class WorkflowJobFailedError(WorkflowJobError):
    """The job failed, was stopped, or completed with failed files (when those count as failure)."""


class WorkflowJobTimeoutError(WorkflowJobError):
    """The job did not finish before the task's timeout."""


class WorkflowJobWaitError(WorkflowJobError):
    """
    The wait could not observe its job (the service refused or did not find it, or answered in a way
    no poll survives): nothing is known of the job's end, so the task's retries apply, also for a
    sensor, and ``soft_fail`` does not skip it.
    """


class UnprocessedDocumentsError(WorkflowServiceError):
    """
    Some documents of an on-demand task were not processed (failed, stopped, timed out, never
    launched); ``summary`` holds every document's outcome. A retry (durable execution, Airflow 3.3+)
    launches only those documents.
    """

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


class UnprocessedDocumentsNoRetryError(UnprocessedDocumentsError, AirflowFailException):
    """
    :class:`UnprocessedDocumentsError` that fails the task without retries: a retry cannot help (a
    used-up quota, a refused request, an unproven launch), or nothing remembers which documents were
    processed (no task state store), so a retry would launch them all again.
    """


class ConnectionCheckFailedError(WorkflowServiceError):
    """A connector's connection check ended in failure, or did not end in time."""

    def __init__(self, message: str, *, connector_id: str = "", reason: str | None = None) -> None:
        super().__init__(message)
        self.connector_id, self.reason = connector_id, reason
