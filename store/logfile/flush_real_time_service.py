"""FlushRealTimeService: ASYNC_FLUSH's periodic flusher of the commitlog.

Every `flush_interval_commit_log_ms` it flushes when at least
`flush_commit_log_least_pages` dirty pages are pending, and everything at least every
`flush_commit_log_thorough_interval_ms`. At shutdown it flushes all, up to 10 rounds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from core.service_thread import ServiceThread
from store.config import MessageStoreConfig
from store.logfile.commit_log import CommitLog
from store.logfile.thorough_interval import ThoroughInterval

log = logging.getLogger("tidemq.store")

SHUTDOWN_FLUSH_ROUNDS = 10


class FlushRealTimeService(ServiceThread):
    def __init__(self, commit_log: CommitLog, config: MessageStoreConfig, on_flushed: Callable[[int], None]) -> None:
        super().__init__("FlushRealTimeService")
        self.commit_log = commit_log
        self.config = config
        self._on_flushed = on_flushed
        self._thorough = ThoroughInterval()

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped():
            least_pages = self._thorough.least_pages(cfg.flush_commit_log_least_pages, cfg.flush_commit_log_thorough_interval_ms)
            if cfg.flush_commit_log_timed:
                time.sleep(cfg.flush_interval_commit_log_ms / 1000.0)
            else:
                self.wait_for_running(cfg.flush_interval_commit_log_ms)
            try:
                self.commit_log.flush(least_pages)
                ts = self.commit_log.mapped_file_queue.store_timestamp
                if ts:
                    self._on_flushed(ts)
            except Exception:
                log.exception("periodic flush failed")
        self.repeat_until_done(lambda: self.commit_log.flush(0), SHUTDOWN_FLUSH_ROUNDS)
