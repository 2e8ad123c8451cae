"""GroupCommitService: SYNC_FLUSH's flusher; one flush serves every put waiting for it.

The flushes run in C (store._kernels.GroupFlush, docs/native.md "The group flush"): a put asks for
the log up to its end offset (`wait_for`, one C call) and gets a FlushWait; the service's thread lends
GroupFlush the file holding the flushed offset (`MappedFileQueue.flush_window`) and, without the GIL,
it sleeps until asked, msyncs up to the highest offset asked and wakes the threads blocked on their
FlushWait, flush after flush. So a flush costs the thread no Python: RocketMQ's GroupCommitService
swaps two request lists and completes a future per request after each flush; here only the waits
that need Python do that.

The thread comes back to Python (`ServeEnd`) when the log moved on to the next file (it flushes the
rest through the queue, two tries, as RocketMQ's flush of a request), after MAX_FLUSHES_A_SERVE
flushes or IDLE_WAIT_S without a request (the queue's positions, the checkpoint's time, resident pages
and the page-cache window catch up; an idle pass flushes what puts that do not wait left behind), when
a flush failed (logged; the waits under way answer FLUSH_DISK_TIMEOUT), and when called: a wait given
a callback (the event loop's relay, a slave wait chained after the flush) joins the request list
(GroupCommitRequest, under `_lock`, held only for the append and the swap) and is completed by the
thread after the next flush: PUT_OK when flushed, FLUSH_DISK_TIMEOUT when not. The list is bounded by
`max_requests`; past it a wait with a callback is answered FLUSH_DISK_TIMEOUT at once (its bytes are
stored, their durability is not confirmed). A wait without a callback holds no place anywhere; with
`max_requests` 0 every wait is answered so at once (RocketMQ's bound of 0: nothing is confirmed).
"""

from __future__ import annotations

import concurrent.futures
import enum
import logging
import threading
from collections.abc import Callable
from typing import Any

from core.service_thread import ServiceThread
from store import _kernels
from store.logfile.commit_future import CommitFuture, FlushWait
from store.logfile.commit_log import CommitLog
from store.status import PutMessageStatus

log = logging.getLogger("tidemq.store")
# Longest wait without a put (then a pass flushes what puts that do not wait left behind), as RocketMQ's 10 ms.
IDLE_WAIT_S = 0.010
# Flushes GroupFlush makes before the thread catches up the queue's positions and the checkpoint's time.
MAX_FLUSHES_A_SERVE = 64


class ServeEnd(enum.IntEnum):
    """Why GroupFlush.serve came back."""

    IDLE = _kernels.SERVE_IDLE  # nothing asked for IDLE_WAIT_S
    WINDOW = _kernels.SERVE_WINDOW  # the offset asked lies past the lent file (or no file was lent)
    BUDGET = _kernels.SERVE_BUDGET  # MAX_FLUSHES_A_SERVE flushes made
    CALLED = _kernels.SERVE_CALLED  # a request waits in the list, or the service stops
    FAILED = _kernels.SERVE_FAILED  # an msync failed (GroupFlush.last_errno)
    CLOSED = _kernels.SERVE_CLOSED  # GroupFlush closed


class GroupCommitRequest:
    """A wait with a callback in the group commit's list: `future` gets `on_ok` once the log is flushed up to
    `next_offset`, or `on_timeout` when the flush did not reach it in time (a FlushWait registers itself as
    the future; a request made alone gets a CommitFuture)."""

    __slots__ = ("next_offset", "future", "on_ok", "on_timeout")

    def __init__(
        self,
        next_offset: int,
        on_ok: Any = PutMessageStatus.PUT_OK,
        on_timeout: Any = PutMessageStatus.FLUSH_DISK_TIMEOUT,
        future: CommitFuture | None = None,
    ) -> None:
        self.next_offset = next_offset
        self.on_ok = on_ok
        self.on_timeout = on_timeout
        self.future: concurrent.futures.Future[Any] = future if future is not None else CommitFuture()

    def wakeup_customer(self, flush_ok: bool) -> None:
        try:  # completed here at most once (the request is in one list at a time); a FlushWait may be done already
            self.future.set_result(self.on_ok if flush_ok else self.on_timeout)
        except concurrent.futures.InvalidStateError:
            pass


