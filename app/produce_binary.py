"""Binary batch produce: `POST /v1/topics/{topic}/messages` with `Content-Type: application/x-tidemq-batch`.

The body is RocketMQ's batch encoding (MessageDecoder.encodeMessages; store.pack_batch
builds it): per message TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0, or the body's CRC32 masked
to 31 bits, then checked) | FLAG 4 | BODY 4+n | PROPERTIES 2+m, big-endian.

Invariants:
- The whole body is checked by the check_batch kernel (every length against the body and the
  store's limits, each message's properties as the JSON produce checks them) before a topic is
  made for it; a refused batch stores nothing and answers a 4xx problem naming the message.
- The messages go to one queue (`queue_id`, else round-robin, one queue per request) in one
  store call: a plain batch (no delay, no transaction) to a topic that exists takes the put lane
  (MessageStore.put_lane: the same check and the append in one kernel call); a batch the lane
  declines (a refusal, a dedup id, the put lock held, a file to roll) is then checked, so that a
  refusal names its message, and put as an ENCODED PutBatch. No per-message Python work on the
  way in or in the reply.
- The reply is compact: the first queue offset (message i has first_queue_offset + i), the
  commitlog offsets, and the offset message id prefix (the store host as 16 hex digits).
- `delay_ms` / `deliver_at_ms` make every message of the batch a timer message due then
  (the batch's `deliver_at_ms`; the store's timer hook makes messages of it), its first_queue_offset
  is null (the messages get offsets in the queue when delivered) and the reply has deliver_at_ms.
- A message carrying the TIDEMQ_DEDUP_ID property (idempotent produce, docs/http-api.md) makes the
  store put the batch message by message (each id joins its KEYS); a batch whose every id was seen
  is answered 200 with `duplicate` and the first messages' offsets, nothing stored.
- With the X-Tidemq-Transaction header every message is a half message of that producer group
  (its own transaction); the reply has `transaction_ids` and a null first_queue_offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from app.born_host import born_host_of
from app.problems import ProblemError, put_problem
from app.produce_parse import TRANSACTION_HEADER, check_producer_group, parse_batch_query
from app.query import query_of
from app.responses import JsonResponse
from store import BatchError, BatchErrorCode, EncodedItems, PutBatch, packed_binary

if TYPE_CHECKING:
    from app.routes_produce import Producer

BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
# Why check_batch refused a batch -> (problem code, what is wrong).
BATCH_PROBLEMS: dict[BatchErrorCode, tuple[str, str]] = {
    BatchErrorCode.TRUNCATED: ("BATCH_INVALID", "the body ends inside the message, or its TOTALSIZE points past the body"),
    BatchErrorCode.BAD_TOTAL: ("BATCH_INVALID", "TOTALSIZE disagrees with the body and properties lengths"),
    BatchErrorCode.BAD_MAGIC: ("BATCH_INVALID", "MAGICCODE is not 0"),
    BatchErrorCode.BAD_CRC: ("BATCH_INVALID", "BODYCRC is neither 0 nor the body's CRC32 masked to 31 bits"),
    BatchErrorCode.BAD_BODY: ("BATCH_INVALID", "the body length is negative"),
    BatchErrorCode.BAD_PROPERTIES: ("PROPERTIES_TOO_LARGE", "the properties are longer than 32767 bytes"),
    BatchErrorCode.BODY_TOO_LARGE: ("MESSAGE_TOO_LARGE", "the body is larger than the store's max_message_size_bytes"),
    BatchErrorCode.PROPERTIES_TOO_LARGE: ("PROPERTIES_TOO_LARGE", "the properties are larger than the store's max_properties_size_bytes"),
    BatchErrorCode.BAD_PROPERTY: (
        "PROPERTIES_INVALID",
        "the properties are not name \\x01 value \\x02 pairs of UTF-8 with non-empty names",
    ),
    BatchErrorCode.RESERVED_PROPERTY: (
        "PROPERTIES_INVALID",
        "a delay (DELAY, TIMER_DELIVER_MS, TIMER_DELAY_MS, TIMER_DELAY_SEC), the real destination (REAL_TOPIC, REAL_QID), the "
        "timer's marks (TIMER_OUT_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS, TIMER_ROLL_TIMES) and the transaction's (TRAN_MSG, "
        "PGROUP, TRANSACTION_CHECK_TIMES, TIDEMQ_TRAN_ACTION) cannot be set on a batch's messages (a batch is delayed as a "
        "whole: delay_ms or deliver_at_ms; made transactional by the X-Tidemq-Transaction header)",
    ),
    BatchErrorCode.BAD_TAGS: ("TAG_INVALID", "TAGS must be at most 255 characters, not '*', without '||' or control characters"),
    BatchErrorCode.BAD_UNIQ_KEY: ("MESSAGE_ID_INVALID", "UNIQ_KEY must be 1..128 characters without spaces"),
    BatchErrorCode.TOO_MANY: ("BATCH_TOO_LARGE", "the batch holds more messages than the store's max_batch_messages"),
}
assert set(BATCH_PROBLEMS) == set(BatchErrorCode)


def batch_problem(error: BatchError) -> ProblemError:
    """The problem of a batch check_batch refused."""
    reason = BatchErrorCode(error.args[1])
    code, what = BATCH_PROBLEMS[reason]
    position = error.args[2]
    detail = f"message {error.index} (at byte {position}): {what}; nothing was stored"
    return ProblemError(code, detail, {"batch_error": reason.name, "index": error.index, "position": position})


async def stored_by_lane(producer: Producer, request: Request, batch: PutBatch) -> Response | None:
    """A plain batch (no delay, no transaction) to a topic that exists, stored by the store's put lane: checked and
    appended in one kernel call. None when the lane declines it, with nothing stored: then the batch is checked
    (a refusal names its message) and put as an ENCODED batch, which also takes the messages with a dedup id."""
    result = producer.put_lane(batch, request.scope)
    if result is None:
        return None
    if result.durability_owed and not producer.held(result, request.scope):
        result = await producer.durable(result)
    if not result.ok:
        raise put_problem(result)
    assert isinstance(result.items, EncodedItems)
    return JsonResponse(reply_of(batch.queue_id, result.items), 201)


def reply_of(queue_id: int, items: EncodedItems) -> dict[str, Any]:
    return {
        "kind": "binary_batch",
        "queue_id": queue_id,
        "first_queue_offset": items.first_queue_offset,
        "count": len(items),
        "store_timestamp": items.store_timestamp,
        "offset_msg_id_prefix": items.store_host.hex().upper(),
        "commitlog_offsets": items.commitlog_offsets(),
    }


def items_reply_of(queue_id: int, items: Any, store_host: bytes, duplicate: bool) -> dict[str, Any]:
    """The reply of a batch with dedup ids: stored (their queue offsets follow the first) or, `duplicate`, the
    first messages' (store.DuplicateItem: nothing was stored)."""
    first = items[0]
    reply = {
        "kind": "binary_batch",
        "queue_id": queue_id,
        "first_queue_offset": None if getattr(first, "moved", False) else first.logics_offset,
        "count": len(items),
        "store_timestamp": first.store_timestamp,
        "offset_msg_id_prefix": store_host.hex().upper(),
        "commitlog_offsets": [item.wrote_offset for item in items],
    }
    if duplicate:
        reply["duplicate"] = True
    return reply


