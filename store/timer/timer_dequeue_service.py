"""TimerDequeueService: delivers the due slots of the wheel (RocketMQ's TimerDequeueGet/Put services).

Once the clock passes a slot's end, the service walks the slot's chain of timer log units
(LAST POS, then PREV POS to -1), and puts the messages back oldest first, in batches of
DELIVERY_BATCH through one put each: a normal unit to the message's real topic and queue, a
roll unit to the timer topic again (store.timer_message.due_copy). Empty stretches of the wheel
are skipped in one locked scan. The read time moves past the slot only once every unit of it
is put and no unit was appended to it meanwhile (checked under the wheel lock).

A put refused for a passing reason (disk full, dispatch behind, shutting down) is retried
after PUT_RETRY_DELAY_MS from the unit it stopped at (`_slot_done` holds the position of the
last unit of the current slot already put; positions grow along a chain); one refused for good is skipped with an error line, as the delay
levels do. After a crash, units of slots before TimerMessageStore.verify_below_ms are first
looked up by UNIQ_KEY in their target topic: a copy stored after the timer message means the
unit was delivered before the crash, and it is not put again.
"""

from __future__ import annotations

import logging
from array import array
from typing import TYPE_CHECKING, Any

from core.service_thread import ServiceThread
from store.codec.message import PROPERTY_UNIQ_KEY, MessageInner
from store.codec.message_codec import decode_message
from store.config import BrokerRole
from store.put.put_batch import PutBatch
from store.schedule.schedule_message_service import PUT_RETRY_DELAY_MS
from store.status import PutMessageStatus, PutRefusal
from store.timer.timer_log import MAGIC_ROLL, TimerRecord
from store.timer.timer_message import due_copy, target_deliver_ms

if TYPE_CHECKING:
    from store.timer.timer_message_store import TimerMessageStore

log = logging.getLogger("tidemq.store")

DELIVERY_BATCH = 256  # messages put back by one put call
ENQUEUE_WAIT_MS = 10  # wait for the enqueue (woken) to catch up with a slot that is due; it wakes this sooner
IDLE_WAIT_MS_MAX = 200  # longest sleep when nothing is due soon (enqueues of near slots do not wake the service)
EMPTY_WHEEL_WAIT_MS = 1_000  # sleep while the wheel holds no unit (the enqueue wakes the service when it writes one)
_PERMANENT_REFUSALS = frozenset(
    {PutRefusal.TOPIC_INVALID, PutRefusal.QUEUE_NOT_FOUND, PutRefusal.MESSAGE_TOO_LARGE, PutRefusal.PROPERTIES_TOO_LARGE}
)
_PERMANENT_STATUSES = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})


class Due:
    """One unit ready to put: its record, the copy and what lateness is measured against."""

    __slots__ = ("record", "msg", "target_ms", "source_store_ms")

    def __init__(self, record: TimerRecord, msg: MessageInner, target_ms: int | None, source_store_ms: int) -> None:
        self.record = record
        self.msg = msg
        self.target_ms = target_ms
        self.source_store_ms = source_store_ms


