"""Group (POP) consumption: receive with an invisible time, ack, and change of the invisible time.

As RocketMQ 5 does it: a receive takes messages from the group's offset in each queue, writes a
checkpoint (CK) for them into the revive topic due at pop time + invisible time, and only then
moves the group's offset past them; an ack writes an ack record (ACK) due at the same time. The
revive service (store/pop/pop_revive_service.py) matches them when they come due and re-puts what was
not acked into the group's retry topic, or its dead-letter topic after `max_reconsume_times`
redeliveries. Nothing about a message in flight is held in memory here: it lives in the revive
topic. FIFO groups (store/pop/fifo_order_book.py) keep the offset until every message taken from a
queue is acked, so a queue yields its next message only then.

Invariants:
- A checkpoint is stored before the offset moves past its messages, so a crash between the two
  delivers them again (at least once), never loses them.
- One receive at a time per (group, topic, queue) (striped locks): a queue busy with another receive is skipped.
  A FIFO group's ack takes the same lock, waiting for it, so its commit and a receive never interleave.
- An ack is answered OK only before the message's invisible time ends; the revive service waits
  `pop_ack_margin_ms` past that time before reviving, so an answered ack is always seen.
- A handle is answered OK (and counted) once: used again it answers ALREADY_ACKED, or HANDLE_SUPERSEDED
  when a change of the invisible time gave its message a new handle (store/pop/acked_handles.py says how
  long, and within which bound, that is remembered).
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from store.codec.compressed_body import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK
from store.codec.message import PROPERTY_TAGS, MessageInner
from store.codec.message_codec import decode_message, reconsume_times_at
from store.errors import StoreError, TopicInvalid
from store.filter.message_filter import with_group_filter
from store.metadata.topic_names import consumption_problem, dlq_topic, is_group_system_topic, retry_topic, revive_topic
from store.pop.acked_handles import AckedHandles, HandleKey, HandleState
from store.pop.fifo_order_book import FifoOrderBook
from store.pop.pop_counters import PopCounters
from store.pop.pop_records import ACK_TAG, BATCH_ACK_TAG, MAX_CHECKPOINT_MESSAGES, PROPERTY_RETRY_TOPIC, AckMsg, BatchAckMsg, PopCheckPoint
from store.pop.receipt_handle import HandleInvalid, ReceiptHandle, ReceiptHandles
from store.pop.subscription_group_manager import SubscriptionGroup, SubscriptionGroupManager
from store.queue.get_message_result import GetMessageResult
from store.status import GetMessageStatus, PutMessageResult

# RocketMQ 5's property that makes a message a timer message due at that time (ms since the epoch).
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# Receives that find an offset behind the queue's minimum (files removed) start again there.
_INT32 = struct.Struct(">i")
# Stripes of the per-queue receive locks.
QUEUE_LOCK_STRIPES = 4_096
# (group, topic) receive rotations kept at most (past it they start again from the first queue).
MAX_ROTATIONS = 100_000
# Default settings kept for groups never configured (`group`); cleared past this many (client-chosen names).
MAX_DEFAULT_GROUPS = 4_096
_SKIPPED = (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_FOUND_NULL)


class AckOutcome(enum.Enum):
    OK = "OK"
    HANDLE_EXPIRED = "HANDLE_EXPIRED"  # the invisible time passed: the message may have been delivered again
    HANDLE_INVALID = "HANDLE_INVALID"  # not a handle this broker issued for this group and topic
    NOT_STORED = "NOT_STORED"  # the ack record could not be stored (disk full, shutting down): ack again
    ALREADY_ACKED = "ALREADY_ACKED"  # the handle was acked before: nothing is done or counted again
    HANDLE_SUPERSEDED = "HANDLE_SUPERSEDED"  # a change of the invisible time replaced it: use the handle that change answered


# What a handle already used answers when it is used again.
USED_OUTCOMES = {HandleState.ACKED: AckOutcome.ALREADY_ACKED, HandleState.SUPERSEDED: AckOutcome.HANDLE_SUPERSEDED}


class PopStore(Protocol):
    """What group consumption needs of the store."""

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_count: int, message_filter: Any = None) -> Any: ...
    def put_messages(self, msgs: list[MessageInner]) -> PutMessageResult: ...
    def put_records(self, msgs: list[MessageInner]) -> PutMessageResult: ...
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def queue_ids_of(self, topic: str) -> list[int]: ...
    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def put_and_commit(self, msgs: list[MessageInner], group: str, topic: str, queue_id: int, offset: int) -> bool: ...
    def ensure_topic(self, topic: str, queues: int) -> None: ...


@dataclass(slots=True, frozen=True)
class PopSettings:
    cluster: str  # names the revive topic
    revive_queues: int  # revive queues (RocketMQ's reviveQueueNum: 8)
    ack_margin_ms: int  # how long past a checkpoint's revive time acks are still collected


@dataclass(slots=True)
class Popped:
    """A received message: its stored bytes and where it came from."""

    data: bytes  # the stored message (17-field layout)
    queue_topic: str  # the topic it was taken from: the topic itself or the group's retry topic
    queue_id: int
    queue_offset: int
    handle: str
    invisible_until_ms: int
    reconsume_times: int


class PopConsumer:
    """Receives, acks and invisible-time changes of every group; safe to call from many threads."""

    def __init__(
        self, store: PopStore, groups: SubscriptionGroupManager, handles: ReceiptHandles, settings: PopSettings, clock: Callable[[], int],
        fifo: FifoOrderBook, acked: AckedHandles,
    ) -> None:  # fmt: skip
        self.store = store
        self.acked = acked
        self.groups = groups
        self.handles = handles
        self.settings = settings
        self.clock = clock
        self.revive_topic = revive_topic(settings.cluster)
        self.fifo = fifo
        self.counters = PopCounters()
        self._queue_locks = [threading.Lock() for _ in range(QUEUE_LOCK_STRIPES)]
        self._rotation: dict[tuple[str, str], int] = {}
        self._locks_lock = threading.Lock()  # guards _rotation; never held across I/O
        # The defaults of groups never configured, made once per name (a receive and its ack each ask); frozen, so
        # shared. Dict reads and writes are atomic: no lock (two threads may make the same one, equal).
        self._default_groups: dict[str, SubscriptionGroup] = {}

    def group(self, name: str) -> SubscriptionGroup:
        """The group's settings; RocketMQ's defaults for a group never configured."""
        configured = self.groups.get(name)
        if configured is not None:
            return configured
        default = self._default_groups.get(name)
        if default is None:
            if len(self._default_groups) >= MAX_DEFAULT_GROUPS:
                self._default_groups.clear()
            default = self._default_groups[name] = SubscriptionGroup(name)
        return default

    # Receive --------------------------------------------------------------------------

    def receive(self, group: str, topic: str, max_count: int, invisible_ms: int, message_filter: Any = None) -> list[Popped]:
        """Up to `max_count` visible messages of `topic` for `group` that pass `message_filter` and the
        group's own filter, spread over its queues."""
        assert max_count > 0 and invisible_ms > 0
        problem = consumption_problem(group, topic)
        if problem is not None:  # nothing is taken: an unacked message could never come back
            raise TopicInvalid(problem)
        settings = self.group(group)
        message_filter = with_group_filter(message_filter, settings.sql_filter)
        sources = [(topic, q) for q in self.store.queue_ids_of(topic)]
        retry = retry_topic(group, topic)
        if not settings.fifo and self.store.queue_ids_of(retry):
            sources.append((retry, 0))
        if not sources:
            return []
        start = self._next_start(group, topic, len(sources))
        pop_time = self.clock()
        out: list[Popped] = []
        for k in range(len(sources)):
            if len(out) >= max_count:
                break
            queue_topic, queue_id = sources[(start + k) % len(sources)]
            lock = self._queue_lock(group, queue_topic, queue_id)
            if not lock.acquire(blocking=False):
                continue  # another receive is taking from this queue
            try:
                want = min(max_count - len(out), MAX_CHECKPOINT_MESSAGES)
                taken = self._pop_queue_locked(settings, topic, queue_topic, queue_id, want, pop_time, invisible_ms, message_filter)
            finally:
                lock.release()
            out += taken
        if out:
            self.counters.add(group, topic, received=len(out))
        return out

    def _next_start(self, group: str, topic: str, n: int) -> int:
        with self._locks_lock:
            start = self._rotation.get((group, topic), -1) + 1
            if len(self._rotation) >= MAX_ROTATIONS:
                self._rotation.clear()
            self._rotation[(group, topic)] = start
        return start % n

    def _queue_lock(self, group: str, topic: str, queue_id: int) -> threading.Lock:
        """The lock serializing receives of one (group, topic, queue): one of a fixed set of stripes, so
        client-chosen group names cannot grow memory; two queues sharing a stripe only skip each other."""
        return self._queue_locks[hash((group, topic, queue_id)) % QUEUE_LOCK_STRIPES]

    def _pop_queue_locked(
        self, settings: SubscriptionGroup, topic: str, queue_topic: str, queue_id: int, want: int, pop_time: int, invisible_ms: int,
        message_filter: Any,
    ) -> list[Popped]:  # fmt: skip
        """Take up to `want` messages of one queue; the caller holds the queue's lock."""
        group = settings.name
        if settings.fifo and self.fifo.blocked(group, queue_topic, queue_id, pop_time):
            return []
        offset = self._pop_offset_locked(group, queue_topic, queue_id)
        result: GetMessageResult = self.store.get_message(group, queue_topic, queue_id, offset, want, message_filter)
        if result.status is not GetMessageStatus.FOUND:
            if result.status in _SKIPPED and result.next_begin_offset > offset and not settings.fifo:
                self.store.commit_offset(group, queue_topic, queue_id, result.next_begin_offset)  # past what the filter left out
            return []
        ck = self._checkpoint(group, queue_topic, queue_id, result.queue_offsets, pop_time, invisible_ms)
        if settings.fifo:
            return self._take_fifo_locked(settings, result, ck, topic)
        self.store.ensure_topic(self.revive_topic, self.settings.revive_queues)
        # The checkpoint and the offset past its messages in one put: both are in the log, or neither is.
        ck_msg = ck_message(self.revive_topic, self.revive_queue_of(group, queue_topic), ck)
        if not self.store.put_and_commit([ck_msg], group, queue_topic, queue_id, result.next_begin_offset):
            return []  # nothing taken: the offset stays, the messages stay visible
        return self._popped(result, ck, queue_topic, topic)

    def _take_fifo_locked(self, settings: SubscriptionGroup, result: GetMessageResult, ck: PopCheckPoint, topic: str) -> list[Popped]:
        """A FIFO group's batch: recorded in the order book (no checkpoint: the offset stays until the acks);
        a message taken more than `max_reconsume_times` + 1 times goes to the dead-letter topic instead."""
        group, queue_id = settings.name, ck.queue_id
        offsets = result.queue_offsets
        try:
            times = self.fifo.taken(group, topic, queue_id, offsets, ck.revive_time, result.next_begin_offset, ck.pop_time)
        except StoreError:
            return []  # not recorded: nothing is given out, the queue is not blocked
        popped = self._popped(result, ck, topic, topic, times)
        dead = [i for i, t in enumerate(times) if t > settings.max_reconsume_times]
        if not dead:
            return popped
        self.store.ensure_topic(dlq_topic(group), 1)
        if not self.store.put_messages([dead_letter(popped[i].data, group, times[i]) for i in dead]).ok:
            return []  # the batch expires and is taken again
        for i in dead:
            self._ack_fifo_locked(group, topic, queue_id, popped[i].queue_offset, ck.pop_time, ck.pop_time)
        self.counters.add(group, topic, dead_lettered=len(dead))
        return [p for i, p in enumerate(popped) if i not in dead]

    def _pop_offset_locked(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group takes next in a queue: its offset, or the queue's minimum for a group new to it.
        The caller holds the queue's lock, so no other receive takes from this offset before it moves."""
        offset = self.store.query_offset(group, topic, queue_id)
        return offset if offset >= 0 else max(0, self.store.get_min_offset_in_queue(topic, queue_id))

    def _checkpoint(self, group: str, topic: str, queue_id: int, offsets: list[int], pop_time: int, invisible_ms: int) -> PopCheckPoint:
        first = offsets[0]
        dense = offsets[-1] - first == len(offsets) - 1
        diffs = [] if dense else [o - first for o in offsets]
        return PopCheckPoint(topic, group, queue_id, first, len(offsets), pop_time, invisible_ms, offset_diffs=diffs)

    def revive_queue_of(self, group: str, topic: str) -> int:
        return zlib.crc32(f"{group}\x00{topic}".encode()) % self.settings.revive_queues

    def _popped(
        self, result: GetMessageResult, ck: PopCheckPoint, queue_topic: str, topic: str, times: list[int] | None = None
    ) -> list[Popped]:
        """The messages of `result` with their handles; reconsume times from `times`, else as stored."""
        out = []
        retry = queue_topic != topic
        until = ck.revive_time
        revive_queue = self.revive_queue_of(ck.cid, queue_topic)
        for i, (pos, size) in enumerate(result.positions()):
            data = bytes(memoryview(result.data)[pos : pos + size])
            offset = ck.offset_at(i)
            reconsumed = times[i] if times is not None else reconsume_times_at(data, 0)
            handle = ReceiptHandle(ck.start_offset, ck.pop_time, ck.invisible_time, revive_queue, ck.queue_id, offset, retry, reconsumed)
            text = self.handles.encode(ck.cid, topic, handle)
            out.append(Popped(data, queue_topic, ck.queue_id, offset, text, until, reconsumed))
        return out

    # Ack and invisible time -----------------------------------------------------------

    def ack(self, group: str, topic: str, handle_texts: list[str]) -> list[AckOutcome]:
        """Ack each handle; the ack records of one call are stored together. A handle used already (acked, or
        replaced by a change of the invisible time) answers ALREADY_ACKED or HANDLE_SUPERSEDED and is not counted."""
        now = self.clock()
        outcomes: list[AckOutcome] = []
        by_checkpoint: dict[tuple[bool, int, int, int, int, int], list[int]] = {}
        claimed: list[HandleKey] = []
        settings = self.group(group)
        for text in handle_texts:
            outcome, handle = self._check_handle(group, topic, text, now)
            if handle is not None:
                outcome = self._claim(group, topic, handle, settings.fifo, HandleState.ACKED, now)
            outcomes.append(outcome)
            if handle is None or outcome is not AckOutcome.OK:
                continue
            key = handle_key(group, topic, handle, settings.fifo)
            if settings.fifo:
                outcomes[-1] = self._ack_fifo_outcome(group, topic, handle, now)
                if outcomes[-1] is not AckOutcome.OK:
                    self.acked.release(key)
                continue
            claimed.append(key)
            ck_key = (
                handle.retry,
                handle.queue_id,
                handle.start_offset,
                handle.pop_time,
                handle.revive_queue_id,
                handle.invisible_until_ms,
            )
            by_checkpoint.setdefault(ck_key, []).append(handle.offset)
        # One record per checkpoint (RocketMQ 5's batch ack): a receive's messages acked together cost one record.
        records = [self._ack_record(group, topic, key, offsets) for key, offsets in by_checkpoint.items()]
        if records and not self._put_records(records):
            for key in claimed:
                self.acked.release(key)
            outcomes = [AckOutcome.NOT_STORED if o is AckOutcome.OK else o for o in outcomes]
        self.counters.add(group, topic, acked=outcomes.count(AckOutcome.OK))
        return outcomes

    def _claim(self, group: str, topic: str, handle: ReceiptHandle, fifo: bool, state: HandleState, now: int) -> AckOutcome:
        """OK when the handle was not used before (it is recorded as `state` now); otherwise what its use again answers.
        A FIFO group's order book remembers its acks durably, so it is asked first."""
        queue_topic = retry_topic(group, topic) if handle.retry else topic
        if fifo and self.fifo.was_acked(group, queue_topic, handle.queue_id, handle.offset, handle.pop_time):
            return AckOutcome.ALREADY_ACKED
        used = self.acked.claim(handle_key(group, topic, handle, fifo), state, handle.invisible_until_ms, now)
        return AckOutcome.OK if used is None else USED_OUTCOMES[used]

    def _ack_fifo_outcome(self, group: str, topic: str, handle: ReceiptHandle, now: int) -> AckOutcome:
        queue_topic = retry_topic(group, topic) if handle.retry else topic
        try:
            if not self._ack_fifo(group, queue_topic, handle.queue_id, handle.offset, handle.pop_time, now):
                return AckOutcome.HANDLE_EXPIRED
        except StoreError:
            return AckOutcome.NOT_STORED
        return AckOutcome.OK

    def _ack_record(self, group: str, topic: str, key: tuple[bool, int, int, int, int, int], offsets: list[int]) -> MessageInner:
        retry, queue_id, start_offset, pop_time, revive_queue, until = key
        queue_topic = retry_topic(group, topic) if retry else topic
        if len(offsets) == 1:
            body, tag = AckMsg(queue_topic, group, queue_id, start_offset, offsets[0], pop_time).to_json(), ACK_TAG
        else:
            body, tag = BatchAckMsg(queue_topic, group, queue_id, start_offset, tuple(offsets), pop_time).to_json(), BATCH_ACK_TAG
        props = {PROPERTY_TAGS: tag, PROPERTY_TIMER_DELIVER_MS: str(until)}
        return MessageInner(self.revive_topic, body, revive_queue, props)

    def _ack_fifo(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int, now: int) -> bool:
        """Ack one message of a FIFO group's batch. Unlike a receive, an ack waits for the queue's lock:
        it orders the commits of two acks of the queue, and keeps a receive from reading the offset
        between the book's change and its commit."""
        with self._queue_lock(group, topic, queue_id):
            return self._ack_fifo_locked(group, topic, queue_id, offset, pop_time, now)

    def _ack_fifo_locked(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int, now: int) -> bool:
        """`_ack_fifo` for a caller holding the queue's lock; False when the handle's batch is gone or expired.

        The commit runs without the order book's lock (every FIFO queue of every group uses that
        one), and before the book records the ack: a crash in between leaves the book as it was,
        so the message is delivered again, never skipped. An offset at or below the one committed
        is not committed again (a commit that preceded a crash the persisted book does not show)."""
        target = self.fifo.ack_target(group, topic, queue_id, offset, pop_time, now)
        if target is None:
            return False
        if target > self.store.query_offset(group, topic, queue_id):
            self.store.commit_offset(group, topic, queue_id, target)
        self.fifo.acked(group, topic, queue_id, offset, pop_time)
        return True

    def _check_handle(self, group: str, topic: str, text: str, now: int) -> tuple[AckOutcome, ReceiptHandle | None]:
        try:
            handle = self.handles.decode(group, topic, text)
        except HandleInvalid:
            return AckOutcome.HANDLE_INVALID, None
        if now >= handle.invisible_until_ms:
            return AckOutcome.HANDLE_EXPIRED, None
        return AckOutcome.OK, handle

    def change_invisible(self, group: str, topic: str, text: str, invisible_ms: int) -> tuple[AckOutcome, str | None, int]:
        """Make a received message invisible for `invisible_ms` from now: a new checkpoint for it, then
        an ack of the old one (RocketMQ's changeInvisibleTime). Returns the outcome, the new handle
        and when the message becomes visible again."""
        now = self.clock()
        outcome, handle = self._check_handle(group, topic, text, now)
        if handle is None:
            return outcome, None, 0
        queue_topic = retry_topic(group, topic) if handle.retry else topic
        if self.group(group).fifo:
            # The order book's batch keeps its pop time, so the old handle stays the message's: nothing is superseded.
            if self.fifo.was_acked(group, queue_topic, handle.queue_id, handle.offset, handle.pop_time):
                return AckOutcome.ALREADY_ACKED, None, 0
            try:
                with self._queue_lock(group, queue_topic, handle.queue_id):  # the book's changes of a queue in one order
                    extended = self.fifo.extend(group, queue_topic, handle.queue_id, handle.pop_time, now + invisible_ms, now)
            except StoreError:
                return AckOutcome.NOT_STORED, None, 0
            if not extended:
                return AckOutcome.HANDLE_EXPIRED, None, 0
            # The pop time names the queue's batch in the order book, so it stays; the invisible time grows.
            moved = ReceiptHandle(handle.start_offset, handle.pop_time, now + invisible_ms - handle.pop_time, handle.revive_queue_id,
                                  handle.queue_id, handle.offset, handle.retry, handle.reconsume_times)  # fmt: skip
            return AckOutcome.OK, self.handles.encode(group, topic, moved), now + invisible_ms
        claim = self._claim(group, topic, handle, False, HandleState.SUPERSEDED, now)
        if claim is not AckOutcome.OK:
            return claim, None, 0  # acked, or moved to another handle already: a new checkpoint would deliver it again
        ck = self._checkpoint(group, queue_topic, handle.queue_id, [handle.offset], now, invisible_ms)
        old = AckMsg(queue_topic, group, handle.queue_id, handle.start_offset, handle.offset, handle.pop_time)
        revive_queue = self.revive_queue_of(group, queue_topic)
        if not self._put_records([ck_message(self.revive_topic, revive_queue, ck), ack_message(self.revive_topic, handle, old)]):
            self.acked.release(handle_key(group, topic, handle, False))
            return AckOutcome.NOT_STORED, None, 0
        moved = ReceiptHandle(handle.offset, now, invisible_ms, revive_queue, handle.queue_id, handle.offset, handle.retry,
                              handle.reconsume_times)  # fmt: skip
        return AckOutcome.OK, self.handles.encode(group, topic, moved), ck.revive_time

    def _put_records(self, records: list[MessageInner]) -> bool:
        """Store revive-topic records (one put, so a CK and the ACK it replaces land together)."""
        self.store.ensure_topic(self.revive_topic, self.settings.revive_queues)
        return self.store.put_records(records).ok


def handle_key(group: str, topic: str, handle: ReceiptHandle, fifo: bool) -> HandleKey:
    """What names one delivery of a message. A FIFO group's invisible-time change keeps the pop time and the
    delivery (the order book's batch), so its handles leave the invisible time out; a plain group's change
    makes a new checkpoint, so the invisible time tells two checkpoints of one millisecond apart."""
    return (group, topic, handle.retry, handle.queue_id, handle.offset, handle.pop_time, -1 if fifo else handle.invisible_time)


def ck_message(topic: str, revive_queue: int, ck: PopCheckPoint) -> MessageInner:
    """A checkpoint as a revive-topic message, due when its messages become visible again."""
    props = {PROPERTY_TAGS: "ck", PROPERTY_TIMER_DELIVER_MS: str(ck.revive_time)}
    return MessageInner(topic, ck.to_json(), revive_queue, props)


def ack_message(topic: str, handle: ReceiptHandle, ack: AckMsg) -> MessageInner:
    """An ack as a revive-topic message, in its checkpoint's revive queue and due with it."""
    props = {PROPERTY_TAGS: "ack", PROPERTY_TIMER_DELIVER_MS: str(handle.invisible_until_ms)}
    return MessageInner(topic, ack.to_json(), handle.revive_queue_id, props)


def dead_letter(data: bytes, group: str, reconsume_times: int) -> MessageInner:
    """A stored message as its copy for the group's dead-letter topic (one queue)."""
    return requeued(data, dlq_topic(group), reconsume_times)


def requeued(data: bytes, topic: str, reconsume_times: int) -> MessageInner:
    """A stored message put again into `topic` queue 0, with its body, flag and properties, the
    topic it was first produced to in RETRY_TOPIC, and `reconsume_times`.

    The body goes as stored, so its compression bits go with it (RocketMQ's consumerSendMsgBack
    copies the SYSFLAG); the transaction bits do not: the copy is an ordinary message."""
    m = decode_message(data, 0)
    props = dict(m["properties"])
    original = props.get(PROPERTY_RETRY_TOPIC) or m["topic"]
    if not is_group_system_topic(original):
        props[PROPERTY_RETRY_TOPIC] = original
    props.pop(PROPERTY_TIMER_DELIVER_MS, None)
    sys_flag = m["sys_flag"] & (COMPRESSED_FLAG | COMPRESSION_TYPE_MASK)
    return MessageInner(
        topic, m["body"], 0, props, flag=m["flag"], born_timestamp=m["born_timestamp"], sys_flag=sys_flag, reconsume_times=reconsume_times
    )
