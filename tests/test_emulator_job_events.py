"""Job events in the emulator (platform dialect), over HTTP: the notifications feed derived from the jobs'
timelines, its parameters and limits, read state per credential. Every wait is a step of the emulator
clock."""

from __future__ import annotations

import base64
import json
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from helpers import TEST_API_KEY, TEST_TOKEN
from standardwebhooks import Webhook, WebhookVerificationError

from airflow_provider_workflowsvc.emulator.testing import EmulatorHandle, running_emulator

STEP = 100.0  # processing delay: real time between two calls is negligible beside it
TEXT = b"Quarterly Report\n\nRevenue grew in every region.\n"


@pytest.fixture(scope="module")
def platform_server() -> Iterator[EmulatorHandle]:
    with running_emulator(token=TEST_TOKEN, api_key=TEST_API_KEY, dialect="platform") as emulator:
        yield emulator


@pytest.fixture
def emu(platform_server: EmulatorHandle) -> EmulatorHandle:
    platform_server.reset()
    platform_server.configure(processing_delay=STEP, on_demand_launch_interval=0)
    return platform_server


@pytest.fixture
def api(emu: EmulatorHandle) -> Iterator[httpx.Client]:
    with emu.api_client() as client:
        yield client


@pytest.fixture
def other_user(emu: EmulatorHandle) -> Iterator[httpx.Client]:
    """A second credential: the live service's ``unstructured-api-key`` header (the API key)."""
    with httpx.Client(base_url=emu.base_url, headers={"unstructured-api-key": TEST_API_KEY}) as client:
        yield client


