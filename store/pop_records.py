"""POP consumption's records in the revive topic: checkpoints (CK) and acks (ACK), as RocketMQ 5 writes them.

A receive writes one checkpoint per queue it took messages from; an ack writes one ack record.
Both are messages of the revive system topic, their bodies JSON with RocketMQ's field names
(`PopCheckPoint` and `AckMsg` serialized by fastjson through their short getters), so the
revive service, replication and recovery carry them like any message. Layout: docs/layouts.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from store.errors import StoreError
from store.message import SYSTEM_TOPICS

# RocketMQ's names: PopAckConstants.REVIVE_TOPIC + cluster, the CK and ACK tags, the revive group.
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
# RocketMQ's property naming the topic a retried or dead-lettered message was produced to.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
# A checkpoint's bit map is a Java int: at most this many messages per checkpoint.
MAX_CHECKPOINT_MESSAGES = 32


class RecordInvalid(StoreError):
    """Raised when a revive-topic body is not a checkpoint or ack record this code can read."""


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


def retry_topic(group: str, topic: str) -> str:
    """The topic a group's expired messages of `topic` are re-put into (RocketMQ 5's `%RETRY%{group}_{topic}`)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def is_group_system_topic(topic: str) -> bool:
    """Whether `topic` is a retry or dead-letter topic (a consumer never produced to it)."""
    return topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX)


# RocketMQ's TopicValidator.SYSTEM_TOPIC_PREFIX: topics the broker makes for itself (the revive topic, ...).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def topic_kind(topic: str) -> str:
    """What a topic is for: "system" (the broker's own: delay levels, timers, transactions, the revive topic),
    "retry" (a group's `%RETRY%` topic), "dead_letter" (a group's `%DLQ%` topic) or "user" (every other)."""
    if topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
        return "system"
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dead_letter"
    return "user"


def dlq_topic(group: str) -> str:
    """The group's dead-letter topic (RocketMQ's `%DLQ%{group}`)."""
    return DLQ_PREFIX + group


@dataclass(slots=True)
class PopCheckPoint:
    """What one receive took from one queue: `num` messages from `start_offset` (at the offsets
    `start_offset + d` for each d in `offset_diffs`), invisible until `revive_time`."""

    topic: str
    cid: str
    queue_id: int
    start_offset: int
    num: int
    pop_time: int
    invisible_time: int
    revive_offset: int = 0
    bit_map: int = 0  # bit i set: message i acked (the revive service fills it from ack records)
    offset_diffs: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert 0 < self.num <= MAX_CHECKPOINT_MESSAGES, self.num
        assert not self.offset_diffs or len(self.offset_diffs) == self.num

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def offset_at(self, index: int) -> int:
        """The queue offset of the checkpoint's `index`-th message."""
        return self.start_offset + (self.offset_diffs[index] if self.offset_diffs else index)

    def index_of(self, offset: int) -> int:
        """The index of the message at queue `offset`, -1 when the checkpoint does not hold it."""
        diff = offset - self.start_offset
        if diff < 0:
            return -1
        if not self.offset_diffs:
            return diff if diff < self.num else -1
        try:
            return self.offset_diffs.index(diff)
        except ValueError:
            return -1

    def merge_key(self) -> tuple[str, str, int, int, int]:
        """What an ack names to find its checkpoint: topic, group, queue, start offset, pop time."""
        return (self.topic, self.cid, self.queue_id, self.start_offset, self.pop_time)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "so": self.start_offset, "pt": self.pop_time, "it": self.invisible_time, "bm": self.bit_map, "n": self.num,
            "q": self.queue_id, "t": self.topic, "c": self.cid, "ro": self.revive_offset, "rt": self.revive_time,
        }  # fmt: skip
        if self.offset_diffs:
            doc["d"] = self.offset_diffs
        return orjson.dumps(doc)

    @classmethod
    def from_json(cls, data: bytes | memoryview) -> PopCheckPoint:
        doc = _object(data)
        try:
            diffs = doc.get("d") or []
            if not all(type(d) is int and d >= 0 for d in diffs):
                raise RecordInvalid("d must list non-negative offsets")
            return cls(
                topic=_text(doc, "t"), cid=_text(doc, "c"), queue_id=_int(doc, "q"), start_offset=_int(doc, "so"),
                num=_num(doc), pop_time=_int(doc, "pt"), invisible_time=_int(doc, "it"), revive_offset=_int(doc, "ro", 0),
                bit_map=_int(doc, "bm", 0) & 0xFFFFFFFF, offset_diffs=list(diffs),
            )  # fmt: skip
        except AssertionError as e:
            raise RecordInvalid(f"inconsistent checkpoint: {e}") from None


@dataclass(slots=True, frozen=True)
class AckMsg:
    """An ack of the message at `ack_offset`, taken by the receive whose checkpoint started at
    `start_offset` at `pop_time`."""

    topic: str
    consumer_group: str
    queue_id: int
    start_offset: int
    ack_offset: int
    pop_time: int

    def merge_key(self) -> tuple[str, str, int, int, int]:
        return (self.topic, self.consumer_group, self.queue_id, self.start_offset, self.pop_time)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "ao": self.ack_offset,
                "so": self.start_offset,
                "c": self.consumer_group,
                "t": self.topic,
                "q": self.queue_id,
                "pt": self.pop_time,
            }
        )

    @classmethod
    def from_json(cls, data: bytes | memoryview) -> AckMsg:
        doc = _object(data)
        return cls(_text(doc, "t"), _text(doc, "c"), _int(doc, "q"), _int(doc, "so"), _int(doc, "ao"), _int(doc, "pt"))


@dataclass(slots=True, frozen=True)
class BatchAckMsg:
    """Acks of several messages of one checkpoint in one record (RocketMQ 5's BatchAckMsg, tag `bAck`)."""

    topic: str
    consumer_group: str
    queue_id: int
    start_offset: int
    ack_offsets: tuple[int, ...]
    pop_time: int

    def merge_key(self) -> tuple[str, str, int, int, int]:
        return (self.topic, self.consumer_group, self.queue_id, self.start_offset, self.pop_time)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"aol": list(self.ack_offsets), "so": self.start_offset, "c": self.consumer_group, "t": self.topic, "q": self.queue_id,
             "pt": self.pop_time}
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes | memoryview) -> BatchAckMsg:
        doc = _object(data)
        offsets = doc.get("aol")
        if type(offsets) is not list or not offsets or not all(type(o) is int for o in offsets):
            raise RecordInvalid("aol must list ack offsets")
        return cls(_text(doc, "t"), _text(doc, "c"), _int(doc, "q"), _int(doc, "so"), tuple(offsets), _int(doc, "pt"))


def _object(data: bytes | memoryview) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise RecordInvalid(f"not JSON: {e}") from None
    if type(doc) is not dict:
        raise RecordInvalid("not a JSON object")
    return doc


def _int(doc: dict[str, Any], name: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if type(value) is not int:
        raise RecordInvalid(f"{name} must be an integer")
    return value


def _num(doc: dict[str, Any]) -> int:
    num = _int(doc, "n")
    if not 0 < num <= MAX_CHECKPOINT_MESSAGES:
        raise RecordInvalid(f"n must be 1..{MAX_CHECKPOINT_MESSAGES}")
    return num


def _text(doc: dict[str, Any], name: str) -> str:
    value = doc.get(name)
    if type(value) is not str or not value:
        raise RecordInvalid(f"{name} must be a non-empty string")
    return value
