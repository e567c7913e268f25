"""
Lineage of a workflow run: the datasets it reads and writes (identities: docs/decisions/airflow.md,
"Lineage and assets"), and its job's OpenLineage facets. Module level is the standard library only (DAG
parse); OpenLineage is imported when facets are built (the ``[openlineage]`` extra).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

FILE_DATASETS_MAX = 100
"""More input files than this are one dataset per store: their common directory (or key prefix)."""
IDENTIFYING_KEYS: dict[str, tuple[str, ...]] = {
    "s3": ("remote_url",),
    "azure": ("remote_url", "account_name"),
    "confluence": ("url", "spaces"),
    "astradb": ("api_endpoint", "keyspace", "collection_name"),
}
"""The config keys a dataset's identity is read from, per connector type (all non-secret)."""
DEFAULT_ASTRA_KEYSPACE = "default_keyspace"
"""Astra DB's keyspace when a connector names none."""


@dataclass(frozen=True, order=True)
class DatasetIdentity:
    """An OpenLineage dataset's namespace and name; ``uri`` is the same place as one URI (an Asset's)."""

    namespace: str
    name: str

    @property
    def uri(self) -> str:
        if self.namespace == "file":
            return f"file://{self.name}"
        return f"{self.namespace.rstrip('/')}/{self.name.lstrip('/')}"


# -- identity ----------------------------------------------------------------------------------------


def _known_config(connector_type: str, config: Any) -> dict[str, Any]:
    """Return the config values under the type's identifying, non-secret keys (none for other types)."""
    from airflow_provider_workflowsvc._tasks.secrets import plain_config_keys, plain_data

    config = plain_data(config)
    known = plain_config_keys(connector_type) & set(IDENTIFYING_KEYS.get(connector_type, ()))
    if not isinstance(config, Mapping):
        return {}
    return {key: value for key, value in config.items() if key in known}


def _url(value: Any) -> tuple[str, str, str]:
    """``(scheme, host[:port], path)`` of a URL, without user info, query or fragment."""
    parts = urlsplit(str(value or "").strip())
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return parts.scheme.lower(), host, parts.path


def _by_id(connector_type: str, connector_id: Any) -> DatasetIdentity:
    return DatasetIdentity(f"workflowsvc://{connector_type or 'unknown'}", str(connector_id or "unknown"))


_OBJECT_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
"""Schemes of one store spelled otherwise; the OpenLineage naming spec names S3 ``s3``, GCS ``gs``."""


def object_dataset(scheme: str, bucket: str, key: str) -> DatasetIdentity:
    """Return an object or prefix of object storage: ``s3://bucket`` as the namespace, the key as the name."""
    scheme = _OBJECT_SCHEMES.get(scheme.lower(), scheme.lower())
    return DatasetIdentity(f"{scheme}://{bucket}", key.strip("/") or "/")


def _s3(config: Mapping[str, Any]) -> list[DatasetIdentity]:
    scheme, bucket, path = _url(config.get("remote_url"))
    if scheme not in ("s3", "s3a") or not bucket:
        return []
    return [object_dataset(scheme, bucket, path)]


_AZURE_HOSTS = {"wasbs": "blob", "wasb": "blob", "abfss": "dfs", "abfs": "dfs", "az": "blob"}


def _azure(config: Mapping[str, Any]) -> list[DatasetIdentity]:
    """``remote_url`` as ``az://container/path``, ``abfss://container@account...`` or ``https://``."""
    raw = urlsplit(str(config.get("remote_url") or "").strip())
    scheme, host = raw.scheme.lower(), raw.hostname or ""
    account = str(config.get("account_name") or "").strip()
    if scheme in _AZURE_HOSTS and "@" in raw.netloc:  # container@account.<kind>.core.windows.net
        container, path = raw.username or "", raw.path
        account = account or host.split(".", 1)[0]
    elif scheme in _AZURE_HOSTS:  # az://container/path
        container, path = host, raw.path
    elif scheme == "https" and host.endswith(".core.windows.net"):
        account = account or host.split(".", 1)[0]
        container, _, path = raw.path.lstrip("/").partition("/")
    else:
        return []
    if not container:
        return []
    name = path.strip("/") or "/"
    if not account:
        return [DatasetIdentity(f"az://{container}", name)]
    kind = _AZURE_HOSTS.get(scheme) or ("dfs" if ".dfs." in host else "blob")
    prefix = "abfss" if kind == "dfs" else "wasbs"
    return [DatasetIdentity(f"{prefix}://{container}@{account}.{kind}.core.windows.net", name)]


