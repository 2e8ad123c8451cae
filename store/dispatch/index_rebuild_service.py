"""IndexRebuildService: indexes, after start, the commitlog range a missing or stale index lacks.

RocketMQ writes IndexFile entries only at dispatch (CommitLogDispatcherBuildIndex ->
IndexService.buildIndex), and after a clean start its DefaultMessageStore dispatches from the
consume queues' end: a store copied without `index/`, or with an index older than its commitlog,
answers key queries for new messages only. tidemq notices at load (store/store_recovery.py):
the index ends (the newest IndexFile header's endPhyOffset) before where dispatch resumes. A gap
below `index_rebuild_background_min_bytes` is dispatched again with recovery; a larger one is
indexed by this thread, while the store serves (after a clean shutdown only: after a crash the
timer and transaction checks read the index at once, so recovery dispatches the gap itself):

- from `start` (the index's end, or the commitlog's minimum) it scans the commitlog file by file
  with the dispatch scan kernel, at most MAX_RECORDS messages per chunk into buffers of its own,
  holding one file at a time, and adds each chunk's keys to the index: its memory is those
  buffers, whatever the size of the range;
- meanwhile dispatch writes queue entries but no index entries (`IndexService.rebuilding`), so
  the index is still written in commitlog order, by one writer at a time;
- within HANDOVER_BYTES of dispatch's cursor it takes the dispatch lock, indexes up to the cursor
  and gives the index back to dispatch.
Its progress is the store's RecoveryProgress (phase REBUILD_PHASE, logged every few seconds);
the store is not ready (/readyz 503 INDEX_REBUILDING) until it finished. Stopped before (at
shutdown) it leaves the index ending where it got to, and the next start goes on from there.
A failure (a full disk) is retried with a pause; adding keys is idempotent (messages at or below
the index's end are skipped), so a retried chunk adds nothing twice.
"""

from __future__ import annotations

import logging

from core.service_thread import ServiceThread
from store import _kernels, native
from store.dispatch.bulk_dispatch import MAX_KEYS, MAX_RECORDS
from store.dispatch.reput_message_service import ReputMessageService
from store.errors import DispatchFailed
from store.index.index_service import IndexService
from store.logfile.commit_log import CommitLog
from store.logfile.commit_log_recovery import RecoveryProgress

log = logging.getLogger("tidemq.store")

REBUILD_PHASE = "rebuilding index"
DONE_PHASE = "recovered"  # the phase recovery left, back once the index is whole
HANDOVER_BYTES = 1024 * 1024  # this close to dispatch's cursor, the rest is indexed under the dispatch lock
RETRY_PAUSE_MS = 1_000  # after a failed chunk


class IndexRebuildService(ServiceThread):
    def __init__(
        self,
        commit_log: CommitLog,
        index_service: IndexService,
        reput: ReputMessageService,
        progress: RecoveryProgress,
        start: int,
        uniq_key_index: bool,
        delay_levels_ms: list[int],
    ) -> None:
        super().__init__("IndexRebuildService")
        self.commit_log = commit_log
        self.index_service = index_service
        self.reput = reput
        self.progress = progress
        self.start_offset = start
        self.cursor = start  # every message below it is indexed
        self._flags = native.SCAN_UNIQ_KEY if uniq_key_index else 0
        self._levels = native.delay_levels_array(delay_levels_ms)
        self._records = bytearray(native.RECORD.size * MAX_RECORDS)
        self._keys = bytearray(native.KEY.size * MAX_KEYS)

    def start(self) -> None:
        # The phase is set before the thread runs: whoever sees the store not ready sees why.
        self.progress.begin(REBUILD_PHASE, max(0, self.reput.reput_from_offset - self.start_offset))
        super().start()

    def run(self) -> None:
        log.warning(
            "the index ends at commitlog offset %d, before dispatch's %d: rebuilding it in the background",
            self.start_offset, self.reput.reput_from_offset,
        )  # fmt: skip
        while not self.is_stopped() and self.index_service.rebuilding:
            try:
                self._pass()
            except (DispatchFailed, OSError) as exc:
                log.error("index rebuild failed at offset %d (%s); retrying in %d ms", self.cursor, exc, RETRY_PAUSE_MS)
                self.wait_for_running(RETRY_PAUSE_MS)
        if self.index_service.rebuilding:
            log.info("index rebuild stopped at offset %d; the next start goes on from there", self.cursor)
        else:
            self.progress.phase = DONE_PHASE
            log.info("index rebuilt: commitlog [%d, %d) indexed", self.start_offset, self.cursor)

    def _pass(self) -> None:
        """Index up to dispatch's cursor; near it, finish under the dispatch lock and hand over."""
        target = self.reput.reput_from_offset
        self.progress.total_bytes = max(self.progress.total_bytes, target - self.start_offset)  # dispatch moves on meanwhile
        if target - self.cursor > HANDOVER_BYTES:
            self._index_until(target)
            return
        with self.reput.dispatch_lock:  # dispatch's cursor stands still: nothing is missed at the handover
            self._index_until(self.reput.reput_from_offset)
            if self.cursor < self.reput.reput_from_offset:
                return  # stopped meanwhile
            self.index_service.rebuilding = False

    def _index_until(self, end: int) -> None:
        cl = self.commit_log
        while self.cursor < end and not self.is_stopped():
            skip_to = cl.damaged_range_end(self.cursor) if cl.damaged_ranges else None
            if skip_to is not None:
                self.cursor = skip_to  # dispatch skipped it too
                continue
            damaged = cl.next_damaged_start(self.cursor) if cl.damaged_ranges else None
            mf = cl.mapped_file_queue.find_mapped_file_by_offset(self.cursor)
            if mf is None or not mf.hold():
                lowest = cl.get_min_offset()
                if self.cursor < lowest:
                    self.cursor = lowest  # retention deleted the file meanwhile: its messages need no index
                    continue
                raise DispatchFailed(f"no commitlog file holds offset {self.cursor}")
            try:
                base = mf.file_from_offset
                limit = min(mf.get_read_position(), end - base, (damaged if damaged is not None else end) - base)
                stop = self._index_file(mf.mm, self.cursor - base, limit, base)
            finally:
                mf.release()
            if stop == native.Stop.BLANK:
                self.cursor = cl.roll_next_file(base)
            elif stop == native.Stop.OUT_FULL:
                return  # stopped between two chunks
            elif stop != native.Stop.DONE:
                raise DispatchFailed(f"the commitlog cannot be scanned at offset {self.cursor} (stop {stop!r})")

    def _index_file(self, buf: object, pos: int, limit: int, base: int) -> int:
        """Index buf[pos:limit] chunk by chunk; the stop of the last scan."""
        while True:
            stop, pos, n, n_keys = _kernels.dispatch_scan(buf, pos, limit, self._records, self._keys, self._flags, self._levels)
            if n == 0 and stop == native.Stop.OUT_FULL:
                raise DispatchFailed(f"a message at {base + pos} has more index keys than a scan chunk holds")
            if n:
                last = native.RECORD.unpack_from(self._records, (n - 1) * native.RECORD.size)
                self.index_service.add_hashed_keys_locked(self._keys, n_keys, n, last[4], last[3])
            self.cursor = base + pos
            self.progress.advance(self.cursor - self.start_offset)
            if stop != native.Stop.OUT_FULL or self.is_stopped():
                return stop
