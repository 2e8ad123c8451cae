"""StateLog: writes the broker's state changes into the commitlog and rebuilds state tables from it.

The state topic `rmq_sys_TIDEMQ_STATE` has one queue per StateKind (store/state/state_table.py). A record
is an ordinary message of that topic (TAGS says delta or snapshot chunk, the body is JSON), so the
HA stream carries it to every slave, recovery finds it like any message, and RocketMQ's own
decoder reads it. This is how consumer offsets, groups, topics and every progress mark survive a
failover: a new master has applied the same records its old master wrote (docs/ha.md, "State").

Writing (master): `write` appends the record (with the messages it belongs to, in one put) and
applies it to its table under the put lock, then waits for the store's durability (flush, and a
SYNC_MASTER's slaves) like any put: a change answered OK is as durable as a message.

Reading: `catch_up` applies the records of a kind's queue past the table's `covered` offset. The
store calls it for every kind at load (after recovery dispatched the log), after each dispatch
pass on a slave (`on_dispatched`), and before a slave becomes master. A table without a base
(its local file missing or ahead of the log) starts from the latest whole snapshot in its queue.

Compaction: `write_snapshot` appends a table's whole content as chunk records; the
StateSnapshotService does it when the deltas since the last snapshot outnumber the rows, and the
cleanup service before it deletes a commitlog file the latest snapshot still needs
(`needs_log_below`), so the retained log always holds a whole base for every table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from store.codec.message import PROPERTY_PUT_PART, PROPERTY_TAGS, SYSTEM_TOPIC_PREFIX, MessageInner, tags_hash
from store.codec.message_codec import decode_message
from store.errors import StoreError
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY, ConsumeQueue
from store.state.state_table import RecordTag, StateKind, StateTable
from store.status import AppendedHook, AppendMessageResult, PutMessageResult, PutMessageStatus

log = logging.getLogger("tidemq.store")

STATE_TOPIC = "rmq_sys_TIDEMQ_STATE"  # in store.codec.message.SYSTEM_TOPICS and INTERNAL_TOPICS
# A snapshot chunk's JSON stays below this (and below half the largest message the store takes).
SNAPSHOT_CHUNK_BYTES = 1024 * 1024
# Snapshot when more deltas than this (or than the table's rows) were written since the last one.
MIN_DELTAS_BETWEEN_SNAPSHOTS = 1_000
# Consume-queue entries read per step while catching up.
CATCH_UP_ENTRIES = 256

_TAG_BY_NAME = {tag.value: tag for tag in RecordTag}
_FIRST_CHUNK_CODE = tags_hash(RecordTag.SNAPSHOT_FIRST.value)


class StateWriteFailed(StoreError):
    """Raised when a state change was refused (nothing recorded) or recorded but not confirmed durable; `result` says which."""

    def __init__(self, result: PutMessageResult) -> None:
        super().__init__(result.detail or f"the state change was not confirmed: {result.status.value}")
        self.result = result


class StateStore(Protocol):
    """What the state log needs of the store."""

    def append_with_hook(
        self, msgs: list[MessageInner], hook: AppendedHook, state_records: int, lazy_dispatch: bool = False
    ) -> PutMessageResult: ...
    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...
    def read_stored(self, offset: int, size: int) -> bytes | None: ...


@dataclass(slots=True)
class StateChange:
    """One delta of one table, written by `write`."""

    table: StateTable
    payload: dict[str, Any]


def mark_put_parts(msgs: list[MessageInner]) -> None:
    """Mark each store-own message (topic rmq_sys_*) but the last of a put with its place in it (PROPERTY_PUT_PART),
    so that recovery cuts the put whole when a crash left its last messages unwritten: a receive's checkpoint
    without the offset commit of the same put would be revived although the messages were taken again. A
    user-visible message (a retry copy) is not marked: its tear is not detected (docs/failure-behaviour.md)."""
    n = len(msgs)
    for i, msg in enumerate(msgs[:-1]):
        if msg.topic.startswith(SYSTEM_TOPIC_PREFIX):
            msg.properties[PROPERTY_PUT_PART] = f"{i}/{n}"
            msg.refresh()


def record_message(kind: StateKind, tag: RecordTag, payload: dict[str, Any]) -> MessageInner:
    return MessageInner(STATE_TOPIC, orjson.dumps(payload), int(kind), {PROPERTY_TAGS: tag.value})


class StateLog:
    def __init__(self, store: StateStore, tables: list[StateTable], max_record_bytes: int, max_batch: int) -> None:
        self.store = store
        self.chunk_bytes = min(SNAPSHOT_CHUNK_BYTES, max_record_bytes // 2)  # a chunk's body, with room for its framing
        self.max_batch = max_batch  # records one put may carry
        self.tables: dict[StateKind, StateTable] = {t.kind: t for t in tables}
        assert len(self.tables) == len(tables), "one table per kind"
        self.writable = False  # set by the store once it runs: before that, changes apply locally only
        self.following = False  # a slave: records arrive by replication and are applied as dispatched
        self.replicated = False  # a master with (possible) slaves: tables are written whole into the log for them
        self.after_apply: Callable[[], None] = lambda: None  # set by the store: runs after records were applied

    # Writing ---------------------------------------------------------------------------------

    def write(
        self, table: StateTable, payload: dict[str, Any], messages: Sequence[MessageInner] = (), internal: bool = False
    ) -> PutMessageResult:
        """Record one change of `table` (after `messages`, in one put); see `write_all`."""
        return self.write_all([StateChange(table, payload)], messages, internal)

    def write_all(self, changes: list[StateChange], messages: Sequence[MessageInner] = (), internal: bool = False) -> PutMessageResult:
        """Append `messages` then one record per change in one put, apply each change to its table
        under the put lock, and wait for the store's durability. StateWriteFailed unless PUT_OK.

        A record is applied here, not when dispatched (a slave applies what it replicates as it
        dispatches), so a put of records alone, or with `messages` the caller calls `internal` (the
        store's own, which no request reads back: POP checkpoints), leaves its dispatch to the next
        pass (PutBatch.lazy_dispatch).

        Before the store runs (load time) a change is applied to its table only; the table then
        asks for a snapshot in the log once it can be written."""
        if not self.writable:
            for change in changes:
                change.table.apply_local(change.payload)
            return PutMessageResult(PutMessageStatus.PUT_OK)
        first = len(messages)
        msgs = [*messages, *(record_message(c.table.kind, RecordTag.DELTA, c.payload) for c in changes)]
        mark_put_parts(msgs)

        def applied_locked(items: Sequence[AppendMessageResult]) -> None:
            for k in range(first, len(items)):
                change, item = changes[k - first], items[k]  # an item is built when asked for: once
                change.table.apply_record(RecordTag.DELTA, change.payload, item.logics_offset, item.wrote_offset)

        result = self.store.append_with_hook(msgs, applied_locked, len(changes), internal or not messages)
        if not result.ok:
            raise StateWriteFailed(result)
        return result

    def write_snapshot(self, table: StateTable) -> bool:
        """Append the table's whole content as snapshot chunks; False when the store refused them."""
        covers, rows = table.snapshot()
        chunks = _chunks(rows, self.chunk_bytes)
        payloads = [{"i": i, "n": len(chunks), "s": covers, "rows": chunk} for i, chunk in enumerate(chunks)]
        for first in range(0, len(payloads), self.max_batch):  # a snapshot is whole once its last chunk is in
            part = payloads[first : first + self.max_batch]
            if not self._append_chunks(table, part):
                return False
        return True

    def _append_chunks(self, table: StateTable, payloads: list[dict[str, Any]]) -> bool:
        tags = [RecordTag.SNAPSHOT_FIRST if p["i"] == 0 else RecordTag.SNAPSHOT for p in payloads]
        msgs = [record_message(table.kind, tag, p) for tag, p in zip(tags, payloads, strict=True)]

        def applied_locked(items: Sequence[AppendMessageResult]) -> None:
            for k, item in enumerate(items):
                table.apply_record(tags[k], payloads[k], item.logics_offset, item.wrote_offset)

        try:
            result = self.store.append_with_hook(msgs, applied_locked, len(msgs))  # dispatched now: needs_log_below reads its entries
        except StoreError as exc:
            log.warning("state snapshot of %s not written: %s", table.kind.name, exc)
            return False
        if not result.stored:
            log.warning("state snapshot of %s not written: %s %s", table.kind.name, result.status.value, result.detail)
        return result.stored

    # Reading ---------------------------------------------------------------------------------

    def on_dispatched(self, topic: str, queue_id: int, _after: int, _codes: tuple[int, ...] | None) -> None:
        """Dispatch listener: a slave applies the state records dispatch just indexed."""
        if topic == STATE_TOPIC and self.following and queue_id in self.tables:
            if self.catch_up(self.tables[StateKind(queue_id)]):
                self.after_apply()

    def catch_up_all(self) -> None:
        for table in self.tables.values():
            self.catch_up(table)

    def catch_up(self, table: StateTable) -> int:
        """Apply every record of the table's queue past `covered`; returns how many were read."""
        cq = self.store.find_consume_queue(STATE_TOPIC, int(table.kind))
        if cq is None:
            return 0
        read = 0
        offset = max(table.covered, cq.get_min_offset_in_queue())
        while offset < cq.get_max_offset_in_queue():
            entries = _entries(cq, offset, CATCH_UP_ENTRIES)
            if not entries:
                break
            for queue_offset, phy, size in entries:
                self._apply_stored(table, queue_offset, phy, size)
                read += 1
                staged = table.take_staged()
                if staged is not None:  # a table without a base starts over from this snapshot
                    covers, rows = staged
                    table.restore(rows, covers)
                    log.info("state %s restored from the snapshot covering queue offset %d", table.kind.name, covers)
                    offset = covers
                    break
                offset = queue_offset + 1
        return read

    def _apply_stored(self, table: StateTable, queue_offset: int, phy: int, size: int) -> None:
        data = self.store.read_stored(phy, size) if size > 0 else None
        if data is None:
            table.skip_to(queue_offset + 1)
            return
        try:
            m = decode_message(data, 0)
            tag = _TAG_BY_NAME[m["properties"].get(PROPERTY_TAGS, "")]
            payload = orjson.loads(m["body"])
            if type(payload) is not dict:
                raise ValueError("not an object")
            table.apply_record(tag, payload, queue_offset, phy)
        except (KeyError, ValueError, TypeError, StoreError, orjson.JSONDecodeError) as exc:
            log.error("state record %s:%d at %d cannot be applied (%s); skipped", table.kind.name, queue_offset, phy, exc)
            table.skip_to(queue_offset + 1)

    # Load ------------------------------------------------------------------------------------

    def load(self) -> None:
        """After recovery: give each table a base and apply what its queue holds past it."""
        for table in self.tables.values():
            cq = self.store.find_consume_queue(STATE_TOPIC, int(table.kind))
            low, high = (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) if cq is not None else (0, 0)
            if table.covered > high:
                log.warning(
                    "state %s: its local file covers queue offset %d, past the log's %d (the log was cut); rebuilt from the log",
                    table.kind.name, table.covered, high,
                )  # fmt: skip
                table.reset()
            latest = self._latest_snapshot(cq) if cq is not None else None
            if latest is not None:
                first, covers = latest
                table.note_snapshot(covers, high - first)
            if not table.based:
                if cq is not None and high > 0 and low == 0:
                    table.based = table.base_from_log = True  # every record since the first is in the queue
                elif latest is not None:
                    table.base_from_log = True
                    table.skip_to(latest[0])  # its chunks are read first, then the deltas from what it covers
                elif cq is None or high == 0:
                    table.based = True  # nothing in the log: a new table, or a store written before state records
                else:
                    log.error("state %s: no snapshot in the log and its records before queue offset %d are gone", table.kind.name, low)
                    table.based = True
            self.catch_up(table)

    def _latest_snapshot(self, cq: ConsumeQueue) -> tuple[int, int] | None:
        """(queue offset of its first chunk, queue offset it covers) of the newest whole snapshot in the queue."""
        low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        offset = high - 1
        while offset >= low:
            entry = cq.read_entry(offset)
            if entry is not None and entry[1] > 0 and entry[2] == _FIRST_CHUNK_CODE:
                data = self.store.read_stored(entry[0], entry[1])
                payload = _payload(data) if data is not None else None
                if payload is not None and offset + int(payload.get("n", 1)) <= high:
                    return offset, int(payload.get("s", offset))
            offset -= 1
        return None

    def needs_log_below(self, end_offset: int) -> list[StateTable]:
        """The tables whose base in the log (the latest snapshot and the deltas from what it covers)
        starts below commitlog `end_offset`: deleting the log below it would leave them without one."""
        out = []
        for table in self.tables.values():
            cq = self.store.find_consume_queue(STATE_TOPIC, int(table.kind))
            if cq is None or cq.get_max_offset_in_queue() <= cq.get_min_offset_in_queue():
                continue
            covers = max(0, table.snapshot_covers)  # with no snapshot, the base is every record from the first
            entry = cq.read_entry(covers) if covers >= cq.get_min_offset_in_queue() else None
            if entry is None or entry[0] < end_offset:
                out.append(table)
        return out

    def snapshot_due(self, table: StateTable) -> bool:
        """Whether the table should be written whole into the log now: on a master with slaves, when none is
        there yet or its deltas outnumber its rows (a standalone store writes one only before retention
        deletes what the table needs: `needs_log_below`)."""
        if not self.replicated:
            return False
        if table.snapshot_covers < 0:
            return table.covered > 0 or table.size() > 0
        return table.deltas_since_snapshot > max(MIN_DELTAS_BETWEEN_SNAPSHOTS, table.size())


def _chunks(rows: list[Any], chunk_bytes: int) -> list[list[Any]]:
    """`rows` cut into chunks whose JSON stays below `chunk_bytes` (at least one chunk, maybe empty): each
    chunk is filled row by row by its encoded size, so one long row never pushes a chunk past the bound."""
    chunks: list[list[Any]] = [[]]
    size = 0
    for row in rows:
        row_bytes = len(orjson.dumps(row)) + 1
        if chunks[-1] and size + row_bytes > chunk_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += row_bytes
    return chunks


def _entries(cq: ConsumeQueue, offset: int, limit: int) -> list[tuple[int, int, int]]:
    """(queue offset, commitlog offset, size) of up to `limit` entries from `offset`."""
    res = cq.get_index_buffer(offset)
    if res is None:
        return []
    try:
        n = min(limit, res.size // CQ_STORE_UNIT_SIZE)
        out = []
        for k in range(n):
            phy, size, _code = ENTRY.unpack_from(res.view, k * CQ_STORE_UNIT_SIZE)
            out.append((offset + k, phy, size))
        return out
    finally:
        res.release()


def _payload(data: bytes) -> dict[str, Any] | None:
    try:
        payload = orjson.loads(decode_message(data, 0)["body"])
    except (ValueError, KeyError, orjson.JSONDecodeError):
        return None
    return payload if type(payload) is dict else None
