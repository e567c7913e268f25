"""Try-unique markers in the names of uploaded files, and the user's own names back."""

from __future__ import annotations

import os
import re
import secrets

MARK_PREFIX = "__wfsvc-"
"""What opens a marker in an uploaded file name (``report.txt`` → ``report__wfsvc-<16 hex>.txt``)."""
_MARKER = re.compile(r"__wfsvc-[0-9a-f]{16}")


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


def user_names(text: str) -> str:
    """Return ``text`` (a file name, or a message naming files) with every marker removed."""
    return _MARKER.sub("", text) if MARK_PREFIX in text else text
