"""HeldPulls: the bound, tag-code filtering, coalesced wake-ups from another thread, close()."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from app.long_poll import MAX_PENDING_CODES, HeldPulls, Wake, wait_held
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
        await asyncio.sleep(0.01)  # nothing more may wake: any other wake-up the thread queued has run by now
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
        await asyncio.sleep(0.01)  # nothing more may wake: any other wake-up the thread queued has run by now
        assert not other_queue.future.done() and held.woken_total == 2

    asyncio.run(scenario())


def test_wake_ups_are_coalesced_per_queue() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        held = HeldPulls(max_held=10)
        held.bind(loop)
        scheduled: list[object] = []
        original = loop.call_soon_threadsafe

        def counting(callback: Callable[..., object], *args: Any) -> asyncio.Handle:
            scheduled.append(args)
            return original(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]  # counts what is scheduled, no context
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
        loop.call_soon_threadsafe = lambda *a: calls.append(a)  # type: ignore[method-assign,assignment]  # records instead
        arrive_from_thread(held, ("t", 0, 0), ("t", 1, 0))
        assert calls == []

    asyncio.run(scenario())


def test_an_arrival_dispatched_on_the_loop_wakes_matching_waiters_at_once_without_a_callback() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        held = HeldPulls(max_held=10)
        held.bind(loop)
        scheduled: list[object] = []
        loop.call_soon_threadsafe = lambda *a: scheduled.append(a)  # type: ignore[method-assign,assignment]  # records instead
        shared = loop.create_future()
        tag_a = held.register("t", 0, frozenset({tags_hash("A")}), shared)
        retry = held.register("%RETRY%g_t", 0, frozenset({tags_hash("A")}), shared)
        tag_b = held.register("t", 0, frozenset({tags_hash("B")}))
        assert tag_a and retry and tag_b and tag_a.future is retry.future is shared
        held.on_message_arriving("t", 0, 1, (tags_hash("A"),))  # as an HTTP put's inline dispatch calls it
        assert shared.done() and shared.result() is Wake.ARRIVED  # completed in the call, before the loop ran
        assert not tag_b.future.done() and held.woken_total == 1 and scheduled == []
        held.on_message_arriving("t", 0, 2, None)  # more codes than listed: every waiter of the queue
        assert tag_b.future.result() is Wake.ARRIVED

    asyncio.run(scenario())


def test_a_put_delivers_its_message_to_the_pulls_held_at_its_offset_that_take_every_message() -> None:
    async def scenario() -> None:
        held = HeldPulls(max_held=10)
        held.bind(asyncio.get_running_loop())
        at_five = held.register("t", 0, None, None, 5)
        also_at_five = held.register("t", 0, None, None, 5)
        at_six = held.register("t", 0, None, None, 6)
        filtered = held.register("t", 0, frozenset({tags_hash("A")}))  # a filtered pull: offset -1
        other_queue = held.register("t", 1, None, None, 5)
        assert at_five and also_at_five and at_six and filtered and other_queue
        assert held.waits_on(("t", 0)) and not held.waits_on(("t", 2))
        assert held.deliver(("t", 0), 5, [(4096, 180)]) == 2
        assert at_five.future.result() is Wake.ARRIVED and at_five.delivery == [(4096, 180)]
        assert also_at_five.delivery == [(4096, 180)]
        for waiter in (at_six, filtered, other_queue):
            assert not waiter.future.done() and waiter.delivery is None
        assert held.deliver(("t", 0), 5, [(9999, 1)]) == 0  # a pull already woken is not delivered twice
        assert at_five.delivery == [(4096, 180)]
        assert held.deliver(("t", 3), 0, [(0, 1)]) == 0  # no pull held there
        assert (held.woken_total, held.delivered_total) == (2, 2)
        # The dispatch pass that follows wakes the rest as before; it does not count the delivered again.
        held.on_message_arriving("t", 0, 6, None)
        assert at_six.future.done() and filtered.future.done() and held.woken_total == 4 and held.delivered_total == 2
        assert at_six.delivery is None

    asyncio.run(scenario())


def test_a_held_wait_ends_by_arrival_departure_revocation_or_deadline() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        held = HeldPulls(max_held=10)
        held.bind(loop)

        async def wait(ending: str) -> Wake:
            waiter = held.register("t", 0, None)
            assert waiter is not None
            gone, revoked = loop.create_future(), loop.create_future()
            if ending == "arrival":
                loop.call_soon(held.on_message_arriving, "t", 0, 1, None)
            elif ending == "departure":
                loop.call_soon(gone.set_result, None)
            elif ending == "revocation":
                loop.call_soon(revoked.set_result, ("FORBIDDEN", "access revoked"))
            try:
                return await wait_held(waiter.future, 0.05 if ending == "deadline" else 30, gone, revoked)
            finally:
                held.unregister(waiter)
                assert not gone._callbacks and not revoked._callbacks  # the links are removed

        assert await wait("arrival") is Wake.ARRIVED
        assert await wait("departure") is Wake.GONE
        assert await wait("revocation") is Wake.REVOKED
        assert await wait("deadline") is Wake.DEADLINE
        assert held.held == 0

    asyncio.run(scenario())
