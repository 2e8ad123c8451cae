"""Transactions: half messages, their commit or rollback, and what is still pending (RocketMQ's
TransactionalMessageServiceImpl and EndTransactionProcessor, as one object the store builds).

A transactional put stores a half message (store.transaction.transaction_message) and answers its offset
message id as the transaction id; `resolve()` commits (a copy to the real topic, then an op
record) or rolls back (an op record only). The check service (store.transaction.transaction_check_service)
checks back the halves left pending past `transaction_timeout_ms`.

State, in memory: `pending` (half queue offset -> PendingHalf) and `resolved` (half queue offset
-> the action, for offsets at or past the progress). The progress is the first half queue offset
not known resolved; it is kept as the consumer offset of CID_RMQ_SYS_TRANS on the half topic,
as RocketMQ keeps it, and the op queue's (the first op record naming a half at or past the
progress) likewise. tidemq once kept them under CID_SYS_RMQ_TRANS (the name of RocketMQ's
constant, not its value); `load()` moves them from there once, then rebuilds the state from the
op queue and the half queue from the progress on. An op record names one half (`N`, RocketMQ 4
and tidemq) or several (`N,` and `N,M,`, RocketMQ 5).
Check counts are kept in `config/transactionCheck.json` (RocketMQ re-puts the half with a
TRANSACTION_CHECK_TIMES property instead; tidemq keeps the transaction id stable).

Exactly once after a crash: a commit puts the copy, then the op record. A half without an op
record whose copy exists (found by UNIQ_KEY in the real topic, with prepared_transaction_offset =
the half's offset, as the delay levels and the timer dedupe) is committed already: resolving it
writes the op record only. This needs the index (message_index_enable and
message_index_uniq_key_enable, both on by default); without it a commit interrupted between
the two puts may be delivered twice.

A half is put through the store's one `put` (a batch with a producer group); the half message hook
(store/transaction/half_message_hook.py) rewrites it and registers the halves as pending under the
put lock, right after their append.

Locks (their order: docs/concurrency.md): a stripe of `_stripes` serializes one transaction's resolutions and is held across
its puts; `_state_lock` guards the state.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from store.codec.message import (
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageInner,
    split_keys,
)
from store.codec.message_codec import TRANSACTION_COMMIT_TYPE
from store.codec.stored_copy import born_host_bytes
from store.disk.json_file import read_json, write_json_atomically
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from store.report_types import TransactionStatus
from store.status import AppendMessageResult, PutMessageResult
from store.transaction.producer_group_manager import ProducerGroup, ProducerGroupManager
from store.transaction.transaction_message import (
    CHECK_GROUP,
    FORMER_CHECK_GROUP,
    HALF_TOPIC,
    OP_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    TransactionAction,
    TransactionState,
    committed_message,
    half_offset_of,
    op_message,
    op_record,
    transaction_type,
)

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.queue.consume_queue import ConsumeQueue


class TransactedStore(Protocol):
    """What transactions need of the store: the half and op queues, reads, puts and the check group's offsets."""

    @property
    def config(self) -> MessageStoreConfig: ...
    def now_ms(self) -> int: ...
    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...
    def look_message_by_offset(self, commitlog_offset: int) -> dict[str, Any] | None: ...
    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]: ...
    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...
    def commit_offsets(self, group: str, commits: list[tuple[str, int, int]]) -> None: ...
    def put_message(self, msg: MessageInner) -> PutMessageResult: ...


log = logging.getLogger("tidemq.store")

CHECKS_FILE = "transactionCheck.json"
STRIPES = 64  # resolution locks; two transactions share one in 1/64 of cases, which only serializes them


class ResolveStatus(enum.Enum):
    """Outcome of `Transactions.resolve`."""

    RESOLVED = "RESOLVED"  # this call committed or rolled it back
    ALREADY = "ALREADY"  # it was resolved the same way before: nothing changed
    CONFLICT = "CONFLICT"  # it was resolved the other way before: nothing changed
    NOT_FOUND = "NOT_FOUND"  # no half message has this id
    PUT_FAILED = "PUT_FAILED"  # the store refused a put; still pending


