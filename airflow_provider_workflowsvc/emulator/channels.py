"""
Notification channels (platform dialect): where job events are pushed, per workflow or for the workspace.

A channel is a ``webhook`` (an HTTPS URL, signed with a secret) or an ``email`` (sent only once the
channel is verified). The secret is write-only: kept to sign deliveries, never answered; a channel
without a custom secret (or whose secret was set to the empty string) signs with one the emulator
generated, in the Standard Webhooks form ``whsec_<base64>`` (tests read it from the control API).
"""

from __future__ import annotations

import base64
import ipaddress
import math
import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from airflow_provider_workflowsvc.emulator.clock import to_datetime
from airflow_provider_workflowsvc.emulator.errors import ApiError, InvalidRequest
from airflow_provider_workflowsvc.emulator.events import event_types_field

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.events import Event
    from airflow_provider_workflowsvc.emulator.service import Service

__all__ = ["Channels", "signing_key"]

MAX_CHANNELS_PER_SCOPE = 50
SECRET_BYTES = (24, 75)
_WHSEC = "whsec_"
_LOOPBACK_NAMES = frozenset({"localhost"})


def signing_key(secret: str) -> bytes:
    """
    Return the HMAC key of a channel secret: a Standard Webhooks secret (``whsec_<base64>``) is its
    decoded bytes, as every Standard Webhooks library reads it; any other secret its UTF-8 bytes.
    """
    if secret.startswith(_WHSEC):
        try:  # padded as the reference library pads it (unpadded base64 is accepted)
            key = base64.b64decode(secret[len(_WHSEC) :] + "==")
        except ValueError:
            key = b""
        if key:
            return key
    return secret.encode()


def _generated_secret() -> str:
    return _WHSEC + base64.b64encode(secrets.token_bytes(32)).decode()


class EmailConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, hide_input_in_errors=True)

    recipient_email: str = Field(min_length=3, max_length=320)
    reply_to: str | None = Field(default=None, max_length=320)
    cc: list[str] | None = Field(default=None, max_length=20)

    @field_validator("recipient_email", "reply_to")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            _check_address(value)
        return value

    @field_validator("cc")
    @classmethod
    def _addresses(cls, value: list[str] | None) -> list[str] | None:
        for address in value or ():
            _check_address(address)
        return value


def _check_address(value: str) -> None:
    local, _, domain = value.rpartition("@")
    if not local or "." not in domain or " " in value:
        raise ValueError("not an email address")