def _confluence(config: Mapping[str, Any]) -> list[DatasetIdentity]:
    scheme, host, path = _url(config.get("url"))
    if not host:
        return []
    namespace = f"{scheme or 'https'}://{host}{path.rstrip('/')}"
    spaces = [str(s).strip() for s in config.get("spaces") or [] if str(s).strip()]
    return [DatasetIdentity(namespace, f"spaces/{space}") for space in spaces] or [
        DatasetIdentity(namespace, "spaces")
    ]


def _astradb(config: Mapping[str, Any]) -> list[DatasetIdentity]:
    _, host, _ = _url(config.get("api_endpoint"))
    collection = str(config.get("collection_name") or "").strip()
    if not host or not collection:
        return []
    keyspace = str(config.get("keyspace") or "").strip() or DEFAULT_ASTRA_KEYSPACE
    return [DatasetIdentity(f"astradb://{host}", f"{keyspace}.{collection}")]


_BY_TYPE = {"s3": _s3, "azure": _azure, "confluence": _confluence, "astradb": _astradb}


def connector_datasets(connector_type: str, config: Any, connector_id: Any = None) -> list[DatasetIdentity]:
    """
    Return the datasets a connector reads or writes (one per Confluence space).

    Only the type's non-secret config keys are read. A type this provider does not know, or a config
    missing what identifies the data, gives one dataset from the type and ``connector_id`` alone.
    """
    kind = str(connector_type or "").strip().lower()
    build = _BY_TYPE.get(kind)
    found = build(_known_config(kind, config)) if build is not None else []
    return found or [_by_id(kind, connector_id)]


def destination_identity(connector_type: str, config: Any, connector_id: Any = None) -> DatasetIdentity:
    """Return the one dataset a destination connector writes (the lineage output and the Asset URI)."""
    return connector_datasets(connector_type, config, connector_id)[0]


def uploaded_datasets(sources: Sequence[Any]) -> list[DatasetIdentity]:
    """Return the files a run uploaded as datasets: one each, over :data:`FILE_DATASETS_MAX` one per store."""
    local = sorted({os.path.abspath(s) for s in sources if isinstance(s, str)})
    stored = sorted({folder_dataset(s) for s in sources if not isinstance(s, str)})
    if len(local) + len(stored) <= FILE_DATASETS_MAX:
        return [*(DatasetIdentity("file", path) for path in local), *stored]
    grouped: dict[str, list[str]] = {}
    for identity in stored:
        grouped.setdefault(identity.namespace, []).append(identity.name)
    common = [
        DatasetIdentity(
            namespace, posixpath.commonpath(names) if len(names) > 1 else posixpath.dirname(names[0])
        )
        for namespace, names in sorted(grouped.items())
    ]
    return [
        *([directory_dataset(os.path.commonpath(local))] if local else []),
        *(DatasetIdentity(d.namespace, d.name or "/") for d in common),
    ]


def input_datasets(
    spec: Any, resolved: Sequence[tuple[Any, str]] | None, conn_id: str | None = None
) -> list[DatasetIdentity] | None:
    """
    Return the datasets of a run's input files: as its execute resolved them, else resolved again from
    ``spec`` (a deferred task resumes in a new process); None when there are none or they are gone.
    """
    if resolved is None:
        if spec is None:
            return None
        from airflow_provider_workflowsvc._tasks.inputs import resolve_named_files
        from airflow_provider_workflowsvc.exceptions import WorkflowServiceError

        try:
            resolved = resolve_named_files(spec, empty_ok=True, conn_id=conn_id)
        except (WorkflowServiceError, OSError):
            return None
    return uploaded_datasets([source for source, _ in resolved])


