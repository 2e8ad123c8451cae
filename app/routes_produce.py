"""POST /v1/topics/{topic}/messages: produce one message, a batch, or a raw body.

Invariants:
- Nothing is stored unless every message of the request passed its checks.
- A request is one store `put` (store.PutBatch): one put-lock acquisition for all its messages. Drafts
  to one queue without a delay or a transaction go as a FIELDS batch (the store packs them into
  RocketMQ's batch encoding: no MessageInner per message); the others as MessageInner objects.
- The put itself (a memory copy) runs on the loop; a request served by the server's protocol leaves
  its dispatch to the loop turn's one pass, run before its reply is written (app.dispatch_barrier),
  so the reply still follows the dispatch of its messages. A SYNC_FLUSH put's group commit is awaited
  as a future, one for the durable produces of a loop turn (app.durable_turns), so the loop never
  waits on a flush.
- Queue choice: queue_id, else crc32(sharding_key) mod the write queue count, else round-robin
  (one queue per request, so a batch keeps its order).
- A delayed message's reply names its real queue, its level and when it is due, never the
  offset of the SCHEDULE_TOPIC_XXXX copy: `queue_offset` is null until it is delivered.
- A transactional message (JSON `transaction`, or the X-Tidemq-Transaction header on a raw or
  binary body) is stored as a half message (a PutBatch with the producer group): invisible until
  `POST /v1/transactions/{transaction_id}` commits it; its reply has `transaction_id` and no queue_offset.
- Under SYNC_MASTER the reply awaits the slave's acknowledgement as a future (the store's
  GroupTransferService completes it; shared by the turn's produces likewise), so the loop never
  waits on replication either.
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Scope

from app.born_host import born_host_of
from app.broker import Broker
from app.completion_relay import CompletionRelay
from app.dispatch_barrier import BARRIER_KEY, DispatchBarrier
from app.durable_turns import DurableTurns
from app.held_reply import HELD_REPLY_KEY, HOLDS_REPLY_KEY, HeldReply
from app.models import BinaryBatchSendResult, ProduceBatch, ProduceMessage, SendResult, example_of
from app.params import NAME_SCHEMA, TopicPath
from app.problems import ProblemError, put_problem
from app.produce_binary import BATCH_MEDIA_TYPE, serve_binary
from app.produce_parse import (
    IDEMPOTENCY_HEADER,
    RESERVED_PROPERTIES,
    TRANSACTION_HEADER,
    Draft,
    Limits,
    apply_idempotency_key,
    apply_query_defaults,
    check_producer_group,
    check_transactional,
    parse_json,
    parse_raw,
)
from app.query import query_of
from app.raw_query import raw_query
from app.responses import JsonResponse, docs
from app.strict_route import StrictRoute
from store import (
    HALF_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    TIMER_TOPIC,
    BrokerRole,
    EncodedItems,
    FlushDiskType,
    PackedProduce,
    PutBatch,
    PutMessageResult,
    PutMessageStatus,
    build_message,
    packed_json,
    packed_raw,
    render_produce_reply,
)

# The property names a producer may not set, as store.packed_json takes them.
RESERVED_NAMES = b"\0".join(sorted(name.encode() for name in RESERVED_PROPERTIES))
# produceBinaryBatch's path: a binary batch's own operation (application/octet-stream is taken as one there).
BATCH_PATH = "/v1/topics/{topic}/messages/batch"
OCTET_STREAM = "application/octet-stream"
# Waited beyond the store's sync_flush_timeout_ms before a SYNC_FLUSH put is answered 504 by the broker itself.
FLUSH_WAIT_SLACK_S = 1.0
PRODUCE_PROBLEMS = (
    "BODY_INVALID",
    "BASE64_INVALID",
    "TOPIC_INVALID",
    "TOPIC_RESERVED",
    "TAG_INVALID",
    "KEY_INVALID",
    "DELAY_TOO_LONG",
    "TIMER_NOT_ENABLED",
    "PROPERTIES_INVALID",
    "DELAY_LEVEL_INVALID",
    "PRODUCER_GROUP_INVALID",
    "TRANSACTION_INVALID",
    "MESSAGE_ID_INVALID",
    "BATCH_EMPTY",
    "BATCH_INVALID",
    "TOPIC_NOT_WRITABLE",
    "TOPIC_NOT_FOUND",
    "QUEUE_NOT_FOUND",
    "BODY_TOO_LARGE",
    "MESSAGE_TOO_LARGE",
    "PROPERTIES_TOO_LARGE",
    "BATCH_TOO_LARGE",
    "UNSUPPORTED_MEDIA_TYPE",
    "NOT_MASTER",
    "PAGECACHE_BUSY",
    "SHUTTING_DOWN",
    "SLAVE_NOT_AVAILABLE",
    "STORE_WRITE_FAILED",
    "FLUSH_DISK_TIMEOUT",
    "FLUSH_SLAVE_TIMEOUT",
    "DISK_FULL",
    "DISPATCH_BEHIND",
    "DEDUP_ID_INVALID",
    "DEDUP_PARTIAL",
    "DEDUP_PENDING",
    "DEDUP_WINDOW_FULL",
)


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


# The producer group of a transactional raw body or binary batch (a JSON message has a transaction field).
TRANSACTION_PARAMETER = {
    "name": "X-Tidemq-Transaction",
    "in": "header",
    "required": False,
    "description": "Raw bodies and binary batches only: store as half messages of this producer group (see POST /v1/transactions)",
    "schema": {"type": "string", **NAME_SCHEMA},
}
# A single produce's dedup id (a batch gives dedup_id per message; a binary batch the TIDEMQ_DEDUP_ID property).
IDEMPOTENCY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "One message only (JSON or raw): a key seen on this topic within dedup_window_s is answered 200 with the "
    "first message's ids and duplicate: true, and nothing is stored",
    "schema": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"},
}
PRODUCE_OPENAPI: dict[str, Any] = {
    "parameters": [
        _query("tags", "Raw bodies only: the message tag", {"type": "string", "maxLength": 255}),
        _query("keys", "Raw bodies only: comma-separated keys", {"type": "string"}),
        _query("msg_id", "Raw bodies only: client message id (UNIQ_KEY)", {"type": "string", "maxLength": 128}),
        _query("queue_id", "Raw bodies and binary batches only: the queue", {"type": "integer", "minimum": 0}),
        _query("sharding_key", "Raw bodies only: ordering key", {"type": "string"}),
        _query("delay_level", "Raw bodies only: delay level (0: none)", {"type": "integer", "minimum": 0}),
        _query(
            "delay_ms",
            "Raw bodies and binary batches only: delay in milliseconds, honoured to within timer_precision_ms (at most timer_max_delay_ms)",
            {"type": "integer", "minimum": 0},
        ),
        _query(
            "deliver_at_ms",
            "Raw bodies and binary batches only: delivery time, ms since the epoch, to within timer_precision_ms; a past time means now",
            {"type": "integer", "minimum": 0},
        ),
        TRANSACTION_PARAMETER,
        IDEMPOTENCY_PARAMETER,
    ],
    # A binary batch (application/x-tidemq-batch) is taken here too, but declared on produceBinaryBatch, its own
    # operation: a generator that knows no such media type would otherwise drop or mistype this operation.
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"anyOf": [{"$ref": "#/components/schemas/ProduceMessage"}, {"$ref": "#/components/schemas/ProduceBatch"}]},
                "examples": {
                    "one": {"summary": "One message", "value": example_of(ProduceMessage)},
                    "batch": {"summary": "A batch", "value": example_of(ProduceBatch)},
                },
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}, "example": "hello"},
        },
    },
}

BINARY_BATCH_BODY = {
    "schema": {
        "type": "string",
        "format": "binary",
        "description": "RocketMQ's batch encoding: per message TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0 or the "
        "body's CRC32 & 0x7FFFFFFF) | FLAG 4 | BODY 4+n | PROPERTIES 2+m (name \\x01 value \\x02 ...), big-endian",
    }
}
PRODUCE_BATCH_OPENAPI: dict[str, Any] = {
    "parameters": [
        _query("queue_id", "The queue every message goes to; else round-robin, one queue per request", {"type": "integer", "minimum": 0}),
        *PRODUCE_OPENAPI["parameters"][6:8],  # delay_ms, deliver_at_ms
        TRANSACTION_PARAMETER,
    ],
    # Declared as application/octet-stream, the binary type every generator can send (openapi-python-client warns
    # about and skips any other); application/x-tidemq-batch is taken here as well.
    "requestBody": {
        "required": True,
        "description": f"A binary batch, sent as {OCTET_STREAM} or {BATCH_MEDIA_TYPE}",
        "content": {OCTET_STREAM: BINARY_BATCH_BODY},
    },
}
BINARY_BATCH_REPLY_DOC = {
    "description": "Stored, all in one queue",
    "content": {
        "application/json": {
            "schema": {"$ref": "#/components/schemas/BinaryBatchSendResult"},
            "example": example_of(BinaryBatchSendResult),
        }
    },
}

PRODUCE_REPLY_DOC = {
    "description": "Stored: a SendResult for one message, a BatchSendResult for a JSON batch, a BinaryBatchSendResult for a binary one",
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"$ref": "#/components/schemas/SendResult"},
                    {"$ref": "#/components/schemas/BatchSendResult"},
                    {"$ref": "#/components/schemas/BinaryBatchSendResult"},
                ],
                "discriminator": {
                    "propertyName": "kind",
                    "mapping": {
                        "message": "#/components/schemas/SendResult",
                        "batch": "#/components/schemas/BatchSendResult",
                        "binary_batch": "#/components/schemas/BinaryBatchSendResult",
                    },
                },
            },
            "example": example_of(SendResult),
        }
    },
}


DUPLICATE_TEXT = "Not stored: every message's dedup id was seen on this topic within dedup_window_s; the reply names the first messages (duplicate: true)"
DUPLICATE_REPLY_DOC = {"description": DUPLICATE_TEXT, "content": PRODUCE_REPLY_DOC["content"]}
BINARY_DUPLICATE_REPLY_DOC = {"description": DUPLICATE_TEXT, "content": BINARY_BATCH_REPLY_DOC["content"]}


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


# The request headers a produce reads, by their raw (lower-case) names, and where produce_headers puts each.
_PRODUCE_HEADER_SLOTS = {b"content-type": 0, TRANSACTION_HEADER.encode(): 1, IDEMPOTENCY_HEADER.encode(): 2}


def produce_headers(scope: Scope) -> tuple[str, str | None, str | None]:
    """A produce's media type (`media_type`), transaction header and Idempotency-Key, in one pass over the raw
    headers; the first of a repeated header counts, as `Request.headers.get` reads it."""
    found: list[bytes | None] = [None, None, None]
    slots = _PRODUCE_HEADER_SLOTS
    for name, value in scope["headers"]:
        slot = slots.get(name)
        if slot is not None and found[slot] is None:
            found[slot] = value
    content_type, transaction, key = found
    media = content_type.decode("latin-1").partition(";")[0].strip().lower() if content_type is not None else ""
    return media, None if transaction is None else transaction.decode("latin-1"), None if key is None else key.decode("latin-1")


def named_queue(topic: str, queues: int, queue_id: int) -> int:
    """The queue a message names, when the topic has it."""
    if queue_id >= queues:
        raise ProblemError("QUEUE_NOT_FOUND", f"topic {topic} has write queues 0..{queues - 1}; there is no queue {queue_id}")
    return queue_id


def packable(drafts: list[Draft]) -> bool:
    """Whether the drafts can go as one FIELDS batch: none is delayed."""
    return not any(d.delay_level or d.timer for d in drafts)


@functools.lru_cache(maxsize=16)
def host_hex(store_host: bytes) -> str:
    """The store host as an offset message id's prefix (a broker has one or two: cached)."""
    return store_host.hex().upper()


