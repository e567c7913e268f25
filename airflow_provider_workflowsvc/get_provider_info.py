"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_workflowsvc import __version__

_PKG = "airflow_provider_workflowsvc"
_NAME = "Workflow Service"


def _modules(*modules: str) -> list[dict[str, Any]]:
    """Return the entry of one kind (hooks, operators, ...): its modules under the package."""
    return [{"integration-name": _NAME, "python-modules": [f"{_PKG}.{module}" for module in modules]}]


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-workflowsvc",
        "name": _NAME,
        "description": (
            "Run Workflow Service jobs (source connector, processing nodes, destination) from Airflow."
        ),
        "versions": [__version__],
        "integrations": [{"integration-name": _NAME, "tags": ["service"]}],
        "hooks": _modules("hooks.workflowsvc"),
        "operators": _modules(
            "operators.connectors", "operators.workflows", "operators.jobs", "operators.on_demand"
        ),
        "sensors": _modules("sensors.job"),
        "triggers": _modules("triggers.job", "triggers.jobs", "triggers.job_events"),
        "cli": [f"{_PKG}.cli.definition.get_cli_commands"],
        "extra-links": [
            f"{_PKG}.operators.jobs.WorkflowJobLink",
            f"{_PKG}.operators.on_demand.OnDemandJobLink",
        ],
        "config": {
            "workflowsvc": {
                "description": "Deployment settings of the Workflow Service provider, read where the DAG "
                "is parsed, the task runs or the trigger waits (not per DAG).",
                "options": {
                    "min_poll_interval": {
                        "description": "Smallest poll_interval / poke_interval a DAG may set, in seconds; "
                        "checked when the DAG is parsed.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "5",
                        "default": "1.0",
                    },
                    "shared_status_poll": {
                        "description": "Whether a triggerer's waits learn of their jobs' changes from "
                        "one source per connection (the job-event feed, else the active-jobs listing; a "
                        "job it shows changed is read on its own). False: every wait polls its own job.",
                        "version_added": "0.2.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                },
            }
        },
        "connection-types": [
            {
                "connection-type": "workflowsvc",
                "hook-class-name": f"{_PKG}.hooks.workflowsvc.WorkflowServiceHook",
                "hook-name": _NAME,
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "port"],
                    "relabeling": {"host": "Base URL", "password": "Access token"},
                    "placeholders": {
                        "host": "https://platform.example.com/api/v1",
                        "password": "access token (sent as Authorization: Bearer …)",
                    },
                },
                "conn-fields": {
                    "api_key": {
                        "label": "API key",
                        "description": "Sent as the unstructured-api-key and service-api-key headers "
                        "(enough alone for the live service). Leave empty for the self-hosted deployment.",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "timeout": {
                        "label": "Read timeout (s)",
                        "description": "Seconds to wait for each response.",
                        "schema": {"type": ["number", "null"], "default": 60, "exclusiveMinimum": 0},
                    },
                    "connect_timeout": {
                        "label": "Connect timeout (s)",
                        "description": "Seconds to wait for a connection to be established.",
                        "schema": {"type": ["number", "null"], "default": 10, "exclusiveMinimum": 0},
                    },
                    "verify": {
                        "label": "Verify TLS certificates",
                        "description": "Turn off only for a test server.",
                        "schema": {"type": ["boolean", "null"], "default": True},
                    },
                    "ca_bundle": {
                        "label": "CA bundle path",
                        "description": "PEM file (or directory) of CA certificates to trust instead of "
                        "the default ones, e.g. for a private certificate authority.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "ui_url": {
                        "label": "Web UI URL",
                        "description": "Base address of the service's web interface, used for the job link "
                        "(a {job_id} placeholder is filled in). Without it the task shows no job link.",
                        "schema": {"type": ["string", "null"]},
                    },
                    "max_retries": {
                        "label": "Max retries",
                        "description": "Retries of safe requests after 429/502/503/504 or a dropped "
                        "connection. A run or create is retried only when it never reached the service.",
                        "schema": {"type": ["integer", "null"], "default": 5, "minimum": 0, "maximum": 20},
                    },
                    "retry_wait": {
                        "label": "First retry wait (s)",
                        "description": "Backoff before the first retry; doubled each time, with jitter.",
                        "schema": {"type": ["number", "null"], "default": 1, "minimum": 0},
                    },
                    "retry_max_wait": {
                        "label": "Longest retry wait (s)",
                        "description": "Cap on any wait between retries, including one asked by Retry-After.",
                        "schema": {"type": ["number", "null"], "default": 60, "minimum": 0},
                    },
                    "max_response_bytes": {
                        "label": "Largest answer (bytes)",
                        "description": "Cap on a JSON answer, read in chunks and refused past the cap. "
                        "Downloads to a file are streamed and not capped.",
                        "schema": {"type": ["integer", "null"], "default": 67108864, "minimum": 1024},
                    },
                    "max_connections": {
                        "label": "Connections per pool",
                        "description": "Cap on the open connections to the service of one client. In a "
                        "triggerer, every waiting trigger with the same connection settings shares one.",
                        "schema": {"type": ["integer", "null"], "default": 20, "minimum": 1, "maximum": 1000},
                    },
                },
            }
        ],
    }