def workflow(api: httpx.Client, name: str = "events") -> str:
    response = api.post("/workflows/", json={"name": name, "workflow_type": "basic"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def run(api: httpx.Client, workflow_id: str, *names: str) -> dict[str, Any]:
    files = [("input_files", (name, TEXT, "text/plain")) for name in names or ("a.txt",)]
    response = api.post(f"/workflows/{workflow_id}/run", files=files)
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


def feed(api: httpx.Client, **params: Any) -> dict[str, Any]:
    response = api.get("/notifications", params=params)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def kinds(api: httpx.Client, **params: Any) -> list[str]:
    return [e["event_type"] for e in feed(api, **params)["events"]]


def job_status(api: httpx.Client, job_id: str) -> str:
    return str(api.get(f"/jobs/{job_id}").json()["status"])


# --------------------------------------------------------------------------------------------------
# Platform only


def test_the_spec_dialect_has_no_job_events(emulator: EmulatorHandle) -> None:
    with emulator.api_client() as api:
        answers = (
            api.get("/notifications").status_code,
            api.get("/notifications/unread-count").status_code,
            api.post("/notifications/mark-read", json={"mark_all": True}).status_code,
            api.get(f"/notifications/{uuid.uuid4()}").status_code,
        )
    assert answers == ((404,) * 4 if emulator.dialect == "spec" else (200, 200, 200, 404))


# --------------------------------------------------------------------------------------------------
# Events follow the job's own record


def test_events_appear_when_the_job_record_changes(emu: EmulatorHandle, api: httpx.Client) -> None:
    workflow_id = workflow(api)
    job = run(api, workflow_id, "a.txt", "b.txt")
    created = datetime.fromisoformat(job["created_at"])
    seen = []
    while not seen or seen[-1] == "SCHEDULED" or seen[-1] == "IN_PROGRESS":
        events = feed(api)["events"]
        status = job_status(api, job["id"])
        newest = events[0]
        assert newest["payload"] == {"job_id": job["id"], "status": status}  # never ahead, never behind
        assert newest["workflow_id"] == workflow_id
        assert newest["is_read"] is False
        seen.append(status)
        emu.advance_clock(STEP)
    assert seen[0] == "SCHEDULED"
    assert seen[-1] == "COMPLETED"
    events = feed(api)["events"]
    assert [e["event_type"] for e in events] == ["job.completed", "job.in_progress", "job.scheduled"]
    moments = [datetime.fromisoformat(e["created_at"]) - created for e in reversed(events)]
    # basic: 3 nodes, 2 files: scheduled one slot, in progress 4 slots (the pipeline), then done
    assert moments == [timedelta(0), timedelta(seconds=STEP), timedelta(seconds=5 * STEP)]
    assert len({e["id"] for e in events}) == 3
    assert feed(api)["events"] == events  # stable ids and times: derived, never re-made


def test_a_job_with_failed_files_completes_and_one_without_success_fails(
    emu: EmulatorHandle, api: httpx.Client
) -> None:
    emu.configure(failing_files=["bad*"])
    workflow_id = workflow(api)
    partial = run(api, workflow_id, "a.txt", "bad.txt")["id"]
    failed = run(api, workflow_id, "bad1.txt", "bad2.txt")["id"]
    emu.advance_clock(10 * STEP)
    endings = feed(api, event_types="job.completed,job.failed")["events"]
    endings = {e["payload"]["job_id"]: e["event_type"] for e in endings}
    assert endings == {partial: "job.completed", failed: "job.failed"}
    assert job_status(api, failed) == "FAILED"


def test_a_cancelled_job_is_stopped_and_a_service_stop_too(emu: EmulatorHandle, api: httpx.Client) -> None:
    emu.configure(job_endings={"halted*": "stopped"})
    queued = run(api, workflow(api))["id"]
    assert api.post(f"/jobs/{queued}/cancel").status_code == 200
    halted = run(api, workflow(api, "halted"))["id"]
    emu.advance_clock(10 * STEP)
    by_job: dict[str, list[str]] = {}
    for event in reversed(feed(api)["events"]):
        by_job.setdefault(event["payload"]["job_id"], []).append(event["event_type"])
    assert by_job == {
        queued: ["job.scheduled", "job.stopped"],  # cancelled while scheduled: never in progress
        halted: ["job.scheduled", "job.in_progress", "job.stopped"],
    }


def test_on_demand_jobs_emit_account_level_events(emu: EmulatorHandle, api: httpx.Client) -> None:
    response = api.post(
        "/jobs/",
        data={"request_data": json.dumps({"template_id": "hi_res_partition"})},
        files=[("input_files", ("a.txt", TEXT, "text/plain"))],
    )
    assert response.status_code == 200, response.text
    job = response.json()
    emu.advance_clock(10 * STEP)
    events = feed(api)["events"]
    assert [e["event_type"] for e in events] == ["job.completed", "job.in_progress", "job.scheduled"]
    assert {e["workflow_id"] for e in events} == {None}
    assert {e["payload"]["job_id"] for e in events} == {job["id"]}
    assert feed(api, workflow_id=job["workflow_id"])["events"] == []


def test_the_feeds_fault_switches(emu: EmulatorHandle, api: httpx.Client) -> None:
    """Test switches (issue #45): each event twice, pages oldest first, an event type shown late."""
    run(api, workflow(api))
    emu.advance_clock(10 * STEP)
    events = feed(api)["events"]
    assert [e["event_type"] for e in events] == ["job.completed", "job.in_progress", "job.scheduled"]
    emu.configure(feed_faults=["duplicate"])
    assert feed(api)["events"] == [e for e in events for _ in (1, 2)]
    emu.configure(feed_faults=["reorder"])
    assert feed(api)["events"] == events[::-1]
    emu.configure(feed_faults=[], feed_lag={"job.completed": 20 * STEP})
    assert feed(api)["events"] == events[1:]  # the end is not shown yet ...
    emu.advance_clock(20 * STEP)
    assert feed(api)["events"] == events  # ... then under its own time


# --------------------------------------------------------------------------------------------------
# The feed's parameters


def test_filters_by_workflow_type_and_time(emu: EmulatorHandle, api: httpx.Client) -> None:
    first, second = workflow(api, "first"), workflow(api, "second")
    run(api, first)
    emu.advance_clock(10 * STEP)
    middle = emu.now()
    run(api, second)
    emu.advance_clock(10 * STEP)
    assert {e["workflow_id"] for e in feed(api, workflow_id=second)["events"]} == {second}
    assert kinds(api, workflow_id=first) == ["job.completed", "job.in_progress", "job.scheduled"]
    assert kinds(api, event_types="job.scheduled, job.completed") == ["job.completed", "job.scheduled"] * 2
    assert {e["workflow_id"] for e in feed(api, since=middle.isoformat())["events"]} == {second}


def test_pages_newest_first_with_an_opaque_cursor(emu: EmulatorHandle, api: httpx.Client) -> None:
    workflow_id = workflow(api)
    for _ in range(4):
        run(api, workflow_id)
        emu.advance_clock(STEP / 2)
    emu.advance_clock(10 * STEP)
    everything = feed(api, limit=100)["events"]
    assert len(everything) == 12
    moments = [e["created_at"] for e in everything]
    assert moments == sorted(moments, reverse=True)
    paged, cursor = [], None
    while True:
        page = feed(api, limit=5, **({"cursor": cursor} if cursor else {}))
        paged += page["events"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(page["events"]) == 5
    assert paged == everything
    assert len(feed(api)["events"]) == 12  # default limit 50


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"event_types": "job.completed,job.exploded"}, "event_types"),
        ({"since": "yesterday"}, "since"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"workflow_id": "not-a-uuid"}, "workflow_id"),
        ({"unread_only": "perhaps"}, "unread_only"),
    ],
)
def test_bad_parameters_are_422(api: httpx.Client, params: dict[str, Any], field: str) -> None:
    response = api.get("/notifications", params=params)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", field]


