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

__version__ = "0.2.0.dev0"

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.assets import destination_asset
    from airflow_provider_workflowsvc.exceptions import (
        AmbiguousRunError,
        ConnectionCheckFailedError,
        ExistingResourceError,
        InputReadError,
        InvalidJobEventError,
        InvalidTaskInputError,
        NoFilesMatchedError,
        ObjectStorageError,
        WorkflowJobError,
        WorkflowJobFailedError,
        WorkflowJobTimeoutError,
        WorkflowJobWaitError,
        WorkflowServiceApiError,
        WorkflowServiceAuthError,
        WorkflowServiceAuthUnconfirmedError,
        WorkflowServiceConflictError,
        WorkflowServiceConnectionError,
        WorkflowServiceError,
        WorkflowServiceInputError,
        WorkflowServiceNotFoundError,
        WorkflowServiceRateLimitError,
        WorkflowServiceResponseError,
        WorkflowServiceServerError,
        WorkflowServiceValidationError,
    )
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceAsyncHook, WorkflowServiceHook
    from airflow_provider_workflowsvc.operators.connectors import (
        CreateDestinationConnectorOperator,
        CreateSourceConnectorOperator,
        DeleteDestinationConnectorOperator,
        DeleteSourceConnectorOperator,
        DestinationConnectionCheckOperator,
        SourceConnectionCheckOperator,
        UpdateDestinationConnectorOperator,
        UpdateSourceConnectorOperator,
    )
    from airflow_provider_workflowsvc.operators.jobs import (
        CancelJobOperator,
        DownloadJobOutputOperator,
        RunWorkflowOperator,
        WorkflowJobLink,
    )
    from airflow_provider_workflowsvc.operators.workflows import (
        CreateWorkflowOperator,
        DeleteWorkflowOperator,
        UpdateWorkflowOperator,
    )
    from airflow_provider_workflowsvc.sensors.job import WorkflowJobSensor
    from airflow_provider_workflowsvc.triggers.job import WorkflowJobTrigger
    from airflow_provider_workflowsvc.triggers.job_events import WorkflowJobEventTrigger

# Each public name and the module (under this package) that defines it; the TYPE_CHECKING imports above
# name the same, for type checkers and IDEs (a test keeps the three lists equal).
_EXPORTS: dict[str, str] = {
    "AmbiguousRunError": "exceptions",
    "CancelJobOperator": "operators.jobs",
    "ConnectionCheckFailedError": "exceptions",
    "CreateDestinationConnectorOperator": "operators.connectors",
    "CreateSourceConnectorOperator": "operators.connectors",
    "CreateWorkflowOperator": "operators.workflows",
    "DeleteDestinationConnectorOperator": "operators.connectors",
    "DeleteSourceConnectorOperator": "operators.connectors",
    "DeleteWorkflowOperator": "operators.workflows",
    "DestinationConnectionCheckOperator": "operators.connectors",
    "DownloadJobOutputOperator": "operators.jobs",
    "ExistingResourceError": "exceptions",
    "InputReadError": "exceptions",
    "InvalidJobEventError": "exceptions",
    "InvalidTaskInputError": "exceptions",
    "NoFilesMatchedError": "exceptions",
    "ObjectStorageError": "exceptions",
    "RunWorkflowOperator": "operators.jobs",
    "SourceConnectionCheckOperator": "operators.connectors",
    "UpdateDestinationConnectorOperator": "operators.connectors",
    "UpdateSourceConnectorOperator": "operators.connectors",
    "UpdateWorkflowOperator": "operators.workflows",
    "WorkflowJobError": "exceptions",
    "WorkflowJobFailedError": "exceptions",
    "WorkflowJobLink": "operators.jobs",
    "WorkflowJobSensor": "sensors.job",
    "WorkflowJobTimeoutError": "exceptions",
    "WorkflowJobWaitError": "exceptions",
    "WorkflowJobEventTrigger": "triggers.job_events",
    "WorkflowJobTrigger": "triggers.job",
    "WorkflowServiceApiError": "exceptions",
    "WorkflowServiceAsyncHook": "hooks.workflowsvc",
    "WorkflowServiceAuthError": "exceptions",
    "WorkflowServiceAuthUnconfirmedError": "exceptions",
    "WorkflowServiceConflictError": "exceptions",
    "WorkflowServiceConnectionError": "exceptions",
    "WorkflowServiceError": "exceptions",
    "WorkflowServiceHook": "hooks.workflowsvc",
    "WorkflowServiceInputError": "exceptions",
    "WorkflowServiceNotFoundError": "exceptions",
    "WorkflowServiceRateLimitError": "exceptions",
    "WorkflowServiceResponseError": "exceptions",
    "WorkflowServiceServerError": "exceptions",
    "WorkflowServiceValidationError": "exceptions",
    "destination_asset": "assets",
}

__all__ = [
    "AmbiguousRunError",
    "CancelJobOperator",
    "ConnectionCheckFailedError",
    "CreateDestinationConnectorOperator",
    "CreateSourceConnectorOperator",
    "CreateWorkflowOperator",
    "DeleteDestinationConnectorOperator",
    "DeleteSourceConnectorOperator",
    "DeleteWorkflowOperator",
    "DestinationConnectionCheckOperator",
    "DownloadJobOutputOperator",
    "ExistingResourceError",
    "InputReadError",
    "InvalidJobEventError",
    "InvalidTaskInputError",
    "NoFilesMatchedError",
    "ObjectStorageError",
    "RunWorkflowOperator",
    "SourceConnectionCheckOperator",
    "UpdateDestinationConnectorOperator",
    "UpdateSourceConnectorOperator",
    "UpdateWorkflowOperator",
    "WorkflowJobError",
    "WorkflowJobEventTrigger",
    "WorkflowJobFailedError",
    "WorkflowJobLink",
    "WorkflowJobSensor",
    "WorkflowJobTimeoutError",
    "WorkflowJobTrigger",
    "WorkflowJobWaitError",
    "WorkflowServiceApiError",
    "WorkflowServiceAsyncHook",
    "WorkflowServiceAuthError",
    "WorkflowServiceAuthUnconfirmedError",
    "WorkflowServiceConflictError",
    "WorkflowServiceConnectionError",
    "WorkflowServiceError",
    "WorkflowServiceHook",
    "WorkflowServiceInputError",
    "WorkflowServiceNotFoundError",
    "WorkflowServiceRateLimitError",
    "WorkflowServiceResponseError",
    "WorkflowServiceServerError",
    "WorkflowServiceValidationError",
    "__version__",
    "destination_asset",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (then it is an ordinary module attribute)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
