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


class IsolatedAirflow:
    """
    Airflow settings of the kit's own (home, SQLite metadata database, DAG folder, logs), made active
    only for the length of a ``with airflow.active():`` block, then put back as they were.

    Airflow reads its settings when it is first imported: a test module may have imported it already
    (with the user's ``AIRFLOW_HOME`` or ``~/airflow``). Entering the block sets the kit's environment
    and points Airflow's database engine at the kit's database; leaving it restores the environment and
    the engine. The database is created on first use (once per pytest session).
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.default_dags_folder = home / "dags"
        self._created = False
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
        try:
            _point_airflow_at_environment()
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
            _point_airflow_at_environment()


def _point_airflow_at_environment() -> None:
    """Read the database URL and DAG folder again, and make a new engine for them (lazily connected)."""
    from airflow import settings

    settings.configure_vars()
    settings.reconfigure_orm()
