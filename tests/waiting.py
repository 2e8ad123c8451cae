"""The one way the tests wait for the broker: poll a condition until it holds, with a deadline.

A test that sleeps for a fixed time to let dispatch, a flush, a state change or a server start
happen is slow where the machine is fast and flaky where it is loaded; `wait_for` returns as soon
as the condition holds and fails with what it waited for. A fixed sleep stays only where the test
needs time itself to pass (an invisible time, a timeout), and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.01


def wait_for(predicate: Callable[[], T], timeout_s: float = 15.0, what: str = "condition", poll_s: float = POLL_S) -> T:
    """The first truthy value `predicate` answers; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(poll_s)
