"""Pydantic models of the API's bodies.

Request models that FastAPI validates (topics, offsets) are used as such; the produce body
is parsed on the hot path by `app.produce_parse` with orjson, and the reply models here
document (in the OpenAPI spec) what the handlers write with orjson directly.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.params import NAME_SCHEMA
from app.transaction_models import TransactionRef


def example_of(model: type[BaseModel]) -> Any:
    """The `example` a model's json_schema_extra declares, for the spec's request and reply examples."""
    extra = model.model_config.get("json_schema_extra")
    assert isinstance(extra, dict) and "example" in extra, f"{model.__name__} declares no example"
    return extra["example"]


def integral(value: Any) -> Any:
    """A JSON number with no fractional part as an int: JSON Schema's "integer" takes 2.0 as well as 2 (strict models
    would refuse the float). Anything else is left for the model's own check (a bool stays a bool: refused)."""
    if type(value) is float and value.is_integer() and abs(value) < 2.0**63:  # past int64 a parser has rounded it
        return int(value)
    return value


# An integer field of a request body: what the spec's "integer" admits, 2.0 included.
JsonInt = Annotated[int, BeforeValidator(integral)]

Encoding = Literal["utf-8", "base64"]
# Why a body stored compressed is shown as stored (store.BodyStatus's failed values).
BodyError = Literal["BODY_CORRUPT", "BODY_TOO_LARGE", "BODY_COMPRESSION_UNSUPPORTED"]


MESSAGE_EXAMPLE: dict[str, Any] = {
    "msg_id": "7F000001A1B2C3D4E5F60000000A0001",
    "offset_msg_id": "7F00000100002A9F0000000000000000",
    "topic": "orders",
    "queue_id": 0,
    "queue_offset": 0,
    "commitlog_offset": 0,
    "body": "hello",
    "encoding": "utf-8",
    "tags": "TagA",
    "keys": ["order-1"],
    "properties": {"source": "web"},
    "born_timestamp": 1767225600000,
    "store_timestamp": 1767225600001,
    "reconsume_times": 0,
}


class Problem(BaseModel):
    """An error (RFC 9457 problem details) with a stable code."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "example": {
                "type": "https://tidemq.dev/problems/topic-invalid",
                "title": "The topic name is invalid",
                "status": 400,
                "detail": "topic must match ^[%|a-zA-Z0-9_-]+$",
                "code": "TOPIC_INVALID",
            }
        },
    )
    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None


class TopicSpec(BaseModel):
    """Desired configuration of a topic."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"queues": 4, "perm": "rw"}})
    queues: JsonInt | None = Field(
        None,
        description="Read and write queue count (default: the store's default_topic_queue_nums for a new topic; an existing "
        "topic keeps its count; at most max_topic_queue_nums)",
        json_schema_extra={"minimum": 1},  # the maximum is the broker's max_topic_queue_nums (app.openapi_limits)
    )
    perm: Literal["rw", "r", "w", ""] | None = Field(
        None, description='r: readable, w: writable (default: "rw" for a new topic; an existing topic keeps its perm)'
    )


class QueueInfo(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int


class FieldChange(BaseModel):
    old: Any
    new: Any


class TopicInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "topic": "orders",
                "read_queues": 4,
                "write_queues": 4,
                "perm": "rw",
                "queues": [{"queue_id": 0, "min_offset": 0, "max_offset": 12}],
            }
        }
    )
    topic: str
    read_queues: int
    write_queues: int
    perm: str
    kind: Literal["user", "system", "retry", "dead_letter"] | None = Field(
        None,
        description="In listings: user, or the broker's own (system: delay levels, timers, transactions, the revive "
        "topic; retry and dead_letter: a consumer group's %RETRY% and %DLQ% topics)",
    )
    queues: list[QueueInfo] | None = None
    changed: dict[str, FieldChange] | None = Field(
        None, description="PUT of an existing topic: what it changed (empty when nothing), each field's old and new value"
    )
    warning: str | None = Field(None, description="PUT of an existing topic: a consequence to know, such as queues no longer read")


class TopicList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"example": {"topics": [{"topic": "orders", "read_queues": 4, "write_queues": 4, "perm": "rw"}]}}
    )
    topics: list[TopicInfo]


