"""StoreStatsService: put/get counters, TPS over sliding windows, put latency distribution.

Counters are plain integers bumped without a lock by the threads that put and get, after
the put lock is released (two threads may lose an increment between them: these are
statistics, and a lock here would be taken on every put); a sampler thread records a snapshot every second into a bounded ring, from
which TPS over 10 s, 1 min and 10 min is computed. `snapshot()` answers a StatsSnapshot for
the front end's /metrics.
"""

from __future__ import annotations

import bisect
import collections
import time

from core.service_thread import ServiceThread
from store.report_types import StatsSnapshot

# Upper bounds (microseconds) of the put latency buckets; the last bucket is +Inf.
PUT_LATENCY_BOUNDS_US = (100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000)
SAMPLE_INTERVAL_MS = 1_000
WINDOWS_S = (10, 60, 600)
_COUNTERS = (
    "put_messages",
    "put_bytes",
    "put_failures",
    "get_found",
    "get_miss",
    "get_transferred_messages",
    "get_transferred_bytes",
)


class StoreStatsService(ServiceThread):
    def __init__(self) -> None:
        super().__init__("StoreStatsService")
        self.put_messages = 0
        self.put_bytes = 0
        self.put_failures = 0
        self.get_found = 0
        self.get_miss = 0
        self.get_transferred_messages = 0
        self.get_transferred_bytes = 0
        self.damaged_queue_entries = 0  # consume-queue entries that pointed at no message (skipped by reads)
        self.put_latency_buckets = [0] * (len(PUT_LATENCY_BOUNDS_US) + 1)
        self.put_latency_sum_us = 0
        self.put_max_latency_us = 0
        self.start_ms = int(time.time() * 1000)
        self._ring: collections.deque[tuple[float, tuple[int, ...]]] = collections.deque(maxlen=WINDOWS_S[-1] + 2)

    def record_put(self, messages: int, size: int, latency_us: int) -> None:
        self.put_messages += messages
        self.put_bytes += size
        # Most puts take well under 100 us: skip the search for them.
        self.put_latency_buckets[0 if latency_us <= 100 else bisect.bisect_left(PUT_LATENCY_BOUNDS_US, latency_us)] += 1
        self.put_latency_sum_us += latency_us
        if latency_us > self.put_max_latency_us:
            self.put_max_latency_us = latency_us

    def record_get(self, found: bool, messages: int, size: int) -> None:
        if found:
            self.get_found += 1
            self.get_transferred_messages += messages
            self.get_transferred_bytes += size
        else:
            self.get_miss += 1

    def _values(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in _COUNTERS)

    def sample(self, now: float | None = None) -> None:
        self._ring.append((now if now is not None else time.monotonic(), self._values()))

    def tps(self, window_s: int) -> dict[str, float]:
        """Per-second rates of each counter over the last `window_s` seconds of samples."""
        ring = list(self._ring)
        if len(ring) < 2:
            return {name: 0.0 for name in _COUNTERS}
        newest_t, newest = ring[-1]
        oldest_t, oldest = ring[0]
        for t, values in ring:
            if newest_t - t <= window_s:
                oldest_t, oldest = t, values
                break
        span = newest_t - oldest_t
        if span <= 0:
            return {name: 0.0 for name in _COUNTERS}
        return {name: (newest[i] - oldest[i]) / span for i, name in enumerate(_COUNTERS)}

    def snapshot(self) -> StatsSnapshot:
        return {
            "put_messages": self.put_messages,
            "put_bytes": self.put_bytes,
            "put_failures": self.put_failures,
            "get_found": self.get_found,
            "get_miss": self.get_miss,
            "get_transferred_messages": self.get_transferred_messages,
            "get_transferred_bytes": self.get_transferred_bytes,
            "put_latency_bounds_us": list(PUT_LATENCY_BOUNDS_US),
            "put_latency_buckets": list(self.put_latency_buckets),
            "put_latency_sum_us": self.put_latency_sum_us,
            "put_max_latency_us": self.put_max_latency_us,
            "tps": {f"{w}s": self.tps(w) for w in WINDOWS_S},
            "uptime_ms": int(time.time() * 1000) - self.start_ms,
        }

    def run(self) -> None:
        self.sample()
        while not self.is_stopped():
            self.wait_for_running(SAMPLE_INTERVAL_MS)
            self.sample()
