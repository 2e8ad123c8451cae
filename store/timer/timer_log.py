"""TimerLog: the append-only log of timer records (RocketMQ 5's TimerLog, same 52-byte unit).

One unit per timer message enqueued into the wheel (docs/layouts.md, "Timer log"):

    SIZE 4 (52) | PREV POS 8 | MAGIC 4 | CURR WRITE TIME 8 | DELAYED TIME 4 |
    OFFSET PY 8 | SIZE PY 4 | HASH OF REAL TOPIC 4 | RESERVED 8      (big-endian)

PREV POS links the units of one wheel slot backwards (-1 ends the chain); the slot's due
time is CURR WRITE TIME + DELAYED TIME. A unit never spans two files: when a unit plus the
16-byte blank (SIZE = bytes left, PREV POS 0, MAGIC = BLANK_MAGIC_CODE) does not fit, the
rest of the file becomes that blank and the unit goes to the next file.

Invariants: units are appended by one thread (the enqueue service) and read by others
below the wrote position only; `recover()` keeps the longest prefix of whole, valid units
and truncates the rest, so a torn tail after a crash is cut, never read.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Iterator
from typing import NamedTuple

from store._kernels import Mapping
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.logfile.mapped_file import MappedFile
from store.logfile.mapped_file_queue import MappedFileQueue

log = logging.getLogger("tidemq.store")

UNIT = struct.Struct(">iqiqiqiiq")
UNIT_SIZE = UNIT.size
assert UNIT_SIZE == 52
BLANK = struct.Struct(">iqi")
MIN_BLANK_LEN = BLANK.size  # 16
# RocketMQ's `0xBBCCDDEE ^ 1880681586 + 8` (the + binds first), as a signed 32-bit int.
BLANK_MAGIC_CODE = ((0xBBCCDDEE ^ (1880681586 + 8)) + 2**31) % 2**32 - 2**31
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2


def is_magic_ok(magic: int) -> bool:
    return (magic | 0xF) == 0xF


class TimerRecord(NamedTuple):
    pos: int  # where the unit starts in the log
    prev_pos: int
    magic: int
    write_time_ms: int
    delayed_time_ms: int  # absolute: the unit's DELAYED TIME plus its write time (its slot's time)
    offset_py: int
    size_py: int
    topic_hash: int


class TimerLog:
    def __init__(self, store_path: str, file_size: int, reservation: SpaceReservation = DEFAULT_RESERVATION) -> None:
        self.file_size = file_size
        self.mapped_file_queue = MappedFileQueue(store_path, file_size, file_factory=functools.partial(MappedFile, reservation=reservation))

    def load(self) -> bool:
        return self.mapped_file_queue.load()

    # Writing -----------------------------------------------------------------------------

    def append(
        self, prev_pos: int, magic: int, write_time_ms: int, delayed_time_ms: int, offset_py: int, size_py: int, topic_hash: int
    ) -> int:
        """Append one unit; returns its position, -1 when no file could be made."""
        mfq = self.mapped_file_queue
        mf = mfq.get_last_mapped_file_or_create(0)
        if mf is None:
            return -1
        if UNIT_SIZE + MIN_BLANK_LEN > mf.remaining():
            mf.write_at(mf.wrote_position, BLANK.pack(mf.remaining(), 0, BLANK_MAGIC_CODE))
            mf.mark_written(self.file_size)
            mf = mfq.get_last_mapped_file_or_create(0)
            if mf is None:
                return -1
        pos = mf.file_from_offset + mf.wrote_position
        unit = UNIT.pack(UNIT_SIZE, prev_pos, magic, write_time_ms, delayed_time_ms - write_time_ms, offset_py, size_py, topic_hash, 0)
        mf.append_bytes(unit)
        return pos

    # Reading -----------------------------------------------------------------------------

    def read(self, pos: int) -> TimerRecord | None:
        """The unit at `pos`; None when it is not readable or not a valid unit."""
        res = self.mapped_file_queue.select(pos, UNIT_SIZE)
        if res is None:
            return None
        try:
            size, prev, magic, write_ms, delay, offset_py, size_py, topic_hash, _ = UNIT.unpack_from(res.view, 0)
        finally:
            res.release()
        if size != UNIT_SIZE or not is_magic_ok(magic):
            return None
        return TimerRecord(pos, prev, magic, write_ms, write_ms + delay, offset_py, size_py, topic_hash)

    def scan(self, start: int, end: int | None = None) -> Iterator[TimerRecord]:
        """The valid units from `start` (a unit boundary) to the end or `end`; stops at the first invalid one."""
        mfq = self.mapped_file_queue
        pos = start
        while end is None or pos < end:
            mf = mfq.find_mapped_file_by_offset(pos)
            if mf is None:
                return
            res = mf.select_mapped_buffer(pos - mf.file_from_offset)
            if res is None:
                return
            try:
                view, n, base = res.view, res.size, pos
                at = 0
                while at + MIN_BLANK_LEN <= n and (end is None or base + at < end):
                    size, prev, magic = BLANK.unpack_from(view, at)
                    if magic == BLANK_MAGIC_CODE:
                        break  # the rest of this file is the blank
                    if size != UNIT_SIZE or not is_magic_ok(magic) or at + UNIT_SIZE > n:
                        return
                    _, _, _, write_ms, delay, offset_py, size_py, topic_hash, _ = UNIT.unpack_from(view, at)
                    yield TimerRecord(base + at, prev, magic, write_ms, write_ms + delay, offset_py, size_py, topic_hash)
                    at += UNIT_SIZE
            finally:
                res.release()
            pos = mf.file_from_offset + self.file_size

    def last_record(self) -> TimerRecord | None:
        """The last unit of the log (after recovery), None when the log holds none."""
        for mf in reversed(self.mapped_file_queue.mapped_files):
            if mf.wrote_position >= UNIT_SIZE:
                # The last file may end in a blank only when it is full, and then a next file exists.
                pos = mf.file_from_offset + mf.wrote_position - UNIT_SIZE
                record = self.read(pos)
                if record is not None:
                    return record
        return None

    # Recovery ----------------------------------------------------------------------------

    def recover(self, checked_from: int) -> tuple[int, int]:
        """Validate the units from the file holding `checked_from` on and cut the log after the last whole one.

        Returns (start of the scan, end of the valid log). Files before the scan are taken as
        they are (the checkpoint says they were flushed).
        """
        mfq = self.mapped_file_queue
        files = mfq.mapped_files
        if not files:
            return 0, 0
        start_file = files[0]
        for mf in files:
            if mf.file_from_offset <= checked_from:
                start_file = mf
        start = start_file.file_from_offset
        end = start
        for mf in files:
            if mf.file_from_offset < start:
                continue
            # Files were loaded as full; find how far this one really holds units.
            mf.wrote_position = mf.committed_position = mf.flushed_position = self.file_size
            file_end = mf.file_from_offset + self._valid_length(mf.mm, mf.data_end)
            end = file_end
            if file_end < mf.file_from_offset + self.file_size and not self._ends_in_blank(
                mf.mm, file_end - mf.file_from_offset, mf.data_end
            ):
                break
            end = mf.file_from_offset + self.file_size
        if end < mfq.get_max_offset():
            log.warning("timer log: cutting %d bytes after the last whole unit at %d", mfq.get_max_offset() - end, end)
        mfq.truncate_dirty_files(end)
        mfq.set_positions(end)
        return start, end

    def _valid_length(self, buf: Mapping, data_end: int) -> int:
        """Bytes of whole units from the file's start; none past `data_end` (no blocks there: zeros)."""
        at = 0
        while at + MIN_BLANK_LEN <= min(self.file_size, data_end):
            size, _prev, magic = BLANK.unpack_from(buf, at)
            if magic == BLANK_MAGIC_CODE or size != UNIT_SIZE or not is_magic_ok(magic) or at + UNIT_SIZE > self.file_size:
                return at
            at += UNIT_SIZE
        return at

    def _ends_in_blank(self, buf: Mapping, at: int, data_end: int) -> bool:
        if at + MIN_BLANK_LEN > min(self.file_size, data_end):
            return at == self.file_size
        size, _prev, magic = BLANK.unpack_from(buf, at)
        return bool(magic == BLANK_MAGIC_CODE and size == self.file_size - at)

    # Cleanup and shutdown ------------------------------------------------------------------

    def delete_files_below(self, min_offset_py: int, now_ms: int) -> int:
        """Delete leading files whose last unit points below the commitlog's first offset (RocketMQ's rule)."""

        def below(mf: MappedFile) -> bool:
            record = self._last_unit_of(mf)
            return record is not None and record.offset_py < min_offset_py

        return self.mapped_file_queue.delete_files_below(min_offset_py, below, 0, now_ms)

    def _last_unit_of(self, mf: MappedFile) -> TimerRecord | None:
        last = self.file_size - (self.file_size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE
        return self.read(mf.file_from_offset + max(0, last))

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def flush(self) -> None:
        self.mapped_file_queue.flush(0)

    def shutdown(self) -> None:
        self.mapped_file_queue.flush(0)
        self.mapped_file_queue.shutdown()
