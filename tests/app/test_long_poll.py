"""HeldPulls: the bound, tag-code filtering, coalesced wake-ups from another thread, close()."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.long_poll import MAX_PENDING_CODES, HeldPulls
from store.codec.message import tags_hash

pytestmark = pytest.mark.timeout(30)


def arrive_from_thread(held: HeldPulls, *arrivals: tuple[str, int, int | None]) -> None:
    """Call the listener the way a dispatching thread does: from another thread (code None: more codes than listed)."""

    def run() -> None:
        for topic, queue_id, code in arrivals:
            held.on_message_arriving(topic, queue_id, 1, None if code is None else (code,))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_bound_and_close() -> None:
    async def scenario() -> None:
        held = HeldPulls(max_held=2)
        held.bind(asyncio.get_running_loop())
        a = held.register("t", 0, None)
        b = held.register("t", 1, None)
        assert a is not None and b is not None and held.held == 2
        assert held.register("t", 2, None) is None and held.refused_total == 1
        held.unregister(a)
        held.unregister(a)  # twice is harmless
        assert held.held == 1
        held.close()
        assert b.future.done() and held.closed
        assert held.register("t", 0, None) is None

    asyncio.run(scenario())


def test_only_matching_waiters_of_the_queue_are_woken() -> None:
    async def scenario() -> None:
        held = HeldPulls(max_held=10)
        held.bind(asyncio.get_running_loop())
        any_tag = held.register("t", 0, None)
        tag_a = held.register("t", 0, frozenset({tags_hash("A")}))
        tag_b = held.register("t", 0, frozenset({tags_hash("B")}))
        other_queue = held.register("t", 1, None)
        assert any_tag and tag_a and tag_b and other_queue
        arrive_from_thread(held, ("t", 0, tags_hash("A")), ("u", 0, 0))
        await asyncio.wait_for(any_tag.future, 5)
        await asyncio.sleep(0.01)
        assert tag_a.future.done() and not tag_b.future.done() and not other_queue.future.done()
        assert held.woken_total == 2

    asyncio.run(scenario())


def test_codes_the_store_does_not_list_wake_every_waiter_of_the_queue() -> None:
    async def scenario() -> None:
        held = HeldPulls(max_held=10)
        held.bind(asyncio.get_running_loop())
        tag_a = held.register("t", 0, frozenset({tags_hash("A")}))
        tag_b = held.register("t", 0, frozenset({tags_hash("B")}))
        other_queue = held.register("t", 1, frozenset({tags_hash("A")}))
        assert tag_a and tag_b and other_queue
        arrive_from_thread(held, ("t", 0, None))
        await asyncio.wait_for(asyncio.gather(tag_a.future, tag_b.future), 5)
        await asyncio.sleep(0.01)
        assert not other_queue.future.done() and held.woken_total == 2

    asyncio.run(scenario())


def test_wake_ups_are_coalesced_per_queue() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        held = HeldPulls(max_held=10)
        held.bind(loop)
        scheduled: list[object] = []
        original = loop.call_soon_threadsafe

        def counting(callback, *args):  # type: ignore[no-untyped-def]
            scheduled.append(args)
            return original(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        waiter = held.register("t", 0, frozenset({tags_hash("Z")}))
        assert waiter is not None
        # Many arrivals before the loop runs: one callback; more distinct codes than remembered wakes everyone.
        arrive_from_thread(held, *[("t", 0, code) for code in range(MAX_PENDING_CODES + 5)])
        assert len(scheduled) == 1
        await asyncio.wait_for(waiter.future, 5)

    asyncio.run(scenario())


def test_no_waiter_no_callback() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        held = HeldPulls(max_held=10)
        held.bind(loop)
        calls: list[object] = []
        loop.call_soon_threadsafe = lambda *a: calls.append(a)  # type: ignore[method-assign]
        arrive_from_thread(held, ("t", 0, 0), ("t", 1, 0))
        assert calls == []

    asyncio.run(scenario())
