"""Per group and topic counters of group consumption: received, acked, redelivered, dead-lettered.

Bounded: past MAX_KEYS (group, topic) pairs, further pairs are counted under OVERFLOW_KEY, so a
client that invents group names cannot grow the broker's memory or its metrics without limit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_KEYS = 10_000
OVERFLOW_KEY = ("_other", "_other")


@dataclass(slots=True)
class PopCounts:
    received: int = 0
    acked: int = 0
    redelivered: int = 0
    dead_lettered: int = 0

    @property
    def in_flight(self) -> int:
        """Received and not yet acked, redelivered or dead-lettered (never below 0: a restart forgets receives)."""
        return max(0, self.received - self.acked - self.redelivered - self.dead_lettered)


class PopCounters:
    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], PopCounts] = {}
        self._lock = threading.Lock()  # a leaf: nothing else is taken while it is held

    def _of_locked(self, group: str, topic: str) -> PopCounts:
        key = (group, topic)
        counts = self._counts.get(key)
        if counts is None:
            if len(self._counts) >= MAX_KEYS:
                key = OVERFLOW_KEY
            counts = self._counts.setdefault(key, PopCounts())
        return counts

    def add(self, group: str, topic: str, received: int = 0, acked: int = 0, redelivered: int = 0, dead_lettered: int = 0) -> None:
        with self._lock:
            c = self._of_locked(group, topic)
            c.received += received
            c.acked += acked
            c.redelivered += redelivered
            c.dead_lettered += dead_lettered

    def forget(self, group: str) -> None:
        """Drop a deleted group's counts."""
        with self._lock:
            for key in [k for k in self._counts if k[0] == group]:
                del self._counts[key]

    def snapshot(self) -> dict[tuple[str, str], PopCounts]:
        with self._lock:
            return {k: PopCounts(v.received, v.acked, v.redelivered, v.dead_lettered) for k, v in self._counts.items()}
