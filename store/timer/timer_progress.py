"""TimerProgress: the timer's delivery progress as state records, so a slave knows how far its master delivered.

A master records its read time (every slot before it was delivered) in the log after a flush pass
that delivered something, and at least every RECORD_EVERY_MS while the read time moves; a slave
applies the records to its own timer, which builds its timer log and wheel from the replicated
timer topic like its master's. A slave that becomes master starts from the recorded read time and
checks every unit of the slots before the time it took over against the index (UNIQ_KEY) before
delivering it, as after a crash, so a message its old master delivered after the last record is
not delivered twice (store/timer/timer_message_store.py).

The table has no local file: the timer's own checkpoint (config/timercheck) holds the progress
of this node; the records only carry a master's progress to its slaves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from store.state.state_table import StateKind, StateTable

# A master whose read time moved records it at least this often, even with nothing delivered.
RECORD_EVERY_MS = 60_000


class TimerProgress(StateTable):
    kind = StateKind.TIMER_PROGRESS

    def __init__(self) -> None:
        super().__init__()
        self.based = True  # nothing to restore: the latest record says everything
        self.read_time_ms = 0  # the last recorded read time
        self.recorded_dequeued = 0  # the timer's delivered count at the last record (master side)
        self.recorded_at_ms = 0
        self.on_read_time: Callable[[int], None] = lambda read_time_ms: None  # set by the timer: a slave follows

    def record_if_due(self, read_time_ms: int, dequeued: int, now_ms: int) -> bool:
        """On a master: record the read time after deliveries, or when it moved and RECORD_EVERY_MS passed."""
        if self.state_log is None or not self.state_log.replicated or read_time_ms <= self.read_time_ms:
            return False  # no slave to tell
        if dequeued == self.recorded_dequeued and now_ms - self.recorded_at_ms < RECORD_EVERY_MS:
            return False
        self.record({"rt": read_time_ms})
        self.recorded_dequeued, self.recorded_at_ms = dequeued, now_ms
        return True

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        value = payload.get("rt")
        if type(value) is int and value > self.read_time_ms:
            self.read_time_ms = value
            if log_offset >= 0:
                self.on_read_time(value)

    def rows_locked(self) -> list[Any]:
        return [self.read_time_ms] if self.read_time_ms else []

    def restore_locked(self, rows: list[Any]) -> None:
        self.read_time_ms = int(rows[0]) if rows else 0

    def persist(self) -> None:
        """Nothing to write: the timer's checkpoint is this node's progress."""
        self.dirty = False