@functools.lru_cache(maxsize=16)
def host_hex_bytes(store_host: bytes) -> bytes:
    """`host_hex` as ASCII bytes."""
    return host_hex(store_host).encode("ascii")


def packed_reply(uniq_keys: list[str], items: EncodedItems, is_batch: bool) -> dict[str, Any]:
    """The SendResult (one message) or BatchSendResult of a FIELDS put, built in one pass over the offsets."""
    host = host_hex(items.store_host)
    queue_id, first, stamp = items.queue_id, items.first_queue_offset, items.store_timestamp
    if not is_batch:  # one message: its offset without the array of every offset
        offset = items.first_offset()
        return {
            "kind": "message", "msg_id": uniq_keys[0], "offset_msg_id": f"{host}{offset:016X}", "queue_id": queue_id,
            "queue_offset": first, "commitlog_offset": offset, "store_timestamp": stamp,
        }  # fmt: skip
    offsets = items.commitlog_offsets()
    results: list[dict[str, Any]] = [
        {
            "kind": "message",
            "msg_id": key,
            "offset_msg_id": f"{host}{offset:016X}",
            "queue_id": queue_id,
            "queue_offset": first + i,
            "commitlog_offset": offset,
            "store_timestamp": stamp,
        }
        for i, (key, offset) in enumerate(zip(uniq_keys, offsets, strict=True))
    ]
    return {"kind": "batch", "results": results} if is_batch else results[0]


