"""GET /v1/topics/{topic}/queues/{queue_id}/messages: pull, with long polling.

Invariants:
- Reads (`get_message`, decoding, serialising) run in the broker's read pool, except within
  `inline_read_window_messages` of the queue's tail, where they run inline. A result owns
  the bytes it copied out of the commitlog and pins no mapped file; the batch format is sent
  from its buffer as it is.
- A pull with nothing to return is held (an asyncio future in `HeldPulls`, no thread, no task:
  app.long_poll.wait_held) until a matching message arrives in its queue, the wait ends, the
  client disconnects or the broker stops; it then re-reads. A disconnected client is unregistered at once.
- After registering, the queue's max offset is checked once more, so a message that arrived
  between the read and the registration is never missed; and before an empty answer it is
  checked again, so a wake-up that the deadline overtook is late, never lost.
- Replies are 200 with the store's status (NO_NEW_MSG / NO_MATCHED_MSG after the wait), except
  an unknown topic or queue (404) and bad parameters (400).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.broker import Broker
from app.filter_params import TAG_FILTER_SCHEMA, TAG_FILTER_TEXT, parse_message_filter
from app.hot_routes import Handler
from app.long_poll import Departure, Wake, wait_held
from app.message_view import message_json
from app.models import PullResult, PullStatus
from app.params import NAME_SCHEMA, QueuePath, TopicPath
from app.problems import ProblemError
from app.query import query_of
from app.reply_transport import EARLY_REPLY_KEY
from app.responses import BATCH_MEDIA_TYPE, Reply, docs
from app.strict_route import StrictRoute
from store import MAX_SQL_CHARS, GetMessageResult, GetMessageStatus, group_problem, render_views

PULL_STATUS = {
    GetMessageStatus.FOUND: "FOUND",
    GetMessageStatus.NO_MATCHED_MESSAGE: "NO_MATCHED_MSG",
    GetMessageStatus.OFFSET_OVERFLOW_ONE: "NO_NEW_MSG",
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: "NO_NEW_MSG",
    # The topic is configured (checked before the read) but its queue holds nothing yet.
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: "NO_NEW_MSG",
    GetMessageStatus.OFFSET_TOO_SMALL: "OFFSET_TOO_SMALL",
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: "OFFSET_OVERFLOW_BADLY",
    GetMessageStatus.OFFSET_FOUND_NULL: "OFFSET_FOUND_NULL",
    GetMessageStatus.MESSAGE_WAS_REMOVING: "MESSAGE_WAS_REMOVING",
}
# The same by the store status's name: an Enum member's hash is a Python call (Enum.__hash__), its name an attribute.
PULL_STATUS_OF_NAME = {status._name_: pull_status for status, pull_status in PULL_STATUS.items()}
OCTET_STREAM = "application/octet-stream"
# pullBatch's path: the batch format has an operation of its own, so that the pull's reply is one type.
BATCH_PATH = "/v1/topics/{topic}/queues/{queue_id}/messages/batch"
HOLDABLE = frozenset({"NO_NEW_MSG", "NO_MATCHED_MSG"})
# RocketMQ's names for an offset outside the queue, explained in the JSON reply's `hint`.
OFFSET_HINTS = {
    "OFFSET_OVERFLOW_BADLY": "offset {offset} is past the end of queue {spec.queue_id}, whose next message will have offset "
    "{result.max_offset}; continue from next_offset {result.next_begin_offset} (with wait_ms to wait for it)",
    "OFFSET_TOO_SMALL": "offset {offset} is below queue {spec.queue_id}'s first kept message (offset {result.min_offset}: older "
    "ones were removed by retention); continue from next_offset {result.next_begin_offset}",
}


@dataclass(slots=True)
class Read:
    """One read of a queue, already serialised when it found messages.

    A JSON reply without messages is serialised when it is answered (`json_body`), not when read: a
    held pull keeps its first read for its whole wait, and a serialised reply holds a 4 KiB buffer
    (orjson's), a fifth of what a held pull costs."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    body: bytes | memoryview | None  # None: a JSON reply without messages (json_body)
    count: int
    hint: str | None = None  # how to go on from an offset out of the queue's range

    def json_body(self) -> bytes:
        reply: dict[str, object] = {
            "status": self.status,
            "next_offset": self.next_offset,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "messages": [],
        }
        if self.hint is not None:
            reply["hint"] = self.hint
        return orjson.dumps(reply)


PULL_PROBLEMS = (
    "OFFSET_INVALID",
    "WAIT_TOO_LONG",
    "MAX_INVALID",
    "TAG_INVALID",
    "FILTER_INVALID",
    "GROUP_INVALID",
    "TOPIC_INVALID",
    "TOPIC_NOT_READABLE",
    "TOPIC_NOT_FOUND",
    "QUEUE_NOT_FOUND",
    "TOO_MANY_WAITERS",
)
PULL_DOC = docs(PullResult, 200, *PULL_PROBLEMS)
PULL_DOC[200]["description"] = (
    "A pull result. Sent with Accept: application/x-tidemq-batch this path answers as pullBatch does; that reply is "
    "declared on pullBatch's own path, so that generated clients type this one as a PullResult."
)
# The batch format's result fields, as headers of its reply.
BATCH_HEADERS = {
    "X-Tidemq-Status": ("The pull status (a PullResult's status)", {"type": "string", "enum": list(get_args(PullStatus))}),
    "X-Tidemq-Next-Offset": ("The offset to pull from next", {"type": "integer"}),
    "X-Tidemq-Min-Offset": ("The queue's min offset", {"type": "integer"}),
    "X-Tidemq-Max-Offset": ("The queue's max offset", {"type": "integer"}),
    "X-Tidemq-Count": ("Messages in the body", {"type": "integer", "minimum": 0}),
    "X-Tidemq-Body-Encoding": (
        "How message bodies lie in the reply: `stored`, as in the commitlog, so a message whose SYSFLAG has bit 0x1 "
        "(RocketMQ's MessageSysFlag.COMPRESSED_FLAG) holds its body compressed (zlib when SYSFLAG bits 8..10 are 0 or 3)",
        {"type": "string", "enum": ["stored"]},
    ),
}
# The batch format never inflates: it is the commitlog's bytes (X-Tidemq-Body-Encoding).
BODY_ENCODING_STORED = "stored"
BODY_ENCODING_STORED_BYTES = BODY_ENCODING_STORED.encode()
BATCH_BODY = {"schema": {"type": "string", "format": "binary"}, "example": ""}
PULL_BATCH_DOC = docs(None, 200, *PULL_PROBLEMS)
PULL_BATCH_DOC[200] = {
    "description": "The stored messages' bytes as they lie in the commitlog (docs/layouts.md), concatenated; empty when "
    "X-Tidemq-Count is 0. The reply is application/x-tidemq-batch unless the request's Accept asks for "
    "application/octet-stream only (for clients that know no other binary type).",
    "headers": {name: {"description": text, "required": True, "schema": schema} for name, (text, schema) in BATCH_HEADERS.items()},
    "content": {BATCH_MEDIA_TYPE: BATCH_BODY, OCTET_STREAM: BATCH_BODY},
}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


# Query parameters are parsed by hand (one code per bad form, no per-request validation models).
PULL_OPENAPI: dict[str, Any] = {
    "parameters": [
        _query(
            "offset",
            "Queue offset to read from; when omitted: with group=, the group's committed offset; else (or when the group committed none) "
            "the queue's first kept message",
            {"type": "integer", "minimum": 0},
        ),
        _query(
            "max",
            "Most messages to return (1..the broker's max_pull_messages; the store may return fewer)",
            {"type": "integer", "minimum": 1, "default": 32},
        ),
        _query("tag", TAG_FILTER_TEXT, TAG_FILTER_SCHEMA),
        _query(
            "sql",
            "SQL92 filter over the message's properties and TAGS, as RocketMQ's (e.g. a > 5 AND TAGS IN ('x', 'y')); "
            "with tag=, a message passes both",
            {"type": "string", "maxLength": MAX_SQL_CHARS},
        ),
        _query(
            "wait_ms",
            "Hold the pull this long when there is nothing to return (at most the broker's max_wait_ms, 30000 by default)",
            {"type": "integer", "minimum": 0, "default": 0},
        ),
        _query(
            "group",
            "Consumer group whose committed offset to start from when offset is omitted",
            {"type": "string", **NAME_SCHEMA},
        ),
    ]
}
DEFAULT_MAX = 32
# Longest decimal text accepted for a count (beyond int64 there is nothing to address).
MAX_DIGITS = 18


def _count(params: Any, name: str, code: str, default: int | None) -> int | None:
    """A non-negative integer query parameter; `code` when it is anything else."""
    text = params.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_DIGITS:
        raise ProblemError(code, f"{name} must be an integer >= 0, not {text[:40]!r}")
    return int(text)


def parse_queue_id(text: str) -> int:
    if text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS:
        return int(text)
    if text.isascii() and text.lstrip("-").isdigit() and text.count("-") <= 1 and text[1:].isdigit():
        raise ProblemError("QUEUE_NOT_FOUND", f"there is no queue {text[:40]}")  # negative, or past any queue id
    raise ProblemError("REQUEST_INVALID", f"queue_id must be an integer, not {text[:40]!r}")


@dataclass(slots=True)
class PullSpec:
    """A checked pull request."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int
    message_filter: Any  # a TagFilter, a MessageFilter or None
    codes: frozenset[int] | None
    wait_ms: int
    batch: bool


class Puller:
    """Serves pulls: parse and check, read in the pool, hold while there is nothing, reply."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.settings = broker.settings
        self.held = broker.held

    def parse(self, request: Request, batch: bool) -> PullSpec:
        topic = request.path_params["topic"]
        queue_id = parse_queue_id(request.path_params["queue_id"])
        self.broker.readable_queue(topic, queue_id)
        params = query_of(request.scope)
        offset = _count(params, "offset", "OFFSET_INVALID", None)
        max_count = _count(params, "max", "MAX_INVALID", DEFAULT_MAX)
        wait_ms = _count(params, "wait_ms", "REQUEST_INVALID", 0)
        group = params.get("group")
        assert max_count is not None and wait_ms is not None
        if wait_ms > self.settings.max_wait_ms:
            raise ProblemError("WAIT_TOO_LONG", f"wait_ms is at most {self.settings.max_wait_ms}")
        if not 1 <= max_count <= self.settings.max_pull_messages:
            raise ProblemError("MAX_INVALID", f"max is 1..{self.settings.max_pull_messages}")
        if group is not None and group_problem(group) is not None:
            raise ProblemError("GROUP_INVALID", f"{group_problem(group)}: {group[:200]!r}")
        message_filter, codes = parse_message_filter(params)
        if offset is None:  # the group's committed offset, else the queue's first kept message
            offset = self.store.query_offset(group, topic, queue_id) if group is not None else -1
            if offset < 0:
                offset = self.store.get_min_offset_in_queue(topic, queue_id)
        return PullSpec(group or "", topic, queue_id, offset, max_count, message_filter, codes, wait_ms, batch)

    def found_json(self, result: GetMessageResult) -> bytes:
        """A FOUND pull's JSON reply: the views rendered by the store's kernel (render_views), or by
        message_json for a read holding a message the kernel leaves to Python (a compressed body)."""
        views = render_views(result.data)
        head = (result.next_begin_offset, result.min_offset, result.max_offset)
        if views is not None:
            return b'{"status":"FOUND","next_offset":%d,"min_offset":%d,"max_offset":%d,"messages":[%b]}' % (*head, views)
        limit = self.store.config.max_message_size_bytes
        messages = [message_json(m, limit) for m in result.decode(hosts=False)]
        return orjson.dumps({"status": "FOUND", "next_offset": head[0], "min_offset": head[1], "max_offset": head[2], "messages": messages})

    def read(self, spec: PullSpec, offset: int) -> Read:
        """Read and serialise (runs in the read pool, or inline for just-written data)."""
        return self.serialise(
            spec, offset, self.store.get_message(spec.group, spec.topic, spec.queue_id, offset, spec.max_count, spec.message_filter)
        )

    def read_put(self, spec: PullSpec, offset: int, delivery: list[tuple[int, int]]) -> Read:
        """The messages a put delivered to the held pull (app.long_poll `deliver`: their commitlog offsets and sizes),
        read by those offsets before their dispatch as a read takes them (`max`, the transfer limits); the usual read
        (which finds nothing until the pass: the pull holds again) when they are not there."""
        result = self.store.get_put_message(spec.topic, spec.queue_id, offset, delivery, spec.max_count)
        return self.read(spec, offset) if result is None else self.serialise(spec, offset, result)

    def serialise(self, spec: PullSpec, offset: int, result: GetMessageResult) -> Read:
        """A get's result as the reply's parts (released here)."""
        try:
            status = PULL_STATUS_OF_NAME[result.status._name_]
            if status == "NO_NEW_MSG" and result.next_begin_offset < offset:
                # An empty (or not yet made) queue asked past its end: the offset moved, as RocketMQ
                # answers it; held, the re-read would start below the offset asked for.
                status = "OFFSET_OVERFLOW_BADLY"
            found = status == "FOUND"
            body: bytes | memoryview | None = None
            if spec.batch:
                body = memoryview(result.data) if found else b""  # the gathered messages: the wire format
            elif found:
                body = self.found_json(result)
            hint = OFFSET_HINTS[status].format(offset=offset, spec=spec, result=result) if status in OFFSET_HINTS else None
            count = result.message_count if found else 0
            return Read(status, result.next_begin_offset, result.min_offset, result.max_offset, body, count, hint)
        finally:
            result.release()

    @staticmethod
    def reply(r: Read, batch: str | None) -> Response:
        if batch is None:
            return Reply(r.body if r.body is not None else r.json_body())
        headers = [
            (b"x-tidemq-status", r.status.encode()),
            (b"x-tidemq-next-offset", b"%d" % r.next_offset),
            (b"x-tidemq-min-offset", b"%d" % r.min_offset),
            (b"x-tidemq-max-offset", b"%d" % r.max_offset),
            (b"x-tidemq-count", b"%d" % r.count),
            (b"x-tidemq-body-encoding", BODY_ENCODING_STORED_BYTES),
        ]
        assert r.body is not None, "a batch-format read is serialised when read"
        return Reply(r.body, media_type=batch.encode(), headers=headers)

    def answer(self, r: Read, spec: PullSpec, batch: str | None) -> Response:
        """The reply, with the messages it returns counted for the topic (on the event loop: no lost updates)."""
        if r.count:
            pulled = self.broker.topic_pulled_total
            pulled[spec.topic] = pulled.get(spec.topic, 0) + r.count
        return self.reply(r, batch)

    async def serve(self, request: Request, batch: str | None = None) -> Response:
        """Serve a pull; the path parameters are `request.path_params` strings (see app.hot_routes).

        `batch` is the batch format's media type to answer with (pullBatch); without it the reply is
        JSON unless Accept asks for the batch format."""
        if batch is None and BATCH_MEDIA_TYPE in request.headers.get("accept", ""):
            batch = BATCH_MEDIA_TYPE
        spec = self.parse(request, batch is not None)
        consumer = self.broker.consumers.begin(spec.group, spec.topic, request.scope) if spec.group else None
        try:
            # A pull that would wait at the queue's end holds without a read first: that read finds nothing.
            at_end = spec.wait_ms > 0 and self.store.get_max_offset_in_queue(spec.topic, spec.queue_id) == spec.offset
            r = None if at_end else await self.read_at(spec, spec.offset)
            if r is not None and (r.status not in HOLDABLE or spec.wait_ms == 0):
                return self.answer(r, spec, batch)
            return await self.hold(request, spec, r, batch)
        finally:
            if consumer is not None:
                self.broker.consumers.end(consumer)

    async def read_at(self, spec: PullSpec, offset: int) -> Read:
        """`read` inline near the queue's tail (just written, in memory: a thread hop costs more), else in the pool."""
        if self.store.get_max_offset_in_queue(spec.topic, spec.queue_id) - offset <= self.settings.inline_read_window_messages:
            return self.read(spec, offset)
        return await self.broker.run(self.read, spec, offset)

    async def hold(self, request: Request, spec: PullSpec, r: Read | None, batch: str | None) -> Response:
        """Wait for a matching message (or the deadline, a disconnect, the stop, an ACL reload that revokes
        the request's access: 401/403) and re-read. `r` is the read that found nothing to answer, None when
        the pull asked for the queue's end offset (what such a read answers: NO_NEW_MSG from there)."""
        held = self.held
        loop = held.loop
        deadline = loop.time() + spec.wait_ms / 1000.0
        departure: Departure | None = None
        access = self.broker.revocations.watch(request.scope)
        try:
            while (r is None or r.status in HOLDABLE) and not held.closed:
                offset = spec.offset if r is None else r.next_offset
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                woken = False  # by an arrival: the read below is of what was just written
                waiter = held.register(spec.topic, spec.queue_id, spec.codes, None, -1 if spec.message_filter is not None else offset)
                if waiter is None:
                    if held.closed:
                        break
                    raise ProblemError("TOO_MANY_WAITERS", f"{held.max_held} pulls are held already")
                try:
                    # Checked after registering: a message dispatched before that would be missed otherwise.
                    if self.store.get_max_offset_in_queue(spec.topic, spec.queue_id) <= offset:
                        if departure is None:
                            departure = Departure(request.scope, request.receive)
                        why = await wait_held(waiter.future, remaining, departure.future, None if access is None else access.future)
                        if why is Wake.GONE:
                            self.broker.pulls_abandoned_total += 1
                            return Response(status_code=204)
                        if access is not None and access.future.done():
                            raise ProblemError(*access.future.result())
                        if why is Wake.DEADLINE:
                            break
                        woken = why is Wake.ARRIVED
                finally:
                    held.unregister(waiter)
                # A woken pull reads what was just written, inline: from the queue's end when it registered, so
                # in memory. A tag-filtered pull whose read matched nothing goes on from `next_offset` at once:
                # far behind the tail (a backlog of other tags, one scan window a read) it reads in the pool, so
                # the loop serves others meanwhile.
                delivery = waiter.delivery
                if delivery is not None:  # woken by the put of its message, before its dispatch pass
                    r = self.read_put(spec, offset, delivery)
                    if r.status == "FOUND":
                        request.scope[EARLY_REPLY_KEY] = True  # written before that pass (app.reply_transport `write_now`)
                else:
                    r = self.read(spec, offset) if woken else await self.read_at(spec, offset)
        finally:
            self.broker.revocations.release(access)
            if departure is not None:
                departure.close()
        # The deadline (or the stop) may win against a wake-up already on its way: the reput thread
        # schedules it on the loop, which runs it late under load. The queue's max offset is the
        # truth, so an empty answer is given only when nothing was dispatched past the offset read.
        if r is None:  # the wait ended before anything woke it: the read it skipped, now
            r = self.read(spec, spec.offset)
        elif r.status in HOLDABLE and self.store.get_max_offset_in_queue(spec.topic, spec.queue_id) > r.next_offset:
            r = self.read(spec, r.next_offset)
        return self.answer(r, spec, batch)

    async def serve_batch(self, request: Request) -> Response:
        """Serve a pull in the batch format (pullBatch), as octet-stream when that alone is accepted."""
        accept = request.headers.get("accept", "")
        only_octets = OCTET_STREAM in accept and BATCH_MEDIA_TYPE not in accept
        return await self.serve(request, OCTET_STREAM if only_octets else BATCH_MEDIA_TYPE)


def router(broker: Broker) -> tuple[APIRouter, Handler, Handler]:
    """The routes, and the handlers app.hot_routes serves the hot paths with (pull, pullBatch)."""
    api = APIRouter(tags=["consume"], route_class=StrictRoute)
    puller = Puller(broker)

    @api.get(
        "/v1/topics/{topic}/queues/{queue_id}/messages",
        operation_id="pull",
        summary="Pull messages from a queue, holding the request up to wait_ms until one arrives",
        responses=PULL_DOC,
        openapi_extra=PULL_OPENAPI,
    )
    async def pull(topic: TopicPath, queue_id: QueuePath, request: Request) -> Response:
        return await puller.serve(request)

    @api.get(
        BATCH_PATH,
        operation_id="pullBatch",
        response_class=Response,  # not FastAPI's JSON default, which would add application/json to the 200
        summary="Pull as pull does, answering the stored messages' bytes (the batch format) with the result in headers",
        responses=PULL_BATCH_DOC,
        openapi_extra=PULL_OPENAPI,
    )
    async def pull_batch(topic: TopicPath, queue_id: QueuePath, request: Request) -> Response:
        return await puller.serve_batch(request)

    return api, puller.serve, puller.serve_batch
