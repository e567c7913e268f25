"""
Webhook delivery (platform dialect): each job event, as the emulator's clock makes it, POSTed to the
enabled channels subscribed to it, signed the Standard Webhooks way.

A task of the server's event loop looks for new events (``POLL_INTERVAL`` seconds of real time), so
delivery never blocks a request and sees the same service as the routes do. A message is
``{type, event_id, timestamp, job: {job_id, workflow_id, status}, processing_time_ms}`` with the headers
``webhook-id`` (fixed per event and channel: a duplicate carries the same id), ``webhook-timestamp``
(emulator time, epoch seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`` under the channel's key, see ``channels.signing_key``). Email channels send no
mail: a verified one records a delivery to its recipient. Each delivery is one attempt, recorded for
tests (never the secret). Test-only switches (``config.WebhookSettings``): plain HTTP to loopback, and
the faults live receivers must survive: duplicates, reordering, drops, bad signatures, a delay.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import random
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

import httpx

from airflow_provider_workflowsvc.emulator.channels import Channels, signing_key
from airflow_provider_workflowsvc.emulator.clock import to_datetime
from airflow_provider_workflowsvc.emulator.config import WebhookSettings
from airflow_provider_workflowsvc.emulator.dialect import job_status

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.events import Event, Notifications

__all__ = ["Deliveries"]

_log = logging.getLogger(__name__)
POLL_INTERVAL = 0.05
SEND_TIMEOUT = 5.0
MAX_RECORDED = 10_000
_NAMESPACE = uuid.UUID("9a1e6f3c-2b7d-4e8a-b5c4-d3e2f1a0b9c8")


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """Return a ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``."""
    content = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


class Deliveries:
    """Finds the events each channel has not been sent yet and sends them, with the configured faults."""

    def __init__(self, notifications: Notifications, channels: Channels) -> None:
        self.notifications, self.channels = notifications, channels
        self.settings = WebhookSettings()
        self.log: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDED)
        self._sent: set[tuple[str, str]] = set()
        self._held: list[tuple[dict[str, Any], Event]] = []
        self._rng = random.Random()
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self.waiting = 0
        """Deliveries held by the ``delay`` switch right now."""
        self._generation = 0
        """Incremented by a reset: a delivery begun before it is abandoned (never sent, nor recorded)."""

    def configure(self, settings: WebhookSettings) -> None:
        """Replace the switches; a delivery waiting for its delay ends its wait (under the new delay)."""
        self.settings, self._rng = settings, random.Random(settings.seed)
        if self._changed is not None:
            self._changed.set()

    def reset(self) -> None:
        self._generation += 1
        self.configure(WebhookSettings())
        self.log.clear()
        self._sent.clear()
        self._held.clear()

    def start(self) -> None:
        """
        Start delivering in the running event loop (the server's). A restarted emulator (state in a
        file) sends what happens from now on, not again what its channels were sent before.
        """
        self._due()
        self._held.clear()
        self._changed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=SEND_TIMEOUT, follow_redirects=False, trust_env=False) as client:
            while True:
                await asyncio.sleep(POLL_INTERVAL)
                try:
                    for channel, event in self._due():
                        await self._deliver(client, channel, event)
                except Exception:  # one bad look must not end delivery for the emulator's life
                    _log.exception("webhook delivery failed; it goes on at the next look")

    def _due(self) -> list[tuple[dict[str, Any], Event]]:
        """Return the (channel, event) pairs to send now, oldest event first (or held back to reorder)."""
        if any(row["enabled"] for row in self.channels.rows()):
            self.notifications.service.fire_due_schedules()  # as a request would: schedules keep time
            events, _ = self.notifications.events()
            for event in reversed(events):
                for channel in self.channels.receivers(event):
                    if (event.id, channel["id"]) not in self._sent:
                        self._sent.add((event.id, channel["id"]))
                        self._held.append((channel, event))
        window = self.settings.reorder
        if window < 2:
            due, self._held = self._held, []
            return due
        if len(self._held) >= window:
            due, self._held = self._held[::-1], []
            return due
        return []

    async def _delay(self) -> None:
        """Wait ``delay`` seconds; a change of the switches ends the wait early."""
        assert self._changed is not None
        self.waiting += 1
        try:
            while self.settings.delay:
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), self.settings.delay)
                except asyncio.TimeoutError:
                    return
        finally:
            self.waiting -= 1

    def _chance(self, rate: float) -> bool:
        return rate > 0 and self._rng.random() < rate

    async def _deliver(self, client: httpx.AsyncClient, channel: dict[str, Any], event: Event) -> None:
        settings, generation = self.settings, self._generation
        record: dict[str, Any] = {
            "channel_id": channel["id"],
            "channel_type": channel["channel_type"],
            "event_id": event.id,
            "event_type": event.event_type,
            "job_id": event.job_id,
            "faults": [],
        }
        if channel["channel_type"] == "email":
            self.log.append(
                {**record, "recipient": channel["email_config"]["recipient_email"], "outcome": "emailed"}
            )
            return
        if settings.delay:
            record["faults"] = ["delay"]
            await self._delay()
            settings = self.settings
            if generation != self._generation:
                return
        secret = self.channels.stored_secret(channel["id"])
        if secret is None:  # deleted meanwhile
            return
        message_id = "msg_" + uuid.uuid5(_NAMESPACE, event.id + "/" + channel["id"]).hex
        body = json.dumps(self.message(event), separators=(",", ":")).encode()
        timestamp = int(self.notifications.service.clock.time())
        key = signing_key(secret)
        if self._chance(settings.bad_signature_rate):
            key, record["faults"] = key + b"-wrong", [*record["faults"], "bad_signature"]
        headers = {
            "content-type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(key, message_id, timestamp, body),
        }
        record.update(url=channel["url"], webhook_id=message_id, timestamp=timestamp, body=json.loads(body))
        if self._chance(settings.drop_rate):
            self.log.append({**record, "faults": [*record["faults"], "drop"], "outcome": "dropped"})
            return
        copies = 2 if self._chance(settings.duplicate_rate) else 1
        if copies == 2:
            record["faults"] = [*record["faults"], "duplicate"]
        for _ in range(copies):
            try:
                response = await client.post(channel["url"], content=body, headers=headers)
                outcome = {"outcome": "sent", "status_code": response.status_code}
            except httpx.HTTPError as exc:
                outcome = {"outcome": "failed", "error": type(exc).__name__}
            if generation == self._generation:
                self.log.append({**record, **outcome})

    def message(self, event: Event) -> dict[str, Any]:
        """Return the JSON body of a delivery."""
        status = job_status(event.status, self.notifications.service.dialect, "record")
        return {
            "type": event.event_type,
            "event_id": event.id,
            "timestamp": to_datetime(event.at).isoformat(),
            "job": {"job_id": event.job_id, "workflow_id": event.workflow_id, "status": status},
            "processing_time_ms": event.processing_time_ms,
        }