@dataclass(frozen=True, slots=True)
class Resolution:
    status: ResolveStatus
    state: TransactionState  # where the transaction stands after the call
    put_result: PutMessageResult | None = None  # the refused put (PUT_FAILED), or the commit's put (RESOLVED)


@dataclass(slots=True)
class PendingHalf:
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    producer_group: str
    transaction_id: str
    msg_id: str  # the UNIQ_KEY
    topic: str  # the real topic and queue
    queue_id: int
    tags: str | None
    keys: list[str] = field(default_factory=list)
    checks: int = 0  # check-backs so far
    next_check_ms: int = 0
    in_check: bool = False  # a check-back is under way

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        return {
            "transaction_id": self.transaction_id, "producer_group": self.producer_group, "msg_id": self.msg_id,
            "topic": self.topic, "queue_id": self.queue_id, "tags": self.tags, "keys": self.keys,
            "store_timestamp": self.store_timestamp, "age_ms": max(0, now_ms - self.store_timestamp), "checks": self.checks,
        }  # fmt: skip


@dataclass(slots=True)
class TransactionCounters:
    committed: int = 0
    rolled_back: int = 0
    checks: int = 0  # check-backs counted (listed or sent)
    check_rollbacks: int = 0  # rolled back after transaction_check_max checks
    deduplicated: int = 0  # commits found already put (after a crash) and only recorded


class CheckAnswer(enum.Enum):
    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"
    FAILED = "failed"  # no answer: timeout, connection error, a bad reply


@dataclass(frozen=True, slots=True)
class CheckRequest:
    check_url: str
    half: PendingHalf  # a snapshot: the transaction id, group, topic, queue, msg id, tags, keys, checks
    body: bytes
    properties: dict[str, str]


class CheckTransport(Protocol):
    def submit(self, request: CheckRequest, done: Callable[[CheckAnswer], None]) -> bool:
        """Start a check without blocking; `done(answer)` is called once, from another thread. False: no free slot now."""
        ...


def pending_half(stored: dict[str, Any], transaction_id: str) -> PendingHalf | None:
    props = stored["properties"]
    qid = props.get(PROPERTY_REAL_QID, "")
    if PROPERTY_REAL_TOPIC not in props or not qid.isdigit():
        return None
    return PendingHalf(
        stored["queue_offset"], stored["commitlog_offset"], stored["store_timestamp"], props.get(PROPERTY_PRODUCER_GROUP, ""),
        transaction_id, props.get(PROPERTY_UNIQ_KEY, ""), props[PROPERTY_REAL_TOPIC], int(qid), props.get(PROPERTY_TAGS),
        split_keys(props.get(PROPERTY_KEYS, "")),
    )  # fmt: skip


