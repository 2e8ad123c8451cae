"""Queries: by key or message id (IndexFile), by offset message id, and queue offset by time.

Invariants: every lookup that may read from disk runs in the read pool; a malformed id or
time range is a 400 before the store is asked.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.access_check import require
from app.acl import SUB
from app.broker import BrokerDep
from app.latest_messages import latest_messages
from app.message_view import message_json
from app.models import Message, QueryResult, QueueOffset
from app.params import OffsetMsgIdPath, QueuePath, TopicPath
from app.problems import ProblemError
from app.responses import JsonResponse, docs
from app.strict_route import StrictRoute
from store import OFFSET_MSG_ID_LENGTHS, PROPERTY_KEYS, decode_offset_msg_id, split_keys

HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
# Largest timestamp accepted (int64 milliseconds).
MAX_TIMESTAMP_MS = 2**63 - 1


api = APIRouter(tags=["query"], route_class=StrictRoute)


@api.get(
    "/v1/topics/{topic}/messages",
    operation_id="queryMessages",
    summary="A topic's messages by key (KEYS), by client message id (UNIQ_KEY) or both, in a time range; with neither, its newest",
    responses=docs(QueryResult, 200, "TOPIC_INVALID", "TOPIC_NOT_FOUND", "TOPIC_NOT_READABLE", "MAX_INVALID", "REQUEST_INVALID"),
)
async def query(
    broker: BrokerDep,
    topic: TopicPath,
    key: Annotated[
        str | None, Query(description="A key given at send time (with msg_id: messages with both)", json_schema_extra={"minLength": 1})
    ] = None,
    msg_id: Annotated[
        str | None, Query(description="A client message id, UNIQ_KEY (with key: messages with both)", json_schema_extra={"minLength": 1})
    ] = None,
    begin_ms: Annotated[
        int, Query(ge=0, le=MAX_TIMESTAMP_MS, description="Earliest store time, ms since the epoch (past end_ms: nothing is found)")
    ] = 0,
    end_ms: Annotated[
        int | None, Query(ge=0, le=MAX_TIMESTAMP_MS, description="Latest store time, ms since the epoch (default: now)")
    ] = None,
    max_count: Annotated[
        int,
        Query(alias="max", ge=1, description="Most messages to return: 1..max_msgs_num_batch (64 by default); more is 400 MAX_INVALID"),
    ] = 32,
) -> Response:
    """By key or message id the index answers (newest first); with neither, the newest messages of every queue
    (app/latest_messages.py)."""
    store = broker.store
    config = broker.topic_config(topic)
    if key == "" or msg_id == "":
        raise ProblemError("REQUEST_INVALID", "key and msg_id, when given, are non-empty")
    if max_count > store.config.max_msgs_num_batch:
        # Refused rather than clamped, so a caller never takes a short answer for all there is.
        raise ProblemError("MAX_INVALID", f"max is at most {store.config.max_msgs_num_batch} (the store's max_msgs_num_batch)")
    end = end_ms if end_ms is not None else int(time.time() * 1000) + 1
    if begin_ms > end:
        return JsonResponse({"messages": []})  # an empty range holds nothing
    limit = store.config.max_message_size_bytes
    if key is None and msg_id is None:
        if "r" not in config.perm:
            raise ProblemError("TOPIC_NOT_READABLE", f"topic {topic} has perm {config.perm!r}")
        newest = await broker.run(latest_messages, store, topic, config.read_queue_nums, max_count, begin_ms, end_ms)
        return JsonResponse({"messages": [message_json(m, limit) for m in newest]})
    found = await broker.run(store.query_message, topic, msg_id or key, max_count, begin_ms, end)
    if key is not None and msg_id is not None:  # found by its id; keep those that carry the key too
        found = [m for m in found if key in split_keys(m["properties"].get(PROPERTY_KEYS, ""))]
    return JsonResponse({"messages": [message_json(m, limit) for m in found[:max_count]]})


@api.get(
    "/v1/messages/{offset_msg_id}",
    operation_id="getMessage",
    summary="Read one message by its offset message id (a direct commitlog read)",
    responses=docs(Message, 200, "MESSAGE_ID_INVALID", "MESSAGE_NOT_FOUND"),
)
async def by_offset_id(broker: BrokerDep, request: Request, offset_msg_id: OffsetMsgIdPath) -> Response:
    store = broker.store
    try:
        _, _, offset = decode_offset_msg_id(offset_msg_id)
    except ValueError as e:
        if len(offset_msg_id) in OFFSET_MSG_ID_LENGTHS and all(c in HEX_DIGITS for c in offset_msg_id):
            # Well formed, but the offset half is negative: no message can have that id.
            raise ProblemError("MESSAGE_NOT_FOUND", f"no message has the id {offset_msg_id}: {e}") from None
        raise ProblemError("MESSAGE_ID_INVALID", "an offset message id is 32 hex characters (56 with an IPv6 store host)") from None
    found = await broker.run(store.look_message_by_offset, offset)
    if found is None or found.get("offset_msg_id", offset_msg_id).upper() != offset_msg_id.upper():
        raise ProblemError("MESSAGE_NOT_FOUND", f"no message at commitlog offset {offset}")
    require(request, SUB, found["topic"], "read messages of")  # the id names no topic: checked once found
    return JsonResponse(message_json(found, store.config.max_message_size_bytes))


@api.get(
    "/v1/topics/{topic}/queues/{queue_id}/offset",
    operation_id="offsetByTime",
    summary="The first queue offset stored at or after a time",
    responses=docs(QueueOffset, 200, "TOPIC_INVALID", "TOPIC_NOT_FOUND", "TOPIC_NOT_READABLE", "QUEUE_NOT_FOUND"),
)
async def offset_by_time(
    broker: BrokerDep,
    topic: TopicPath,
    queue_id: QueuePath,
    timestamp_ms: Annotated[int, Query(ge=0, le=MAX_TIMESTAMP_MS, description="Time, ms since the epoch")],
) -> Response:
    store = broker.store
    broker.readable_queue(topic, queue_id)
    offset = await broker.run(store.get_offset_in_queue_by_time, topic, queue_id, timestamp_ms)
    return JsonResponse({"topic": topic, "queue_id": queue_id, "timestamp_ms": timestamp_ms, "offset": offset})
