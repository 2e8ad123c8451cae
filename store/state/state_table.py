"""StateTable: one kind of broker state (consumer offsets, topics, groups, progress marks) kept as
records of the state topic, so the commitlog carries every change to slaves and through crashes.

Every change is a *delta* record in the state topic's queue of the table's kind. The master
applies a delta under the commitlog's put lock right after the record is appended
(`StateLog.write`), so the table changes in log order; a slave, and recovery at load, apply the
same records as they are dispatched (`StateLog` follows the queue). `apply_record` is the one way
records reach a table on every node, so a new master holds exactly what its log says.

A *snapshot* is the whole table written into the log as chunk records (compaction, and the base a
new slave or a lost local file starts from). Its rows are taken under the table's lock together
with `covered` (S): the rows hold every delta below S and none at or past it. Deltas between S
and the snapshot's own position are newer than the rows, so restoring a snapshot means "rows,
then the deltas from S on" (`StateLog` replays them). A table that already holds everything (a
slave following from the start, or one loaded from its local file) ignores snapshots.

The local file (the table's RocketMQ-shaped JSON, e.g. consumerOffset.json) is a snapshot too,
written by the StateSnapshotService with `covered` in it (`stateLogOffset`), so a restart
replays only the records after it.

Invariants: `covered` only grows while the table is live; a delta at a queue offset below it is
already in the table and is skipped. Lock order (docs/concurrency.md): the commitlog's put lock,
then a table's `_lock`; nothing here does I/O under `_lock`.
"""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.state.state_log import StateLog

# The JSON field of a local snapshot file that holds `covered` (ignored by RocketMQ's readers).
STATE_OFFSET_FIELD = "stateLogOffset"


class StateKind(enum.IntEnum):
    """The state topic's queues: one per kind of state."""

    CONSUMER_OFFSETS = 0
    SUBSCRIPTION_GROUPS = 1
    TOPICS = 2
    DELAY_OFFSETS = 3
    TIMER_PROGRESS = 4
    FIFO_ORDER_BOOK = 5
    PRODUCER_GROUPS = 6
    POP_SECRET = 7
    PUSH_SUBSCRIPTIONS = 8
    DLQ_REDRIVES = 9


class RecordTag(enum.Enum):
    """The TAGS of a state record; consume-queue entries carry its hash, so snapshots are found without reading the log."""

    DELTA = "delta"
    SNAPSHOT_FIRST = "snapshot0"  # the first chunk of a snapshot
    SNAPSHOT = "snapshot"  # a later chunk


