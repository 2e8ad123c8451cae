"""TimerEnqueueService: moves timer topic messages into the wheel (RocketMQ's TimerEnqueueGet/PutService).

Walks `rmq_sys_wheel_timer` queue 0 from the timer's queue offset and, per entry, reads the
message's TIMER_OUT_MS and writes its timer log unit (TimerMessageStore.enqueue). This runs off
the put path, as in RocketMQ: a timer put costs what a normal put costs. While entries keep coming
it looks every ENQUEUE_BUSY_WAIT_MS, as RocketMQ polls (100 x precision / 1000 ms); once a pass
finds nothing it rests, and dispatch wakes it when the timer topic's queue gets entries
(TimerMessageStore.on_entries: a notice per chunk that holds timer messages, none for other puts),
as does the dequeue when a due slot waits for the write time; ENQUEUE_IDLE_WAIT_MS is the safety
net. A wake-up per entry would cost the event loop's requests under load, as a polling idle thread
does (docs/concurrency.md, "Background threads under load"). A pass that moved the write time
wakes the dequeue. It runs on a slave too (RocketMQ 5's slaves build their timer log the same way),
so a slave that becomes master already holds the wheel of every pending timer message.

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

ENQUEUE_IDLE_WAIT_MS = 1_000  # sleep with nothing to enqueue (woken by dispatch and the dequeue)
ENQUEUE_BUSY_WAIT_MS = 10  # between passes while entries keep coming (RocketMQ: 100 x precision / 1000 ms)
ENQUEUE_START_WAIT_MS = 10  # how often it looks whether the store runs yet, at start
ENQUEUE_RETRY_WAIT_MS = 500  # wait after the timer log could not grow
MAX_ENQUEUES_PER_PASS = 4_096  # entries one pass enqueues, so the checkpoint and shutdown are not held up


class TimerEnqueueService(ServiceThread):
    def __init__(self, timer: TimerMessageStore) -> None:
        super().__init__("TimerEnqueueService")
        self.timer = timer
        self.idle_wait_ms = ENQUEUE_IDLE_WAIT_MS
        self.resting = False  # waiting for entries: dispatch wakes it (`on_entries`)
        self._notices = 0  # dispatch's notices of timer topic entries
        self._observed: tuple[int, int] | None = None  # (start, log end) of a pass whose end dispatch had not reached

    def run(self) -> None:
        store = self.timer.store
        self.wait_until(store.is_running, ENQUEUE_START_WAIT_MS)
        while not self.is_stopped():
            notices = self._notices  # before the pass reads the queue's end: a later entry moves it
            try:
                done = self.enqueue_pass()
            except Exception:
                log.exception("timer enqueue pass failed")
                done = -1
            if done < 0:
                self.wait_for_running(ENQUEUE_RETRY_WAIT_MS)
            elif 0 < done < MAX_ENQUEUES_PER_PASS:
                self.wait_for_running(ENQUEUE_BUSY_WAIT_MS)  # entries keep coming: look again soon, not woken per entry
            elif done == 0:
                self._rest(notices)

    def _rest(self, notices: int) -> None:
        """Nothing was left to enqueue: wait until dispatch gives the timer topic entries (`on_entries`
        wakes a resting service) or the dequeue needs the write time. `notices` was read before the pass:
        an entry the pass did not see has moved it since, so the service does not rest on it."""
        self.resting = True
        if self._notices == notices:
            self.wait_for_running(self.idle_wait_ms)
        self.resting = False

    def on_entries(self) -> None:
        """Dispatch gave the timer topic's queue entries (under the dispatch lock). Only a resting service is
        woken: a busy one takes them at its next pass, ENQUEUE_BUSY_WAIT_MS on, so a stream of timer puts
        (a group's checkpoints and acks) wakes it about a hundred times a second, not once a put."""
        self._notices += 1
        if self.resting:
            self.wakeup()

    def enqueue_pass(self) -> int:
        """Enqueue what the timer topic's queue holds past the timer's offset; entries handled, -1 to back off.

        A pass that reaches the queue's end after dispatch passed the log's end seen at its start (or at
        an earlier pass's start) moves the timer's write time to that start: every timer message stored
        before then is in the wheel, so the dequeue may deliver the slots before it
        (TimerMessageStore.write_time_ms)."""
        timer = self.timer
        store = timer.store
        started_ms, log_end = timer.clock.now_ms(), store.commit_log.get_max_offset()
        cq = store.find_consume_queue(TIMER_TOPIC, 0)
        if cq is None:
            self._caught_up(started_ms, log_end, store.reput_service.reput_from_offset)
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
        reput = store.reput_service.reput_from_offset  # read before the queue's end: entries below it are in the queue
        if offset >= cq.get_max_offset_in_queue():
            self._caught_up(started_ms, log_end, reput)
        if handled:
            timer.dequeue_service.wakeup()  # it rests while the wheel is empty
        return handled

    def _caught_up(self, started_ms: int, log_end: int, reput: int) -> None:
        """The queue is enqueued to its end and dispatch has reached `reput`: move the write time to the
        start of this pass when dispatch passed the log's end seen then, else to the start of the pass
        whose end it passed since (`_observed`: under a produce load the event loop's puts are
        appended before they are dispatched, so dispatch is rarely at the very end when a pass starts)."""
        if reput >= log_end:
            self._observed = None
            self._advance(started_ms)
            return
        observed = self._observed
        if observed is not None and reput >= observed[1]:
            self._advance(observed[0])
            observed = None
        if observed is None:
            self._observed = (started_ms, log_end)

    def _advance(self, time_ms: int) -> None:
        """Move the write time, waking the dequeue when a slot it waits for may be deliverable now."""
        timer = self.timer
        before = timer.write_time_ms
        timer.advance_write_time(time_ms)
        if before < timer.read_time_ms + timer.precision_ms <= timer.write_time_ms:
            timer.dequeue_service.wakeup()  # the slot the dequeue reads next became deliverable

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
