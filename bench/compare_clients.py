"""One small async client interface per system, over the Python client a user would pick.

- tidemq: httpx.AsyncClient (HTTP/1.1 keep-alive, a pool sized to the concurrency); one message
  per call is a raw `application/octet-stream` POST, a batch is one JSON POST of 100 messages,
  catch-up reads ask for the stored-bytes batch format, the tail is a long-poll GET.
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

import httpx

from store.message_codec import iter_messages, read_int

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
# Where the body length sits in a stored tidemq message (fields 1..14 come first, 84 bytes).
BODY_LENGTH_POS = 84
# The pull reply format with the stored bytes, and the header with the offset to pull next.
BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
NEXT_OFFSET_HEADER = "x-tidemq-next-offset"


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
        self.http: httpx.AsyncClient | None = None

    async def open(self, concurrency: int) -> None:
        limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
        self.http = httpx.AsyncClient(base_url=self.base, limits=limits, timeout=CALL_TIMEOUT_S)

    async def close(self) -> None:
        if self.http is not None:
            await self.http.aclose()

    def _check(self, r: httpx.Response, *expected: int) -> httpx.Response:
        if r.status_code not in expected:
            raise ClientError(f"tidemq {r.request.method} {r.request.url.path} -> {r.status_code}: {r.text[:300]}")
        return r

    async def setup(self, channel: str) -> None:
        assert self.http
        self._check(await self.http.put(f"/v1/topics/{channel}", json={"queues": 1}), 200, 201)

    async def teardown(self, channel: str) -> None:
        assert self.http
        self._check(await self.http.delete(f"/v1/topics/{channel}"), 200, 204, 404)

    async def produce_one(self, channel: str, body: bytes) -> None:
        assert self.http
        r = await self.http.post(
            f"/v1/topics/{channel}/messages", params={"queue_id": 0}, content=body, headers={"content-type": "application/octet-stream"}
        )
        self._check(r, 201)

    async def produce_batch(self, channel: str, bodies: list[bytes]) -> None:
        assert self.http
        messages = [{"body": b.decode("ascii"), "queue_id": 0} for b in bodies]
        self._check(await self.http.post(f"/v1/topics/{channel}/messages", json={"messages": messages}), 201)

    async def _pull_batch(self, channel: str, offset: int, max_count: int, wait_ms: int) -> tuple[bytes, int]:
        assert self.http
        r = await self.http.get(
            f"/v1/topics/{channel}/queues/0/messages",
            params={"offset": offset, "max": max_count, "wait_ms": wait_ms},
            headers={"accept": BATCH_MEDIA_TYPE},
        )
        self._check(r, 200)
        return r.content, int(r.headers[NEXT_OFFSET_HEADER])

    async def consume(self, channel: str, n: int) -> int:
        offset, seen, total = 0, 0, 0
        while seen < n:
            data, next_offset = await self._pull_batch(channel, offset, CATCH_UP_BATCH, 0)
            if next_offset == offset:
                # Acknowledged but not yet dispatched (dispatch trails the put): wait for it, once.
                data, next_offset = await self._pull_batch(channel, offset, CATCH_UP_BATCH, CATCH_UP_WAIT_MS)
            if next_offset == offset:
                raise ClientError(f"tidemq: no progress at offset {offset} after {seen} of {n} messages")
            view = memoryview(data)
            for pos, _size in iter_messages(view):
                length = read_int(view, pos + BODY_LENGTH_POS)
                total += len(view[pos + BODY_LENGTH_POS + 4 : pos + BODY_LENGTH_POS + 4 + length])
                seen += 1
            offset = next_offset
        return total

    async def tail(self, channel: str, sink: Sink, stop: asyncio.Event, armed: asyncio.Event) -> None:
        assert self.http
        r = self._check(await self.http.get(f"/v1/topics/{channel}/queues/0/messages", params={"offset": 0, "max": 1}), 200)
        offset = int(r.json()["max_offset"])
        armed.set()
        while not stop.is_set():
            data, next_offset = await self._pull_batch(channel, offset, TAIL_BATCH, TAIL_WAIT_MS)
            view = memoryview(data)
            for pos, _size in iter_messages(view):
                length = read_int(view, pos + BODY_LENGTH_POS)
                sink(bytes(view[pos + BODY_LENGTH_POS + 4 : pos + BODY_LENGTH_POS + 4 + length]))
            offset = next_offset


class NatsClient(BrokerClient):
    system = "nats"

    def __init__(self, port: int) -> None:
        self.url = f"nats://127.0.0.1:{port}"
        self.nc = None
        self.js = None

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

    async def _pull(self, channel: str, deliver_new: bool):  # type: ignore[no-untyped-def]
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
        self.r = None

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
        armed.set()
        while not stop.is_set():
            reply = await self.r.xread({channel: last}, count=TAIL_BATCH, block=TAIL_WAIT_MS)
            if not reply:
                continue
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
