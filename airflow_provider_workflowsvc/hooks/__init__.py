"""Hooks of the Workflow Service provider, and the connection names every part of the provider uses."""

DEFAULT_CONN_ID = "workflowsvc_default"
"""The Airflow connection used when a task, sensor, trigger or hook names none."""

CONN_TYPE = "workflowsvc"
"""The Airflow connection type of a Workflow Service connection."""
