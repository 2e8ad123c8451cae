"""DelayOffsetTable: how far the schedule service has delivered each delay level.

`config/delayOffset.json` holds `{"offsetTable": {"<level>": <offset>}, "dataVersion": {...}}`
(RocketMQ's ScheduleMessageService layout, DelayOffsetSerializeWrapper; the dataVersion's counter
grows with every write, store.data_version): for level L, the queue offset of
SCHEDULE_TOPIC_XXXX queue L-1 of the first message not yet delivered. RocketMQ's own file has
the levels unquoted (`{1:5}`, fastjson); store.json_file reads that too, and tidemq writes them
quoted, which fastjson reads back. Every entry below it was put back to its real topic (or
skipped as undeliverable, with a log line).

Invariants: an offset only moves forward, except when the queue's minimum moved past
it (cleanup deleted the entries); the file is replaced atomically (store.json_file),
so a crash leaves the previous or the new table, never a torn one.
"""

from __future__ import annotations

import os
import threading

from store.data_version import data_version_counter, versioned_document
from store.errors import MetadataCorrupt
from store.json_file import read_json, write_json_atomically

DELAY_OFFSET_FILE = "delayOffset.json"


class DelayOffsetTable:
    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, DELAY_OFFSET_FILE)
        self._offsets: dict[int, int] = {}
        self._lock = threading.Lock()  # leaf lock: guards the dict against the status reader
        self._dirty = False
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
        with self._lock:
            self._offsets = offsets
            self._dirty = False
            self._counter = data_version_counter(data)

    def get(self, level: int) -> int:
        return self._offsets.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        with self._lock:
            if self._offsets.get(level, 0) != offset:
                self._offsets[level] = offset
                self._dirty = True

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self._offsets)

    def persist(self) -> bool:
        """Write the table when it changed since the last write; True when written."""
        with self._lock:
            if not self._dirty:
                return False
            table = {str(level): offset for level, offset in sorted(self._offsets.items())}
            self._dirty = False
            self._counter += 1
            counter = self._counter
        try:
            write_json_atomically(self.path, versioned_document("offsetTable", table, counter))
        except OSError:
            with self._lock:
                self._dirty = True  # written again at the next period
            raise
        return True
