"""
Command line: ``python -m airflow_provider_workflowsvc.emulator`` / ``workflowsvc-emulator``.

Prints ``Workflow Service emulator listening on http://HOST:PORT/api/v1`` once it accepts connections,
and stops cleanly on SIGTERM or SIGINT. The token and API key can also come from the environment
(``WORKFLOWSVC_EMULATOR_TOKEN``, ``WORKFLOWSVC_EMULATOR_API_KEY``) so they stay out of process lists.

The command is installed with the provider, but serving needs the ``[emulator]`` extra (FastAPI, uvicorn,
...): without it, one line on stderr names the extra to install and the exit status is 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from airflow_provider_workflowsvc.emulator.config import (
    DEFAULT_CONNECTION_CHECK_DELAY,
    DEFAULT_PROCESSING_DELAY,
    DEFAULT_TOKEN,
    EmulatorConfig,
    FaultSpec,
    ServerSettings,
)
from airflow_provider_workflowsvc.emulator.dialect import DIALECTS
from airflow_provider_workflowsvc.emulator.errors import describe_errors, render_errors

__all__ = ["build_parser", "main"]

TOKEN_ENV = "WORKFLOWSVC_EMULATOR_TOKEN"
API_KEY_ENV = "WORKFLOWSVC_EMULATOR_API_KEY"
DIALECT_ENV = "WORKFLOWSVC_EMULATOR_DIALECT"
EXTRA_STATUS = 2
# Top-level modules of the ``[emulator]`` extra (pyproject.toml) and of what FastAPI brings with it.
EXTRA_MODULES = frozenset(
    {"fastapi", "starlette", "uvicorn", "multipart", "python_multipart", "croniter", "pypdf"}
)
INSTALL_EXTRA = "pip install 'airflow-provider-workflowsvc[emulator]'"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workflowsvc-emulator", description="Local emulator of the Workflow Service REST API."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port (default 8765)")
    parser.add_argument("--db", help="SQLite file that keeps state across restarts (default: in memory)")
    parser.add_argument("--token", help=f"Bearer token to accept (default ${TOKEN_ENV} or {DEFAULT_TOKEN!r})")
    parser.add_argument("--api-key", help=f"require this service-api-key (default ${API_KEY_ENV}; none)")
    parser.add_argument(
        "--dialect",
        choices=DIALECTS,
        default=os.environ.get(DIALECT_ENV) or "spec",
        help=f"spec: answer as the spec's examples; platform: as the live service (default ${DIALECT_ENV} "
        "or spec)",
    )
    parser.add_argument(
        "--processing-delay",
        type=float,
        default=DEFAULT_PROCESSING_DELAY,
        help="emulator seconds per file per workflow node (default %(default)s)",
    )
    parser.add_argument(
        "--connection-check-delay",
        type=float,
        default=DEFAULT_CONNECTION_CHECK_DELAY,
        help="emulator seconds before a connection check reports (default %(default)s)",
    )
    parser.add_argument(
        "--redirect-slashes",
        nargs="?",
        const="spec",
        default="off",
        choices=["off", "spec", "add", "strip"],
        help="redirect one slash form to the other (bare flag: the spec's forms)",
    )
    parser.add_argument("--redirect-status", type=int, default=307, choices=[301, 302, 307, 308])
    parser.add_argument(
        "--allow-remote-source-download",
        action="store_true",
        help="let jobs of remote-source, local-destination workflows be downloaded",
    )
    parser.add_argument(
        "--abandon-on-disconnect",
        action="store_true",
        help="drop a request held by injected latency when its client disconnects (default: process it)",
    )
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--access-log", action="store_true")
    faults = parser.add_argument_group("fault injection (one rule; change later with PUT /_emulator/faults)")
    faults.add_argument("--fault-latency", type=float, default=0.0, help="seconds to wait before answering")
    faults.add_argument("--fault-errors", default="", help="comma-separated: 404,429,500,502,503,504,drop")
    faults.add_argument("--fault-rate", type=float, default=1.0, help="fraction of matching requests (0..1)")
    faults.add_argument("--fault-count", type=int, help="affect at most this many requests")
    faults.add_argument("--fault-method", default="*")
    faults.add_argument("--fault-path", default="/api/v1/*", help="glob on the request path")
    faults.add_argument("--fault-path-regex")
    faults.add_argument("--fault-retry-after", type=float, default=1.0, help="Retry-After of injected 429s")
    faults.add_argument("--fault-seed", type=int)
    faults.add_argument(
        "--fault-phase",
        choices=["before", "after"],
        default="before",
        help="before: instead of processing (default); after: process, then replace the answer",
    )
    return parser


def _fault_spec(args: argparse.Namespace) -> FaultSpec | None:
    errors = [e.strip() for e in args.fault_errors.split(",") if e.strip()]
    if not errors and not args.fault_latency:
        return None
    rule = {
        "method": args.fault_method,
        "path": args.fault_path,
        "path_regex": args.fault_path_regex,
        "latency": args.fault_latency,
        "errors": errors,
        "rate": args.fault_rate,
        "count": args.fault_count,
        "retry_after": args.fault_retry_after,
        "phase": args.fault_phase,
    }
    return FaultSpec.model_validate({"rules": [rule], "seed": args.fault_seed})


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """Return the one line to print when ``exc`` is a module of the ``[emulator]`` extra, else None."""
    top_level = (exc.name or "").partition(".")[0]
    if top_level not in EXTRA_MODULES:
        return None
    return (
        f"workflowsvc-emulator: {top_level} is not installed; the emulator needs its extra: {INSTALL_EXTRA}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator until SIGTERM/SIGINT; return the exit status (2: the ``[emulator]`` extra missing)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from airflow_provider_workflowsvc.emulator.app import create_app
        from airflow_provider_workflowsvc.emulator.server import (
            EmulatorServer,
            bind_socket,
            root_url,
            uvicorn_config,
        )
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXTRA_STATUS
    if args.dialect not in DIALECTS:
        parser.error(f"${DIALECT_ENV} must be one of: {', '.join(DIALECTS)}")
    try:
        config = EmulatorConfig(
            processing_delay=args.processing_delay,
            connection_check_delay=args.connection_check_delay,
            redirect_slashes=args.redirect_slashes,
            redirect_status=args.redirect_status,
            allow_remote_source_download=args.allow_remote_source_download,
            abandon_on_disconnect=args.abandon_on_disconnect,
        )
        faults = _fault_spec(args)
    except ValidationError as exc:
        parser.error(describe_errors(render_errors(exc.errors())))
    settings = ServerSettings(
        token=args.token or os.environ.get(TOKEN_ENV) or DEFAULT_TOKEN,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        db=args.db,
        dialect=args.dialect,
    )
    sock = bind_socket(args.host, args.port)
    url = root_url(sock) + "/api/v1"

    def announce() -> None:
        print(f"Workflow Service emulator listening on {url}", flush=True)

    server = EmulatorServer(
        uvicorn_config(
            create_app(settings, config, faults), log_level=args.log_level, access_log=args.access_log
        ),
        on_started=announce,
    )
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # pragma: no cover - a second Ctrl-C while shutting down
        return 130
    finally:
        sock.close()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