class ProduceMessage(BaseModel):
    """One message to produce; every field but body is optional."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "example": {"body": "hello", "tags": "TagA", "keys": ["order-1"], "properties": {"source": "web"}, "sharding_key": "user-7"}
        },
    )
    body: str = Field(description="The message body, as text or (encoding=base64) as base64")
    encoding: Encoding = "utf-8"
    tags: str | None = Field(None, max_length=255, description="One tag, used by pull filters (TagA||TagB)")
    keys: list[str] | None = Field(None, description="Keys for the key query; no spaces")
    properties: dict[str, str] | None = Field(None, description="User properties")
    msg_id: str | None = Field(None, max_length=128, description="Client message id (UNIQ_KEY); generated when absent")
    queue_id: int | None = Field(None, ge=0, description="Queue to put into; else sharding_key's hash; else round-robin")
    sharding_key: str | None = Field(None, description="Messages with one sharding key go to one queue, in order")
    delay_level: int | None = Field(None, ge=0, description="Delay level (1 = 1s, 2 = 5s, ...); 0 = none")
    delay_ms: int | None = Field(
        None, ge=0, description="Delay in ms, honoured to within timer_precision_ms; at most timer_max_delay_ms (not with delay_level)"
    )
    deliver_at_ms: int | None = Field(
        None, ge=0, description="Delivery time, ms since the epoch, to within timer_precision_ms; a past time means now"
    )
    transaction: TransactionRef | None = Field(
        None, description="Store as a transactional (half) message, invisible until committed (POST /v1/transactions/{transaction_id})"
    )
    dedup_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern="^[!-~]+$",
        description="Idempotent produce: a message with an id seen on this topic within dedup_window_s is not stored again "
        "(the reply is 200 with the first message's ids); printable ASCII, no space. A single message may give it as the "
        "Idempotency-Key header instead",
    )


class ProduceBatch(BaseModel):
    """Up to max_batch_messages messages stored with one lock acquisition."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"example": {"messages": [{"body": "a"}, {"body": "b", "tags": "TagB"}]}})
    messages: list[ProduceMessage] = Field(min_length=1)


class SendResult(BaseModel):
    """Where a message was stored; a delayed message also says its level and when it is due."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "kind": "message",
                "msg_id": "7F000001A1B2C3D4E5F60000000A0001",
                "offset_msg_id": "7F00000100002A9F0000000000000000",
                "queue_id": 2,
                "queue_offset": 0,
                "commitlog_offset": 0,
                "store_timestamp": 1767225600000,
            }
        }
    )
    kind: Literal["message"] = Field(description="Tells the produce replies apart: message, batch or binary_batch")
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int | None = Field(description="Offset in queue_id; null for a delayed message, which gets one when it is delivered")
    commitlog_offset: int
    store_timestamp: int
    delay_level: int | None = Field(None, description="Delayed messages only: the delay level used")
    deliver_at_ms: int | None = Field(
        None, description="Delayed messages only: when the message is due (the time asked for, or store time + the level's delay)"
    )
    transaction_id: str | None = Field(None, description="Transactional messages only: the id to commit or roll back it by")
    duplicate: bool | None = Field(
        None,
        description="Idempotent produce only: true when nothing was stored because the dedup id was seen; the ids are the first message's",
    )


class BatchSendResult(BaseModel):
    """Where each message of a JSON batch was stored, in the batch's order."""

    kind: Literal["batch"] = Field(description="Tells the produce replies apart: message, batch or binary_batch")
    results: list[SendResult]
    duplicate: bool | None = Field(
        None, description="Idempotent produce only: true when every message's dedup id was seen; nothing was stored"
    )


class BinaryBatchSendResult(BaseModel):
    """Where a binary batch was stored, in one queue: message i has queue offset first_queue_offset + i,
    commitlog offset commitlog_offsets[i] and offset message id offset_msg_id_prefix followed by that
    offset as 16 upper-case hex digits; its msg_id is the UNIQ_KEY property it was sent with.
    A batch sent with delay_ms or deliver_at_ms has a null first_queue_offset (its messages get
    their queue offsets when delivered) and says deliver_at_ms."""

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "kind": "binary_batch",
                "queue_id": 1,
                "first_queue_offset": 40,
                "count": 2,
                "store_timestamp": 1767225600000,
                "offset_msg_id_prefix": "7F00000100002A9F",
                "commitlog_offsets": [81920, 82071],
            }
        }
    )
    kind: Literal["binary_batch"] = Field(description="Tells the produce replies apart: message, batch or binary_batch")
    queue_id: int
    first_queue_offset: int | None
    count: int
    store_timestamp: int
    offset_msg_id_prefix: str
    commitlog_offsets: list[int]
    deliver_at_ms: int | None = Field(None, description="Timer batches only: when its messages are due")
    transaction_ids: list[str] | None = Field(None, description="Transactional batches only: each message's transaction id")
    duplicate: bool | None = Field(
        None, description="Idempotent produce only: true when every message's TIDEMQ_DEDUP_ID was seen; nothing was stored"
    )


