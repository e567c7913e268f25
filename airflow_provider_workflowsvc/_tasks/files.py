"""
The inputs of a run (local paths, directories, globs, and the same in object storage) and the folder a
job's outputs are downloaded into (local, or object storage), with safe names for them.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import itertools
import logging
import os
import secrets
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc.exceptions import (
    NoFilesMatchedError,  # re-exported: raised here
    WorkflowServiceInputError,
)

_GLOB_CHARS = frozenset("*?[")
MAX_WALK_ENTRIES = 200_000
"""How many directory entries (or listed objects) one directory, prefix or pattern of ``files`` may
go through."""

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.hooks.workflowsvc import WorkflowServiceHook

Source = Any
"""Where an input is read from: a local file's absolute path (``str``), or a ``storage.StoredObject``."""


def resolve_named_files(
    spec: Any, *, empty_ok: bool = False, conn_id: str | None = None
) -> list[tuple[Source, str]]:
    """
    Expand ``files`` (a path, directory or glob, a location in object storage, or a list of them)
    into a de-duplicated list.

    A path that exists is always taken literally (even with ``*``, ``?`` or ``[`` in it). Directories
    contribute every non-hidden file below them, sorted; globs (``**`` recurses) their matching files,
    sorted. Walks never enter symlinked directories; symlinked files are uploaded (their target is
    logged). A file reached twice (two entries, or a link and its target) is sent once. Anything that
    resolves to nothing, a path that does not exist, or a file name that is not valid UTF-8 is an
    error raised before any request is sent. With ``empty_ok``, a directory or pattern matching
    nothing adds nothing, and :class:`NoFilesMatchedError` is raised only when no entry matched.

    Object storage (an ``ObjectStoragePath``, or a URI such as ``s3://bucket/prefix/``, reached with
    its own connection, ``s3://conn_id@bucket/...``, else ``conn_id``) follows the same rules: an
    object is a file, a prefix holding objects a directory (a URI ending in ``/`` is one even when it
    holds none), a key with ``*``, ``?`` or ``[`` a glob; hidden names (a part starting with ``.``)
    are left out of prefixes and patterns alike. ``file://`` locations are local paths.

    Returns ``(source, name)`` pairs: the source is a local file's absolute path, or a
    ``storage.StoredObject``; the name is the one the service sees (the multipart file name): the
    path relative to the directory, prefix or glob root, with ``/`` (``2024/a.txt``), or the base
    name of a file given by its path.
    """
    entries = _entries(spec)
    if not entries:
        raise WorkflowServiceInputError(
            "files rendered to nothing: give at least one file, directory or glob pattern, "
            "or files=None to run the workflow without files"
        )
    resolved: dict[str, tuple[Source, str]] = {}
    for entry in entries:
        try:
            found = _expand_entry(entry, conn_id)
        except NoFilesMatchedError:
            if not empty_ok:
                raise
            continue
        for identity, source, name in found:
            resolved.setdefault(identity, (source, name))
    if not resolved:
        shown = ", ".join(repr(_shown_entry(entry)) for entry in entries)
        raise NoFilesMatchedError(f"files: {shown} match no files")
    return list(resolved.values())


def resolve_task_files(
    spec: Any, *, skip_if_no_files: bool, nothing_to: str, conn_id: str | None = None
) -> list[tuple[Source, str]]:
    """
    Resolve a task's ``files`` (:func:`resolve_named_files`): bad input fails the task without retries;
    matching no file at all skips it when ``skip_if_no_files`` (``nothing_to``: what is then not done).
    """
    from airflow_provider_workflowsvc._compat import AirflowSkipException
    from airflow_provider_workflowsvc._tasks.base import invalid_input_fails

    with invalid_input_fails():
        try:
            return resolve_named_files(spec, empty_ok=skip_if_no_files, conn_id=conn_id)
        except NoFilesMatchedError as exc:
            if not skip_if_no_files:
                raise
            raise AirflowSkipException(f"{exc}: nothing to {nothing_to} (skip_if_no_files=True)") from None


