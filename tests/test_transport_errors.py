"""Transport errors over real sockets: each names method, URL and connection, says what to check, and
a failure that would happen again the same way is not retried (issue #15, item 1)."""

from __future__ import annotations

import contextlib
import datetime
import inspect
import json
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx

from airflow_provider_workflowsvc import RunWorkflowOperator
from airflow_provider_workflowsvc.exceptions import WorkflowServiceApiError, WorkflowServiceConnectionError
from airflow_provider_workflowsvc.hooks.workflowsvc import (
    ConnectionSettings,
    WorkflowServiceAsyncHook,
    WorkflowServiceHook,
)
from airflow_provider_workflowsvc.wait.poll import is_transient

CONN_ID = "workflowsvc_default"
RETRIES = 2
BASE_URL = "https://wfsvc.example.test/api/v1"


class _Counting(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.accepted = 0
        self.tls = tls
        super().__init__(("127.0.0.1", 0), _PlainAnswer)

    def get_request(self) -> Any:
        sock, address = super().get_request()
        self.accepted += 1
        if self.tls is not None:
            # The client refuses our certificate: the handshake fails, as the test wants.
            with contextlib.suppress(ssl.SSLError, OSError):
                sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, address


class _PlainAnswer(socketserver.BaseRequestHandler):
    """Answers anything with a plain-HTTP 400 (what an http-only service says to a TLS hello)."""

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            self.request.recv(4096)
            self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture
def plain_server() -> Iterator[_Counting]:
    server = _Counting()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _self_signed(tmp_path: Path) -> ssl.SSLContext:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return context


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[_Counting]:
    server = _Counting(tls=_self_signed(tmp_path))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _connect(monkeypatch: pytest.MonkeyPatch, host: str, **extra: Any) -> None:
    """The default connection as a user writes it: a host without scheme, a port, and extras."""
    name, _, port = host.partition(":")
    conn = {
        "conn_type": "workflowsvc",
        "host": name,
        "port": int(port) if port else None,
        "password": "s3cret-token-value",
        "extra": {"max_retries": RETRIES, "retry_wait": 0, "connect_timeout": 5, **extra},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WORKFLOWSVC_DEFAULT", json.dumps(conn))


async def _list_workflows(kind: str) -> tuple[WorkflowServiceConnectionError, list[float]]:
    """Call an idempotent endpoint; the error it raised and the retry waits it took."""
    waits: list[float] = []
    hook: Any = WorkflowServiceHook(CONN_ID) if kind == "sync" else WorkflowServiceAsyncHook(CONN_ID)
    if kind == "sync":
        hook._sleep = waits.append
    else:

        async def record(seconds: float) -> None:
            waits.append(seconds)

        hook._sleep = record
    with pytest.raises(WorkflowServiceConnectionError) as caught:
        result = hook.list_workflows()
        if inspect.isawaitable(result):
            await result
    if kind == "sync":
        hook.close()
    else:
        await hook.aclose()
    assert "s3cret-token-value" not in str(caught.value)
    return caught.value, waits


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_https_against_plain_http_names_the_url_and_is_not_retried(
    kind: str, plain_server: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = plain_server.server_address[1]
    _connect(monkeypatch, f"127.0.0.1:{port}")
    error, waits = await _list_workflows(kind)
    assert str(error).startswith(
        f"GET https://127.0.0.1:{port}/api/v1/workflows/ failed (connection 'workflowsvc_default'): "
        "ConnectError: [SSL: WRONG_VERSION_NUMBER]"
    ), error
    assert str(error).endswith(
        ". The server speaks plain HTTP? Use http:// in the connection's host, or the extra protocol=http"
    )
    assert (error.kind, error.permanent, error.url) == (
        "tls_version",
        True,
        f"https://127.0.0.1:{port}/api/v1/workflows/",
    )
    assert waits == [], "a TLS mismatch is not transient"
    assert plain_server.accepted == 1, "a TLS mismatch is not transient"
    assert not is_transient(error), "a wait does not poll on through a TLS mismatch"


async def test_untrusted_certificate_points_at_the_ca_bundle(
    kind: str, tls_server: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = tls_server.server_address[1]
    _connect(monkeypatch, f"127.0.0.1:{port}")
    error, waits = await _list_workflows(kind)
    assert str(error).startswith(
        f"GET https://127.0.0.1:{port}/api/v1/workflows/ failed (connection 'workflowsvc_default'): "
        "ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED]"
    ), error
    assert str(error).endswith(
        ". The server's TLS certificate was not accepted: check the CA bundle (extra ca_bundle) or "
        "the extra verify"
    )
    assert waits == []
    assert tls_server.accepted == 1
    assert error.kind == "certificate"
    assert not is_transient(error)


REFUSED_HINT = (
    "Is the service listening on 127.0.0.1:{port}? Check the port, the scheme (http/https) and any proxy"
)


async def test_refused_where_nothing_ever_answered_fails_at_once_naming_what_to_check(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong port: the first request of the process finds nothing listening, so it is not sent again."""
    port = _closed_port()
    _connect(monkeypatch, f"127.0.0.1:{port}", protocol="http")
    error, waits = await _list_workflows(kind)
    assert str(error).startswith(
        f"GET http://127.0.0.1:{port}/api/v1/workflows/ failed (connection 'workflowsvc_default'): "
        "ConnectError: "  # sync: "[Errno 111] Connection refused"; async: "All connection attempts failed"
    ), error
    assert str(error).endswith(
        f". {REFUSED_HINT.format(port=port)}. Nothing has answered there through this connection in this "
        "process, so the request is not sent again (`airflow workflowsvc connection check --conn-id "
        "workflowsvc_default` tries the connection)"
    )
    assert waits == [], "one attempt: nothing has ever answered at this address"
    assert (error.kind, error.unreached, error.permanent) == ("refused", True, False)
    assert is_transient(error), "a wait keeps its patience: it polls again"


async def test_refused_after_the_service_answered_is_retried(
    kind: str, plain_server: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service answered this process before: a refusal now is a service restarting, retried."""
    port = plain_server.server_address[1]
    _connect(monkeypatch, f"127.0.0.1:{port}", protocol="http")
    with pytest.raises(Exception, match="400"):  # an answer (the plain server's 400): it was reached
        WorkflowServiceHook(CONN_ID).list_workflows()
    plain_server.shutdown()
    plain_server.server_close()  # the port now refuses
    error, waits = await _list_workflows(kind)
    assert str(error).endswith(f". {REFUSED_HINT.format(port=port)}"), error
    assert len(waits) == RETRIES, "a refused connection may be a restarting service: retried"
    assert (error.kind, error.unreached, error.permanent) == ("refused", False, False)
    assert is_transient(error)


def test_a_run_whose_first_request_finds_nothing_listening_fails_after_one_attempt(
    monkeypatch: pytest.MonkeyPatch, recorded_metrics: Any
) -> None:
    """Neither the request's retries nor the run's sending again: one attempt, then the task fails."""
    from reliability._helpers import FakeTI

    port = _closed_port()
    _connect(monkeypatch, f"127.0.0.1:{port}", protocol="http", max_retries=5)
    task = RunWorkflowOperator(
        task_id="run", workflow_id="3c6a9eb3-7e40-4cf3-9cf8-4d2fe6bc4ed6", deferrable=False
    )
    with pytest.raises(WorkflowServiceConnectionError) as caught:
        task.execute({"ti": FakeTI(), "task_state_store": None})
    assert caught.value.unreached, caught.value
    assert len(recorded_metrics.named("request.no_answer")) == 1
    assert recorded_metrics.named("request.retried") == []


async def test_unknown_host_name_is_not_retried(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _connect(monkeypatch, "workflows.example.invalid")
    error, waits = await _list_workflows(kind)
    assert str(error).startswith(
        "GET https://workflows.example.invalid/api/v1/workflows/ failed "
        "(connection 'workflowsvc_default'): ConnectError: "
    ), error
    assert str(error).endswith(
        ". Host name 'workflows.example.invalid' not found: check the connection's host (and any proxy)"
    )
    assert waits == []
    assert error.kind == "dns"
    assert not is_transient(error)


def test_connection_shows_the_same_message_after_one_attempt(
    plain_server: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = plain_server.server_address[1]
    _connect(monkeypatch, f"127.0.0.1:{port}")
    ok, message = WorkflowServiceHook(CONN_ID).test_connection()
    assert not ok
    assert message.startswith(
        f"Connection failed: GET https://127.0.0.1:{port}/api/v1/workflows/ failed "
        "(connection 'workflowsvc_default'): ConnectError: [SSL: WRONG_VERSION_NUMBER]"
    ), message
    assert message.endswith("Use http:// in the connection's host, or the extra protocol=http")
    assert plain_server.accepted == 1


def test_connection_refused_answers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    _connect(monkeypatch, f"127.0.0.1:{port}", protocol="http", retry_wait=30)
    hook = WorkflowServiceHook(CONN_ID)
    waits: list[float] = []
    hook._sleep = waits.append  # type: ignore[method-assign,assignment]
    ok, message = hook.test_connection()
    assert not ok
    assert waits == [], "no retry waits"
    assert message == (
        f"Connection failed: GET http://127.0.0.1:{port}/api/v1/workflows/ failed "
        f"(connection 'workflowsvc_default'): ConnectError: [Errno 111] Connection refused. "
        f"{REFUSED_HINT.format(port=port)}. Nothing has answered there through this connection in this "
        "process, so the request is not sent again (`airflow workflowsvc connection check --conn-id "
        "workflowsvc_default` tries the connection)"
    )


@pytest.mark.parametrize(
    ("status", "body", "sent"),
    [
        (503, {"detail": "the workflow is misconfigured", "retryable": False}, 1),
        (429, {"detail": "over the plan's limit", "retryable": False}, 1),
        (503, {"detail": "busy", "retryable": "false"}, 1 + RETRIES),  # only the JSON false says no
        (502, {"detail": "busy", "retryable": True}, 1 + RETRIES),
        (503, {"detail": "busy"}, 1 + RETRIES),
    ],
)
async def test_an_answer_that_says_retryable_false_is_not_retried(
    kind: str, status: int, body: dict[str, Any], sent: int
) -> None:
    settings = ConnectionSettings(base_url=BASE_URL, max_retries=RETRIES, retry_wait=0)
    hook: Any = (WorkflowServiceHook if kind == "sync" else WorkflowServiceAsyncHook)(settings=settings)
    with respx.mock(assert_all_called=True) as mock:
        route = mock.get(f"{BASE_URL}/workflows/").respond(status, json=body)
        with pytest.raises(WorkflowServiceApiError) as caught:
            result = hook.list_workflows()
            if inspect.isawaitable(result):
                await result
        await hook.aclose() if kind == "async" else hook.close()
    assert route.call_count == sent
    assert caught.value.status_code == status
    assert caught.value.retryable is (False if body.get("retryable") is False else None)
    assert body["detail"] in str(caught.value)
