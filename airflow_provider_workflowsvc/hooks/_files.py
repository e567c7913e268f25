"""
Files a request streams: upload parts (local files, objects in storage) opened only while sent,
downloads written atomically.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_workflowsvc.exceptions import InputReadError, WorkflowServiceInputError


@contextlib.contextmanager
def _atomic_file(target: Path | Any) -> Iterator[BinaryIO]:
    """
    Open a new file beside ``target`` to write into; rename it to ``target`` only when the block completes.

    The file is created with mode 0o666 less the process umask, like any file a program writes
    (``mkstemp`` would make it 0o600 whatever the umask, unreadable to another user or container).
    A target in object storage (``storage.StagedObject``) writes itself: a write that fails leaves
    nothing under its key.
    """
    if not isinstance(target, Path):
        with target.write_atomically() as fh:
            yield fh
        return
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

    ``path`` is a local file, or an object in storage (``storage.StoredObject``, read in blocks, never
    to local disk). Its size is taken when the request is built (for ``Content-Length``); it is opened
    at its first read and closed at its end, and reopened if the body is sent again (a redirect).

    A read that fails, or a file that ends before its size, aborts the request mid-body with
    :class:`InputReadError`: the body never reaches its declared length, so the service gets no
    complete request (the run evidence counts it as refused).
    """

    def __init__(self, path: Path | Any) -> None:
        self._path = path
        try:
            self._size = path.stat().st_size
        except OSError as exc:
            raise WorkflowServiceInputError(
                f"input file {str(path)!r} cannot be read: {exc.strerror or exc}"
            ) from None
        self._handle: BinaryIO | None = None
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        left = self._size - self._position
        if left <= 0:
            self.close()
            return b""
        try:
            if self._handle is None:
                self._handle = self._path.open("rb")
                self._handle.seek(self._position)
            chunk = self._handle.read(left if size is None or size < 0 else min(size, left))
        except OSError as exc:
            self.close()
            raise self._unreadable(exc.strerror or str(exc) or type(exc).__name__) from exc
        if not chunk:
            self.close()
            raise self._unreadable("it ended there (it changed since the run request was built)")
        self._position += len(chunk)
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
            handle, self._handle = self._handle, None
            with contextlib.suppress(OSError):
                handle.close()

    def __enter__(self) -> _PartFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreadable(self, reason: str) -> InputReadError:
        return InputReadError(
            f"input file {str(self._path)!r} failed after {self._position} of its {self._size} bytes: "
            f"{reason.rstrip('.')}. The run request was aborted before its body was complete: the service "
            "received no complete request, so this request created no job"
        )
