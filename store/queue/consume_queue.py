"""ConsumeQueue: one topic-queue's index into the commitlog.

Entry i (the message with queue offset i) lies at byte i * 20 of the queue's log:
    commitlog offset 8 | size 4 | tags code 8        (big-endian)
Files of `mapped_file_size_consume_queue_bytes` live in consumequeue/<topic>/<queueId>/.

Invariants:
- only the holder of the dispatch lock writes (ReputMessageService); an entry is written
  once, at its own position (a duplicate from re-dispatch is skipped, a gap is logged and
  filled with zeros);
- a queue whose first file begins before its first entry (it starts mid-file: its early
  entries were deleted, or it was created at a non-zero offset) has filler entries
  (0, 2^31 - 1, 0) in front of that entry, as RocketMQ's ConsumeQueue.fillPreBlank writes: its
  recovery (ConsumeQueue.recover) ends a queue at the first entry whose size is not > 0, so
  zeros there would make a RocketMQ broker drop the queue. Filler never counts as a message;
  zeros there (stores of older tidemq versions) are read the same way and replaced by filler
  at recovery;
- `max_physic_offset` is the commitlog offset just past the last dispatched message;
- `min_logic_offset` (bytes) is the first entry still pointing into the commitlog.

Files ahead of need: once the last file is ORDER_NEXT_FILE_AT_PERCENT full, the queue orders
the next one from the allocate service (store/logfile/file_ahead.py), so the roll takes a made file
instead of creating one under the dispatch lock. The write path pays nothing per entry for it:
its fast path stops at that mark (`_fast_end`), and the general path that takes over orders the
file once. A queue's first file, and a next file the service has not made yet, are created by
the roll itself. After a kill the made file may lie on disk with nothing in it: recovery removes
it when the file before it is not full, and keeps it as the queue's empty last file otherwise,
as after any roll (`recover`).
"""

from __future__ import annotations

import functools
import logging
import os
import struct
import threading
from typing import TYPE_CHECKING

from store._kernels import Mapping
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.logfile.file_ahead import FileAhead
from store.logfile.lazy_mapped_file import LazyMappedFile, MappingBudget
from store.logfile.mapped_file import MappedFile, SelectMappedBufferResult, offset_to_file_name
from store.logfile.mapped_file_queue import MappedFileQueue

if TYPE_CHECKING:
    from store.logfile.allocate_mapped_file_service import AllocateMappedFileService

log = logging.getLogger("tidemq.store")

CQ_STORE_UNIT_SIZE = 20
ENTRY = struct.Struct(">qiq")
FILLER_SIZE = 2**31 - 1  # Integer.MAX_VALUE, the size field of RocketMQ's filler entries
FILLER_ENTRY = ENTRY.pack(0, FILLER_SIZE, 0)
# How full the last file is when the next one is ordered: early enough for the service to make it
# before the roll, late enough that a queue written once in a while does not hold an empty file.
ORDER_NEXT_FILE_AT_PERCENT = 50


def is_filler(offset: int, size: int) -> bool:
    """True for a filler entry (ConsumeQueue.fillPreBlank's), which stands for no message."""
    return size == FILLER_SIZE and offset == 0


def filler(count: int) -> bytes:
    return FILLER_ENTRY * count


