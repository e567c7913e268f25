"""
Build the provider's table of connector settings from a checkout of the live service's public docs.

Usage: ``python scripts/build_connector_table.py <docs checkout> <its commit>``, where the checkout is
one of ``Unstructured-IO/docs``; it rewrites the package data ``airflow_provider_workflowsvc/connectors.json``
(a line per connector type; kinds, types and ways to authenticate sorted, settings in the docs' order).

For each connector type it reads the REST example that creates it
(``snippets/{source,destination}_connectors/<page>_rest_create.mdx``: the settings, grouped by the
``# For ... authentication`` alternatives) and the page that explains that example's placeholders
(``snippets/general-shared-text/<page>-api-placeholders.mdx``: which are required, what each one is).
Only facts are written (names, required, secret, URL): never the docs' text.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# The spec's (and the SDK's) name for a type the docs' examples spell otherwise.
SPEC_NAMES = {"weaviate": "weaviate-cloud"}
_KEY_LINE = re.compile(r'^\s*"(?P<key>[A-Za-z0-9_\-]+)"\s*:\s*(?P<value>.*?),?\s*$')
_VARIANT = re.compile(r"^\s*#\s*For (?P<name>.+?)\s*:?\s*$")
_PLACEHOLDER = re.compile(r"<([^<>]+)>")
# A setting is secret when its name says so: the words the provider's name rule knows, and the ones
# the docs' settings use that it does not (``client_cred``; ``box_app_config`` holds a private key).
_SECRET_WORDS = frozenset(
    {"password", "secret", "token", "key", "cred", "creds", "credential", "credentials", "passphrase"}
)
_SECRET_NAMES = frozenset({"connection_string", "box_app_config"})
_CONNECTION_STRING = re.compile(r"connection (string|uri)", re.IGNORECASE)
_NOT_SECRET = frozenset({"record_id_key", "key_prefix"})  # names of fields, not keys to anything


def _norm(placeholder: str) -> str:
    return placeholder.strip().lower().replace("_", "-")


def read_placeholders(text: str) -> dict[str, tuple[bool, str]]:
    """Read a placeholders page: placeholder name → (required, its explanation)."""
    found: dict[str, tuple[bool, str]] = {}
    for line in text.splitlines():
        names = re.findall(r"`<([^<>`]+)>`", line)
        subject = re.match(r"\s*- `([^`]*)`", line)  # a list item explains its first code span
        if not names and subject is not None:
            names = re.findall(r"<([^<>]+)>", subject.group(1))  # e.g. `https://<host>:<port>`
        for name in names:
            lowered = line.lower()
            required = "required" in lowered and "not required" not in lowered
            found.setdefault(_norm(name), (required, line))
    return found


def _config_lines(text: str) -> list[str]:
    """Return the lines inside the ``"config": {...}`` object of a REST create example (not its braces)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(r'"config"\s*:\s*\{', line))
    depth, body = 1, []
    for line in lines[start + 1 :]:
        depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
        if depth <= 0:
            break
        body.append(line)
    return body


def read_example(text: str) -> tuple[str, list[tuple[str | None, str, str]]]:
    """Read the connector type and its settings: (alternative, or None for all of them; key; value)."""
    type_match = re.search(r'"type"\s*:\s*"([^"]+)"', text)
    assert type_match, "no type in the example"
    settings: list[tuple[str | None, str, str]] = []
    variant: str | None = None
    depth, blank_after_keys, keys_in_variant = 0, False, 0
    for line in _config_lines(text):
        if not line.strip():
            blank_after_keys = keys_in_variant > 0
            continue
        comment = _VARIANT.match(line) if depth == 0 else None
        if comment:
            variant, keys_in_variant, blank_after_keys = comment.group("name"), 0, False
            continue
        if line.strip().startswith("#"):
            continue
        key = _KEY_LINE.match(line) if depth == 0 else None
        depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
        if key is None:
            continue
        if variant is not None and blank_after_keys:
            variant = None  # a blank line, then a key: the alternatives are over
        keys_in_variant += 1
        blank_after_keys = False
        settings.append((variant, key.group("key"), key.group("value")))
    return type_match.group(1), settings