def duplicate_reply(items: Sequence[Any], is_batch: bool) -> JsonResponse:
    """The 200 of a produce whose dedup ids were all seen: the first messages' ids (store.DuplicateItem), nothing stored."""
    results = [
        {
            "kind": "message",
            "msg_id": item.uniq_key,
            "offset_msg_id": item.msg_id,
            "queue_id": item.queue_id,
            "queue_offset": None if item.moved else item.logics_offset,
            "commitlog_offset": item.wrote_offset,
            "store_timestamp": item.store_timestamp,
            "duplicate": True,
        }
        for item in items
    ]
    return JsonResponse({"kind": "batch", "results": results, "duplicate": True} if is_batch else results[0], 200)


def result_of(msg: Any, queue_id: int, item: Any, draft: Draft, levels_ms: list[int]) -> dict[str, Any]:
    delay_level = draft.delay_level
    # The store moved a message due later to the timer topic (a past time stays where it was put).
    timer = msg.topic == TIMER_TOPIC
    half = msg.topic == HALF_TOPIC
    out = {
        "kind": "message",
        "msg_id": msg.properties[PROPERTY_UNIQ_KEY],
        "offset_msg_id": item.msg_id,
        "queue_id": queue_id,
        # A delayed message's logics_offset is its place in SCHEDULE_TOPIC_XXXX or the timer topic, not in queue_id;
        # a half message's, its place in the half topic (it gets one in queue_id when committed).
        "queue_offset": None if delay_level or timer or half else item.logics_offset,
        "commitlog_offset": item.wrote_offset,
        "store_timestamp": item.store_timestamp,
    }
    if half:
        out["transaction_id"] = item.msg_id  # the half's offset message id
    if delay_level:
        out["delay_level"] = delay_level
        out["deliver_at_ms"] = item.store_timestamp + levels_ms[delay_level - 1]
    elif timer and draft.timer is not None:
        name, value = draft.timer
        out["deliver_at_ms"] = int(value) if name == PROPERTY_TIMER_DELIVER_MS else item.store_timestamp + int(value)
    return out


