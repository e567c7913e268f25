"""
Airflow names whose home differs between Airflow 3.0 and 3.3, imported from this one place, each from its
newest home chosen by Airflow's version (docs/decisions/airflow.md). On the DAG-parse path: only
``airflow`` and the fallback's own module are imported.
"""

from __future__ import annotations

import re
import typing

import airflow


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

if typing.TYPE_CHECKING or AIRFLOW_V_3_1_PLUS:
    from airflow.sdk import BaseHook as BaseHook
    from airflow.sdk.exceptions import AirflowException as AirflowException
else:  # Airflow 3.0: the Task SDK has neither yet
    from airflow.exceptions import AirflowException as AirflowException
    from airflow.hooks.base import BaseHook as BaseHook

if typing.TYPE_CHECKING or AIRFLOW_V_3_2_PLUS:
    from airflow.sdk import conf as conf
    from airflow.sdk.exceptions import (
        AirflowFailException as AirflowFailException,
        AirflowNotFoundException as AirflowNotFoundException,
        AirflowSensorTimeout as AirflowSensorTimeout,
        AirflowSkipException as AirflowSkipException,
        AirflowTaskTimeout as AirflowTaskTimeout,
    )
else:  # Airflow 3.0 and 3.1: configuration and these exceptions are still in core only
    from airflow.configuration import conf as conf
    from airflow.exceptions import (
        AirflowFailException as AirflowFailException,
        AirflowNotFoundException as AirflowNotFoundException,
        AirflowSensorTimeout as AirflowSensorTimeout,
        AirflowSkipException as AirflowSkipException,
        AirflowTaskTimeout as AirflowTaskTimeout,
    )


def airflow_stats() -> typing.Any:
    """
    Return Airflow's ``Stats``, imported at the first call (never on the DAG-parse path); a function: a
    module ``__getattr__`` would run (and fail, on ``__path__``) at every ``from ._compat import ...``.
    """
    if AIRFLOW_V_3_2_PLUS:
        from airflow.sdk.observability.stats import Stats
    else:  # Airflow 3.0 and 3.1: the metrics are in core only
        from airflow.stats import Stats
    return Stats


HAS_TASK_STATE_STORE = AIRFLOW_V_3_3_PLUS
"""Whether tasks have a ``task_state_store`` (Airflow >= 3.3); before it, the job operators keep what a
retry needs in an Airflow Variable (``operators._lifecycle.VariableStore``)."""

CONN_FIELDS_READ = AIRFLOW_V_3_2_PLUS
"""Whether Airflow builds the connection form from the provider info's ``conn-fields`` (>= 3.2); older
Airflow asks the hook's ``get_connection_form_widgets`` / ``get_ui_field_behaviour`` instead."""