# --------------------------------------------------------------------------------------------------
# Read state: per credential


def test_read_state_is_per_credential(
    emu: EmulatorHandle, api: httpx.Client, other_user: httpx.Client
) -> None:
    run(api, workflow(api))
    emu.advance_clock(10 * STEP)
    events = feed(api)["events"]
    newest = events[0]["id"]
    marked = api.post("/notifications/mark-read", json={"notification_ids": [newest, str(uuid.uuid4())]})
    assert marked.json() == {"marked_count": 1}
    again = api.post("/notifications/mark-read", json={"notification_ids": [newest]})
    assert again.json() == {"marked_count": 0}
    assert api.get(f"/notifications/{newest}").json()["is_read"] is True
    assert other_user.get(f"/notifications/{newest}").json()["is_read"] is False
    assert api.get("/notifications/unread-count").json() == {"unread_count": 2}
    assert other_user.get("/notifications/unread-count").json() == {"unread_count": 3}
    assert [e["id"] for e in feed(api, unread_only="true")["events"]] == [e["id"] for e in events[1:]]
    assert other_user.post("/notifications/mark-read", json={"mark_all": True}).json() == {"marked_count": 3}
    assert other_user.get("/notifications/unread-count").json() == {"unread_count": 0}
    assert api.get("/notifications/unread-count").json() == {"unread_count": 2}


def test_mark_read_before_a_time_and_per_workflow(emu: EmulatorHandle, api: httpx.Client) -> None:
    first, second = workflow(api, "first"), workflow(api, "second")
    run(api, first)
    run(api, second)
    emu.advance_clock(10 * STEP)
    started = feed(api, workflow_id=first, event_types="job.in_progress")["events"][0]["created_at"]
    before = api.post("/notifications/mark-read", json={"before": started, "workflow_id": first})
    assert before.json() == {"marked_count": 1}  # strictly before: the first's scheduled only
    assert api.get("/notifications/unread-count", params={"workflow_id": first}).json() == {"unread_count": 2}
    future = (emu.now() + timedelta(days=1)).isoformat()
    assert api.post("/notifications/mark-read", json={"before": future}).json() == {"marked_count": 5}
    run(api, first)  # created after the mark: "before" never marks what did not exist yet
    assert api.get("/notifications/unread-count").json() == {"unread_count": 1}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"mark_all": True, "before": "2026-01-01T00:00:00Z"},
        {"notification_ids": [str(uuid.uuid4())] * 101},
        {"notification_ids": ["not-a-uuid"]},
        {"notification_ids": [str(uuid.uuid4())], "workflow_id": str(uuid.uuid4())},
        {"mark_all": True, "everything": True},
    ],
)
def test_bad_mark_read_requests_are_422(api: httpx.Client, body: dict[str, Any]) -> None:
    assert api.post("/notifications/mark-read", json=body).status_code == 422