def timer_reply_of(queue_id: int, items: Any, deliver_at_ms: int, store_host: bytes) -> dict[str, Any]:
    """The reply of a batch the store took as timer messages (or, for a past time, put at once to the queue)."""
    first = items[0]
    moved = first.queue_id != queue_id or deliver_at_ms > first.store_timestamp
    return {
        "kind": "binary_batch",
        "queue_id": queue_id,
        "first_queue_offset": None if moved else first.logics_offset,
        "count": len(items),
        "store_timestamp": first.store_timestamp,
        "offset_msg_id_prefix": store_host.hex().upper(),
        "commitlog_offsets": [item.wrote_offset for item in items],
        "deliver_at_ms": deliver_at_ms,
    }


def transaction_reply_of(queue_id: int, items: Any, store_host: bytes) -> dict[str, Any]:
    """The reply of a batch stored as half messages: one transaction id per message, no queue offset until committed."""
    return {
        "kind": "binary_batch",
        "queue_id": queue_id,
        "first_queue_offset": None,
        "count": len(items),
        "store_timestamp": items[0].store_timestamp,
        "offset_msg_id_prefix": store_host.hex().upper(),
        "commitlog_offsets": [item.wrote_offset for item in items],
        "transaction_ids": [item.msg_id for item in items],
    }


