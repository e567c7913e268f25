"""The folder a job's outputs are downloaded into (local, or object storage), with safe names for them."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import secrets
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc.exceptions import (
    WorkflowServiceInputError,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook


def output_directory(value: Any, *, create: bool = False) -> Path:
    """``value`` as the directory to download into (checked before any request; made if ``create``)."""
    text = "" if value is None else str(value).strip()
    if not text:
        raise WorkflowServiceInputError("output_dir is empty: give the directory to download into")
    directory = Path(text).expanduser()
    if directory.exists() and not directory.is_dir():
        raise WorkflowServiceInputError(f"output_dir {text!r} exists and is not a directory")
    if create:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkflowServiceInputError(
                f"output_dir {text!r} cannot be created: {exc.strerror or exc}"
            ) from None
    return directory


class OutputFolder(Protocol):
    """Where a job's outputs are downloaded: :class:`LocalFolder`, or ``storage.StoredFolder``."""

    def create(self) -> None: ...

    def room(self) -> storage.Room: ...

    def staging(self) -> Any: ...

    def publish(self, staging: Any, name: str) -> str: ...

    def discard(self, staging: Any) -> None: ...


def output_folder(value: Any, conn_id: str | None = None) -> OutputFolder:
    """
    ``output_dir`` as the folder to download into, checked before any request: a local directory
    (also ``file://``), or a folder of object storage (an ``ObjectStoragePath``, or a URI reached with
    its own connection, else ``conn_id``) whose bucket exists.
    """
    if storage.is_location(value):
        local = storage.local_path(value)
        if local is None:
            folder = storage.StoredFolder(storage.location(value, conn_id, "output_dir"))
            folder.check()
            return folder
        value = local
    return LocalFolder(output_directory(value))


DEFAULT_PATH_MAX = 4096
"""Linux's PATH_MAX, for a file system that does not tell its own."""


