"""The ``Tandem-Signature`` header of a webhook delivery, and its check for receivers.

``Tandem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``, keyed with
``TANDEM_WEBHOOK_SECRET``. The body is the exact bytes POSTed (verify before parsing the JSON);
``t`` is when the attempt was signed, so a receiver refuses a replay older than its tolerance. Each
attempt is signed afresh (``t`` changes), while ``Tandem-Delivery`` stays the same: a receiver
de-duplicates by that id.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Tandem-Signature"
DELIVERY_HEADER = "Tandem-Delivery"
EVENT_HEADER = "Tandem-Event"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` with ``secret``."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The ``Tandem-Signature`` header value for ``body`` (signed now unless ``timestamp``)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature(secret, t, body)}"


def verify(
    secret: str, header: str, body: bytes, *, tolerance: float = 300.0, now: float | None = None
) -> bool:
    """Whether ``header`` (a ``Tandem-Signature``) signs ``body`` with ``secret`` within
    ``tolerance`` seconds of ``now``. Compares in constant time; any malformed header is ``False``."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    stamps = fields.get("t", [])
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    t = int(stamps[0])
    if abs((time.time() if now is None else now) - t) > tolerance:
        return False
    expected = signature(secret, t, body)
    return any(hmac.compare_digest(expected, given) for given in fields.get("v1", []))
