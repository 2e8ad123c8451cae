"""The one way the tests wait for the broker: poll a condition until it holds, with a deadline.

A test that sleeps for a fixed time to let dispatch, a flush, a state change or a server start
happen is slow where the machine is fast and flaky where it is loaded; `wait_for` returns as soon
as the condition holds and fails with what it waited for. A fixed sleep stays only where the test
needs time itself to pass (an invisible time, a timeout), and says so.

`what` is a string, or a callable that builds the message at the timeout (to show the last state
seen, or the broker's log). Code on an event loop uses `wait_for_async`, which sleeps with the loop
running, so the condition may depend on the loop's own work.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.01

What = str | Callable[[], str]


def _timed_out(timeout_s: float, what: What) -> AssertionError:
    return AssertionError(f"timed out after {timeout_s}s waiting for {what() if callable(what) else what}")


def wait_for(predicate: Callable[[], T], timeout_s: float = 15.0, what: What = "condition", poll_s: float = POLL_S) -> T:
    """The first truthy value `predicate` answers; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what)
        time.sleep(poll_s)


async def wait_for_async(
    predicate: Callable[[], T | Awaitable[T]], timeout_s: float = 15.0, what: What = "condition", poll_s: float = POLL_S
) -> T:
    """`wait_for` on an event loop: `predicate` may be a coroutine function; the loop runs between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout_s, what)
        await asyncio.sleep(poll_s)