class Message(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": MESSAGE_EXAMPLE})
    msg_id: str
    offset_msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    body: str
    encoding: Encoding
    tags: str | None = None
    keys: list[str]
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    compressed: bool | None = Field(
        default=None, description="Present (true) when the body was stored compressed (SYSFLAG 0x1); `body` is then inflated"
    )
    body_error: BodyError | None = Field(
        default=None,
        description="Present when a compressed body could not be inflated: `body` is then the stored bytes, base64",
    )


PullStatus = Literal[
    "FOUND",
    "NO_NEW_MSG",
    "NO_MATCHED_MSG",
    "OFFSET_TOO_SMALL",
    "OFFSET_OVERFLOW_BADLY",
    "OFFSET_FOUND_NULL",
    "MESSAGE_WAS_REMOVING",
]


class PullResult(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"example": {"status": "NO_NEW_MSG", "next_offset": 12, "min_offset": 0, "max_offset": 12, "messages": []}}
    )
    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[Message]
    hint: str | None = Field(
        None, description="With OFFSET_OVERFLOW_BADLY and OFFSET_TOO_SMALL: what the status means and where to continue"
    )


class OffsetCommit(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": {"topic": "orders", "queue_id": 0, "offset": 42}})
    topic: str = Field(json_schema_extra=NAME_SCHEMA)
    queue_id: JsonInt = Field(json_schema_extra={"minimum": 0})
    offset: JsonInt = Field(json_schema_extra={"minimum": 0}, description="Next offset to consume (0 .. the queue's max offset)")


class GroupQueueOffset(BaseModel):
    queue_id: int
    committed_offset: int = Field(description="-1 when the group has committed nothing for this queue")
    min_offset: int
    max_offset: int
    lag: int


class OffsetsCommitted(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"example": {"group": "billing", "committed": [{"topic": "orders", "queue_id": 0, "offset": 42}]}}
    )
    group: str
    committed: list[OffsetCommit]


class GroupOffsets(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "group": "billing",
                "topic": "orders",
                "queues": [{"queue_id": 0, "committed_offset": 40, "min_offset": 0, "max_offset": 42, "lag": 2}],
            }
        }
    )
    group: str
    topic: str
    queues: list[GroupQueueOffset]


class QueryResult(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": {"messages": [MESSAGE_EXAMPLE]}})
    messages: list[Message]


class QueueOffset(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"example": {"topic": "orders", "queue_id": 0, "timestamp_ms": 1767225600000, "offset": 17}}
    )
    topic: str
    queue_id: int
    timestamp_ms: int
    offset: int


class Health(BaseModel):
    status: str


class ScheduleLevel(BaseModel):
    level: int
    delay: str = Field(description="The level as configured (message_delay_level), e.g. 5s")
    delay_ms: int
    offset: int = Field(description="Offset in the level's queue of the first message not yet delivered")
    max_offset: int
    waiting: int = Field(description="Messages waiting at this level")
    oldest_age_ms: int | None = Field(description="How long the oldest waiting message has been stored; null when none waits")
    oldest_due_in_ms: int | None = Field(
        description="Time until the oldest waiting message is due (negative: overdue); null when none waits"
    )


class ScheduleStatus(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "levels": [
                    {
                        "level": 1,
                        "delay": "1s",
                        "delay_ms": 1000,
                        "offset": 12,
                        "max_offset": 15,
                        "waiting": 3,
                        "oldest_age_ms": 640,
                        "oldest_due_in_ms": 360,
                    }
                ],
                "delivered": 12,
                "retries": 0,
                "undeliverable": 0,
                "deduplicated": 0,
            }
        }
    )
    levels: list[ScheduleLevel]
    delivered: int = Field(description="Messages put back to their topic since the start")
    retries: int = Field(description="Deliveries refused for a passing reason and retried")
    undeliverable: int = Field(description="Messages skipped for good (gone, corrupt, refused for good)")
    deduplicated: int = Field(description="Messages found already delivered after a crash")


class TimerLateness(BaseModel):
    count: int = Field(description="Deliveries measured since the start")
    mean_ms: float | None
    p50_ms: int | None = Field(description="Median lateness (upper bound of its histogram bucket)")
    p99_ms: int | None = Field(description="99th percentile lateness (upper bound of its histogram bucket)")
    max_ms: int | None
    buckets: list[dict[str, int | None]] = Field(description="Lateness histogram: deliveries at most le_ms late (null: the rest)")


