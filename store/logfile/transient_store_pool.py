"""TransientStorePool: a bounded pool of write buffers, one per commitlog file being written.

Writes land in a buffer and CommitRealTimeService copies them to the file, which
keeps the writer off the page-cache lock of the mapping (RocketMQ's read/write
separation). The pool is bounded; when it is empty the file falls back to writing
through its mapping and a line is logged.
"""

from __future__ import annotations

import collections
import logging
import threading

log = logging.getLogger("tidemq.store")


class TransientStorePool:
    def __init__(self, pool_size: int, file_size: int) -> None:
        assert pool_size > 0 and file_size > 0
        self.pool_size = pool_size
        self.file_size = file_size
        self._available: collections.deque[bytearray] = collections.deque()
        self._lock = threading.Lock()

    def init(self) -> None:
        for _ in range(self.pool_size):
            self._available.append(bytearray(self.file_size))

    def destroy(self) -> None:
        with self._lock:
            self._available.clear()

    def borrow_buffer(self) -> bytearray | None:
        with self._lock:
            if not self._available:
                log.warning("transient store pool exhausted; writing through the mapping")
                return None
            return self._available.popleft()

    def return_buffer(self, buffer: bytearray) -> None:
        # Zero only what a file could have used: the whole buffer, once, off the put path.
        buffer[:] = bytes(len(buffer))
        with self._lock:
            if len(self._available) < self.pool_size:
                self._available.append(buffer)

    def available_buffer_count(self) -> int:
        return len(self._available)