def test_one_notification(emu: EmulatorHandle, api: httpx.Client) -> None:
    run(api, workflow(api))
    event = feed(api)["events"][0]
    assert api.get(f"/notifications/{event['id']}").json() == event
    assert api.get(f"/notifications/{uuid.uuid4()}").status_code == 404
    assert api.get("/notifications/not-a-uuid").status_code == 422


# --------------------------------------------------------------------------------------------------
# Channels

CHANNELS = "/notifications/channels"
SECRET = "a-user-secret-of-thirty-bytes!"  # 30 bytes: its UTF-8 bytes are the key


def webhook_body(url: str = "https://hooks.example.com/in", **fields: Any) -> dict[str, Any]:
    return {"channel_type": "webhook", "event_types": ["job.completed"], "url": url, **fields}


def test_channels_at_both_levels(emu: EmulatorHandle, api: httpx.Client) -> None:
    workflow_id = workflow(api)
    at_workflow = f"/workflows/{workflow_id}{CHANNELS}"
    created = api.post(CHANNELS, json=webhook_body(secret=SECRET, description="ops"))
    assert created.status_code == 201
    channel = created.json()
    assert SECRET not in created.text
    assert set(channel) == {
        "id", "channel_type", "event_types", "description", "enabled", "created_at", "updated_at", "url"
    }  # fmt: skip
    assert channel["enabled"] is True
    assert api.post(at_workflow, json=webhook_body()).status_code == 200
    assert [c["id"] for c in api.get(CHANNELS).json()["items"]] == [channel["id"]]
    assert len(api.get(at_workflow).json()["items"]) == 1
    assert api.get(f"{at_workflow}/{channel['id']}").status_code == 404  # another scope
    patched = api.patch(f"{CHANNELS}/{channel['id']}", json={"enabled": False, "event_types": ["job.failed"]})
    assert patched.json()["enabled"] is False
    assert patched.json()["event_types"] == ["job.failed"]
    assert patched.json()["description"] == "ops"
    assert api.get(f"{CHANNELS}/{channel['id']}").json() == patched.json()
    assert emu.channel_secret(channel["id"]) == SECRET
    api.patch(f"{CHANNELS}/{channel['id']}", json={"secret": ""})  # back to a generated secret
    assert emu.channel_secret(channel["id"]).startswith("whsec_")
    assert api.delete(f"{CHANNELS}/{channel['id']}").status_code == 204
    assert api.get(f"{CHANNELS}/{channel['id']}").status_code == 404
    assert api.get(f"/workflows/{uuid.uuid4()}{CHANNELS}").status_code == 404
    emu.reset()
    assert api.get(CHANNELS).json() == {"items": []}


def test_an_email_channel(api: httpx.Client) -> None:
    body = {
        "channel_type": "email",
        "event_types": ["job.failed"],
        "email_config": {"recipient_email": "o@x.io"},
    }
    channel = api.post(CHANNELS, json=body).json()
    assert channel["email_config"]["recipient_email"] == "o@x.io"
    assert channel["verified"] is False
    assert api.post(f"{CHANNELS}/{channel['id']}/verify").json()["verified"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (webhook_body(event_types=[]), "event_types"),
        (webhook_body(event_types=["job.exploded"]), "event_types"),
        (webhook_body(description="x" * 256), "description"),
        (webhook_body(url="http://hooks.example.com/in"), "url"),
        (webhook_body(url="http://127.0.0.1:9/in"), "url"),  # loopback HTTP only with the test switch
        (webhook_body(secret="s" * 23), "secret"),
        (webhook_body(secret="s" * 76), "secret"),
        (webhook_body(email_config={"recipient_email": "o@x.io"}), "email_config"),
        ({"channel_type": "email", "event_types": ["job.failed"]}, "email_config"),
        (
            {
                "channel_type": "email",
                "event_types": ["job.failed"],
                "email_config": {"recipient_email": "no"},
            },
            "email_config",
        ),
        ({"channel_type": "sms", "event_types": ["job.failed"]}, "channel_type"),
        ({"event_types": ["job.failed"], "url": "https://a.example"}, "channel_type"),
    ],
)
def test_channel_rules(api: httpx.Client, body: dict[str, Any], field: str) -> None:
    response = api.post(CHANNELS, json=body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:2] == ["body", field]
    assert "s" * 23 not in response.text


