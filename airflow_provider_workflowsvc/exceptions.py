"""Errors raised by the Workflow Service provider: each names what went wrong and where, never a secret."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_workflowsvc._compat import AirflowException, AirflowFailException

if TYPE_CHECKING:
    from pydantic import BaseModel

    from airflow_provider_workflowsvc.wait.outcome import JobOutcome

M = TypeVar("M", bound="BaseModel")


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls)
    BaseException.__init__(error, *args)
    error.__dict__.update(state)
    return error


class WorkflowServiceError(AirflowException):
    """Base class of every error this provider raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as message and attributes, not the constructor call (errors cross processes)
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
    The request got no HTTP response (connection refused or dropped, timeout, TLS, DNS).

    ``sent`` is False only when the request provably never reached the server: the one case where a run
    or create may be sent again. ``url``: the full URL (no credentials, no query); ``kind``: what failed
    (``tls_version``, ``certificate``, ``dns``, ``dns_temporary``, ``refused``, ``connect_timeout``,
    ``connect``, ``read_timeout``, ``dropped``, ``deadline``); ``hint``: what to check. ``permanent``:
    it would fail the same way again (not retried). ``unreached``: refused by an address that never
    answered this process through this connection (not retried, not sent again as a run).
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
        unreached: bool = False,
    ) -> None:
        self.method, self.path, self.reason, self.sent = method, path, reason, sent
        self.url, self.conn_id, self.kind, self.hint, self.permanent = url, conn_id, kind, hint, permanent
        self.unreached = unreached
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
    The server answered with an error status: ``status_code``, ``method``, ``path`` (full URL path),
    ``detail`` (the server's explanation), ``reason`` (the HTTP reason phrase), ``retry_after`` (seconds
    of ``Retry-After``); ``retryable`` False when the body said ``"retryable": false`` (not sent again).
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
    """401 or 403 while the connection could not be read again: not final (a wait goes on, retries apply)."""


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
    """402, or a refusal saying the API quota is used up: never retried, the task fails without retries."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.args = (f"{self.args[0]}. {QUOTA_ADVICE}",)


QUOTA_ADVICE = (
    "The service refuses work until the account's quota is raised or its payment is made: retrying "
    "cannot help. Check the usage, quota and billing of the account that owns the API key in the "
    "service's dashboard (or ask its owner), then clear the task"
)

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
    """Return the exception class of an error status and the server's ``detail`` (the one such rule)."""
    if status_code >= 500:
        return WorkflowServiceServerError
    if status_code == 402 or _QUOTA_WORDS.search(detail):
        return WorkflowServiceQuotaError
    return _STATUS_CLASSES.get(status_code, WorkflowServiceApiError)


class InvalidTaskInputError(WorkflowServiceInputError, AirflowFailException):
    """The task's input is invalid: the task fails without retries (a retry would render the same input)."""


class NoFilesMatchedError(WorkflowServiceInputError):
    """A directory or glob pattern of ``files`` matches no file."""


class InputReadError(WorkflowServiceError):
    """An input failed to read while sent: the request was aborted, the service got no complete request."""


class ObjectStorageError(WorkflowServiceError):
    """Object storage failed for a reason other than the location itself: a retry of the task may pass."""


class ExistingResourceError(WorkflowServiceError, AirflowFailException):
    """A resource with the requested name exists and cannot be used (``if_exists='fail'``, other type)."""


class AmbiguousRunError(WorkflowServiceError, AirflowFailException):
    """Whether (or which) job a run created cannot be proven: nothing is run again, no task retry."""


class WorkflowAlreadyRunningError(WorkflowServiceError):
    """
    A job of the workflow is running and ``if_running='fail'`` (or ``'wait'`` cannot tell which one to
    wait for). Retries apply: a later try finds the job ended, and runs the workflow.
    """


class WebhookVerificationError(WorkflowServiceError, ValueError):
    """
    A webhook delivery not proven to come from the service (:func:`~.webhooks.verify_webhook`); ``reason``:
    ``missing_header``, ``malformed_header``, ``timestamp``, ``signature``, ``body`` or ``secret``.
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
    """The wait could not observe its job (its end unknown): retries apply, ``soft_fail`` does not skip it."""


class UnprocessedDocumentsError(WorkflowServiceError):
    """
    Some documents of an on-demand task were not processed; ``summary`` holds every document's outcome.
    A retry (durable execution) launches only those documents.
    """

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


class UnprocessedDocumentsNoRetryError(UnprocessedDocumentsError, AirflowFailException):
    """
    :class:`UnprocessedDocumentsError` without retries: a retry cannot help (quota, a refused request, an
    unproven launch), or no task state store remembers which documents were processed.
    """


class ConnectionCheckFailedError(WorkflowServiceError):
    """A connector's connection check ended in failure, or did not end in time."""

    def __init__(self, message: str, *, connector_id: str = "", reason: str | None = None) -> None:
        super().__init__(message)
        self.connector_id, self.reason = connector_id, reason
