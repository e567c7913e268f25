"""
The hostname each component of ``scripts/local_airflow.py`` reports to Airflow (``[core] hostname_callable``).

This folder is the only one the harness puts on its components' ``PYTHONPATH``: never the checkout's
root, so Airflow's processes import the provider that is installed (the built wheel in CI), not the
checkout's source.
"""

from __future__ import annotations

import os
import socket

HOST_ENV = "WORKFLOWSVC_COMPONENT_HOST"
"""The name each component reports as its hostname (``[core] hostname_callable``): where a task ran."""


def component_hostname() -> str:
    """
    Return the component's name as its hostname (``[core] hostname_callable``), else the FQDN.

    Every component runs on this one machine: the name tells which triggerer held a trigger and which
    worker ran a task (``trigger.triggerer_id`` -> ``job.hostname``, ``task_instance.hostname``).
    """
    return os.environ.get(HOST_ENV) or socket.getfqdn()
