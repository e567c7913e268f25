"""
Stand-ins for the documents a remote source connector would read: deterministic, derived from config.

* confluence: the configured ``spaces`` (or ``ENG`` and ``SALES`` when none are given), at most
  ``max_num_of_spaces`` of them, each with ``min(5, max_num_of_docs_from_each_space)`` pages; every
  element carries ``metadata.data_source.permissions_data`` (read/update/delete users and groups).
* any other type: ``emulator_documents`` documents when the config has that (generic) field, else 1-3
  documents from a hash of the type and config. ``emulator_failed_documents: N`` makes the last N fail.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_workflowsvc.emulator.partition import Block

__all__ = ["CONFLUENCE_DOCS_PER_SPACE", "DEFAULT_CONFLUENCE_SPACES", "RemoteDocument", "remote_documents"]

CONFLUENCE_DOCS_PER_SPACE = 5
DEFAULT_CONFLUENCE_SPACES = ("ENG", "SALES")
MAX_DOCUMENTS = 1000
_FAIL_HINT = "emulator_failed_documents"
_COUNT_HINT = "emulator_documents"


@dataclass(frozen=True)
class RemoteDocument:
    """One document of a remote source: its name, elements to produce, or why it fails."""

    name: str
    filetype: str
    blocks: tuple[Block, ...]
    data_source: dict[str, Any] | None = None
    error: str | None = None


def _digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()


def _int_hint(config: dict[str, Any], key: str) -> int | None:
    try:
        return max(0, min(MAX_DOCUMENTS, int(config[key])))
    except (KeyError, TypeError, ValueError):
        return None


def remote_documents(connector_type: str, config: dict[str, Any]) -> list[RemoteDocument]:
    """Return the documents a source of this type and (non-secret) config yields, in a stable order."""
    if connector_type == "confluence":
        return _confluence_documents(config)
    return _generic_documents(connector_type, config)


def _confluence_documents(config: dict[str, Any]) -> list[RemoteDocument]:
    url = str(config.get("url", "")).rstrip("/")
    host = urlsplit(url).hostname or "confluence"
    spaces = list(config.get("spaces") or DEFAULT_CONFLUENCE_SPACES)[
        : int(config.get("max_num_of_spaces", 500))
    ]
    per_space = min(CONFLUENCE_DOCS_PER_SPACE, int(config.get("max_num_of_docs_from_each_space", 150)))
    documents = []
    for space in spaces:
        for number in range(1, per_space + 1):
            page_id = str(int(_digest(host, space, number)[:8], 16))
            blocks = (
                Block("Title", f"{space} page {number}"),
                Block("NarrativeText", f"Synthetic Confluence page {number} of space {space} on {host}."),
            )
            data_source = {
                "url": f"{url}/spaces/{space}/pages/{page_id}",
                "record_locator": {"space_key": space, "page_id": page_id},
                "permissions_data": _confluence_permissions(host, space, page_id),
            }
            documents.append(RemoteDocument(f"{space}-{page_id}.html", "text/html", blocks, data_source))
    return documents


def _confluence_permissions(host: str, space: str, page_id: str) -> list[dict[str, Any]]:
    def account(role: str) -> str:
        return "557058:" + _digest(host, space, page_id, role)[:24]

    group = space.lower()
    return [
        {"read": {"users": [account("reader"), account("editor")], "groups": [f"{group}-readers"]}},
        {"update": {"users": [account("editor")], "groups": [f"{group}-editors"]}},
        {"delete": {"users": [], "groups": ["confluence-administrators"]}},
    ]


def _generic_documents(connector_type: str, config: dict[str, Any]) -> list[RemoteDocument]:
    count = _int_hint(config, _COUNT_HINT)
    if count is None:
        count = 1 + int(_digest(connector_type, json.dumps(config, sort_keys=True, default=str))[:8], 16) % 3
    failing = min(count, _int_hint(config, _FAIL_HINT) or 0)
    documents = []
    for number in range(1, count + 1):
        name = f"{connector_type}-document-{number}.txt"
        error = None
        if number > count - failing:
            error = f"document could not be processed (the config asks for {failing} failed documents)"
        blocks = (
            Block("Title", f"Document {number}"),
            Block("NarrativeText", f"Synthetic document {number} read from a {connector_type} source."),
        )
        data_source = {"url": f"{connector_type}://emulated/document-{number}"}
        documents.append(RemoteDocument(name, "text/plain", blocks, data_source, error))
    return documents
