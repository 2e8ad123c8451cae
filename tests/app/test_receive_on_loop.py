"""Which receives and acks run on the event loop (app/receiver.py): only while the store answers a put at once,
only for a group that is not FIFO, and a take only when what it reads is near the queues' ends."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.broker import Broker
from app.receiver import Receiver, ReceiveSpec
from app.settings import BrokerSettings
from store import FlushDiskType, MessageStoreConfig, build_message, retry_topic
from tests.waiting import wait_for_async

pytestmark = pytest.mark.timeout(60)


def spec(group: str, topic: str) -> ReceiveSpec:
    return ReceiveSpec(group, topic, 32, 30_000, 0, None, None)


def run_with_broker(tmp_path: Path, flush: FlushDiskType, window: int, scenario: Callable[[Broker, Receiver], Awaitable[None]]) -> None:
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 22, max_message_size_bytes=1 << 16, flush_disk_type=flush)
    settings = BrokerSettings(store_dir=str(tmp_path / flush.name), store=config, inline_read_window_messages=window).validate()
    broker = Broker(settings)

    async def main() -> None:
        await broker.start()
        try:
            await broker.run(broker.store.create_or_update_topic, "t", 2, "rw")
            await scenario(broker, Receiver(broker))
        finally:
            await broker.stop()

    asyncio.run(main())


def test_async_flush_non_fifo_groups_run_on_the_loop_and_fifo_groups_do_not(tmp_path: Path) -> None:
    async def scenario(broker: Broker, receiver: Receiver) -> None:
        await broker.run(broker.store.group_consumption.put_group, "ordered", 16, True)
        assert receiver.on_loop("plain") and not receiver.on_loop("ordered")

    run_with_broker(tmp_path, FlushDiskType.ASYNC_FLUSH, 1024, scenario)


def test_sync_flush_keeps_receives_and_acks_in_the_pool(tmp_path: Path) -> None:
    async def scenario(broker: Broker, receiver: Receiver) -> None:
        assert not receiver.on_loop("plain")

    run_with_broker(tmp_path, FlushDiskType.SYNC_FLUSH, 1024, scenario)


def test_a_take_is_near_the_tail_only_while_the_group_is_within_the_window_in_all(tmp_path: Path) -> None:
    async def scenario(broker: Broker, receiver: Receiver) -> None:
        store = broker.store
        assert receiver.near_tail(spec("g", "t"), 2)  # nothing stored: nothing to read from disk
        for queue_id in (0, 1):
            assert store.put_messages([build_message("t", b"m", queue_id) for _ in range(3)]).ok
        await wait_for_async(
            lambda: store.get_max_offset_in_queue("t", 1) >= 3, 10, what="queue 1's messages to be dispatched", poll_s=0.005
        )
        assert not receiver.near_tail(spec("g", "t"), 2)  # 6 behind in all, the window is 4
        got = await receiver.take_soon(spec("g", "t"), 2, False)  # read in the pool, and the offsets committed
        assert sorted(p.data is not None for p in got) == [True] * 6
        assert receiver.near_tail(spec("g", "t"), 2)

    run_with_broker(tmp_path, FlushDiskType.ASYNC_FLUSH, 4, scenario)


def test_a_take_is_made_only_while_a_queue_holds_messages_past_the_groups_offsets(tmp_path: Path) -> None:
    """`pending` is what lets a receive (and a held one after registering) skip a take that could find nothing."""

    async def scenario(broker: Broker, receiver: Receiver) -> None:
        store = broker.store
        assert not receiver.pending(spec("g", "t"), 2)  # nothing stored
        assert store.put_messages([build_message("t", b"m", 1) for _ in range(2)]).ok
        await wait_for_async(lambda: store.get_max_offset_in_queue("t", 1) >= 2, 10, what="the messages dispatched", poll_s=0.005)
        assert receiver.pending(spec("g", "t"), 2) and receiver.pending(spec("other", "t"), 2)
        got = await receiver.take_soon(spec("g", "t"), 2, False)
        assert len(got) == 2
        assert not receiver.pending(spec("g", "t"), 2)  # the group's offsets are past them
        assert receiver.pending(spec("other", "t"), 2)  # another group has not taken them
        retry = retry_topic("g", "t")
        await broker.run(store.create_or_update_topic, retry, 1, "rw")
        assert store.put_messages([build_message(retry, b"again", 0)]).ok  # as the revive service puts one back
        await wait_for_async(lambda: store.get_max_offset_in_queue(retry, 0) >= 1, 10, what="the retry message dispatched", poll_s=0.005)
        assert receiver.pending(spec("g", "t"), 2)
        (again,) = await receiver.take_soon(spec("g", "t"), 2, False)
        assert again.queue_topic == retry and not receiver.pending(spec("g", "t"), 2)

    run_with_broker(tmp_path, FlushDiskType.ASYNC_FLUSH, 1024, scenario)
