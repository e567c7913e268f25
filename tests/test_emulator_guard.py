"""Who may talk to the emulator: the control API needs the bearer token; on loopback, only requests
whose ``Host`` names this loopback server are served (DNS rebinding)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from airflow_provider_workflowsvc.emulator import ServerSettings, create_app
from airflow_provider_workflowsvc.emulator.guard import is_loopback, loopback_host_problem

SOURCE = {"name": "kept", "type": "s3", "config": {"remote_url": "s3://bucket"}}


def _port(emulator: Any) -> int:
    return int(emulator.root_url.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/reset"),
        ("GET", "/health"),
        ("GET", "/config"),
        ("PUT", "/config"),
        ("PUT", "/faults"),
        ("DELETE", "/faults"),
        ("GET", "/requests"),
        ("POST", "/clock/advance"),
    ],
)
def test_control_routes_refuse_requests_without_the_token(emulator: Any, method: str, path: str) -> None:
    url = emulator.root_url + "/_emulator" + path
    for headers in (
        {},
        {"authorization": "Bearer not-the-token"},
        {"service-api-key": str(emulator.api_key)},
    ):
        response = httpx.request(method, url, headers=headers, json={})
        assert response.status_code == 401, (headers, response.text)
        assert "bearer token" in response.json()["detail"]


def test_a_cross_origin_reset_changes_nothing(emulator: Any) -> None:
    with emulator.api_client() as api:
        created = api.post("/sources", json=SOURCE).json()
        page_post = httpx.post(
            emulator.root_url + "/_emulator/reset",
            headers={"origin": "https://evil.example", "content-type": "text/plain"},
            content="x",
        )
        assert page_post.status_code == 401
        assert api.get(f"/sources/{created['id']}").status_code == 200
    assert emulator.health()["status"] == "ok"  # the handle sends the token


@pytest.mark.parametrize("prefix", ["/api/v1/sources", "/_emulator/health"])
@pytest.mark.parametrize(
    "host",
    [
        "evil.example:{port}",
        "evil.example",
        "127.0.0.1.nip.io:{port}",
        "127.0.0.1:{other}",
        "10.0.0.1:{port}",
    ],
)
def test_a_foreign_host_header_is_refused_on_loopback(emulator: Any, prefix: str, host: str) -> None:
    port = _port(emulator)
    headers = {
        "host": host.format(port=port, other=port + 1),
        "authorization": f"Bearer {emulator.token}",
        "service-api-key": str(emulator.api_key),
    }
    response = httpx.get(emulator.root_url + prefix, headers=headers)
    assert response.status_code == 421
    assert "Host header" in response.json()["detail"]


@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "127.0.0.2:{port}"]
)
def test_loopback_host_headers_are_served(emulator: Any, host: str) -> None:
    headers = {"host": host.format(port=_port(emulator)), **emulator.control_headers()}
    assert httpx.get(emulator.root_url + "/_emulator/health", headers=headers).status_code == 200


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:8765", True),
        ("[::1]:8765", True),
        ("localhost.:8765", True),
        ("localhost:8766", False),
        ("localhost", False),
        ("[::2]:8765", False),
        ("example.com:8765", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_host_rule(host: str | None, ok: bool) -> None:
    assert (loopback_host_problem(host, 8765) is None) is ok


def test_loopback_names_and_addresses() -> None:
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.8.9.10", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "example.com", "::", "localhost.evil"))


def test_off_loopback_any_host_is_served_but_control_still_needs_the_token() -> None:
    app = create_app(ServerSettings(token="tok-guard-1"))

    async def calls() -> tuple[int, int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://10.0.0.5:8765") as client:
            foreign = {"host": "service.example.com"}
            api = await client.get(
                "/api/v1/sources", headers={**foreign, "authorization": "Bearer tok-guard-1"}
            )
            anonymous = await client.get("/_emulator/health", headers=foreign)
            control = await client.get("/_emulator/health", headers={"authorization": "Bearer tok-guard-1"})
            return api.status_code, anonymous.status_code, control.status_code

    assert asyncio.run(calls()) == (200, 401, 200)
