"""How a stored message is shown in JSON replies (pulls and queries).

The body is text when it decodes as UTF-8 and base64 otherwise (`encoding` says which);
the properties surfaced as fields of their own (TAGS, KEYS, UNIQ_KEY) are not repeated.
"""

from __future__ import annotations

import base64
from typing import Any

from store import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

_SURFACED = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)


def message_json(m: dict[str, Any]) -> dict[str, Any]:
    """The API view of a message decoded by `store.decode_message`."""
    body: bytes = m["body"]
    try:
        text = body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        text = base64.b64encode(body).decode("ascii")
        encoding = "base64"
    properties: dict[str, str] = m["properties"]
    if any(name in properties for name in _SURFACED):
        properties = {k: v for k, v in properties.items() if k not in _SURFACED}
    return {
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