class TimerStatus(BaseModel):
    """Timer messages (delay_ms, deliver_at_ms): what waits, when the next is due, how late deliveries were."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "example": {
                "pending": 3,
                "pending_in_wheel": 3,
                "not_enqueued": 0,
                "next_due_ms": 1767225601500,
                "read_time_ms": 1767225601000,
                "queue_offset": 15,
                "timer_log_bytes": 780,
                "precision_ms": 100,
                "max_delay_ms": 259200000,
                "enqueued": 15,
                "delivered": 12,
                "rolled": 0,
                "deduplicated": 0,
                "undeliverable": 0,
                "retries": 0,
                "lateness": {"count": 12, "mean_ms": 48.5, "p50_ms": 50, "p99_ms": 100, "max_ms": 97, "buckets": []},
            }
        },
    )
    pending: int = Field(description="Timer messages not yet delivered (in the wheel, or stored and not yet enqueued)")
    pending_in_wheel: int
    not_enqueued: int = Field(description="Timer topic messages the enqueue service has not reached yet")
    next_due_ms: int | None = Field(description="When the earliest pending message becomes deliverable; null when none is pending")
    read_time_ms: int = Field(description="Every wheel slot before this time was delivered")
    queue_offset: int = Field(description="Next timer topic queue entry to enqueue")
    timer_log_bytes: int
    precision_ms: int
    max_delay_ms: int
    enqueued: int = Field(description="Timer log units written since the start (rolls included)")
    delivered: int = Field(description="Messages put to their real topic since the start")
    rolled: int = Field(description="Messages beyond the roll window put round the timer topic again")
    deduplicated: int = Field(description="Deliveries found already made before a crash")
    undeliverable: int = Field(description="Messages skipped for good (gone, corrupt, refused for good)")
    retries: int = Field(description="Deliveries refused for a passing reason and retried")
    lateness: TimerLateness


class CleanupStarted(BaseModel):
    model_config = ConfigDict(json_schema_extra={"example": {"rounds": 20, "next_pass_ms": 1767225600000}})
    rounds: int = Field(description="Cleanup passes that may delete expired files at any hour (manual_delete_file_rounds)")
    next_pass_ms: int = Field(description="When the first of them runs (now)")


class StoreFile(BaseModel):
    path: str = Field(description="Relative to the store's root, e.g. commitlog/00000000000000000000")
    kind: str = Field(description="The first directory: commitlog, consumequeue, index, config, ...; root for files directly under it")
    size_bytes: int
    modified_ms: int = Field(description="Last modification, ms since the epoch")


class StoreFiles(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "root": "/data",
                "files": [
                    {"path": "commitlog/00000000000000000000", "kind": "commitlog", "size_bytes": 1073741824, "modified_ms": 1767225600000},
                    {
                        "path": "consumequeue/orders/0/00000000000000000000",
                        "kind": "consumequeue",
                        "size_bytes": 6000000,
                        "modified_ms": 1767225600000,
                    },
                    {"path": "config/topics.json", "kind": "config", "size_bytes": 332, "modified_ms": 1767225600000},
                ],
                "total_bytes": 1079742156,
                "truncated": False,
            }
        }
    )
    root: str = Field(description="The store's root directory on the broker's machine")
    files: list[StoreFile] = Field(description="Sorted by path")
    total_bytes: int
    truncated: bool = Field(description="True when the store holds more files than the 10 000 listed")


class StoreStatus(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "example": {
                "ready": True,
                "flush_mode": "ASYNC_FLUSH",
                "role": "ASYNC_MASTER",
                "runtime": {
                    "commitlog_min_offset": 0,
                    "commitlog_max_offset": 4096,
                    "commitlog_flushed_offset": 4096,
                    "commitlog_group_flushes": 0,
                    "commitlog_flush_waits": 0,
                    "dispatch_lag_bytes": 0,
                    "disk_full": False,
                    "cleanup": {
                        "next_pass_ms": 1767225610000,
                        "last_pass_ms": 1767225600000,
                        "passes": 12,
                        "commitlog_files_deleted": 4,
                        "consume_queue_files_deleted": 31,
                        "index_files_deleted": 2,
                        "manual_rounds_left": 0,
                        "disk_ratio": 0.42,
                        "disk_max_used_ratio": 0.75,
                        "disk_clean_forcibly_ratio": 0.85,
                        "disk_warning_ratio": 0.9,
                    },
                },
                "config": {"mapped_file_size_commit_log_bytes": 1073741824},
                "held_pulls": 0,
                "ha": {
                    "role": "master",
                    "peer_address": "127.0.0.1:51234",
                    "connection_state": "connected",
                    "acknowledged_offset": 4096,
                    "bytes_behind": 0,
                    "diverged": False,
                },
            }
        },
    )
    ready: bool
    flush_mode: str
    role: str
    runtime: dict[str, Any]
    config: dict[str, Any]
    held_pulls: int
    ha: dict[str, Any] = Field(
        description='Replication: {"role": "standalone"}, or the role, peer, connection state, acknowledged offset, bytes behind'
    )
