"""Local files: the inputs of a run (paths, directories, globs) and safe names for downloaded outputs."""

from __future__ import annotations

import ast
import glob
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError

_GLOB_CHARS = frozenset("*?[")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME_LENGTH = 150


def resolve_files(spec: Any) -> list[str]:
    """Expand ``files`` (a path, directory or glob, or a list of them) into a sorted, de-duplicated list.

    Directories contribute every non-hidden file below them, sorted; globs (``**`` recurses) their
    matching files, sorted. Anything that resolves to nothing, or a path that does not exist, is an
    error raised before any request is sent.
    """
    entries = _entries(spec)
    if not entries:
        raise WorkflowServiceInputError(
            "files rendered to nothing: give at least one file, directory or glob pattern, "
            "or files=None to run the workflow without files"
        )
    resolved: dict[Path, None] = {}
    for entry in entries:
        for path in _expand(entry):
            resolved.setdefault(Path(os.path.abspath(path)), None)
    return [str(p) for p in resolved]


def _entries(spec: Any) -> list[str]:
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec).strip()
        if text.startswith("[") and text.endswith("]"):  # a list rendered to text by a template
            try:
                return _entries(ast.literal_eval(text))
            except (ValueError, SyntaxError):
                pass
        return [text] if text else []
    if isinstance(spec, Iterable) and not isinstance(spec, (bytes, dict)):
        return [entry for item in spec for entry in _entries(item)]
    raise WorkflowServiceInputError(
        f"files must be a path, a glob pattern or a list of them, got {type(spec).__name__}"
    )


def _expand(entry: str) -> list[Path]:
    path = Path(entry).expanduser()
    if _GLOB_CHARS & set(entry):
        matches = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if os.path.isfile(p))
        if not matches:
            raise WorkflowServiceInputError(f"files: the pattern {entry!r} matches no files")
    elif path.is_dir():
        matches = sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p.relative_to(path)))
        if not matches:
            raise WorkflowServiceInputError(f"files: the directory {entry!r} contains no files")
    elif path.is_file():
        matches = [path]
    elif path.exists():
        raise WorkflowServiceInputError(f"files: {entry!r} is not a regular file or a directory")
    else:
        raise WorkflowServiceInputError(f"files: {entry!r} does not exist")
    for match in matches:
        if not os.access(match, os.R_OK):
            raise WorkflowServiceInputError(f"files: {str(match)!r} is not readable")
    return matches


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


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


def safe_name(raw: str, fallback: str = "output") -> str:
    """A file name made from a server-given id: last path component only, no leading dots, plain chars."""
    name = str(raw).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    name = _UNSAFE_CHARS.sub("_", name).lstrip("._")[:MAX_NAME_LENGTH].rstrip(".")
    return name or fallback


class OutputNames:
    """Unique, safe ``.json`` file names for a job's outputs, allocated one by one.

    A name comes from the original document name when known (``report.pdf`` → ``report.pdf.json``),
    else from the file id. When one file has outputs from several nodes the node id is added; remaining
    clashes (after sanitising, case-insensitive) get ``-2``, ``-3``, ...
    """

    def __init__(self, outputs: list[tuple[str, str]]) -> None:
        self._per_file: dict[str, int] = {}
        for file_id, _ in outputs:
            self._per_file[file_id] = self._per_file.get(file_id, 0) + 1
        self._taken: set[str] = set()

    def allocate(self, file_id: str, node_id: str, document: str | None = None) -> str:
        stem = safe_name(document or file_id).removesuffix(".json")
        if self._per_file.get(file_id, 1) > 1:
            stem = f"{stem}.{safe_name(node_id, 'node')[:36]}"
        name, n = f"{stem}.json", 1
        while name.lower() in self._taken:
            n += 1
            name = f"{stem}-{n}.json"
        self._taken.add(name.lower())
        return name


_FILENAME_FIELD = re.compile(rb'"filename"\s*:\s*("(?:[^"\\]|\\.)*")')


def document_name(path: Path, limit: int = 65536) -> str | None:
    """The original document name in a downloaded output (its first element's ``metadata.filename``)."""
    with path.open("rb") as fh:
        head = fh.read(limit)
    match = _FILENAME_FIELD.search(head)
    if match is None:
        return None
    try:
        name = json.loads(match.group(1))
    except ValueError:
        return None
    return name if isinstance(name, str) and name.strip() else None


def inside(directory: Path, name: str) -> Path:
    """``directory / name``, refusing anything that would land outside ``directory``."""
    root = directory.resolve()
    target = (root / name).resolve()
    if target.parent != root:
        raise WorkflowServiceInputError(f"refusing to write {name!r} outside {str(root)!r}")
    return target
