"""ReviveHorizon: a time before which every timer unit is delivered and its delivery dispatched.

The revive service (store/pop/pop_revive_service.py) waits for a checkpoint's acks until this
horizon has passed its time (see there why the horizon, not the wall clock). Without timers it is
the clock's time. With them it is probed in two steps, one revive pass apart: the timer's read time is noted, then the log's end;
once dispatch has passed that end, every delivery of a slot before the noted read time (appended
before the read time moved past its slot, so below the end) is in the revive queues.
"""

from __future__ import annotations

from collections.abc import Callable


class ReviveHorizon:
    def __init__(
        self, now_ms: Callable[[], int], timer_read_ms: Callable[[], int] | None, log_end: Callable[[], int], dispatched: Callable[[], int]
    ) -> None:
        """`timer_read_ms`: the timer's read time (None: no timer, the horizon is now); `log_end`: the
        commitlog's end offset; `dispatched`: the offset dispatch has reached."""
        self._now_ms = now_ms
        self._timer_read_ms = timer_read_ms
        self._log_end = log_end
        self._dispatched = dispatched
        self._probe: tuple[int, int] | None = None  # (timer read time, log end after it)

    def __call__(self) -> int | None:
        """The horizon (ms since the epoch), or None until the first probe is confirmed."""
        now = self._now_ms()
        if self._timer_read_ms is None:
            return now
        confirmed = None
        probe = self._probe
        if probe is not None and self._dispatched() >= probe[1]:
            confirmed = probe[0]
        if probe is None or confirmed is not None:
            read_time = min(now, self._timer_read_ms())  # first the read time, then the end it is checked against
            self._probe = (read_time, self._log_end())
        return confirmed