class StateTable:
    """Base of every state table: the bookkeeping of records; subclasses hold the data."""

    kind: StateKind

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the subclass's data and the fields below; never held across I/O
        self.covered = 0  # state queue offset: every record below it is in the table
        self.based = False  # the table holds a whole base (a local file, a snapshot, or every record from the start)
        self.base_from_log = False  # that base came from the log (StateLog.load), its local file being missing or unusable
        self.snapshot_covers = -1  # S of the latest whole snapshot in the log; -1 when none is known
        self.deltas_since_snapshot = 0
        self.dirty = False  # changed since the local file was written
        self._staging: list[Any] | None = None
        self._staging_covers = -1
        self.state_log: StateLog | None = None  # set by the store: where the table's changes are written

    # What a subclass implements ------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        """Apply one delta, recorded at commitlog `log_offset` (-1: applied before the log could be written);
        the caller holds `_lock`."""
        raise NotImplementedError

    def rows_locked(self) -> list[Any]:
        """The whole table as JSON-able rows (the caller holds `_lock`)."""
        raise NotImplementedError

    def restore_locked(self, rows: list[Any]) -> None:
        """Replace the whole table by `rows` (the caller holds `_lock`)."""
        raise NotImplementedError

    def persist(self) -> None:
        """Write the table's local file (with `covered`) and clear `dirty` (OSError leaves it dirty)."""
        raise NotImplementedError

    def persist_if_dirty(self) -> bool:
        """Write the local file when the table changed since the last write; True when written."""
        if not self.dirty:
            return False
        self.persist()
        return True

    def row_count_locked(self) -> int:
        """How many rows a snapshot would hold (the caller holds `_lock`)."""
        return len(self.rows_locked())

    # Records ---------------------------------------------------------------------------------

    def apply_record(self, tag: RecordTag, payload: dict[str, Any], queue_offset: int, log_offset: int) -> None:
        """Apply the record at `queue_offset` of the table's queue, at commitlog `log_offset` (deltas below `covered` are skipped)."""
        with self._lock:
            if tag is RecordTag.DELTA:
                if queue_offset >= self.covered:
                    self.apply_locked(payload, log_offset)
                    self.deltas_since_snapshot += 1
                    self.covered = queue_offset + 1
                    self.dirty = True
                return
            self._snapshot_chunk_locked(tag, payload)
            self.covered = max(self.covered, queue_offset + 1)

    def _snapshot_chunk_locked(self, tag: RecordTag, payload: dict[str, Any]) -> None:
        """Collect a snapshot's chunks; a whole one is noted (and kept in `_staging` for `take_staged`)."""
        index, count, covers = int(payload["i"]), int(payload["n"]), int(payload["s"])
        if tag is RecordTag.SNAPSHOT_FIRST:
            self._staging, self._staging_covers = [], covers
        if self._staging is None or covers != self._staging_covers:
            return  # a chunk whose first one this table never saw (the log starts inside the snapshot)
        self._staging += payload["rows"]
        if index == count - 1:
            self.snapshot_covers = covers
            self.deltas_since_snapshot = 0
            if self.based:
                self._staging = None  # the table holds everything already

    def take_staged(self) -> tuple[int, list[Any]] | None:
        """A whole snapshot just read while the table has no base: (S, rows), for `StateLog` to restore."""
        with self._lock:
            if self.based or self._staging is None or self.snapshot_covers != self._staging_covers:
                return None
            rows, self._staging = self._staging, None
            return self._staging_covers, rows

    def restore(self, rows: list[Any], covers: int) -> None:
        """Start over from a snapshot's rows; deltas from `covers` on are applied after this."""
        with self._lock:
            self.restore_locked(rows)
            self.covered = covers
            self.based = True
            self.dirty = True

    def snapshot(self) -> tuple[int, list[Any]]:
        """(covered, rows): the table and the first record it lacks, taken together."""
        with self._lock:
            return self.covered, self.rows_locked()

    def size(self) -> int:
        with self._lock:
            return self.row_count_locked()

    def record(self, payload: dict[str, Any]) -> None:
        """Write one change (StateLog.write: blocking, durable, StateWriteFailed when not confirmed); a
        table used without a store (tests, tools) applies it locally."""
        if self.state_log is None:
            self.apply_local(payload)
        else:
            self.state_log.write(self, payload)

    def apply_local(self, payload: dict[str, Any]) -> None:
        """Apply a change that has no record (made before the log can be written, at load): the
        table then needs a snapshot in the log to carry it."""
        with self._lock:
            self.apply_locked(payload)
            self.snapshot_covers = -1
            self.dirty = True

    def skip_to(self, queue_offset: int) -> None:
        """Move `covered` to `queue_offset` (a record that cannot be read, or where a snapshot starts)."""
        with self._lock:
            self.covered = max(self.covered, queue_offset)

    def reset(self) -> None:
        """Forget everything (a local file ahead of the log): the table is rebuilt from the log."""
        with self._lock:
            self.restore_locked([])
            self.covered = 0
            self.based = False
            self.snapshot_covers = -1
            self.dirty = True

    def note_snapshot(self, covers: int, deltas_after: int) -> None:
        """Remember the latest whole snapshot in the log (found at load)."""
        with self._lock:
            self.snapshot_covers = covers
            self.deltas_since_snapshot = deltas_after

    def loaded(self, covered: int) -> None:
        """The local file was read: the table has a base and holds every record below `covered`."""
        with self._lock:
            self.covered = covered
            self.based = True
