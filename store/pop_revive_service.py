"""PopReviveService: matches checkpoints with acks in the revive topic and redelivers what was not acked.

It consumes each revive queue in order as the group CID_RMQ_SYS_REVIVE_GROUP. Checkpoints and
acks are timer messages due when their messages become visible again, so they reach a revive
queue at that time and a checkpoint waits here only `pop_ack_margin_ms` for its acks: the
memory this service holds is bounded by what comes due in that margin (and by
`pop_revive_max_pending`), not by what is in flight. A checkpoint whose time plus the margin
has passed gets its unacked messages re-put into the group's retry topic with reconsume times
+ 1, or into its dead-letter topic once that passes the group's `max_reconsume_times`.

Its progress in each revive queue is the revive group's offset: the lowest revive-queue offset
of a record it still holds. After a crash it reads again from there, so a checkpoint revived
just before the crash may be revived twice (its messages delivered one more time); an acked
message is never revived, because its ack lies after its checkpoint and is read again too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from store.errors import MetadataCorrupt
from store.fifo_order_book import FifoOrderBook
from store.get_message_result import GetMessageResult
from store.json_file import read_json, write_json_atomically
from store.message import PROPERTY_TAGS, MessageInner
from store.message_codec import decode_message
from store.pop_consumer import PopConsumer, PopStore, requeued
from store.pop_records import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    REVIVE_GROUP,
    AckMsg,
    BatchAckMsg,
    PopCheckPoint,
    RecordInvalid,
    dlq_topic,
    retry_topic,
)
from store.service_thread import ServiceThread
from store.status import GetMessageStatus

log = logging.getLogger("tidemq.store")

# Revive-queue messages read per get; a pass reads at most READS_PER_PASS of those per queue.
READ_BATCH = 32
READS_PER_PASS = 64
ORDER_INFO_FILE = "consumerOrderInfo.json"  # RocketMQ 5's name for the FIFO order book
MergeKey = tuple[str, str, int, int, int]  # topic, group, queue id, start offset, pop time
# The longest invisible time a receive may ask for (12 h); an ack older than that can match nothing more.
MAX_INVISIBLE_MS = 12 * 3600 * 1000


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
    early_acks: dict[MergeKey, list[tuple[int, int]]] = field(default_factory=dict)  # key -> [(ack offset, revive offset)]


@dataclass(slots=True)
class ReviveStats:
    revived: int = 0  # messages re-put into a retry topic
    dead_lettered: int = 0  # messages put into a dead-letter topic
    lost: int = 0  # unacked messages whose stored bytes were already removed by retention


class PopReviveService(ServiceThread):
    def __init__(self, store: PopStore, consumer: PopConsumer, interval_ms: int, max_pending: int, clock: Callable[[], int]) -> None:
        super().__init__("PopReviveService")
        self.store = store
        self.consumer = consumer
        self.interval_ms = interval_ms
        self.max_pending = max_pending
        self.clock = clock
        self.topic = consumer.revive_topic
        self.stats = ReviveStats()
        self.is_slave = False  # set by the store: a slave replicates its master's redeliveries and puts none
        self.order_book_file: OrderBookFile | None = None  # set by the store: where the FIFO order book is kept
        self._queues: dict[int, ReviveQueue] = {}

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.interval_ms)
            try:
                self.revive_pass()
                if self.order_book_file is not None:
                    self.order_book_file.persist_if_due()
            except Exception:  # retried next pass; nothing is lost, records are re-read from the committed offset
                log.exception("revive pass failed")
        if self.order_book_file is not None:
            self.order_book_file.persist()  # at shutdown: a FIFO batch still invisible stays so after the restart

    def revive_pass(self) -> int:
        """One pass over every revive queue; returns the messages re-put (none on a slave: its master revives)."""
        if self.is_slave:
            return 0
        moved = 0
        for queue_id in range(self.consumer.settings.revive_queues):
            state = self._queues.get(queue_id)
            if state is None:
                offset = max(0, self.store.query_offset(REVIVE_GROUP, self.topic, queue_id))
                state = self._queues[queue_id] = ReviveQueue(offset, offset)
            self._read(queue_id, state)
            moved += self._revive_due(state)
            self._commit(queue_id, state)
        return moved

    def in_memory(self) -> int:
        return sum(len(q.pending) + len(q.early_acks) for q in self._queues.values())

    def _read(self, queue_id: int, state: ReviveQueue) -> None:
        for _ in range(READS_PER_PASS):
            if len(state.pending) >= self.max_pending:
                return  # bounded: the rest is read once these are revived
            result: GetMessageResult = self.store.get_message(REVIVE_GROUP, self.topic, queue_id, state.read_offset, READ_BATCH)
            if result.status is not GetMessageStatus.FOUND:
                if result.next_begin_offset > state.read_offset:
                    state.read_offset = result.next_begin_offset  # removed by retention: nothing to match there
                    continue
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
                state.pending[key] = Pending(ck, offset)
                for ack_offset, _ in state.early_acks.pop(key, []):
                    _set_acked(ck, ack_offset)
            elif tag == ACK_TAG or tag == BATCH_ACK_TAG:
                ack = AckMsg.from_json(m["body"]) if tag == ACK_TAG else BatchAckMsg.from_json(m["body"])
                acked = (ack.ack_offset,) if isinstance(ack, AckMsg) else ack.ack_offsets
                pending = state.pending.get(ack.merge_key())
                for ack_offset in acked:
                    if pending is not None:
                        _set_acked(pending.ck, ack_offset)
                    else:  # read before its checkpoint: kept (and its offset not committed past) until the checkpoint comes
                        state.early_acks.setdefault(ack.merge_key(), []).append((ack_offset, offset))
        except RecordInvalid as e:
            log.error("revive queue record at %d skipped: %s", offset, e)

    def _revive_due(self, state: ReviveQueue) -> int:
        now = self.clock()
        margin = self.consumer.settings.ack_margin_ms
        moved = 0
        for key, pending in list(state.pending.items()):
            if now < pending.ck.revive_time + margin:
                continue
            if not self._revive(pending.ck):
                break  # retried next pass; the offset stays below it
            moved += pending.ck.num - bin(pending.ck.bit_map).count("1")
            del state.pending[key]
        return moved

    def _revive(self, ck: PopCheckPoint) -> bool:
        """Re-put the checkpoint's unacked messages; False when the put failed."""
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
        if not self.store.put_messages(msgs).ok:
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
        oldest = self.clock() - MAX_INVISIBLE_MS - 2 * self.consumer.settings.ack_margin_ms
        for key in [k for k in state.early_acks if k[4] < oldest]:
            del state.early_acks[key]  # its checkpoint was revived before this run read it: the ack is moot
        low = state.read_offset
        for pending in state.pending.values():
            low = min(low, pending.revive_offset)
        for acks in state.early_acks.values():
            for _, revive_offset in acks:
                low = min(low, revive_offset)
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


class OrderBookFile:
    """`config/consumerOrderInfo.json`: the FIFO order book, written when it changed, at most every interval."""

    def __init__(self, config_dir: str, book: FifoOrderBook, interval_ms: int) -> None:
        self.path = os.path.join(config_dir, ORDER_INFO_FILE)
        self.book = book
        self.interval_s = interval_ms / 1000.0
        self._next = time.monotonic() + self.interval_s

    def load(self) -> None:
        try:
            doc = read_json(self.path)
        except MetadataCorrupt as e:  # the offsets are the truth: start with an empty book
            log.error("%s; FIFO batches in flight are taken again at once", e)
            return
        if isinstance(doc, dict) and isinstance(doc.get("batches"), list):
            self.book.restore(doc["batches"])

    def persist_if_due(self) -> None:
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self.interval_s
            self.persist()

    def persist(self) -> None:
        rows = self.book.snapshot_if_changed()
        if rows is not None:
            write_json_atomically(self.path, {"batches": rows})
