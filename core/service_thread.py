"""ServiceThread: the one base of every background thread of the store.

Contract:
- `start()` starts the thread once; `run()` loops while `is_stopped()` is false.
- `wakeup()` never blocks: it sets a flag and an event the loop waits on.
- `wait_for_running(interval_ms)` sleeps at most `interval_ms`, returns early on
  `wakeup()` or `shutdown()`, and calls `on_wait_end()` before returning (the
  hook GroupCommitService uses to swap its request lists).
- `shutdown()` sets the stop flag, wakes the loop and joins for at most
  `join_timeout_ms`; `run()` is expected to do its final bounded flush after its
  loop exits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("tidemq.store")


class ServiceThread:
    join_timeout_ms: int = 10_000

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__
        self._stopped = False
        self._has_notified = False
        self._wait_point = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self.waits = 0  # waits ended (`wait_for_running`): how often the thread woke, for tests and benches

    # Lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._stopped = False
        self._thread = threading.Thread(target=self._run_guarded, name=self.name, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the loop, wake it and wait (bounded) for its final flush."""
        self._stopped = True
        self.wakeup()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.join_timeout_ms / 1000.0)
            if thread.is_alive():
                log.warning("%s did not stop within %d ms", self.name, self.join_timeout_ms)
        self._started = False

    def is_stopped(self) -> bool:
        return self._stopped

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # Waiting -----------------------------------------------------------------------

    def wakeup(self) -> None:
        if not self._has_notified:
            self._has_notified = True
            self._wait_point.set()

    def wait_for_running(self, interval_ms: float) -> None:
        self.waits += 1
        if self._has_notified:
            self._has_notified = False
            self.on_wait_end()
            return
        self._wait_point.clear()
        # A wakeup between the check above and the clear would be lost without this re-check.
        if not self._has_notified:
            self._wait_point.wait(interval_ms / 1000.0)
        self._has_notified = False
        self.on_wait_end()

    def wait_until(self, ready: Callable[[], bool], interval_ms: float) -> None:
        """Wait, `interval_ms` at a time, until `ready()` (e.g. the store runs) or shutdown."""
        while not self.is_stopped() and not ready():
            self.wait_for_running(interval_ms)

    def on_wait_end(self) -> None:
        """Hook run each time a wait ends."""

    # Body --------------------------------------------------------------------------

    def run(self) -> None:
        raise NotImplementedError

    @staticmethod
    def repeat_until_done(write_all: Callable[[], bool], rounds: int) -> None:
        """A final flush (or commit) after the loop: `write_all()` until it reports nothing left
        (True), at most `rounds` times, so a shutdown is bounded."""
        for _ in range(rounds):
            if write_all():
                break

    def _run_guarded(self) -> None:
        log.info("%s started", self.name)
        try:
            self.run()
        except Exception:  # a dying service must be visible, not silent
            log.exception("%s stopped by an unexpected error", self.name)
        log.info("%s stopped", self.name)
