"""StateSnapshotService: writes the state tables' local files, and on a master their snapshots in the log.

Every `flush_consumer_offset_interval_ms` (RocketMQ's flushConsumerOffsetInterval) it writes the
local file of each table that changed (consumerOffset.json, topics.json, ...; a restart then reads
it and applies only the records after it), and on a master it writes a table whole into the log
(StateLog.write_snapshot) when the log holds none of it yet or the deltas since the last one
outnumber its rows (compaction: the retained log then always holds a base no longer than the
table itself). Durability does not depend on it: every change is a record in the log before it
is answered. The store writes every file once more at shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from core.service_thread import ServiceThread
from store.state.state_log import StateLog

log = logging.getLogger("tidemq.store")


class StateSnapshotService(ServiceThread):
    def __init__(self, state_log: StateLog, interval_ms: int, is_master: Callable[[], bool], is_running: Callable[[], bool]) -> None:
        super().__init__("StateSnapshotService")
        self.state_log = state_log
        self.interval_ms = interval_ms
        self.is_master = is_master
        self.is_running = is_running  # the store takes puts: snapshots in the log wait for it
        self.snapshots_written = 0

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.interval_ms)
            if self.is_stopped():
                break  # the store writes the files once more at shutdown
            self.snapshot_pass()

    def snapshot_pass(self) -> None:
        self.persist_all()
        if not self.is_master() or not self.is_running():
            return
        for table in self.state_log.tables.values():
            if self.state_log.snapshot_due(table) and self.state_log.write_snapshot(table):
                self.snapshots_written += 1

    def persist_all(self) -> None:
        for table in self.state_log.tables.values():
            try:
                table.persist_if_dirty()
            except OSError:
                log.exception("the local file of state %s could not be written; the log still holds it", table.kind.name)
