"""CommitRealTimeService: copies the transient store pool's write buffers into the files.

Every `commit_interval_commit_log_ms` it commits when `commit_commit_log_least_pages`
pages are pending (everything at least every `commit_commit_log_thorough_interval_ms`), file after
file up to the one being written, and wakes the flusher and the dispatcher (`on_committed`) after a
commit moved data.
Readers only see committed bytes. It runs only with `transient_store_pool_enable`, which the
config allows with ASYNC_FLUSH alone (as RocketMQ does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from core.service_thread import ServiceThread
from store.config import MessageStoreConfig
from store.logfile.commit_log import CommitLog
from store.logfile.thorough_interval import ThoroughInterval

log = logging.getLogger("tidemq.store")

SHUTDOWN_COMMIT_ROUNDS = 10
# Files one wake-up commits at most (each a commit call) before it waits `commit_interval_commit_log_ms` again.
COMMIT_FILES_PER_ROUND = 64


class CommitRealTimeService(ServiceThread):
    def __init__(self, commit_log: CommitLog, config: MessageStoreConfig, flush_service: ServiceThread) -> None:
        super().__init__("CommitRealTimeService")
        self.commit_log = commit_log
        self.config = config
        self.flush_service = flush_service
        self._thorough = ThoroughInterval()
        self.on_committed: Callable[[], None] | None = None  # bytes became readable (the store wakes dispatch)

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped():
            least_pages = self._thorough.least_pages(cfg.commit_commit_log_least_pages, cfg.commit_commit_log_thorough_interval_ms)
            try:
                if self._commit_round(least_pages):
                    self.flush_service.wakeup()
                    if self.on_committed is not None:
                        self.on_committed()
            except Exception:
                log.exception("commit of the write buffer failed")
            self.wait_for_running(cfg.commit_interval_commit_log_ms)
        self.repeat_until_done(lambda: self.commit_log.commit(0), SHUTDOWN_COMMIT_ROUNDS)

    def _commit_round(self, least_pages: int) -> bool:
        """Commit file after file (a commit takes the file holding the committed position: one the writer left is
        committed whole, then the next) until one moves nothing, at most COMMIT_FILES_PER_ROUND; True when any moved.
        One file an interval would fall behind a writer that fills files faster than that, and dispatch, which reads
        only committed bytes, with it."""
        moved = False
        for _ in range(COMMIT_FILES_PER_ROUND):
            if self.commit_log.commit(least_pages):
                break
            moved = True
        return moved
