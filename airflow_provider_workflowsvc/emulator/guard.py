"""
Who may talk to the emulator at all: the control API needs the bearer token, and on loopback the
``Host`` header must name loopback.

A web page the user visits can make the browser POST to ``http://127.0.0.1:<port>/_emulator/reset``
(no pre-flight for a simple POST), or reach the emulator through a DNS name that rebinds to
127.0.0.1. The token shuts out the first; the ``Host`` check shuts out the second, since such a request
carries the attacker's host name.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow_provider_workflowsvc.emulator.config import CONTROL_PREFIX

__all__ = ["AccessGuard", "is_loopback", "loopback_host_problem"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
OPEN_CONTROL_PATHS = frozenset({f"{CONTROL_PREFIX}/docs", f"{CONTROL_PREFIX}/openapi.json"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is loopback."""
    host = host.strip("[]").lower().rstrip(".")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, int | None]:
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return host, int(port) if port.isdigit() else None


def loopback_host_problem(host_header: str | None, bound_port: int) -> str | None:
    """Why a request to a loopback-bound emulator is refused, or None when its ``Host`` is fine."""
    if not host_header:
        return "the Host header is missing"
    host, port = _split_host(host_header)
    if not is_loopback(host) or port != bound_port:
        return f"the Host header must name this loopback server (for example 127.0.0.1:{bound_port})"
    return None


async def _refuse(send: Send, receive: Receive, status: int, detail: str, headers: dict[str, str]) -> None:
    while (await receive()).get("more_body"):
        pass
    payload = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


class AccessGuard:
    """Outermost ASGI middleware: the loopback ``Host`` check, then the control API's bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._bearer = b"bearer " + token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))
        server = scope.get("server")
        if server and is_loopback(str(server[0])):
            host = headers.get(b"host")
            problem = loopback_host_problem(host.decode("latin-1") if host else None, int(server[1]))
            if problem is not None:
                await _refuse(send, receive, 421, problem, {})
                return
        path = scope.get("path", "")
        if path.startswith(CONTROL_PREFIX + "/") and path not in OPEN_CONTROL_PATHS:
            authorization = headers.get(b"authorization", b"")
            candidate = b"bearer " + authorization[7:] if authorization[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(candidate, self._bearer):
                detail = "Not authenticated: the control API needs the emulator's bearer token"
                await _refuse(send, receive, 401, detail, {"www-authenticate": "Bearer"})
                return
        await self.app(scope, receive, send)
