"""PopReviveService: matches checkpoints with acks in the revive topic and redelivers what was not acked.

It consumes each revive queue in order as the group CID_RMQ_SYS_REVIVE_GROUP. Checkpoints and
acks are timer messages due when their messages become visible again, so they reach a revive
queue at that time, a checkpoint before the acks of its messages (both are due at the same time,
and the timer delivers a slot's units in the order they were put). A checkpoint waits here for
its acks until the *horizon* has passed its time by `pop_ack_margin_ms`: the horizon is a time
before which every timer unit has been delivered and dispatched (`horizon()`: the timer's read
time, taken only while nothing put before it still waits for enqueue or dispatch). Waiting on the
horizon rather than on the wall clock is what keeps an answered ack from losing the race with its
checkpoint when the timer is late (after a restart, under load): as RocketMQ 5's revive service
waits on the delivery times it has read, not on the clock. The memory held is bounded by what
comes due in the margin (and by `pop_revive_max_pending`), not by what is in flight. A checkpoint
whose time plus the margin the horizon passed gets its unacked messages re-put into the group's
retry topic with reconsume times + 1, or into its dead-letter topic once that passes the group's
`max_reconsume_times`. An ack whose checkpoint is not held is dropped (its checkpoint was matched
already, or revived before a restart with the ack not yet due), as RocketMQ does by default.

Its progress in each revive queue is the revive group's offset (a state record: replicated and
recovered with the log): the lowest revive-queue offset of a checkpoint it still holds. A
checkpoint's redeliveries and the offset past it are one put, so after a crash or a failover no
checkpoint is revived twice; the service reads again from the offset, the checkpoints and their
acks together, so an acked message is never revived.

Resting: a pass that holds no checkpoint and read every revive queue to its end leaves the service waiting
REST_WAIT_MS instead of `pop_revive_interval_ms`; dispatch of the revive topic (its checkpoints and acks coming
due) wakes it (`on_entries`), and nothing else can give it work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.service_thread import ServiceThread
from store.codec.message import PROPERTY_TAGS, MessageInner
from store.codec.message_codec import decode_message
from store.metadata.topic_names import dlq_topic, retry_topic
from store.pop.pop_consumer import PopConsumer, PopStore, requeued
from store.pop.pop_records import ACK_TAG, BATCH_ACK_TAG, CK_TAG, REVIVE_GROUP, AckMsg, BatchAckMsg, PopCheckPoint, RecordInvalid
from store.queue.get_message_result import GetMessageResult
from store.status import GetMessageStatus

log = logging.getLogger("tidemq.store")

# The wait while no checkpoint is held and every revive queue is read to its end: dispatch of the revive topic
# wakes the service sooner (`on_entries`); a wake-up under load costs the event loop's requests (docs/concurrency.md).
REST_WAIT_MS = 1_000
# Revive-queue messages read per get; a pass reads at most READS_PER_PASS of those per queue.
READ_BATCH = 32
READS_PER_PASS = 64
MergeKey = tuple[str, str, int, int, int]  # topic, group, queue id, start offset, pop time


@dataclass(slots=True)
class Pending:
    ck: PopCheckPoint
    revive_offset: int  # the checkpoint's offset in its revive queue


@dataclass(slots=True)
class ReviveQueue:
    """What the service holds of one revive queue."""

    read_offset: int
    committed: int
    pending: dict[MergeKey, Pending] = field(default_factory=dict)
    read_to_end: bool = False  # the last read reached the queue's end (not a bound of the pass)


@dataclass(slots=True)
class ReviveStats:
    revived: int = 0  # messages re-put into a retry topic
    dead_lettered: int = 0  # messages put into a dead-letter topic
    lost: int = 0  # unacked messages whose stored bytes were already removed by retention
    acks_dropped: int = 0  # ack records read with no checkpoint held for them


class PopReviveService(ServiceThread):
    def __init__(
        self, store: PopStore, consumer: PopConsumer, interval_ms: int, max_pending: int, clock: Callable[[], int],
        horizon: Callable[[], int | None],
    ) -> None:  # fmt: skip
        super().__init__("PopReviveService")
        self.store = store
        self.consumer = consumer
        self.interval_ms = interval_ms
        self.max_pending = max_pending
        self.clock = clock
        self.horizon = horizon  # the time before which every timer unit is delivered and dispatched; None: unknown now
        self.topic = consumer.revive_topic
        self.stats = ReviveStats()
        self.is_slave = False  # set by the store: a slave replicates its master's redeliveries and puts none
        self._horizon_ms = 0  # the last horizon observed
        self._queues: dict[int, ReviveQueue] = {}
        self.rest_wait_ms = REST_WAIT_MS
        self._resting = False  # the last pass held no checkpoint and read every queue to its end
        self._notices = 0  # dispatch's notices of revive queue entries (`on_entries`)

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.rest_wait_ms if self._resting else self.interval_ms)
            try:
                self.revive_pass()
            except Exception:  # retried next pass; nothing is lost, records are re-read from the committed offset
                log.exception("revive pass failed")

    def take_over(self) -> None:
        """A slave becomes master: read every revive queue again from the replicated offsets."""
        self._queues = {}
        self._horizon_ms = 0
        self._resting = False
        self.wakeup()

    def on_entries(self, _queue_id: int) -> None:
        """Dispatch gave a revive queue entries (under the dispatch lock): a resting service reads them now.
        The count moves before `_resting` is read, and a pass sets `_resting` before it reads the count: a
        notice either is seen by the pass or sees it resting."""
        self._notices += 1
        if self._resting:
            self._resting = False
            self.wakeup()

    def revive_pass(self) -> int:
        """One pass over every revive queue; returns the messages re-put (none on a slave: its master revives)."""
        if self.is_slave:
            return 0
        horizon = self.horizon()  # observed before reading: every record due before it is in the queues now
        if horizon is not None:
            self._horizon_ms = max(self._horizon_ms, horizon)
        moved = 0
        idle = True
        notices = self._notices
        for queue_id in range(self.consumer.settings.revive_queues):
            state = self._queues.get(queue_id)
            if state is None:
                offset = max(0, self.store.query_offset(REVIVE_GROUP, self.topic, queue_id))
                state = self._queues[queue_id] = ReviveQueue(offset, offset)
            self._read(queue_id, state)
            moved += self._revive_due(queue_id, state)
            self._commit(queue_id, state)
            idle = idle and state.read_to_end and not state.pending
        self._resting = idle  # then only new entries (on_entries wakes it) can give it work
        if idle and self._notices != notices:
            self._resting = False  # entries came during the pass, maybe after its read
        return moved

    def in_memory(self) -> int:
        return sum(len(q.pending) for q in self._queues.values())

    def _read(self, queue_id: int, state: ReviveQueue) -> None:
        state.read_to_end = False
        for _ in range(READS_PER_PASS):
            if len(state.pending) >= self.max_pending:
                return  # bounded: the rest is read once these are revived
            result: GetMessageResult = self.store.get_message(REVIVE_GROUP, self.topic, queue_id, state.read_offset, READ_BATCH)
            if result.status is not GetMessageStatus.FOUND:
                if result.next_begin_offset > state.read_offset:
                    state.read_offset = result.next_begin_offset  # removed by retention: nothing to match there
                    continue
                state.read_to_end = True
                return
            for offset, (pos, size) in zip(result.queue_offsets, result.positions(), strict=True):
                self._apply(state, offset, memoryview(result.data)[pos : pos + size])
            state.read_offset = result.next_begin_offset

    def _apply(self, state: ReviveQueue, offset: int, data: memoryview) -> None:
        m = decode_message(data, 0)
        tag = m["properties"].get(PROPERTY_TAGS)
        try:
            if tag == CK_TAG:
                ck = PopCheckPoint.from_json(m["body"])
                key = ck.merge_key()
                held = state.pending.get(key)
                if held is not None:  # the same checkpoint delivered again (a timer slot re-read after a crash)
                    ck.bit_map |= held.ck.bit_map
                state.pending[key] = Pending(ck, offset if held is None else held.revive_offset)
            elif tag == ACK_TAG or tag == BATCH_ACK_TAG:
                ack = AckMsg.from_json(m["body"]) if tag == ACK_TAG else BatchAckMsg.from_json(m["body"])
                acked = (ack.ack_offset,) if isinstance(ack, AckMsg) else ack.ack_offsets
                pending = state.pending.get(ack.merge_key())
                if pending is None:
                    self.stats.acks_dropped += 1  # its checkpoint is matched or revived already (see the docstring)
                    return
                for ack_offset in acked:
                    _set_acked(pending.ck, ack_offset)
        except RecordInvalid as e:
            log.error("revive queue record at %d skipped: %s", offset, e)

    def _revive_due(self, queue_id: int, state: ReviveQueue) -> int:
        horizon = self._horizon_ms
        margin = self.consumer.settings.ack_margin_ms
        moved = 0
        for key, pending in list(state.pending.items()):
            if horizon < pending.ck.revive_time + margin:
                continue
            # The revive queue's offset once this checkpoint is done goes in the same put as its
            # redeliveries: a crash can never leave the copies stored and the checkpoint to be read again.
            low = min([state.read_offset, *(p.revive_offset for k, p in state.pending.items() if k != key)])
            if not self._revive(pending.ck, queue_id, low):
                break  # retried next pass; the offset stays below it
            state.committed = max(state.committed, low)
            moved += pending.ck.num - bin(pending.ck.bit_map).count("1")
            del state.pending[key]
        return moved

    def _revive(self, ck: PopCheckPoint, queue_id: int, offset_after: int) -> bool:
        """Re-put the checkpoint's unacked messages with the revive queue's offset after it; False when the put failed."""
        settings = self.consumer.group(ck.cid)
        retry = retry_topic(ck.cid, _origin(ck))
        msgs: list[MessageInner] = []
        dead = 0
        for i in range(ck.num):
            if ck.bit_map & (1 << i):
                continue
            data = self._stored(ck.topic, ck.queue_id, ck.offset_at(i))
            if data is None:
                self.stats.lost += 1
                continue
            times = decode_message(data, 0)["reconsume_times"] + 1
            if times > settings.max_reconsume_times:
                msgs.append(requeued(data, dlq_topic(ck.cid), times))
                dead += 1
            else:
                msgs.append(requeued(data, retry, times))
        if not msgs:
            return True
        for topic in {m.topic for m in msgs}:
            self.store.ensure_topic(topic, 1)
        if not self.store.put_and_commit(msgs, REVIVE_GROUP, self.topic, queue_id, offset_after):
            return False
        self.stats.dead_lettered += dead
        self.stats.revived += len(msgs) - dead
        self.consumer.counters.add(ck.cid, _origin(ck), redelivered=len(msgs) - dead, dead_lettered=dead)
        return True

    def _stored(self, topic: str, queue_id: int, offset: int) -> bytes | None:
        result: Any = self.store.get_message(REVIVE_GROUP, topic, queue_id, offset, 1)
        if result.status is not GetMessageStatus.FOUND or result.queue_offsets[0] != offset:
            return None
        pos, size = result.positions()[0]
        return bytes(memoryview(result.data)[pos : pos + size])

    def _commit(self, queue_id: int, state: ReviveQueue) -> None:
        low = state.read_offset
        for pending in state.pending.values():
            low = min(low, pending.revive_offset)
        if low != state.committed:
            self.store.commit_offset(REVIVE_GROUP, self.topic, queue_id, low)
            state.committed = low


def _set_acked(ck: PopCheckPoint, ack_offset: int) -> None:
    index = ck.index_of(ack_offset)
    if index >= 0:
        ck.bit_map |= 1 << index


def _origin(ck: PopCheckPoint) -> str:
    """The topic a checkpoint's group consumes: its own topic, or the one its retry topic names."""
    prefix = retry_topic(ck.cid, "")
    return ck.topic[len(prefix) :] if ck.topic.startswith(prefix) else ck.topic
