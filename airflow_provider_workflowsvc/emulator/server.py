"""Serving the emulator with uvicorn: a bound socket, graceful signal handling, quiet logs."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

__all__ = ["EmulatorServer", "bind_socket", "root_url", "uvicorn_config"]

_DROP_MESSAGES = frozenset({"ASGI callable returned without completing response."})


class _DroppedConnectionFilter(logging.Filter):
    """Hide uvicorn's error line for connections the emulator drops on purpose (injected faults)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in _DROP_MESSAGES


def _quiet_dropped_connections() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DroppedConnectionFilter) for f in logger.filters):
        logger.addFilter(_DroppedConnectionFilter())


def bind_socket(host: str, port: int) -> socket.socket:
    """Return a listening-ready TCP socket on ``host:port`` (``port=0``: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def root_url(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def uvicorn_config(app: Any, *, log_level: str = "warning", access_log: bool = False) -> uvicorn.Config:
    """Return uvicorn settings for many concurrent pollers: long keep-alive, large backlog, short shutdown."""
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=access_log,
        timeout_keep_alive=150,  # longer than clients keep idle connections (120 s)
        timeout_graceful_shutdown=2,
        backlog=4096,
        server_header=False,
    )
    _quiet_dropped_connections()
    return config


class EmulatorServer(uvicorn.Server):
    """A uvicorn server that reports when it accepts connections and exits cleanly on SIGTERM/SIGINT."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_started is not None:
            self._on_started()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Stop gracefully on SIGTERM/SIGINT, without re-raising the signal afterwards."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
