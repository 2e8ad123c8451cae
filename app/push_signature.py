"""The signature a push delivery carries in `tidemq-signature`, and how a receiver checks it.

    tidemq-signature: t=<unix ms>,v1=<hex HMAC-SHA256 of "<t>." + body under the subscription's secret>

`t` is when the delivery was signed (each attempt signs anew), so a receiver that refuses a `t` far
from its own clock (`DEFAULT_TOLERANCE_MS`) refuses a replayed request even when its body is the
same; the HMAC covers `t`, so it cannot be moved. The body is the bytes posted, exactly. A receiver
compares in constant time (`verify` does). The scheme is Stripe's webhook signature, with milliseconds.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "tidemq-signature"
# How far a signature's time may be from the receiver's clock in `verify` by default.
DEFAULT_TOLERANCE_MS = 300_000


def signature(secret: str, body: bytes, t_ms: int) -> str:
    """The header's value for `body` signed at `t_ms`."""
    mac = hmac.new(secret.encode("utf-8"), str(t_ms).encode("ascii") + b"." + body, hashlib.sha256)
    return f"t={t_ms},v1={mac.hexdigest()}"


def verify(secret: str, body: bytes, header: str, now_ms: int, tolerance_ms: int = DEFAULT_TOLERANCE_MS) -> bool:
    """Whether `header` signs `body` under `secret` at a time within `tolerance_ms` of `now_ms`."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    t, given = fields.get("t", ""), fields.get("v1", "")
    if not (t.isascii() and t.isdigit()) or len(t) > 18 or abs(now_ms - int(t)) > tolerance_ms:
        return False
    return hmac.compare_digest(signature(secret, body, int(t)).encode(), f"t={t},v1={given}".encode())