class LocalFolder:
    """A local directory outputs are downloaded into: each written under a hidden name, then renamed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __str__(self) -> str:
        return str(self.directory)

    def create(self) -> None:
        output_directory(self.directory, create=True)

    def room(self) -> storage.Room:
        """Return the file system's PATH_MAX less the directory's own path, a ``/`` and the closing NUL."""
        root = self.directory.resolve()
        try:
            path_max = os.pathconf(root, "PC_PATH_MAX")
        except (OSError, ValueError):
            path_max = -1
        path_max = path_max if path_max > 0 else DEFAULT_PATH_MAX
        room = path_max - len(os.fsencode(root)) - 2
        limit = f"a path holds {path_max:,} bytes (PATH_MAX), {room:,} of them after {str(root)!r}"
        return storage.Room(room, limit)

    def staging(self) -> Path:
        return inside(self.directory, f"{storage.STAGING_PREFIX}{secrets.token_hex(8)}.download")

    def publish(self, staging: Path, name: str) -> str:
        """Give a completely written output its name (a rename: atomic); return its path."""
        target = inside(self.directory, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.replace(target)
        return str(target)

    def discard(self, staging: Path) -> None:
        staging.unlink(missing_ok=True)


DOCUMENT_NAME_BYTES = 65536
"""How much of a downloaded output is read for the name of its document (its first element's)."""
MAX_NAME_BYTES = 255
"""The longest file or folder name common file systems hold (ext4, XFS, Btrfs, APFS: 255 bytes)."""
_KEPT_EXTENSION_BYTES = 32
"""A document's extension up to this long is kept when its name is cut to fit."""


def output_name(document: str, suffix: str = ".json") -> str | None:
    """
    Return the relative path an output of ``document`` is written to (``suffix`` after it): THE rule for
    downloaded names, docs/decisions/files.md ("One naming rule"). None when nothing is left (``..``, ``""``);
    a name its folder cannot hold as a whole is then shortened by :func:`within`.
    """
    parts = [_holdable(part) for part in document.split("/") if part not in ("", ".", "..")]
    if not parts:
        return None
    return "/".join([*(_fitted(part, "") for part in parts[:-1]), _fitted(parts[-1], suffix)])


def name_part(text: str) -> str:
    """Return ``text`` as one part of a name (``/`` is not a folder here): :func:`output_name`'s rule."""
    return _holdable(text.replace("/", "_"))


def _holdable(part: str) -> str:
    return "".join("_" if unicodedata.category(c) in ("Cc", "Cs") else c for c in part)


def _fitted(part: str, suffix: str, limit: int = MAX_NAME_BYTES) -> str:
    """``part`` + ``suffix``, the part's stem cut (on a character) until it fits in ``limit`` bytes."""
    if len((part + suffix).encode()) <= limit:
        return part + suffix
    stem, extension = os.path.splitext(part)
    if len(extension.encode()) > _KEPT_EXTENSION_BYTES:
        stem, extension = part, ""
    room = limit - len((extension + suffix).encode())
    cut = stem.encode()[: max(room, 1)].decode(errors="ignore")
    return cut + extension + suffix


class OutputNames:
    """
    The names of a job's outputs in one download, allocated one by one by :func:`output_name` (from the
    document, else the file id; the node id added when one file has several outputs; ``-2``, ``-3`` on a
    clash; shortened by :func:`within`): docs/decisions/files.md.
    """

    def __init__(self, outputs: list[tuple[str, str]], room: storage.Room | None = None) -> None:
        self._room = room or storage.Room(sys.maxsize, "")
        self._per_file: dict[str, int] = {}
        for file_id, _ in outputs:
            self._per_file[file_id] = self._per_file.get(file_id, 0) + 1
        self._files: set[str] = set()
        self._folders: set[str] = set()

    def allocate(self, file_id: str, node_id: str, document: str | None = None) -> str:
        node = f".{name_part(node_id)}" if self._per_file.get(file_id, 1) > 1 else ""
        base = next((b for b in (document, file_id) if b and output_name(b)), "output")
        for full in self._candidates(base, node):
            name = within(full, self._room.bytes)
            if self._free(name):
                self._take(name)
                if name != full:
                    log.warning(
                        "Output %s (node %s): its name is %s bytes, too long (%s): shortened to %r "
                        "(its top folders and file name kept, with a hash of the full name)",
                        file_id,
                        node_id,
                        f"{len(full.encode()):,}",
                        self._room.limit,
                        name,
                    )
                return name
        raise AssertionError("unreachable")  # pragma: no cover: the candidates never end

    @staticmethod
    def _candidates(base: str, node: str) -> Iterator[str]:
        """
        Yield the names to try in turn: the rule's, then with ``-2``, ``-3``, ... (on the first folder
        too, for a folder another output's file holds).
        """
        plain = output_name(base, f"{node}.json") or ""
        yield plain
        first, slash, rest = plain.partition("/")
        for n in itertools.count(2):
            yield output_name(base, f"{node}-{n}.json") or ""
            if slash:
                yield f"{_fitted(first, f'-{n}')}/{rest}"

    def _free(self, name: str) -> bool:
        key, folders = _clash_key(name), _folders_of(name)
        return key not in self._files and key not in self._folders and not self._files & folders

    def _take(self, name: str) -> None:
        self._files.add(_clash_key(name))
        self._folders |= _folders_of(name)


HASH_DIGITS = 16
"""How many hex digits of its full name's hash a shortened name carries (64 bits)."""


def within(name: str, room: int) -> str:
    """
    ``name``, or when it is longer than ``room`` bytes: its top folders while they fit, then its file name
    with ``~`` and ``HASH_DIGITS`` hex digits of the whole name's SHA-256 before its last extension (the
    same on every try; two names, two short ones).
    """
    if len(name.encode()) <= room:
        return name
    *folders, file = name.split("/")
    stem, extension = os.path.splitext(file)
    tag = f"~{hashlib.sha256(name.encode()).hexdigest()[:HASH_DIGITS]}"
    file = _fitted(stem, tag + extension, min(room, MAX_NAME_BYTES))
    kept: list[str] = []
    used = len(file.encode())
    for folder in folders:
        used += len(folder.encode()) + 1
        if used > room:
            break
        kept.append(folder)
    return "/".join([*kept, file])


def _clash_key(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def _folders_of(name: str) -> set[str]:
    parts = _clash_key(name).split("/")[:-1]
    return {"/".join(parts[: i + 1]) for i in range(len(parts))}


def inside(directory: Path, name: str) -> Path:
    """``directory / name`` (``name`` may hold subfolders), refusing anything outside ``directory``."""
    root = directory.resolve()
    target = (root / name).resolve()
    if root not in target.parents:
        raise WorkflowServiceInputError(f"refusing to write {name!r} outside {str(root)!r}")
    return target


def download_outputs(
    hook: WorkflowServiceHook, folder: OutputFolder, wanted: Sequence[tuple[str, str, str, str | None]]
) -> Iterator[tuple[str, str | None]]:
    """
    Download each output ``(job id, file id, node id, marker)`` into ``folder`` (made first) under a
    hidden name, then give it its final name (:class:`OutputNames`, from the document it holds): never a
    partial file, locally or in a bucket. Yield, as it goes, where each went (a path, or a URI) and the
    document's name: its first element's ``metadata.filename`` without the run's ``marker``; None when
    the output names no document.
    """
    from airflow_provider_workflowsvc._marker import unmarked
    from airflow_provider_workflowsvc.hooks._files import document_name_in

    folder.create()
    names = OutputNames([(file_id, node_id) for _, file_id, node_id, _ in wanted], folder.room())
    for job_id, file_id, node_id, marker in wanted:
        staging = folder.staging()
        try:
            hook.download_job_output(job_id, file_id, node_id, path=staging)
            with staging.open("rb") as written:  # a local file or a staged object
                document = document_name_in(written.read(DOCUMENT_NAME_BYTES))
            document = None if document is None else unmarked(document, marker)
            target = folder.publish(staging, names.allocate(file_id, node_id, document))
        finally:
            folder.discard(staging)
        yield target, document


def download_job(hook: WorkflowServiceHook, job_id: str, folder: OutputFolder, log: Any) -> list[str]:
    """Download every output of a completed job into ``folder``; return where each went."""
    from airflow_provider_workflowsvc._marker import run_marker
    from airflow_provider_workflowsvc.exceptions import WorkflowServiceError
    from airflow_provider_workflowsvc.models import JobStatus

    job = hook.get_job(job_id)
    if job.status is not JobStatus.COMPLETED:
        raise WorkflowServiceError(
            f"job {job_id} is {job.raw_status or job.status}: outputs can be downloaded only from a "
            "completed job"
        )
    marker = run_marker(job.input_file_ids)
    wanted = [(job_id, o.file_id, o.node_id, marker) for o in job.output_node_files]
    if not wanted:
        log.warning("Job %s has no output files (is its destination local?)", job_id)
        return []
    paths = []
    for (_, file_id, node_id, _), (path, _) in zip(
        wanted, download_outputs(hook, folder, wanted), strict=True
    ):
        log.info("Downloaded output %s (node %s) to %s", file_id, node_id, path)
        paths.append(path)
    return paths
