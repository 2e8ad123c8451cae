"""ConsumerOffsetFlushService: compacts the consumer offset log into consumerOffset.json.

Every `flush_consumer_offset_interval_ms` (RocketMQ's flushConsumerOffsetInterval) it
snapshots the offsets when a commit changed them, which bounds the log's length and
the replay at start. Durability does not depend on it: every commit is in the log
before it is answered.
"""

from __future__ import annotations

import logging

from store.consumer_offset_manager import ConsumerOffsetManager
from store.service_thread import ServiceThread

log = logging.getLogger("tidemq.store")


class ConsumerOffsetFlushService(ServiceThread):
    def __init__(self, manager: ConsumerOffsetManager, interval_ms: int) -> None:
        super().__init__("ConsumerOffsetFlushService")
        self.manager = manager
        self.interval_ms = interval_ms

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.interval_ms)
            if self.is_stopped():
                break  # the store compacts once more at shutdown, after the last commit
            try:
                self.manager.persist_if_dirty()
            except OSError:
                log.exception("consumer offsets could not be compacted; the log still holds them")
