"""The async client: `AsyncClient("http://127.0.0.1:8080")`, used from one event loop.

    async with AsyncClient(url, token=None) as c:
        await c.produce("orders", b"order 1", tags="created", keys=["order-1"])
        result = await c.pull("orders", 0, offset=0, wait_ms=5000)

Every method is one HTTP request on a pooled keep-alive connection (`tidemq.async_transport`); a
problem reply raises a `tidemq.errors.ProblemError` subclass carrying its `code`. The methods and
their arguments are those of `tidemq.Client`, and both run the same `tidemq.calls`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import orjson

from tidemq import calls
from tidemq.async_transport import AsyncPool
from tidemq.batch_codec import BatchMessage
from tidemq.calls import Call, OutgoingMessage, error_of
from tidemq.errors import ProtocolError
from tidemq.models import AckResult, BinaryBatchResult, Message, PullResult, QueueLag, SendResult, TopicInfo
from tidemq.options import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_IDLE_EXPIRY_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_STREAM_IDLE_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_URL,
    base_headers,
    check_limits,
    parse_url,
)
from tidemq.sse import EventParser

T = TypeVar("T")


class AsyncClient:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        verify: bool | str = True,
    ) -> None:
        check_limits(timeout_s, max_connections)
        endpoint = parse_url(url, verify)
        self.url = url
        self.timeout_s = timeout_s
        self._pool = AsyncPool(
            endpoint.host,
            endpoint.port,
            endpoint.ssl_context,
            endpoint.host_header,
            max_connections,
            connect_timeout_s,
            DEFAULT_IDLE_EXPIRY_S,
            base_headers(token),
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def _run(self, call: Call[T]) -> T:
        return call.result(await self._pool.request(call.request, self.timeout_s + call.wait_s))

    # Produce.
    async def produce(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        msg_id: str | None = None,
        queue_id: int | None = None,
        sharding_key: str | None = None,
        delay_level: int | None = None,
        delay_ms: int | None = None,
        deliver_at_ms: int | None = None,
        properties: dict[str, str] | None = None,
    ) -> SendResult:
        """One message (see `tidemq.calls.produce`)."""
        return await self._run(
            calls.produce(
                topic, body, tags=tags, keys=keys, msg_id=msg_id, queue_id=queue_id, sharding_key=sharding_key,
                delay_level=delay_level, delay_ms=delay_ms, deliver_at_ms=deliver_at_ms, properties=properties,
            )
        )  # fmt: skip

    async def produce_batch(
        self, topic: str, messages: Sequence[OutgoingMessage], queue_id: int | None = None, delay_ms: int | None = None
    ) -> list[SendResult]:
        return await self._run(calls.produce_batch(topic, messages, queue_id, delay_ms))

    async def produce_binary(
        self,
        topic: str,
        messages: Sequence[BatchMessage | bytes],
        queue_id: int | None = None,
        with_crc: bool = False,
        delay_ms: int | None = None,
    ) -> BinaryBatchResult:
        return await self._run(calls.produce_binary(topic, messages, queue_id, with_crc, delay_ms))

    # Consume.
    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int | None = None,
        *,
        max_messages: int = 32,
        wait_ms: int = 0,
        tag: str | None = None,
        group: str | None = None,
        stored_format: bool = True,
    ) -> PullResult:
        """A pull from `offset` (or the group's committed one); a long poll with `wait_ms`."""
        return await self._run(
            calls.pull(
                topic, queue_id, offset, max_messages=max_messages, wait_ms=wait_ms, tag=tag, group=group, stored_format=stored_format
            )
        )

    async def receive(
        self, group: str, topic: str, *, max_messages: int = 32, invisible_ms: int = 30_000, wait_ms: int = 0, tag: str | None = None
    ) -> list[Message]:
        """Group consumption: up to `max_messages`, invisible to the group for `invisible_ms` unless acked."""
        return await self._run(calls.receive(group, topic, max_messages=max_messages, invisible_ms=invisible_ms, wait_ms=wait_ms, tag=tag))

    async def ack(self, group: str, topic: str, receipt_handles: Sequence[str]) -> list[AckResult]:
        return await self._run(calls.ack(group, topic, receipt_handles))

    async def change_invisible(self, group: str, topic: str, receipt_handle: str, invisible_ms: int) -> tuple[str, int]:
        return await self._run(calls.change_invisible(group, topic, receipt_handle, invisible_ms))

    async def stream(
        self,
        group: str,
        topic: str,
        *,
        max_in_flight: int = 32,
        invisible_ms: int = 30_000,
        tag: str | None = None,
        idle_timeout_s: float = DEFAULT_STREAM_IDLE_S,
    ) -> AsyncIterator[Message]:
        """Received messages as the broker pushes them, at most `max_in_flight` unacked; ack each.
        The generator ends when the broker ends the stream; closing it closes the connection."""
        request = calls.stream_request(group, topic, max_in_flight=max_in_flight, invisible_ms=invisible_ms, tag=tag)
        async with self._pool.stream(request, idle_timeout_s) as (head, pieces):
            if head.status != 200:
                head.body = b"".join([p async for p in pieces])
                raise error_of(head)
            parser = EventParser()
            async for piece in pieces:
                for name, data in parser.feed(piece):
                    if name == "message":
                        yield _received(data)

    # Administration and queries.
    async def topics(self) -> list[TopicInfo]:
        return await self._run(calls.topics())

    async def topic(self, name: str) -> TopicInfo:
        return await self._run(calls.topic(name))

    async def create_topic(self, name: str, queues: int | None = None, perm: str = "rw") -> TopicInfo:
        return await self._run(calls.create_topic(name, queues, perm))

    async def delete_topic(self, name: str) -> None:
        await self._run(calls.delete_topic(name))

    async def groups(self) -> list[dict[str, Any]]:
        return await self._run(calls.groups())

    async def configure_group(self, group: str, max_reconsume_times: int = 16, fifo: bool = False) -> dict[str, Any]:
        return await self._run(calls.configure_group(group, max_reconsume_times, fifo))

    async def offsets(self, group: str, topic: str) -> list[QueueLag]:
        return await self._run(calls.offsets(group, topic))

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        await self._run(calls.commit_offset(group, topic, queue_id, offset))

    async def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return await self._run(calls.offset_at(topic, queue_id, timestamp_ms))

    async def query(
        self,
        topic: str,
        *,
        key: str | None = None,
        msg_id: str | None = None,
        begin_ms: int | None = None,
        end_ms: int | None = None,
        max_messages: int = 32,
    ) -> list[Message]:
        """Messages by key or by client message id, stored in [begin_ms, end_ms]."""
        return await self._run(calls.query(topic, key=key, msg_id=msg_id, begin_ms=begin_ms, end_ms=end_ms, max_messages=max_messages))

    async def message(self, offset_msg_id: str) -> Message:
        return await self._run(calls.message(offset_msg_id))

    async def store_status(self) -> dict[str, Any]:
        return await self._run(calls.store_status())


def _received(data: str) -> Message:
    try:
        return Message.from_json(orjson.loads(data))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"unreadable stream event: {e}") from e
