"""TimerFlushService: flushes the timer log and the wheel, then the checkpoint (RocketMQ's TimerFlushService).

Every `timer_flush_interval_ms` it writes the checkpoint (TimerMessageStore.write_checkpoint:
the progress is read first, the files flushed, then the progress recorded, so the checkpoint
never claims more than the files hold); every CLEAN_EVERY_PASSES passes it deletes leading
timer log files whose last unit points below the commitlog's first offset (RocketMQ's rule for
the timer log). A master's pass also records its read time in the log for its slaves when it is
due (store/timer/timer_progress.py). Its final pass at shutdown, after the dequeue and enqueue services stopped,
records their final progress.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.service_thread import ServiceThread
from store.errors import StoreError

if TYPE_CHECKING:
    from store.timer.timer_message_store import TimerMessageStore

log = logging.getLogger("tidemq.store")

CLEAN_EVERY_PASSES = 30  # timer log cleanup at most this often (in flush passes)


class TimerFlushService(ServiceThread):
    def __init__(self, timer: TimerMessageStore, interval_ms: int) -> None:
        super().__init__("TimerFlushService")
        self.timer = timer
        self.interval_ms = interval_ms
        self.passes = 0

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.interval_ms)
            self.flush_pass()
        self.flush_pass()

    def flush_pass(self) -> None:
        try:
            self.timer.write_checkpoint()
        except OSError as exc:
            log.error("timer: cannot write the checkpoint: %s", exc)
        try:
            self.timer.record_progress()
        except StoreError as exc:
            log.warning("timer: progress not recorded in the log (%s); recorded at the next pass", exc)
        self.passes += 1
        if self.passes % CLEAN_EVERY_PASSES == 0:
            self.clean_timer_log()

    def clean_timer_log(self) -> int:
        timer = self.timer
        min_offset = timer.store.commit_log.get_min_offset()
        if min_offset <= 0:
            return 0
        deleted = timer.log.delete_files_below(min_offset, timer.clock.now_ms())
        if deleted:
            log.info("timer: deleted %d timer log file(s) below commitlog offset %d", deleted, min_offset)
        return deleted