def test_the_spec_dialect_has_no_channels(emulator: EmulatorHandle) -> None:
    with emulator.api_client() as api:
        workflow_id = workflow(api)
        answers = (
            api.get(CHANNELS).status_code,
            api.post(CHANNELS, json=webhook_body()).status_code,
            api.get(f"/workflows/{workflow_id}{CHANNELS}").status_code,
        )
    assert answers == ((404,) * 3 if emulator.dialect == "spec" else (200, 201, 200))


# --------------------------------------------------------------------------------------------------
# Webhook deliveries: a real receiver on loopback; every wait is for a delivery (or its record)

RECEIVE_TIMEOUT = 60.0  # stops a hang only: each wait ends when the delivery arrives
SLOT = 10.0  # emulator seconds per slot: a job is done within 60 s, well inside the 5-minute tolerance


class Receiver:
    """An HTTP server on loopback keeping every POST (path, headers, body); each arrival wakes waits."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                self.send_response(204)
                self.end_headers()
                with receiver._arrived:
                    receiver.received.append((self.path, dict(self.headers), body))
                    receiver._arrived.notify_all()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def wait_for(self, count: int) -> list[tuple[str, dict[str, str], bytes]]:
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, RECEIVE_TIMEOUT):
                raise AssertionError(f"{count} deliveries expected, {len(self.received)} received")
            return list(self.received)


@pytest.fixture
def receiver(emu: EmulatorHandle) -> Iterator[Receiver]:
    emu.configure(processing_delay=SLOT)
    emu.webhooks(allow_http_loopback=True)
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def subscribe(api: httpx.Client, url: str, *types: str, base: str = CHANNELS, **fields: Any) -> str:
    body = webhook_body(url, event_types=list(types or ("job.completed",)), **fields)
    response = api.post(base, json=body)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def one_job(emu: EmulatorHandle, api: httpx.Client, workflow_id: str | None = None) -> str:
    job_id = run(api, workflow_id or workflow(api, f"events-{uuid.uuid4()}"))["id"]
    emu.advance_clock(6 * SLOT)
    return str(job_id)


def until(check: Callable[[], Any]) -> Any:
    """Ask again until ``check`` finds what it waits for (the deadline stops a hang only)."""
    deadline = threading.Event()
    timer = threading.Timer(RECEIVE_TIMEOUT, deadline.set)
    timer.start()
    try:
        while not (found := check()):
            assert not deadline.is_set(), "the emulator never recorded what the test waits for"
        return found
    finally:
        timer.cancel()


ALL_TYPES = ("job.scheduled", "job.in_progress", "job.completed", "job.stopped", "job.failed")


def test_deliveries_are_signed_the_standard_webhooks_way(
    emu: EmulatorHandle, api: httpx.Client, receiver: Receiver
) -> None:
    workflow_id = workflow(api)
    standard = "whsec_" + base64.b64encode(b"k" * 32).decode()
    subscribe(api, receiver.url("/raw"), *ALL_TYPES, secret=SECRET)
    subscribe(api, receiver.url("/whsec"), secret=standard)
    generated = subscribe(api, receiver.url("/generated"), base=f"/workflows/{workflow_id}{CHANNELS}")
    job_id = one_job(emu, api, workflow_id)
    received = receiver.wait_for(5)
    keys = {"/raw": Webhook(SECRET.encode()), "/whsec": Webhook(standard)}
    keys["/generated"] = Webhook(emu.channel_secret(generated))
    events = {e["id"]: e for e in feed(api)["events"]}
    by_path: dict[str, list[str]] = {}
    for path, headers, body in received:
        message = keys[path].verify(body, headers)
        assert headers["webhook-id"].startswith("msg_")
        event = events[message["event_id"]]
        assert message == {
            "type": event["event_type"],
            "event_id": event["id"],
            "timestamp": event["created_at"],
            "job": {"job_id": job_id, "workflow_id": workflow_id, "status": event["payload"]["status"]},
            "processing_time_ms": message["processing_time_ms"],
        }
        by_path.setdefault(path, []).append(message["type"])
    assert by_path == {
        "/raw": ["job.scheduled", "job.in_progress", "job.completed"],
        "/whsec": ["job.completed"],
        "/generated": ["job.completed"],
    }
    completed = [m for _, _, m in received if json.loads(m)["type"] == "job.completed"]
    assert {json.loads(m)["processing_time_ms"] for m in completed} == {round(4 * SLOT * 1000)}
    log = until(lambda: (found := emu.deliveries()) and len(found) == 5 and found)
    assert {(d["outcome"], d["status_code"]) for d in log} == {("sent", 204)}
    assert SECRET not in json.dumps(log)


def test_a_channel_created_later_or_disabled_gets_nothing_earlier(
    emu: EmulatorHandle, api: httpx.Client, receiver: Receiver
) -> None:
    workflow_id = workflow(api)
    early = subscribe(api, receiver.url("/early"))
    one_job(emu, api, workflow_id)
    receiver.wait_for(1)
    api.patch(f"{CHANNELS}/{early}", json={"enabled": False})
    subscribe(api, receiver.url("/late"))  # after the first job: none of its events
    job_id = one_job(emu, api, workflow_id)
    received = receiver.wait_for(2)  # a channel still enabled would have had it first (created first)
    assert [path for path, _, _ in received] == ["/early", "/late"]
    assert json.loads(received[1][2])["job"]["job_id"] == job_id


def test_duplicates(emu: EmulatorHandle, api: httpx.Client, receiver: Receiver) -> None:
    emu.webhooks(duplicate_rate=1)
    subscribe(api, receiver.url("/in"))
    one_job(emu, api)
    (_, first, body), (_, second, again) = receiver.wait_for(2)
    assert first["webhook-id"] == second["webhook-id"]
    assert body == again
    log = until(lambda: (found := emu.deliveries()) and len(found) == 2 and found)
    assert [d["faults"] for d in log] == [["duplicate"], ["duplicate"]]


def test_reordering(emu: EmulatorHandle, api: httpx.Client, receiver: Receiver) -> None:
    emu.webhooks(reorder=3)
    subscribe(api, receiver.url("/in"), *ALL_TYPES)
    one_job(emu, api)
    types = [json.loads(body)["type"] for _, _, body in receiver.wait_for(3)]
    assert types == ["job.completed", "job.in_progress", "job.scheduled"]


def test_drops(emu: EmulatorHandle, api: httpx.Client, receiver: Receiver) -> None:
    """With a seed, which deliveries drop is known: here the first two, not the third (sent in order)."""

    def drops(seed: int) -> list[bool]:
        rng = random.Random(seed)
        return [rng.random() < 0.5 for _ in range(3)]

    seed = next(s for s in range(1000) if drops(s) == [True, True, False])
    emu.webhooks(drop_rate=0.5, seed=seed)
    subscribe(api, receiver.url("/in"), *ALL_TYPES)
    one_job(emu, api)
    (_, _, body), *_ = receiver.wait_for(1)
    assert json.loads(body)["type"] == "job.completed"
    log = until(lambda: (found := emu.deliveries()) and len(found) == 3 and found)
    assert [d["outcome"] for d in log] == ["dropped", "dropped", "sent"]
    assert len(receiver.received) == 1


def test_a_bad_signature(emu: EmulatorHandle, api: httpx.Client, receiver: Receiver) -> None:
    emu.webhooks(bad_signature_rate=1)
    subscribe(api, receiver.url("/in"), secret=SECRET)
    one_job(emu, api)
    (_, headers, body), *_ = receiver.wait_for(1)
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET.encode()).verify(body, headers)


def test_a_delay_holds_deliveries_until_it_ends(
    emu: EmulatorHandle, api: httpx.Client, receiver: Receiver
) -> None:
    emu.webhooks(delay=60)
    subscribe(api, receiver.url("/in"))
    one_job(emu, api)
    until(lambda: emu.webhooks()["waiting"] == 1)
    assert receiver.received == []  # held: nothing is sent while the delay lasts
    emu.webhooks(delay=0)  # ends the wait
    assert len(receiver.wait_for(1)) == 1
    assert until(emu.deliveries)[0]["faults"] == ["delay"]


def test_plain_http_needs_the_test_switch(emu: EmulatorHandle, api: httpx.Client) -> None:
    assert emu.webhooks()["allow_http_loopback"] is False
    assert api.post(CHANNELS, json=webhook_body("http://127.0.0.1:9/in")).status_code == 422
    emu.webhooks(allow_http_loopback=True)
    assert api.post(CHANNELS, json=webhook_body("http://127.0.0.1:9/in")).status_code == 201
    assert api.post(CHANNELS, json=webhook_body("http://hooks.example.com/in")).status_code == 422
    emu.reset()
    assert emu.webhooks()["allow_http_loopback"] is False


def test_email_channels_send_only_once_verified(
    emu: EmulatorHandle, api: httpx.Client, receiver: Receiver
) -> None:
    body = {
        "channel_type": "email",
        "event_types": ["job.completed"],
        "email_config": {"recipient_email": "o@x.io"},
    }
    email = api.post(CHANNELS, json=body).json()["id"]
    subscribe(api, receiver.url("/in"))  # after the email channel: each event reaches it second
    one_job(emu, api)
    receiver.wait_for(1)
    api.post(f"{CHANNELS}/{email}/verify")
    job_id = one_job(emu, api)
    receiver.wait_for(2)
    emailed = [d for d in emu.deliveries() if d["channel_type"] == "email"]
    assert [(d["job_id"], d["recipient"], d["outcome"]) for d in emailed] == [(job_id, "o@x.io", "emailed")]


def test_a_restarted_emulator_does_not_send_the_past_again(tmp_path: Any) -> None:
    receiver, db = Receiver(), str(tmp_path / "state.db")
    try:
        with running_emulator(token=TEST_TOKEN, db=db, dialect="platform", processing_delay=SLOT) as emu:
            emu.webhooks(allow_http_loopback=True)
            with emu.api_client() as api:
                workflow_id = workflow(api)
                subscribe(api, receiver.url("/in"))
                one_job(emu, api, workflow_id)
                receiver.wait_for(1)
        restarted = running_emulator(token=TEST_TOKEN, db=db, dialect="platform", processing_delay=SLOT)
        with restarted as emu, emu.api_client() as api:
            job_id = one_job(emu, api, workflow_id)
            received = receiver.wait_for(2)  # the past, resent, would come first (it is older)
        assert json.loads(received[1][2])["job"]["job_id"] == job_id
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def test_a_queued_on_demand_job_starts_in_the_feed_when_admitted(
    emu: EmulatorHandle, api: httpx.Client
) -> None:
    emu.configure(on_demand_max_running=1)
    launched = []
    for _ in range(2):
        response = api.post(
            "/jobs/",
            data={"request_data": json.dumps({"template_id": "hi_res_partition"})},
            files=[("input_files", ("a.txt", TEXT, "text/plain"))],
        )
        launched.append(response.json()["id"])
    emu.advance_clock(3 * STEP)  # the first is done (2 slots after one scheduled); the second admitted then
    events = {(e["payload"]["job_id"], e["event_type"]): e for e in feed(api)["events"]}
    first_done = datetime.fromisoformat(events[launched[0], "job.completed"]["created_at"])
    second_started = datetime.fromisoformat(events[launched[1], "job.in_progress"]["created_at"])
    assert second_started - first_done == timedelta(seconds=STEP)  # its own scheduled slot, from admission
    assert (launched[1], "job.completed") not in events
    assert job_status(api, launched[1]) == "IN_PROGRESS"
