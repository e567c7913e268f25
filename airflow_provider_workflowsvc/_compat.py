"""
Airflow names whose home differs between Airflow 3.0 and 3.3, imported from this one place.

Every other module of the provider imports these names from here. Each name comes from its newest home
(the Task SDK) on the Airflow that has it there; each fallback says which Airflow needs it. The choice
is made by Airflow's version, not by trying imports, so a newer Airflow never takes a deprecated path.
Only ``airflow`` (already loaded by ``airflow.sdk``) and the fallback's own module are imported: this
module is on the DAG-parse path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import airflow

if TYPE_CHECKING:
    from airflow.sdk import Context


def _minor(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``3.2.2``, ``3.3.0rc1`` or ``3.1.8.dev0``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not an Airflow version: {version!r}")
    return int(found[1]), int(found[2])


AIRFLOW_VERSION = _minor(airflow.__version__)
AIRFLOW_V_3_1_PLUS = AIRFLOW_VERSION >= (3, 1)
AIRFLOW_V_3_2_PLUS = AIRFLOW_VERSION >= (3, 2)
AIRFLOW_V_3_3_PLUS = AIRFLOW_VERSION >= (3, 3)

if TYPE_CHECKING or AIRFLOW_V_3_1_PLUS:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowException
else:  # Airflow 3.0: the Task SDK has neither yet
    from airflow.exceptions import AirflowException
    from airflow.hooks.base import BaseHook

if TYPE_CHECKING or AIRFLOW_V_3_2_PLUS:
    from airflow.sdk import conf
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
    )
else:  # Airflow 3.0 and 3.1: configuration and these exceptions are still in core only
    from airflow.configuration import conf
    from airflow.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
    )


class ResumableJobStandIn:
    """
    Durable execution's mixin for Airflow < 3.3: submit, wait, return the result.

    Airflow < 3.3 has no ``task_state_store`` to resume from, so nothing survives a worker crash: every
    try submits a new job, as an operator without durable execution does. ``durable`` is accepted (a
    DAG written for 3.3 parses unchanged) and ignored.
    """

    external_id_key: str = "remote_job_id"

    def __init__(self, *, durable: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.durable = False

    def execute_resumable(self, context: Context) -> Any:
        external_id = self.submit_job(context)  # type: ignore[attr-defined]
        self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]
        return self.get_job_result(external_id, context)  # type: ignore[attr-defined]


if TYPE_CHECKING or AIRFLOW_V_3_3_PLUS:
    from airflow.sdk import ResumableJobMixin
else:  # Airflow 3.0-3.2: no durable execution
    ResumableJobMixin = ResumableJobStandIn

HAS_DURABLE_EXECUTION = AIRFLOW_V_3_3_PLUS
"""Whether a retry reconnects to the job its earlier try submitted (Airflow >= 3.3)."""

CONN_FIELDS_READ = AIRFLOW_V_3_2_PLUS
"""Whether Airflow builds the connection form from the provider info's ``conn-fields`` (>= 3.2); older
Airflow asks the hook's ``get_connection_form_widgets`` / ``get_ui_field_behaviour`` instead."""

__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "CONN_FIELDS_READ",
    "HAS_DURABLE_EXECUTION",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "BaseHook",
    "ResumableJobMixin",
    "ResumableJobStandIn",
    "conf",
]
