"""tidemq.AsyncClient against a real broker on loopback: the same calls as the sync client, from
one event loop, with many requests in flight over a bounded pool."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from tests.app.conftest import BrokerProcess
from tests.client.test_cli import held_pulls
from tests.waiting import wait_for_async
from tidemq import AsyncClient, BatchMessage, Forbidden, NotFound, Timeout

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_produce_single_batch_and_binary_then_pull(shared_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_broker.url) as c:
            await c.create_topic(topic, 1)
            one = await c.produce(topic, b"single", tags="t1", keys=["k1"], queue_id=0)
            batch = await c.produce_batch(topic, [b"j1", b"j2"], queue_id=0)
            binary = await c.produce_binary(topic, [b"b1", BatchMessage(b"b2", tags="t2")], queue_id=0)
            assert (one.queue_offset, [r.queue_offset for r in batch], binary.first_queue_offset) == (0, [1, 2], 3)
            got = await c.pull(topic, 0, 0)
            assert [m.body for m in got.messages] == [b"single", b"j1", b"j2", b"b1", b"b2"]
            assert got.messages[0].keys == ["k1"] and got.messages[4].tags == "t2"

    run(main())


def test_many_calls_in_flight_share_a_small_pool(shared_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_broker.url, max_connections=3) as c:
            await c.create_topic(topic, 1)
            results = await asyncio.gather(*(c.produce(topic, f"m{i}", queue_id=0) for i in range(60)))
            assert sorted(r.queue_offset or 0 for r in results) == list(range(60))
            bodies, offset = [], 0
            while offset < 60:  # a pull returns at most the store's transfer limit (32)
                got = await c.pull(topic, 0, offset, max_messages=100)
                bodies += [m.body for m in got.messages]
                offset = got.next_offset
            assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(60))

    run(main())


def test_long_poll_is_answered_by_a_produce_on_the_same_client(shared_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_broker.url) as c:
            await c.create_topic(topic, 1)
            poll = asyncio.create_task(c.pull(topic, 0, 0, wait_ms=4000))
            await asyncio.sleep(0)  # the poll's request is on its way
            await c.produce(topic, b"wake", queue_id=0)
            got = await asyncio.wait_for(poll, 30)
            assert got.status == "FOUND" and [m.body for m in got.messages] == [b"wake"]

    run(main())


def test_receive_ack_and_stream(shared_broker: BrokerProcess, topic: str) -> None:
    group = "ag-" + uuid.uuid4().hex[:8]

    async def main() -> None:
        async with AsyncClient(shared_broker.url) as c:
            await c.create_topic(topic, 1)
            await c.produce_batch(topic, [b"r1", b"r2", b"r3"], queue_id=0)
            first = await c.receive(group, topic, max_messages=1, wait_ms=1000)
            assert [m.body for m in first] == [b"r1"]
            assert [a.status for a in await c.ack(group, topic, [first[0].receipt_handle or ""])] == ["OK"]
            seen = []
            async for m in c.stream(group, topic, max_in_flight=4):
                seen.append(m.body)
                await c.ack(group, topic, [m.receipt_handle or ""])
                if len(seen) == 2:
                    break
            assert seen == [b"r2", b"r3"]
            assert await c.receive(group, topic) == []

    run(main())


def test_errors_are_typed_and_a_stream_refusal_raises(shared_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_broker.url) as c:
            with pytest.raises(NotFound) as e:
                await c.topic("t-missing-" + uuid.uuid4().hex[:6])
            assert e.value.code == "TOPIC_NOT_FOUND"
            with pytest.raises(Forbidden) as reserved:
                await c.produce("SCHEDULE_TOPIC_XXXX", b"x")
            assert reserved.value.code == "TOPIC_RESERVED" and reserved.value.status == 403
            with pytest.raises(NotFound) as no_stream:
                async for _ in c.stream("g", "t-missing-" + uuid.uuid4().hex[:6]):
                    pass
            assert no_stream.value.code == "TOPIC_NOT_FOUND"

    run(main())


def test_a_long_poll_may_outlast_the_timeout_but_a_silent_stream_may_not(shared_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_broker.url, timeout_s=0.2) as c:
            await c.create_topic(topic, 1)
            await c.produce(topic, b"only", queue_id=0)
            # A pull held for its wait_ms (nothing arrives after offset 1) may take longer than the timeout.
            assert (await c.pull(topic, 0, 1, wait_ms=600)).status == "NO_NEW_MSG"
            # A stream with nothing to deliver sends only a heartbeat every 15 s: the idle timeout ends it.
            with pytest.raises(Timeout) as e:
                async for _ in c.stream("tg", topic, idle_timeout_s=0.5):
                    pass
            assert e.value.code == "TIMEOUT"

    run(main())


def test_a_cancelled_long_poll_leaves_the_client_usable(shared_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(shared_broker.url, max_connections=1) as c:
            await c.create_topic(topic, 1)
            await c.produce(topic, b"first", queue_id=0)
            before = held_pulls(shared_broker)
            poll = asyncio.create_task(c.pull(topic, 0, 1, wait_ms=4000))
            await wait_for_async(lambda: held_pulls(shared_broker) > before, 10, what="the long poll to be held", poll_s=0.02)
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll
            # The only connection was dropped with the cancelled request; the next call opens another.
            await c.produce(topic, b"second", queue_id=0)
            assert [m.body for m in (await c.pull(topic, 0, 0)).messages] == [b"first", b"second"]

    run(main())
