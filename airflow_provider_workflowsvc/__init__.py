"""
Apache Airflow provider for the Workflow Service.

Every public operator, sensor, trigger, hook and exception can be imported from here, e.g.
``from airflow_provider_workflowsvc import RunWorkflowOperator``; each name is imported from its module
on first use, so importing the package itself stays as cheap as DAG parsing needs (no httpx, pydantic,
hooks or operators). The modules keep their own paths (``airflow_provider_workflowsvc.operators.jobs``).
"""

from __future__ import annotations

import ast
import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0.dev0"

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


def _exports() -> dict[str, str]:
    """
    Each public name and its module (under this package): read once from the imports above, the one
    list of the public names (type checkers read it as it is; here it is never executed). Read from the
    file itself: the loader may give no source (pytest's assertion rewriter loads this distribution's
    modules, as the test kit's plugin is one of its entry points).
    """
    global _EXPORTS
    if _EXPORTS is None:
        with open(__file__, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        (block,) = [node for node in tree.body if isinstance(node, ast.If)]
        _EXPORTS = {
            alias.name: node.module.removeprefix(f"{__name__}.")
            for node in block.body
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
    return _EXPORTS


_EXPORTS: dict[str, str] | None = None


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (then it is an ordinary module attribute)."""
    if name == "__all__":
        return sorted([*_exports(), "__version__"])
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exports()))
