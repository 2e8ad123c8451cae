"""What the client returns: small dataclasses read from the broker's JSON replies
(docs/http-api.md describes every field)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SendResult:
    """One stored message; `queue_offset` is None for a delayed or transactional one. `duplicate`: its dedup id
    (idempotency key) was seen, nothing was stored and the ids are the first message's."""

    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int | None
    commitlog_offset: int
    store_timestamp: int
    deliver_at_ms: int | None = None
    transaction_id: str | None = None
    duplicate: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SendResult:
        return cls(
            d["msg_id"],
            d["offset_msg_id"],
            d["queue_id"],
            d["queue_offset"],
            d["commitlog_offset"],
            d["store_timestamp"],
            d.get("deliver_at_ms"),
            d.get("transaction_id"),
            bool(d.get("duplicate")),
        )


@dataclass(slots=True)
class BinaryBatchResult:
    """A binary batch, stored in one queue: message i has queue offset `first_queue_offset + i`."""

    queue_id: int
    first_queue_offset: int | None
    count: int
    store_timestamp: int
    offset_msg_id_prefix: str
    commitlog_offsets: list[int]
    duplicate: bool = False  # every TIDEMQ_DEDUP_ID was seen: nothing stored, the offsets are the first messages'

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BinaryBatchResult:
        return cls(
            d["queue_id"], d["first_queue_offset"], d["count"], d["store_timestamp"], d["offset_msg_id_prefix"], d["commitlog_offsets"],
            bool(d.get("duplicate")),
        )  # fmt: skip

    def offset_msg_ids(self) -> list[str]:
        return [f"{self.offset_msg_id_prefix}{offset:016X}" for offset in self.commitlog_offsets]


@dataclass(slots=True)
class Message:
    """A stored message; `receipt_handle` and `invisible_until_ms` are set on received ones.

    `compressed` says the body was stored compressed (and is inflated here); `body_error`, when
    set, says why it could not be inflated, and `body` is then the stored bytes.
    """

    msg_id: str
    offset_msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    body: bytes
    tags: str | None
    keys: list[str]
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int = 0
    receipt_handle: str | None = None
    invisible_until_ms: int | None = None
    compressed: bool = False
    body_error: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Message:
        text: str = d["body"]
        body = text.encode("utf-8") if d.get("encoding", "utf-8") == "utf-8" else base64.b64decode(text)
        return cls(
            d["msg_id"],
            d["offset_msg_id"],
            d["topic"],
            d["queue_id"],
            d["queue_offset"],
            d["commitlog_offset"],
            body,
            d.get("tags"),
            d.get("keys") or [],
            d.get("properties") or {},
            d["born_timestamp"],
            d["store_timestamp"],
            d.get("reconsume_times", 0),
            d.get("receipt_handle"),
            d.get("invisible_until_ms"),
            bool(d.get("compressed", False)),
            d.get("body_error"),
        )

    def text(self, errors: str = "replace") -> str:
        return self.body.decode("utf-8", errors)

    def to_json(self) -> dict[str, Any]:
        """The message as JSON-ready values: the body as text when it is UTF-8, else base64."""
        try:
            body, encoding = self.body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            body, encoding = base64.b64encode(self.body).decode("ascii"), "base64"
        out: dict[str, Any] = {
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "commitlog_offset": self.commitlog_offset,
            "body": body,
            "encoding": encoding,
            "tags": self.tags,
            "keys": self.keys,
            "properties": self.properties,
            "born_timestamp": self.born_timestamp,
            "store_timestamp": self.store_timestamp,
            "reconsume_times": self.reconsume_times,
        }
        if self.receipt_handle is not None:
            out["receipt_handle"] = self.receipt_handle
            out["invisible_until_ms"] = self.invisible_until_ms
        if self.compressed:
            out["compressed"] = True
            if self.body_error is not None:
                out["body_error"] = self.body_error
        return out


@dataclass(slots=True)
class PullResult:
    """A pull's answer; continue from `next_offset` whatever the `status`."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[Message] = field(default_factory=list)


@dataclass(slots=True)
class AckResult:
    receipt_handle: str
    status: str  # OK, HANDLE_EXPIRED, HANDLE_INVALID, NOT_STORED, ALREADY_ACKED or HANDLE_SUPERSEDED


@dataclass(slots=True)
class QueueInfo:
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(slots=True)
class TopicInfo:
    topic: str
    read_queues: int
    write_queues: int
    perm: str
    queues: list[QueueInfo] | None = None
    kind: str | None = None  # in listings: user, system, retry or dead_letter
    changed: dict[str, Any] | None = None  # a PUT of an existing topic: what it changed
    warning: str | None = None  # a PUT of an existing topic: a consequence to know

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicInfo:
        queues = d.get("queues")
        return cls(
            d["topic"],
            d["read_queues"],
            d["write_queues"],
            d["perm"],
            None if queues is None else [QueueInfo(q["queue_id"], q["min_offset"], q["max_offset"]) for q in queues],
            d.get("kind"),
            d.get("changed"),
            d.get("warning"),
        )


@dataclass(slots=True)
class QueueLag:
    """A group's position in one queue; `committed_offset` is -1 when it committed nothing."""

    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    lag: int
