"""
``verify_webhook`` against the world: deliveries signed by the Standard Webhooks reference library
(``standardwebhooks``), and the emulator's real deliveries on loopback received by the receiver the
webhooks page shows (docs/provider/webhooks.rst), which hands the ended jobs to a stand-in of Airflow's
REST API. Every wait is for an arrival, never a sleep.
"""

from __future__ import annotations

import base64
import json
import re
import textwrap
import threading
import types
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as ReferenceRefusal

from airflow_provider_workflowsvc import WebhookVerificationError, WorkflowServiceHook, verify_webhook
from airflow_provider_workflowsvc.models import JobStatus

WHSEC = "whsec_" + base64.b64encode(b"k" * 32).decode()
OTHER = "whsec_" + base64.b64encode(b"o" * 32).decode()
SECRET = "a-channel-secret-of-thirty-bytes"  # 32 bytes: within the service's 24 to 75
BODY = json.dumps({"type": "job.completed", "job": {"job_id": "j-1", "workflow_id": "w-1"}}).encode()
PAGE = Path(__file__).resolve().parents[1] / "docs" / "provider" / "webhooks.rst"
ARRIVAL_TIMEOUT = 60.0  # stops a hang only: each wait ends when what it waits for arrives


def signed(
    body: bytes = BODY, *secrets: str | bytes, msg_id: str = "msg_1", at: datetime | None = None
) -> dict[str, str]:
    """Headers of a delivery signed by the reference library (one signature per secret, in order)."""
    moment = at or datetime.now(timezone.utc)
    signatures = [Webhook(s).sign(msg_id, moment, body.decode()) for s in (secrets or (WHSEC,))]
    stamp = str(int(moment.timestamp()))
    return {"webhook-id": msg_id, "webhook-timestamp": stamp, "webhook-signature": " ".join(signatures)}


# --------------------------------------------------------------------------------------------------
# Against the reference library


def test_a_delivery_the_reference_library_signs_is_verified() -> None:
    headers = {name.title(): value for name, value in signed().items()}  # Webhook-Id: any case
    assert verify_webhook(BODY, headers, WHSEC) == json.loads(BODY)
    raw = b"a raw key, given as bytes, 32 b."
    assert verify_webhook(BODY, signed(BODY, raw), raw) == json.loads(BODY)
    assert Webhook(WHSEC).verify(BODY, signed()) == verify_webhook(BODY, signed(), WHSEC)


def test_a_text_secret_is_its_utf8_bytes_as_the_emulator_signs_with_it() -> None:
    assert verify_webhook(BODY, signed(BODY, SECRET.encode()), SECRET)["type"] == "job.completed"


def test_key_rotation_any_v1_signature_may_match() -> None:
    both = signed(BODY, OTHER, WHSEC)
    assert verify_webhook(BODY, both, WHSEC) == verify_webhook(BODY, both, OTHER)
    later = {**both, "webhook-signature": "v2,bm90LWEtdjE= v1,%%% " + signed()["webhook-signature"]}
    assert verify_webhook(BODY, later, WHSEC) == json.loads(BODY)


