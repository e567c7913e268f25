"""Markers in the names of uploaded files (``mark_uploads=True`` only), and the user's own names back."""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Sequence

MARK_PREFIX = "__wfsvc-"
"""What opens a marker in an uploaded file name (``report.txt`` → ``report__wfsvc-<16 hex>.txt``)."""
_MARKER_AT_END = re.compile(r"__wfsvc-[0-9a-f]{16}$")


def new_marker() -> str:
    """Return a marker no other run can produce (64 random bits), e.g. ``__wfsvc-3f9a0c1b7d2e4a56``."""
    return MARK_PREFIX + secrets.token_hex(8)


def with_marker(name: str, marker: str) -> str:
    """
    Return ``name`` with ``marker`` before its extension (the service still sees the file's type):
    ``2024/report.txt`` → ``2024/report__wfsvc-….txt``; ``README`` → ``README__wfsvc-…``.
    """
    folder, base = name.rpartition("/")[0::2]
    stem, extension = os.path.splitext(base)
    marked = f"{stem}{marker}{extension}"
    return f"{folder}/{marked}" if folder else marked


def run_marker(input_names: Sequence[str] | None) -> str | None:
    """
    Return the marker of a marked run, read in its job's record: the one marker every input name
    carries just before its extension (where :func:`with_marker` puts it); None for a run of
    unmarked names, or a record that lists none (nothing is then taken out of any name).
    """
    found = {_marker_of(name) for name in input_names or ()}
    return found.pop() if len(found) == 1 and None not in found else None


def _marker_of(name: str) -> str | None:
    match = _MARKER_AT_END.search(os.path.splitext(name.rpartition("/")[2])[0])
    return match.group(0) if match else None


def unmarked(text: str, marker: str | None) -> str:
    """Return ``text`` (a file name, or a message naming files) without a run's ``marker``."""
    return text.replace(marker, "") if marker else text
