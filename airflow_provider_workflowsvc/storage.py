"""Object storage: a run's files read from, a job's outputs written to, a bucket (ObjectStoragePath)."""

from __future__ import annotations

import contextlib
import re
import secrets
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, BinaryIO, NamedTuple
from urllib.parse import unquote, urlsplit

from airflow_provider_workflowsvc.exceptions import ObjectStorageError, WorkflowServiceInputError

# Module level is the standard library only: operators ask ``is_location`` while a DAG file is parsed.
# Airflow's ObjectStoragePath (fsspec underneath) and a store's library (s3fs, ...) are imported when a
# task reads or writes a location.

READ_BLOCK = 8 * 2**20
"""Bytes of an input object fetched at a time (one ranged read each): what a worker holds of it."""
WRITE_BLOCK = 8 * 2**20
"""Bytes of an output sent to the store at a time (one part of a multipart upload; S3 wants >= 5 MiB)."""
HEAD_BLOCK = 65536
"""Bytes fetched to read the start of a written output (its document's name)."""
STAGING_PREFIX = ".wfsvc-"
"""What opens the name of an output being written (a hidden name: no listing of ``files`` takes it)."""
BACKENDS: dict[str, str] = {
    **dict.fromkeys(("s3", "s3a", "s3n"), "apache-airflow-providers-amazon[s3fs] (it brings s3fs)"),
    **dict.fromkeys(("gs", "gcs"), "apache-airflow-providers-google (it brings gcsfs)"),
    **dict.fromkeys(("abfs", "abfss", "adl"), "apache-airflow-providers-microsoft-azure (it brings adlfs)"),
}
"""The package that gives Airflow the filesystem of a scheme (the providers declaring ``filesystems``)."""
LOCAL_PROTOCOLS = frozenset({"", "file", "local"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")  # two letters at least: ``C:\`` is a local path
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+://)[^/@]*@")


# --------------------------------------------------------------------------------------------------
# What a location is


def _is_path(value: Any) -> bool:
    """Whether ``value`` is an ObjectStoragePath (none exists before its module is loaded)."""
    kind = getattr(sys.modules.get("airflow.sdk.io.path"), "ObjectStoragePath", None)
    return kind is not None and isinstance(value, kind)


def is_location(value: Any) -> bool:
    """Whether ``value`` names a location of a filesystem (an ObjectStoragePath, ``scheme://...``)."""
    return _is_path(value) or (isinstance(value, str) and _SCHEME.match(value.strip()) is not None)


def local_path(value: Any) -> str | None:
    """
    Return the local path a ``file://`` location names (or an ObjectStoragePath of the local
    filesystem); None for any other value.
    """
    if _is_path(value):
        return str(value.path) if value.protocol in LOCAL_PROTOCOLS else None
    if not isinstance(value, str):
        return None
    match = _SCHEME.match(value.strip())
    if match is None or match[1].lower() not in LOCAL_PROTOCOLS:
        return None
    parts = urlsplit(value.strip())
    if parts.netloc not in ("", "localhost"):
        raise WorkflowServiceInputError(
            f"{without_userinfo(value)!r}: a file:// location names a path of this machine "
            "(file:///path), not of another host"
        )
    return unquote(parts.path)


def without_userinfo(text: Any) -> str:
    """``text`` with any ``user@`` (a connection id, or credentials) left out of its authority."""
    return _USERINFO.sub(r"\1", str(text).strip())


def shown(path: Any) -> str:
    """Show a location as messages do: ``scheme://bucket/key``, never a connection id or credentials."""
    return f"{path.protocol}://{path.path}"


def _with_connection(path: Any) -> str:
    conn_id = path.conn_id
    return f"connection {conn_id!r}" if conn_id else "no connection id: the store's default credentials"


def location(value: Any, conn_id: str | None, what: str) -> Any:
    """
    Return ``value`` (an ObjectStoragePath, or a URI) as an ObjectStoragePath whose filesystem is open.

    A URI reaches its store with its own connection when it names one (``s3://conn_id@bucket/key``,
    Airflow's form), else with ``conn_id`` (None: the store's default credentials); an ObjectStoragePath
    keeps its own. Raises :class:`WorkflowServiceInputError` naming the location (``what`` says which
    argument) for a scheme no installed provider serves (with the package that does), an undefined
    connection, or a store library that is missing.
    """
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.io import has_fs

    if isinstance(value, ObjectStoragePath):
        scheme, text = str(value.protocol), shown(value)
    else:
        text = without_userinfo(value)
        parts = urlsplit(str(value).strip())
        scheme = parts.scheme.lower()
        if parts.password is not None:
            raise WorkflowServiceInputError(
                f"{what} {text!r}: the URI holds a password; the part before '@' names an Airflow "
                "connection (s3://conn_id@bucket/key): keep credentials in the connection"
            )
    if not has_fs(scheme):
        package = BACKENDS.get(scheme)
        hint = (
            f"install {package} where tasks run"
            if package
            else "no installed Airflow provider declares a filesystem for it"
        )
        raise WorkflowServiceInputError(f"{what} {text!r}: Airflow has no filesystem for {scheme}://; {hint}")
    if isinstance(value, ObjectStoragePath):
        path = value
        _check_connection(path.conn_id, text, what)
    else:
        named = urlsplit(str(value).strip()).username
        # Checked before the path is built: building it opens the filesystem, and the Amazon provider
        # would open one with other credentials (anonymous, the environment's) for an unknown connection.
        _check_connection(named or conn_id, text, what)
        path = ObjectStoragePath(str(value).strip(), **({} if named else {"conn_id": conn_id or None}))
    try:
        path.fs  # noqa: B018  (opens the filesystem: its library and the connection's settings)
    except ImportError as exc:
        package = BACKENDS.get(scheme, "the provider of this filesystem")
        raise WorkflowServiceInputError(
            f"{what} {text!r}: the filesystem for {scheme}:// needs a library that is not installed "
            f"({exc}); install {package} where tasks run"
        ) from None
    except Exception as exc:
        raise ObjectStorageError(
            f"{what} {text!r}: the store could not be opened ({_with_connection(path)}): {_reason(exc)}"
        ) from exc
    return path


def _check_connection(conn_id: str | None, text: str, what: str) -> None:
    """Refuse a named connection that does not exist (the Amazon provider would use other credentials)."""
    if not conn_id:
        return
    from airflow_provider_workflowsvc._compat import AirflowNotFoundException, BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        message = f"{what} {text!r}: the connection {conn_id!r} is not defined"
        raise WorkflowServiceInputError(message) from None


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def store_failure(exc: BaseException, text: str, what: str, doing: str, path: Any) -> Exception:
    """
    Return the error for a store operation that failed: the location's own fault (missing, no
    permission) is an input error; anything else may pass on a retry (:class:`ObjectStorageError`).
    """
    if isinstance(exc, FileNotFoundError):
        bucket = getattr(path, "bucket", "")
        if bucket and not _bucket_exists(path):
            return WorkflowServiceInputError(
                f"{what} {text!r}: the bucket {bucket!r} does not exist ({_with_connection(path)})"
            )
        return WorkflowServiceInputError(f"{what} {text!r} does not exist ({_with_connection(path)})")
    if isinstance(exc, PermissionError):
        return WorkflowServiceInputError(
            f"{what} {text!r}: no permission to {doing} it ({_with_connection(path)}): {_reason(exc)}"
        )
    return ObjectStorageError(
        f"{what} {text!r}: could not {doing} it ({_with_connection(path)}): {_reason(exc)}"
    )


def _bucket_exists(path: Any) -> bool:
    try:
        return bool(path.fs.exists(path.bucket))
    except Exception:
        return True  # unknown: the message names the location, not a bucket it cannot vouch for


# --------------------------------------------------------------------------------------------------
# Inputs: listing, and reading while a run request is sent


class StoredObject:
    """
    One object to upload: its location (with its connection) and its size when it was listed.

    It reads as a local path does where an upload part needs it (``name``, ``stat().st_size``,
    ``open("rb")``): the part streams it in :data:`READ_BLOCK` reads, never to local disk.
    """

    def __init__(self, path: Any, size: int) -> None:
        self.path, self.size = path, size

    def __str__(self) -> str:
        return shown(self.path)

    def __repr__(self) -> str:
        return f"StoredObject({shown(self.path)!r}, {self.size})"

    @property
    def name(self) -> str:
        return str(self.path.name)

    @property
    def identity(self) -> str:
        """What tells two objects apart: the location and the connection it is reached with."""
        return f"{self.path.conn_id or ''}|{shown(self.path)}"

    def stat(self) -> Any:
        return SimpleNamespace(st_size=self.size)  # its size when it was listed

    def open(self, mode: str = "rb") -> BinaryIO:
        if mode != "rb":
            raise ValueError(f"an input object opens for reading only, not {mode!r}")
        return _ObjectReader(self)  # type: ignore[return-value]


class _ObjectReader:
    """An input object open for reading; every failure of the store is an ``OSError`` saying why."""

    def __init__(self, stored: StoredObject) -> None:
        self._stored = stored
        path = stored.path
        try:
            self._file = path.fs.open(path.path, "rb", block_size=READ_BLOCK)
        except OSError:
            raise
        except Exception as exc:
            raise OSError(_reason(exc)) from exc
        size = getattr(self._file, "size", None)
        if size is not None and size != stored.size:
            self._file.close()
            raise OSError(f"it changed since it was listed ({stored.size} bytes then, {size} now)")

    def read(self, size: int = -1) -> bytes:
        try:
            return bytes(self._file.read(size))
        except OSError:
            raise
        except Exception as exc:
            raise OSError(_reason(exc)) from exc

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._file.seek(offset, whence))

    def close(self) -> None:
        self._file.close()


def kind_of(path: Any, text: str, what: str) -> tuple[str | None, int]:
    """
    Return what ``path`` is: ``("file", size)`` for an object, ``("directory", 0)`` for a prefix that
    holds objects (or a folder of a store that has folders), ``(None, 0)`` when nothing is there.
    """
    _forget_listings(path)
    try:
        info = path.fs.info(path.path)
    except FileNotFoundError as exc:
        if path.bucket and not _bucket_exists(path):
            raise store_failure(exc, text, what, "list", path) from None
        return None, 0
    except Exception as exc:
        raise store_failure(exc, text, what, "read", path) from None
    if info.get("type") == "directory":
        return "directory", 0
    return "file", int(info.get("size") or 0)


def _forget_listings(path: Any) -> None:
    """Drop the listings the filesystem kept (s3fs keeps them per process): read the store as it is now."""
    with contextlib.suppress(Exception):
        path.fs.invalidate_cache()


def objects_below(
    path: Any, text: str, what: str, depth: int | None, limit: int
) -> list[tuple[str, StoredObject]]:
    """
    Return every object below the prefix ``path`` (down to ``depth`` folders, None: all), sorted, each
    with its key relative to the prefix (``2024/a.txt``); folder markers are left out. More than
    ``limit`` objects listed is an input error.
    """
    root = str(path.path).rstrip("/")
    _forget_listings(path)
    try:
        found = path.fs.find(root, maxdepth=depth, withdirs=False, detail=True)
    except Exception as exc:
        raise store_failure(exc, text, what, "list", path) from None
    if len(found) > limit:
        raise WorkflowServiceInputError(
            f"{what}: listing {text!r} gave more than {limit} objects; give a narrower prefix or pattern"
        )
    objects = []
    for name, info in sorted(found.items()):
        relative = str(name)[len(root) + 1 :] if str(name).startswith(root + "/") else ""
        if not relative or relative.endswith("/") or info.get("type") == "directory":
            continue
        objects.append(
            (relative, StoredObject(path.joinpath(*relative.split("/")), int(info.get("size") or 0)))
        )
    return objects


# --------------------------------------------------------------------------------------------------
# Outputs: each written under a hidden temporary key, then published under its name


class StagedObject:
    """An output being written under a temporary key of its folder; published only once complete."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.written: int | None = None
        """Bytes written, once the write completed."""

    def __str__(self) -> str:
        return shown(self.path)

    @contextlib.contextmanager
    def write_atomically(self) -> Iterator[Any]:
        """
        Write the object in :data:`WRITE_BLOCK` parts; a write that fails is abandoned (its multipart
        upload aborted: nothing is left under the key).
        """
        fs = self.path.fs
        try:
            handle = fs.open(self.path.path, "wb", block_size=WRITE_BLOCK)
        except Exception as exc:
            raise store_failure(exc, str(self), "output_dir", "write", self.path) from None
        counting = _Counting(handle)
        try:
            yield counting
        except BaseException:
            _abandon(handle)
            raise
        try:
            handle.close()
        except Exception as exc:
            raise store_failure(exc, str(self), "output_dir", "write", self.path) from None
        self.written = counting.count

    def open(self, mode: str = "rb") -> BinaryIO:
        """Open the written object to read its first bytes (a small read: :data:`HEAD_BLOCK`)."""
        return self.path.fs.open(self.path.path, mode, block_size=HEAD_BLOCK)


class _Counting:
    def __init__(self, handle: Any) -> None:
        self._handle, self.count = handle, 0

    def write(self, data: bytes) -> int:
        self._handle.write(data)
        self.count += len(data)
        return len(data)


def _abandon(handle: Any) -> None:
    """Throw away a write in progress (fsspec: ``discard`` aborts the multipart upload), never commit it."""
    try:
        discard = getattr(handle, "discard", None)
        if callable(discard):
            discard()
    finally:
        with contextlib.suppress(Exception):
            handle.closed = True  # an fsspec file closed by its finalizer would commit what it holds


class Room(NamedTuple):
    """How long an output's name may be in a folder (bytes of UTF-8), and the limit that says so."""

    bytes: int
    limit: str


MAX_KEY_BYTES = 1024
"""The longest object key S3 and Google Cloud Storage take, in bytes of UTF-8 (Azure: 1,024 characters)."""


class StoredFolder:
    """A folder (prefix) of object storage a job's outputs are written into (docs/decisions/files.md)."""

    def __init__(self, path: Any) -> None:
        self.path = path

    def __str__(self) -> str:
        return shown(self.path)

    def check(self) -> None:
        """Refuse a folder whose bucket does not exist, or that is an object (before any request)."""
        kind, _ = kind_of(self.path, str(self), "output_dir")
        if kind == "file":
            raise WorkflowServiceInputError(f"output_dir {str(self)!r} is an object, not a folder")

    def create(self) -> None:
        """Nothing to create: a prefix exists once an object is written below it."""

    def room(self) -> Room:
        """Return a key's limit (S3, GCS, Azure: 1,024 bytes) less the folder's prefix and a ``/``."""
        prefix = self.path.key.strip("/")
        room = MAX_KEY_BYTES - len(prefix.encode()) - 1
        return Room(room, f"a key holds {MAX_KEY_BYTES:,} bytes, {room:,} of them after {prefix + '/'!r}")

    def staging(self) -> StagedObject:
        return StagedObject(self.path / f"{STAGING_PREFIX}{secrets.token_hex(8)}.download")

    def publish(self, staged: StagedObject, name: str) -> str:
        """Give a completely written output its name (size checked before and after); return where it is."""
        target = self._inside(name)
        fs, text = self.path.fs, shown(target)
        expected = staged.written
        try:
            fs.invalidate_cache(staged.path.path)
            stored = int(fs.info(staged.path.path).get("size") or 0)
            if stored != expected:
                raise ObjectStorageError(
                    f"output_dir: {str(staged)!r} holds {stored} bytes, {expected} were written: "
                    f"not published as {text!r}"
                )
            fs.mv(staged.path.path, target.path)
            fs.invalidate_cache(target.path)
            published = int(fs.info(target.path).get("size") or 0)
        except ObjectStorageError:
            raise
        except Exception as exc:
            raise store_failure(exc, text, "output_dir", "write", target) from None
        if published != expected:
            raise ObjectStorageError(
                f"output_dir: {text!r} holds {published} bytes after its copy, {expected} were written"
            )
        return text

    def discard(self, staged: StagedObject) -> None:
        """Remove a temporary key that is left (an output that failed, or was published by copy)."""
        with contextlib.suppress(FileNotFoundError):
            if self.path.fs.exists(staged.path.path):
                self.path.fs.rm_file(staged.path.path)

    def _inside(self, name: str) -> Any:
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise WorkflowServiceInputError(f"refusing to write {name!r} outside {str(self)!r}")
        return self.path.joinpath(*parts)
