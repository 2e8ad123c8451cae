"""UncancellableFuture: what the put path's futures share, made without a Future's Condition.

A `concurrent.futures.Future` builds a `threading.Condition` (a Python object around an RLock)
and takes it for every state read; per put that cost more than the rest of the put's bookkeeping
on the event loop. The store's futures (store/logfile/group_commit_service.py CommitFuture,
store/logfile/put_durability.py DoneFuture) skip `Future.__init__` and keep their state their
own way. None of them is ever cancelled or run as an executor's work item. Not for
`concurrent.futures.wait`/`as_completed`, which read a Future's condition.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("tidemq.store")
T = TypeVar("T")


class UncancellableFuture(concurrent.futures.Future[T]):
    """The cancellation half of a Future, answered once for the store's futures; subclasses keep the result."""

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def _call(self, fn: Callable[[concurrent.futures.Future[T]], object]) -> None:
        """Run a done callback as Future does: one callback's failure is logged and reaches no one else."""
        try:
            fn(self)
        except Exception:
            log.exception("exception calling callback for %r", self)
