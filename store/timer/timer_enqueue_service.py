"""TimerEnqueueService: moves timer topic messages into the wheel (RocketMQ's TimerEnqueueGet/PutService).

Walks `rmq_sys_wheel_timer` queue 0 from the timer's queue offset and, per entry, reads the
message's TIMER_OUT_MS and writes its timer log unit (TimerMessageStore.enqueue). This runs off
the put path, as in RocketMQ: a timer put costs what a normal put costs. An idle service looks
again every ENQUEUE_IDLE_WAIT_MS (RocketMQ: 100 x precision / 1000 ms), a small part of the
precision, so a message due in a few precisions reaches the wheel in time; it polls rather than
listening to dispatch, which would cost every put's dispatch a notice. It runs on a slave too
(RocketMQ 5's slaves build their timer log the same way), so a slave that becomes master already
holds the wheel of every pending timer message.

Invariants: entries are enqueued in queue order and the queue offset moves past an entry only
after its unit is written (or it is unreadable for good, logged and counted); a unit that cannot
be written (no timer log file) is retried, never skipped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from core.service_thread import ServiceThread
from store.codec.message import TIMER_TOPIC
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY

if TYPE_CHECKING:
    from store.timer.timer_message_store import TimerMessageStore

log = logging.getLogger("tidemq.store")

ENQUEUE_IDLE_WAIT_MS = 10  # sleep with nothing to enqueue
ENQUEUE_RETRY_WAIT_MS = 500  # wait after the timer log could not grow
MAX_ENQUEUES_PER_PASS = 4_096  # entries one pass enqueues, so the checkpoint and shutdown are not held up


class TimerEnqueueService(ServiceThread):
    def __init__(self, timer: TimerMessageStore) -> None:
        super().__init__("TimerEnqueueService")
        self.timer = timer

    def run(self) -> None:
        store = self.timer.store
        self.wait_until(store.is_running, ENQUEUE_IDLE_WAIT_MS)
        while not self.is_stopped():
            try:
                done = self.enqueue_pass()
            except Exception:
                log.exception("timer enqueue pass failed")
                done = -1
            if done == 0:
                self.wait_for_running(ENQUEUE_IDLE_WAIT_MS)
            elif done < 0:
                self.wait_for_running(ENQUEUE_RETRY_WAIT_MS)

    def enqueue_pass(self) -> int:
        """Enqueue what the timer topic's queue holds past the timer's offset; entries handled, -1 to back off.

        A pass that reaches the queue's end after dispatch passed the log's end seen at its start moves
        the timer's write time to the pass's start: every timer message stored before then is in the
        wheel, so the dequeue may deliver the slots before it (TimerMessageStore.write_time_ms)."""
        timer = self.timer
        store = timer.store
        started_ms, log_end = timer.clock.now_ms(), store.commit_log.get_max_offset()
        cq = store.find_consume_queue(TIMER_TOPIC, 0)
        if cq is None:
            if store.reput_service.reput_from_offset >= log_end:
                timer.advance_write_time(started_ms)
            return 0
        offset = timer.queue_offset
        low = cq.get_min_offset_in_queue()
        if offset < low:
            log.warning("timer: queue offset %d is below the queue minimum %d (cleaned up); skipping ahead", offset, low)
            offset = timer.queue_offset = low
        handled = 0
        while handled < MAX_ENQUEUES_PER_PASS and offset < cq.get_max_offset_in_queue() and not self.is_stopped():
            res = cq.get_index_buffer(offset)
            if res is None:
                break
            try:
                limit = min(res.size, (MAX_ENQUEUES_PER_PASS - handled) * CQ_STORE_UNIT_SIZE)
                entries = [ENTRY.unpack_from(res.view, p) for p in range(0, limit - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE)]
            finally:
                res.release()
            now = timer.clock.now_ms()
            for phy, size, _tags in entries:
                if size > 0 and not self._enqueue_one(offset, phy, size, now):
                    return -1
                offset += 1
                handled += 1
                timer.queue_offset = offset
        if store.reput_service.reput_from_offset >= log_end and offset >= cq.get_max_offset_in_queue():
            timer.advance_write_time(started_ms)
        return handled

    def _enqueue_one(self, offset: int, phy: int, size: int, now: int) -> bool:
        timer = self.timer
        fields = timer.read_fields(phy, size)
        if fields is None:
            timer.metrics.undeliverable += 1
            log.error("timer queue offset %d: message at %d is gone or has no TIMER_OUT_MS; skipped", offset, phy)
            return True
        if timer.enqueue(phy, size, fields, now):
            return True
        log.error("timer: cannot write the timer log (%s); retrying", timer.log.mapped_file_queue.create_error or "no file")
        return False
