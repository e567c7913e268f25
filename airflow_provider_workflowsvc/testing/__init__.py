"""
A test kit for DAGs that use this provider: pytest fixtures (``plugin``), the emulator, a DAG runner.

Installed with the provider, the pytest plugin offers the fixtures ``workflowsvc_emulator``,
``workflowsvc_connection``, ``workflowsvc_run_dag`` and ``workflowsvc_job_events`` (they need the
``emulator`` extra). The names below are imported on first use, for type hints in tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.testing.dag_runs import DagFileError, DagRunner, DagRunResult
    from airflow_provider_workflowsvc.testing.emulator import (
        DestinationWrite,
        EmulatedFile,
        EmulatedJob,
        EmulatorConnection,
        RecordedRequest,
        ServiceEmulator,
    )
    from airflow_provider_workflowsvc.testing.job_events import (
        JobEventWatch,
        job_event_trigger,
        job_event_triggers,
    )

_EXPORTS: dict[str, str] = {
    "DagFileError": "dag_runs",
    "DagRunResult": "dag_runs",
    "DagRunner": "dag_runs",
    "DestinationWrite": "emulator",
    "EmulatedFile": "emulator",
    "EmulatedJob": "emulator",
    "EmulatorConnection": "emulator",
    "JobEventWatch": "job_events",
    "RecordedRequest": "emulator",
    "ServiceEmulator": "emulator",
    "job_event_trigger": "job_events",
    "job_event_triggers": "job_events",
}
__all__ = [
    "DagFileError",
    "DagRunResult",
    "DagRunner",
    "DestinationWrite",
    "EmulatedFile",
    "EmulatedJob",
    "EmulatorConnection",
    "JobEventWatch",
    "RecordedRequest",
    "ServiceEmulator",
    "job_event_trigger",
    "job_event_triggers",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
