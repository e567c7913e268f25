"""
Secret handling of operator fields: plain data for templating, registration with the log masker.

Two rules decide which strings are secret:

* a connector ``config`` (:func:`mask_config_secrets`): every string is secret unless its top-level
  key is a known non-secret setting of the connector's type (:func:`plain_config_keys`: the live docs'
  settings of the type that are not secret, and :data:`NON_SECRET_CONFIG_KEYS`); a key neither lists
  has its strings masked. No name is guessed, so a credential under any key (``client_cred``,
  ``box_app_config``, ...) is masked;
* other fields (workflow node settings, :func:`mask_secret_values`): strings under a secret-looking
  key (``token``, ``password``, ``api_key``, ...) and ``SecretStr`` values.

In both, the user info of any URL (``mongodb://user:pass@host``) and its query string (an Azure SAS, a
presigned S3 URL, ``?token=``) are secrets too (:func:`url_secrets`), whatever the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, SecretStr

from airflow_provider_workflowsvc.models import is_secret_field

__all__ = [
    "NON_SECRET_CONFIG_KEYS",
    "config_secrets",
    "mask_config_secrets",
    "mask_secret_values",
    "plain_config_keys",
    "plain_data",
    "url_secrets",
    "without_url_secrets",
]

NON_SECRET_CONFIG_KEYS: dict[str, frozenset[str]] = {
    "azure": frozenset({"remote_url", "account_name", "recursive"}),
    "confluence": frozenset(
        {
            *("url", "spaces", "max_num_of_spaces", "max_num_of_docs_from_each_space"),
            *("extract_images", "extract_files", "cloud", "username"),
        }
    ),
    "astradb": frozenset({"collection_name", "keyspace", "api_endpoint", "batch_size", "flatten_metadata"}),
    "s3": frozenset({"remote_url", "recursive", "endpoint_url", "anonymous"}),
}
"""Per connector type, the config keys known to hold no secret (shown in logs and rendered fields)."""


def plain_config_keys(connector_type: str | None) -> frozenset[str]:
    """
    Return the config keys of ``connector_type`` known to hold no secret: the allow-list above, and by
    knowledge the live docs' settings of the type (as a source or a destination) that are not secret.
    A key the docs call secret is never plain, whatever the allow-list says.
    """
    from airflow_provider_workflowsvc import connectors_catalog

    name = str(connector_type or "").strip().lower()
    secret = connectors_catalog.secret_settings(None, name)
    allowed = NON_SECRET_CONFIG_KEYS.get(name, frozenset()) | connectors_catalog.plain_settings(None, name)
    return allowed - secret


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


def uri_password(text: str) -> str | None:
    """Return the password in a URI's ``user:password@`` part, or None."""
    if "://" not in text or "@" not in text:
        return None
    try:
        password = urlsplit(text.strip()).password
    except ValueError:
        return None
    return password or None


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")


def url_secrets(text: str) -> list[str]:
    """
    Return what the URLs in ``text`` may carry as credentials: the user info (``user:pass@``) and the
    query string, whole and each of its values (an Azure SAS ``sig=``, a presigned S3 URL's
    ``X-Amz-Signature``/``X-Amz-Credential``, a ``?token=``), as written and decoded.

    Even under a known non-secret key (``remote_url``, ``url``, ``endpoint_url``, ``api_endpoint``),
    the location (scheme, host, path) stays readable and these parts are masked.
    """
    if "://" not in text:
        return []
    found: list[str] = []
    for url in _URL.findall(text):
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        userinfo, at, _ = parts.netloc.rpartition("@")
        if at and userinfo and not _is_azure_container(parts.scheme, userinfo):
            found += [userinfo, *(p for p in (parts.password,) if p)]
        if parts.query:
            found += [parts.query, *_secret_query_values(parts.query)]
        if parts.fragment and "=" in parts.fragment:  # a token in a fragment (#access_token=...)
            found.append(parts.fragment)
    return found + [unquote(s) for s in found if unquote(s) != s]


def without_url_secrets(value: Any) -> Any:
    """
    ``value`` as a message may show it: in every string (nested too), what :func:`url_secrets` finds
    replaced by ``***``; the rest as it is.
    """
    if isinstance(value, str):
        for secret in sorted(set(url_secrets(value)), key=len, reverse=True):
            value = value.replace(secret, "***")
        return value
    if isinstance(value, Mapping):
        return {k: without_url_secrets(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_url_secrets(v) for v in value]
    return value


_AZURE_STORAGE_SCHEMES = frozenset({"wasb", "wasbs", "abfs", "abfss"})
LONG_QUERY_VALUE = 16
"""Query values this long are registered on their own whatever their key (signatures, credentials);
shorter ones only under a secret-looking key (``token``): a SAS's ``sp=r`` or its dates are no secret."""


def _is_azure_container(scheme: str, userinfo: str) -> bool:
    """``abfss://container@account...``: the part before ``@`` names a container, not a credential."""
    return scheme.lower() in _AZURE_STORAGE_SCHEMES and ":" not in userinfo


def _secret_query_values(query: str) -> list[str]:
    """Return the values of ``query`` (as written) that are long, or under a secret-looking key."""
    values = []
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if value and (len(unquote(value)) >= LONG_QUERY_VALUE or is_secret_field(unquote(key))):
            values.append(value)
    return values


def _with_uri_passwords(secrets: list[str], values: Any) -> list[str]:
    passwords = [p for s in _strings(values) if (p := uri_password(s)) is not None]
    secrets = secrets + passwords + [unquote(p) for p in passwords if unquote(p) != p]
    return secrets + [secret for s in _strings(values) for secret in url_secrets(s)]


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


def mask_secret_values(value: Any) -> None:
    """Register each secret string of ``value`` (secret-looking keys, URI passwords) with the masker."""
    _register(_with_uri_passwords(_secret_strings(value, secret=False), value))


def mask_config_secrets(config: Any, connector_type: str | None) -> None:
    """
    Register each secret string of a connector config with Airflow's secret masker (logs, rendered
    fields): every string but those under the type's known non-secret keys, and URI passwords.
    """
    _register(config_secrets(config, connector_type))