class GroupCommitService(ServiceThread):
    def __init__(self, commit_log: CommitLog, max_requests: int, on_flushed: Callable[[int], None]) -> None:
        super().__init__("GroupCommitService")
        self.commit_log = commit_log
        self.max_requests = max_requests
        self._on_flushed = on_flushed  # receives the store timestamp of the last flushed message
        self.group_flush = _kernels.GroupFlush()
        self._requests_write: list[GroupCommitRequest] = []
        self._requests_read: list[GroupCommitRequest] = []
        self._lock = threading.Lock()
        self._rounds = 0  # flush rounds Python made for requests in the list
        self.serve_ends = dict.fromkeys(ServeEnd, 0)  # why the native flushes came back (tests, benches)

    @property
    def group_commits(self) -> int:
        """Flushes that answered waits: GroupFlush's own plus the rounds made for the list."""
        return self.group_flush.flushes + self._rounds

    @property
    def requests_served(self) -> int:
        """Waits asked for; their ratio to group_commits is the mean group size."""
        return self.group_flush.asks

    def wait_for(
        self,
        offset: int,
        on_ok: Any = PutMessageStatus.PUT_OK,
        on_timeout: Any = PutMessageStatus.FLUSH_DISK_TIMEOUT,
        lead: bool = False,
    ) -> FlushWait:
        """The wait of a put for the log up to `offset` on disk: `on_ok` then, `on_timeout` when not confirmed
        (at once when `max_requests` is 0: no wait is ever confirmed). `lead`: for a caller that blocks in `result`,
        which then asks and flushes itself when it can (FlushWait); else the flush is asked now, this thread's
        caller going on meanwhile (the event loop: it must not wait on a disk longer than its own bound)."""
        # Asked up to all the log holds now, as RocketMQ's flush goes to the write position: puts written since
        # (the loop's next turn) are flushed with this group and their own wait finds them done.
        upto = max(offset, self.commit_log.get_max_offset())
        flush = self.group_flush
        # Puts that come one at a time lead; when flushes answer several waits, the group commit thread's flush
        # asked now (overlapping the caller's dispatch, flushing again as soon as one ends) serves them better.
        lead_to = upto if lead and self.max_requests and flush.lone else 0
        wait = FlushWait(flush, offset, on_ok, on_timeout, self._register, lead_to)
        if not self.max_requests:
            wait.answer(False)
        elif not lead_to:
            flush.ask(upto)
        return wait

    def _register(self, wait: FlushWait) -> None:
        self.put_request(GroupCommitRequest(wait.offset, wait.on_ok, wait.on_timeout, wait))

    def put_request(self, request: GroupCommitRequest) -> None:
        """A wait with a callback: completed by the thread after the flush that reaches it (or refused when full)."""
        with self._lock:
            full = len(self._requests_write) >= self.max_requests
            if not full:
                self._requests_write.append(request)
        if full:
            request.wakeup_customer(False)  # answered outside the lock: its callbacks take locks of their own
            return
        self.group_flush.ask(request.next_offset, True)

    def wakeup(self) -> None:
        self.group_flush.call()

    def on_wait_end(self) -> None:
        with self._lock:
            self._requests_write, self._requests_read = self._requests_read, self._requests_write

    def _serve(self) -> ServeEnd:
        """Let GroupFlush flush the file holding the flushed offset until it comes back; the positions follow."""
        commit_log = self.commit_log
        window = commit_log.flush_window()
        dropped_to = window.dropped_to if window is not None else 0
        try:
            if window is None:
                code, _ = self.group_flush.serve(None, 0, 0, False, MAX_FLUSHES_A_SERVE, IDLE_WAIT_S)
            else:
                code, dropped_to = self.group_flush.serve(
                    window.mapping, window.file_from, dropped_to, window.unmap_first, MAX_FLUSHES_A_SERVE, IDLE_WAIT_S
                )
        finally:
            if window is not None:
                commit_log.window_flushed(window, self.group_flush.flushed, dropped_to)
        end = ServeEnd(code)
        self.serve_ends[end] += 1
        return end

    def _after_serve(self, end: ServeEnd) -> None:
        """What Python does when GroupFlush came back for `end`."""
        commit_log, group_flush = self.commit_log, self.group_flush
        if end is ServeEnd.FAILED:
            failures = group_flush.failures
            if failures & (failures - 1) == 0:  # the 1st, 2nd, 4th, 8th...: a failing disk does not flood the log
                log.error("group commit flush failed (errno %d), %d time(s) so far", group_flush.last_errno, failures)
            self._wait_point.wait(IDLE_WAIT_S)  # a pause before the next try (never set: wakeup() calls GroupFlush)
        elif end is ServeEnd.WINDOW:
            target = group_flush.requested
            for _ in range(2):  # the rest of the lent file, then the next one (as RocketMQ's two tries)
                if commit_log.flushed_where() >= target:
                    break
                commit_log.flush(0, trim=False)
            group_flush.advance(commit_log.flushed_where())
        elif end is ServeEnd.IDLE:
            self._idle_pass()
        self.on_wait_end()
        self._do_commit()
        self._on_flushed(commit_log.mapped_file_queue.store_timestamp)
        commit_log.trim_page_cache()  # after the acks: a trim (up to 8 MiB advised) is no put's wait

    def _idle_pass(self) -> None:
        """Messages put without waiting (a put that chose not to wait) still reach disk."""
        self.commit_log.flush(0)
        self.group_flush.advance(self.commit_log.flushed_where())

    def _do_commit(self) -> None:
        """Complete the requests of the read list, flushing through the queue what GroupFlush has not."""
        requests = self._requests_read
        if not requests:
            return
        commit_log = self.commit_log
        flushed = commit_log.flushed_where()
        answered_not_flushed = False
        for request in requests:
            for _ in range(2):
                if flushed >= request.next_offset:
                    break
                commit_log.flush(0, trim=False)
                flushed = commit_log.flushed_where()
            answered_not_flushed |= flushed < request.next_offset
            request.wakeup_customer(flushed >= request.next_offset)
        self.group_flush.advance(flushed)
        if answered_not_flushed:
            self.group_flush.fail()  # the FlushWaits blocked meanwhile answer as their requests did
        self._rounds += 1
        self._requests_read = []

    def run(self) -> None:
        self.group_flush.reset(self.commit_log.flushed_where())
        while not self.is_stopped():
            try:
                self._after_serve(self._serve())
            except Exception:  # one failed flush must not end durability for everyone
                log.exception("group commit failed")
                self._wait_point.wait(IDLE_WAIT_S)  # a pause: a failure that repeats does not spin
        # Final bounded flush: answer everything still waiting, then every wait still blocked.
        for _ in range(2):
            self.on_wait_end()
            self._do_commit()
        self._idle_pass()
        self.group_flush.close()
