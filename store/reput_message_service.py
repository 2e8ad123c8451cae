"""ReputMessageService: reads what was appended to the commitlog and dispatches it.

From `reput_from_offset` it walks every message below the commitlog's readable end
(the confirmed offset on a slave with duplication enabled), runs each dispatcher
(consume queue, index; the list is extensible) and then the arriving listeners. A
put wakes it at once through `wakeup()`; otherwise it waits at most 1 ms.

Invariants: `reput_from_offset` only grows (or is reset by recovery before start);
a message is dispatched only after its bytes passed the size and magic checks; a
range in the commitlog's damaged-range table is skipped, never dispatched.
`reput_from_offset` passes a message only after every dispatcher returned for it: a
dispatcher that raises (no descriptor left, a full disk) stops dispatch at that message,
which is retried with a growing pause (up to DISPATCH_RETRY_MAX_MS) until it succeeds.
An episode of failures is logged when it starts and when it ends, not per attempt;
`failure` names the error while it lasts (the store reports it as degraded, and puts are
refused meanwhile). Dispatchers must tolerate a repeated message (they skip what they hold).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from store.commit_log import CommitLog
from store.config import MessageStoreConfig
from store.mapped_file import is_no_space
from store.message_codec import DISPATCH_BLANK, DecodeOutcome, DispatchRequest, check_message, decode_for_dispatch
from store.service_thread import ServiceThread

log = logging.getLogger("tidemq.store")

Dispatcher = Callable[[DispatchRequest], None]
ArrivingListener = Callable[[str, int, int, int, int, dict[str, str]], None]
SHUTDOWN_DRAIN_ROUNDS = 50
DISPATCH_RETRY_MIN_MS = 10  # first pause after a failed dispatch
DISPATCH_RETRY_MAX_MS = 1_000  # the pause doubles up to this while dispatch keeps failing


class ReputMessageService(ServiceThread):
    def __init__(self, commit_log: CommitLog, config: MessageStoreConfig) -> None:
        super().__init__("ReputMessageService")
        self.commit_log = commit_log
        self.config = config
        self.reput_from_offset = 0
        self.dispatchers: list[Dispatcher] = []
        self.arriving_listeners: list[ArrivingListener] = []
        self.dispatched_messages = 0
        self.failure = ""  # the error of the current failure episode, "" while dispatch works
        self.failures_total = 0  # failed attempts since start
        self._retry_ms = 0
        self.on_no_space: Callable[[str], None] | None = None  # told when a dispatcher met a full disk
        self.trim: Callable[[], object] | None = None  # called once per pass (the store's mapping budget)

    def behind(self) -> int:
        return max(0, self._end_offset() - self.reput_from_offset)

    def _end_offset(self) -> int:
        if self.config.duplication_enable and self.commit_log.confirm_offset >= 0:
            return min(self.commit_log.confirm_offset, self.commit_log.get_max_offset())
        return self.commit_log.get_max_offset()

    def do_reput(self) -> int:
        """Dispatch everything readable now; returns the number of messages dispatched."""
        count = 0
        cl = self.commit_log
        listeners = self.arriving_listeners
        dispatchers = self.dispatchers
        levels = cl.delay_levels_ms
        min_offset = cl.get_min_offset()
        if 0 <= self.reput_from_offset < min_offset:
            log.warning("reput offset %d is below the commitlog minimum %d; skipping ahead", self.reput_from_offset, min_offset)
            self.reput_from_offset = min_offset
        try:
            count = self._dispatch_available(cl, dispatchers, listeners, levels)
        except Exception as exc:  # any dispatcher error is retried, never skipped
            self._failed(exc)
            return 0
        if self.failure:
            log.warning(
                "dispatch works again at offset %d after %d failed attempts (%s)", self.reput_from_offset, self.failures_total, self.failure
            )
            self.failure = ""
            self._retry_ms = 0
        self.dispatched_messages += count
        return count

    def _dispatch_available(
        self, cl: CommitLog, dispatchers: list[Dispatcher], listeners: list[ArrivingListener], levels: list[int]
    ) -> int:
        count = 0
        while self.reput_from_offset < self._end_offset():
            skip_to = cl.damaged_range_end(self.reput_from_offset)
            if skip_to is not None:
                log.warning("dispatch skips the damaged commitlog range [%d, %d)", self.reput_from_offset, skip_to)
                self.reput_from_offset = skip_to
                continue
            res = cl.get_data(self.reput_from_offset)
            if res is None:
                break
            try:
                view = res.view
                limit = min(res.size, self._end_offset() - res.start_offset)
                damaged = cl.next_damaged_start(res.start_offset)
                if damaged is not None:
                    limit = min(limit, damaged - res.start_offset)  # stop there; the check above skips the range
                pos = 0
                while pos < limit:
                    size, req = decode_for_dispatch(view, pos, limit, levels)
                    if req is not None:
                        for dispatcher in dispatchers:
                            dispatcher(req)
                        for listener in listeners:
                            listener(
                                req.topic, req.queue_id, req.consume_queue_offset + 1, req.tags_code, req.store_timestamp, req.properties
                            )
                        pos += size
                        count += 1
                    elif size == DISPATCH_BLANK:
                        pos = res.size
                        self.reput_from_offset = cl.roll_next_file(res.start_offset)
                        break
                    else:
                        # Nothing whole here yet: the writer has not finished this message, or the log ends.
                        self._report_if_corrupt(view, pos, limit, res.start_offset)
                        limit = pos
                        break
                    self.reput_from_offset = res.start_offset + pos
            finally:
                res.release()
            if pos == 0:
                break
        return count

    def _failed(self, exc: Exception) -> None:
        """Record a failed attempt; the first of an episode is logged with its traceback."""
        self.failures_total += 1
        self._retry_ms = min(DISPATCH_RETRY_MAX_MS, max(DISPATCH_RETRY_MIN_MS, self._retry_ms * 2))
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if isinstance(cause, OSError) and is_no_space(cause) and self.on_no_space is not None:
            self.on_no_space(str(cause.filename or "a store file"))
        if not self.failure:
            self.failure = f"{type(exc).__name__}: {exc}" if not isinstance(exc, OSError) else (exc.strerror or str(exc))
            log.error("dispatch failed at offset %d; retrying until it succeeds", self.reput_from_offset, exc_info=exc)

    def _report_if_corrupt(self, view: memoryview, pos: int, limit: int, start_offset: int) -> None:
        """Log the reason when the bytes where dispatch stopped are not simply unwritten."""
        r = check_message(view, pos, limit, False, False)
        if r.outcome is DecodeOutcome.CORRUPT:
            log.error("reput stopped at %d: %s", start_offset + pos, r.reason)

    def run(self) -> None:
        while not self.is_stopped():
            try:
                self.wait_for_running(self._retry_ms if self.failure else 1)
                self.do_reput()
                if self.trim is not None:
                    self.trim()
            except Exception:
                log.exception("dispatch failed")
        # Dispatch what was appended before the stop, so the queues are complete at shutdown.
        for _ in range(SHUTDOWN_DRAIN_ROUNDS):
            if self.do_reput() == 0 and self.behind() == 0:
                break