class Producer:
    """Serves produce requests: parse and check everything, choose queues, put, answer."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.held_pulls = broker.held  # the held pulls a put lane's put answers (`put_lane`)
        config = broker.config
        self.levels_ms = config.delay_levels_ms()
        self.limits = Limits(config.max_message_size_bytes, config.max_batch_messages, self.levels_ms, config.timer_max_delay_ms)
        # The store's put future has no deadline of its own: a stalled disk or slave must not hold the request forever.
        # Each wait (flush, then slave) is bounded by sync_flush_timeout_ms in the store.
        sync_master = config.broker_role is BrokerRole.SYNC_MASTER
        waits = (config.flush_disk_type is FlushDiskType.SYNC_FLUSH) + sync_master
        self.flush_wait_s = max(1, waits) * config.sync_flush_timeout_ms / 1000.0 + FLUSH_WAIT_SLACK_S
        self.timeout_code = "FLUSH_SLAVE_TIMEOUT" if sync_master else "FLUSH_DISK_TIMEOUT"
        # How long the loop waits for a turn's durability itself (app.durable_turns); below the wait's own deadline.
        self.loop_wait_s = min(broker.settings.durable_wait_in_loop_ms / 1000.0, self.flush_wait_s / 2)
        # How long a group smaller than the last one stays open (app.durable_turns); only with the loop's own wait.
        self.linger_s = min(broker.settings.durable_group_linger_us / 1e6, self.flush_wait_s / 2) if self.loop_wait_s else 0.0
        self.relay: CompletionRelay | None = None  # made on the loop at the first durable wait
        self.turns: DurableTurns | None = None  # likewise

    async def drafts(self, request: Request, media: str, body: bytes | None = None) -> tuple[list[Draft], bool]:
        """The request's messages (`media`: its content type, without parameters; `body`: when read already) and
        whether it was a batch."""
        if media == "application/json":
            drafts, is_batch = parse_json(await request.body() if body is None else body, self.limits)
            if request.scope["query_string"]:  # defaults for every message (its own fields win)
                apply_query_defaults(drafts, query_of(request.scope), self.limits)
            return drafts, is_batch
        if media == "application/octet-stream":
            return [parse_raw(await request.body(), query_of(request.scope), self.limits)], False
        content_type = request.headers.get("content-type", "")
        detail = f"Content-Type must be application/json, application/octet-stream or {BATCH_MEDIA_TYPE}, not {content_type[:80]!r}"
        raise ProblemError("UNSUPPORTED_MEDIA_TYPE", detail)

    def choose_queue(self, draft: Draft, topic: str, queues: int, round_robin: list[int]) -> int:
        if draft.queue_id is not None:
            return named_queue(topic, queues, draft.queue_id)
        if draft.sharding_key is not None:
            return zlib.crc32(draft.sharding_key.encode("utf-8")) % queues
        if not round_robin:
            round_robin.append(self.broker.next_round_robin(topic, queues))
        return round_robin[0]

    def _relay(self) -> CompletionRelay:
        if self.relay is None:
            self.relay = CompletionRelay(asyncio.get_running_loop())
        return self.relay

    def _not_confirmed(self) -> ProblemError:
        detail = (
            f"the message is stored but its durability was not confirmed within {self.flush_wait_s:.1f} s; "
            "it may be delivered, do not resend blindly"
        )
        return ProblemError(self.timeout_code, detail, {"stored": True})

    def _turns(self) -> DurableTurns:
        if self.turns is None:
            self.turns = DurableTurns(self.store.durable_through, self._relay(), self.flush_wait_s, self.loop_wait_s, self.linger_s)
            self.broker.durable_turns = self.turns  # read by /metrics
        return self.turns

    async def durable(self, result: PutMessageResult) -> PutMessageResult:
        """`result` of a put this producer made (`put`: answered at once) whose flush and slave waits the store
        left owed, once the turn's shared wait (app.durable_turns) ended (the loop blocked at most loop_wait_s)."""
        status = await self._turns().wait(result.end_offset)
        problem = self.durability_problem(result, status, None)
        if problem is not None:
            raise problem
        result.durability_owed = False
        return result

    def held(self, result: PutMessageResult, scope: Scope) -> bool:
        """Whether the reply to `result`, a put whose durability wait is owed, is held by the request's connection
        until the wait ends (app.held_reply: a request the connection serves itself) instead of awaited (`durable`);
        then the caller answers as if the wait had ended PUT_OK."""
        if not scope.get(HOLDS_REPLY_KEY):
            return False
        held = HeldReply(functools.partial(self.durability_problem, result))
        self._turns().hold(result.end_offset, held)
        scope[HELD_REPLY_KEY] = held
        return True

    def durable_turns(self) -> DurableTurns:
        """The loop turns' durability groups (app.durable_turns), made at the first ask: the produce lane holds its
        replies there (`DurableTurns.hold`)."""
        return self._turns()

    def durability_problem(
        self, result: PutMessageResult, status: PutMessageStatus | None, exc: BaseException | None
    ) -> BaseException | None:
        """What a put answers when its durability wait ended with `status` (None: past its deadline) or could not be
        queued (`exc`); None when the wait confirmed it (PUT_OK)."""
        if exc is not None:
            return exc
        if status is None:
            return self._not_confirmed()
        if status is PutMessageStatus.PUT_OK:
            return None
        what = (
            "stored, not confirmed durable"
            if status is PutMessageStatus.FLUSH_DISK_TIMEOUT
            else "stored on the master, not confirmed on a slave"
        )
        return put_problem(PutMessageResult(status, items=result.items, detail=what))

    def put(self, batch: PutBatch, scope: Scope) -> PutMessageResult:
        """Put `batch`, answered at once: its durability wait, when owed, is `durable`'s, shared with the loop
        turn's other puts (app.durable_turns); a request whose reply waits for the server's dispatch barrier
        (app.dispatch_barrier) leaves the dispatch to the loop turn's one pass."""
        batch.defer_durability = True  # so the store answers with no waiter (MessageStore.put_answer)
        barrier: DispatchBarrier | None = scope.get(BARRIER_KEY)
        if barrier is None:
            return self.store.put_answer(batch)[0]
        batch.defer_dispatch = True
        result = self.store.put_answer(batch)[0]
        barrier.owe()
        return result

    def put_lane(self, batch: PutBatch, scope: Scope) -> PutMessageResult | None:
        """`put` of a packed batch when the store's put lane takes it (MessageStore.put_lane); None, nothing stored,
        when it declines. The lane stores a plain batch in the queue it names: its put answers the pulls held at its
        first message's offset with its messages before the dispatch pass it owes (app.long_poll `deliver`)."""
        batch.defer_durability = True
        barrier: DispatchBarrier | None = scope.get(BARRIER_KEY)
        batch.defer_dispatch = barrier is not None
        answer = self.store.put_lane(batch)
        if answer is None:
            return None
        if barrier is not None:
            items = answer[0].items
            if type(items) is EncodedItems and self.held_pulls.waits_on((batch.topic, items.queue_id)):
                self.held_pulls.deliver((batch.topic, items.queue_id), items.first_queue_offset, items.spans())
            barrier.owe()
        return answer[0]

    async def stored(self, batch: PutBatch, scope: Scope, lane: bool = False) -> PutMessageResult:
        """The store's answer to `batch`, awaited without blocking the loop; a problem when it was not stored
        (`lane`: the put lane is asked first, `put_lane`)."""
        result = self.put_lane(batch, scope) if lane else None
        if result is None:
            result = self.put(batch, scope)
        if result.durability_owed and not self.held(result, scope):
            result = await self.durable(result)
        if not result.ok:
            raise put_problem(result)
        return result

    async def serve_batch(self, request: Request) -> Response:
        """Serve produceBinaryBatch: the body is a binary batch, sent as application/x-tidemq-batch or octet-stream."""
        if media_type(request) not in (BATCH_MEDIA_TYPE, OCTET_STREAM):
            content_type = request.headers.get("content-type", "")
            detail = f"Content-Type must be {BATCH_MEDIA_TYPE} or {OCTET_STREAM}, not {content_type[:80]!r}"
            raise ProblemError("UNSUPPORTED_MEDIA_TYPE", detail)
        return await serve_binary(self, request)

    async def serve_packed(self, request: Request, topic: str, packed: PackedProduce) -> Response:
        """Serve a produce the store packed (`packed_json`, `packed_raw`): what `serve` does with the same messages, parsed."""
        config = self.broker.writable_topic(topic) or await self.broker.topic_for_produce(topic, request)
        queues = config.write_queue_nums
        queue_id = self.broker.next_round_robin(topic, queues) if packed.queue_id < 0 else named_queue(topic, queues, packed.queue_id)
        batch = PutBatch.of_packed(topic, queue_id, packed, born_host_of(request.scope), dedup=True)
        result = await self.stored(batch, request.scope, lane=True)
        items = result.items
        assert isinstance(items, EncodedItems) and not result.duplicate  # a packed body has no dedup ids
        reply = render_produce_reply(
            packed.head, packed.first, host_hex_bytes(items.store_host), items.queue_id, items.first_queue_offset,
            items.store_timestamp, items.offsets, packed.is_batch,
        )  # fmt: skip
        return JsonResponse(reply, 201)

    async def serve(self, request: Request) -> Response:
        """Serve a produce; the topic is `request.path_params["topic"]` (see app.hot_routes). Without the transaction
        and Idempotency-Key headers, a JSON body of the common shape and no query parameters, or a raw body whose query
        app.raw_query takes (a queue, a tag, keys), is packed by the store (`packed_json`, `packed_raw`), the same bytes as its
        parsed message(s) would be; any other goes through parse_json or parse_raw."""
        media, header, key = produce_headers(request.scope)
        if media == BATCH_MEDIA_TYPE:
            return await serve_binary(self, request)
        topic = request.path_params["topic"]
        body = None
        if header is None and key is None:
            query: bytes = request.scope["query_string"]
            packed: PackedProduce | None = None
            if media == "application/json" and not query:
                body, limits = await request.body(), self.limits
                packed = packed_json(body, limits.max_batch_messages, limits.max_message_size_bytes, RESERVED_NAMES)
            elif media == OCTET_STREAM:
                raw = raw_query(query)
                if raw is not None:
                    body = await request.body()
                    packed = packed_raw(body, raw.queue_id, self.limits.max_message_size_bytes, raw.properties)
            if packed is not None:
                return await self.serve_packed(request, topic, packed)
        drafts, is_batch = await self.drafts(request, media, body)
        if header is not None:
            header_group = check_producer_group(header)
            for draft in drafts:  # a JSON message's own transaction field wins
                if draft.transaction is None:
                    draft.transaction = header_group
        if key is not None:
            apply_idempotency_key(drafts, is_batch, key)
        group = check_transactional(drafts)
        config = self.broker.writable_topic(topic) or await self.broker.topic_for_produce(topic, request)
        queues = config.write_queue_nums
        round_robin: list[int] = []
        queue_ids = [self.choose_queue(d, topic, queues, round_robin) for d in drafts]
        born_host = born_host_of(request.scope)  # per request: the put sets the v6 flag from its length
        if group is None and packable(drafts) and queue_ids.count(queue_ids[0]) == len(queue_ids):
            batch = PutBatch.of_fields(topic, queue_ids[0], drafts, born_host, dedup=True)
            result = await self.stored(batch, request.scope)
            if result.duplicate:
                return duplicate_reply(result.items, is_batch)
            assert isinstance(result.items, EncodedItems)
            return JsonResponse(packed_reply(batch.uniq_keys, result.items, is_batch), 201)
        msgs = [
            build_message(
                topic,
                d.body,
                q,
                tags=d.tags,
                keys=d.keys,
                properties=d.all_properties(),
                uniq_key=d.msg_id,
                delay_level=d.delay_level,
                born_host=born_host,
            )
            # Chosen before the put: the store moves a delayed message to SCHEDULE_TOPIC_XXXX or the timer topic,
            # a transactional one to the half topic.
            for d, q in zip(drafts, queue_ids, strict=True)
        ]
        result = await self.stored(PutBatch.of(msgs, producer_group=group, dedup=True), request.scope)
        if result.duplicate:
            return duplicate_reply(result.items, is_batch)
        levels_ms = self.levels_ms
        if is_batch:
            results = [result_of(m, q, item, d, levels_ms) for m, q, item, d in zip(msgs, queue_ids, result.items, drafts, strict=True)]
            return JsonResponse({"kind": "batch", "results": results}, 201)
        return JsonResponse(result_of(msgs[0], queue_ids[0], result.items[0], drafts[0], levels_ms), 201)


