"""PushPoster: one push delivery as an HTTP POST, with bounded connections and time.

The request: `POST url` with the message's body as produced (decompressed when the producer
compressed it) and the headers below; a 2xx status line is an ack, any other status, a redirect
(never followed), a connection failure or the deadline is a failed delivery. The reply's body is
read up to MAX_REPLY_BYTES and dropped (a larger one closes the connection).

| header | value |
|---|---|
| `content-type` | `application/octet-stream` |
| `tidemq-message-id` | the message id (UNIQ_KEY) |
| `tidemq-topic` | the subscribed topic |
| `tidemq-tags` | the message's tag (absent without one) |
| `tidemq-keys` | its keys, space-separated (absent without any) |
| `tidemq-reconsume-times` | how many times it was delivered before, unacked |
| `tidemq-subscription` | the consumer group of the subscription |
| `tidemq-signature` | `t=<unix ms>,v1=<hex HMAC-SHA256 of "t." + body>` (app/push_signature.py) |

Text header values are percent-encoded UTF-8 (RFC 3986 unreserved characters stay as they are).

Bounds: per origin (scheme, host, port) one PushOrigin (app/push_connection.py) holding at most
`push_max_connections_per_host` connections, whose semaphore is taken before a delivery's deadline
starts, so waiting for a connection never eats a delivery's time; each delivery ends within its
subscription's `timeout_ms` from the moment it has a connection slot. No proxies, no redirects,
TLS certificates verified against the system's CAs.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from app.push_connection import PushConnectionError, PushOrigin
from app.push_signature import SIGNATURE_HEADER, signature
from app.push_targets import origin_of


class DeliveryOutcome(enum.Enum):
    DELIVERED = "delivered"  # a 2xx reply
    FAILED = "failed"  # a reply with any other status
    ERROR = "error"  # no reply: connection refused or reset, TLS failure, the deadline


@dataclass(slots=True)
class PushRequest:
    url: str
    body: bytes
    message_id: str
    topic: str
    tags: str | None
    keys: list[str]
    reconsume_times: int
    group: str
    secret: str
    timeout_ms: int


@dataclass(slots=True)
class DeliveryResult:
    outcome: DeliveryOutcome
    status: int | None = None  # the reply's status, when there was one
    error: str | None = None  # why there was no reply


def _text(value: str) -> str:
    return quote(value, safe="")


def request_headers(req: PushRequest, now_ms: int) -> dict[str, str]:
    headers = {
        "content-type": "application/octet-stream",
        "tidemq-message-id": _text(req.message_id),
        "tidemq-topic": _text(req.topic),
        "tidemq-reconsume-times": str(req.reconsume_times),
        "tidemq-subscription": _text(req.group),
        SIGNATURE_HEADER: signature(req.secret, req.body, now_ms),
    }
    if req.tags:
        headers["tidemq-tags"] = _text(req.tags)
    if req.keys:
        headers["tidemq-keys"] = " ".join(_text(k) for k in req.keys)
    return headers


def request_target(url: str) -> str:
    """The request line's target of a URL: its path (at least "/") and query."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class PushPoster:
    """Posts deliveries; lives on the push service's event loop (every method runs there)."""

    def __init__(self, connections_per_host: int) -> None:
        self.connections_per_host = connections_per_host
        self._origins: dict[tuple[str, str, int], PushOrigin] = {}

    async def post(self, req: PushRequest, now_ms: int) -> DeliveryResult:
        key = origin_of(req.url)
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = PushOrigin(*key, self.connections_per_host)
        origin.busy += 1
        try:
            async with origin.slots:
                async with asyncio.timeout(req.timeout_ms / 1000.0):
                    status = await origin.post(request_target(req.url), request_headers(req, now_ms), req.body)
        except TimeoutError:
            return DeliveryResult(DeliveryOutcome.ERROR, error=f"no reply within {req.timeout_ms} ms")
        except PushConnectionError as e:
            return DeliveryResult(DeliveryOutcome.ERROR, error=str(e)[:300])
        finally:
            origin.busy -= 1
        outcome = DeliveryOutcome.DELIVERED if 200 <= status < 300 else DeliveryOutcome.FAILED
        return DeliveryResult(outcome, status=status)

    def forget_others(self, urls: set[str]) -> None:
        """Close the connections of idle origins no subscription's URL names any more."""
        keep = {origin_of(u) for u in urls}
        for key in [k for k, o in self._origins.items() if k not in keep and o.busy == 0]:
            self._origins.pop(key).close()

    def close(self) -> None:
        for origin in self._origins.values():
            origin.close()
        self._origins = {}
