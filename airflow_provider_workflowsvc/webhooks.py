"""
Verify a webhook delivery of the service's job events, for users who receive them themselves (an API
gateway, a function, a queue's HTTP endpoint): the Standard Webhooks scheme, standard library only.

The provider never opens a port: receiving is the user's gateway; this checks what it received.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_workflowsvc.exceptions import WebhookVerificationError

_WHSEC = "whsec_"
_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


def verify_webhook(
    body: bytes,
    headers: Mapping[str, str],
    secret: str | bytes,
    *,
    tolerance: timedelta = timedelta(minutes=5),
    now: datetime | None = None,
) -> dict[str, Any]:
    """
    Return a delivery's event (its JSON body) once its signature and timestamp are proven.

    ``body``: the request body exactly as received (bytes, not re-serialized JSON); ``headers``: its
    headers, any case (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``); ``secret``: the
    channel's signing secret, as given when the channel was created (a ``whsec_<base64>`` secret is
    its decoded key, any other text its UTF-8 bytes; ``bytes``: the key itself). A delivery is proven
    when one of its ``v1,<base64>`` signatures (several during a key rotation) is the HMAC-SHA256 of
    ``"{webhook-id}.{webhook-timestamp}.{body}"``, compared in constant time, and its timestamp is
    within ``tolerance`` of ``now`` (default: the current time), against a replay.

    Raises :class:`~airflow_provider_workflowsvc.exceptions.WebhookVerificationError` otherwise
    (``reason``: ``missing_header``, ``malformed_header``, ``timestamp``, ``signature`` or ``body``);
    its message never holds the secret or a signature. The same delivery may come twice (retries),
    late or out of order: deduplicate on ``webhook-id``.
    """
    key = _key(secret)
    lowered = {name.lower(): value for name, value in headers.items()}
    values = {name: lowered.get(name, "").strip() for name in _HEADERS}
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise WebhookVerificationError("missing_header", f"the delivery has no {', '.join(missing)} header")
    message_id, timestamp, signatures = values.values()
    if not timestamp.isdigit():
        raise WebhookVerificationError("malformed_header", "webhook-timestamp is not whole epoch seconds")
    moment = now.timestamp() if now is not None else time.time()
    if abs(moment - int(timestamp)) > tolerance.total_seconds():
        raise WebhookVerificationError(
            "timestamp", f"webhook-timestamp is more than {tolerance} away from now: a replay, or a clock off"
        )
    signed = b".".join((message_id.encode(), timestamp.encode(), body))
    expected = hmac.new(key, signed, hashlib.sha256).digest()
    offered = [_signature(each) for each in signatures.split()]
    if not any(hmac.compare_digest(expected, each) for each in offered if each is not None):
        raise WebhookVerificationError("signature", "no v1 signature of the delivery matches the secret")
    try:
        event = json.loads(body)
    except ValueError:
        raise WebhookVerificationError("body", "the signed body is not JSON") from None
    if not isinstance(event, dict):
        raise WebhookVerificationError("body", "the signed body is not a JSON object")
    return event


def _key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        key = secret
    elif secret.startswith(_WHSEC):
        encoded = secret[len(_WHSEC) :]
        try:  # padded when it was not, as Standard Webhooks libraries accept it
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise WebhookVerificationError("secret", "the whsec_ secret is not base64") from None
    else:
        key = secret.encode()
    if not key:
        raise WebhookVerificationError("secret", "the webhook secret is empty")
    return key


def _signature(versioned: str) -> bytes | None:
    """Return the bytes of a ``v1,<base64>`` signature; None for another version or a malformed one."""
    version, _, encoded = versioned.partition(",")
    if version != "v1":
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
