"""FlushConsumeQueueService: flushes consume queues, the index and the checkpoint.

Every `flush_interval_consume_queue_ms` it flushes each queue with at least
`flush_consume_queue_least_pages` dirty pages (everything every
`flush_consume_queue_thorough_interval_ms`), then records the logics timestamp and
flushes the checkpoint. At shutdown it flushes everything, up to 3 rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from core.service_thread import ServiceThread
from store.config import MessageStoreConfig
from store.index.index_service import IndexService
from store.logfile.store_checkpoint import StoreCheckpoint
from store.logfile.thorough_interval import ThoroughInterval
from store.queue.consume_queue import ConsumeQueue

log = logging.getLogger("tidemq.store")

SHUTDOWN_FLUSH_ROUNDS = 3


class FlushConsumeQueueService(ServiceThread):
    def __init__(
        self,
        config: MessageStoreConfig,
        queues: Callable[[], Iterable[ConsumeQueue]],
        index_service: IndexService,
        checkpoint: StoreCheckpoint,
        last_dispatched_timestamp: Callable[[], int],
    ) -> None:
        super().__init__("FlushConsumeQueueService")
        self.config = config
        self._queues = queues
        self.index_service = index_service
        self.checkpoint = checkpoint
        self._last_dispatched_timestamp = last_dispatched_timestamp
        self._thorough = ThoroughInterval()

    def do_flush(self, retry_times: int) -> None:
        cfg = self.config
        least_pages = self._thorough.least_pages(cfg.flush_consume_queue_least_pages, cfg.flush_consume_queue_thorough_interval_ms)
        if retry_times == SHUTDOWN_FLUSH_ROUNDS:
            least_pages = 0
        # Read the timestamp before flushing: everything dispatched before it is then on disk.
        logics_ts = self._last_dispatched_timestamp()
        index_ts = self.index_service.last_store_timestamp
        for cq in list(self._queues()):
            cq.flush(least_pages)
        if least_pages == 0:
            self.index_service.flush()
            if index_ts:
                self.checkpoint.index_msg_timestamp = index_ts
            if logics_ts:
                self.checkpoint.logics_msg_timestamp = logics_ts
            self.checkpoint.flush()

    def run(self) -> None:
        while not self.is_stopped():
            try:
                self.wait_for_running(self.config.flush_interval_consume_queue_ms)
                self.do_flush(1)
            except Exception:
                log.exception("consume queue flush failed")
        self.do_flush(SHUTDOWN_FLUSH_ROUNDS)
