"""The FIFO groups' order book: which messages of a queue a FIFO group has taken and not yet acked.

RocketMQ 5's FIFO (orderly) POP consumption locks a queue for its group while messages taken
from it are in flight: the queue yields nothing more to the group until every one of them is
acked, or their invisible time ends and the same messages are taken again (one more attempt).
The group's offset only moves past acked messages, so nothing is lost and order holds.

An ack is three steps, all under the queue's receive lock (PopConsumer), which keeps two acks
of one queue, and a receive, from interleaving: `ack_target` says what offset to commit, the
caller commits it (a file write, with SYNC_FLUSH an fdatasync) without this book's lock, and
`acked` records the ack. So the book never shows an ack whose commit is not done.

The book keeps one batch per (group, topic, queue) and the attempts of its messages, bounded by
the number of queues FIFO groups consume. Every change is a state record (store/state/state_log.py,
`{"set": batch row}` or `{"del": [group, topic, queue id]}`), applied in log order, so a crash or a
failover keeps every batch in flight exactly; `config/consumerOrderInfo.json` (RocketMQ 5's file
name) is the local snapshot, written by the StateSnapshotService.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from store.disk.json_file import read_json, write_json_atomically
from store.errors import MetadataCorrupt
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

log = logging.getLogger("tidemq.store")
ORDER_INFO_FILE = "consumerOrderInfo.json"  # RocketMQ 5's name for the FIFO order book

QueueKey = tuple[str, str, int]  # group, topic, queue id


@dataclass(slots=True)
class Batch:
    """Messages taken together from one queue, identified by their pop time."""

    offsets: list[int]
    pop_time: int
    invisible_until_ms: int
    next_offset: int  # the queue offset after the batch (past messages a tag filter left out)
    acked: set[int] = field(default_factory=set)
    attempts: dict[int, int] = field(default_factory=dict)  # offset -> times taken (1 on the first delivery)

    def done(self) -> bool:
        return len(self.acked) == len(self.offsets)


class FifoOrderBook(StateTable):
    kind = StateKind.FIFO_ORDER_BOOK

    def __init__(self, config_dir: str = "") -> None:
        super().__init__()
        self.path = os.path.join(config_dir, ORDER_INFO_FILE) if config_dir else ""
        # Guarded by `_lock` (StateTable's); never held across I/O (an ack's commit runs between ack_target and acked).
        self._batches: dict[QueueKey, Batch] = {}

    def blocked(self, group: str, topic: str, queue_id: int, now: int) -> bool:
        """Whether the queue still waits for acks of messages taken from it."""
        with self._lock:
            batch = self._batches.get((group, topic, queue_id))
            return batch is not None and not batch.done() and now < batch.invisible_until_ms

    def taken(self, group: str, topic: str, queue_id: int, offsets: list[int], until: int, next_offset: int, pop_time: int) -> list[int]:
        """Record a batch taken from the queue; returns each message's reconsume times (0 on its first delivery).
        StateWriteFailed when it could not be recorded (the caller gives nothing out)."""
        key = (group, topic, queue_id)
        with self._lock:
            old = self._batches.get(key)
            attempts = {o: (old.attempts.get(o, 0) if old is not None else 0) + 1 for o in offsets}
        self.record({"set": _row_of(key, Batch(list(offsets), pop_time, until, next_offset, attempts=attempts))})
        return [attempts[o] - 1 for o in offsets]

    def ack_target(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int, now: int) -> int | None:
        """The offset the group commits in the queue once `offset` is acked (past the acked prefix);
        nothing is recorded: the caller commits it, then calls `acked`.

        None when the handle's batch is no longer the queue's (its invisible time ended and it
        was taken again, or the broker restarted) or the time has passed: the message may be
        delivered again.
        """
        with self._lock:
            batch = self._batches.get((group, topic, queue_id))
            if batch is None or batch.pop_time != pop_time or offset not in batch.attempts or now >= batch.invisible_until_ms:
                return None
            prefix = 0
            while prefix < len(batch.offsets) and (batch.offsets[prefix] in batch.acked or batch.offsets[prefix] == offset):
                prefix += 1
            return batch.next_offset if prefix == len(batch.offsets) else batch.offsets[prefix]

    def was_acked(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int) -> bool:
        """Whether `offset` of the queue's batch taken at `pop_time` is acked already (the batch still held)."""
        with self._lock:
            batch = self._batches.get((group, topic, queue_id))
            return batch is not None and batch.pop_time == pop_time and offset in batch.acked

    def acked(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int) -> None:
        """Record the ack of `offset` once its commit (`ack_target`) is done; the batch goes when all
        its messages are acked. The log therefore never holds an ack whose commit is not before it."""
        key = (group, topic, queue_id)
        with self._lock:
            batch = self._batches.get(key)
            if batch is None or batch.pop_time != pop_time or offset not in batch.attempts:
                return
            after = Batch(
                batch.offsets, batch.pop_time, batch.invisible_until_ms, batch.next_offset, {*batch.acked, offset}, batch.attempts
            )
        self.record({"del": list(key)} if after.done() else {"set": _row_of(key, after)})

    def extend(self, group: str, topic: str, queue_id: int, pop_time: int, until: int, now: int) -> bool:
        """Change when the queue's batch becomes visible again; False when the handle's batch is gone or expired."""
        key = (group, topic, queue_id)
        with self._lock:
            batch = self._batches.get(key)
            if batch is None or batch.pop_time != pop_time or now >= batch.invisible_until_ms:
                return False
            after = Batch(batch.offsets, batch.pop_time, until, batch.next_offset, set(batch.acked), batch.attempts)
        self.record({"set": _row_of(key, after)})
        return True

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(b.offsets) - len(b.acked) for b in self._batches.values())

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        row = payload.get("set")
        if row is not None:
            key, batch = _batch_of(row)
            self._batches[key] = batch
        gone = payload.get("del")
        if type(gone) is list and len(gone) == 3:
            self._batches.pop((str(gone[0]), str(gone[1]), int(gone[2])), None)

    def rows_locked(self) -> list[Any]:
        return [_row_of(key, b) for key, b in self._batches.items()]

    def row_count_locked(self) -> int:
        return len(self._batches)

    def restore_locked(self, rows: list[Any]) -> None:
        self._batches = {}
        for row in rows:
            try:
                key, batch = _batch_of(row)
            except (KeyError, TypeError, ValueError):
                continue  # a malformed row: the group's offset still holds
            self._batches[key] = batch

    def load(self) -> None:
        """Read consumerOrderInfo.json (a malformed file: start empty, the offsets are the truth)."""
        if not self.path:
            return
        try:
            doc = read_json(self.path)
        except MetadataCorrupt as e:
            log.error("%s; FIFO batches in flight are taken again at once", e)
            return
        if isinstance(doc, dict) and isinstance(doc.get("batches"), list):
            with self._lock:
                self.restore_locked(doc["batches"])
            covered = doc.get(STATE_OFFSET_FIELD, 0)
            self.loaded(covered if type(covered) is int else 0)

    def persist(self) -> None:
        with self._lock:
            rows, covered = self.rows_locked(), self.covered
            self.dirty = False
        if self.path:
            try:
                write_json_atomically(self.path, {"batches": rows, STATE_OFFSET_FIELD: covered})
            except OSError:
                self.dirty = True
                raise


def _row_of(key: QueueKey, b: Batch) -> dict[str, Any]:
    g, t, q = key
    return {"group": g, "topic": t, "queue_id": q, "offsets": b.offsets, "pop_time": b.pop_time,
            "invisible_until_ms": b.invisible_until_ms, "next_offset": b.next_offset, "acked": sorted(b.acked),
            "attempts": [[o, n] for o, n in b.attempts.items()]}  # fmt: skip


def _batch_of(row: Any) -> tuple[QueueKey, Batch]:
    key = (str(row["group"]), str(row["topic"]), int(row["queue_id"]))
    offsets = [int(o) for o in row["offsets"]]
    batch = Batch(offsets, int(row["pop_time"]), int(row["invisible_until_ms"]), int(row["next_offset"]),
                  {int(o) for o in row["acked"]}, {int(o): int(n) for o, n in row["attempts"]})  # fmt: skip
    return key, batch
