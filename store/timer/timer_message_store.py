"""TimerMessageStore: messages delivered at any time, as RocketMQ 5's TimerMessageStore stores them.

A timer message is put to the timer topic `rmq_sys_wheel_timer` (store.timer.timer_message); from its
consume queue the enqueue service writes one timer log unit per message into the wheel slot of
its TIMER_OUT_MS (store.timer.timer_log, store.timer.timer_wheel); the dequeue service reads each slot once
the clock has passed it and puts every message back to its real topic and queue (or, for a delay
beyond the roll window, to the timer topic again). Progress is in `config/timercheck`
(store.timer.timer_checkpoint), written by the flush service.

Threads (each a ServiceThread, stopped first in the store's shutdown, in this order):
TimerDequeueService (it appends to the commitlog), TimerEnqueueService, TimerFlushService (its
final pass flushes the log and the wheel, then the checkpoint). RocketMQ's seven threads are
folded into these three: the put hook runs on the putting thread, the get/put pairs on both
sides are one loop each, and re-puts are batched instead of handed between threads.

Invariants:
- every timer topic message gets exactly one timer log unit, in queue order: the enqueue
  offset after a crash is the queue offset of the last unit's message plus one;
- a unit goes to the slot max(its time, read time), so a message whose time the reader has
  passed is delivered with the slot being read, never left behind; the wheel lock makes
  "append to a slot" and "finish reading a slot" exclusive;
- the read time moves past a slot only after every unit of it was put back; after a crash,
  units of slots before the time of the restart are checked against the index by UNIQ_KEY
  (a copy after the timer message in the target topic means it was delivered) before being
  put again: a message is delivered once, late by at most the recovery time;
- the wheel reaches `timer_roll_window_slots` ahead of the write time at most; a unit due
  later is a roll unit, whose message goes round the timer topic again.

Lock order: docs/concurrency.md. The wheel lock is never held while putting to the commitlog.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from core.service_thread import ServiceThread
from store.codec.message import PROPERTY_REAL_TOPIC, TIMER_TOPIC, decode_properties, tags_hash
from store.codec.message_codec import (
    HEADER_BYTES,
    POS_QUEUE_OFFSET,
    PROPERTIES_LENGTH,
    header_bytes,
    read_int,
    read_long,
    store_timestamp_at,
)
from store.config import TIMER_BLANK_SLOTS, BrokerRole
from store.errors import StoreNotRunning
from store.put.put_batch import PutBatch
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from store.report_types import TimerStatus
from store.status import PutMessageResult, PutMessageStatus, PutRefusal
from store.timer.timer_checkpoint import TimerCheckpoint
from store.timer.timer_dequeue_service import TimerDequeueService
from store.timer.timer_enqueue_service import TimerEnqueueService
from store.timer.timer_flush_service import TimerFlushService
from store.timer.timer_log import MAGIC_DEFAULT, MAGIC_ROLL, TimerLog
from store.timer.timer_message import PROPERTY_TIMER_OUT_MS, TimerTransform, is_timer_request, transform
from store.timer.timer_metrics import TimerMetrics
from store.timer.timer_progress import TimerProgress
from store.timer.timer_wheel import TimerWheel

if TYPE_CHECKING:
    from core import Clock
    from store.config import MessageStoreConfig
    from store.disk.space_reservation import SpaceReservation
    from store.dispatch.reput_message_service import ReputMessageService
    from store.logfile.commit_log import CommitLog
    from store.queue.consume_queue import ConsumeQueue


class TimedStore(Protocol):
    """What timer messages need of the store: the timer topic's queue, reads, puts, its clock and disk."""

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def reservation(self) -> SpaceReservation: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def reput_service(self) -> ReputMessageService: ...
    def is_running(self) -> bool: ...
    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...
    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]: ...
    def put(self, batch: PutBatch) -> concurrent.futures.Future[PutMessageResult]: ...


log = logging.getLogger("tidemq.store")


class TimerFields:
    """What the enqueue service needs of a timer topic message."""

    __slots__ = ("timer_out_ms", "topic_hash", "queue_offset", "store_timestamp")

    def __init__(self, timer_out_ms: int, topic_hash: int, queue_offset: int, store_timestamp: int) -> None:
        self.timer_out_ms = timer_out_ms
        self.topic_hash = topic_hash
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp


