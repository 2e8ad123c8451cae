"""CleanConsumeQueueService: drops consume queue and index files the commitlog no longer backs.

A pass runs when the commitlog's minimum offset moved since the last pass (or a file of the
last pass was still held by readers): for every consume queue it deletes leading files
(never the last) whose every entry points below that minimum and moves the queue's
minimum offset to its first entry still backed by the log, so a pull below it answers
OFFSET_TOO_SMALL with the new minimum; then it deletes index files (never the last) whose
entries all point below the minimum. The commitlog cleaner wakes it after deleting files;
it also runs every `clean_resource_interval_ms`.

Invariants: passes never overlap (`_pass_lock`); a queue's minimum offset only grows; files
go only from the front of each queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from core import SYSTEM_CLOCK, Clock
from store.report_types import ConsumeQueueCleanupStatus
from store.retention.periodic_pass_service import PeriodicPassService

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.index.index_service import IndexService
    from store.logfile.commit_log import CommitLog
    from store.queue.consume_queue import ConsumeQueue

log = logging.getLogger("tidemq.store")


class CleanConsumeQueueService(PeriodicPassService):
    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        index_service: IndexService,
        all_consume_queues: Callable[[], list[ConsumeQueue]],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__("CleanConsumeQueueService", config.clean_resource_interval_ms)
        self.config = config
        self.commit_log = commit_log
        self.index_service = index_service
        self.all_consume_queues = all_consume_queues
        self.clock = clock
        self._pass_lock = threading.Lock()
        self.last_physical_min_offset = 0
        self._files_pending = False  # a file of the last pass was still held by readers
        self.consume_queue_files_deleted = 0
        self.index_files_deleted = 0
        self.passes = 0

    def run_once(self) -> int:
        """One pass; returns the number of files deleted (consume queue and index)."""
        with self._pass_lock:
            min_offset = self.commit_log.get_min_offset()
            if min_offset <= self.last_physical_min_offset and not self._files_pending:
                return 0
            cfg = self.config
            now = self.clock.now_ms()
            pending = False
            deleted_cq = 0
            for cq in self.all_consume_queues():
                n = cq.delete_expired_files(min_offset, cfg.destroy_mapped_file_interval_forcibly_ms, now)
                deleted_cq += n
                first = cq.mapped_file_queue.get_first_mapped_file()
                pending = pending or (first is not None and not first.is_available())
                if n and cfg.delete_consume_queue_files_interval_ms > 0:
                    self.pause(cfg.delete_consume_queue_files_interval_ms / 1000.0)
            deleted_index = self.index_service.delete_expired_files(min_offset, cfg.destroy_mapped_file_interval_forcibly_ms, now)
            pending = pending or any(not f.mapped_file.is_available() for f in self.index_service.index_files)
            self._files_pending = pending
            self.last_physical_min_offset = min_offset
            self.consume_queue_files_deleted += deleted_cq
            self.index_files_deleted += deleted_index
            self.passes += 1
            if deleted_cq or deleted_index:
                log.info(
                    "cleanup below commitlog offset %d: %d consume queue and %d index files deleted", min_offset, deleted_cq, deleted_index
                )
            return deleted_cq + deleted_index

    def status(self) -> ConsumeQueueCleanupStatus:
        return {
            "consume_queue_files_deleted": self.consume_queue_files_deleted,
            "index_files_deleted": self.index_files_deleted,
            "consume_queue_passes": self.passes,
            "cleaned_below_offset": self.last_physical_min_offset,
        }
