"""
Data-aware scheduling: the ``Asset`` of a destination connector (the URI of its lineage dataset, from
non-secret config keys only) and the extra of its asset events (:data:`EXTRA_KEYS`). Imported while DAG
files are parsed: the Task SDK and the standard library only at module level.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset

from airflow_provider_workflowsvc._tasks.base import is_deferred_value
from airflow_provider_workflowsvc.lineage import (
    IDENTIFYING_KEYS,
    destination_identity,
    documents_written,
    failed_count,
)

EXTRA_KEYS = ("job_id", "workflow_id", "status", "documents_written", "failed_count")
"""What :class:`RunWorkflowOperator` puts in the extra of its outlets' asset events."""


def destination_asset(
    connector_type: str, config: Mapping[str, Any], *, connector_id: str | None = None, **asset_kwargs: Any
) -> Asset:
    """
    Return the ``Asset`` a destination connector writes, e.g. ``s3://bucket/prefix``.

    ``config`` is the connector's config as given to ``CreateDestinationConnectorOperator``; only its
    identifying, non-secret keys are read (S3 ``remote_url``; Astra DB ``api_endpoint``, ``keyspace``,
    ``collection_name``; Azure ``remote_url``, ``account_name``), so they must be plain values, not
    templates (a DAG's assets are fixed when it is parsed). Other types, or a config without those
    keys, give ``workflowsvc://<type>/<connector_id>``. ``asset_kwargs`` (``name``, ``group``,
    ``extra``) go to ``Asset``.
    """
    kind = str(connector_type).strip().lower()
    templated = [k for k in IDENTIFYING_KEYS.get(kind, ()) if is_deferred_value(config.get(k))]
    if templated:
        raise ValueError(
            f"destination_asset: {', '.join(templated)} of the {kind} config is a template; an asset is "
            "fixed when the DAG is parsed: give the identifying values as plain strings"
        )
    identity = destination_identity(kind, config, connector_id)
    if identity.namespace == f"workflowsvc://{kind}" and connector_id is None:
        known = ", ".join(IDENTIFYING_KEYS.get(kind, ())) or "none for this type"
        raise ValueError(
            f"destination_asset: the {kind} config does not identify the data (keys read: {known}); "
            "give connector_id to name the asset after the connector"
        )
    return Asset(uri=identity.uri, **asset_kwargs)


def asset_event_extra(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Return the asset event extra of a successful job's summary (the operator's return value)."""
    return {
        "job_id": summary.get("job_id"),
        "workflow_id": summary.get("workflow_id"),
        "status": summary.get("status"),
        "documents_written": documents_written(summary),
        "failed_count": failed_count(summary),
    }


def record_outlet_events(context: Any, outlets: Iterable[Any], summary: Mapping[str, Any]) -> None:
    """Add the job's :func:`asset_event_extra` to the event of each ``Asset`` in ``outlets``."""
    assets = [outlet for outlet in outlets if isinstance(outlet, Asset)]
    if not assets:
        return
    extra = asset_event_extra(summary)
    events = context["outlet_events"]
    for asset in assets:
        events[asset].extra.update(extra)
