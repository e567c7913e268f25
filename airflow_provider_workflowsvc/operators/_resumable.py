"""``ResumableJobMixin`` from the Task SDK (Airflow 3.3+), or a stand-in on older Airflow.

The stand-in has no ``task_state_store`` to resume from: every try submits a new job, which is what an
operator without durable execution does. ``durable`` is accepted and ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

try:
    from airflow.sdk import ResumableJobMixin
except ImportError:  # Airflow < 3.3

    class ResumableJobMixin:  # type: ignore[no-redef]
        """Airflow < 3.3 stand-in: submit, wait, return the result; nothing survives a crash."""

        external_id_key: str = "remote_job_id"

        def __init__(self, *, durable: bool = True, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.durable = False

        def execute_resumable(self, context: Context) -> Any:
            external_id = self.submit_job(context)  # type: ignore[attr-defined]
            self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]
            return self.get_job_result(external_id, context)  # type: ignore[attr-defined]


HAS_DURABLE_EXECUTION = getattr(ResumableJobMixin, "__module__", "").startswith("airflow.")

__all__ = ["HAS_DURABLE_EXECUTION", "ResumableJobMixin"]