def router(broker: Broker) -> tuple[APIRouter, Producer]:
    """The routes, and the producer whose handlers app.hot_routes serves the hot paths with (`serve`: produce,
    `serve_batch`: produceBinaryBatch) and whose durability waits the produce lane shares (app.produce_lane)."""
    api = APIRouter(tags=["produce"], route_class=StrictRoute)
    producer = Producer(broker)
    problems = {k: v for k, v in docs(None, 201, *PRODUCE_PROBLEMS).items() if k != 201}  # each route has its own 201

    @api.post(
        "/v1/topics/{topic}/messages",
        operation_id="produce",
        summary='Send one message, a batch ({"messages": [...]}) or a raw body (a binary batch: see produceBinaryBatch)',
        status_code=201,
        responses={201: PRODUCE_REPLY_DOC, 200: DUPLICATE_REPLY_DOC, **problems},
        openapi_extra=PRODUCE_OPENAPI,
    )
    async def produce(topic: TopicPath, request: Request) -> Response:
        return await producer.serve(request)

    @api.post(
        BATCH_PATH,
        operation_id="produceBinaryBatch",
        summary="Send a binary batch (RocketMQ's batch encoding) to one queue",
        status_code=201,
        responses={201: BINARY_BATCH_REPLY_DOC, 200: BINARY_DUPLICATE_REPLY_DOC, **problems},
        openapi_extra=PRODUCE_BATCH_OPENAPI,
    )
    async def produce_binary_batch(topic: TopicPath, request: Request) -> Response:
        return await producer.serve_batch(request)

    return api, producer
