"""What the URLs in a text may carry as credentials, and the text with them masked (one rule for all)."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from airflow_provider_workflowsvc.models import is_secret_field


def uri_password(text: str) -> str | None:
    """Return the password in a URI's ``user:password@`` part, or None."""
    if "://" not in text or "@" not in text:
        return None
    try:
        password = urlsplit(text.strip()).password
    except ValueError:
        return None
    return password or None


def credentials_of(texts: list[str]) -> list[tuple[str | None, list[str]]]:
    """Return, for each of ``texts``, its URI's password (:func:`uri_password`) and :func:`url_secrets`."""
    return [(uri_password(text), url_secrets(text)) for text in texts]


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")


def url_secrets(text: str) -> list[str]:
    """
    Return what the URLs in ``text`` may carry as credentials, as written and decoded: the user info, the
    query string whole and each of its values (a SAS ``sig=``, ``X-Amz-Signature``, ``?token=``).
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


MASK = "***"
MIN_MASKED_ALONE = 3
"""A credential shorter than this is masked only as part of the URL that holds it (its user info or
query), never on its own everywhere in the text: a one-letter password would mask that letter in
every word."""


def mask_url_secrets(text: str) -> str:
    """``text`` with what its URLs may carry as credentials masked; the location stays readable."""
    for secret in sorted(set(url_secrets(text)), key=len, reverse=True):
        if len(secret) >= MIN_MASKED_ALONE:
            text = text.replace(secret, MASK)
    return text
