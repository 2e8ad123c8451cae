"""IndexFile: a hash index from `topic#key` to commitlog offsets, one file per time span.

Layout (big-endian; docs/layouts.md):
    header 40 B: begin_timestamp 8 | end_timestamp 8 | begin_phy_offset 8 | end_phy_offset 8 |
                 hash_slot_count 4 | index_count 4
    slots: max_hash_slot_num x 4 B, each the number of the newest entry of its chain (0 = empty)
    entries: max_index_num x 20 B: key_hash 4 | phy_offset 8 | time_diff_s 4 | prev_index 4
Entry 0 is never used (index_count starts at 1), so 0 ends a chain.

Invariants: only the holder of the dispatch lock writes; an entry is complete before its
slot points at it, so a reader following a chain never sees a half-written entry.
Dispatch adds keys with `put_hashed_locked` (the native kernel, hashes computed by the
dispatch scan); `put_key` is the Python reference the tests compare it with.
"""

from __future__ import annotations

import os
import struct

from store import _kernels
from store.codec.message import java_string_hash
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.logfile.mapped_file import MappedFile

HEADER_BYTES = 40
SLOT_BYTES = 4
ENTRY_BYTES = 20
INVALID_INDEX = 0
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_index_put = _kernels.index_put


def key_hash(key: str) -> int:
    """Non-negative hash of a key (Java's String.hashCode, absolute value as RocketMQ takes it)."""
    h = abs(java_string_hash(key))
    return 0 if h > 0x7FFFFFFF else h  # Java's abs(Integer.MIN_VALUE) stays negative; RocketMQ maps it to 0


def index_file_size(slot_num: int, index_num: int) -> int:
    return HEADER_BYTES + slot_num * SLOT_BYTES + index_num * ENTRY_BYTES