def _is_url(key: str, value: str, placeholder: str | None) -> bool:
    words = set(re.split(r"[_\-]", key.lower())) | set(re.split(r"[_\-]", placeholder or ""))
    return bool(words & {"url", "uri"}) or "://" in value


FLAGS = ("required", "secret", "url")
"""What a setting may be, in the order the table writes it: required (in every variant), secret, URL."""


def build_entry(example: str, placeholders: dict[str, tuple[bool, str]]) -> tuple[str, dict[str, object]]:
    connector_type, settings = read_example(example)
    flags: dict[str, set[str]] = {}
    variants: dict[str, list[str]] = {}
    for variant, key, value in settings:
        names = [_norm(p) for p in _PLACEHOLDER.findall(value)]
        placeholder = names[0] if names else None
        is_required, meaning = placeholders.get(placeholder or "", (False, ""))
        found = flags.setdefault(key, set())
        if _is_url(key, value, placeholder):
            found.add("url")
        if (
            _CONNECTION_STRING.search(meaning)  # a connection string or URI that carries the user's password
            or key in _SECRET_NAMES
            or (key not in _NOT_SECRET and set(re.split(r"[_\-]", key.lower())) & _SECRET_WORDS)
        ):
            found.add("secret")
        has_default = "default" in meaning.lower()
        if variant is None:
            if is_required and not has_default:  # a default makes it optional
                found.add("required")
        elif (placeholder and "|" not in placeholder and not has_default) or value == "true":
            # within an alternative, every setting without a default or a choice is needed
            variants.setdefault(variant, [])
            if key not in variants[variant]:
                variants[variant].append(key)
        else:
            variants.setdefault(variant, [])
    entry: dict[str, object] = {
        "settings": {key: tuple(flag for flag in FLAGS if flag in found) for key, found in flags.items()},
        "auth_variants": {name: tuple(variants[name]) for name in sorted(variants)},
    }
    return SPEC_NAMES.get(connector_type, connector_type), entry


def build_table(docs: Path) -> dict[str, dict[str, dict[str, object]]]:
    table: dict[str, dict[str, dict[str, object]]] = {"source": {}, "destination": {}}
    shared = docs / "snippets" / "general-shared-text"
    for kind in table:
        for example in sorted((docs / "snippets" / f"{kind}_connectors").glob("*_rest_create.mdx")):
            page = example.name.removesuffix("_rest_create.mdx")
            candidates = [page, page.replace("_", "-"), page.replace("azure_blob_storage", "azure")]
            placeholder_page = next(
                (
                    shared / f"{c}-api-placeholders.mdx"
                    for c in candidates
                    if (shared / f"{c}-api-placeholders.mdx").exists()
                ),
                None,
            )
            placeholders = read_placeholders(placeholder_page.read_text()) if placeholder_page else {}
            connector_type, entry = build_entry(example.read_text(), placeholders)
            table[kind][connector_type] = entry
    return table


TABLE_FILE = Path(__file__).resolve().parents[1] / "airflow_provider_workflowsvc" / "connectors.json"


def dump(table: dict[str, dict[str, dict[str, object]]], revision: str) -> str:
    """Return the table as the data file holds it: ``{"docs_revision": ..., kind: {type: entry}}``."""
    lines = ["{", f'"docs_revision":{json.dumps(revision)},']
    kinds = sorted(table)
    for k, kind in enumerate(kinds):
        lines.append(f"{json.dumps(kind)}:{{")
        names = sorted(table[kind])
        for n, name in enumerate(names):
            comma = "," if n < len(names) - 1 else ""
            lines.append(f"{json.dumps(name)}:{json.dumps(table[kind][name], separators=(',', ':'))}{comma}")
        lines.append("}," if k < len(kinds) - 1 else "}")
    return "\n".join([*lines, "}", ""])


def main() -> None:
    docs, revision = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "unknown"
    TABLE_FILE.write_text(dump(build_table(docs), revision))


if __name__ == "__main__":
    main()
