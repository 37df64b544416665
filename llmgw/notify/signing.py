"""The signature a webhook's receiver checks: HMAC-SHA256 over the timestamp and the body.

    X-Llmgw-Timestamp: 1767225600
    X-Llmgw-Signature: sha256=HEX,  HEX = HMAC-SHA256(secret, f"{timestamp}.{body}")

The timestamp is inside what is signed so that a receiver that refuses an
old timestamp refuses a replayed delivery; the delivery's id
(X-Llmgw-Delivery) lets it drop a duplicate. `verify` is the receiver's side
as docs/webhooks.md shows it, and the tests check deliveries with it.
"""

from __future__ import annotations

import hashlib
import hmac


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Llmgw-Signature header's value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """Whether `signature` is the one `secret` makes for `body` at `timestamp` (in constant time)."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)