class Transactions:
    def __init__(self, store: TransactedStore) -> None:
        cfg = store.config
        self._store = store
        self.producer_groups = ProducerGroupManager(cfg.config_dir())
        self.timeout_ms = cfg.transaction_timeout_ms
        self.check_max = cfg.transaction_check_max
        self.check_interval_ms = cfg.transaction_check_interval_ms
        self._checks_path = os.path.join(cfg.config_dir(), CHECKS_FILE)
        self._host = cfg.store_host_bytes()
        self.pending: dict[int, PendingHalf] = {}
        self.resolved: dict[int, TransactionAction | None] = {}  # None: an op record without tidemq's action
        self.progress = 0  # first half queue offset not known resolved
        self.op_progress = 0  # first op queue offset naming a half at or past the progress
        self._registered_end = 0  # past the last half registered
        self.counters = TransactionCounters()
        self.check_answers: dict[CheckAnswer, int] = dict.fromkeys(CheckAnswer, 0)  # check-back answers by kind
        self.check_transport: CheckTransport | None = None  # set before start (the front end's HTTP check-back)
        self._state_lock = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(STRIPES)]

    # Loading -----------------------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the state from the queues (after the store's recovery and its consumer offsets;
        the producer groups' file is read before, with the other state tables)."""
        self._take_over_former_progress()
        half_min, half_max = self._queue_range(HALF_TOPIC)
        op_min, op_max = self._queue_range(OP_TOPIC)
        self.progress = min(max(self._store.query_offset(CHECK_GROUP, HALF_TOPIC, 0), half_min), half_max)
        self.op_progress = min(max(self._store.query_offset(CHECK_GROUP, OP_TOPIC, 0), op_min), op_max)
        for _, stored in self._walk(OP_TOPIC, self.op_progress):
            record = op_record(stored)
            if record is None:
                continue
            offsets, action = record
            self.resolved.update((half_offset, action) for half_offset in offsets if half_offset >= self.progress)
        checks = self._read_checks()
        for queue_offset, stored in self._walk(HALF_TOPIC, self.progress):
            if queue_offset in self.resolved:
                continue
            half = pending_half(stored, stored["offset_msg_id"])
            if half is None:
                log.error("transaction: half message at %d names no real topic and queue; ignored", stored["commitlog_offset"])
                continue
            half.checks = checks.get(half.commitlog_offset, 0)
            self.pending[queue_offset] = half
        self._registered_end = half_max
        log.info("transactions loaded: %d pending from half queue offset %d", len(self.pending), self.progress)

    def take_over(self) -> None:
        """A slave becomes master: rebuild what is pending from the replicated queues and check progress."""
        with self._state_lock:
            self.pending, self.resolved = {}, {}
        self.load()

    def _take_over_former_progress(self) -> None:
        """Move the progress tidemq kept under FORMER_CHECK_GROUP (the name of RocketMQ's constant, not
        its value) to CHECK_GROUP, when it is further on than CHECK_GROUP's (absent: -1). Both offsets
        go as the pair they were: the op queue's belongs to the half queue's. Once moved, CHECK_GROUP's
        is as far on, so a later start moves nothing; the former entry stays, unread."""
        store = self._store
        former = store.query_offset(FORMER_CHECK_GROUP, HALF_TOPIC, 0)
        if former < 0 or former <= store.query_offset(CHECK_GROUP, HALF_TOPIC, 0):
            return
        former_op = store.query_offset(FORMER_CHECK_GROUP, OP_TOPIC, 0)
        store.commit_offsets(CHECK_GROUP, [(HALF_TOPIC, 0, former), (OP_TOPIC, 0, max(former_op, 0))])
        log.info(
            "transactions: check progress moved from group %s to %s (half queue %d, op queue %d)",
            FORMER_CHECK_GROUP, CHECK_GROUP, former, max(former_op, 0),
        )  # fmt: skip

    def _queue_range(self, topic: str) -> tuple[int, int]:
        cq = self._store.find_consume_queue(topic, 0)
        return (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) if cq is not None else (0, 0)

    def _walk(self, topic: str, offset: int) -> Any:
        """(queue offset, decoded message) of queue 0 of `topic` from `offset` to its end."""
        cq = self._store.find_consume_queue(topic, 0)
        while cq is not None and offset < cq.get_max_offset_in_queue():
            res = cq.get_index_buffer(offset)
            if res is None:
                return
            try:
                entries = [ENTRY.unpack_from(res.view, p) for p in range(0, res.size - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE)]
            finally:
                res.release()
            for phy, size, _ in entries:
                stored = self._store.look_message_by_offset(phy) if size > 0 else None
                if stored is not None and stored["topic"] == topic:
                    yield offset, stored
                offset += 1

    def _read_checks(self) -> dict[int, int]:
        data = read_json(self._checks_path)
        table = data.get("checks") if isinstance(data, dict) else None
        return {int(k): v for k, v in table.items() if k.isdigit() and type(v) is int} if isinstance(table, dict) else {}

    def persist_checks(self) -> None:
        with self._state_lock:
            table = {str(h.commitlog_offset): h.checks for h in self.pending.values() if h.checks}
        try:
            write_json_atomically(self._checks_path, {"checks": table})
        except OSError as exc:
            log.error("cannot persist %s: %s", self._checks_path, exc)

    # Prepare -------------------------------------------------------------------------------

    def register_halves_locked(
        self, producer_group: str, targets: list[tuple[str, int]], msgs: Sequence[MessageInner], items: Sequence[AppendMessageResult]
    ) -> None:
        """Record the halves just appended as pending (the half message hook's appended-hook: it runs under the
        put lock, so a half is pending before dispatch makes it visible and the progress never passes it).
        `targets` are the messages' real topics and queues; `items` the appended ones (all, or a prefix)."""
        with self._state_lock:
            for msg, (topic, queue_id), item in zip(msgs, targets, items, strict=False):
                props = msg.properties
                self.pending[item.logics_offset] = PendingHalf(
                    item.logics_offset, item.wrote_offset, item.store_timestamp, producer_group, item.msg_id,
                    props[PROPERTY_UNIQ_KEY], topic, queue_id, props.get(PROPERTY_TAGS), split_keys(props.get(PROPERTY_KEYS, "")),
                )  # fmt: skip
                self._registered_end = max(self._registered_end, item.logics_offset + 1)

    # Resolve -------------------------------------------------------------------------------

    def resolve(self, transaction_id: str, action: TransactionAction) -> Resolution:
        """Commit or roll back a transaction (blocking: it waits for its puts as put_message does)."""
        offset = half_offset_of(transaction_id)
        stored = self._store.look_message_by_offset(offset) if offset is not None else None
        if stored is None or stored["topic"] != HALF_TOPIC or stored["commitlog_offset"] != offset:
            return Resolution(ResolveStatus.NOT_FOUND, TransactionState.PENDING)
        with self._stripes[stored["queue_offset"] % STRIPES]:
            return self._resolve_locked(stored, action)

    def _resolve_locked(self, half: dict[str, Any], action: TransactionAction) -> Resolution:
        queue_offset = half["queue_offset"]
        state = self.state_of(half)
        if state is not TransactionState.PENDING:
            return Resolution(ResolveStatus.ALREADY if state is action.state else ResolveStatus.CONFLICT, state)
        put: PutMessageResult | None = None
        if self._committed_copy(half) is not None:
            self.counters.deduplicated += 1  # committed before a crash; only the op record is missing
            if action is TransactionAction.ROLLBACK:
                self._finish(queue_offset, TransactionAction.COMMIT)
                return Resolution(ResolveStatus.CONFLICT, TransactionState.COMMITTED)
        elif action is TransactionAction.COMMIT:
            copy = committed_message(half, born_host_bytes(half["born_host"]))
            if copy is None:
                log.error("transaction %s: the half names no valid real topic; rolled back", half["offset_msg_id"])
                action = TransactionAction.ROLLBACK
            else:
                put = self._store.put_message(copy)
                if not put.stored:
                    return Resolution(ResolveStatus.PUT_FAILED, TransactionState.PENDING, put)
        op = self._store.put_message(op_message(queue_offset, action))
        if not op.stored and action is TransactionAction.ROLLBACK:
            return Resolution(ResolveStatus.PUT_FAILED, TransactionState.PENDING, op)
        if not op.stored:
            # The copy is stored: the commit holds. A check after a restart finds the copy and records the op then.
            log.warning("transaction %s: committed, but its op record was refused (%s)", half["offset_msg_id"], op.detail)
        self._finish(queue_offset, action)
        return Resolution(ResolveStatus.RESOLVED, action.state, put)

    def _finish(self, queue_offset: int, action: TransactionAction) -> None:
        with self._state_lock:
            self.pending.pop(queue_offset, None)
            self.resolved[queue_offset] = action
        if action is TransactionAction.COMMIT:
            self.counters.committed += 1
        else:
            self.counters.rolled_back += 1

    def state_of(self, half: dict[str, Any]) -> TransactionState:
        """Where the transaction of a stored half stands."""
        queue_offset = half["queue_offset"]
        with self._state_lock:
            if queue_offset in self.pending:
                return TransactionState.PENDING
            known = queue_offset in self.resolved or queue_offset < self.progress
            action = self.resolved.get(queue_offset)
        if not known:
            return TransactionState.PENDING  # a half the state does not hold yet is still unresolved
        if action is None:  # resolved below the progress, or by an op record without tidemq's action
            return TransactionState.COMMITTED if self._committed_copy(half) is not None else TransactionState.ROLLED_BACK
        return action.state

    def _committed_copy(self, half: dict[str, Any]) -> dict[str, Any] | None:
        """The copy a commit put to the real topic, found by UNIQ_KEY in the index; None when there is none."""
        props = half["properties"]
        uniq_key, topic = props.get(PROPERTY_UNIQ_KEY), props.get(PROPERTY_REAL_TOPIC)
        cfg = self._store.config
        if not uniq_key or not topic or not (cfg.message_index_enable and cfg.message_index_uniq_key_enable):
            return None
        copies = self._store.query_message(topic, uniq_key, 8, half["store_timestamp"], 1 << 62)
        for copy in copies:
            if (
                copy["prepared_transaction_offset"] == half["commitlog_offset"]
                and transaction_type(copy["sys_flag"]) == TRANSACTION_COMMIT_TYPE
            ):
                return copy
        return None

    def recover_committed(self, half: PendingHalf) -> bool:
        """Record as committed a pending half whose copy a commit put before a crash; True when it was one."""
        stored = self._store.look_message_by_offset(half.commitlog_offset)
        if stored is None or self._committed_copy(stored) is None:
            return False
        self.resolve(half.transaction_id, TransactionAction.COMMIT)
        return True

    # Progress ------------------------------------------------------------------------------

    def advance_progress(self) -> None:
        """Move the progress to the first half still pending, and the op queue's with it; record both."""
        with self._state_lock:
            progress = min(self.pending, default=self._registered_end)
            if progress <= self.progress:
                return
            self.progress = progress
            self.resolved = {q: a for q, a in self.resolved.items() if q >= progress}
        op_progress = self.op_progress
        for op_offset, stored in self._walk(OP_TOPIC, op_progress):
            record = op_record(stored)
            if record is not None and max(record[0]) >= progress:
                break  # it names a half at or past the progress (RocketMQ: not yet in doneOpOffset)
            op_progress = op_offset + 1
        self.op_progress = op_progress
        self._store.commit_offsets(CHECK_GROUP, [(HALF_TOPIC, 0, progress), (OP_TOPIC, 0, op_progress)])

    def set_check_transport(self, transport: CheckTransport) -> None:
        """Have the check service send check-backs of groups with a check URL through `transport` (before start)."""
        self.check_transport = transport

    # Listing and status ----------------------------------------------------------------------

    def unresolved(self, producer_group: str | None, older_than_ms: int) -> list[PendingHalf]:
        """Pending halves (of one group, or all) stored at least `older_than_ms` ago, oldest first."""
        cutoff = self._store.now_ms() - older_than_ms
        with self._state_lock:
            halves = sorted(self.pending.values(), key=lambda h: h.queue_offset)
        return [h for h in halves if h.store_timestamp <= cutoff and (producer_group is None or h.producer_group == producer_group)]

    def producer_group(self, name: str) -> ProducerGroup | None:
        return self.producer_groups.get(name)

    def put_producer_group(self, name: str, check_url: str | None) -> bool:
        """Create or update a producer group (blocking: persisted at once); True when created."""
        return self.producer_groups.put(ProducerGroup(name, check_url))

    def status(self) -> TransactionStatus:
        c = self.counters
        with self._state_lock:
            pending = len(self.pending)
        unknown = len(self.unresolved(None, self.timeout_ms))
        return {
            "pending": pending, "unknown": unknown, "committed": c.committed, "rolled_back": c.rolled_back, "checks": c.checks,
            "check_rollbacks": c.check_rollbacks, "deduplicated": c.deduplicated, "progress": self.progress,
            "check_answers": {a.value: n for a, n in self.check_answers.items()},
        }  # fmt: skip
