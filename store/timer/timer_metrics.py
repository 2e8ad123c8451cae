"""TimerMetrics: counters of the timer and the lateness of its deliveries (RocketMQ 5's TimerMetrics role).

Lateness is the delivery time minus the time the message was due (store.timer.timer_message.
target_deliver_ms), kept as a histogram of fixed bucket bounds so its memory never grows with
the number of timers; percentiles are read from the histogram (the bucket's upper bound).
Counters and the histogram live in memory since the start: the pending count is re-read from
the wheel at load (TimerMessageStore), so nothing here needs to survive a restart.
"""

from __future__ import annotations

import bisect
import threading

from store.report_types import TimerCounters, TimerLateness

# Upper bounds (ms) of the lateness buckets; a last, open bucket holds anything later.
LATENESS_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 150, 200, 300, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000)


class TimerMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # leaf lock: the dequeue service records, status readers copy
        self.buckets = [0] * (len(LATENESS_BOUNDS_MS) + 1)
        self.lateness_count = 0
        self.lateness_sum_ms = 0
        self.lateness_max_ms = 0
        self.enqueued = 0  # units written to the timer log (rolls included)
        self.delivered = 0  # copies put to their real topic
        self.rolled = 0  # copies put to the timer topic again (beyond the roll window)
        self.deduplicated = 0  # found already delivered after a crash
        self.undeliverable = 0  # gone, corrupt or refused for good
        self.retries = 0  # puts refused for a passing reason

    def record_lateness(self, lateness_ms: int) -> None:
        late = max(0, lateness_ms)
        with self._lock:
            self.buckets[bisect.bisect_left(LATENESS_BOUNDS_MS, late)] += 1
            self.lateness_count += 1
            self.lateness_sum_ms += late
            if late > self.lateness_max_ms:
                self.lateness_max_ms = late

    def percentile_ms(self, q: float) -> int | None:
        """The upper bound of the bucket holding the q-quantile (None before any delivery; the max for the open bucket)."""
        with self._lock:
            total = self.lateness_count
            if total == 0:
                return None
            rank = max(1, int(q * total + 0.999999))
            seen = 0
            for i, n in enumerate(self.buckets):
                seen += n
                if seen >= rank:
                    return LATENESS_BOUNDS_MS[i] if i < len(LATENESS_BOUNDS_MS) else self.lateness_max_ms
        return self.lateness_max_ms

    def lateness(self) -> TimerLateness:
        with self._lock:
            count, total, worst = self.lateness_count, self.lateness_sum_ms, self.lateness_max_ms
            buckets = list(self.buckets)
        return {
            "count": count,
            "mean_ms": round(total / count, 3) if count else None,
            "p50_ms": self.percentile_ms(0.50),
            "p99_ms": self.percentile_ms(0.99),
            "max_ms": worst if count else None,
            "buckets": [{"le_ms": b, "count": n} for b, n in zip((*LATENESS_BOUNDS_MS, None), buckets, strict=True)],
        }

    def counters(self) -> TimerCounters:
        return {
            "enqueued": self.enqueued,
            "delivered": self.delivered,
            "rolled": self.rolled,
            "deduplicated": self.deduplicated,
            "undeliverable": self.undeliverable,
            "retries": self.retries,
        }