class TimerDequeueService(ServiceThread):
    def __init__(self, timer: TimerMessageStore) -> None:
        super().__init__("TimerDequeueService")
        self.timer = timer
        self._slot_done = (-1, -1)  # (slot time, position of its last unit already put or skipped)
        self.empty_wait_ms = EMPTY_WHEEL_WAIT_MS

    def run(self) -> None:
        store = self.timer.store
        self.wait_until(store.is_running, IDLE_WAIT_MS_MAX)
        while not self.is_stopped():
            try:
                wait_ms = self.dequeue_pass()
            except Exception:
                log.exception("timer dequeue pass failed")
                wait_ms = PUT_RETRY_DELAY_MS
            if wait_ms > 0:
                self.wait_for_running(wait_ms)

    def dequeue_pass(self) -> int:
        """Deliver every slot whose end has passed; returns ms until the next slot ends (or a retry)."""
        timer = self.timer
        p = timer.precision_ms
        while not self.is_stopped():
            if timer.store.config.broker_role is BrokerRole.SLAVE or not timer.store.is_running():
                return IDLE_WAIT_MS_MAX
            now = timer.clock.now_ms()
            limit = min(now, timer.write_time_ms)  # a slot is delivered once every message put before its end is in the wheel
            if self._rest_if_empty(limit):
                return self.empty_wait_ms
            read = timer.read_time_ms
            if read + p > limit:
                if read + p > now:
                    return min(read + p - now, IDLE_WAIT_MS_MAX)
                timer.enqueue_service.wakeup()  # the slot is due: the enqueue's pass moves the write time and wakes this
                return ENQUEUE_WAIT_MS
            if not self._skip_empty(read, timer.floor(limit)):
                continue
            if not self._deliver_slot(read, now):
                return PUT_RETRY_DELAY_MS
        return 0

    def _rest_if_empty(self, limit: int) -> bool:
        """True when the wheel holds no unit (its count says so, and the slots up to `limit` are empty: the
        read time moved past them as `_skip_empty` moves it): the service then rests until the enqueue
        wakes it with a unit written."""
        timer = self.timer
        if timer.pending_in_wheel() > 0:
            return False
        read, end = timer.read_time_ms, timer.floor(limit)
        if end <= read:
            return True
        if self._skip_empty(read, end):
            return False  # the slot at the read time holds units: the count was short
        return timer.read_time_ms >= end  # else it stopped at a slot that holds units

    def _skip_empty(self, read: int, limit: int) -> bool:
        """Move the read time to the first non-empty slot before `limit`; True when `read` itself holds units."""
        timer = self.timer
        wheel = timer.wheel
        assert wheel is not None
        with timer.wheel_lock:
            if wheel.get_slot(read).last_pos >= 0:
                return True
            slot = wheel.next_slot(read, limit)
            timer.read_time_ms = slot.time_ms if slot is not None else limit
        return False

    def _deliver_slot(self, slot_ms: int, now: int) -> bool:
        """Put back every unit of one slot; True once the read time moved past it."""
        timer = self.timer
        wheel = timer.wheel
        assert wheel is not None
        with timer.wheel_lock:
            last = wheel.get_slot(slot_ms).last_pos
        stop_at = -1  # units at or before this position were handled in an earlier round of this slot
        while True:
            positions = self._chain(last, stop_at)
            if not self._deliver_positions(slot_ms, positions, now):
                return False
            with timer.wheel_lock:
                newest = wheel.get_slot(slot_ms).last_pos
                if newest == last:
                    timer.read_time_ms = slot_ms + timer.precision_ms
                    self._slot_done = (-1, -1)
                    return True
            stop_at, last = last, newest  # units appended while the slot was delivered: one more round

    def _chain(self, last: int, stop_at: int) -> array[int]:
        """The slot's unit positions after `stop_at`, oldest first (8 bytes each, however full the slot)."""
        positions = array("q")
        pos = last
        while pos > stop_at:
            record = self.timer.log.read(pos)
            if record is None:
                log.error("timer: unit at %d is unreadable; the rest of its slot's chain is lost", pos)
                break
            positions.append(pos)
            pos = record.prev_pos
        positions.reverse()
        return positions

    def _deliver_positions(self, slot_ms: int, positions: array[int], now: int) -> bool:
        """Put the units at `positions` (oldest first) in batches; False when a put must be retried."""
        done_slot, done_pos = self._slot_done
        todo = [pos for pos in positions if pos > done_pos] if done_slot == slot_ms else list(positions)
        for first in range(0, len(todo), DELIVERY_BATCH):
            chunk = todo[first : first + DELIVERY_BATCH]
            prepared = [self._prepare(pos, now) for pos in chunk]
            batch = [d for d in prepared if d is not None]
            stored = self._put(batch)
            if stored < len(batch):
                # Units before the refused one are handled; the slot resumes at it.
                at = next(i for i, d in enumerate(prepared) if d is batch[stored])
                self.timer.dequeued += prepared[:at].count(None)
                if at > 0:
                    self._slot_done = (slot_ms, chunk[at - 1])
                return False
            self.timer.dequeued += prepared.count(None)
            self._slot_done = (slot_ms, chunk[-1])
        return True

    def _prepare(self, pos: int, now: int) -> Due | None:
        """The copy to put for the unit at `pos`; None when it is skipped (gone, corrupt, already delivered)."""
        timer = self.timer
        record = timer.log.read(pos)
        if record is None:
            return None
        res = timer.store.commit_log.get_message(record.offset_py, record.size_py)
        stored: dict[str, Any] | None = None
        if res is not None:
            try:
                stored = decode_message(res.view, 0)
            except (IndexError, ValueError, UnicodeDecodeError):
                stored = None
            finally:
                res.release()
        roll = bool(record.magic & MAGIC_ROLL)
        msg = due_copy(stored, roll, record.write_time_ms, now) if stored is not None else None
        if stored is None or msg is None:
            timer.metrics.undeliverable += 1
            log.error("timer: unit at %d: message at %d is gone or names no real topic; skipped", pos, record.offset_py)
            return None
        if record.delayed_time_ms < timer.verify_below_ms and self._already_delivered(msg, record.offset_py, stored["store_timestamp"]):
            timer.metrics.deduplicated += 1
            return None
        target = None if roll else target_deliver_ms(stored["properties"], timer.precision_ms)
        return Due(record, msg, target, stored["store_timestamp"])

    def _already_delivered(self, msg: MessageInner, source_offset: int, source_store_ms: int) -> bool:
        """True when the target topic holds a copy put after the timer message (crash recovery only)."""
        store = self.timer.store
        uniq_key = msg.properties.get(PROPERTY_UNIQ_KEY)
        cfg = store.config
        if not uniq_key or not (cfg.message_index_enable and cfg.message_index_uniq_key_enable):
            return False
        copies = store.query_message(msg.topic, uniq_key, 8, source_store_ms, 1 << 62)
        return any(c["queue_id"] == msg.queue_id and c["commitlog_offset"] > source_offset for c in copies)

    def _put(self, batch: list[Due]) -> int:
        """Put a batch back; returns how many were stored or skipped for good (the rest are retried)."""
        if not batch:
            return 0
        timer = self.timer
        result = timer.store.put(PutBatch.of([d.msg for d in batch]))
        if result.done():
            outcome = result.result()
            stored = len(outcome.items) if outcome.stored or outcome.items else 0
            if stored < len(batch) and not outcome.items:
                if outcome.refusal in _PERMANENT_REFUSALS or outcome.status in _PERMANENT_STATUSES:
                    return self._put_one_by_one(batch)
                timer.metrics.retries += 1
                log.warning(
                    "timer: re-put refused (%s %s); retrying in %d ms", outcome.status.value, outcome.refusal.value, PUT_RETRY_DELAY_MS
                )
                return 0
        else:
            stored = len(batch)  # appended; only the flush or the slave copy is pending
        self._count(batch[:stored])
        return stored

    def _put_one_by_one(self, batch: list[Due]) -> int:
        """A batch refused for good: put each alone so one bad message skips only itself."""
        timer = self.timer
        for i, due in enumerate(batch):
            outcome = timer.store.put(PutBatch.of((due.msg,)))
            if outcome.done() and not outcome.result().items:
                refused = outcome.result()
                if refused.refusal not in _PERMANENT_REFUSALS and refused.status not in _PERMANENT_STATUSES:
                    return i
                timer.metrics.undeliverable += 1
                timer.dequeued += 1
                log.error("timer: %s refused for good (%s: %s); skipped", due.msg.topic, refused.status.value, refused.detail)
                continue
            self._count([due])
        return len(batch)

    def _count(self, delivered: list[Due]) -> None:
        timer = self.timer
        metrics = timer.metrics
        now = timer.clock.now_ms()
        for due in delivered:
            timer.dequeued += 1
            if due.record.magic & MAGIC_ROLL:
                metrics.rolled += 1
                continue
            metrics.delivered += 1
            if due.target_ms is not None:
                metrics.record_lateness(now - due.target_ms)
