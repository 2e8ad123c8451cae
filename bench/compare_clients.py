"""One small async client interface per system, over the Python client a user would pick.

- tidemq: tidemq.AsyncClient (its own client: HTTP/1.1 keep-alive, a pool sized to the concurrency);
  one message per call is `produce` (a raw `application/octet-stream` POST), a batch is
  `produce_batch` (one JSON POST of 100 messages), catch-up reads and the tail are `pull`s in the
  stored-bytes format, the tail's with `wait_ms` (a long poll).
- NATS JetStream: nats-py; `js.publish` per message, `js.publish_async` windows for a batch,
  pull consumers (`fetch`) for catch-up and the tail.
- Redis Streams: redis-py asyncio; `XADD` per message, non-transactional pipelines of `XADD`
  for a batch, `XREAD COUNT` for catch-up and `XREAD BLOCK` for the tail.

Invariants: a `channel` is one topic / stream / key with a single queue (partition), created by
`setup` and dropped by `teardown`; `consume` reads from the first message and returns only once
it has seen `n` messages (or raises); `tail` starts after the last message stored when it is
called and hands each body to `sink` in arrival order until `stop` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemq import AsyncClient, NotFound, PullResult

if TYPE_CHECKING:  # the clients are imported when a run opens them
    import redis.asyncio as aioredis
    from nats.aio.client import Client as NatsConnection
    from nats.js.client import JetStreamContext

Sink = Callable[[bytes], None]

# Messages asked for by one catch-up read (XREAD COUNT, fetch batch, tidemq `max`).
CATCH_UP_WAIT_MS = 5_000  # longest wait for messages acknowledged but not yet dispatched
CATCH_UP_BATCH = 1000
# Messages asked for by one tail read; the reads return as soon as one message is there.
TAIL_BATCH = 100
# How long one tail read may be held by the server before it is asked again.
TAIL_WAIT_MS = 1000
# Longest any single client call may take before the run is declared failed.
CALL_TIMEOUT_S = 60.0


class ClientError(Exception):
    """Raised when a system answers a benchmark call with an error or an unexpected shape."""


class BrokerClient:
    system = ""

    async def open(self, concurrency: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def setup(self, channel: str) -> None:
        raise NotImplementedError

    async def teardown(self, channel: str) -> None:
        raise NotImplementedError

    async def produce_one(self, channel: str, body: bytes) -> None:
        raise NotImplementedError

    async def produce_batch(self, channel: str, bodies: list[bytes]) -> None:
        raise NotImplementedError

    async def consume(self, channel: str, n: int) -> int:
        """Read the first n messages; returns the body bytes seen."""
        raise NotImplementedError

    async def tail(self, channel: str, sink: Sink, stop: asyncio.Event, armed: asyncio.Event) -> None:
        raise NotImplementedError


class TidemqClient(BrokerClient):
    system = "tidemq"

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.client: AsyncClient | None = None

    async def open(self, concurrency: int) -> None:
        self.client = AsyncClient(self.base, max_connections=concurrency + 2, timeout_s=CALL_TIMEOUT_S)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def setup(self, channel: str) -> None:
        assert self.client
        await self.client.create_topic(channel, queues=1)

    async def teardown(self, channel: str) -> None:
        assert self.client
        with contextlib.suppress(NotFound):
            await self.client.delete_topic(channel)

    async def produce_one(self, channel: str, body: bytes) -> None:
        assert self.client
        await self.client.produce(channel, body, queue_id=0)

    async def produce_batch(self, channel: str, bodies: list[bytes]) -> None:
        assert self.client
        await self.client.produce_batch(channel, bodies, queue_id=0)

    async def _pull(self, channel: str, offset: int, max_count: int, wait_ms: int) -> PullResult:
        assert self.client
        return await self.client.pull(channel, 0, offset, max_messages=max_count, wait_ms=wait_ms)

    async def consume(self, channel: str, n: int) -> int:
        offset, seen, total = 0, 0, 0
        while seen < n:
            got = await self._pull(channel, offset, CATCH_UP_BATCH, 0)
            if got.next_offset == offset:
                # Acknowledged but not yet dispatched (dispatch trails the put): wait for it, once.
                got = await self._pull(channel, offset, CATCH_UP_BATCH, CATCH_UP_WAIT_MS)
            if got.next_offset == offset:
                raise ClientError(f"tidemq: no progress at offset {offset} after {seen} of {n} messages")
            total += sum(len(m.body) for m in got.messages)
            seen += len(got.messages)
            offset = got.next_offset
        return total

    async def tail(self, channel: str, sink: Sink, stop: asyncio.Event, armed: asyncio.Event) -> None:
        assert self.client
        offset = (await self._pull(channel, 0, 1, 0)).max_offset
        armed.set()
        while not stop.is_set():
            got = await self._pull(channel, offset, TAIL_BATCH, TAIL_WAIT_MS)
            for m in got.messages:
                sink(m.body)
            offset = got.next_offset


class NatsClient(BrokerClient):
    system = "nats"

    def __init__(self, port: int) -> None:
        self.url = f"nats://127.0.0.1:{port}"
        self.nc: NatsConnection | None = None
        self.js: JetStreamContext | None = None

    async def open(self, concurrency: int) -> None:
        import nats

        self.nc = await nats.connect(self.url, max_reconnect_attempts=0)
        self.js = self.nc.jetstream(timeout=CALL_TIMEOUT_S)

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.close()

    @staticmethod
    def _stream(channel: str) -> str:
        return "S_" + channel.replace("-", "_").replace(".", "_")

    async def setup(self, channel: str) -> None:
        from nats.js.api import StorageType

        assert self.js
        await self.js.add_stream(name=self._stream(channel), subjects=[f"bench.{channel}"], storage=StorageType.FILE)

    async def teardown(self, channel: str) -> None:
        assert self.js
        with contextlib.suppress(Exception):
            await self.js.delete_stream(self._stream(channel))

    async def produce_one(self, channel: str, body: bytes) -> None:
        assert self.js
        await self.js.publish(f"bench.{channel}", body)

    async def produce_batch(self, channel: str, bodies: list[bytes]) -> None:
        assert self.js
        subject = f"bench.{channel}"
        futures = [await self.js.publish_async(subject, b) for b in bodies]
        await asyncio.gather(*futures)

    async def _pull(self, channel: str, deliver_new: bool) -> JetStreamContext.PullSubscription:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        assert self.js
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.NEW if deliver_new else DeliverPolicy.ALL)
        return await self.js.pull_subscribe(f"bench.{channel}", durable=None, stream=self._stream(channel), config=config)

    async def consume(self, channel: str, n: int) -> int:
        sub = await self._pull(channel, deliver_new=False)
        seen, total = 0, 0
        try:
            while seen < n:
                for msg in await sub.fetch(batch=min(CATCH_UP_BATCH, n - seen), timeout=CALL_TIMEOUT_S):
                    total += len(msg.data)
                    seen += 1
        finally:
            await sub.unsubscribe()
        return total

    async def tail(self, channel: str, sink: Sink, stop: asyncio.Event, armed: asyncio.Event) -> None:
        sub = await self._pull(channel, deliver_new=True)
        armed.set()
        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(batch=TAIL_BATCH, timeout=TAIL_WAIT_MS / 1000)
                except TimeoutError:
                    continue
                for msg in msgs:
                    sink(msg.data)
        finally:
            await sub.unsubscribe()


class RedisClient(BrokerClient):
    system = "redis"

    def __init__(self, port: int) -> None:
        self.port = port
        self.r: aioredis.Redis | None = None

    async def open(self, concurrency: int) -> None:
        import redis.asyncio as aioredis

        pool = aioredis.BlockingConnectionPool(
            host="127.0.0.1", port=self.port, max_connections=concurrency + 2, timeout=CALL_TIMEOUT_S, socket_timeout=CALL_TIMEOUT_S
        )
        self.r = aioredis.Redis(connection_pool=pool)
        await self.r.ping()

    async def close(self) -> None:
        if self.r is not None:
            await self.r.aclose()

    async def setup(self, channel: str) -> None:
        assert self.r
        await self.r.delete(channel)

    async def teardown(self, channel: str) -> None:
        assert self.r
        await self.r.delete(channel)

    async def produce_one(self, channel: str, body: bytes) -> None:
        assert self.r
        await self.r.xadd(channel, {"d": body})

    async def produce_batch(self, channel: str, bodies: list[bytes]) -> None:
        assert self.r
        pipe = self.r.pipeline(transaction=False)
        for b in bodies:
            pipe.xadd(channel, {"d": b})
        await pipe.execute()

    async def consume(self, channel: str, n: int) -> int:
        assert self.r
        last, seen, total = "0-0", 0, 0
        while seen < n:
            reply = await self.r.xread({channel: last}, count=min(CATCH_UP_BATCH, n - seen))
            if not reply:
                raise ClientError(f"redis: stream ended after {seen} of {n} messages")
            assert isinstance(reply, list)  # [[stream, entries]]: redis-py's legacy (RESP2) shape, its default
            entries = reply[0][1]
            for _id, fields in entries:
                total += len(fields[b"d"])
            seen += len(entries)
            last = entries[-1][0]
        return total

    async def tail(self, channel: str, sink: Sink, stop: asyncio.Event, armed: asyncio.Event) -> None:
        assert self.r
        newest = await self.r.xrevrange(channel, count=1)
        last = newest[0][0] if newest else "0-0"
        assert last is not None  # only a deleted entry (in a pending list) has no id
        armed.set()
        while not stop.is_set():
            reply = await self.r.xread({channel: last}, count=TAIL_BATCH, block=TAIL_WAIT_MS)
            if not reply:
                continue
            assert isinstance(reply, list)  # [[stream, entries]], as in consume
            for entry_id, fields in reply[0][1]:
                sink(fields[b"d"])
                last = entry_id


def client_for(system: str, port: int) -> BrokerClient:
    if system == "tidemq":
        return TidemqClient(port)
    if system == "nats":
        return NatsClient(port)
    assert system == "redis", system
    return RedisClient(port)
