"""Local files a request streams: upload parts opened only while sent, downloads written atomically."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError


@contextlib.contextmanager
def _atomic_file(target: Path) -> Iterator[BinaryIO]:
    """
    Open a new file beside ``target`` to write into; rename it to ``target`` only when the block completes.

    The file is created with mode 0o666 less the process umask, like any file a program writes
    (``mkstemp`` would make it 0o600 whatever the umask, unreadable to another user or container).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.{secrets.token_hex(8)}.part"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


class _PartFile:
    """
    One upload part's file, open only while its part is being sent (so any number of files can go).

    Its size is taken when the request is built (for ``Content-Length``); it is opened at its first
    read and closed at its end, and reopened if the body is sent again.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            self._size = path.stat().st_size
        except OSError as exc:
            raise self._unreadable(exc) from None
        self._handle: BinaryIO | None = None
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        left = self._size - self._position
        if left <= 0:
            self.close()
            return b""
        if self._handle is None:
            try:
                self._handle = self._path.open("rb")
                self._handle.seek(self._position)
            except OSError as exc:
                raise self._unreadable(exc) from None
        chunk = self._handle.read(left if size is None or size < 0 else min(size, left))
        self._position += len(chunk)
        if not chunk:
            self.close()
        return chunk

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self.close()
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> _PartFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreadable(self, exc: OSError) -> WorkflowServiceInputError:
        return WorkflowServiceInputError(
            f"input file {str(self._path)!r} cannot be read: {exc.strerror or exc}"
        )