def folder_dataset(folder: Any) -> DatasetIdentity:
    """Return a download's folder or an uploaded object: a local directory, or a place in object storage."""
    path = getattr(folder, "path", None)
    if path is not None and getattr(path, "protocol", None):
        return object_dataset(str(path.protocol), str(path.bucket), str(path.key))
    return directory_dataset(str(folder))


def directory_dataset(path: str) -> DatasetIdentity:
    """Return a local directory as a ``file`` dataset."""
    return DatasetIdentity("file", os.path.abspath(path).rstrip(os.sep) or os.sep)


def job_output_dataset(base_url: str, job_id: str) -> DatasetIdentity:
    """Return the output a local-destination job keeps in the service (read by the download task)."""
    _, host, path = _url(base_url)
    return DatasetIdentity(f"workflowsvc://{host or 'unknown'}", f"{path.strip('/')}/jobs/{job_id}/output")


def documents_written(summary: Mapping[str, Any]) -> int:
    """Documents the workflow's last node processed (else distinct output files) in a job summary."""
    nodes = summary.get("node_stats") or []
    if nodes:
        return int(nodes[-1].get("success") or 0)
    return len({f.get("file_id") for f in summary.get("output_files") or []})


def failed_count(summary: Mapping[str, Any]) -> int:
    """Return how many files failed in a job summary."""
    return int(summary.get("failed_file_count") or len(summary.get("failed_files") or []))


# -- OpenLineage -------------------------------------------------------------------------------------


def run_lineage(
    hook: WorkflowServiceHook,
    *,
    workflow_id: str,
    job_id: str,
    summary: Mapping[str, Any] | None,
    uploaded: Sequence[DatasetIdentity] | None,
    log: Any,
) -> OperatorLineage:
    """
    Return the OpenLineage inputs (the source connectors, else the files the run ``uploaded``), outputs
    (the destination connectors, else the job's output kept in the service) and run facets of a job.
    """
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_workflowsvc._lineage_facets import run_facets
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceError

    try:
        workflow = hook.get_workflow(workflow_id)
        sources = [hook.get_source(source_id) for source_id in workflow.sources]
        destinations = [hook.get_destination(dest_id) for dest_id in workflow.destinations]
    except WorkflowServiceError as exc:  # the workflow is unknown, and so is its destination
        log.warning("Lineage: could not read workflow %s and its connectors: %s", workflow_id, exc)
        name, inputs, outputs = None, list(uploaded or []), []
    else:
        name = workflow.name
        inputs = [d for c in sources for d in connector_datasets(c.type, c.config, c.id)]
        outputs = [destination_identity(c.type, c.config, c.id) for c in destinations]
        inputs = inputs or list(uploaded or [])
        outputs = outputs or [job_output_dataset(hook.settings.base_url, job_id)]
    summary = summary or {}
    facets = run_facets(job_id, workflow_id, name, summary, documents_written(summary), failed_count(summary))
    return OperatorLineage(inputs=_datasets(inputs), outputs=_datasets(outputs), run_facets=facets)


def download_lineage(base_url: str, job_id: str, output: DatasetIdentity) -> OperatorLineage:
    """
    Return the lineage of a download: the job's output in the service into ``output`` (a local
    directory, or a prefix of object storage: :func:`folder_dataset`).
    """
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(
        inputs=_datasets([job_output_dataset(base_url, job_id)]),
        outputs=_datasets([output]),
    )


def _datasets(identities: Iterable[DatasetIdentity]) -> list[Any]:
    from openlineage.client.event_v2 import Dataset

    unique = dict.fromkeys(identities)
    return [Dataset(namespace=d.namespace, name=d.name) for d in unique]
