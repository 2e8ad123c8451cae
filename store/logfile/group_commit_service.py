"""GroupCommitService: SYNC_FLUSH's flusher; one flush serves every put waiting for it.

Puts add a GroupCommitRequest (the offset just past their message and a future) to
the write list and wake the service. Each time its wait ends the service swaps the
write list with the read list (under `_lock`, held only for the swap), flushes until
the flushed offset passes each request's offset (two tries at most, as RocketMQ
does), and completes the futures: PUT_OK when flushed, FLUSH_DISK_TIMEOUT when not.
The lists are bounded by `max_requests`; past it a put gets FLUSH_DISK_TIMEOUT at
once (its bytes are stored, their durability is not confirmed).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from core.service_thread import ServiceThread
from store.logfile.commit_log import CommitLog
from store.status import PutMessageStatus

log = logging.getLogger("tidemq.store")


class GroupCommitRequest:
    """A put waiting for its group commit: `future` gets `on_ok` once its bytes are flushed, or
    `on_timeout` when the flush did not reach them in time. The put's own answer is completed here
    directly, so a SYNC_FLUSH put costs one future, not a chain of two."""

    __slots__ = ("next_offset", "future", "on_ok", "on_timeout")

    def __init__(
        self, next_offset: int, on_ok: Any = PutMessageStatus.PUT_OK, on_timeout: Any = PutMessageStatus.FLUSH_DISK_TIMEOUT
    ) -> None:
        self.next_offset = next_offset
        self.on_ok = on_ok
        self.on_timeout = on_timeout
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def wakeup_customer(self, flush_ok: bool) -> None:
        if not self.future.done():
            self.future.set_result(self.on_ok if flush_ok else self.on_timeout)


class GroupCommitService(ServiceThread):
    def __init__(self, commit_log: CommitLog, max_requests: int, on_flushed: Callable[[int], None]) -> None:
        super().__init__("GroupCommitService")
        self.commit_log = commit_log
        self.max_requests = max_requests
        self._on_flushed = on_flushed  # receives the store timestamp of the last flushed message
        self._requests_write: list[GroupCommitRequest] = []
        self._requests_read: list[GroupCommitRequest] = []
        self._lock = threading.Lock()
        self.group_commits = 0  # flush rounds that answered requests
        self.requests_served = 0  # requests answered; their ratio is the mean group size

    def put_request(self, request: GroupCommitRequest) -> None:
        with self._lock:
            if len(self._requests_write) >= self.max_requests:
                request.wakeup_customer(False)
                return
            self._requests_write.append(request)
        self.wakeup()

    def on_wait_end(self) -> None:
        with self._lock:
            self._requests_write, self._requests_read = self._requests_read, self._requests_write

    def _do_commit(self) -> None:
        requests = self._requests_read
        if requests:
            for request in requests:
                flush_ok = self.commit_log.flushed_where() >= request.next_offset
                for _ in range(2):
                    if flush_ok:
                        break
                    self.commit_log.flush(0)
                    flush_ok = self.commit_log.flushed_where() >= request.next_offset
                request.wakeup_customer(flush_ok)
            self._on_flushed(self.commit_log.mapped_file_queue.store_timestamp)
            self.group_commits += 1
            self.requests_served += len(requests)
            self._requests_read = []
        else:
            # Messages put without waiting (a put that chose not to wait) still reach disk.
            self.commit_log.flush(0)

    def run(self) -> None:
        while not self.is_stopped():
            try:
                self.wait_for_running(10)
                self._do_commit()
            except Exception:  # one failed flush must not end durability for everyone
                log.exception("group commit failed")
        # Final bounded flush: answer everything still waiting.
        self.on_wait_end()
        self._do_commit()
        self.on_wait_end()
        self._do_commit()
        self.commit_log.flush(0)
