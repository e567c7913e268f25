"""An Airflow home and metadata database of the test session's own, switched to for each DAG run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["IsolatedAirflow"]

AIRFLOW_DB = "airflow.db"
"""The database file in the kit's home: Airflow's default name, so that an Airflow first imported while
the kit's home was set keeps pointing at it afterwards."""
_ORM = ("engine", "Session", "NonScopedSession", "async_engine", "AsyncSession")
"""What ``airflow.settings.configure_orm`` sets: the kit's made once, then swapped in and out."""


class IsolatedAirflow:
    """
    Airflow settings of the kit's own (home, SQLite metadata database, DAG folder, logs), made active
    only for the length of a ``with airflow.active():`` block, then put back as they were.

    Airflow reads its settings when it is first imported: a test module may have imported it already
    (with the user's ``AIRFLOW_HOME`` or ``~/airflow``). Entering the block sets the kit's environment
    and gives Airflow the kit's database engine; leaving it restores the environment and the engine it
    had. The database and its engine are made on first use (once per pytest session); the engine is
    kept, because a new one would compile every SQL statement of a run again (the cache is the engine's).
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.default_dags_folder = home / "dags"
        self._created = False
        self._orm: dict[str, Any] | None = None
        self.synced: dict[Path, tuple[int, int]] = {}
        """The DAG files written to the database in this session: (mtime_ns, size) when they were."""
        self.execution_api: Any = None
        """The in-process Execution API of the session's runs (Airflow < 3.3; see ``dag_runs``)."""

    def environment(self, dags_folder: Path | None = None) -> dict[str, str]:
        """Return the environment variables of the kit's Airflow (``dags_folder``: the DAG folder)."""
        return {
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / AIRFLOW_DB}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder or self.default_dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
        }

    @contextlib.contextmanager
    def active(
        self, dags_folder: Path | None = None, extra_environment: Mapping[str, str] | None = None
    ) -> Iterator[None]:
        """Make the kit's Airflow the one in use for the block (its database created on first use)."""
        self.default_dags_folder.mkdir(parents=True, exist_ok=True)
        environment = {**self.environment(dags_folder), **(extra_environment or {})}
        saved = {name: os.environ.get(name) for name in environment}
        os.environ.update(environment)
        outside = _swap_orm(self._orm)
        try:
            if self._orm is None:  # first use: the kit's engine
                from airflow import settings

                settings.configure_orm()
            if not self._created:
                from airflow.utils import db

                db.resetdb()
                self._created = True
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._orm = _swap_orm(outside)


def _swap_orm(orm: dict[str, Any] | None) -> dict[str, Any]:
    """
    Read the database URL and DAG folder of the environment again, and give Airflow the engine and
    sessions ``orm`` (None: none yet, ``configure_orm`` makes them); return those it had.

    The sessions and pooled connections of the engine given up are closed, as ``reconfigure_orm``
    closes them: no SQLite connection of either database outlives the swap, only the engine (and its
    compiled statements). A connection kept open across a run broke the session's own database later:
    a read of the database file drops the process's SQLite locks (POSIX closes them all), so another
    process then deletes the ``-wal`` and ``-shm`` files the kept connection still uses, and the next
    connection fails (``disk I/O error`` on ``PRAGMA journal_mode=WAL``).
    """
    from airflow import settings
    from sqlalchemy.orm import close_all_sessions

    had = {name: getattr(settings, name, None) for name in _ORM}
    if had["Session"] is not None:
        had["Session"].remove()
    close_all_sessions()
    for engine in (had["engine"], getattr(had["async_engine"], "sync_engine", None)):
        if engine is not None:
            engine.dispose()
    settings.configure_vars()
    for name, value in (orm or dict.fromkeys(_ORM)).items():
        setattr(settings, name, value)
    return had
