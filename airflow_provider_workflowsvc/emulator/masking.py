"""
What the emulator keeps and shows of a connector's config: secrets never, known settings as given.

The rule (one place): every string of a connector ``config`` is replaced by :data:`MASK` unless its
top-level key is a known non-secret setting of that connector type (:data:`NON_SECRET_FIELDS`); even
there, credentials inside a URI (``scheme://user:pass@host``) and its query string (a SAS, a presigned
URL's signature, ``?token=``) are masked. Numbers, booleans and nulls
are kept. Only the masked config is stored, so no answer can ever echo a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MASK",
    "NON_SECRET_FIELDS",
    "is_known_setting",
    "looks_like_credential",
    "mask_config",
    "mask_uri_credentials",
    "mask_uri_query",
]

MASK = "**********"
NON_SECRET_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("source", "azure"): frozenset({"remote_url", "account_name", "recursive"}),
    ("source", "confluence"): frozenset(
        {
            *("url", "spaces", "max_num_of_spaces", "max_num_of_docs_from_each_space"),
            *("extract_images", "extract_files", "cloud", "username"),
        }
    ),
    ("destination", "astradb"): frozenset(
        {"collection_name", "keyspace", "api_endpoint", "batch_size", "flatten_metadata"}
    ),
    **{
        (kind, "s3"): frozenset({"remote_url", "recursive", "endpoint_url", "anonymous"})
        for kind in ("source", "destination")
    },
}
_URI_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s]+)@")


def is_known_setting(kind: str, connector_type: str, key: str) -> bool:
    """Whether ``key`` is a known non-secret setting of this connector type."""
    return key in NON_SECRET_FIELDS.get((kind, connector_type), frozenset())


def mask_uri_credentials(text: str) -> str:
    """``text`` with the ``user:pass@`` of every URI in it masked."""
    return _URI_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text)


_URI_QUERY = re.compile(r"(?P<location>[A-Za-z][A-Za-z0-9+.\-]*://[^\s?#]*)\?[^\s#]*")


def mask_uri_query(text: str) -> str:
    """``text`` with the query string of every URI in it masked (a SAS, a presigned URL, ``?token=``)."""
    return _URI_QUERY.sub(lambda m: f"{m['location']}?{MASK}", text)


def mask_config(kind: str, connector_type: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the config as the emulator stores and shows it."""
    return {
        key: _keep_strings(value) if is_known_setting(kind, connector_type, key) else _mask_strings(value)
        for key, value in config.items()
    }


def _keep_strings(value: Any) -> Any:
    if isinstance(value, str):
        return mask_uri_query(mask_uri_credentials(value))
    if isinstance(value, Mapping):
        return {k: _keep_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_keep_strings(v) for v in value]
    return value


def _mask_strings(value: Any) -> Any:
    if isinstance(value, str):
        return MASK
    if isinstance(value, Mapping):
        return {k: _mask_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_strings(v) for v in value]
    return value


_CREDENTIAL_WORDS = frozenset(
    {"token", "tokens", "password", "passwd", "secret", "key", "keys", "credential", "credentials", "pat"}
)


def looks_like_credential(name: str) -> bool:
    """Whether a field name reads like a credential (``token``, ``api_key``, ...): only for messages."""
    return any(word in _CREDENTIAL_WORDS for word in re.split(r"[_\-.\s]+", name.lower()))
