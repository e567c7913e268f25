"""The async hooks of one process read each Airflow connection once per ``SETTINGS_TTL`` (issue #17)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import certifi
import pytest
from helpers import ManualClock

from airflow_provider_workflowsvc.exceptions import WorkflowServiceInputError
from airflow_provider_workflowsvc.hooks._pool import _ClientKey
from airflow_provider_workflowsvc.hooks._settings import (
    SETTINGS_RETRY,
    SETTINGS_TTL,
    SettingsCache,
)
from airflow_provider_workflowsvc.hooks.workflowsvc import ConnectionSettings, WorkflowServiceAsyncHook


class Backend:
    """Stands for the secrets backends: the connections by id, and how many times each was read."""

    def __init__(self, **tokens: str | Exception) -> None:
        self.tokens = tokens
        self.reads: list[str] = []

    async def connection(self, hook: WorkflowServiceAsyncHook) -> Any:
        from airflow.sdk import Connection

        conn_id = hook.workflowsvc_conn_id
        self.reads.append(conn_id)
        await asyncio.sleep(0)  # a real lookup awaits: concurrent hooks overlap here
        if isinstance(self.tokens[conn_id], Exception):
            raise self.tokens[conn_id]
        return Connection(
            conn_id=conn_id,
            conn_type="workflowsvc",
            host=f"https://{conn_id}.test/api/v1",
            password=self.tokens[conn_id],
        )


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Backend:
    backend = Backend(conn_a="token-a-abcdef", conn_b="token-b-abcdef")
    monkeypatch.setattr(WorkflowServiceAsyncHook, "_aget_connection", lambda hook: backend.connection(hook))
    return backend


async def settings_of(conn_id: str) -> ConnectionSettings:
    async with WorkflowServiceAsyncHook(conn_id) as hook:
        return (await hook._atransport()).settings


def token_of(settings: ConnectionSettings) -> str:
    assert settings.token is not None
    return settings.token.get_secret_value()


async def test_a_connection_is_read_once_for_many_hooks(
    backend: Backend, settings_clock: ManualClock
) -> None:
    for _ in range(5):
        assert token_of(await settings_of("conn_a")) == "token-a-abcdef"
    assert backend.reads == ["conn_a"]


async def test_two_connection_ids_never_share_settings(backend: Backend, settings_clock: ManualClock) -> None:
    a, b = await settings_of("conn_a"), await settings_of("conn_b")
    assert (token_of(a), token_of(b)) == ("token-a-abcdef", "token-b-abcdef")
    assert (a.base_url, b.base_url) == ("https://conn_a.test/api/v1", "https://conn_b.test/api/v1")
    assert token_of(await settings_of("conn_a")) == "token-a-abcdef"
    assert sorted(backend.reads) == ["conn_a", "conn_b"]


async def test_a_rotated_token_is_used_once_the_entry_expires(
    backend: Backend, settings_clock: ManualClock
) -> None:
    await settings_of("conn_a")
    backend.tokens["conn_a"] = "token-a-rotated"
    settings_clock.now += SETTINGS_TTL - 1
    assert token_of(await settings_of("conn_a")) == "token-a-abcdef"
    settings_clock.now += 1
    assert token_of(await settings_of("conn_a")) == "token-a-rotated"
    assert backend.reads == ["conn_a", "conn_a"]


async def test_a_changed_environment_connection_is_read_at_once(
    backend: Backend, settings_clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await settings_of("conn_a")
    monkeypatch.setenv("AIRFLOW_CONN_CONN_A", json.dumps({"conn_type": "workflowsvc", "host": "h"}))
    backend.tokens["conn_a"] = "token-a-rotated"
    assert token_of(await settings_of("conn_a")) == "token-a-rotated"
    assert backend.reads == ["conn_a", "conn_a"]


async def test_concurrent_hooks_share_one_read(backend: Backend, settings_clock: ManualClock) -> None:
    found = await asyncio.gather(*(settings_of("conn_a") for _ in range(50)))
    assert {token_of(s) for s in found} == {"token-a-abcdef"}
    assert backend.reads == ["conn_a"]


async def test_a_failed_read_is_tried_again_after_the_retry_time(
    backend: Backend, settings_clock: ManualClock
) -> None:
    backend.tokens["conn_a"] = "bad\ntoken"
    with pytest.raises(WorkflowServiceInputError, match="line feed"):
        await settings_of("conn_a")
    backend.tokens["conn_a"] = "token-a-fixed"
    settings_clock.now += SETTINGS_RETRY - 1
    with pytest.raises(WorkflowServiceInputError, match="line feed"):  # remembered, not read again
        await settings_of("conn_a")
    settings_clock.now += 1
    assert token_of(await settings_of("conn_a")) == "token-a-fixed"
    assert backend.reads == ["conn_a", "conn_a"]


async def test_many_waits_keep_their_settings_with_one_read_per_retry_time(
    backend: Backend,
    settings_clock: ManualClock,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Scenario: the secrets backend fails while 20 waits, started half a second apart, come due one by
    one to read their connection again: one read fails, every hook keeps the settings it has (one
    warning each, no secret in it), and nothing reads the connection again for ``SETTINGS_RETRY``."""
    hooks = []
    for _ in range(20):
        hook = WorkflowServiceAsyncHook("conn_a")
        await hook._atransport()
        hooks.append(hook)
        settings_clock.now += 0.5
    backend.tokens["conn_a"] = TimeoutError(
        "the lease of token-a-abcdef at https://vault.test/v1/renew?token=vault-tok-123456 timed out"
    )
    settings_clock.now += SETTINGS_TTL - 10.0  # the first hook is due now, the others in turn
    for _ in range(int(SETTINGS_RETRY / 0.5) - 1):  # polls every 0.5 s, just short of the retry time
        kept = await asyncio.gather(*(hook._atransport() for hook in hooks))
        assert {token_of(t.settings) for t in kept} == {"token-a-abcdef"}
        settings_clock.now += 0.5
    assert backend.reads == ["conn_a", "conn_a"]  # the first read, and one failed read for all
    said = (capfd.readouterr().out + caplog.text).splitlines()
    warnings = [line for line in said if "keeping the settings read before" in line]
    assert len(warnings) == 19, said  # one per hook due in that time: the same failure is not repeated
    assert not [line for line in said if "token-a-abcdef" in line or "vault-tok-123456" in line]
    assert "https://vault.test/v1/renew?***" in warnings[0]
    backend.tokens["conn_a"] = "token-a-rotated"
    settings_clock.now += SETTINGS_RETRY
    renewed = await asyncio.gather(*(hook._atransport() for hook in hooks))
    assert {token_of(t.settings) for t in renewed} == {"token-a-rotated"}
    assert backend.reads == ["conn_a"] * 3
    await asyncio.gather(*(hook.aclose() for hook in hooks))