class ConsumeQueue:
    def __init__(
        self, topic: str, queue_id: int, store_path: str, mapped_file_size: int, budget: MappingBudget | None = None,
        allocate_service: AllocateMappedFileService | None = None, reservation: SpaceReservation = DEFAULT_RESERVATION,
    ) -> None:  # fmt: skip
        assert mapped_file_size % CQ_STORE_UNIT_SIZE == 0
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.queue_dir = os.path.join(store_path, topic, str(queue_id))
        # With a budget the queue's files are mapped only while used (store/logfile/lazy_mapped_file.py).
        factory = (
            functools.partial(LazyMappedFile, budget=budget, reservation=reservation)
            if budget is not None
            else functools.partial(MappedFile, reservation=reservation)
        )
        self.mapped_file_queue = MappedFileQueue(self.queue_dir, mapped_file_size, file_factory=factory)
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.last_store_timestamp = 0
        self._clean_lock = threading.Lock()  # serializes deletions of this queue's files (order: docs/concurrency.md)
        self.ahead: FileAhead[MappedFile] = FileAhead(allocate_service, _remove_file)
        units = mapped_file_size // CQ_STORE_UNIT_SIZE
        self._order_at = max(1, units * ORDER_NEXT_FILE_AT_PERCENT // 100) * CQ_STORE_UNIT_SIZE
        # Where the fast write path stops in the last file: the order mark until the next file is ordered.
        self._fast_end = mapped_file_size
        self.order_ahead_again()

    # Loading and recovery ----------------------------------------------------------------

    def load(self) -> bool:
        return self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the last valid entry in the last three files and cut the queue after it.

        The queue's first file may begin with filler (or, written by older versions, zeros, which
        are replaced by filler here) before its first entry: both are passed over."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        head = self._leading_filler(files[0])  # also when the first file is not among the three
        start = max(0, len(files) - 3)
        end = files[start].file_from_offset
        max_phys = -1
        for mf in files[start:]:
            pos = head if mf is files[0] else 0
            if pos:
                end = mf.file_from_offset + pos
            mm = mf.mm
            scan_end = min(self.mapped_file_size, mf.data_end)  # past data_end: no blocks, zeros
            while pos + CQ_STORE_UNIT_SIZE <= scan_end:
                offset, size, _tags = ENTRY.unpack_from(mm, pos)
                if is_filler(offset, size):
                    pos += CQ_STORE_UNIT_SIZE  # a copied RocketMQ store may hold filler beyond the first file's head
                    end = mf.file_from_offset + pos
                elif offset >= 0 and size > 0:
                    max_phys = offset + size
                    pos += CQ_STORE_UNIT_SIZE
                    end = mf.file_from_offset + pos
                elif offset == 0 and size == 0 and _is_zero_tail(mm, pos, scan_end):
                    break
                else:
                    # A zero entry inside the queue is a gap filled earlier; keep scanning past it.
                    pos += CQ_STORE_UNIT_SIZE
            if pos < self.mapped_file_size:
                break
        self.max_physic_offset = max_phys
        self.mapped_file_queue.truncate_dirty_files(end)
        self.mapped_file_queue.set_positions(end)

    def _leading_filler(self, mf: MappedFile) -> int:
        """Bytes of filler (or zeros, then rewritten as filler) before the first entry of the
        queue's first file; 0 when the file begins with an entry or holds nothing at all."""
        mm = mf.mm
        unit = CQ_STORE_UNIT_SIZE
        end = min(self.mapped_file_size, mf.data_end)  # past data_end: no blocks, zeros
        pos = 0
        while pos + unit <= end and mm[pos : pos + unit] == FILLER_ENTRY:
            pos += unit
        if pos + unit > end or any(mm[pos : pos + unit]):
            return pos
        head = bytes(mm[pos:end])
        first = len(head) - len(head.lstrip(b"\0"))
        if first == len(head):
            return pos  # nothing written after the head
        zeros_end = pos + first // unit * unit
        if zeros_end > pos:
            log.info(
                "consume queue %s/%d: %d zero entries before its first entry rewritten as filler",
                self.topic, self.queue_id, (zeros_end - pos) // unit,
            )  # fmt: skip
            mf.write_at(pos, filler((zeros_end - pos) // unit))  # below the written end: positions stay
        return zeros_end

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop entries that point at or past `phy_offset` (the commitlog was cut there)."""
        files = self.mapped_file_queue.mapped_files
        cut = None
        for mf in reversed(files):
            pos = min(mf.wrote_position, self.mapped_file_size) - CQ_STORE_UNIT_SIZE
            mm = mf.mm
            while pos >= 0:
                offset, size, _ = ENTRY.unpack_from(mm, pos)
                if size > 0 and offset + size <= phy_offset and not is_filler(offset, size):
                    cut = mf.file_from_offset + pos + CQ_STORE_UNIT_SIZE
                    self.max_physic_offset = offset + size
                    break
                pos -= CQ_STORE_UNIT_SIZE
            if cut is not None:
                break
        if cut is None:
            cut = files[0].file_from_offset if files else 0
            self.max_physic_offset = -1
        self.mapped_file_queue.truncate_dirty_files(cut)
        self.mapped_file_queue.set_positions(min(self.mapped_file_queue.flushed_where, cut))

    # Writing -------------------------------------------------------------------------

    def put_message_position_info(self, commitlog_offset: int, size: int, tags_code: int, queue_offset: int, store_ts: int) -> bool:
        """Write the entry of queue offset `queue_offset`; True when stored or already present.

        One entry at a time (tests and tools); dispatch writes runs with put_raw_entries_locked.
        """
        entry = ENTRY.pack(commitlog_offset, size, tags_code)
        return self.put_raw_entries_locked(entry, queue_offset, commitlog_offset, commitlog_offset + size, store_ts)

    def put_raw_entries_locked(
        self, entries: bytes | bytearray | memoryview, queue_offset: int, first_offset: int, end_offset: int, store_ts: int
    ) -> bool:
        """Write a run of 20-byte entries for queue offsets `queue_offset`, `queue_offset + 1`, ...;
        each entry's message lies at or after the end of the one before it in the commitlog; the
        first starts at `first_offset`, the last ends at `end_offset` and was stored at `store_ts`.
        The caller holds the dispatch lock (the queue's only writer).

        Entry by entry the effect is that of writing each on its own: an entry whose message the
        queue already holds (re-dispatch) or whose position is already written is skipped, a gap
        before an entry is logged and left zero. Once one entry is written the rest of its file's
        share follows at the next positions, which nothing can skip: they are copied in one go.
        False when a file for an entry cannot be created.
        """
        size = len(entries)
        assert size > 0 and size % CQ_STORE_UNIT_SIZE == 0, f"a run of whole entries, not {size} bytes"
        assert first_offset < end_offset, f"a run's messages end ({end_offset}) past where they start ({first_offset})"
        files = self.mapped_file_queue.mapped_files
        if files and first_offset >= self.max_physic_offset:
            mf = files[-1]  # the common case: the run continues the queue where its last file ends
            pos = queue_offset * CQ_STORE_UNIT_SIZE - mf.file_from_offset
            if pos == mf.wrote_position and pos + size <= self._fast_end:
                mf.write_at(pos, entries)
                self.max_physic_offset = end_offset
                self.last_store_timestamp = store_ts
                return True
        return self._put_entries_one_file_at_a_time(entries, queue_offset, store_ts)

    def _put_entries_one_file_at_a_time(self, entries: bytes | bytearray | memoryview, queue_offset: int, store_ts: int) -> bool:
        """put_raw_entries_locked's general case: the entry-by-entry checks until one is written,
        then the rest of that file's share in one go, file after file."""
        n = len(entries) // CQ_STORE_UNIT_SIZE
        if queue_offset < 0:
            log.error("consume queue %s/%d: entries with queue offset %d dropped", self.topic, self.queue_id, queue_offset)
            return True
        max_before = self.get_max_offset_in_queue()
        i = 0
        while i < n:
            offset, size, _code = ENTRY.unpack_from(entries, i * CQ_STORE_UNIT_SIZE)
            if offset + size <= self.max_physic_offset:
                i += 1  # re-dispatch of a message this queue already holds
                continue
            expect = (queue_offset + i) * CQ_STORE_UNIT_SIZE
            mf = self._file_for(expect)
            if mf is None:
                log.error("consume queue %s/%d: cannot create a file for offset %d", self.topic, self.queue_id, expect)
                return False
            pos = expect - mf.file_from_offset
            current = mf.wrote_position
            if pos < current:
                i += 1  # already written
                continue
            if pos > current and current == 0 and mf is self.mapped_file_queue.mapped_files[0]:
                mf.write_at(0, filler(pos // CQ_STORE_UNIT_SIZE))  # the queue starts mid-file (module docstring)
            elif pos > current:
                log.warning(
                    "consume queue %s/%d: gap, expected entry %d at %d but queue ends at %d",
                    self.topic, self.queue_id, queue_offset + i, pos, current,
                )  # fmt: skip
            take = min(n - i, (self.mapped_file_size - pos) // CQ_STORE_UNIT_SIZE)
            mf.write_at(pos, entries[i * CQ_STORE_UNIT_SIZE : (i + take) * CQ_STORE_UNIT_SIZE])
            i += take
            last, last_size, _code = ENTRY.unpack_from(entries, (i - 1) * CQ_STORE_UNIT_SIZE)
            # Only recovery's truncation moves it back: a run's messages follow one another in the log.
            assert last + last_size > self.max_physic_offset, f"{self.topic}/{self.queue_id}: the last message end would move back"
            self.max_physic_offset = last + last_size
            self.last_store_timestamp = store_ts
        if self._fast_end < self.mapped_file_size:
            self._order_next_file_locked()
        assert self.get_max_offset_in_queue() >= max_before, f"{self.topic}/{self.queue_id}: the max offset moved back"
        return True

    def order_ahead_again(self) -> None:
        """Order the next file at the mark again (the store's start: orders made while the allocate
        service was not running yet, during recovery, were refused)."""
        if self.ahead.service is not None:
            self._fast_end = self._order_at

    def _order_next_file_locked(self) -> None:
        """Order the file after the last one once that is past the mark; the caller holds the dispatch lock."""
        last = self.mapped_file_queue.get_last_mapped_file()
        if last is None or last.wrote_position < self._order_at:
            return
        self._fast_end = self.mapped_file_size  # one order per file, taken or refused
        offset = last.file_from_offset + self.mapped_file_size
        path = os.path.join(self.queue_dir, offset_to_file_name(offset))
        self.ahead.order(offset, functools.partial(self.mapped_file_queue.file_factory, path, self.mapped_file_size))

    def _roll_locked(self, offset: int) -> MappedFile | None:
        """Append the queue's file starting at `offset`: the one made ahead when it is ready, else a new one."""
        mfq = self.mapped_file_queue
        mf = self.ahead.take(offset)
        if mf is not None:
            mfq.append_file(mf)
        else:
            mf = mfq.get_last_mapped_file_or_create(offset)
        self.order_ahead_again()
        return mf

    def _file_for(self, expect: int) -> MappedFile | None:
        """The file holding byte `expect` of the queue, created (with the files before it) when absent."""
        mfq = self.mapped_file_queue
        mf = mfq.find_mapped_file_by_offset(expect)
        if mf is not None:
            return mf
        last = mfq.get_last_mapped_file()
        if last is None:
            mf = mfq.get_last_mapped_file_or_create(expect)
            if mf is not None and expect % self.mapped_file_size != 0:
                # A queue whose early files were deleted starts mid-file: mark the gap.
                self.min_logic_offset = expect
                mfq.set_positions(expect - expect % self.mapped_file_size)
            return mf
        while last is not None and last.file_from_offset + self.mapped_file_size <= expect:
            last.mark_written(self.mapped_file_size)
            last = self._roll_locked(last.file_from_offset + self.mapped_file_size)
        return last

    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    # Reading -------------------------------------------------------------------------

    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_index_buffer(self, start_index: int) -> SelectMappedBufferResult | None:
        """A held view from entry `start_index` to the end of its file's written entries."""
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        return self.mapped_file_queue.select(offset, None)

    def read_entry(self, index: int) -> tuple[int, int, int] | None:
        res = self.mapped_file_queue.select(index * CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE)
        if res is None:
            return None
        try:
            return ENTRY.unpack_from(res.view, 0)
        finally:
            res.release()

    def rollnext_file(self, index: int) -> int:
        per_file = self.mapped_file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    # Cleanup -------------------------------------------------------------------------

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """Move `min_logic_offset` to the first entry whose message is still in the commitlog.

        A file already on its way out (shut down, waiting for its readers) holds only entries
        below the minimum, so the search continues in the next file.
        """
        for mf in self.mapped_file_queue.mapped_files:
            res = mf.select_mapped_buffer(0)
            if res is None:
                if not mf.is_available():
                    self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + self.mapped_file_size)
                    continue
                return
            try:
                for pos in range(0, res.size - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                    offset, size, _ = ENTRY.unpack_from(res.view, pos)
                    if size > 0 and offset >= min_commit_log_offset and not is_filler(offset, size):
                        self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + pos)
                        return
                self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + res.size)
                if res.size < self.mapped_file_size:
                    return  # the queue's end
            finally:
                res.release()

    def delete_expired_files(self, min_commit_log_offset: int, interval_forcibly_ms: int, now_ms: int) -> int:
        """Delete leading files whose every entry points below the commitlog's minimum offset."""

        def all_below(mf: MappedFile) -> bool:
            last = mf.get_read_position() - CQ_STORE_UNIT_SIZE
            if last < 0 or not mf.hold():  # a file another pass is deleting is not read
                return False
            try:
                offset: int
                size: int
                offset, size, _ = ENTRY.unpack_from(mf.mm, last)
            finally:
                mf.release()
            return offset + size <= min_commit_log_offset

        with self._clean_lock:  # the periodic pass and a manual one never delete the same files at once
            # Readers learn the new minimum before the files under it go, so they are sent past them.
            self.correct_min_offset(min_commit_log_offset)
            deleted = self.mapped_file_queue.delete_files_below(min_commit_log_offset, all_below, interval_forcibly_ms, now_ms)
            self.correct_min_offset(min_commit_log_offset)
        return deleted

    def destroy(self) -> None:
        self.ahead.discard()
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mapped_file_queue.destroy()

    def shutdown(self) -> None:
        self.ahead.discard()  # a file made and not taken is removed: a clean shutdown leaves none
        self.mapped_file_queue.shutdown()


def _remove_file(mf: MappedFile) -> None:
    mf.destroy(0)


def _is_zero_tail(buf: Mapping, pos: int, end: int) -> bool:
    """True when every byte from `pos` to the next 4 KiB boundary (or `end`) is zero."""
    stop = min(end, pos + 4096)
    return not any(buf[pos:stop])
