"""What the live service's docs say about each connector type's settings: required, secret, URL-valued."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal
from urllib.parse import urlsplit

Kind = Literal["source", "destination"]


@cache
def _table() -> dict[str, Any]:
    """Read the package data ``connectors.json`` (written by ``scripts/build_connector_table.py``) once."""
    return json.loads(
        resources.files("airflow_provider_workflowsvc")
        .joinpath("connectors.json")
        .read_text(encoding="utf-8")
    )


def __getattr__(name: str) -> Any:
    if name == "DOCS_REVISION":  # the docs commit the table was read from; read only when asked
        return _table()["docs_revision"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ConnectorSettings:
    """One connector type's settings as the live docs give them."""

    kind: Kind
    type: str
    settings: tuple[str, ...]
    required: tuple[str, ...]
    """Needed whatever the authentication."""
    auth_variants: Mapping[str, tuple[str, ...]]
    """Each way to authenticate (as the docs name it) and the settings it needs; one must be complete."""
    secret: frozenset[str]
    url: frozenset[str]

    def authenticates(self, given: Collection[str]) -> bool:
        """Whether ``given`` settings hold every setting of one way to authenticate (or none is needed)."""
        return not self.auth_variants or any(all(k in given for k in v) for v in self.auth_variants.values())


def normalized(value: str) -> str:
    """
    Return ``value`` lower case, with runs of spaces, ``_`` and ``-`` as one space: the provider's one
    tolerant spelling rule (connector types, enum values, choices).
    """
    return re.sub(r"[\s_\-]+", " ", value.strip().lower())


@cache
def _entries(kind: Kind) -> dict[str, ConnectorSettings]:
    entries = {}
    for connector_type, entry in _table()[kind].items():
        flags: Mapping[str, list[str]] = entry["settings"]
        entries[normalized(connector_type)] = ConnectorSettings(
            kind=kind,
            type=connector_type,
            settings=tuple(flags),
            required=tuple(key for key in flags if "required" in flags[key]),
            auth_variants={name: tuple(keys) for name, keys in entry["auth_variants"].items()},
            secret=frozenset(key for key in flags if "secret" in flags[key]),
            url=frozenset(key for key in flags if "url" in flags[key]),
        )
    return entries


def known_types(kind: Kind) -> tuple[str, ...]:
    """Return every connector type of ``kind`` the live docs document."""
    return tuple(sorted(entry.type for entry in _entries(kind).values()))


def settings_of(kind: Kind, connector_type: Any) -> ConnectorSettings | None:
    """Return the docs' settings of a connector type in any spelling (``Kafka_Cloud``), else None."""
    if not isinstance(connector_type, str):
        return None
    return _entries(kind).get(normalized(connector_type))


def known_or_warned(kind: Kind, connector_type: str, warn: Callable[..., object]) -> bool:
    """Whether the docs know ``connector_type``; if not, ``warn`` that it is sent as given (did you mean)."""
    if settings_of(kind, connector_type) is not None:
        return True
    warn(
        "%s connector type %r is not one the provider knows; it is sent as given%s",
        kind,
        connector_type,
        did_you_mean(connector_type, known_types(kind)),
    )
    return False


def is_url(value: str) -> bool:
    """Whether ``value`` is an absolute URL: a scheme and a place (``s3://bucket``, ``https://host``)."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return False
    return bool(re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.\-]*", parts.scheme)) and bool(parts.netloc)


def _not_urls(value: Any, pending: Callable[[Any], bool]) -> bool:
    """Whether ``value`` (a string or a list of them) holds a string that is not a URL."""
    values = value if isinstance(value, list) else [value]
    return any(isinstance(v, str) and not pending(v) and v.strip() and not is_url(v) for v in values)


def check_config(
    kind: Kind,
    connector_type: Any,
    config: Mapping[str, Any],
    pending: Callable[[Any], bool] = lambda _: False,
) -> list[str]:
    """
    Check a connector config against the docs: raise a ``ValueError`` naming every missing required
    setting and every URL setting that is not a URL; return warnings for settings the docs do not
    know (with a "did you mean"). A type the docs do not know is not checked.

    ``pending`` says a value is not known yet (a template rendered later): it is not checked as a URL.
    An incomplete authentication is a warning, not an error: the docs' alternatives are not complete
    (a destination ``s3`` is also written anonymously; a service may accept a role or another key).
    """
    entry = settings_of(kind, connector_type)
    if entry is None:
        return []
    warnings = [_unknown_setting(entry, str(key)) for key in config if key not in entry.settings]
    errors = [f"missing required setting {key!r}" for key in entry.required if key not in config]
    errors += [
        f"setting {key!r} must be a URL" for key in sorted(entry.url) if _not_urls(config.get(key), pending)
    ]
    if not entry.authenticates(set(config)):
        ways = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in entry.auth_variants.items())
        warnings.append(f"no complete authentication; the docs give these ways: {ways}")
    if errors:
        raise ValueError(f"{kind} connector type {entry.type!r}: " + "; ".join(errors))
    return [f"{kind} connector type {entry.type!r}: {warning}" for warning in warnings]


def _unknown_setting(entry: ConnectorSettings, key: str) -> str:
    return f"setting {key!r} is not one the provider knows (sent as given){did_you_mean(key, entry.settings)}"


def did_you_mean(word: str, known: Collection[str]) -> str:
    """Return ``; did you mean 'x'?`` naming the known word closest to ``word``, or nothing."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _documented(kind: Kind | None, connector_type: Any) -> list[ConnectorSettings]:
    """Return the docs' settings of a connector type, of one kind or (``kind`` None) of either."""
    kinds: tuple[Kind, ...] = (kind,) if kind is not None else ("source", "destination")
    return [entry for each in kinds if (entry := settings_of(each, connector_type)) is not None]


def secret_settings(kind: Kind | None, connector_type: Any) -> frozenset[str]:
    """Return the settings the docs say hold a secret, of one kind or (``kind`` None) of either."""
    return frozenset(key for entry in _documented(kind, connector_type) for key in entry.secret)


def plain_settings(kind: Kind | None, connector_type: Any) -> frozenset[str]:
    """Return the settings the docs document that hold no secret, of one kind or (None) of either."""
    documented = {key for entry in _documented(kind, connector_type) for key in entry.settings}
    return frozenset(documented - secret_settings(kind, connector_type))