class ChannelFields(BaseModel):
    """A create (every field it needs) or a PATCH (the fields it changes) of a channel."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    channel_type: Literal["webhook", "email"] | None = None
    event_types: list[str] | None = None
    description: str | None = Field(default=None, max_length=255)
    enabled: bool | None = None
    url: str | None = Field(default=None, max_length=2048)
    secret: str | None = None
    email_config: EmailConfig | None = None

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value and not SECRET_BYTES[0] <= len(value.encode()) <= SECRET_BYTES[1]:
            raise ValueError(f"secret must be {SECRET_BYTES[0]} to {SECRET_BYTES[1]} bytes")
        return value


class Channels:
    """Channels at workflow level (``scope``: the workflow's id) and at workspace level (``None``)."""

    def __init__(self, service: Service, allow_http_loopback: Callable[[], bool]) -> None:
        self.service, self._allow_http = service, allow_http_loopback

    # -- reading ---------------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        return sorted(self.service.store.all("channels"), key=lambda r: (r["created_at"], r["id"]))

    def receivers(self, event: Event) -> list[dict[str, Any]]:
        """Return the channels an event goes to: enabled, subscribed, in its scope, there before it."""
        return [
            row
            for row in self.rows()
            if row["enabled"]
            and event.event_type in row["event_types"]
            and row["scope"] in (None, event.workflow_id)
            and row["created_at"] <= event.at
            and (row["channel_type"] == "webhook" or (row["verified_at"] or math.inf) <= event.at)
        ]

    def stored_secret(self, channel_id: str) -> str | None:
        """Return the secret a channel signs with (None: no such channel)."""
        row = self.service.store.get("channels", channel_id)
        return None if row is None else str(row["secret"] or row["generated_secret"])

    def secret(self, channel_id: str) -> str:
        """Return the secret a channel signs with, for the control API (404: no such channel)."""
        secret = self.stored_secret(channel_id)
        if secret is None:
            raise ApiError(404, f"channel {channel_id} not found")
        return secret

    @staticmethod
    def channel_json(row: Mapping[str, Any]) -> dict[str, Any]:
        data = {
            "id": row["id"],
            "channel_type": row["channel_type"],
            "event_types": row["event_types"],
            "description": row["description"],
            "enabled": row["enabled"],
            "created_at": to_datetime(row["created_at"]).isoformat(),
            "updated_at": to_datetime(row["updated_at"]).isoformat(),
        }
        if row["channel_type"] == "webhook":
            data["url"] = row["url"]
        else:
            data["email_config"] = {"provider": "emulator", **row["email_config"]}
            data["verified"] = row["verified_at"] is not None
        return data

    # -- routes ----------------------------------------------------------------------------------

    def _scope(self, workflow_id: str | None) -> str | None:
        if workflow_id is not None:
            self.service.get_workflow(workflow_id)  # 404 when there is no such workflow
        return workflow_id

    def _row(self, scope: str | None, channel_id: str) -> dict[str, Any]:
        row = self.service.store.get("channels", channel_id)
        if row is None or row["scope"] != self._scope(scope):
            raise ApiError(404, f"channel {channel_id} not found")
        return row

    def list(self, scope: str | None) -> dict[str, Any]:
        scope = self._scope(scope)
        return {"items": [self.channel_json(r) for r in self.rows() if r["scope"] == scope]}

    def get(self, scope: str | None, channel_id: str) -> dict[str, Any]:
        return self.channel_json(self._row(scope, channel_id))

    def create(self, scope: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        scope = self._scope(scope)
        fields = _fields(body)
        missing = [name for name in ("channel_type", "event_types") if getattr(fields, name) is None]
        if missing:
            raise InvalidRequest(
                [{"loc": ["body", m], "msg": "Field required", "type": "missing"} for m in missing]
            )
        if sum(1 for r in self.rows() if r["scope"] == scope) >= MAX_CHANNELS_PER_SCOPE:
            raise ApiError(409, f"at most {MAX_CHANNELS_PER_SCOPE} channels per workflow and per workspace")
        now = self.service.clock.time()
        row: dict[str, Any] = {
            "id": str(uuid.uuid4()),
            "scope": scope,
            "channel_type": fields.channel_type,
            "enabled": True,
            "description": None,
            "url": None,
            "email_config": None,
            "secret": None,
            "generated_secret": _generated_secret(),
            "verified_at": None,
            "created_at": now,
            "updated_at": now,
        }
        self._apply(row, fields)
        self.service.store.put("channels", row["id"], row)
        return self.channel_json(row)

    def update(self, scope: str | None, channel_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        row = self._row(scope, channel_id)
        fields = _fields(body)
        if fields.channel_type not in (None, row["channel_type"]):
            raise InvalidRequest.one(
                ["body", "channel_type"], "channel_type cannot be changed", "value_error"
            )
        self._apply(row, fields)
        row["updated_at"] = self.service.clock.time()
        self.service.store.put("channels", channel_id, row)
        return self.channel_json(row)

    def delete(self, scope: str | None, channel_id: str) -> None:
        self._row(scope, channel_id)
        self.service.store.delete("channels", channel_id)

    def verify(self, scope: str | None, channel_id: str) -> dict[str, Any]:
        """Mark a channel verified: an email channel sends the events that come after (none before)."""
        row = self._row(scope, channel_id)
        now = self.service.clock.time()
        row["verified_at"], row["updated_at"] = row["verified_at"] or now, now
        self.service.store.put("channels", channel_id, row)
        return self.channel_json(row)

    def _apply(self, row: dict[str, Any], fields: ChannelFields) -> None:
        """Apply the given fields to a channel, then check the channel whole (422 naming the field)."""
        given = fields.model_fields_set
        if "event_types" in given:
            row["event_types"] = event_types_field(fields.event_types, ("body", "event_types"))
        if "description" in given:
            row["description"] = fields.description
        if "enabled" in given:
            row["enabled"] = True if fields.enabled is None else fields.enabled
        if "email_config" in given:
            row["email_config"] = None if fields.email_config is None else fields.email_config.model_dump()
        if "url" in given:
            row["url"] = fields.url
        if "secret" in given:
            row["secret"] = fields.secret or None  # "" (or null): back to the generated secret
        webhook = row["channel_type"] == "webhook"
        if webhook and row["email_config"] is not None:
            wrong = "email_config"
        elif not webhook and (row["url"] is not None or row["secret"]):
            wrong = "url" if row["url"] is not None else "secret"
        else:
            wrong = None
        if wrong is not None:
            message = f"{wrong} is not a field of a {row['channel_type']} channel"
            raise InvalidRequest.one(["body", wrong], message, "extra_forbidden")
        if webhook:
            self._check_url(row["url"])
        elif row["email_config"] is None:
            raise InvalidRequest.one(["body", "email_config"], "Field required", "missing")

    def _check_url(self, url: str | None) -> None:
        if url is None:
            raise InvalidRequest.one(["body", "url"], "Field required", "missing")
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            return
        if parts.scheme == "http" and self._allow_http() and _is_loopback(parts.hostname):
            return
        raise InvalidRequest.one(
            ["body", "url"], "url must be an https:// URL (HTTPS required)", "value_error"
        )


def _fields(body: Mapping[str, Any]) -> ChannelFields:
    try:
        return ChannelFields.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequest.from_pydantic(exc, ("body",)) from None


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
