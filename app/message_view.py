"""How a stored message is shown in JSON replies (pulls, receives and queries).

The body is the one its producer sent: a body stored compressed (SYSFLAG's COMPRESSED_FLAG, as
RocketMQ producers store bodies over 4 KiB) is inflated, at most to `body_limit_bytes`, and the
view says `"compressed": true`. One that cannot be inflated is shown as stored, base64, with
`body_error` naming why (store.BodyStatus), so a pull still answers and moves past it.
The body is text when it decodes as UTF-8 and base64 otherwise (`encoding` says which);
the properties surfaced as fields of their own (TAGS, KEYS, UNIQ_KEY) are not repeated.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from app.receive_models import received_json
from store import COMPRESSED_FLAG, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, Popped, decode_message, inflate_body, render_received

_SURFACED = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)


def message_json(m: dict[str, Any], body_limit_bytes: int) -> dict[str, Any]:
    """The API view of a message decoded by `store.decode_message`."""
    body: bytes = m["body"]
    error: str | None = None
    compressed = m["sys_flag"] & COMPRESSED_FLAG
    if compressed:
        body, status = inflate_body(body, m["sys_flag"], body_limit_bytes)
        error = status.value if status.failed else None
    if error is None:
        try:
            text, encoding = body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(body).decode("ascii"), "base64"
    else:  # the stored bytes of a body that could not be inflated are never passed off as text
        text, encoding = base64.b64encode(body).decode("ascii"), "base64"
    properties: dict[str, str] = m["properties"]
    if PROPERTY_UNIQ_KEY in properties or PROPERTY_TAGS in properties or PROPERTY_KEYS in properties:  # _SURFACED, unrolled
        properties = {k: v for k, v in properties.items() if k not in _SURFACED}
    view = {
        "msg_id": m["msg_id"],
        "offset_msg_id": m["offset_msg_id"],
        "topic": m["topic"],
        "queue_id": m["queue_id"],
        "queue_offset": m["queue_offset"],
        "commitlog_offset": m["commitlog_offset"],
        "body": text,
        "encoding": encoding,
        "tags": m.get("tags"),
        "keys": m.get("keys") or [],
        "properties": properties,
        "born_timestamp": m["born_timestamp"],
        "store_timestamp": m["store_timestamp"],
        "reconsume_times": m["reconsume_times"],
    }
    if compressed:
        view["compressed"] = True
        if error is not None:
            view["body_error"] = error
    return view


def received_view(p: Popped, handle: str, topic: str, body_limit_bytes: int) -> bytes:
    """A received message's JSON (a receive's reply, an event stream's event): written by the store's kernel
    (store.render_received), or by message_json and received_json for a message the kernel leaves to Python."""
    view = render_received(p.data, topic, p.reconsume_times, handle, p.invisible_until_ms)
    if view is None:
        message = message_json(decode_message(p.data, 0, hosts=False), body_limit_bytes)
        view = orjson.dumps(received_json(message, handle, p.invisible_until_ms, p.reconsume_times, topic))
    return view
