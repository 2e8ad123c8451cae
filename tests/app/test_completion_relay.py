"""CompletionRelay: futures completed together on another thread reach the loop in one hand-off."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from app.completion_relay import CompletionRelay
from store.logfile.commit_future import CommitFuture


def test_a_group_completed_at_once_wakes_the_loop_about_once() -> None:
    async def scenario() -> CompletionRelay:
        relay = CompletionRelay(asyncio.get_running_loop())
        sources: list[concurrent.futures.Future[int]] = [concurrent.futures.Future() for _ in range(64)]
        waiters = [relay.watch(f) for f in sources]

        def flush_thread() -> None:  # completes the whole group, as one group commit does
            for i, f in enumerate(sources):
                f.set_result(i)

        thread = threading.Thread(target=flush_thread)
        thread.start()
        # The loop does not run until the whole group is complete, so every completion after the first
        # finds its hand-off pending and joins it (how many join in a live server depends on the timing).
        thread.join()
        results = await asyncio.gather(*waiters)
        assert results == list(range(64))
        return relay

    relay = asyncio.run(scenario())
    assert relay.completed == 64
    assert relay.handoffs == 1, f"{relay.handoffs} loop wake-ups for one group of 64"


def test_exceptions_pass_and_a_cancelled_waiter_leaves_the_store_future_alone() -> None:
    async def scenario() -> None:
        relay = CompletionRelay(asyncio.get_running_loop())
        failing: concurrent.futures.Future[int] = concurrent.futures.Future()
        slow: concurrent.futures.Future[int] = concurrent.futures.Future()
        failing_waiter = relay.watch(failing)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(relay.watch(slow), 0.05)  # a deadline passes: the waiter is cancelled
        assert not slow.cancelled()
        slow.set_result(1)  # completed later by its thread: delivered to nobody, no error
        threading.Thread(target=failing.set_exception, args=(OSError("disk"),)).start()
        with pytest.raises(OSError, match="disk"):
            await failing_waiter
        done: concurrent.futures.Future[int] = concurrent.futures.Future()
        done.set_result(7)
        assert await relay.watch(done) == 7  # already complete when watched

    asyncio.run(scenario())


def test_the_group_commits_own_future_reaches_the_loop_through_the_relay() -> None:
    async def scenario() -> object:
        relay = CompletionRelay(asyncio.get_running_loop())
        future = CommitFuture()
        waiter = relay.watch(future)
        threading.Thread(target=future.set_result, args=("durable",)).start()
        return await asyncio.wait_for(waiter, 20)

    assert asyncio.run(scenario()) == "durable"