class TimerMessageStore:
    def __init__(self, store: TimedStore) -> None:
        cfg = store.config
        self.store = store
        self.clock = store.clock
        self.precision_ms = cfg.timer_precision_ms
        self.max_delay_ms = cfg.timer_max_delay_ms
        self.slots_total = cfg.timer_wheel_slots
        self.roll_window_ms = cfg.timer_roll_window_slots * cfg.timer_precision_ms
        self.log = TimerLog(os.path.join(cfg.store_path_root_dir, "timerlog"), cfg.mapped_file_size_timer_log_bytes, store.reservation)
        self.wheel: TimerWheel | None = None
        self.checkpoint: TimerCheckpoint | None = None
        self.metrics = TimerMetrics()
        self.wheel_lock = threading.Lock()
        self.read_time_ms = 0  # the next slot to deliver; every earlier one is delivered
        self.queue_offset = 0  # the next timer topic queue entry to enqueue
        self.verify_below_ms = 0  # after a crash: units of slots before this are checked before delivery
        # Every timer message stored before this time is in the wheel (the enqueue's write time): the
        # dequeue delivers no slot at or past it, so a message put for a slot is never late for it.
        self.write_time_ms = 0
        self.dequeued = 0  # units delivered, rolled or skipped since the start
        self._pending_at_load = 0
        self.progress = TimerProgress()  # the master's read time in the log (store/timer/timer_progress.py)
        self.progress.on_read_time = self._follow_read_time
        self.enqueue_service = TimerEnqueueService(self)
        self.dequeue_service = TimerDequeueService(self)
        self.flush_service = TimerFlushService(self, cfg.timer_flush_interval_ms)

    def services(self) -> list[ServiceThread]:
        """In start order; the store stops them in reverse (dequeue, enqueue, flush)."""
        return [self.flush_service, self.enqueue_service, self.dequeue_service]

    def floor(self, time_ms: int) -> int:
        return time_ms - time_ms % self.precision_ms

    # Put side --------------------------------------------------------------------------------

    def prepare_put(self, msgs: Sequence[Any]) -> PutMessageResult | None:
        """Move the messages asking for a later delivery to the timer topic; a refusal when one cannot be."""
        now = 0
        for msg in msgs:
            props = msg.properties
            if not is_timer_request(props):
                continue
            now = now or self.clock.now_ms()
            outcome = transform(msg, now, self.precision_ms, self.max_delay_ms)
            if outcome is TimerTransform.TOO_LONG:
                detail = f"the delivery time is more than timer_max_delay_ms={self.max_delay_ms} ms ahead; nothing was stored"
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.DELAY_TOO_LONG, detail)
            if outcome is TimerTransform.ILLEGAL:
                detail = "TIMER_DELIVER_MS, TIMER_DELAY_MS and TIMER_DELAY_SEC must be integers; nothing was stored"
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.TIMER_INVALID, detail)
        return None

    # Loading and recovery --------------------------------------------------------------------

    def load(self, last_exit_ok: bool) -> None:
        """Open the files and recover (after the store's recovery: it reads the timer topic's queue and the index)."""
        cfg = self.store.config
        self.wheel = TimerWheel(os.path.join(cfg.store_path_root_dir, "timerwheel"), self.slots_total, self.precision_ms)
        self.checkpoint = TimerCheckpoint(os.path.join(cfg.config_dir(), "timercheck"))
        if not self.log.load():
            raise StoreNotRunning("the timer log could not be loaded (see the log)")
        now = self.floor(self.clock.now_ms())
        ck = self.checkpoint
        size_before = self.log.mapped_file_queue.get_max_offset()
        start, end = self.log.recover(max(0, ck.last_timer_log_flush_pos - self.log.file_size))
        oldest = now - (self.slots_total - TIMER_BLANK_SLOTS) * self.precision_ms
        # A new store starts reading now; one whose checkpoint lost its read time reads the whole wheel.
        read = (ck.last_read_time_ms or oldest) if ck.existed else now
        if read < oldest:
            log.error("timer: the read time %d is older than the wheel holds; slots before %d are lost", read, oldest)
            read = oldest
        self.read_time_ms = self.floor(read)
        if self.store.config.broker_role is BrokerRole.SLAVE and self.progress.read_time_ms > self.read_time_ms:
            self.read_time_ms = self.floor(self.progress.read_time_ms)  # the master delivered up to there
        self._revise_wheel(start, end, damaged=end < size_before)
        self.queue_offset = self._revise_queue_offset()
        if not last_exit_ok:
            self.verify_below_ms = now + self.precision_ms
        self._pending_at_load = self.wheel.count(self.read_time_ms, self._horizon_ms(now))
        self.write_checkpoint()  # the read time is durable before anything is delivered
        log.info(
            "timer recovered: read time %d, queue offset %d, log [%d, %d), %d pending",
            self.read_time_ms, self.queue_offset, start, end, self._pending_at_load,
        )  # fmt: skip

    def _horizon_ms(self, now_ms: int) -> int:
        """Past the last slot any unit can be in (the roll window ahead of the write time)."""
        return self.floor(now_ms) + self.roll_window_ms + 2 * self.precision_ms

    def _revise_wheel(self, start: int, end: int, damaged: bool) -> None:
        """Point the wheel at every unit in [start, end) it misses, and rebuild the slots a cut tail broke."""
        wheel = self.wheel
        assert wheel is not None
        scan_from = start
        if damaged:
            broken = [s for s in wheel.live_slots(self.read_time_ms, self._horizon_ms(self.clock.now_ms())) if s.last_pos >= end]
            for slot in broken:
                wheel.put_slot(slot.time_ms, -1, -1, 0, 0)  # empty (no last pos); rebuilt from the units below the cut
            if broken:
                scan_from = min(start, min(s.first_pos for s in broken))
                log.warning("timer: %d wheel slot(s) pointed past the cut timer log; rebuilt from %d", len(broken), scan_from)
        for record in self.log.scan(scan_from, end):
            t = record.delayed_time_ms
            if t < self.read_time_ms:
                continue
            slot = wheel.get_slot(t)
            if slot.last_pos < 0:
                wheel.put_slot(t, record.pos, record.pos, 1, 0)
            elif record.pos > slot.last_pos:
                wheel.put_slot(t, slot.first_pos, record.pos, slot.num + 1, slot.magic)

    def _revise_queue_offset(self) -> int:
        """The next queue entry to enqueue: after the last unit's message (every message has one unit)."""
        ck = self.checkpoint
        assert ck is not None
        offset = ck.last_timer_queue_offset
        last = self.log.last_record()
        if last is not None:
            fields = self.read_fields(last.offset_py, last.size_py)
            if fields is not None:
                offset = fields.queue_offset + 1
        cq = self.store.find_consume_queue(TIMER_TOPIC, 0)
        if cq is not None:
            offset = min(max(offset, cq.get_min_offset_in_queue()), cq.get_max_offset_in_queue())
        return int(offset)

    # Enqueue -----------------------------------------------------------------------------------

    def read_fields(self, offset_py: int, size_py: int) -> TimerFields | None:
        """TIMER_OUT_MS, the real topic's hash, queue offset and store time of the message at `offset_py`."""
        res = self.store.commit_log.get_message(offset_py, size_py)
        if res is None:
            return None
        try:
            view = res.view
            if size_py < HEADER_BYTES + 3:
                return None
            header = header_bytes(view, 0)
            if size_py < header + 3:
                return None
            body_len = read_int(view, header - 4)
            topic_at = header + body_len
            props_at = topic_at + 1 + view[topic_at]
            (props_len,) = PROPERTIES_LENGTH.unpack_from(view, props_at)
            props = decode_properties(view[props_at + 2 : props_at + 2 + props_len])
            out_ms = props.get(PROPERTY_TIMER_OUT_MS)
            if out_ms is None or not out_ms.lstrip("-").isdigit():
                return None
            topic_hash = tags_hash(props.get(PROPERTY_REAL_TOPIC, ""))  # java_string_hash, cached: real topics repeat
            return TimerFields(int(out_ms), topic_hash, read_long(view, POS_QUEUE_OFFSET), store_timestamp_at(view, 0))
        except (IndexError, ValueError):
            return None
        finally:
            res.release()

    def on_entries(self, _queue_id: int) -> None:
        """Dispatch gave the timer topic's queue entries (run under the dispatch lock): the enqueue service takes them."""
        self.enqueue_service.on_entries()

    def advance_write_time(self, time_ms: int) -> None:
        """The enqueue has every timer message stored before `time_ms` (TimerEnqueueService)."""
        if time_ms > self.write_time_ms:
            self.write_time_ms = time_ms

    def enqueue(self, offset_py: int, size_py: int, fields: TimerFields, now_ms: int) -> bool:
        """Write the unit of one timer message and link it into its slot; False when the log or the wheel could not grow."""
        wheel = self.wheel
        assert wheel is not None
        write_ms = self.floor(now_ms)
        due = fields.timer_out_ms
        magic = MAGIC_DEFAULT
        window = self.roll_window_ms
        if due - write_ms >= window:
            magic |= MAGIC_ROLL
            # RocketMQ's rule: a message due soon after the window rolls at half of it, so its next turn is not another roll.
            due = write_ms + window // 2 if due - write_ms - window < window // 3 else write_ms + window
        with self.wheel_lock:
            slot_ms = self.floor(max(due, self.read_time_ms))
            if not wheel.reserve(slot_ms):
                return False  # the disk is full: retried, and nothing was written
            slot = wheel.get_slot(slot_ms)
            pos = self.log.append(slot.last_pos, magic, write_ms, slot_ms, offset_py, size_py, fields.topic_hash)
            if pos < 0:
                return False
            wheel.put_slot(slot_ms, slot.first_pos if slot.first_pos >= 0 else pos, pos, slot.num + 1, slot.magic)
            self.metrics.enqueued += 1
        return True

    # Status ------------------------------------------------------------------------------------

    def pending_in_wheel(self) -> int:
        return self._pending_at_load + self.metrics.enqueued - self.dequeued

    def not_enqueued(self) -> int:
        cq = self.store.find_consume_queue(TIMER_TOPIC, 0)
        return max(0, cq.get_max_offset_in_queue() - self.queue_offset) if cq is not None else 0

    def next_due_ms(self) -> int | None:
        """When the earliest pending unit becomes deliverable (its slot's end), None when nothing is pending."""
        wheel = self.wheel
        if wheel is None or self.pending_in_wheel() <= 0:
            return None
        slot = wheel.next_slot(self.read_time_ms, self._horizon_ms(self.clock.now_ms()))
        return slot.time_ms + self.precision_ms if slot is not None else None

    def status(self) -> TimerStatus:
        in_wheel = self.pending_in_wheel()
        waiting = self.not_enqueued()
        return {
            "pending": max(0, in_wheel) + waiting,
            "pending_in_wheel": max(0, in_wheel),
            "not_enqueued": waiting,
            "next_due_ms": self.next_due_ms(),
            "read_time_ms": self.read_time_ms,
            "queue_offset": self.queue_offset,
            "timer_log_bytes": self.log.get_max_offset() - self.log.mapped_file_queue.get_min_offset(),
            "precision_ms": self.precision_ms,
            "max_delay_ms": self.max_delay_ms,
            **self.metrics.counters(),
            "lateness": self.metrics.lateness(),
        }

    # Replication -------------------------------------------------------------------------------

    def _follow_read_time(self, read_time_ms: int) -> None:
        """A record of the master's read time applied here (the caller holds the progress table's lock)."""
        if self.store.config.broker_role is BrokerRole.SLAVE:
            with self.wheel_lock:
                self.read_time_ms = max(self.read_time_ms, self.floor(read_time_ms))

    def record_progress(self) -> None:
        """On a master: the read time into the log when it is due (TimerProgress.record_if_due)."""
        if self.store.config.broker_role is BrokerRole.SLAVE or not self.store.is_running():
            return
        self.progress.record_if_due(self.read_time_ms, self.dequeued, self.clock.now_ms())

    def take_over(self) -> None:
        """A slave becomes master: deliver from the recorded read time on, checking every unit of a slot
        before now against the index first (its old master may have delivered it after its last record)."""
        now = self.floor(self.clock.now_ms())
        with self.wheel_lock:
            self.verify_below_ms = max(self.verify_below_ms, now + self.precision_ms)
        log.info("timer taken over at read time %d; units before %d are checked before delivery", self.read_time_ms, now)

    # Shutdown ----------------------------------------------------------------------------------

    def write_checkpoint(self) -> None:
        """Flush the log and the wheel, then record the progress they back (the flush service's pass)."""
        ck, wheel = self.checkpoint, self.wheel
        if ck is None or wheel is None:
            return
        read_time, queue_offset = self.read_time_ms, self.queue_offset  # taken first: the files below cover them
        self.log.flush()
        wheel.flush()
        ck.last_read_time_ms = read_time
        ck.last_timer_log_flush_pos = self.log.mapped_file_queue.flushed_where
        ck.last_timer_queue_offset = queue_offset
        ck.master_timer_queue_offset = queue_offset
        ck.flush()

    def close(self) -> None:
        """After the services stopped: the final checkpoint, then the files."""
        self.write_checkpoint()
        self.log.shutdown()
        if self.wheel is not None:
            self.wheel.shutdown()
        if self.checkpoint is not None:
            self.checkpoint.shutdown()


def queue_entries(view: memoryview, size: int) -> list[tuple[int, int, int]]:
    """The (commitlog offset, size, tags code) entries of a consume queue slice."""
    return [ENTRY.unpack_from(view, pos) for pos in range(0, size - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE)]
