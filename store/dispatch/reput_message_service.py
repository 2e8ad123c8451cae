"""ReputMessageService: the dispatch cursor over the commitlog and the thread behind it.

Dispatch turns what was appended to the commitlog into consume-queue entries, index entries
and arrival notices (store/dispatch/bulk_dispatch.py, with the native kernels). It runs in two places:
- inline: a putting thread calls `dispatch_through()` right after its append returned and the put
  lock was released, so its messages (and any appended before) are dispatched, and the held
  pulls of their queues woken, before the put answers;
- on this service's thread: after recovery, for a slave's replicated appends (the HA client
  wakes it), in the transient-store-pool mode (bytes become readable only when the commit
  service commits them), and as the safety net that dispatches whatever is still behind (it
  looks every `IDLE_WAIT_MS`, at once when woken).

Resting: when a pass finds the cursor at the log's end, nothing owed, no lazily dispatched record
owed in the last LAZY_PERIOD_MS and no confirm offset to follow (duplication), the thread waits
REST_WAIT_MS instead: every way bytes reach the log then either dispatches them inline or wakes it
(a lazy `owe` wakes a resting thread, the commit service and the HA client wake it). A wait of a
Python thread costs more than its pass under load: the event loop releases the GIL around every
I/O callback, and a woken thread that needs the GIL is signalled at each release and loses the race
to take it for milliseconds (docs/concurrency.md, "Background threads under load"), so a produce
load that keeps this thread waiting 100 times a second paid for that in every request.

Ordering: one cursor, `reput_from_offset`, moved only under the dispatch lock (`_lock`): whoever
holds it dispatches everything readable from the cursor up to the end it reads, so entries reach
each queue in commitlog order whichever thread dispatches. A putter that finds the lock held
does not wait at first: the holder reads the end again after releasing, and takes the lock again
when something was appended meanwhile (at most INLINE_ROUNDS times; then it wakes this thread).
Only when the cursor is still short of the putter's end after that does the putter wait for the
lock and dispatch the rest itself, so no put answers before its messages can be read.
A put may instead be left owed (`owe`, the front end's produces): its caller runs `dispatch_owed`
before it answers, so the puts of one event-loop turn are dispatched in one pass; the guarantee
that no put answers before its messages can be read is the caller's to keep (app/dispatch_barrier.py).
The store's own records no request reads back are owed too, with no caller waiting (PutBatch's
`lazy_dispatch`): the next pass, a put's, a `dispatch_owed` or this thread's, takes them.
Lock order: docs/concurrency.md. Listeners run under the dispatch lock: they must not block
and must not put.

Readable end: the commitlog's readable end (committed bytes with the transient store pool, the
confirmed offset on a slave with duplication enabled), so dispatch never reads bytes that are
not readable yet. A range in the commitlog's damaged-range table is skipped, never dispatched.

Failures: `reput_from_offset` passes a chunk only after it was applied whole. When applying
fails (no descriptor left, a full disk) the cursor stays at the chunk's start and the chunk is
applied again later; applying is idempotent (bulk_dispatch.py), so dispatch resumes exactly at
the first message not fully dispatched. Only this thread retries, with a growing pause (up to
DISPATCH_RETRY_MAX_MS); an episode is logged when it starts and when it ends; `failure` names
the error while it lasts (the store reports it as degraded, and puts are refused meanwhile). It
is cleared as soon as a chunk applies, before the cursor moves past that chunk, so whoever sees
the cursor caught up also sees the failure over.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from core.service_thread import ServiceThread
from store import native
from store.codec.message_codec import DecodeOutcome, check_message
from store.config import MessageStoreConfig
from store.disk.space_reservation import is_no_space
from store.dispatch.bulk_dispatch import BulkDispatch
from store.logfile.commit_log import CommitLog

log = logging.getLogger("tidemq.store")

SHUTDOWN_DRAIN_ROUNDS = 50
DISPATCH_RETRY_MIN_MS = 10  # first pause after a failed dispatch
DISPATCH_RETRY_MAX_MS = 1_000  # the pause doubles up to this while dispatch keeps failing
IDLE_WAIT_MS = 10  # the safety net's period, and the longest a lazily dispatched record waits when no put follows
REST_WAIT_MS = 1_000  # the safety net's period while resting (module docstring): nothing is behind or owed
LAZY_PERIOD_MS = 1_000  # after a lazily dispatched record is owed, the thread keeps IDLE_WAIT_MS this long
INLINE_ROUNDS = 8  # times a putter takes the lock again for bytes appended while it dispatched


class ReputMessageService(ServiceThread):
    def __init__(self, commit_log: CommitLog, config: MessageStoreConfig, bulk: BulkDispatch) -> None:
        super().__init__("ReputMessageService")
        self.commit_log = commit_log
        self.config = config
        self.bulk = bulk
        self._mfq = commit_log.mapped_file_queue
        self._duplication = config.duplication_enable
        self.reput_from_offset = 0
        self.dispatched_messages = 0
        self.failure = ""  # the error of the current failure episode, "" while dispatch works
        self.failures_total = 0  # failed attempts since start
        self._retry_ms = 0
        self._lock = threading.Lock()  # the dispatch lock (module docstring)
        self.holder_ident = 0  # the thread holding `_lock` through `dispatch_lock`, 0 when none does
        self._max_deferred = config.max_deferred_dispatch_bytes
        self._owed_lock = threading.Lock()  # leaf: guards `_owed_to`
        self._owed_to = 0  # the end of the puts left to dispatch_owed (0: none yet)
        self._lazy_owed_ns = 0  # monotonic time of the last lazily dispatched record owed
        self.resting = False  # the thread waits `rest_wait_ms` (module docstring); read by `owe`
        self.rest_wait_ms = REST_WAIT_MS
        self._reported_stop = -1  # offset of the last corrupt message logged, so it is logged once
        self.on_no_space: Callable[[str], None] | None = None  # told when a dispatcher met a full disk
        self.release_mappings: Callable[[], object] | None = None  # unmap every idle queue file (out of descriptors)
        self.descriptor_shortages = 0  # failed attempts that met EMFILE or ENFILE
        self.trim: Callable[[], object] | None = None  # this thread's check of the store's mapping budget, once per pass
        self.on_progress: Callable[[int], None] | None = None  # told the cursor after each chunk (recovery)

    @property
    def dispatch_lock(self) -> DispatchLockHandle:
        """The dispatch lock for a holder outside this class (the index rebuild's handover, tests
        holding dispatch back); it remembers the holding thread, whose own puts must not wait for it."""
        return DispatchLockHandle(self)

    def behind(self) -> int:
        return max(0, self._end_offset() - self.reput_from_offset)

    def _end_offset(self) -> int:
        end = self._mfq.get_max_offset()
        if self._duplication and self.commit_log.confirm_offset >= 0:
            return min(self.commit_log.confirm_offset, end)
        return end

    def dispatch_now(self) -> int:
        """Dispatch what is readable unless another thread holds the dispatch lock (it then does);
        never waits. Returns the messages this call dispatched."""
        if self.failure:
            return 0  # this thread retries, with its pause
        return self._dispatch_rounds()

    def dispatch_through(self, offset: int) -> int:
        """Dispatch at least up to commitlog `offset` (the end of a put) before returning, so a put's
        messages are readable when it answers. Waits for the dispatch lock only when another thread
        holds it without having reached `offset`; returns early while dispatch is failing (this
        thread retries) or when the bytes are not readable yet (transient store pool, a slave's
        unconfirmed end). Returns the messages this call dispatched."""
        count = self._dispatch_rounds() if not self.failure else 0  # dispatch_now, one frame fewer (every put)
        if self.reput_from_offset >= offset or self.failure or self.reput_from_offset >= self._end_offset():
            return count
        if self.holder_ident == threading.get_ident():
            return count  # this thread holds dispatch back itself: waiting would never end
        with self._lock:  # the holder dispatches our bytes or left them: either way done after this
            return count + self._reput_locked()

    def owe(self, offset: int, lazy: bool = False) -> bool:
        """Leave the dispatch of a put ending at commitlog `offset` to a later `dispatch_owed`, which its
        caller runs before answering it, or (`lazy`: the store's own records) to the next pass, whoever
        runs it; a lazy record wakes a resting thread. False (nothing owed: dispatch it now) when
        dispatch trails `offset` by more than max_deferred_dispatch_bytes or is failing."""
        if self.failure or offset - self.reput_from_offset > self._max_deferred:
            return False
        with self._owed_lock:
            if offset > self._owed_to:
                self._owed_to = offset
        if lazy:
            self._lazy_owed_ns = time.monotonic_ns()
            if self.resting:  # set before the thread's last look at `_owed_to`: see `_wait_ms`
                self.resting = False
                self.wakeup()
        return True

    def dispatch_owed(self) -> int:
        """`dispatch_through` the end of every put `owe` took; nothing (at once) when the cursor is there.
        Returns the messages this call dispatched."""
        owed = self._owed_to
        if owed <= self.reput_from_offset:
            return 0
        count = self.dispatch_through(owed)
        if self.reput_from_offset < owed and self.reput_from_offset >= self._end_offset():
            # The log ends short of what was owed (truncated since): owe no more than it holds.
            with self._owed_lock:
                if self._owed_to == owed:
                    self._owed_to = self.reput_from_offset
        return count

    def _dispatch_rounds(self) -> int:
        """Take the lock if free and dispatch; after releasing it, again while bytes were appended
        meanwhile (a thread that found the lock held left them to this one)."""
        count = 0
        for _ in range(INLINE_ROUNDS):
            if not self._lock.acquire(blocking=False):
                return count
            try:
                cursor, end = self.reput_from_offset, self._end_offset()
                count += self._reput_locked(end)
            finally:
                self._lock.release()
            now = self._end_offset()
            if self.failure or self.reput_from_offset >= now or (self.reput_from_offset == cursor and now == end):
                return count  # caught up, or stuck where nothing new came (bytes not whole yet, corrupt ones)
        self.wakeup()
        return count

    def do_reput(self) -> int:
        """Dispatch everything readable now, waiting for the dispatch lock; returns the messages dispatched."""
        with self._lock:
            return self._reput_locked()

    def _reput_locked(self, end: int = -1) -> int:
        """Dispatch what is readable (up to `end` when given: the caller looks again after releasing the lock)."""
        cl = self.commit_log
        files = self._mfq.mapped_files
        first = files[0] if files else None
        if (  # else at or above the minimum: the first file's start, or the next one's when the first is going away
            first is not None
            and self.reput_from_offset < first.file_from_offset + cl.file_size
            and (self.reput_from_offset < first.file_from_offset or not first.is_available())
        ):
            min_offset = cl.get_min_offset()
            if 0 <= self.reput_from_offset < min_offset:
                log.warning("reput offset %d is below the commitlog minimum %d; skipping ahead", self.reput_from_offset, min_offset)
                self._advance_locked(min_offset)
        count = 0
        try:
            count = self._dispatch_available_locked(cl, end)
        except Exception as exc:  # any failure is retried, never skipped
            self._failed_locked(exc)
        else:
            if self.failure:
                self._recovered_locked()  # nothing was left to apply
        self.dispatched_messages += count
        return count

    def _dispatch_available_locked(self, cl: CommitLog, end: int) -> int:
        """Dispatch up to `end`, or while anything is readable when it is -1."""
        count = 0
        mfq = cl.mapped_file_queue
        to_end = end < 0
        while True:
            cursor = self.reput_from_offset
            if to_end:
                end = self._end_offset()
            if cursor >= end:
                break
            damaged = None
            if cl.damaged_ranges:
                skip_to = cl.damaged_range_end(cursor)
                if skip_to is not None:
                    log.warning("dispatch skips the damaged commitlog range [%d, %d)", cursor, skip_to)
                    self._advance_locked(skip_to)
                    continue
                damaged = cl.next_damaged_start(cursor)
            mf = mfq.find_mapped_file_by_offset(cursor)
            if mf is None or not mf.hold():
                break
            try:
                base = mf.file_from_offset
                readable = mf.get_read_position()
                limit = min(readable, end - base)
                if damaged is not None:
                    limit = min(limit, damaged - base)  # stop there; the check above skips the range
                stop, dispatched = self._dispatch_file_locked(mf.mm, cursor - base, limit, base)
                count += dispatched
            finally:
                mf.release()
            if stop == native.Stop.BLANK:
                self._advance_locked(cl.roll_next_file(base))
            elif stop != native.Stop.DONE:
                break  # nothing whole past the cursor yet, or corrupt bytes (logged)
            elif readable < cl.file_size and base + readable < end:
                # A file readable no further for now though the log goes on past it: the transient store pool's
                # uncommitted tail of a file the writer left. The commit that makes it readable wakes this thread.
                break
        return count

    def _advance_locked(self, offset: int) -> None:
        """Move the reput offset: it only grows while dispatching (recovery and truncation set it directly)."""
        assert offset >= self.reput_from_offset, f"the reput offset would move back from {self.reput_from_offset} to {offset}"
        self.reput_from_offset = offset

    def _dispatch_file_locked(self, buf: Any, pos: int, limit: int, base: int) -> tuple[int, int]:
        """Dispatch buf[pos:limit], readable bytes of the file starting at offset `base`, chunk by chunk."""
        count = 0
        while True:
            stop, pos, n = self.bulk.apply_chunk_locked(buf, pos, limit)
            assert pos <= limit, f"dispatch passed the readable end: {pos} > {limit}"
            if self.failure:
                # Ended before the cursor passes the chunk: a thread that sees the cursor past it
                # (a put's lag check, wait for dispatch) never sees the failure still named.
                self._recovered_locked()
            count += n
            self._advance_locked(base + pos)
            if n and self.on_progress is not None:
                self.on_progress(self.reput_from_offset)
            if stop != native.Stop.OUT_FULL:
                break
        if stop in native.CORRUPT or stop == native.Stop.PARTIAL:
            self._report_corrupt_locked(buf, pos, limit, base)
        return stop, count

    def _recovered_locked(self) -> None:
        """End the failure episode: logged, and puts are taken again."""
        log.warning(
            "dispatch works again at offset %d after %d failed attempts (%s)",
            self.reput_from_offset, self.failures_total, self.failure,
        )  # fmt: skip
        self.failure = ""
        self._retry_ms = 0

    def _failed_locked(self, exc: Exception) -> None:
        """Record a failed attempt; the first of an episode is logged with its traceback."""
        self.failures_total += 1
        self._retry_ms = min(DISPATCH_RETRY_MAX_MS, max(DISPATCH_RETRY_MIN_MS, self._retry_ms * 2))
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE):
            # Out of descriptors (connections took them): give back what mappings hold and retry at
            # once rather than back off; the next attempt opens its file again.
            self.descriptor_shortages += 1
            if self.release_mappings is not None:
                self.release_mappings()
            self._retry_ms = DISPATCH_RETRY_MIN_MS
        if isinstance(cause, OSError) and is_no_space(cause) and self.on_no_space is not None:
            self.on_no_space(str(cause.filename or "a store file"))
        if not self.failure:
            self.failure = f"{type(exc).__name__}: {exc}" if not isinstance(exc, OSError) else (exc.strerror or str(exc))
            log.error("dispatch failed at offset %d; retrying until it succeeds", self.reput_from_offset, exc_info=exc)

    def _report_corrupt_locked(self, buf: Any, pos: int, limit: int, base: int) -> None:
        """Log (once per position) why dispatch cannot pass the bytes at pos; the caller holds the dispatch lock."""
        if base + pos == self._reported_stop:
            return
        self._reported_stop = base + pos
        r = check_message(buf, pos, limit, False, False)
        if r.outcome is DecodeOutcome.CORRUPT:
            log.error("reput stopped at %d: %s", base + pos, r.reason)

    def _wait_ms(self) -> int:
        """How long this thread waits before its next pass: the retry pause while failing, REST_WAIT_MS
        while resting (module docstring), IDLE_WAIT_MS otherwise."""
        if self.failure:
            self.resting = False
            return self._retry_ms
        # `resting` is set before the look at what is owed: a lazy `owe` either is seen here or sees it set.
        self.resting = not self._duplication
        if (
            self._owed_to > self.reput_from_offset
            or self.reput_from_offset < self._mfq.get_max_offset()
            or time.monotonic_ns() - self._lazy_owed_ns < LAZY_PERIOD_MS * 1_000_000
        ):
            self.resting = False
        return self.rest_wait_ms if self.resting else IDLE_WAIT_MS

    def run(self) -> None:
        while not self.is_stopped():
            try:
                self.wait_for_running(self._wait_ms())
                self.resting = False
                self._dispatch_rounds()
                if self.trim is not None and self._lock.acquire(blocking=False):
                    try:
                        self.trim()  # readers map files too: the budget is checked once per pass
                    finally:
                        self._lock.release()
            except Exception:
                log.exception("dispatch failed")
        # Dispatch what was appended before the stop, so the queues are complete at shutdown.
        for _ in range(SHUTDOWN_DRAIN_ROUNDS):
            if self.do_reput() == 0 and self.behind() == 0:
                break


class DispatchLockHandle:
    """The dispatch lock taken from outside ReputMessageService, with the holding thread recorded."""

    __slots__ = ("_service",)

    def __init__(self, service: ReputMessageService) -> None:
        self._service = service

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._service._lock.acquire(blocking, timeout):
            return False
        self._service.holder_ident = threading.get_ident()
        return True

    def release(self) -> None:
        self._service.holder_ident = 0
        self._service._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()
