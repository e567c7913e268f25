"""
Apache Airflow provider for the Workflow Service.

Every public operator, sensor, trigger, hook and exception can be imported from here, e.g.
``from airflow_provider_workflowsvc import RunWorkflowOperator``; each name is imported from its module
on first use, so importing the package itself stays as cheap as DAG parsing needs (no httpx, pydantic,
hooks or operators). The modules keep their own paths (``airflow_provider_workflowsvc.operators.jobs``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0.dev0"

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.assets import destination_asset as destination_asset
    from airflow_provider_workflowsvc.exceptions import (
        AmbiguousRunError as AmbiguousRunError,
        ConnectionCheckFailedError as ConnectionCheckFailedError,
        ExistingResourceError as ExistingResourceError,
        InputReadError as InputReadError,
        InvalidJobEventError as InvalidJobEventError,
        InvalidTaskInputError as InvalidTaskInputError,
        NoFilesMatchedError as NoFilesMatchedError,
        ObjectStorageError as ObjectStorageError,
        UnprocessedDocumentsError as UnprocessedDocumentsError,
        UnprocessedDocumentsNoRetryError as UnprocessedDocumentsNoRetryError,
        WebhookVerificationError as WebhookVerificationError,
        WorkflowAlreadyRunningError as WorkflowAlreadyRunningError,
        WorkflowJobError as WorkflowJobError,
        WorkflowJobFailedError as WorkflowJobFailedError,
        WorkflowJobTimeoutError as WorkflowJobTimeoutError,
        WorkflowJobWaitError as WorkflowJobWaitError,
        WorkflowServiceApiError as WorkflowServiceApiError,
        WorkflowServiceAuthError as WorkflowServiceAuthError,
        WorkflowServiceAuthUnconfirmedError as WorkflowServiceAuthUnconfirmedError,
        WorkflowServiceConflictError as WorkflowServiceConflictError,
        WorkflowServiceConnectionError as WorkflowServiceConnectionError,
        WorkflowServiceError as WorkflowServiceError,
        WorkflowServiceInputError as WorkflowServiceInputError,
        WorkflowServiceNotFoundError as WorkflowServiceNotFoundError,
        WorkflowServiceQuotaError as WorkflowServiceQuotaError,
        WorkflowServiceRateLimitError as WorkflowServiceRateLimitError,
        WorkflowServiceResponseError as WorkflowServiceResponseError,
        WorkflowServiceServerError as WorkflowServiceServerError,
        WorkflowServiceValidationError as WorkflowServiceValidationError,
    )
    from airflow_provider_workflowsvc.hooks.workflowsvc import (
        WorkflowServiceAsyncHook as WorkflowServiceAsyncHook,
        WorkflowServiceHook as WorkflowServiceHook,
    )
    from airflow_provider_workflowsvc.operators.connectors import (
        CreateDestinationConnectorOperator as CreateDestinationConnectorOperator,
        CreateSourceConnectorOperator as CreateSourceConnectorOperator,
        DeleteDestinationConnectorOperator as DeleteDestinationConnectorOperator,
        DeleteSourceConnectorOperator as DeleteSourceConnectorOperator,
        DestinationConnectionCheckOperator as DestinationConnectionCheckOperator,
        SourceConnectionCheckOperator as SourceConnectionCheckOperator,
        UpdateDestinationConnectorOperator as UpdateDestinationConnectorOperator,
        UpdateSourceConnectorOperator as UpdateSourceConnectorOperator,
    )
    from airflow_provider_workflowsvc.operators.jobs import (
        CancelJobOperator as CancelJobOperator,
        DownloadJobOutputOperator as DownloadJobOutputOperator,
        RunWorkflowOperator as RunWorkflowOperator,
        WorkflowJobLink as WorkflowJobLink,
    )
    from airflow_provider_workflowsvc.operators.on_demand import (
        OnDemandJobLink as OnDemandJobLink,
        RunOnDemandJobOperator as RunOnDemandJobOperator,
    )
    from airflow_provider_workflowsvc.operators.workflows import (
        CreateWorkflowOperator as CreateWorkflowOperator,
        DeleteWorkflowOperator as DeleteWorkflowOperator,
        UpdateWorkflowOperator as UpdateWorkflowOperator,
    )
    from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor as WorkflowJobSensor
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger as WorkflowJobTrigger
    from airflow_provider_workflowsvc.triggers.job_events import (
        WorkflowJobEventTrigger as WorkflowJobEventTrigger,
    )
    from airflow_provider_workflowsvc.triggers.jobs import WorkflowJobsTrigger as WorkflowJobsTrigger
    from airflow_provider_workflowsvc.webhooks import verify_webhook as verify_webhook


# Each public name and its module under this package: the same names as the imports above (which type
# checkers read, and which never run), kept equal to them by tests/test_package_root.py.
_EXPORTS: dict[str, str] = {
    "destination_asset": "assets",
    "AmbiguousRunError": "exceptions",
    "ConnectionCheckFailedError": "exceptions",
    "ExistingResourceError": "exceptions",
    "InputReadError": "exceptions",
    "InvalidJobEventError": "exceptions",
    "InvalidTaskInputError": "exceptions",
    "NoFilesMatchedError": "exceptions",
    "ObjectStorageError": "exceptions",
    "UnprocessedDocumentsError": "exceptions",
    "UnprocessedDocumentsNoRetryError": "exceptions",
    "WebhookVerificationError": "exceptions",
    "WorkflowAlreadyRunningError": "exceptions",
    "WorkflowJobError": "exceptions",
    "WorkflowJobFailedError": "exceptions",
    "WorkflowJobTimeoutError": "exceptions",
    "WorkflowJobWaitError": "exceptions",
    "WorkflowServiceApiError": "exceptions",
    "WorkflowServiceAuthError": "exceptions",
    "WorkflowServiceAuthUnconfirmedError": "exceptions",
    "WorkflowServiceConflictError": "exceptions",
    "WorkflowServiceConnectionError": "exceptions",
    "WorkflowServiceError": "exceptions",
    "WorkflowServiceInputError": "exceptions",
    "WorkflowServiceNotFoundError": "exceptions",
    "WorkflowServiceQuotaError": "exceptions",
    "WorkflowServiceRateLimitError": "exceptions",
    "WorkflowServiceResponseError": "exceptions",
    "WorkflowServiceServerError": "exceptions",
    "WorkflowServiceValidationError": "exceptions",
    "WorkflowServiceAsyncHook": "hooks.workflowsvc",
    "WorkflowServiceHook": "hooks.workflowsvc",
    "CreateDestinationConnectorOperator": "operators.connectors",
    "CreateSourceConnectorOperator": "operators.connectors",
    "DeleteDestinationConnectorOperator": "operators.connectors",
    "DeleteSourceConnectorOperator": "operators.connectors",
    "DestinationConnectionCheckOperator": "operators.connectors",
    "SourceConnectionCheckOperator": "operators.connectors",
    "UpdateDestinationConnectorOperator": "operators.connectors",
    "UpdateSourceConnectorOperator": "operators.connectors",
    "CancelJobOperator": "operators.jobs",
    "DownloadJobOutputOperator": "operators.jobs",
    "RunWorkflowOperator": "operators.jobs",
    "WorkflowJobLink": "operators.jobs",
    "OnDemandJobLink": "operators.on_demand",
    "RunOnDemandJobOperator": "operators.on_demand",
    "CreateWorkflowOperator": "operators.workflows",
    "DeleteWorkflowOperator": "operators.workflows",
    "UpdateWorkflowOperator": "operators.workflows",
    "WorkflowJobSensor": "sensors.job",
    "WorkflowJobTrigger": "triggers.job",
    "WorkflowJobEventTrigger": "triggers.job_events",
    "WorkflowJobsTrigger": "triggers.jobs",
    "verify_webhook": "webhooks",
}
__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (then it is an ordinary module attribute)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
