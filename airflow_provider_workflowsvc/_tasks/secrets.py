"""
Secret handling of operator fields: plain data for templating, registration with the log masker. Which
strings are secret (a connector config's rule, the secret-word rule, URLs' credentials under every
key): docs/decisions/operators.md, "Secrets in configs and rendered fields".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, SecretStr

from airflow_provider_workflowsvc._url_secrets import credentials_of, mask_url_secrets
from airflow_provider_workflowsvc.models import is_secret_field


def plain_config_keys(connector_type: str | None) -> frozenset[str]:
    """
    Return the config keys of ``connector_type`` known to hold no secret: the live docs' settings of
    the type (as a source or a destination) that are not secret (:mod:`..connectors_catalog`).
    """
    from airflow_provider_workflowsvc import connectors_catalog

    return connectors_catalog.plain_settings(None, str(connector_type or "").strip().lower())


def _masker() -> Callable[[Any], None]:
    try:
        from airflow.sdk.log import mask_secret

        return mask_secret
    except ImportError:  # pragma: no cover - task SDK of Airflow 3.0
        from airflow.sdk.execution_time import secrets_masker

        return secrets_masker.mask_secret  # type: ignore[no-any-return,unused-ignore]


def plain_data(value: Any) -> Any:
    """
    ``value`` with pydantic models turned into JSON-like dicts (secrets revealed), recursively.

    Settings the user did not set are left out, so the dict validates to the same model again.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})
    if isinstance(value, Mapping):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    return value


def _strings(value: Any) -> Iterator[str]:
    """Every string in ``value`` (nested mappings and lists included; ``SecretStr`` revealed)."""
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, str):
        yield value
    elif isinstance(value, BaseModel):
        yield from _strings(plain_data(value))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def without_url_secrets(value: Any) -> Any:
    """
    ``value`` as a message may show it: in every string (nested too), what URLs may carry as credentials
    masked (:func:`~airflow_provider_workflowsvc._url_secrets.mask_url_secrets`); the rest as it is.
    """
    if isinstance(value, str):
        return mask_url_secrets(value)
    if isinstance(value, Mapping):
        return {k: without_url_secrets(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_url_secrets(v) for v in value]
    return value


def _with_uri_passwords(secrets: list[str], values: Any) -> list[str]:
    found = credentials_of(list(_strings(values)))
    passwords = [password for password, _ in found if password is not None]
    secrets = secrets + passwords + [unquote(p) for p in passwords if unquote(p) != p]
    return secrets + [secret for _, carried in found for secret in carried]


def config_secrets(config: Any, connector_type: str | None) -> list[str]:
    """Return the secret strings of a connector ``config`` of ``connector_type`` (None: type unknown)."""
    config = plain_data(config)
    if not isinstance(config, Mapping):
        return _with_uri_passwords(list(_strings(config)), config)
    known = plain_config_keys(connector_type)
    secrets = [s for key, value in config.items() if str(key) not in known for s in _strings(value)]
    return _with_uri_passwords(secrets, config)


def _secret_strings(value: Any, secret: bool) -> list[str]:
    """Return the strings of ``value`` that are secret: under a secret-looking key, or ``SecretStr``."""
    if isinstance(value, SecretStr):
        return [value.get_secret_value()]
    if isinstance(value, BaseModel):
        return _secret_strings(plain_data(value), secret)
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in _secret_strings(v, secret or is_secret_field(str(k)))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _secret_strings(v, secret)]
    if secret and value is not None and not isinstance(value, bool):
        return [str(value)]
    return []


def _register(secrets: list[str]) -> None:
    mask = _masker()
    for secret in dict.fromkeys(secrets):
        if secret.strip():
            mask(secret)


def plain_fields(task: Any) -> None:
    """Turn models in a task's ``secret_fields`` into plain data, so templates inside them render too."""
    for name in task.secret_fields:
        setattr(task, name, plain_data(getattr(task, name)))


def mask_fields(task: Any, *, config: bool = False) -> None:
    """
    Register the secrets of a task's rendered fields with Airflow's secret masker (logs, rendered
    fields): those of each of its ``secret_fields`` (secret-looking keys; with ``config``, a connector
    config's rule, by the task's ``connector_type``), URI passwords among them, and what any URI with a
    password in a templated field carries (its ``user:password``, ``s3://KEY:SECRET@bucket``): the task
    refuses such a URI, but Airflow stores and shows the rendered fields before. A URI without a
    password keeps its ``user@`` (``s3://conn_id@bucket``: a connection's id, no secret).
    """
    secrets: list[str] = []
    for name in task.secret_fields:
        value = getattr(task, name, None)
        if config:
            secrets += config_secrets(value, getattr(task, "connector_type", None))
        else:
            secrets += _with_uri_passwords(_secret_strings(value, secret=False), value)
    templated = [getattr(task, name, None) for name in getattr(task, "template_fields", ())]
    found = credentials_of(list(_strings(templated)))
    _register(secrets + [secret for password, carried in found if password is not None for secret in carried])
