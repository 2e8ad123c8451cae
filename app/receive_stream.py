"""GET /v1/groups/{group}/topics/{topic}/stream: group consumption as Server-Sent Events.

One `message` event per received message (the receive reply's JSON, with a receipt handle);
acks go to the ack endpoint. At most `max_in_flight` messages of a stream are unacked at once:
a message stops counting when it is acked (the ack endpoint tells `StreamRegistry`) or when its
invisible time ends (the broker will deliver it again, to this stream or another). A comment
line is sent every `stream_heartbeat_ms` (15 s) so proxies and clients see the stream alive; the stream ends
cleanly (the chunked body is closed) when the broker stops, and stops receiving at once when
the client goes away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import StreamingResponse

from app.long_poll import Waiter
from app.message_view import message_json
from app.problems import ProblemError
from app.receive_models import received_json
from app.receiver import FIFO_RECHECK_MS, INVISIBLE_MS_SCHEMA, MAX_RECEIVE_MESSAGES, SQL_PARAM, TAG_PARAM, Receiver, ReceiveSpec
from app.stream_registry import StreamState
from store import Popped, decode_message, retry_topic

DEFAULT_MAX_IN_FLIGHT = 32
MAX_IN_FLIGHT_LIMIT = 1_024
EVENT_STREAM = "text/event-stream"


def parse_max_in_flight(request: Request) -> int:
    text = request.query_params.get("max_in_flight")
    if text is None:
        return DEFAULT_MAX_IN_FLIGHT
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or not 1 <= int(text) <= MAX_IN_FLIGHT_LIMIT:
        raise ProblemError("MAX_INVALID", f"max_in_flight must be an integer in 1..{MAX_IN_FLIGHT_LIMIT}")
    return int(text)


def event(spec: ReceiveSpec, p: Popped, handle_prefix: str, body_limit_bytes: int) -> bytes:
    message = message_json(decode_message(p.data, 0), body_limit_bytes)
    view = received_json(message, handle_prefix + p.handle, p.invisible_until_ms, p.reconsume_times, spec.topic)
    return b"event: message\ndata: " + orjson.dumps(view) + b"\n\n"


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


class ReceiveStream:
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.registry = receiver.streams

    def response(self, spec: ReceiveSpec, max_in_flight: int) -> StreamingResponse:
        state = StreamState(max_in_flight)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(self.events(spec, state), media_type=EVENT_STREAM, headers=headers)

    async def events(self, spec: ReceiveSpec, state: StreamState) -> AsyncIterator[bytes]:
        held = self.receiver.held
        loop = asyncio.get_running_loop()
        heartbeat_s = self.receiver.broker.settings.stream_heartbeat_ms / 1000.0
        body_limit = self.receiver.store.config.max_message_size_bytes
        next_beat = loop.time() + heartbeat_s
        yield b": stream open\n\n"
        try:
            while not held.closed:
                next_expiry = state.expire(int(time.time() * 1000))
                room = state.max_in_flight - len(state.unacked)
                if room > 0:
                    spec.max_count = min(room, MAX_RECEIVE_MESSAGES)
                    popped = await self.receiver.take(spec)
                    if popped:
                        self.registry.delivered(state, popped)
                        yield b"".join(event(spec, p, self.receiver.handle_prefix, body_limit) for p in popped)
                        continue
                timeout = next_beat - loop.time()
                if next_expiry is not None:
                    timeout = min(timeout, max(0.0, next_expiry / 1000.0 - time.time()))
                await self._wait(spec, state, room > 0, max(0.0, timeout))
                if loop.time() >= next_beat:
                    next_beat = loop.time() + heartbeat_s
                    yield b": heartbeat\n\n"
        finally:
            self.registry.closed(state)

    async def _wait(self, spec: ReceiveSpec, state: StreamState, for_messages: bool, timeout: float) -> None:
        """Until an arrival (when there is room), an ack of this stream, the timeout or the stop."""
        held = self.receiver.held
        state.changed.clear()
        waiters: list[Waiter] = []
        if for_messages:
            queues = [(spec.topic, q) for q in range(self.receiver.broker.topic_config(spec.topic).read_queue_nums)]
            queues.append((retry_topic(spec.group, spec.topic), 0))
            waiters = [w for w in (held.register(t, q, spec.codes) for t, q in queues) if w is not None]
            if len(waiters) < len(queues) or self.receiver.store.group_consumption.group(spec.group).fifo:
                # Not woken by every arrival (held-request bound reached), or a FIFO queue frees up unannounced: look again soon.
                timeout = min(timeout, FIFO_RECHECK_MS / 1000.0)
        changed: asyncio.Future[Any] = asyncio.ensure_future(state.changed.wait())
        futures: list[asyncio.Future[Any]] = [w.future for w in waiters]
        try:
            await asyncio.wait((*futures, changed), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            for w in waiters:
                held.unregister(w)
