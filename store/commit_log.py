"""CommitLog: every topic's messages appended to one log of fixed-size mapped files.

Invariants:
- Appends happen only under `put_lock`; queue offsets (`topic_queue_table`) and
  store timestamps are assigned under it, so both grow in log order.
- A message never spans two files: when `size + END_FILE_MIN_BLANK_LENGTH` does not
  fit, the rest of the file becomes a blank end marker and the message goes to the
  next file.
- Nothing is written for a refused message (validation happens before the lock).
- Readers see only bytes below a file's read position.
- `damaged_ranges` (sorted, disjoint, persisted in damaged_ranges.json) lists byte ranges
  recovery found damaged with valid messages after them; dispatch and reads skip them.
  The tuple is replaced, never changed in place, so readers take it without a lock.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
import zlib
from typing import TYPE_CHECKING

from store.allocate_mapped_file_service import AllocateMappedFileService
from store.config import MessageStoreConfig
from store.errors import MetadataCorrupt
from store.json_file import read_json, write_json_atomically
from store.mapped_file import MappedFile, SelectMappedBufferResult
from store.mapped_file_queue import MappedFileQueue
from store.message import PROPERTY_DELAY, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC, MessageInner
from store.message_codec import (
    END_FILE_MIN_BLANK_LENGTH,
    HEADER,
    HEADER_BYTES,
    MESSAGE_MAGIC_CODE,
    POS_QUEUE_OFFSET,
    POS_STORE_TIMESTAMP,
    TOTAL_AND_MAGIC,
    CheckResult,
    check_message,
    decode_message,
    write_blank_into,
)
from store.status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from store.transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")

_QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")  # fields 6 and 7, adjacent
_STORE_TIMESTAMP = struct.Struct(">q")


class CommitLog:
    def __init__(
        self,
        config: MessageStoreConfig,
        allocate_service: AllocateMappedFileService | None = None,
        transient_store_pool: TransientStorePool | None = None,
    ) -> None:
        self.config = config
        self.file_size = config.mapped_file_size_commit_log_bytes
        self.mapped_file_queue = MappedFileQueue(config.commit_log_dir(), self.file_size, allocate_service)
        self.transient_store_pool = transient_store_pool
        self.put_lock = threading.Lock()
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.store_host = config.store_host_bytes()
        self.delay_levels_ms = config.delay_levels_ms()
        self.begin_time_in_lock_ms = 0  # non-zero while a put holds the lock (OS_PAGECACHE_BUSY probe)
        self.confirm_offset = -1  # slave mode: the offset confirmed by the master
        self._last_file: MappedFile | None = None
        self.damaged_ranges: tuple[tuple[int, int], ...] = ()
        self._damaged_path = os.path.join(config.store_path_root_dir, "damaged_ranges.json")

    # Loading ---------------------------------------------------------------------------

    def load(self) -> bool:
        ok = self.mapped_file_queue.load()
        log.info("commitlog load %s, %d files", "ok" if ok else "failed", len(self.mapped_file_queue.mapped_files))
        if ok:
            self._load_damaged_ranges()
        return ok

    # Damaged ranges ----------------------------------------------------------------------

    def _load_damaged_ranges(self) -> None:
        try:
            data = read_json(self._damaged_path)
        except MetadataCorrupt as exc:
            log.error("%s; recovery finds the damaged ranges it scans again", exc)
            return
        if not isinstance(data, dict) or not isinstance(data.get("damaged"), list):
            return
        first = self.mapped_file_queue.get_first_mapped_file()
        low = first.file_from_offset if first is not None else 0
        ranges = [(int(a), int(b)) for a, b in data["damaged"] if int(b) > max(low, int(a))]
        self.damaged_ranges = tuple(sorted(ranges))
        for start, end in self.damaged_ranges:
            log.error("commitlog bytes [%d, %d) are damaged (found by an earlier recovery); they are skipped", start, end)

    def add_damaged_range(self, start: int, end: int) -> bool:
        """Record [start, end) as damaged and persist the table; False when it was already known."""
        assert start < end, "a damaged range holds at least one byte"
        if any(a <= start and end <= b for a, b in self.damaged_ranges):
            return False
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.damaged_ranges, (start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self._set_damaged_ranges(tuple(merged))
        return True

    def _set_damaged_ranges(self, ranges: tuple[tuple[int, int], ...]) -> None:
        if ranges == self.damaged_ranges:
            return
        self.damaged_ranges = ranges
        write_json_atomically(self._damaged_path, {"damaged": [list(r) for r in ranges]})

    def damaged_range_end(self, offset: int) -> int | None:
        """The end of the damaged range holding `offset`, None when `offset` is not damaged."""
        ranges = self.damaged_ranges
        if not ranges:
            return None
        i = bisect.bisect_right(ranges, (offset, 1 << 62)) - 1
        if i >= 0 and ranges[i][0] <= offset < ranges[i][1]:
            return ranges[i][1]
        return None

    def next_damaged_start(self, offset: int) -> int | None:
        """The start of the first damaged range at or after `offset`, None when there is none."""
        ranges = self.damaged_ranges
        if not ranges:
            return None
        i = bisect.bisect_left(ranges, (offset, -1))
        return ranges[i][0] if i < len(ranges) else None

    def damaged_bytes(self) -> int:
        return sum(b - a for a, b in self.damaged_ranges)

    # Putting ---------------------------------------------------------------------------

    def put_message(self, msg: MessageInner) -> PutMessageResult:
        """Append one message (the caller has validated it). Never raises for I/O trouble."""
        return self.put_messages((msg,))

    def put_messages(self, msgs: tuple[MessageInner, ...] | list[MessageInner]) -> PutMessageResult:
        """Append messages under one lock acquisition; all or, on a failure mid-way, a prefix.

        Each message's bytes are built before the lock (`_encode_image`); under the lock
        only the queue offset, physical offset and store time are patched in.
        """
        if len(msgs) == 1:
            return self._put_one(msgs[0])
        images = [self._encode_image(m) for m in msgs]
        items: list[AppendMessageResult] = []
        status = PutMessageStatus.PUT_OK
        with self.put_lock:
            self.begin_time_in_lock_ms = now = int(time.time() * 1000)
            try:
                for msg, image in zip(msgs, images, strict=True):
                    item = self._append_locked(msg, image, now)
                    if item is None:
                        status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
                        break
                    items.append(item)
            finally:
                self.begin_time_in_lock_ms = 0
        return PutMessageResult(status, items=items)

    def _put_one(self, msg: MessageInner) -> PutMessageResult:
        """put_messages for one message, without the batch's lists."""
        image = self._encode_image(msg)
        with self.put_lock:
            self.begin_time_in_lock_ms = now = int(time.time() * 1000)
            try:
                item = self._append_locked(msg, image, now)
            finally:
                self.begin_time_in_lock_ms = 0
        if item is None:
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED)
        return PutMessageResult(PutMessageStatus.PUT_OK, items=[item])

    def _encode_image(self, msg: MessageInner) -> bytes:
        """The message's stored bytes with queue offset, physical offset and store time left zero."""
        if PROPERTY_DELAY in msg.properties and msg.topic != SCHEDULE_TOPIC:
            self._rewrite_for_delay(msg)
        body = msg.body
        tail = msg.tail
        body_len = len(body)
        header = HEADER.pack(
            HEADER_BYTES + body_len + len(tail), MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, msg.queue_id,
            msg.flag, 0, 0, msg.sys_flag, msg.born_timestamp, msg.born_host, 0, self.store_host, msg.reconsume_times,
            msg.prepared_transaction_offset, body_len,
        )  # fmt: skip
        return b"".join((header, body, tail))

    def _append_locked(self, msg: MessageInner, image: bytes, store_ts: int) -> AppendMessageResult | None:
        """Append one encoded message; the caller holds `put_lock`. None when no file could be created."""
        total = len(image)
        mf = self._last_file
        if mf is None or mf.wrote_position >= self.file_size:
            mf = self._roll_locked()
            if mf is None:
                return None
        pos = mf.wrote_position
        if total + END_FILE_MIN_BLANK_LENGTH > self.file_size - pos:
            # The end marker's TOTALSIZE is the rest of the file, so a reader skips to the next file.
            write_blank_into(mf.write_target, pos, self.file_size - pos)
            mf.mark_written(self.file_size)
            mf = self._roll_locked()
            if mf is None:
                return None
            pos = 0
        key = (msg.topic, msg.queue_id)
        queue_offset = self.topic_queue_table.get(key, 0)
        phys = mf.file_from_offset + pos
        target = mf.write_target
        target[pos : pos + total] = image
        _QUEUE_AND_PHYSICAL_OFFSET.pack_into(target, pos + POS_QUEUE_OFFSET, queue_offset, phys)
        _STORE_TIMESTAMP.pack_into(target, pos + POS_STORE_TIMESTAMP, store_ts)
        mf.mark_written(pos + total)
        mf.store_timestamp = store_ts
        self.topic_queue_table[key] = queue_offset + 1
        return AppendMessageResult(AppendMessageStatus.PUT_OK, phys, total, store_ts, queue_offset, msg.queue_id, self.store_host)

    def _roll_locked(self) -> MappedFile | None:
        """The next file to append to; the caller holds `put_lock`."""
        mfq = self.mapped_file_queue
        mf = mfq.get_last_mapped_file_or_create(0)
        if mf is not None and not mf.reserved and not mf.reserve():
            # A file loaded without its space (made sparse by an older version) is not written on a full disk.
            if mfq.no_space_listener is not None:
                mfq.no_space_listener(mf.path)
            mf = None
        self._last_file = mf
        return mf

    def _rewrite_for_delay(self, msg: MessageInner) -> None:
        """Send a delayed message to SCHEDULE_TOPIC_XXXX, queue level-1 (RocketMQ's putMessage)."""
        try:
            level = int(msg.properties[PROPERTY_DELAY])
        except ValueError:
            level = 0
        if level <= 0:
            del msg.properties[PROPERTY_DELAY]
            msg.refresh()
            return
        level = min(level, len(self.delay_levels_ms))
        msg.properties[PROPERTY_DELAY] = str(level)
        msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
        msg.properties[PROPERTY_REAL_QID] = str(msg.queue_id)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        msg.refresh()

    def append_data(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Append raw log bytes at `start_offset` (a slave replicating its master).

        The bytes must continue the log exactly where it ends, or, on an empty log, start
        at a file boundary (a master whose first files were deleted). They may span files
        only at file boundaries the master also had. The store time of the last whole
        message is recorded so the checkpoint advances as on a master.
        """
        with self.put_lock:
            empty = self.mapped_file_queue.get_last_mapped_file() is None
            if start_offset != self.get_max_offset() and not (empty and start_offset % self.file_size == 0):
                return False
            view = memoryview(data)
            while view:
                mf = self.mapped_file_queue.get_last_mapped_file_or_create(start_offset)
                if mf is None:
                    return False
                self._last_file = mf
                chunk = view[: mf.remaining()]
                pos = mf.wrote_position
                mf.append_bytes(chunk)
                ts = _last_store_timestamp(mf.write_target, pos, pos + len(chunk))
                if ts:
                    mf.store_timestamp = ts
                view = view[len(chunk) :]
                start_offset += len(chunk)
            return True

    # Reading ---------------------------------------------------------------------------

    def get_min_offset(self) -> int:
        first = self.mapped_file_queue.get_first_mapped_file()
        if first is None:
            return -1
        if first.is_available():
            return first.file_from_offset
        return self.roll_next_file(first.file_from_offset)

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - (offset % self.file_size)

    def get_data(self, offset: int) -> SelectMappedBufferResult | None:
        """A held view from `offset` to the end of what is readable in its file."""
        return self.mapped_file_queue.select(offset, None)

    def get_message(self, offset: int, size: int) -> SelectMappedBufferResult | None:
        return self.mapped_file_queue.select(offset, size)

    def look_message_by_offset(self, offset: int) -> dict | None:
        """Decode the message at `offset` after checking its size, magic and CRC."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None or not mf.hold():
            return None
        try:
            pos = offset - mf.file_from_offset
            result = self.check_at(mf, pos, decode=False)
            if result.outcome.value != "MESSAGE":
                return None
            return decode_message(mf.mm, pos)
        finally:
            mf.release()

    def check_at(self, mf: MappedFile, pos: int, decode: bool = True, check_crc: bool = True) -> CheckResult:
        return check_message(mf.mm, pos, mf.get_read_position(), check_crc, decode, self.delay_levels_ms)

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the message at `offset`, or -1 when it is gone."""
        res = self.get_message(offset, size)
        if res is None:
            return -1
        try:
            return int.from_bytes(res.view[56:64], "big", signed=True)
        finally:
            res.release()

    # Flush helpers ----------------------------------------------------------------------

    def flush(self, least_pages: int = 0) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def commit(self, least_pages: int = 0) -> bool:
        return self.mapped_file_queue.commit(least_pages)

    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    # Recovery helpers -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Cut the log at `offset` (after recovery found the last valid message there)."""
        with self.put_lock:
            self.mapped_file_queue.truncate_dirty_files(offset)
            self.mapped_file_queue.set_positions(offset)
            self._last_file = self.mapped_file_queue.get_last_mapped_file()
        # Bytes past the cut will hold new messages: no damaged range may cover them.
        self._set_damaged_ranges(tuple((a, min(b, offset)) for a, b in self.damaged_ranges if a < offset))

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()


def _last_store_timestamp(buf: object, start: int, end: int) -> int:
    """STORETIMESTAMP of the last whole message in buf[start:end], 0 when there is none."""
    ts = 0
    pos = start
    while pos + POS_STORE_TIMESTAMP + 8 <= end:
        total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)  # type: ignore[arg-type]
        if magic != MESSAGE_MAGIC_CODE or total <= 0 or pos + total > end:
            break
        (ts,) = _STORE_TIMESTAMP.unpack_from(buf, pos + POS_STORE_TIMESTAMP)  # type: ignore[arg-type]
        pos += total
    return ts