async def test_a_cancelled_reader_does_not_fail_the_others() -> None:
    cache, release = SettingsCache(), asyncio.Event()
    settings = ConnectionSettings(base_url="https://svc.test/api/v1", token="token-one-abcdef")

    async def slow_read() -> ConnectionSettings:
        await release.wait()
        return settings

    first = asyncio.create_task(cache.get("conn_a", slow_read))
    second = asyncio.create_task(cache.get("conn_a", slow_read))
    await asyncio.sleep(0)
    first.cancel()
    release.set()
    assert await second is settings
    assert first.cancelled()
    assert await cache.get("conn_a", slow_read) is settings


async def test_settings_given_directly_skip_the_cache(backend: Backend, settings_clock: ManualClock) -> None:
    given = ConnectionSettings(base_url="https://given.test/api/v1", token="token-given-abcdef")
    async with WorkflowServiceAsyncHook("conn_a", settings=given) as hook:
        assert (await hook._atransport()).settings is given
    assert backend.reads == []


def test_the_client_key_follows_the_proxy_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = ConnectionSettings(base_url="https://svc.test/api/v1")
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "no_proxy", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    plain = _ClientKey.of(settings)
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    assert _ClientKey.of(settings) == plain
    for name in ("https_proxy", "ALL_PROXY", "no_proxy", "SSL_CERT_FILE"):
        # the key holds the TLS context the CA files make: SSL_CERT_FILE must name a readable bundle
        monkeypatch.setenv(name, certifi.where() if name == "SSL_CERT_FILE" else "http://proxy.test:3128")
        assert _ClientKey.of(settings) != plain, name
        monkeypatch.delenv(name)
