"""
SQLite state of the emulator: one JSON document per row, plus the columns used to select rows.

In memory by default; with a file path the state survives a restart (WAL journal). All access goes
through one connection guarded by a lock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

__all__ = ["Store", "Table"]

Table = Literal["connectors", "workflows", "jobs", "checks", "channels", "reads"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS connectors (id TEXT PRIMARY KEY, kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, workflow_id TEXT NOT NULL, created REAL NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_workflow ON jobs (workflow_id);
CREATE TABLE IF NOT EXISTS checks (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outputs (
    job_id TEXT NOT NULL, file_id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (job_id, file_id)
);
CREATE TABLE IF NOT EXISTS channels (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reads (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_INDEX_COLUMNS: dict[str, tuple[str, ...]] = {
    "connectors": ("kind",),
    "workflows": (),
    "jobs": ("workflow_id", "created"),
    "checks": (),
    "channels": (),
    "reads": (),
}
_TABLES = ("connectors", "workflows", "jobs", "checks", "channels", "reads", "outputs", "meta")
_ORDER: dict[str, str] = {"jobs": "created, id"}


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


class Store:
    """Rows of JSON documents keyed by id, in SQLite (``path=None``: in memory)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path or ":memory:", check_same_thread=False, isolation_level=None)
        if path:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes so they are stored together (nesting is not supported)."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def get(self, table: Table, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(f"SELECT data FROM {table} WHERE id = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, table: Table, key: str, data: dict[str, Any], **index: Any) -> None:
        columns = ("id", *_INDEX_COLUMNS[table], "data")
        values = (key, *(index[c] for c in _INDEX_COLUMNS[table]), _dumps(data))
        marks = ", ".join("?" for _ in columns)
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) VALUES ({marks})", values
            )

    def delete(self, table: Table, key: str) -> None:
        with self._lock:
            self._db.execute(f"DELETE FROM {table} WHERE id = ?", (key,))

    def all(self, table: Table, **where: Any) -> list[dict[str, Any]]:
        """Every row of ``table`` (in creation order for jobs), optionally where index columns match."""
        clauses = [f"{column} = ?" for column in where]
        sql = f"SELECT data FROM {table}"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        if table in _ORDER:
            sql += f" ORDER BY {_ORDER[table]}"
        with self._lock:
            rows = self._db.execute(sql, tuple(where.values())).fetchall()
        return [json.loads(row[0]) for row in rows]

    def keys(self, table: Table) -> list[str]:
        """Every row's id (in creation order for jobs), without reading the rows."""
        sql = f"SELECT id FROM {table}" + (f" ORDER BY {_ORDER[table]}" if table in _ORDER else "")
        with self._lock:
            return [row[0] for row in self._db.execute(sql).fetchall()]

    def put_outputs(self, job_id: str, outputs: Iterable[tuple[str, str]]) -> None:
        """Store each ``(file_id, json_text)`` output of a job."""
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO outputs (job_id, file_id, data) VALUES (?, ?, ?)",
                ((job_id, file_id, text) for file_id, text in outputs),
            )

    def output(self, job_id: str, file_id: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM outputs WHERE job_id = ? AND file_id = ?", (job_id, file_id)
            ).fetchone()
        return str(row[0]) if row else None

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def clear(self) -> None:
        """Drop every row of every table."""
        with self._lock:
            for table in _TABLES:
                self._db.execute(f"DELETE FROM {table}")
