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
the number of queues FIFO groups consume. It is persisted as `config/consumerOrderInfo.json`
(RocketMQ 5's file name) by the revive service every `flush_consumer_offset_interval_ms` when it
changed, and at shutdown; a restart loads it, so a batch still invisible stays so. What changed
after the last persist is lost with a crash: the group's offset is the truth, so those unacked
messages are delivered again at once (earlier than their invisible time, never lost).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

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


class FifoOrderBook:
    def __init__(self) -> None:
        self._batches: dict[QueueKey, Batch] = {}
        # Guards _batches; never held across I/O (an ack's commit runs between ack_target and acked).
        self._lock = threading.Lock()
        self._changed = False  # since the last snapshot

    def blocked(self, group: str, topic: str, queue_id: int, now: int) -> bool:
        """Whether the queue still waits for acks of messages taken from it."""
        with self._lock:
            batch = self._batches.get((group, topic, queue_id))
            return batch is not None and not batch.done() and now < batch.invisible_until_ms

    def taken(self, group: str, topic: str, queue_id: int, offsets: list[int], until: int, next_offset: int, pop_time: int) -> list[int]:
        """Record a batch taken from the queue; returns each message's reconsume times (0 on its first delivery)."""
        key = (group, topic, queue_id)
        with self._lock:
            old = self._batches.get(key)
            attempts = {o: (old.attempts.get(o, 0) if old is not None else 0) + 1 for o in offsets}
            self._batches[key] = Batch(list(offsets), pop_time, until, next_offset, attempts=attempts)
            self._changed = True
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

    def acked(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int) -> None:
        """Record the ack of `offset` once its commit (`ack_target`) is done; the batch goes when all
        its messages are acked. A snapshot therefore never holds an ack whose commit may be lost."""
        key = (group, topic, queue_id)
        with self._lock:
            batch = self._batches.get(key)
            if batch is None or batch.pop_time != pop_time or offset not in batch.attempts:
                return
            batch.acked.add(offset)
            self._changed = True
            if batch.done():
                del self._batches[key]

    def extend(self, group: str, topic: str, queue_id: int, pop_time: int, until: int, now: int) -> bool:
        """Change when the queue's batch becomes visible again; False when the handle's batch is gone or expired."""
        with self._lock:
            batch = self._batches.get((group, topic, queue_id))
            if batch is None or batch.pop_time != pop_time or now >= batch.invisible_until_ms:
                return False
            batch.invisible_until_ms = until
            self._changed = True
            return True

    def snapshot_if_changed(self) -> list[dict[str, object]] | None:
        """The book as JSON-able rows when it changed since the last snapshot, else None."""
        with self._lock:
            if not self._changed:
                return None
            self._changed = False
            return [
                {"group": g, "topic": t, "queue_id": q, "offsets": b.offsets, "pop_time": b.pop_time,
                 "invisible_until_ms": b.invisible_until_ms, "next_offset": b.next_offset, "acked": sorted(b.acked),
                 "attempts": [[o, n] for o, n in b.attempts.items()]}
                for (g, t, q), b in self._batches.items()
            ]  # fmt: skip

    def restore(self, rows: list[Any]) -> None:
        """Load persisted rows (a malformed row is skipped: the group's offset still holds)."""
        with self._lock:
            for row in rows:
                try:
                    key, batch = _batch_of(row)
                except (KeyError, TypeError, ValueError):
                    continue
                self._batches[key] = batch

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(b.offsets) - len(b.acked) for b in self._batches.values())


def _batch_of(row: Any) -> tuple[QueueKey, Batch]:
    key = (str(row["group"]), str(row["topic"]), int(row["queue_id"]))
    offsets = [int(o) for o in row["offsets"]]
    batch = Batch(offsets, int(row["pop_time"]), int(row["invisible_until_ms"]), int(row["next_offset"]),
                  {int(o) for o in row["acked"]}, {int(o): int(n) for o, n in row["attempts"]})  # fmt: skip
    return key, batch
