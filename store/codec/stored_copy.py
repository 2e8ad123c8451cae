"""Stored copies: a new message made from a decoded stored one (a delayed or timer message going to
its real topic, a committed half message), keeping its body, flags, born time and host and the
properties the caller gives."""

from __future__ import annotations

import ipaddress
from typing import Any

from store.codec.message import DEFAULT_BORN_HOST, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, MessageInner, topic_problem


def born_host_bytes(text: str) -> bytes:
    """The BORNHOST field from its decoded form: 8 bytes from `a.b.c.d:port`, 20 from
    `[IPv6 address]:port` (loopback port 0 on anything odd)."""
    ip, _, port = text.rpartition(":")
    if not (port.isdigit() and int(port) < 1 << 32):
        return DEFAULT_BORN_HOST
    if ip.startswith("[") and ip.endswith("]"):
        try:
            return ipaddress.IPv6Address(ip[1:-1]).packed + int(port).to_bytes(4, "big")
        except ValueError:
            return DEFAULT_BORN_HOST
    parts = ip.split(".")
    if len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts):
        return bytes(int(p) for p in parts) + int(port).to_bytes(4, "big")
    return DEFAULT_BORN_HOST


def real_target(props: dict[str, str]) -> tuple[str, int] | None:
    """The REAL_TOPIC and REAL_QID a copy goes to; None when they are missing or invalid."""
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    real_qid = props.get(PROPERTY_REAL_QID)
    if real_topic is None or topic_problem(real_topic) or real_qid is None or not real_qid.isdigit():
        return None
    return real_topic, int(real_qid)


def copy_of(stored: dict[str, Any], topic: str, queue_id: int, props: dict[str, str]) -> MessageInner:
    """A new message for `topic`/`queue_id` with `props`, otherwise as the stored one came."""
    return MessageInner(
        topic,
        stored["body"],
        queue_id,
        props,
        flag=stored["flag"],
        born_timestamp=stored["born_timestamp"],
        born_host=born_host_bytes(stored["born_host"]),
        sys_flag=stored["sys_flag"],
        reconsume_times=stored["reconsume_times"],
        prepared_transaction_offset=stored["prepared_transaction_offset"],
    )
