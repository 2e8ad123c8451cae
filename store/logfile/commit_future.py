"""CommitFuture and FlushWait: the futures a SYNC_FLUSH put waits on, without a `threading.Condition`.

A CommitFuture is completed by the group commit thread (store.logfile.group_commit_service). A
FlushWait is completed by the flushed offset itself (store._kernels.GroupFlush): a thread blocked in
its `result` sleeps in C until the flush passes its offset, so the group commit thread completes
nothing for it and its flushes need no Python; only a FlushWait given a callback joins the group
commit's request list, completed there as a CommitFuture.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from store._kernels import GroupFlush
from store.logfile.uncancellable_future import UncancellableFuture

# A CommitFuture's states (the names concurrent.futures.Future reports in its repr).
_PENDING = "PENDING"
_FINISHED = "FINISHED"


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


class FlushWait(CommitFuture):
    """The answer of a put waiting for the log up to `offset` on disk: `on_ok` once GroupFlush's flushed offset
    passes it, `on_timeout` when a flush failed (or the flusher closed) first. `result(timeout)` waits in C
    (TimeoutError when the timeout passes first, as a Future's); `done` reads the flushed offset; the first
    callback added before it is done hands the wait to the group commit (`register`: its request list), which
    completes it as a CommitFuture. Whichever completes it first wins; the other's completion is dropped.

    `lead_to` > 0 (a wait not asked for yet: puts come one at a time): `result` asks for the log up to it and, when
    it waits alone, makes the flush on its own thread (GroupFlush's leading wait), so no thread is woken to flush
    or to answer it; a leader's flush may end past the timeout given when the disk is that slow."""

    __slots__ = ("_flush", "_offset", "on_ok", "on_timeout", "_register", "_registered", "_lead_to")

    def __init__(
        self, flush: GroupFlush, offset: int, on_ok: Any, on_timeout: Any, register: Callable[[FlushWait], None], lead_to: int = 0
    ) -> None:
        super().__init__()
        self._flush = flush
        self._offset = offset
        self.on_ok = on_ok
        self.on_timeout = on_timeout
        self._register = register
        self._registered = False
        self._lead_to = lead_to

    @property
    def offset(self) -> int:
        return self._offset

    def answer(self, flushed: bool) -> None:
        """Complete with `on_ok` (flushed) or `on_timeout`, unless completed already."""
        try:
            self._complete(self.on_ok if flushed else self.on_timeout, None)
        except concurrent.futures.InvalidStateError:
            pass

    def done(self) -> bool:
        if self._state is _FINISHED:
            return True
        if self._flush.flushed >= self._offset:
            self.answer(True)
            return True
        return False

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        if not self.done():
            with self._lock:
                pending = self._state is not _FINISHED
                if pending:
                    self._done_callbacks.append(fn)
                    register, self._registered = not self._registered, True
            if pending:
                if register:
                    self._register(self)
                return
        self._call(fn)

    def _wait(self, timeout: float | None) -> None:
        if self._state is _FINISHED:
            return
        outcome = self._flush.wait(self._offset, -1.0 if timeout is None else max(0.0, timeout), self._lead_to)
        if outcome == 0:
            if self._state is _FINISHED:  # completed by the group commit meanwhile (a flush Python made)
                return
            raise concurrent.futures.TimeoutError()
        self.answer(outcome == 1)
