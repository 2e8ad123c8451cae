"""Clock: the time source of the schedule and cleanup services.

The services ask a Clock for "now" instead of calling `time.time()` so that tests can
drive every time-dependent branch (file age, hour of day, due time) deterministically
with a FakeClock. Invariant: `hour()` is the local hour (0..23) of `now_ms()`, unless a
FakeClock has it pinned.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...

    def hour(self) -> int:
        """Local hour of the day of `now_ms()`, 0..23."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def hour(self) -> int:
        return time.localtime().tm_hour


class FakeClock:
    """A clock that moves only when told to; the hour may be pinned independently of the time."""

    def __init__(self, now_ms: int | None = None, hour: int | None = None) -> None:
        self._lock = threading.Lock()  # the services read it from their threads
        self._now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        self._hour = hour

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def hour(self) -> int:
        with self._lock:
            if self._hour is not None:
                return self._hour
            return time.localtime(self._now_ms / 1000).tm_hour

    def set_ms(self, now_ms: int) -> None:
        with self._lock:
            self._now_ms = now_ms

    def advance_ms(self, delta_ms: int) -> None:
        assert delta_ms >= 0, "a clock never goes back"
        with self._lock:
            self._now_ms += delta_ms

    def pin_hour(self, hour: int | None) -> None:
        """Make `hour()` answer `hour` whatever the time (None: follow the time again)."""
        assert hour is None or 0 <= hour <= 23
        with self._lock:
            self._hour = hour


SYSTEM_CLOCK = SystemClock()
