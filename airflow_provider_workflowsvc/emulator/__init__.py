"""
A local emulator of the whole Workflow Service API (FastAPI + uvicorn, state in SQLite).

Run it with ``workflowsvc-emulator --port 8765`` (or ``python -m airflow_provider_workflowsvc.emulator``);
in tests use :func:`airflow_provider_workflowsvc.emulator.testing.running_emulator`. The provider never
imports this package. Full guide: ``docs/emulator.md``.

API: every endpoint of the spec under ``/api/v1``. Requests need ``Authorization: Bearer <token>``
(default token ``emulator-token``) and, when the emulator was given an API key, a matching
``service-api-key`` header; otherwise the answer is 401. With ``--dialect platform`` the live service's
own ``unstructured-api-key`` header (the API key, or the token when no key is set) is accepted instead.

When bound to loopback, every request's ``Host`` must be a loopback name or address with the bound
port (421 otherwise, against DNS rebinding). ``--dialect platform`` answers as the live service does
(see ``dialect.py``) and also serves its templates (``GET /templates/``, ``GET /templates/{id}``) and
on-demand jobs (``POST /jobs/``) within the documented limits (``limits.py``), and job events: the
notifications feed (``events.py``), notification channels (``channels.py``) and signed webhook delivery
(``webhooks.py``).

Control endpoints under ``/_emulator`` need the same ``Authorization: Bearer <token>`` (no API key):

* ``GET /health`` - liveness, emulator time, whether state is persistent.
* ``POST /reset`` - drop every connector, workflow, job, check and notification channel; clear faults,
  the request log and webhook switches; restore the start-up config; clock offset back to 0.
* ``GET /config``, ``PUT /config`` - run-time settings (partial update): ``processing_delay``,
  ``connection_check_delay``, ``redirect_slashes`` (off/spec/add/strip), ``redirect_status``,
  ``allow_remote_source_download``, ``failing_files`` (name globs that fail), ``job_endings``
  (workflow name glob -> ``failed``/``stopped``), the on-demand limits (``on_demand_max_files``,
  ``on_demand_max_file_bytes``, ``on_demand_launch_interval``, ``on_demand_max_running``),
  ``quota_exhausted`` (402 to runs and launches), and the rest of ``EmulatorConfig``.
* ``GET /faults``, ``PUT /faults``, ``DELETE /faults`` - fault rules: ``{"rules": [rule, ...], "seed": n}``
  or one rule's fields at top level; a rule has ``method``, ``path`` (glob) or ``path_regex``,
  ``latency`` (seconds), ``errors`` (404, 429, 500, 502, 503, ``"drop"``), ``rate`` (0..1), ``count``,
  ``retry_after``, ``phase``, ``advance_clock`` (seconds). ``POST /faults/rules`` adds one rule.
* ``GET /jobs`` - every job, oldest first, with its status and the file names it received.
* ``GET /requests?method=&path_contains=``, ``DELETE /requests`` - the request log of ``/api/v1``:
  time, method, path, query, status, fault, duration_ms (never headers or bodies).
* ``GET /webhooks``, ``PUT /webhooks`` - webhook test switches (``allow_http_loopback``, ``delay``,
  ``duplicate_rate``, ``drop_rate``, ``bad_signature_rate``, ``reorder``, ``seed``);
  ``GET /webhooks/deliveries``, ``DELETE /webhooks/deliveries``; ``GET /channels/{id}/secret``.
* ``GET /clock``, ``POST /clock/advance`` ``{"seconds": s}`` - emulator time; advancing moves jobs
  forward and fires due schedules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.emulator.config import (
    DEFAULT_TOKEN,
    EmulatorConfig,
    FaultSpec,
    ServerSettings,
)

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.app import create_app

__all__ = ["DEFAULT_TOKEN", "EmulatorConfig", "FaultSpec", "ServerSettings", "create_app"]


def __getattr__(name: str) -> Any:
    # create_app needs FastAPI (the [emulator] extra): imported on first use, so that the command line
    # can start without it and say what to install.
    if name == "create_app":
        from airflow_provider_workflowsvc.emulator.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
