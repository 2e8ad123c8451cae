"""ScheduleMessageService: delivers delayed messages when their delay level has elapsed.

A put with DELAY=L is rewritten by the commitlog to SCHEDULE_TOPIC_XXXX, queue L-1, with
REAL_TOPIC / REAL_QID holding where it belongs; dispatch stores its due time (store time
+ level delay) as the tags code of its consume queue entry. This service walks each
level's queue in order and, for every entry whose due time has come, reads the message
and puts a copy to its real topic and queue, so that it is dispatched and wakes long-polls like
any other message. The copy keeps every property, DELAY, REAL_TOPIC and REAL_QID included, as
RocketMQ's ScheduleMessageService.messageTimeup stores it (it writes the property string before
clearing DELAY from the property map); a put moves a message carrying REAL_TOPIC nowhere
(store.message.delay_requested), so the copy is delivered once and not delayed again.

Invariants:
- within a level, due times grow with queue offsets (store times grow and the delay is
  constant), so the walk stops at the first entry not yet due;
- a level's offset (DelayOffsetTable) moves past an entry only once the copy is stored,
  or the entry is undeliverable for good (logged and counted); a put refused for a
  passing reason (disk full, shutting down) is retried after PUT_RETRY_DELAY_MS, for as
  long as the reason lasts, without moving past it;
- the offsets are recorded in the log (for slaves) and persisted every
  `flush_delay_offset_interval_ms` and at shutdown, so a clean restart neither loses nor
  re-delivers; after a crash, and on a slave that becomes master, entries below the queue's
  end are checked against the index (UNIQ_KEY in the real topic) before being delivered
  again, so an entry delivered after the last record is not delivered twice;
- a due time more than its level's delay plus CLOCK_STEP_BACK_TOLERANCE_MS ahead of now
  means the clock stepped back after the put (as RocketMQ's correctDeliverTimestamp, with a
  tolerance so that small skews delay rather than hasten a delivery): it is delivered now;
- nothing is delivered on a slave, nor before the store runs.

A level whose queue is walked to its end has nothing to wait for: it is scanned again when dispatch
gives its queue entries (`on_entries` wakes the service) or after REST_SCAN_MS, a safety net; with
every level so, the service sleeps that long instead of every `schedule_scan_interval_ms` (under load
each wake-up of a thread costs the event loop's requests: docs/concurrency.md).
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from core import SYSTEM_CLOCK, Clock
from core.service_thread import ServiceThread
from store.codec.message import (
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    MessageInner,
)
from store.codec.stored_copy import copy_of, real_target
from store.config import BrokerRole
from store.errors import StoreError
from store.put.put_batch import PutBatch
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from store.report_types import DelayLevelStatus, ScheduleStatus
from store.schedule.delay_offset_table import DelayOffsetTable
from store.status import PutMessageResult, PutMessageStatus, PutRefusal

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.logfile.commit_log import CommitLog
    from store.queue.consume_queue import ConsumeQueue


class ScheduledStore(Protocol):
    """What delay-level delivery needs of the store: the level queues, reads, puts and its state."""

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def last_exit_ok(self) -> bool: ...
    def is_running(self) -> bool: ...
    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...
    def put(self, batch: PutBatch) -> concurrent.futures.Future[PutMessageResult]: ...
    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]: ...


log = logging.getLogger("tidemq.store")

PUT_RETRY_DELAY_MS = 1_000  # wait before retrying a delivery the store refused for a passing reason
MAX_DELIVERIES_PER_SCAN = 1_000  # messages one level delivers per scan, so no level starves the others
CLOCK_STEP_BACK_TOLERANCE_MS = 60_000  # a due time further ahead than its level plus this means the clock stepped back
IDLE_WAIT_MS_MIN = 1  # shortest wait between two scans (a level due "now" is scanned at once)
REST_SCAN_MS = 1_000  # a level with nothing waiting is scanned again after this (dispatch wakes it sooner)

# Refusals that no retry can cure: the copy is skipped with an error line.
_PERMANENT_REFUSALS = frozenset(
    {
        PutRefusal.TOPIC_INVALID,
        PutRefusal.QUEUE_NOT_FOUND,
        PutRefusal.MESSAGE_TOO_LARGE,
        PutRefusal.PROPERTIES_TOO_LARGE,
        PutRefusal.BATCH_TOO_LARGE,
        PutRefusal.BATCH_EMPTY,
    }
)
_PERMANENT_STATUSES = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})


class Delivery(enum.Enum):
    """Outcome of one attempt to put a due message back to its topic."""

    DELIVERED = "DELIVERED"
    SKIPPED = "SKIPPED"  # undeliverable for good (gone, corrupt, refused for good) or already delivered
    RETRY = "RETRY"  # refused for a passing reason; the level waits


def level_for_delay_ms(levels_ms: list[int], delay_ms: int) -> int | None:
    """The smallest level whose delay is not shorter than `delay_ms`; 0 for no delay; None when too long."""
    if delay_ms <= 0:
        return 0
    for level, level_ms in enumerate(levels_ms, start=1):
        if level_ms >= delay_ms:
            return level
    return None


def due_message(stored: dict[str, Any]) -> MessageInner | None:
    """The copy of a delayed message that goes back to its real topic, with all its properties; None when it names none."""
    props = dict(stored["properties"])
    target = real_target(props)
    return copy_of(stored, target[0], target[1], props) if target is not None else None


class ScheduleMessageService(ServiceThread):
    def __init__(self, store: ScheduledStore, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__("ScheduleMessageService")
        self.store = store
        self.clock = clock
        cfg = store.config
        self.levels_ms = cfg.delay_levels_ms()
        self.level_words = cfg.message_delay_level.split()
        self.scan_interval_ms = cfg.schedule_scan_interval_ms
        self.flush_interval_ms = cfg.flush_delay_offset_interval_ms
        self.offsets = DelayOffsetTable(cfg.config_dir())
        self._next_scan_ms = [0] * len(self.levels_ms)  # per level: clock time of its next scan
        self._waiting = [False] * len(self.levels_ms)  # per level: an entry not due yet (or a spent budget) waits
        self._arrived = [False] * len(self.levels_ms)  # per level: dispatch gave its queue entries since its scan
        self.rest_scan_ms = REST_SCAN_MS
        self._verify_below: dict[int, int] = {}  # level -> queue end at load after a crash (see docstring)
        self._pass_lock = threading.Lock()  # one scan at a time (the thread, or a caller driving scans)
        self.delivered = 0
        self.retries = 0
        self.undeliverable = 0
        self.deduplicated = 0

    # Lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """After recovery and the state records (the offsets table is loaded by then): after a crash,
        remember which entries may already be delivered."""
        if not self.store.last_exit_ok:
            self._verify_past_progress()

    def take_over(self) -> None:
        """A slave becomes master: its offsets are its old master's last recorded progress, so every
        entry past them is checked against the index before it is delivered (as after a crash)."""
        with self._pass_lock:
            self._verify_past_progress()
            self._next_scan_ms = [0] * len(self.levels_ms)
        self.wakeup()

    def _verify_past_progress(self) -> None:
        for level in range(1, len(self.levels_ms) + 1):
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            if cq is not None and cq.get_max_offset_in_queue() > self.offsets.get(level):
                self._verify_below[level] = cq.get_max_offset_in_queue()

    def run(self) -> None:
        self.wait_until(self.store.is_running, self.scan_interval_ms)  # puts are refused until the store runs
        last_persist = time.monotonic()
        while not self.is_stopped():
            try:
                wait_ms = self.scan_once()
            except Exception:
                log.exception("delay scan failed")
                wait_ms = self.scan_interval_ms
            if (time.monotonic() - last_persist) * 1000 >= self.flush_interval_ms:
                last_persist = time.monotonic()
                self._persist()
            self.wait_for_running(wait_ms)
        self._persist()

    def _persist(self) -> None:
        """Record the progress in the log (a master's, for its slaves), then in delayOffset.json."""
        if self.store.config.broker_role is not BrokerRole.SLAVE and self.store.is_running():
            try:
                self.offsets.record_progress()
            except StoreError as exc:
                log.warning("delay progress not recorded in the log (%s); recorded at the next period", exc)
        try:
            self.offsets.persist()
        except OSError as exc:
            log.error("cannot persist %s: %s", self.offsets.path, exc)

    # Scanning ----------------------------------------------------------------------------

    def scan_once(self) -> int:
        """Deliver what is due on every level whose scan time has come; returns ms until the next scan."""
        with self._pass_lock:
            now = self.clock.now_ms()
            if self.store.config.broker_role is BrokerRole.SLAVE:
                return self.scan_interval_ms
            for index, level_ms in enumerate(self.levels_ms):
                if now >= self._next_scan_ms[index] or self._arrived[index]:
                    self._arrived[index] = False  # before the scan: an arrival during it scans again
                    due = self._scan_level_locked(index + 1, level_ms, now)
                    self._waiting[index] = due is not None
                    self._next_scan_ms[index] = due if due is not None else now + self.rest_scan_ms
            wait = min(self._next_scan_ms) - self.clock.now_ms()
            if any(arrived and not waiting for arrived, waiting in zip(self._arrived, self._waiting, strict=True)):
                wait = 0  # entries came to a level walked to its end during the scan, unwoken (on_entries)
            cap = self.scan_interval_ms if any(self._waiting) else self.rest_scan_ms
            return max(IDLE_WAIT_MS_MIN, min(wait, cap))

    def on_entries(self, queue_id: int) -> None:
        """Dispatch gave a level's queue entries (under the dispatch lock): a level walked to its end is
        scanned now. A level that waits for an entry to come due is not: a later entry of one level is due
        later, so its scan at that time reaches it, and a stream of delayed puts does not wake the
        service once a put. `_arrived` is set before `_waiting` is read, and a scan sets `_waiting` before
        it reads `_arrived`: an arrival either wakes it or is seen by the scan."""
        if 0 <= queue_id < len(self._arrived):
            self._arrived[queue_id] = True
            if not self._waiting[queue_id]:
                self.wakeup()

    def _scan_level_locked(self, level: int, level_ms: int, now: int) -> int | None:
        """Deliver the due messages of one level; returns the clock time of its next scan, None when its
        queue is walked to its end (nothing waits). The caller holds `_pass_lock`: a level's progress is
        moved by one scan at a time."""
        cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return None
        offset = self.offsets.get(level)
        min_offset = cq.get_min_offset_in_queue()
        if offset < min_offset:
            log.warning("delay level %d: offset %d is below the queue minimum %d (cleaned up); skipping ahead", level, offset, min_offset)
            offset = min_offset
        budget = MAX_DELIVERIES_PER_SCAN
        stop_at: int | None = None
        while stop_at is None and offset < cq.get_max_offset_in_queue():
            res = cq.get_index_buffer(offset)
            if res is None:
                break
            try:
                offset, stop_at, budget = self._walk_entries(level, level_ms, res.view, res.size, offset, now, budget)
            finally:
                res.release()
        self.offsets.set(level, offset)
        if stop_at is None and offset < cq.get_max_offset_in_queue():
            return now + self.scan_interval_ms  # an unreadable entry ended the walk: looked at again soon
        return stop_at

    def _walk_entries(
        self, level: int, level_ms: int, view: memoryview, size: int, offset: int, now: int, budget: int
    ) -> tuple[int, int | None, int]:
        """Walk the entries of one consume queue slice.

        Returns (next offset, clock time of the level's next scan or None when the slice was
        used up, budget left). A spent budget asks for the next scan at once.
        """
        for pos in range(0, size - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
            phy, msg_size, due = ENTRY.unpack_from(view, pos)
            if msg_size <= 0:
                offset += 1  # a gap entry: nothing was stored at this offset
                continue
            if due > now + level_ms + CLOCK_STEP_BACK_TOLERANCE_MS:
                due = now  # the clock stepped back since the put: deliver now rather than wait the step out
            if due > now:
                return offset, due, budget
            outcome = self._deliver(level, offset, phy)
            if outcome is Delivery.RETRY:
                self.retries += 1
                return offset, now + PUT_RETRY_DELAY_MS, budget
            offset += 1
            self.offsets.set(level, offset)
            budget -= 1
            if budget == 0:
                return offset, now, 0
        return offset, None, budget

    def _deliver(self, level: int, offset: int, phy: int) -> Delivery:
        store = self.store
        stored = store.commit_log.look_message_by_offset(phy)
        if stored is None:
            self.undeliverable += 1
            log.error("delay level %d offset %d: message at %d is gone or corrupt; skipped", level, offset, phy)
            return Delivery.SKIPPED
        msg = due_message(stored)
        if msg is None:
            self.undeliverable += 1
            log.error("delay level %d offset %d: message at %d names no valid real topic/queue; skipped", level, offset, phy)
            return Delivery.SKIPPED
        if offset < self._verify_below.get(level, 0) and self._already_delivered(msg, stored["store_timestamp"]):
            self.deduplicated += 1
            return Delivery.SKIPPED
        future = store.put(PutBatch.of((msg,)))
        if not future.done():
            self.delivered += 1  # appended; only its flush (or slave copy) is pending
            return Delivery.DELIVERED
        result = future.result()
        if result.stored:
            self.delivered += 1
            return Delivery.DELIVERED
        if result.refusal in _PERMANENT_REFUSALS or result.status in _PERMANENT_STATUSES:
            self.undeliverable += 1
            log.error(
                "delay level %d offset %d: %s refused for good (%s: %s); skipped",
                level,
                offset,
                msg.topic,
                result.status.value,
                result.detail,
            )
            return Delivery.SKIPPED
        log.warning(
            "delay level %d offset %d: put to %s refused (%s %s); retrying in %d ms",
            level, offset, msg.topic, result.status.value, result.refusal.value, PUT_RETRY_DELAY_MS,
        )  # fmt: skip
        return Delivery.RETRY

    def _already_delivered(self, msg: MessageInner, scheduled_at_ms: int) -> bool:
        """True when the real topic holds a copy stored after the delayed message (crash recovery only)."""
        uniq_key = msg.properties.get(PROPERTY_UNIQ_KEY)
        cfg = self.store.config
        if not uniq_key or not (cfg.message_index_enable and cfg.message_index_uniq_key_enable):
            return False
        copies = self.store.query_message(msg.topic, uniq_key, 4, scheduled_at_ms, 1 << 62)
        return any(c["queue_id"] == msg.queue_id and c["store_timestamp"] >= scheduled_at_ms for c in copies)

    # Status ------------------------------------------------------------------------------

    def level_for_delay_ms(self, delay_ms: int) -> int | None:
        return level_for_delay_ms(self.levels_ms, delay_ms)

    def status(self) -> ScheduleStatus:
        """Per level: delivered offset, messages waiting, and the oldest waiting message's times."""
        now = self.clock.now_ms()
        levels: list[DelayLevelStatus] = []
        for level, level_ms in enumerate(self.levels_ms, start=1):
            cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
            max_offset = cq.get_max_offset_in_queue() if cq is not None else 0
            offset = max(self.offsets.get(level), cq.get_min_offset_in_queue() if cq is not None else 0)
            entry = cq.read_entry(offset) if cq is not None and offset < max_offset else None
            item: DelayLevelStatus = {
                "level": level,
                "delay": self.level_words[level - 1],
                "delay_ms": level_ms,
                "offset": offset,
                "max_offset": max_offset,
                "waiting": max(0, max_offset - offset),
                "oldest_age_ms": None,
                "oldest_due_in_ms": None,
            }
            if entry is not None and entry[1] > 0:
                due = entry[2]
                item["oldest_age_ms"] = max(0, now - (due - level_ms))
                item["oldest_due_in_ms"] = due - now
            levels.append(item)
        return {
            "levels": levels,
            "delivered": self.delivered,
            "retries": self.retries,
            "undeliverable": self.undeliverable,
            "deduplicated": self.deduplicated,
        }
