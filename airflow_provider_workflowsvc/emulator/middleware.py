"""
What happens to every ``/api/v1`` request before it reaches a route.

In order: the request is logged; injected faults (a clock move, latency, error status, dropped
connection) are applied (a fault in the ``after`` phase lets the request be processed first and
replaces its answer; a request held by latency before processing is read in full first and processed
after the wait even if the client has gone, unless ``abandon_on_disconnect`` is set);
in a redirect mode, the other slash form is redirected; the trailing slash is dropped so both
forms reach the same route; the Bearer token and (when configured) the ``service-api-key`` are checked
(in the platform dialect an ``unstructured-api-key`` header, the live service's scheme, is enough on its
own: it must hold the API key, or the token when no API key is configured); due schedules fire.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.emulator.config import API_PREFIX, EmulatorConfig

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.faults import FaultDecision
    from airflow_provider_workflowsvc.emulator.state import EmulatorState

__all__ = ["ApiMiddleware", "redirect_target"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LATENCY_CHECK_INTERVAL = 0.1
DROPPED_BODY = b'{"detail": "this response is cut short by the emula'
PLATFORM_KEY_HEADER = b"unstructured-api-key"
_SPEC_FORMS = {  # the spelling the spec gives each collection request
    ("GET", "/sources"): "/sources",
    ("POST", "/sources"): "/sources",
    ("GET", "/destinations"): "/destinations",
    ("POST", "/destinations"): "/destinations/",
    ("GET", "/workflows"): "/workflows/",
    ("POST", "/workflows"): "/workflows/",
    ("GET", "/jobs"): "/jobs",
}
_ERROR_DETAILS = {
    404: "Not found (injected by the emulator: a replica that does not have the record yet)",
    429: "Too many requests (injected by the emulator)",
    500: "Internal server error (injected by the emulator)",
    502: "Bad gateway (injected by the emulator)",
    503: "Service unavailable (injected by the emulator)",
    504: "Gateway timeout (injected by the emulator)",
}


def redirect_target(method: str, path: str, config: EmulatorConfig) -> str | None:
    """Where to redirect a request in the configured redirect mode, or None to serve it."""
    mode, rel = config.redirect_slashes, path[len(API_PREFIX) :]
    if mode == "off" or rel in ("", "/"):
        return None
    if mode == "spec":
        canonical = _SPEC_FORMS.get((method, rel.rstrip("/")))
        return API_PREFIX + canonical if canonical is not None and canonical != rel else None
    if mode == "add":
        return None if rel.endswith("/") else path + "/"
    return path.rstrip("/") if rel.endswith("/") else None


async def send_json(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    """Send a complete JSON response."""
    payload = json.dumps(body).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


UNREADABLE_TIME = "the 24th, at ten"
"""What an ``unreadable`` fault writes in a record's ``created_at``: no client can parse it."""


