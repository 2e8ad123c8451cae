"""JSON produce through the checked-batch path: drafts packed into RocketMQ's batch encoding.

Most JSON produces (one message, or a batch without delays to one queue) need nothing the
binary batch path lacks, so they skip the per-message MessageInner objects and are appended
by the encode kernel as one checked batch. The stored bytes carry the same properties in the
same order as `store.build_message` writes them (user properties, TAGS, KEYS, UNIQ_KEY).
A draft with a delay goes the general way, since the store moves it to SCHEDULE_TOPIC_XXXX or
the timer topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.problems import put_problem
from app.produce_binary import batch_problem
from app.produce_parse import Draft
from app.responses import JsonResponse
from store import BatchError, EncodedItems, new_uniq_keys, pack_batch

if TYPE_CHECKING:
    from app.routes_produce import Producer


def packable(drafts: list[Draft]) -> bool:
    """Whether the drafts can go as one checked batch: none is delayed."""
    return not any(d.delay_level or d.timer for d in drafts)


def properties_of(draft: Draft, uniq_key: str) -> bytes:
    """The draft's properties in RocketMQ's `name \\x01 value \\x02` encoding, as build_message orders them."""
    text = "".join(f"{k}\x01{v}\x02" for k, v in draft.properties.items()) if draft.properties else ""
    if draft.tags:
        text += f"TAGS\x01{draft.tags}\x02"
    if draft.keys:
        text += f"KEYS\x01{' '.join(draft.keys)}\x02"
    return f"{text}UNIQ_KEY\x01{uniq_key}\x02".encode()


def packed_reply(uniq_keys: list[str], items: EncodedItems, is_batch: bool) -> JsonResponse:
    """The SendResult (one message) or BatchSendResult of a packed put, built in one pass over the offsets."""
    host = items.store_host.hex().upper()
    queue_id, first, stamp = items.queue_id, items.first_queue_offset, items.store_timestamp
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
    return JsonResponse({"kind": "batch", "results": results} if is_batch else results[0], 201)


async def serve_packed(
    producer: Producer, topic: str, queue_id: int, drafts: list[Draft], is_batch: bool, born_host: bytes
) -> JsonResponse:
    """Store packable drafts to one queue and answer as the general path would; `born_host` is the client's."""
    missing = [d for d in drafts if d.msg_id is None]
    fresh = iter(new_uniq_keys(len(missing)))
    uniq_keys = [d.msg_id if d.msg_id is not None else next(fresh) for d in drafts]
    data = pack_batch([(d.body, properties_of(d, k), 0) for d, k in zip(drafts, uniq_keys, strict=True)])
    store = producer.store
    try:
        checked = store.check_batch(data)
    except BatchError as e:  # the drafts passed the same checks; only a store limit below the app's gets here
        raise batch_problem(e) from None
    future = store.put_batch_future(topic, queue_id, checked, born_host)
    result = future.result() if future.done() else await producer.wait_durable(future)
    if not result.ok:
        raise put_problem(result)
    assert isinstance(result.items, EncodedItems)
    return packed_reply(uniq_keys, result.items, is_batch)