def refuse_shared_names(named: Sequence[tuple[Source, str]]) -> None:
    """
    Refuse inputs of one job sent under the same name (``day1/`` and ``day2/`` both holding
    ``report.txt``), naming their sources: the service knows a job's files by name only, so what it
    says of that name (a failed file, an output) could be either. Raised before any upload.
    """
    sources: dict[str, list[str]] = {}
    for source, name in named:
        sources.setdefault(name, []).append(str(source))
    shared = {name: listed for name, listed in sources.items() if len(listed) > 1}
    if not shared:
        return
    listed = "; ".join(f"{name!r} from {' and '.join(found)}" for name, found in list(shared.items())[:5])
    more = f" and {len(shared) - 5} more name(s)" if len(shared) > 5 else ""
    raise WorkflowServiceInputError(
        f"files: several inputs would be sent under the same name: {listed}{more}. The service knows a "
        "job's files by name only, so what it reports of that name (a failed file, an output) could be "
        "any of them. Nothing was uploaded. Give the files different names, list them from a common "
        "folder (names are relative to it: day1/report.txt, day2/report.txt), or run them in tasks of "
        "their own"
    )


def _entries(spec: Any) -> list[Any]:
    if storage.is_location(spec) and not isinstance(spec, str):
        return [spec]  # an ObjectStoragePath
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec).strip()
        if text.startswith("[") and text.endswith("]") and not os.path.lexists(text):
            try:  # a list rendered to text by a template
                return _entries(ast.literal_eval(text))
            except (ValueError, SyntaxError):
                pass
        return [text] if text else []
    if isinstance(spec, Iterable) and not isinstance(spec, (bytes, dict)):
        return [entry for item in spec for entry in _entries(item)]
    raise WorkflowServiceInputError(
        "files must be a path, a glob pattern, a location in object storage (an ObjectStoragePath, "
        f"or a URI such as s3://bucket/prefix/) or a list of them, got {type(spec).__name__}"
    )


def _shown_entry(entry: Any) -> str:
    """Show an entry as messages do (a location without its connection id or credentials)."""
    return (
        entry
        if not storage.is_location(entry)
        else storage.without_userinfo(entry if isinstance(entry, str) else storage.shown(entry))
    )


def _expand_entry(entry: Any, conn_id: str | None) -> list[tuple[str, Source, str]]:
    """List the files of one entry: ``(what tells it apart, source, name)`` each."""
    if storage.is_location(entry):
        local = storage.local_path(entry)
        if local is None:
            return _expand_stored(entry, conn_id)
        entry = local
    return [(os.path.realpath(path), str(Path(os.path.abspath(path))), name) for path, name in _expand(entry)]


def _expand_stored(entry: Any, conn_id: str | None) -> list[tuple[str, Source, str]]:
    """
    List the objects of one location in object storage, each with its name relative to the prefix
    or the pattern's root (the rules of :func:`_expand`, on keys).
    """
    text = _shown_entry(entry)
    path = storage.location(entry, conn_id, "files")
    kind, size = storage.kind_of(path, text, "files")
    key = str(path.path)
    if kind == "file":
        found = [(str(path.name), storage.StoredObject(path, size))]
    elif kind == "directory" or (kind is None and text.endswith("/") and not _GLOB_CHARS & set(key)):
        listed = storage.objects_below(path, text, "files", None, MAX_WALK_ENTRIES)
        found = [(name, obj) for name, obj in listed if _matches_parts(name.split("/"), ("**", "*"))]
        if not found:
            raise NoFilesMatchedError(f"files: the folder {text!r} holds no objects")
    elif _GLOB_CHARS & set(key):
        root, pattern = _split_key_pattern(path, text)
        depth = None if "**" in pattern else len(pattern)
        listed = storage.objects_below(root, text, "files", depth, MAX_WALK_ENTRIES)
        found = [(name, obj) for name, obj in listed if _matches_parts(name.split("/"), pattern)]
        if not found:
            raise NoFilesMatchedError(f"files: the pattern {text!r} matches no objects")
    else:
        raise WorkflowServiceInputError(f"files: {text!r} does not exist")
    return [(obj.identity, obj, name) for name, obj in found]


def _split_key_pattern(path: Any, text: str) -> tuple[Any, tuple[str, ...]]:
    """Split a pattern of object keys into the prefix it starts from and the rest (bucket kept whole)."""
    parts = str(path.path).split("/")
    first = next(i for i, part in enumerate(parts) if _GLOB_CHARS & set(part))
    if first == 0:
        raise WorkflowServiceInputError(f"files: {text!r}: a pattern cannot match bucket names")
    root = path.parents[len(parts) - first - 1] if first < len(parts) - 1 else path.parent
    return root, tuple(parts[first:])