async def serve_binary(producer: Producer, request: Request) -> Response:
    """Check and store a binary batch (the caller matched the media type)."""
    topic = request.path_params["topic"]
    queue_id, deliver_at_ms = parse_batch_query(query_of(request.scope), producer.limits)
    body = await request.body()
    born_host = born_host_of(request.scope)  # per request: the put sets the v6 flag from its length
    group = request.headers.get(TRANSACTION_HEADER)
    writable = producer.broker.writable_topic(topic)
    turn: int | None = None  # the round robin's queue taken for the lane, given back when the batch is refused
    if group is None and deliver_at_ms is None and writable is not None and (queue_id is None or queue_id < writable.write_queue_nums):
        if queue_id is None:
            queue_id = turn = producer.broker.next_round_robin(topic, writable.write_queue_nums)
        lane = await stored_by_lane(producer, request, PutBatch.of_packed(topic, queue_id, packed_binary(body, queue_id), born_host))
        if lane is not None:
            return lane
    store = producer.store
    try:
        checked = store.check_batch(body)
        if not checked.messages:
            raise ProblemError("BATCH_EMPTY", "the body holds no message")
    except (BatchError, ProblemError) as e:
        if turn is not None:
            producer.broker.give_back_round_robin(topic, turn)  # nothing was stored: the turn goes to the next request
        raise batch_problem(e) if isinstance(e, BatchError) else e from None
    if group is not None and deliver_at_ms is not None:  # before the round robin: a refused request takes no turn
        raise ProblemError("TRANSACTION_INVALID", "a transactional message cannot be delayed (delay_ms, deliver_at_ms)")
    producer_group = None if group is None else check_producer_group(group)
    config = writable or await producer.broker.topic_for_produce(topic, request)
    queues = config.write_queue_nums
    if queue_id is None:
        queue_id = producer.broker.next_round_robin(topic, queues)
    elif queue_id >= queues:
        raise ProblemError("QUEUE_NOT_FOUND", f"topic {topic} has write queues 0..{queues - 1}; there is no queue {queue_id}")
    result = producer.put(
        PutBatch.of_encoded(topic, queue_id, checked, born_host, deliver_at_ms, producer_group, dedup=True), request.scope
    )
    if result.durability_owed and not producer.held(result, request.scope):
        result = await producer.durable(result)
    if not result.ok:
        raise put_problem(result)
    if result.duplicate:
        return JsonResponse(items_reply_of(queue_id, result.items, producer.broker.config.store_host_bytes(), True), 200)
    if producer_group is not None:
        return JsonResponse(transaction_reply_of(queue_id, result.items, producer.broker.config.store_host_bytes()), 201)
    if deliver_at_ms is not None:
        return JsonResponse(timer_reply_of(queue_id, result.items, deliver_at_ms, producer.broker.config.store_host_bytes()), 201)
    if not isinstance(result.items, EncodedItems):  # messages with TIDEMQ_DEDUP_ID are put one by one (their KEYS get the id)
        return JsonResponse(items_reply_of(queue_id, result.items, producer.broker.config.store_host_bytes(), False), 201)
    return JsonResponse(reply_of(queue_id, result.items), 201)
