"""DelayOffsetTable: how far the schedule service has delivered each delay level.

`config/delayOffset.json` holds `{"offsetTable": {"<level>": <offset>}, "dataVersion": {...}}`
(RocketMQ's ScheduleMessageService layout, DelayOffsetSerializeWrapper; the dataVersion's counter
grows with every write, store.state.data_version): for level L, the queue offset of
SCHEDULE_TOPIC_XXXX queue L-1 of the first message not yet delivered. RocketMQ's own file has
the levels unquoted (`{1:5}`, fastjson); store.disk.json_file reads that too, and tidemq writes them
quoted, which fastjson reads back. Every entry below it was put back to its real topic (or
skipped as undeliverable, with a log line).

A master records its progress in the log (state records, store/state/state_log.py) every
`flush_delay_offset_interval_ms` when it moved, so a slave holds it too; after a failover the
entries past the recorded progress are checked against the index before they are delivered, as
after a crash (store/schedule/schedule_message_service.py).

Invariants: an offset only moves forward, except when the queue's minimum moved past
it (cleanup deleted the entries); the file is replaced atomically (store.disk.json_file),
so a crash leaves the previous or the new table, never a torn one.
"""

from __future__ import annotations

import os
from typing import Any

from store.disk.json_file import read_json, write_json_atomically
from store.errors import MetadataCorrupt
from store.state.data_version import data_version_counter, versioned_document
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

DELAY_OFFSET_FILE = "delayOffset.json"


class DelayOffsetTable(StateTable):
    kind = StateKind.DELAY_OFFSETS

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = os.path.join(config_dir, DELAY_OFFSET_FILE)
        self._offsets: dict[int, int] = {}
        self._recorded: dict[int, int] = {}  # what the last record (or the loaded file) said: a new record only for a change
        self._counter = 0  # the file's dataVersion.counter (0: RocketMQ 4's file, which has none)

    def load(self) -> None:
        """Read the table; a missing file means nothing was delivered yet."""
        data = read_json(self.path)
        if data is None:
            return
        table = data.get("offsetTable") if isinstance(data, dict) else None
        if not isinstance(table, dict):
            raise MetadataCorrupt(f"{self.path} has no offsetTable object")
        offsets: dict[int, int] = {}
        for key, value in table.items():
            if not str(key).isdigit() or int(key) < 1 or not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise MetadataCorrupt(f"{self.path}: bad entry {key!r}: {value!r}")
            offsets[int(key)] = value
        covered = data.get(STATE_OFFSET_FIELD, 0)
        with self._lock:
            self._offsets = offsets
            self._recorded = dict(offsets)
            self._counter = data_version_counter(data)
        self.loaded(covered if type(covered) is int else 0)

    def get(self, level: int) -> int:
        return self._offsets.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        """Move a level's progress in memory; `record` writes it to the log."""
        with self._lock:
            if self._offsets.get(level, 0) != offset:
                self._offsets[level] = offset
                self.dirty = True

    def levels(self) -> dict[int, int]:
        with self._lock:
            return dict(self._offsets)

    def record_progress(self) -> bool:
        """Write the levels that moved since the last record into the log (a master's progress, for its
        slaves); True when a record was written. StateWriteFailed when the store refused it."""
        with self._lock:
            changed = {str(level): offset for level, offset in self._offsets.items() if self._recorded.get(level) != offset}
        if not changed or self.state_log is None or not self.state_log.replicated:
            return False  # nothing moved, or no slave to tell
        self.record({"o": changed})
        return True

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        table = payload.get("o")
        if type(table) is dict:
            for key, value in table.items():
                if str(key).isdigit() and type(value) is int:
                    self._offsets[int(key)] = max(value, 0)
                    self._recorded[int(key)] = max(value, 0)

    def rows_locked(self) -> list[Any]:
        return [[level, offset] for level, offset in sorted(self._offsets.items())]

    def restore_locked(self, rows: list[Any]) -> None:
        self._offsets = {int(level): int(offset) for level, offset in rows}
        self._recorded = dict(self._offsets)

    def persist(self) -> None:
        """Write the table when it changed since the last write."""
        with self._lock:
            if not self.dirty:
                return
            table = {str(level): offset for level, offset in sorted(self._offsets.items())}
            covered = self.covered
            self.dirty = False
            self._counter += 1
            counter = self._counter
        document = versioned_document("offsetTable", table, counter)
        document[STATE_OFFSET_FIELD] = covered
        try:
            write_json_atomically(self.path, document)
        except OSError:
            with self._lock:
                self.dirty = True  # written again at the next period
            raise
