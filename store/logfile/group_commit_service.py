"""GroupCommitService: SYNC_FLUSH's flusher; one flush serves every put waiting for it.

Puts add a GroupCommitRequest (the offset just past their message and a future) to
the write list and wake the service. Each time its wait ends the service swaps the
write list with the read list (under `_lock`, held only for the append and the swap), flushes
until the flushed offset passes each request's offset (two tries at most per request, as
RocketMQ does), and completes the futures: PUT_OK when flushed, FLUSH_DISK_TIMEOUT when not.
The page-cache window's trim behind the flush runs after the futures are completed.
The lists are bounded by `max_requests`; past it a put gets FLUSH_DISK_TIMEOUT at
once (its bytes are stored, their durability is not confirmed).

The thread's CPU per flush is the point of a group commit, so its wait is a C-level one: it
blocks in `SimpleQueue.get` on a bell that a put rings only when it finds the write list
empty (the first request of the next group; `wakeup()` rings it too), instead of the base's
`threading.Event` (a Python-level condition, its lock made anew for every wait). A ring that
finds its request already taken by the previous swap makes one empty pass, which flushes
nothing new.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from core.service_thread import ServiceThread
from store.logfile.commit_log import CommitLog
from store.logfile.uncancellable_future import UncancellableFuture
from store.status import PutMessageStatus

log = logging.getLogger("tidemq.store")
# A CommitFuture's states (the names concurrent.futures.Future reports in its repr).
_PENDING = "PENDING"
_FINISHED = "FINISHED"
# Longest wait without a put (then a pass flushes what puts that do not wait left behind), as RocketMQ's 10 ms.
IDLE_WAIT_S = 0.010


class CommitFuture(UncancellableFuture[Any]):
    """The future of one put waiting for a group commit: a `concurrent.futures.Future` to its users
    (done, result with a timeout, exception, add_done_callback), made without a `threading.Condition`.

    A Future's Condition (a Python object holding an RLock, built for every future) cost more than
    the rest of a SYNC_FLUSH put's bookkeeping, on the putting thread, which for an HTTP put is the
    event loop. Here one C lock guards the state and the callbacks, and a thread that blocks in
    `result` or `exception` sleeps on a lock of its own, made only then. Invariants: completed once,
    by the group commit (`set_result`/`set_exception`; a second completion raises InvalidStateError);
    never cancelled (`cancel` answers False: the group commit answers every request, within its
    timeout); callbacks run once each, on the completing thread, or at once when added after it.
    Not for `concurrent.futures.wait`/`as_completed`, which read a Future's condition."""

    def __init__(self) -> None:  # not Future.__init__: that makes the Condition this class avoids
        self._lock = threading.Lock()
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._done_callbacks: list[Callable[[concurrent.futures.Future[Any]], object]] = []
        self._sleepers: list[_thread.LockType] = []  # locks of threads blocked until the completion

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._state.lower()}>"

    def done(self) -> bool:
        return self._state is _FINISHED

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        with self._lock:
            if self._state is not _FINISHED:
                self._done_callbacks.append(fn)
                return
        self._call(fn)

    def result(self, timeout: float | None = None) -> Any:
        self._wait(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._exception

    def set_result(self, result: Any) -> None:
        self._complete(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self._complete(None, exception)

    def _complete(self, result: Any, exception: BaseException | None) -> None:
        with self._lock:
            if self._state is _FINISHED:
                raise concurrent.futures.InvalidStateError(f"{self!r} is completed already")
            self._result, self._exception, self._state = result, exception, _FINISHED
            callbacks, self._done_callbacks = self._done_callbacks, []
            sleepers, self._sleepers = self._sleepers, []
        for sleeper in sleepers:
            sleeper.release()
        for fn in callbacks:
            self._call(fn)

    def _wait(self, timeout: float | None) -> None:
        """Return once completed; TimeoutError when `timeout` seconds pass first."""
        if self._state is _FINISHED:
            return
        with self._lock:
            if self._state is _FINISHED:
                return
            sleeper = _thread.allocate_lock()
            sleeper.acquire()
            self._sleepers.append(sleeper)
        if sleeper.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            return
        with self._lock:
            if self._state is _FINISHED:
                return
            self._sleepers.remove(sleeper)
        raise concurrent.futures.TimeoutError()


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
        self.future: concurrent.futures.Future[Any] = CommitFuture()

    def wakeup_customer(self, flush_ok: bool) -> None:
        try:  # completed here only, once (the request is in one list at a time): no done() check, one lock round
            self.future.set_result(self.on_ok if flush_ok else self.on_timeout)
        except concurrent.futures.InvalidStateError:
            pass


class GroupCommitService(ServiceThread):
    def __init__(self, commit_log: CommitLog, max_requests: int, on_flushed: Callable[[int], None]) -> None:
        super().__init__("GroupCommitService")
        self.commit_log = commit_log
        self.max_requests = max_requests
        self._on_flushed = on_flushed  # receives the store timestamp of the last flushed message
        self._requests_write: list[GroupCommitRequest] = []
        self._requests_read: list[GroupCommitRequest] = []
        self._lock = threading.Lock()
        self._bell: queue.SimpleQueue[bool] = queue.SimpleQueue()  # rung by the first put of a group and by wakeup()
        self.group_commits = 0  # flush rounds that answered requests
        self.requests_served = 0  # requests answered; their ratio is the mean group size

    def put_request(self, request: GroupCommitRequest) -> None:
        with self._lock:
            pending = len(self._requests_write)
            full = pending >= self.max_requests
            if not full:
                self._requests_write.append(request)
        if full:
            request.wakeup_customer(False)  # answered outside the lock: its callbacks take locks of their own
            return
        if pending == 0:
            self._bell.put(True)  # the first of a group: the service may be asleep

    def wakeup(self) -> None:
        self._bell.put(True)

    def _wait(self, interval_s: float) -> None:
        """Sleep until rung or `interval_s` passed, then take the waiting requests (the read list)."""
        try:
            self._bell.get(timeout=interval_s)
        except queue.Empty:
            pass
        with self._lock:
            self._requests_write, self._requests_read = self._requests_read, self._requests_write

    def on_wait_end(self) -> None:
        with self._lock:
            self._requests_write, self._requests_read = self._requests_read, self._requests_write

    def _do_commit(self) -> None:
        requests = self._requests_read
        if requests:
            commit_log = self.commit_log
            flushed = commit_log.flushed_where()
            for request in requests:
                for _ in range(2):
                    if flushed >= request.next_offset:
                        break
                    commit_log.flush(0, trim=False)
                    flushed = commit_log.flushed_where()
                request.wakeup_customer(flushed >= request.next_offset)
            self._on_flushed(commit_log.mapped_file_queue.store_timestamp)
            self.group_commits += 1
            self.requests_served += len(requests)
            self._requests_read = []
            commit_log.trim_page_cache()  # after the acks: a trim (up to 8 MiB advised) is no put's wait
        else:
            # Messages put without waiting (a put that chose not to wait) still reach disk.
            self.commit_log.flush(0)

    def run(self) -> None:
        while not self.is_stopped():
            try:
                self._wait(IDLE_WAIT_S)
                self._do_commit()
            except Exception:  # one failed flush must not end durability for everyone
                log.exception("group commit failed")
        # Final bounded flush: answer everything still waiting.
        self.on_wait_end()
        self._do_commit()
        self.on_wait_end()
        self._do_commit()
        self.commit_log.flush(0)