NOW = datetime(2026, 11, 29, 6, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        (BODY, {k: v for k, v in signed(at=NOW).items() if k != "webhook-signature"}, "missing_header"),
        (BODY, {**signed(at=NOW), "webhook-id": " "}, "missing_header"),
        (BODY, {**signed(at=NOW), "webhook-timestamp": "1764396000.5"}, "malformed_header"),
        (BODY, {**signed(at=NOW), "webhook-timestamp": "soon"}, "malformed_header"),
        (BODY, signed(at=NOW - timedelta(minutes=5, seconds=1)), "timestamp"),
        (BODY, signed(at=NOW + timedelta(minutes=5, seconds=1)), "timestamp"),
        (BODY + b" ", signed(at=NOW), "signature"),
        (BODY, signed(BODY, OTHER, at=NOW), "signature"),
        (
            BODY,
            {**signed(at=NOW), "webhook-signature": "v2," + signed(at=NOW)["webhook-signature"][3:]},
            "signature",
        ),
        (BODY, {**signed(at=NOW), "webhook-id": "msg_2"}, "signature"),
        (b"not json", signed(b"not json", at=NOW), "body"),
        (b"[1]", signed(b"[1]", at=NOW), "body"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_what_is_refused_and_why(body: bytes, headers: dict[str, str], reason: str) -> None:
    with pytest.raises(WebhookVerificationError) as refused:
        verify_webhook(body, headers, WHSEC, now=NOW)
    assert refused.value.reason == reason
    assert isinstance(refused.value, ValueError)
    for secret_text in (WHSEC, WHSEC.removeprefix("whsec_"), headers.get("webhook-signature", "")[3:]):
        assert not secret_text or secret_text not in str(refused.value)


def test_the_reference_library_refuses_what_it_refuses_too() -> None:
    """Where both judge (a JSON object body, now's clock), they agree: accepted and refused alike."""
    now = datetime.now(timezone.utc)
    cases = [
        (BODY, signed(), True),
        (BODY, signed(BODY, OTHER, WHSEC), True),
        (BODY + b" ", signed(), False),
        (BODY, signed(at=now - timedelta(minutes=6)), False),
        (BODY, signed(at=now + timedelta(minutes=6)), False),
        (BODY, signed(BODY, OTHER), False),
        (BODY, {k: v for k, v in signed().items() if k != "webhook-id"}, False),
    ]
    for body, headers, accepted in cases:
        for verify, refusal in ((Webhook(WHSEC).verify, ReferenceRefusal), (_ours, WebhookVerificationError)):
            if accepted:
                assert verify(body, headers) == json.loads(body)
            else:
                with pytest.raises(refusal):
                    verify(body, headers)


def _ours(body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    return verify_webhook(body, headers, WHSEC)


def test_a_secret_that_is_not_a_key_is_refused_without_showing_it() -> None:
    with pytest.raises(WebhookVerificationError, match="the webhook secret is empty") as empty:
        verify_webhook(BODY, signed(), b"")
    with pytest.raises(WebhookVerificationError, match="not base64") as broken:
        verify_webhook(BODY, signed(), "whsec_!!!not-base64-at-all!!!")
    assert (empty.value.reason, broken.value.reason) == ("secret", "secret")
    assert "not-base64-at-all" not in str(broken.value)


# --------------------------------------------------------------------------------------------------
# The page's receiver, fed by the emulator's real deliveries on loopback


class Server:
    """An HTTP server on loopback: ``answer(path, headers, body)`` gives each POST's status and JSON."""

    def __init__(self, answer: Callable[[str, dict[str, str], bytes], tuple[int, Any]]) -> None:
        self.received: list[tuple[str, dict[str, str], bytes, int]] = []
        self._arrived = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = dict(self.headers)
                status, content = answer(self.path, headers, body)
                payload = b"" if content is None else json.dumps(content).encode()
                self.send_response(status)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                with server._arrived:
                    server.received.append((self.path, headers, body, status))
                    server._arrived.notify_all()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def wait_for(self, count: int) -> list[tuple[str, dict[str, str], bytes, int]]:
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, ARRIVAL_TIMEOUT):
                raise AssertionError(f"{count} requests expected, {len(self.received)} arrived")
            return list(self.received)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def page_receiver(monkeypatch: pytest.MonkeyPatch, airflow: Server) -> types.ModuleType:
    """The page's ``gateway/receiver.py``, run as written, its settings in the environment."""
    block = re.search(
        r"^\.\. code-block:: python\n    :caption: gateway/receiver\.py\n\n((?:    .*\n|\n)+)",
        PAGE.read_text(),
        re.M,
    )
    assert block is not None, "the webhooks page shows gateway/receiver.py"
    monkeypatch.setenv("WORKFLOWSVC_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("AIRFLOW_API", f"{airflow.url}/api/v2")
    monkeypatch.setenv("AIRFLOW_TOKEN", "airflow-token-1")
    monkeypatch.setenv("WORKFLOWSVC_ASSET_ID", "7")
    module = types.ModuleType("receiver")
    exec(compile(textwrap.dedent(block.group(1)), "gateway/receiver.py", "exec"), module.__dict__)
    return module


def test_the_pages_dag_for_a_queue_compiles() -> None:
    block = re.search(
        r"^\.\. code-block:: python\n    :caption: dags/on_job_event\.py\n\n((?:    .*\n|\n)+)",
        PAGE.read_text(),
        re.M,
    )
    assert block is not None
    code = textwrap.dedent(block.group(1))
    compile(code, "dags/on_job_event.py", "exec")
    assert "from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger" in code


@pytest.fixture
def servers(platform_service: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, Server]]:
    """A stand-in of Airflow's REST API and the page's receiver behind a gateway, both on loopback."""
    airflow = Server(lambda path, headers, body: (200, {"id": 1, "asset_id": 7}))
    receiver = page_receiver(monkeypatch, airflow)
    gateway = Server(lambda path, headers, body: (receiver.handle(body, headers), None))
    platform_service.configure(processing_delay=5)
    platform_service.webhooks(allow_http_loopback=True)  # the live service: HTTPS only
    yield airflow, gateway
    gateway.close()
    airflow.close()


def run_one_job(service: Any, hook: WorkflowServiceHook, workflow_id: str, document: Path) -> str:
    job = hook.run_workflow(workflow_id, files=[document])
    assert job is not None
    for _ in range(12):  # 30 emulator seconds at a time, the deliveries' timestamps stay near now
        if hook.get_job(job.id).status.is_terminal:
            break
        service.advance_clock(10)
    assert hook.get_job(job.id).status is JobStatus.COMPLETED
    return job.id


def test_the_emulators_deliveries_reach_airflow_through_the_pages_receiver(
    platform_service: Any, servers: tuple[Server, Server], tmp_path: Path
) -> None:
    airflow, gateway = servers
    document = tmp_path / "plan.txt"
    document.write_text("Project Plan\n\nWe build it.\n")
    with WorkflowServiceHook() as hook:
        workflow = hook.create_workflow("webhooks", "basic")
        channel = hook.create_workflow_channel(
            workflow.id, "webhook", event_types=["job.in_progress", "job.completed"],
            url=f"{gateway.url}/workflowsvc", secret=SECRET,
        )  # fmt: skip
        assert channel.event_types == ["job.in_progress", "job.completed"]

        first = run_one_job(platform_service, hook, workflow.id, document)
        delivered = gateway.wait_for(2)  # in progress, then completed: verified, answered 204
        assert [json.loads(body)["type"] for _, _, body, _ in delivered] == [
            "job.in_progress",
            "job.completed",
        ]
        assert {status for *_, status in delivered} == {204}
        forwarded = airflow.wait_for(1)
        path, headers, body, _ = forwarded[0]
        assert path == "/api/v2/assets/events"
        assert headers["Authorization"] == "Bearer airflow-token-1"
        assert json.loads(body) == {"asset_id": 7, "extra": {"job_id": first, "event": "job.completed"}}

        platform_service.webhooks(duplicate_rate=1)  # every delivery sent twice (the same webhook-id)
        second = run_one_job(platform_service, hook, workflow.id, document)
        assert len(gateway.wait_for(6)) == 6
        assert [json.loads(b)["extra"]["job_id"] for _, _, b, _ in airflow.received] == [first, second]

        platform_service.webhooks(duplicate_rate=0, bad_signature_rate=1)
        run_one_job(platform_service, hook, workflow.id, document)
        refused = gateway.wait_for(8)[6:]
        assert [status for *_, status in refused] == [401, 401]
        assert len(airflow.received) == 2  # a delivery not proven is not handed on
    assert SECRET not in json.dumps(platform_service.deliveries())
