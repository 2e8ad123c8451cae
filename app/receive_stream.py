"""GET /v1/groups/{group}/topics/{topic}/stream: group consumption as Server-Sent Events.

One `message` event per received message (the receive reply's JSON, with a receipt handle);
acks go to the ack endpoint. At most `max_in_flight` messages of a stream are unacked at once:
a message stops counting when it is acked (the ack endpoint tells `StreamRegistry`) or when its
invisible time ends (the broker will deliver it again, to this stream or another). A comment
line is sent every `stream_heartbeat_ms` (15 s) so proxies and clients see the stream alive.

Invariants:
- A stream is admitted (`StreamRegistry.open`: the broker's and the account's bounds) before its
  200 is sent, and its slot is freed when its response ends, however it ends (`EventStreamResponse`).
- Once the 200 is sent nothing is answered as an error reply: a stream the broker ends gets a last
  `event: end` whose data is a problem document (`TOPIC_NOT_FOUND` when the topic was deleted,
  `UNAUTHENTICATED`/`FORBIDDEN` when an ACL reload revoked its access, `SHUTTING_DOWN`, ...), then
  the chunked body is closed cleanly. A read refused for a full read pool (READS_BUSY) is retried.
- A stream reads only when something says messages may be visible to it (its start, an arrival
  that woke it, room freed by an ack or an expiry, its pool's recheck); a heartbeat does not read.
- A client that stops reading is cut by the connection's send deadline (`send_stall_timeout_ms`,
  app.connections), which ends the stream like a disconnect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.access_check import request_account
from app.message_view import received_view
from app.problems import ProblemError, problem_body
from app.query import query_of
from app.receiver import INVISIBLE_MS_SCHEMA, MAX_RECEIVE_MESSAGES, SQL_PARAM, TAG_PARAM, Receiver, ReceiveSpec
from app.stream_registry import Stream
from store import Popped

log = logging.getLogger("tidemq.app")
DEFAULT_MAX_IN_FLIGHT = 32
MAX_IN_FLIGHT_LIMIT = 1_024
EVENT_STREAM = "text/event-stream"
OPENED = b": stream open\n\n"
HEARTBEAT = b": heartbeat\n\n"
# How soon a stream whose read found the read pool's queue full (READS_BUSY) reads again.
BUSY_RETRY_MS = 100


def parse_max_in_flight(request: Request) -> int:
    text = query_of(request.scope).get("max_in_flight")
    if text is None:
        return DEFAULT_MAX_IN_FLIGHT
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or not 1 <= int(text) <= MAX_IN_FLIGHT_LIMIT:
        raise ProblemError("MAX_INVALID", f"max_in_flight must be an integer in 1..{MAX_IN_FLIGHT_LIMIT}")
    return int(text)


def event(spec: ReceiveSpec, p: Popped, handle_prefix: str, body_limit_bytes: int) -> bytes:
    return b"event: message\ndata: " + received_view(p, handle_prefix + p.handle, spec.topic, body_limit_bytes) + b"\n\n"


def end_event(code: str, detail: str) -> bytes:
    """The last event of a stream the broker ends: a problem document saying why."""
    return b"event: end\ndata: " + orjson.dumps(problem_body(code, detail)) + b"\n\n"


STREAM_OPENAPI: dict[str, Any] = {
    "parameters": [
        {"name": "max_in_flight", "in": "query", "required": False, "description": "Most unacked messages of the stream at once",
         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_IN_FLIGHT_LIMIT, "default": DEFAULT_MAX_IN_FLIGHT}},
        {"name": "invisible_ms", "in": "query", "required": False, "description": "How long each message stays invisible to the group",
         "schema": INVISIBLE_MS_SCHEMA},
        TAG_PARAM,
        SQL_PARAM,
    ]
}  # fmt: skip


class EventStreamResponse(StreamingResponse):
    """A StreamingResponse that runs `on_close` when it ends, however it ends (a body never started included)."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None], headers: dict[str, str]) -> None:
        super().__init__(content, media_type=EVENT_STREAM, headers=headers)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class ReceiveStream:
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.broker = receiver.broker
        self.registry = receiver.broker.streams

    def response(self, request: Request, spec: ReceiveSpec, max_in_flight: int) -> EventStreamResponse:
        """The stream's response; TOO_MANY_STREAMS (before any byte is sent) when there is no room for it."""
        account = request_account(request)
        revocations = self.broker.revocations
        watch = revocations.watch(request.scope)
        try:
            stream = self.registry.open(spec.group, spec.topic, spec.codes, max_in_flight, account.name if account else None)
        except ProblemError:
            revocations.release(watch)
            raise
        if watch is not None:
            watch.on_revoked = lambda code, detail: self.registry.end(stream, code, detail)

        def closed() -> None:
            self.registry.close(stream)
            revocations.release(watch)

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return EventStreamResponse(self.events(spec, stream), closed, headers)

    async def events(self, spec: ReceiveSpec, stream: Stream) -> AsyncIterator[bytes]:
        registry = self.registry
        loop = asyncio.get_running_loop()
        heartbeat_s = self.broker.settings.stream_heartbeat_ms / 1000.0
        body_limit = self.receiver.store.config.max_message_size_bytes
        prefix = self.receiver.handle_prefix
        next_beat = loop.time() + heartbeat_s
        yield OPENED
        while stream.ending is None:
            next_expiry = registry.expire(stream, int(time.time() * 1000))
            room = stream.max_in_flight - len(stream.unacked)
            if room > 0 and stream.pool.missed:  # an arrival found no stream of the pool waiting: this one reads
                stream.pool.missed = False
                stream.look = True
            busy = False
            if room > 0 and stream.look:
                stream.look = False
                spec.max_count = min(room, MAX_RECEIVE_MESSAGES)
                popped = await self._take(spec, stream)
                if stream.ending is not None:
                    break  # what it took comes back after its invisible time
                if popped:
                    registry.delivered(stream, popped, full=len(popped) == spec.max_count)
                    yield b"".join(event(spec, p, prefix, body_limit) for p in popped)
                    continue
                if popped is not None and stream.pool.missed:
                    continue  # an arrival during the read: read again
                busy = popped is None
            timeout = next_beat - loop.time()
            if next_expiry is not None:
                timeout = min(timeout, next_expiry / 1000.0 - time.time())
            if busy:
                stream.look = True
                timeout = min(timeout, BUSY_RETRY_MS / 1000.0)
            await registry.wait(stream, max(0.0, timeout))
            if loop.time() >= next_beat and stream.ending is None:
                next_beat = loop.time() + heartbeat_s
                self._check(stream)
                if stream.ending is None:
                    yield HEARTBEAT
        assert stream.ending is not None, "the loop ends only with a reason"
        code, detail = stream.ending
        yield end_event(code, detail)

    def _check(self, stream: Stream) -> None:
        """End the stream when its topic is gone, its access was revoked or this broker stopped taking writes."""
        self.broker.revocations.refresh()  # a changed ACL file is loaded now; a revocation ends the stream at once
        try:
            if self.receiver.store.topic_config(stream.topic) is None:
                raise ProblemError("TOPIC_NOT_FOUND", f"topic {stream.topic} was deleted")
            self.broker.check_master()  # a receive stores a checkpoint: a slave takes no writes
        except ProblemError as e:
            self.registry.end(stream, e.code, e.detail)

    async def _take(self, spec: ReceiveSpec, stream: Stream) -> list[Popped] | None:
        """The stream's next messages (possibly none); None when the read pool's queue is full (READS_BUSY).
        Any other failure ends the stream (its code in the end event)."""
        self._check(stream)
        if stream.ending is not None:
            return []
        async with self.registry.reads:
            try:
                return await self.receiver.take(spec)
            except ProblemError as e:
                if e.code == "READS_BUSY":
                    return None
                self.registry.end(stream, e.code, e.detail)
            except Exception as e:
                log.exception("event stream of group %s on topic %s: unexpected error", spec.group, spec.topic)
                self.registry.end(stream, "INTERNAL_ERROR", f"unexpected {type(e).__name__}; see the broker's log")
        return []
