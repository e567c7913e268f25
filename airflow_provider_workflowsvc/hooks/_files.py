"""Files a request streams: uploads checked when the call is built and opened only while sent; downloads."""

from __future__ import annotations

import contextlib
import json
import mimetypes
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc.exceptions import InputReadError, WorkflowServiceInputError
from airflow_provider_workflowsvc.storage import StagedObject, StoredObject


@dataclass(frozen=True)
class UploadFile:
    """A file sent as one file part (``ApiCall.files_part``), streamed: a local file or a stored object."""

    path: Path | StoredObject
    filename: str
    media_type: str


@contextlib.contextmanager
def _atomic_file(target: Path | Any) -> Iterator[BinaryIO]:
    """Open a file beside ``target``, renamed to it when the block completes (0o666 less the umask)."""
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
    One upload part's file, open only from its first read to its end; a failed or short read aborts the
    request mid-body (:class:`InputReadError`): the service gets no complete request.
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

    def _unreadable(self, reason: str) -> InputReadError:
        return InputReadError(
            f"input file {str(self._path)!r} failed after {self._position} of its {self._size} bytes: "
            f"{reason.rstrip('.')}. The run request was aborted before its body was complete: the service "
            "received no complete request, so this request created no job"
        )


# --------------------------------------------------------------------------------------------------
# Uploads checked, downloads placed


def check_upload_name(path: Path) -> None:
    """Refuse a file whose name is not valid UTF-8: an upload part cannot name it (shown escaped)."""
    try:
        path.name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("ascii", "backslashreplace")
        raise WorkflowServiceInputError(
            f"input file '{shown}': its name is not valid UTF-8; rename the file"
        ) from None


LocalFile = str | os.PathLike[str] | Any | tuple[str | os.PathLike[str] | Any, str]
"""A file to upload: a local path, an object in storage (``ObjectStoragePath``, ``s3://conn_id@bucket/key``,
a ``StoredObject``), or ``(either, name to send)``."""


def upload_files(paths: Iterable[LocalFile] | str | os.PathLike[str]) -> tuple[UploadFile, ...]:
    """Check the files exist and are readable; name each and guess its media type (a str is one file)."""
    if isinstance(paths, (str, os.PathLike)) or storage.is_location(paths):
        paths = [paths]
    files = []
    for item in paths:
        raw, name = item if isinstance(item, tuple) else (item, None)
        source = _upload_source(raw)
        media_type = mimetypes.guess_type(source.name)[0] or "application/octet-stream"
        files.append(UploadFile(path=source, filename=name or source.name, media_type=media_type))
    if not files:
        raise WorkflowServiceInputError("files is empty: give at least one file, or files=None for no body")
    return tuple(files)


def _upload_source(raw: Any) -> Path | StoredObject:
    """Check a file to upload: a readable local file, or an object in storage (looked up)."""
    if isinstance(raw, StoredObject):
        return raw
    if storage.is_location(raw):
        local = storage.local_path(raw)
        if local is None:
            return _stored_object(raw)
        raw = local
    path = Path(raw).expanduser()
    check_upload_name(path)
    if not path.is_file():
        reason = "is a directory" if path.is_dir() else "does not exist"
        raise WorkflowServiceInputError(f"input file {str(path)!r} {reason}")
    if not os.access(path, os.R_OK):
        raise WorkflowServiceInputError(f"input file {str(path)!r} is not readable")
    return path


def _stored_object(raw: Any) -> StoredObject:
    text = storage.without_userinfo(raw if isinstance(raw, str) else storage.shown(raw))
    path = storage.location(raw, None, "input file")
    kind, size = storage.kind_of(path, text, "input file")
    if kind != "file":
        reason = "is a folder" if kind == "directory" else "does not exist"
        raise WorkflowServiceInputError(f"input file {text!r} {reason}")
    return StoredObject(path, size)


def download_target(path: Any) -> Path | StagedObject | None:
    if path is None or isinstance(path, StagedObject):
        return path
    return Path(path).expanduser()


# --------------------------------------------------------------------------------------------------
# What an output names


OUTPUT_HEAD_BYTES = 65536
"""How much of an output is read to learn its document's name (it is in the first element)."""
_FILENAME_FIELD = re.compile(rb'"filename"\s*:\s*("(?:[^"\\]|\\.)*")')


def document_name_in(head: bytes) -> str | None:
    """Return the first ``"filename"`` in an output's first bytes (its document's name), or None."""
    match = _FILENAME_FIELD.search(head)
    if match is None:
        return None
    try:
        name = json.loads(match.group(1))
    except ValueError:
        return None
    return name if isinstance(name, str) and name.strip() else None
