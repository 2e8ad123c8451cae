"""Receiver: group consumption's receive (held like a long poll), ack and change of the invisible time, for the routes.

Invariants:
- A receive, an ack and an invisible-time change store records (checkpoints, acks), so they run
  in the broker's pool; the event loop never waits on the store's files. Two exceptions run on the
  loop, where a thread hop would cost more than the work, and only while the store answers a put at
  once (ASYNC_FLUSH, not a SYNC_MASTER: the record is a memory copy, as a produce's put on the loop
  is) and the group is not FIFO (whose ack waits for its queue's lock): an ack, and a take whose
  messages are in memory: a held receive's just woken by an arrival, or one whose group's committed
  offsets are within `inline_read_window_messages` of the queues' ends, in all (as a pull reads
  near the tail inline); a take returns at most 32 messages.
- A receive with nothing visible is held (futures in `HeldPulls` on every queue of the topic and
  on the group's retry queue, no thread) until a message arrives in one of them, the wait ends,
  the client goes away or the broker stops. A FIFO group's queue also frees up when an ack comes
  or an invisible time ends, which no arrival announces: its held receives look again every
  FIFO_RECHECK_MS.
- Every error is a problem from app.problems; per-handle ack results are codes in the reply.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from app.broker import FIFO_RECHECK_MS, Broker
from app.filter_params import TAG_FILTER_SCHEMA, TAG_FILTER_TEXT, parse_message_filter
from app.long_poll import Departure, Wake, wait_held
from app.message_view import received_view
from app.problems import ProblemError
from app.query import query_of
from app.receive_models import (
    MAX_ACK_HANDLES,
    MAX_INVISIBLE_MS,
    MIN_INVISIBLE_MS,
    InvisibleRequest,
)
from app.responses import JsonResponse, Reply
from app.routes_groups import check_consumption, check_group
from app.strict_json import duplicate_name
from store import MAX_SQL_CHARS, AckOutcome, BrokerRole, FlushDiskType, Popped, retry_topic

# Most messages one receive returns (RocketMQ's POP takes at most 32 per request).
MAX_RECEIVE_MESSAGES = 32
DEFAULT_INVISIBLE_MS = 30_000
MAX_DIGITS = 18
RECEIVE_PARAMS = frozenset({"max", "invisible_ms", "wait_ms", "tag", "sql"})


@dataclass(slots=True)
class ReceiveSpec:
    group: str
    topic: str
    max_count: int
    invisible_ms: int
    wait_ms: int
    message_filter: Any  # a TagFilter, a MessageFilter or None; the group's own filter is added by the store
    codes: frozenset[int] | None


def _int_param(params: Any, name: str, default: int, low: int, high: int, code: str) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_DIGITS or not low <= int(text) <= high:
        raise ProblemError(code, f"{name} must be an integer in {low}..{high}, not {text[:40]!r}")
    return int(text)


# Query parameters the receive and the stream (app.receive_stream) both take, as OpenAPI documents them.
INVISIBLE_MS_SCHEMA = {"type": "integer", "minimum": MIN_INVISIBLE_MS, "maximum": MAX_INVISIBLE_MS, "default": DEFAULT_INVISIBLE_MS}
TAG_PARAM = {"name": "tag", "in": "query", "required": False, "description": TAG_FILTER_TEXT, "schema": TAG_FILTER_SCHEMA}
SQL_PARAM = {"name": "sql", "in": "query", "required": False, "schema": {"type": "string", "maxLength": MAX_SQL_CHARS},
             "description": "SQL92 filter over the message's properties and TAGS, as RocketMQ's; with tag= and the group's "
                            "own filter, a message passes all of them"}  # fmt: skip
RECEIVE_OPENAPI: dict[str, Any] = {
    "parameters": [
        {"name": "max", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": MAX_RECEIVE_MESSAGES,
                                                                       "default": MAX_RECEIVE_MESSAGES}},
        {"name": "invisible_ms", "in": "query", "required": False, "description": "How long received messages stay invisible to the group",
         "schema": INVISIBLE_MS_SCHEMA},
        {"name": "wait_ms", "in": "query", "required": False, "description": "Hold the receive this long when nothing is visible",
         "schema": {"type": "integer", "minimum": 0, "default": 0}},
        TAG_PARAM,
        SQL_PARAM,
    ]
}  # fmt: skip


class Receiver:
    """Serves receives, acks and invisible-time changes."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.held = broker.held
        self.streams = broker.streams  # the open event streams, told of acks
        # In a cluster, handles name their group ("{broker_name}:{handle}") so that any broker routes
        # an ack to it (cluster/spanning.py); the store's handles never contain ":".
        self.handle_prefix = f"{broker.cluster.group_name}:" if broker.cluster is not None else ""

    def issued(self, handle: str) -> str:
        """The handle as clients see it."""
        return self.handle_prefix + handle

    def own_handle(self, handle: str) -> str:
        """The store's handle of one a client sent (without this group's prefix; others fail the store's check)."""
        prefix = self.handle_prefix
        return handle[len(prefix) :] if prefix and handle.startswith(prefix) else handle

    def parse(self, request: Request, extra: tuple[str, ...] = ()) -> ReceiveSpec:
        """The checked receive; `extra` names query parameters the caller reads itself."""
        group, topic = request.path_params["group"], request.path_params["topic"]
        check_group(group)
        check_consumption(group, topic)
        self.broker.check_master()  # a receive stores a checkpoint: a slave takes no writes
        config = self.broker.topic_config(topic)
        if "r" not in config.perm:
            raise ProblemError("TOPIC_NOT_READABLE", f"topic {topic} has perm {config.perm!r}")
        params = query_of(request.scope)
        unknown = sorted(set(params) - RECEIVE_PARAMS - set(extra))
        if unknown:
            raise ProblemError("REQUEST_INVALID", f"unknown query parameter(s): {', '.join(unknown)[:200]}")
        max_count = _int_param(params, "max", MAX_RECEIVE_MESSAGES, 1, MAX_RECEIVE_MESSAGES, "MAX_INVALID")
        invisible_ms = _int_param(
            params, "invisible_ms", DEFAULT_INVISIBLE_MS, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS, "INVISIBLE_TIME_INVALID"
        )
        max_wait = self.broker.settings.max_wait_ms
        wait_ms = _int_param(params, "wait_ms", 0, 0, 10**MAX_DIGITS, "REQUEST_INVALID")
        if wait_ms > max_wait:
            raise ProblemError("WAIT_TOO_LONG", f"wait_ms is at most {max_wait}")
        message_filter, codes = parse_message_filter(params)
        return ReceiveSpec(group, topic, max_count, invisible_ms, wait_ms, message_filter, codes)

    async def take(self, spec: ReceiveSpec) -> list[Popped]:
        return await self.broker.run(self.store.group_consumption.receive, spec.group, spec.topic, spec.max_count, spec.invisible_ms,
                                     spec.message_filter)  # fmt: skip

    def on_loop(self, group: str) -> bool:
        """True when a take or an ack of `group` may run on the event loop (see the module's invariants)."""
        config = self.broker.config
        if config.flush_disk_type is not FlushDiskType.ASYNC_FLUSH or config.broker_role is BrokerRole.SYNC_MASTER:
            return False
        return not self.store.group_consumption.group(group).fifo

    def pending(self, spec: ReceiveSpec, queues: int) -> bool:
        """False when no queue the receive reads (the topic's and the group's retry queue) holds a message past
        where the group takes next: a take would find nothing, so none is made (a take that finds nothing
        costs what a receive of one message does, less its records)."""
        store = self.store
        for topic, count in ((spec.topic, queues), (retry_topic(spec.group, spec.topic), 1)):
            for queue_id in range(count):
                end = store.get_max_offset_in_queue(topic, queue_id)
                if end <= 0:
                    continue
                committed = store.query_offset(spec.group, topic, queue_id)
                if end > (committed if committed >= 0 else store.get_min_offset_in_queue(topic, queue_id)):
                    return True
        return False

    def near_tail(self, spec: ReceiveSpec, queues: int) -> bool:
        """True when the group's committed offsets lie within `inline_read_window_messages` of the ends of the
        topic's queues and of its retry queue, in all (what a take reads was just written: in memory)."""
        store = self.store
        left = self.broker.settings.inline_read_window_messages
        for topic, count in ((spec.topic, queues), (retry_topic(spec.group, spec.topic), 1)):
            for queue_id in range(count):
                committed = store.query_offset(spec.group, topic, queue_id)
                left -= store.get_max_offset_in_queue(topic, queue_id) - (committed if committed >= 0 else 0)
                if left < 0:
                    return False
        return True

    async def take_soon(self, spec: ReceiveSpec, queues: int, woken: bool) -> list[Popped]:
        """A take on the loop when it may run there (a held receive just woken, or offsets near the queues' ends), else in the pool."""
        if self.on_loop(spec.group) and (woken or self.near_tail(spec, queues)):
            return self.store.group_consumption.receive(spec.group, spec.topic, spec.max_count, spec.invisible_ms, spec.message_filter)
        return await self.take(spec)

    def render(self, spec: ReceiveSpec, popped: list[Popped]) -> Response:
        limit = self.store.config.max_message_size_bytes
        return Reply(b'{"messages":[%b]}' % b",".join(received_view(p, self.issued(p.handle), spec.topic, limit) for p in popped))

    async def receive(self, request: Request) -> Response:
        spec = self.parse(request)
        consumer = self.broker.consumers.begin(spec.group, spec.topic, request.scope)
        try:
            queues = self.broker.topic_config(spec.topic).read_queue_nums
            popped = await self.take_soon(spec, queues, False) if self.pending(spec, queues) else []
            if not popped and spec.wait_ms > 0:
                popped = await self.hold(request, spec)
        finally:
            self.broker.consumers.end(consumer)
        return self.render(spec, popped)

    async def hold(self, request: Request, spec: ReceiveSpec) -> list[Popped]:
        """Wait for an arrival in any queue the receive reads (or the deadline, a disconnect, the stop, an ACL
        reload that revokes the request's access: 401/403) and take again."""
        loop = self.held.loop
        deadline = loop.time() + spec.wait_ms / 1000.0
        read_queues = self.broker.topic_config(spec.topic).read_queue_nums
        queues = [(spec.topic, q) for q in range(read_queues)]
        queues.append((retry_topic(spec.group, spec.topic), 0))
        fifo = self.store.group_consumption.group(spec.group).fifo
        departure = Departure(request.scope, request.receive)
        access = self.broker.revocations.watch(request.scope)
        revoked = None if access is None else access.future
        woken = False
        try:
            while not self.held.closed:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return []
                wake: asyncio.Future[Wake] = loop.create_future()  # one future for every queue's registration
                waiters = [self.held.register(t, q, spec.codes, wake) for t, q in queues]
                try:
                    if any(w is None for w in waiters):
                        if self.held.closed:
                            return []
                        raise ProblemError("TOO_MANY_WAITERS", f"{self.held.max_held} requests are held already")
                    # After registering: an arrival before it is not missed (its queue entry is written
                    # before its wake-up). Once woken, what arrived is in memory.
                    if woken or self.pending(spec, read_queues):
                        popped = await self.take_soon(spec, read_queues, woken)
                        if popped:
                            return popped
                    timeout = min(remaining, FIFO_RECHECK_MS / 1000.0) if fifo else remaining
                    why = await wait_held(wake, timeout, departure.future, revoked)
                    woken = why is Wake.ARRIVED
                    if why is Wake.GONE:
                        return []  # the client went away; whatever a take would get stays visible
                    if access is not None and access.future.done():
                        raise ProblemError(*access.future.result())
                finally:
                    for w in waiters:
                        if w is not None:
                            self.held.unregister(w)
            return []
        finally:
            self.broker.revocations.release(access)
            departure.close()

    async def ack(self, request: Request) -> Response:
        """Serve an ack; the path parameters are `request.path_params` strings (see app.hot_routes)."""
        group, topic = request.path_params["group"], request.path_params["topic"]
        check_group(group)
        self.broker.check_master()
        self.broker.topic_config(topic)
        given = parse_ack_body(await request.body())
        handles = [self.own_handle(h) for h in given] if self.handle_prefix else given
        consumer = self.broker.consumers.begin(group, topic, request.scope)
        try:
            if self.on_loop(group):
                outcomes = self.store.group_consumption.ack(group, topic, handles)
            else:
                outcomes = await self.broker.run(self.store.group_consumption.ack, group, topic, handles)
        finally:
            self.broker.consumers.end(consumer)
        self.streams.acked([h for h, o in zip(handles, outcomes, strict=True) if o is AckOutcome.OK])
        results = [{"receipt_handle": h, "status": o.value} for h, o in zip(given, outcomes, strict=True)]
        return Reply(orjson.dumps({"results": results}))

    async def change_invisible(self, group: str, topic: str, body: InvisibleRequest) -> Response:
        check_group(group)
        self.broker.check_master()
        self.broker.topic_config(topic)
        gc = self.store.group_consumption
        given = self.own_handle(body.receipt_handle)
        outcome, handle, until = await self.broker.run(gc.change_invisible, group, topic, given, body.invisible_ms)
        if outcome is AckOutcome.HANDLE_INVALID:
            raise ProblemError("HANDLE_INVALID", "the receipt handle was not issued by this broker for this group and topic")
        if outcome is AckOutcome.HANDLE_EXPIRED:
            raise ProblemError("HANDLE_EXPIRED", "the message's invisible time has passed; it may have been delivered again")
        if outcome is AckOutcome.NOT_STORED:
            raise ProblemError("STORE_WRITE_FAILED", "the new invisible time could not be stored; the old one still holds")
        if outcome is AckOutcome.ALREADY_ACKED:
            raise ProblemError("ALREADY_ACKED", "the message was acked with this handle; it is not delivered to the group again")
        if outcome is AckOutcome.HANDLE_SUPERSEDED:
            raise ProblemError(
                "HANDLE_SUPERSEDED",
                "an earlier change of the invisible time replaced this handle; change or ack with the handle it answered",
            )
        assert handle is not None, "an OK change carries the new handle"
        return JsonResponse({"receipt_handle": self.issued(handle), "invisible_until_ms": until})


def parse_ack_body(data: bytes) -> list[str]:
    """The receipt handles of an ack body, checked as AckRequest declares them (400 BODY_INVALID otherwise)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProblemError("BODY_INVALID", f"the body is not valid JSON: {e}") from None
    if type(doc) is not dict or set(doc) != {"receipt_handles"}:
        raise ProblemError("BODY_INVALID", 'the body must be {"receipt_handles": [...]} and nothing else')
    repeated = duplicate_name(data, doc)
    if repeated is not None:
        raise ProblemError("BODY_INVALID", f"the name {repeated[:60]!r} appears twice in one object")
    handles = doc["receipt_handles"]
    if type(handles) is not list or not 1 <= len(handles) <= MAX_ACK_HANDLES or not all(type(h) is str for h in handles):
        raise ProblemError("BODY_INVALID", f"receipt_handles must be an array of 1..{MAX_ACK_HANDLES} strings")
    return handles