class IndexFile:
    def _set_header(self, header: tuple[int, int, int, int, int, int]) -> None:
        """The header's six fields (the layout's order) from a file or from native.index_put."""
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = header

    def __init__(
        self, path: str, slot_num: int, index_num: int, end_phy_offset: int = 0, end_timestamp: int = 0,
        reservation: SpaceReservation = DEFAULT_RESERVATION,
    ) -> None:  # fmt: skip
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        self.file_size = index_file_size(slot_num, index_num)
        existed = os.path.exists(path) and os.path.getsize(path) == self.file_size
        # Index files are named by time, not offset: wrap the mapping without MappedFile's name rule.
        self.mapped_file = _NamedMappedFile(path, self.file_size, reservation)
        self.mm = self.mapped_file.mm
        self._entries_pos = HEADER_BYTES + slot_num * SLOT_BYTES
        # Slots are written anywhere (a key's hash picks one), so they are reserved whole with the
        # header (a reservation is always a prefix of the file); entries are written in order and
        # reserved in steps ahead of index_count (store/disk/space_reservation.py). A loaded file is
        # reserved at its first write.
        self.mapped_file.reserve_base = self._entries_pos
        if not existed:
            try:
                self.mapped_file.ensure_reserved(self._entries_pos + ENTRY_BYTES)
            except OSError:
                self.mapped_file.close()
                _unlink_quietly(path)
                raise
        if existed:
            self._set_header(_HEADER.unpack_from(self.mm, 0))
            if self.index_count < 1:
                self.index_count = 1
        else:
            self._set_header((end_timestamp, end_timestamp, end_phy_offset, end_phy_offset, 0, 1))
            self.write_header()

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)

    def reserve_slots_quietly(self) -> bool:
        """Reserve the header and slots (a loaded file's first write would) so they can be prefaulted; False,
        unreported, when the volume has no room for them (the first write then reports it)."""
        return self.mapped_file.reserve_quietly(self._entries_pos)

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key: str, phy_offset: int, store_timestamp: int, write_header: bool = True) -> bool:
        """Add one key; False when the file is full (the caller rolls to a new file).

        A caller adding several keys of one message passes `write_header=False` for all but
        the last: the header then moves once per message, after its entries and slots.
        """
        count = self.index_count
        if count >= self.index_num:
            return False
        self.mapped_file.ensure_reserved(self._entries_pos + (count + 1) * ENTRY_BYTES)
        mm = self.mm
        h = key_hash(key)
        slot_pos = HEADER_BYTES + (h % self.slot_num) * SLOT_BYTES
        (slot_value,) = _SLOT.unpack_from(mm, slot_pos)
        if slot_value <= INVALID_INDEX or slot_value > count:
            slot_value = INVALID_INDEX
            self.hash_slot_count += 1
        if count <= 1:
            self.begin_timestamp = store_timestamp
            self.begin_phy_offset = phy_offset
        diff_s = (store_timestamp - self.begin_timestamp) // 1000
        if diff_s < 0:
            diff_s = 0
        elif diff_s > 0x7FFFFFFF:
            diff_s = 0x7FFFFFFF
        _ENTRY.pack_into(mm, self._entries_pos + count * ENTRY_BYTES, h, phy_offset, diff_s, slot_value)
        _SLOT.pack_into(mm, slot_pos, count)
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        if write_header:
            self.write_header()
        return True

    def put_hashed_locked(self, keys: object, key_from: int, key_to: int, current_record: int) -> tuple[int, int, int, int]:
        """Add dispatch_scan keys [key_from, key_to) as put_key would, and write the header; the
        caller holds the dispatch lock. Returns (stop, key position, current record, record of the
        last key put or -1), as native.index_put: with FILE_FULL the caller rolls and goes on
        from that key position and current record."""
        header = (
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count, self.index_count
        )  # fmt: skip
        last_entry = min(self.index_num, self.index_count + key_to - key_from)
        mf = self.mapped_file
        if self._entries_pos + last_entry * ENTRY_BYTES > mf.reserved_to:  # ensure_reserved's own test, one frame fewer a pass
            mf.ensure_reserved(self._entries_pos + last_entry * ENTRY_BYTES)
        stop, pos, current, last_put, header = _index_put(
            self.mm, self.slot_num, self.index_num, header, keys, key_from, key_to, current_record
        )
        (  # _set_header, inline (every dispatch pass)
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
            self.index_count,
        ) = header  # fmt: skip
        return stop, pos, current, last_put

    def trailing_entries_at(self, phy_offset: int) -> int:
        """How many of the last entries belong to the message at `phy_offset` (its keys written here)."""
        n = 0
        for index in range(self.index_count - 1, 0, -1):
            _, phy, _, _ = _ENTRY.unpack_from(self.mm, self._entries_pos + index * ENTRY_BYTES)
            if phy != phy_offset:
                break
            n += 1
        return n

    def write_header(self) -> None:
        if self.mapped_file.reserved_to < HEADER_BYTES:
            self.mapped_file.ensure_reserved(HEADER_BYTES)  # a loaded file: reserved at its first write
        _HEADER.pack_into(
            self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
            self.hash_slot_count, self.index_count,
        )  # fmt: skip

    def is_time_matched(self, begin: int, end: int) -> bool:
        return not (self.end_timestamp < begin or self.begin_timestamp > end)

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commitlog offsets of entries with the key's hash stored in [begin, end], newest first."""
        out: list[int] = []
        h = key_hash(key)
        slot_pos = HEADER_BYTES + (h % self.slot_num) * SLOT_BYTES
        if not self.mapped_file.hold():
            return out
        try:
            (index,) = _SLOT.unpack_from(self.mm, slot_pos)
            count = self.index_count
            steps = 0
            while INVALID_INDEX < index < count and len(out) < max_num and steps < count:
                steps += 1  # a corrupt chain can never loop forever
                entry_pos = HEADER_BYTES + self.slot_num * SLOT_BYTES + index * ENTRY_BYTES
                entry_hash, phy, diff_s, prev = _ENTRY.unpack_from(self.mm, entry_pos)
                ts = self.begin_timestamp + diff_s * 1000
                # Entries keep second precision: a message stored within the last second of `end` is kept.
                if entry_hash == h and begin - 999 <= ts <= end:
                    out.append(phy)
                if prev <= INVALID_INDEX or prev >= index:
                    break
                index = prev
        finally:
            self.mapped_file.release()
        return out

    def flush(self) -> None:
        if self.mapped_file.hold():
            try:
                self.mm.flush()
            finally:
                self.mapped_file.release()

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        return self.mapped_file.destroy(interval_forcibly_ms)

    def close(self) -> None:
        self.mapped_file.close()


class _NamedMappedFile(MappedFile):
    """A MappedFile whose name is a timestamp, not a start offset."""

    def __init__(self, path: str, file_size: int, reservation: SpaceReservation) -> None:
        base = os.path.basename(path)
        tmp_name_ok = base.isdigit()
        assert tmp_name_ok, "index files are named by digits (yyyyMMddHHmmssSSS)"
        super().__init__(path, file_size, reservation=reservation)
        self.file_from_offset = 0


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