async def _send_unreadable(held: list[Message], send: Send) -> None:
    """
    Send the held answer's status with a body no client can read as its record: a JSON record with
    an unparsable ``created_at``, or (nothing held, or not a JSON object) a 200 that is not JSON.
    """
    start = next((m for m in held if m["type"] == "http.response.start"), None)
    body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")
    try:
        record = json.loads(body) if start is not None else None
    except ValueError:
        record = None
    if isinstance(record, dict):
        await send_json(send, start["status"] if start else 200, {**record, "created_at": UNREADABLE_TIME})
        return
    payload = b"<html><body>OK</body></html>"
    headers = [(b"content-type", b"text/html"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def buffered(receive: Receive) -> Receive:
    """
    Read the whole request body now; the returned ``receive`` serves it, then defers to ``receive``.

    A request held (injected latency) with its body read is processed after the wait whether or not
    the client is still connected, as a real server does not undo work when the client gives up.
    """
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return receive  # the client left before sending the whole body: nothing to keep
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def drain(receive: Receive) -> None:
    """Read and discard the request body."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return


class ApiMiddleware:
    """Pure ASGI middleware applied to ``/api/v1`` requests (other paths pass straight through)."""

    def __init__(self, app: ASGIApp, state: EmulatorState) -> None:
        self.app, self.state = app, state
        self._bearer = b"bearer " + state.settings.token.encode()
        self._api_key = state.settings.api_key.encode() if state.settings.api_key else None
        # The live service's own scheme: the API key (the token when none is configured) in one header.
        self._platform_key = self._api_key or state.settings.token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == API_PREFIX or path.startswith(API_PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        entry = {
            "time": self.state.service.clock.now().isoformat(),
            "method": scope["method"],
            "path": path,
            "query": scope.get("query_string", b"").decode("latin-1"),
            "status": None,
            "fault": None,
            "duration_ms": None,
        }
        self.state.log.add(entry)

        async def logged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
            await send(message)

        try:
            await self._handle(scope, receive, logged_send, entry)
        finally:
            entry["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, entry: dict[str, Any]) -> None:
        decision = self.state.faults.decide(scope["method"], scope["path"])
        if decision is not None:
            entry["fault"] = decision.label
            if decision.advance:  # time passes as the request arrives: its answer sees the later clock
                self.state.service.advance_clock(decision.advance)
            if decision.after:  # processed now; the answer is held, then sent or replaced
                held: list[Message] = []

                async def hold(message: Message) -> None:
                    held.append(message)

                await self._serve(scope, receive, hold)
                if decision.latency:
                    await self._wait(decision.latency)
                if decision.error == "unreadable":
                    await _send_unreadable(held, send)
                    return
                if decision.error is not None:
                    await self._answer_with_fault(decision, send, entry)
                    return
                for message in held:
                    await send(message)
                return
            if decision.latency:
                if not self.state.service.config.abandon_on_disconnect:
                    receive = await buffered(receive)
                await self._wait(decision.latency)
            if decision.error is not None:
                await drain(receive)
                await self._answer_with_fault(decision, send, entry)
                return
        await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Redirects, slash forms, authentication, due schedules, then the route."""
        path = scope["path"]
        target = redirect_target(scope["method"], path, self.state.service.config)
        if target is not None:
            query = scope.get("query_string", b"").decode("latin-1")
            await drain(receive)
            await send_json(
                send,
                self.state.service.config.redirect_status,
                {"detail": "redirecting to the other slash form"},
                {"location": target + (f"?{query}" if query else "")},
            )
            return
        if path.endswith("/") and path != API_PREFIX + "/":
            stripped = path.rstrip("/")
            scope = {**scope, "path": stripped, "raw_path": stripped.encode()}
        problem = self._auth_problem(scope)
        if problem is not None:
            await drain(receive)
            await send_json(send, 401, {"detail": problem}, {"www-authenticate": "Bearer"})
            return
        self.state.service.fire_due_schedules()
        await self.app(scope, receive, send)

    async def _answer_with_fault(self, decision: FaultDecision, send: Send, entry: dict[str, Any]) -> None:
        if decision.error == "unreadable":
            await _send_unreadable([], send)
            return
        if decision.error == "drop":
            await self._drop(send)
            entry["status"] = None  # no complete response was delivered
            return
        status = int(decision.error)  # type: ignore[arg-type]
        headers = {"retry-after": f"{decision.retry_after:g}"} if status == 429 else None
        await send_json(send, status, {"detail": _ERROR_DETAILS.get(status, "injected error")}, headers)

    async def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the fault rules change (reset, clear) meanwhile."""
        generation, deadline = self.state.faults.generation, time.monotonic() + seconds
        while generation == self.state.faults.generation:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining, LATENCY_CHECK_INTERVAL))

    @staticmethod
    async def _drop(send: Send) -> None:
        """Promise a body, send part of it and stop: the server then closes the connection."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(DROPPED_BODY) * 4).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": DROPPED_BODY, "more_body": True})

    def _accepted(self) -> tuple[bytes, bytes | None, bytes]:
        """
        Return the accepted bearer value, ``service-api-key`` and ``unstructured-api-key``: the start-up
        credentials, or the one credential a test rotated them all to (``api_token``), which revokes them.
        """
        rotated = self.state.service.config.api_token
        if rotated is None:
            return self._bearer, self._api_key, self._platform_key
        value = rotated.get_secret_value().encode()
        return b"bearer " + value, value if self._api_key is not None else None, value

    def _auth_problem(self, scope: Scope) -> str | None:
        headers = dict(scope.get("headers", ()))
        bearer, api_key, platform_key = self._accepted()
        if self.state.settings.dialect == "platform" and PLATFORM_KEY_HEADER in headers:
            if hmac.compare_digest(headers[PLATFORM_KEY_HEADER], platform_key):
                return None
            return "Not authenticated: invalid unstructured-api-key header"
        authorization = headers.get(b"authorization", b"")
        scheme_ok = authorization[:7].lower() == b"bearer "
        candidate = b"bearer " + authorization[7:] if scheme_ok else b""
        if not hmac.compare_digest(candidate, bearer):
            return "Not authenticated: missing or invalid bearer token"
        if api_key is not None and not hmac.compare_digest(headers.get(b"service-api-key", b""), api_key):
            return "Not authenticated: missing or invalid service-api-key header"
        return None
