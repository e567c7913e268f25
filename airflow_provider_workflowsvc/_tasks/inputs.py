"""The inputs of a run: local paths, directories, globs, and the same in object storage."""

from __future__ import annotations

import ast
import fnmatch
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_workflowsvc import storage
from airflow_provider_workflowsvc._tasks.base import invalid_input_fails
from airflow_provider_workflowsvc.exceptions import (
    NoFilesMatchedError,  # re-exported: raised here
    WorkflowServiceInputError,
)

_GLOB_CHARS = frozenset("*?[")
MAX_WALK_ENTRIES = 200_000
"""How many directory entries (or listed objects) one directory, prefix or pattern of ``files`` may
go through."""

log = logging.getLogger(__name__)

Source = Any
"""Where an input is read from: a local file's absolute path (``str``), or a ``storage.StoredObject``."""


def resolve_named_files(
    spec: Any, *, empty_ok: bool = False, conn_id: str | None = None
) -> list[tuple[Source, str]]:
    """
    Expand ``files`` (a path, directory or glob, a location in object storage, or a list of them) into
    de-duplicated ``(source, name)`` pairs: a local file's absolute path or a ``storage.StoredObject``, and
    the name the service sees. What resolves to nothing is an error before any request; with ``empty_ok``, a
    directory or pattern matching nothing adds nothing (:class:`NoFilesMatchedError` only when nothing
    matched). The rules and their whys: docs/decisions/files.md.
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


@invalid_input_fails()
def resolve_task_files(task: Any, nothing_to: str, *, own_names: bool = False) -> list[tuple[Source, str]]:
    """
    Resolve a job operator's ``files`` (:func:`resolve_named_files`): bad input fails the task without
    retries (with ``own_names``, two files sent under one name too: :func:`refuse_shared_names`); matching
    no file at all skips it when ``skip_if_no_files`` (``nothing_to``: what is then not done).
    """
    from airflow_provider_workflowsvc._compat import AirflowSkipException

    try:
        named = resolve_named_files(
            task.files, empty_ok=task.skip_if_no_files, conn_id=task.files_conn_id or None
        )
    except NoFilesMatchedError as exc:
        if not task.skip_if_no_files:
            raise
        raise AirflowSkipException(f"{exc}: nothing to {nothing_to} (skip_if_no_files=True)") from None
    if own_names:
        refuse_shared_names(named)
    return named


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


def _matches_parts(parts: Sequence[str], pattern: Sequence[str], partial: bool = False) -> bool:
    """
    Whether a relative path (its parts: a key of object storage, a walk's file) matches a glob of parts:
    ``**`` stands for any number of non-hidden folders, ``*`` and ``?`` never match a hidden name. With
    ``partial``: whether files below the folder ``parts`` may match (the walk goes into it).
    """
    if not parts:
        return bool(pattern) if partial else not pattern
    if not pattern:
        return False
    first, rest = pattern[0], pattern[1:]
    if first == "**":
        if _matches_parts(parts, rest or ("*",), partial):
            return True
        deeper = len(parts) > 1 or partial
        return deeper and _matches_name(parts[0], "*") and _matches_parts(parts[1:], pattern, partial)
    if not (parts[0] == first or _matches_name(parts[0], first)):
        return False
    return _matches_parts(parts[1:], rest, partial)


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

    def files(self, directory: Path, pattern: tuple[str, ...], parts: tuple[str, ...] = ()) -> Iterator[Path]:
        """List the files below ``directory`` whose relative path matches ``pattern``."""
        for entry in self._entries(directory):
            here = (*parts, entry.name)
            if entry.is_file() and _matches_parts(here, pattern):
                yield self._file(Path(entry.path), entry.is_symlink())
            elif _matches_parts(here, pattern, partial=True) and self._enters(entry):
                yield from self.files(Path(entry.path), pattern, here)

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