def _matches_parts(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    """
    Whether a relative key (its parts) matches a glob of parts, as the walk of local files matches:
    ``**`` stands for any number of non-hidden folders, ``*`` and ``?`` never match a hidden name.
    """
    if not pattern:
        return not parts
    first, rest = pattern[0], pattern[1:]
    if first == "**":
        if _matches_parts(parts, rest or ("*",)):
            return True
        return len(parts) > 1 and _matches_name(parts[0], "*") and _matches_parts(parts[1:], pattern)
    if not parts or not (parts[0] == first or _matches_name(parts[0], first)):
        return False
    return _matches_parts(parts[1:], rest)


def _expand(entry: str) -> list[tuple[Path, str]]:
    """List the files of one local entry, each with its name relative to the directory or glob root."""
    path = Path(entry).expanduser()
    root = path
    if path.is_dir():
        walk = _Walk(path)
        matches = sorted(walk.files(path, ("**", "*")))
        if not matches:
            raise NoFilesMatchedError(f"files: the directory {entry!r} contains no files")
    elif path.is_file():
        matches, root = [path], path.parent
    elif os.path.lexists(path) and not path.is_symlink():
        raise WorkflowServiceInputError(f"files: {entry!r} is not a regular file or a directory")
    elif _GLOB_CHARS & set(entry) and not os.path.lexists(path):
        root, pattern = _split_pattern(path)
        walk = _Walk(root)
        matches = sorted(walk.files(root, pattern)) if root.is_dir() else []
        if not matches:
            raise NoFilesMatchedError(f"files: the pattern {entry!r} matches no files")
    elif path.is_symlink():
        raise WorkflowServiceInputError(f"files: {entry!r} is a broken symbolic link")
    else:
        raise WorkflowServiceInputError(f"files: {entry!r} does not exist")
    from airflow_provider_workflowsvc.hooks._calls import check_upload_name

    for match in matches:
        check_upload_name(match)
        if not os.access(match, os.R_OK):
            raise WorkflowServiceInputError(f"files: {str(match)!r} is not readable")
    return [(match, match.relative_to(root).as_posix()) for match in matches]


def _split_pattern(path: Path) -> tuple[Path, tuple[str, ...]]:
    """Split a glob into the directory it starts from (leading parts without wildcards) and the rest."""
    parts = path.parts
    first = next(i for i, part in enumerate(parts) if _GLOB_CHARS & set(part))
    root = Path(*parts[:first]) if first else Path(".")
    return root, parts[first:]


class _Walk:
    """
    A bounded walk below ``root`` that never enters a symlinked directory.

    Symlinked files are followed; their targets are logged (as a warning when outside ``root``).
    """

    def __init__(self, root: Path) -> None:
        self._root = os.path.realpath(root)
        self._seen = 0

    def files(self, directory: Path, pattern: tuple[str, ...]) -> Iterator[Path]:
        """List the files below ``directory`` whose relative path matches ``pattern`` (``**``: any dirs)."""
        entries = self._entries(directory)
        if pattern[0] != "**":
            yield from self._matches(directory, entries, pattern)
            return
        yield from self._matches(directory, entries, pattern[1:] or ("*",))  # ``**`` as no directory
        for entry in entries:
            if _matches_name(entry.name, "*") and self._enters(entry):
                yield from self.files(Path(entry.path), pattern)

    def _matches(
        self, directory: Path, entries: list[os.DirEntry[str]], pattern: tuple[str, ...]
    ) -> Iterator[Path]:
        first, rest = pattern[0], pattern[1:]
        if first == "**":
            yield from self.files(directory, pattern)
            return
        for entry in entries:
            if not (entry.name == first or _matches_name(entry.name, first)):
                continue
            if not rest and entry.is_file():
                yield self._file(Path(entry.path), entry.is_symlink())
            elif rest and self._enters(entry):
                yield from self.files(Path(entry.path), rest)

    @staticmethod
    def _enters(entry: os.DirEntry[str]) -> bool:
        """Whether the walk goes into ``entry``: a directory, not a symbolic link to one."""
        if entry.is_dir(follow_symlinks=False):
            return True
        if entry.is_symlink() and entry.is_dir():
            log.info("files: not entering %s, a symbolic link to a directory", entry.path)
        return False

    def _entries(self, directory: Path) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            raise WorkflowServiceInputError(
                f"files: the directory {str(directory)!r} cannot be read: {exc.strerror or exc}"
            ) from None
        self._seen += len(entries)
        if self._seen > MAX_WALK_ENTRIES:
            raise WorkflowServiceInputError(
                f"files: looking for files below {self._root!r} went through more than "
                f"{MAX_WALK_ENTRIES} entries; give a narrower directory or pattern"
            )
        return entries

    def _file(self, path: Path, link: bool) -> Path:
        if link:
            target = os.path.realpath(path)
            outside = os.path.commonpath([self._root, target]) != self._root
            log.log(
                logging.WARNING if outside else logging.INFO,
                "files: %s is a symbolic link; uploading its target %s%s",
                path,
                target,
                f" (outside {self._root})" if outside else "",
            )
        return path


def _matches_name(name: str, pattern: str) -> bool:
    """Whether a file name matches one glob part (``*`` and ``?`` skip hidden names, as in glob)."""
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


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
    r"""
    Return the relative path an output of ``document`` is written to: THE rule for downloaded names.

    The document's own name (letters of any script, spaces and punctuation included), with ``suffix``
    after it, changed only where a file system cannot hold it:

    * ``/`` separates folders (``sub/Q3 report.md`` → ``sub/Q3 report.md.json``); empty, ``.`` and
      ``..`` parts are dropped, so an absolute path or one climbing out stays inside the directory;
    * a control character (NUL, tab, newline, ...: Unicode category Cc) or a character that cannot be
      written in UTF-8 (a lone surrogate) becomes ``_``;
    * a part longer than ``MAX_NAME_BYTES`` bytes in UTF-8 is cut at the end of its stem, keeping its
      extension and ``suffix``.

    Anything else is kept as the service wrote it: ``\``, ``:``, ``?`` and the like are valid on the
    POSIX file systems Airflow runs on. None when nothing is left (``..``, ``""``). A name its folder
    cannot hold as a whole is then shortened by :func:`within` (:class:`OutputNames`).
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
    The names of a job's outputs in one download, allocated one by one by :func:`output_name`.

    A name comes from the output's document (``report.pdf`` → ``report.pdf.json``, ``sub/Q3
    report.md`` → ``sub/Q3 report.md.json``), else from its file id. When one file has outputs from
    several nodes the node id is added (``report.pdf.<node id>.json``). Two outputs never share a
    name: a name already given in this download (compared as case-insensitive and Unicode-normalising
    file systems compare), or one that would be a file where another output needs a folder or the
    other way round, gets ``-2``, ``-3``, ... before ``.json``. A name longer than the folder's
    ``room`` is shortened by :func:`within` (and logged).
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
    ``name``, or when it is longer than ``room`` bytes (a path over PATH_MAX, an object key over its
    store's limit): its folders kept from the top while they fit, then its file name with ``~`` and
    ``HASH_DIGITS`` hex digits of the SHA-256 of the whole ``name`` before its last extension
    (``report.txt~<hash>.json``), the stem cut as :func:`output_name` cuts one. The same name gives
    the same short one on every try; two names, two short ones.
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
    """
    ``directory / name`` (``name`` may hold subfolders), refusing anything that would land outside
    ``directory``.
    """
    root = directory.resolve()
    target = (root / name).resolve()
    if root not in target.parents:
        raise WorkflowServiceInputError(f"refusing to write {name!r} outside {str(root)!r}")
    return target


def download_output(
    hook: WorkflowServiceHook,
    job_id: str,
    file_id: str,
    node_id: str,
    folder: OutputFolder,
    names: OutputNames,
    marker: str | None = None,
) -> tuple[str, str | None]:
    """
    Stream one output of a job into ``folder`` under a hidden name, then give it its final name
    (:class:`OutputNames`, from the document it holds): never a partial file, locally or in a bucket.
    Return where it is (a path, or a URI) and the document's name: its first element's
    ``metadata.filename``, as the service wrote it, without the run's ``marker`` (the one its job record
    shows); None when the output names no document.
    """
    from airflow_provider_workflowsvc._marker import unmarked
    from airflow_provider_workflowsvc.hooks._calls import document_name_in

    staging = folder.staging()
    try:
        hook.download_job_output(job_id, file_id, node_id, path=staging)
        with staging.open("rb") as written:  # a local file or a staged object
            document = document_name_in(written.read(DOCUMENT_NAME_BYTES))
        document = None if document is None else unmarked(document, marker)
        target = folder.publish(staging, names.allocate(file_id, node_id, document))
    finally:
        folder.discard(staging)
    return target, document
