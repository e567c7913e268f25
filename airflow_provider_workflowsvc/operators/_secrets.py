"""Secret handling of operator fields: plain data for templating, registration with the log masker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, SecretStr

from airflow_provider_workflowsvc.models import is_secret_field

__all__ = ["mask_secret_values", "plain_data"]


def _masker() -> Callable[[Any], None]:
    try:
        from airflow.sdk.log import mask_secret

        return mask_secret
    except ImportError:  # pragma: no cover - task SDK of Airflow 3.0
        from airflow.sdk.execution_time import secrets_masker

        return secrets_masker.mask_secret  # type: ignore[no-any-return,unused-ignore]


def plain_data(value: Any) -> Any:
    """``value`` with pydantic models turned into JSON-like dicts (secrets revealed), recursively.

    Settings the user did not set are left out, so the dict validates to the same model again.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})
    if isinstance(value, Mapping):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    return value


def _secret_strings(value: Any, secret: bool) -> list[str]:
    """The strings of ``value`` that are secret: under a secret-looking key, or ``SecretStr``."""
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


def mask_secret_values(value: Any) -> None:
    """Register each secret string of ``value`` with Airflow's secret masker (logs, rendered fields)."""
    mask = _masker()
    for secret in _secret_strings(value, secret=False):
        if secret:
            mask(secret)
