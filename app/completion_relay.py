"""CompletionRelay: store futures completed on other threads, handed to the event loop in batches.

A SYNC_FLUSH group commit completes every put it made durable at once, on the flush thread.
Awaiting each put's concurrent future through `asyncio.wrap_future` costs one
`call_soon_threadsafe` (a write to the loop's wake-up pipe and a loop iteration) per put; here
the futures completed while a hand-off is pending join it, so one group commit wakes the loop
about once. Invariants: every watched future's result or exception reaches its asyncio
waiter unless the waiter was cancelled meanwhile (its deadline passed); cancelling a waiter
never cancels the store's future, whose flush thread completes it later.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from functools import partial
from typing import Any


class CompletionRelay:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()  # leaf: guards the pending list and the scheduled flag
        self._ready: list[tuple[asyncio.Future[Any], concurrent.futures.Future[Any]]] = []
        self._scheduled = False
        self.handoffs = 0  # loop wake-ups made, for tests and benchmarks
        self.completed = 0  # futures delivered through them

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the relay hands completions to (its waiters' loop)."""
        return self._loop

    def watch(self, future: concurrent.futures.Future[Any]) -> asyncio.Future[Any]:
        """An asyncio future (of this relay's loop) that completes as `future` does."""
        waiter: asyncio.Future[Any] = self._loop.create_future()
        future.add_done_callback(partial(self._arrived, waiter))
        return waiter

    def _arrived(self, waiter: asyncio.Future[Any], future: concurrent.futures.Future[Any]) -> None:
        """Runs on the thread that completed `future` (or on the loop when it was already done)."""
        with self._lock:
            self._ready.append((waiter, future))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            with self._lock:
                self._ready.clear()
                self._scheduled = False

    def _deliver(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
            self._scheduled = False
        self.handoffs += 1
        self.completed += len(ready)
        for waiter, future in ready:
            if waiter.done():
                continue  # its deadline passed and it was cancelled
            exc = future.exception()
            if exc is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(future.result())
