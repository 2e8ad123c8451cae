"""Dead-letter redrive: moves a group's dead letters (`%DLQ%{group}`) back to be received again.

A redrive is a row of the DlqRedriveTable (one per group: its latest redrive) that says which stretch
of the dead-letter queue it moves (`start` .. `end`, queue offsets of `%DLQ%{group}` queue 0) and how
far it got (`position`). The DlqRedriveService reads the stretch in order and re-puts each message
into the group's retry topic of the topic it was first produced to (its RETRY_TOPIC property), with
reconsume times reset to 0, so the group's receives of that topic get it again and it has the whole
`max_reconsume_times` before it is dead-lettered again; no other group sees it. A dead letter without
a RETRY_TOPIC (put there by hand) cannot be placed and is skipped (counted).

Exactly once across crashes and failovers: the copies of a batch and the row with the position past
them are one put (StateLog.write with the messages), so the log holds both or neither; after a
restart or on a new master the service goes on from the recorded position. Only a master moves.

Invariants: at most one running redrive per group (`start` refuses a second); `start <= position <=
end`; a row's `state` is "done" exactly when `position == end`.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from core.errors import ConfigInvalid
from core.service_thread import ServiceThread
from store.codec.message import MessageInner
from store.codec.message_codec import decode_message
from store.disk.json_file import read_json, write_bytes_atomically
from store.errors import StoreError
from store.metadata.topic_names import dlq_topic, is_group_system_topic, retry_topic
from store.pop.pop_consumer import PopStore, requeued
from store.pop.pop_records import PROPERTY_RETRY_TOPIC
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable
from store.status import GetMessageStatus

log = logging.getLogger("tidemq.store")

FILE_NAME = "dlqRedrive.json"
# The group the redrive reads dead-letter queues as (its reads count in the store's statistics under it).
REDRIVE_GROUP = "CID_TIDEMQ_SYS_DLQ_REDRIVE"
# Dead letters moved per put (one state record with them); a pass moves at most BATCHES_PER_PASS per redrive.
BATCH_MESSAGES = 32
BATCHES_PER_PASS = 16
REST_WAIT_MS = 1_000  # the wait while no redrive runs (a promoted slave's running rows are picked up within it)


class RedriveState(enum.Enum):
    RUNNING = "running"
    DONE = "done"


@dataclass(slots=True, frozen=True)
class Redrive:
    group: str
    state: RedriveState
    start: int  # queue offset of the dead-letter queue where the redrive began
    end: int  # the offset it stops at (exclusive): the queue's end when it began, or start + max_messages
    position: int  # the first offset not yet moved
    moved: int  # dead letters re-put for receiving
    skipped: int  # offsets passed without a move: no RETRY_TOPIC, or removed by retention before the move
    started_ms: int
    finished_ms: int  # 0 while running

    def to_row(self) -> dict[str, Any]:
        return {
            "group": self.group, "state": self.state.value, "start": self.start, "end": self.end, "position": self.position,
            "moved": self.moved, "skipped": self.skipped, "startedMs": self.started_ms, "finishedMs": self.finished_ms,
        }  # fmt: skip

    @classmethod
    def from_row(cls, row: Any) -> Redrive:
        if type(row) is not dict or type(row.get("group")) is not str or row.get("state") not in ("running", "done"):
            raise ConfigInvalid(f"{FILE_NAME}: a redrive row lacks its group or state")
        names = ("start", "end", "position", "moved", "skipped", "startedMs", "finishedMs")
        numbers: list[int] = []
        for name in names:
            value = row.get(name)
            if type(value) is not int or value < 0:
                raise ConfigInvalid(f"{FILE_NAME}: redrive of {row['group'][:100]!r}: {name} is not a non-negative integer")
            numbers.append(value)
        start, end, position, moved, skipped, started, finished = numbers
        if not start <= position <= end:
            raise ConfigInvalid(f"{FILE_NAME}: redrive of {row['group'][:100]!r} has a position outside start..end")
        return cls(row["group"], RedriveState(row["state"]), start, end, position, moved, skipped, started, finished)

    @property
    def total(self) -> int:
        return self.end - self.start


class DlqRedriveTable(StateTable):
    """The latest redrive of each group; each change a state record, `config/dlqRedrive.json` the local snapshot."""

    kind = StateKind.DLQ_REDRIVES

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = f"{config_dir}/{FILE_NAME}"
        self._redrives: dict[str, Redrive] = {}

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        rows = data.get("redrives") if type(data) is dict else None
        if type(rows) is not list:
            raise ConfigInvalid(f"{self.path}: no redrives array")
        self._redrives = {r.group: r for r in map(Redrive.from_row, rows)}
        covered = data.get(STATE_OFFSET_FIELD, 0)
        self.loaded(covered if type(covered) is int else 0)

    def get(self, group: str) -> Redrive | None:
        with self._lock:
            return self._redrives.get(group)

    def running(self) -> list[Redrive]:
        with self._lock:
            return [r for r in self._redrives.values() if r.state is RedriveState.RUNNING]

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        row = payload.get("put")
        if row is not None:
            redrive = Redrive.from_row(row)
            self._redrives[redrive.group] = redrive

    def rows_locked(self) -> list[Any]:
        return [r.to_row() for r in self._redrives.values()]

    def row_count_locked(self) -> int:
        return len(self._redrives)

    def restore_locked(self, rows: list[Any]) -> None:
        self._redrives = {}
        for row in rows:
            self.apply_locked({"put": row})

    def persist(self) -> None:
        with self._lock:
            document = {"redrives": self.rows_locked(), STATE_OFFSET_FIELD: self.covered}
            self.dirty = False
        try:
            write_bytes_atomically(self.path, orjson.dumps(document))
        except OSError:
            self.dirty = True
            raise


class DlqRedriveService(ServiceThread):
    """Moves the running redrives forward, a few batches per redrive and pass; only on a master."""

    def __init__(self, store: PopStore, table: DlqRedriveTable, interval_ms: int, clock: Callable[[], int]) -> None:
        super().__init__("DlqRedriveService")
        self.store = store
        self.table = table
        self.interval_ms = interval_ms
        self.clock = clock
        self.is_slave = False  # set by the store: a slave replicates its master's moves and makes none
        self._start_lock = threading.Lock()  # serializes starts, so two cannot both find none running (held across the record's put)

    def run(self) -> None:
        while not self.is_stopped():
            # While no redrive runs it rests (`start_redrive` wakes it): a wake-up costs the event loop's requests under load.
            self.wait_for_running(self.interval_ms if self.table.running() else REST_WAIT_MS)
            try:
                self.redrive_pass()
            except Exception:  # retried next pass from the recorded position: nothing is lost or doubled
                log.exception("dead-letter redrive pass failed")

    def start_redrive(self, group: str, max_messages: int | None) -> tuple[Redrive, bool]:
        """Begin a redrive of the group's dead letters (at most `max_messages`); (its row, True), or
        (the running one, False) when one runs already. Blocking: the row is recorded durably."""
        assert max_messages is None or max_messages > 0
        with self._start_lock:
            current = self.table.get(group)
            if current is not None and current.state is RedriveState.RUNNING:
                return current, False
            dlq = dlq_topic(group)
            low = max(0, self.store.get_min_offset_in_queue(dlq, 0))
            high = max(low, self.store.get_max_offset_in_queue(dlq, 0))
            start = current.position if current is not None and low <= current.position <= high else low
            end = high if max_messages is None else min(high, start + max_messages)
            now = self.clock()
            state = RedriveState.RUNNING if end > start else RedriveState.DONE
            redrive = Redrive(group, state, start, end, start, 0, 0, now, 0 if end > start else now)
            self.table.record({"put": redrive.to_row()})
        self.wakeup()
        return redrive, True

    def redrive_pass(self) -> int:
        """Move every running redrive forward; returns the dead letters moved (none on a slave)."""
        if self.is_slave:
            return 0
        moved = 0
        for redrive in self.table.running():
            for _ in range(BATCHES_PER_PASS):
                step = self._move_batch(redrive)
                if step is None:
                    break
                moved += step.moved - redrive.moved
                redrive = step
                if redrive.state is RedriveState.DONE:
                    break
        return moved

    def _move_batch(self, redrive: Redrive) -> Redrive | None:
        """Move the next batch and record the position past it with the copies; the new row, or None
        when nothing could be moved now (retried next pass)."""
        dlq = dlq_topic(redrive.group)
        want = min(BATCH_MESSAGES, redrive.end - redrive.position)
        result: Any = self.store.get_message(REDRIVE_GROUP, dlq, 0, redrive.position, want)
        msgs: list[MessageInner] = []
        if result.status is GetMessageStatus.FOUND:
            for offset, (pos, size) in zip(result.queue_offsets, result.positions(), strict=True):
                if offset >= redrive.end:
                    break
                msg = _moved_copy(bytes(memoryview(result.data)[pos : pos + size]), redrive.group)
                if msg is not None:
                    msgs.append(msg)
            position = min(redrive.end, result.next_begin_offset)
        elif result.next_begin_offset > redrive.position:
            position = min(redrive.end, result.next_begin_offset)  # removed by retention: nothing there to move
        else:
            return None
        skipped = (position - redrive.position) - len(msgs)
        done = position >= redrive.end
        state = RedriveState.DONE if done else RedriveState.RUNNING
        row = replace(redrive, state=state, position=position, moved=redrive.moved + len(msgs), skipped=redrive.skipped + skipped,
                      finished_ms=self.clock() if done else 0)  # fmt: skip
        for topic in {m.topic for m in msgs}:
            self.store.ensure_topic(topic, 1)
        state_log = self.table.state_log
        try:
            if state_log is None:
                self.table.apply_local({"put": row.to_row()})
            else:
                state_log.write(self.table, {"put": row.to_row()}, msgs)
        except StoreError as exc:
            log.warning("dead-letter redrive of %s not recorded (retried): %s", redrive.group, exc)
            return None
        return row


def _moved_copy(data: bytes, group: str) -> MessageInner | None:
    """A dead letter as its copy for the group's retry topic of its first topic, reconsume times 0; None without one."""
    original = decode_message(data, 0)["properties"].get(PROPERTY_RETRY_TOPIC)
    if not original or is_group_system_topic(original):
        return None
    return requeued(data, retry_topic(group, original), 0)
