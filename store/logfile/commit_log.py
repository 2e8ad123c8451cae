"""CommitLog: every topic's messages appended to one log of fixed-size mapped files.

A put hands the messages in RocketMQ's batch encoding to the encode kernel
(store._kernels.encode_batch, docs/native.md), which writes them into the file's write target
(the mapping, or the pool's write buffer); store.codec.message_codec stays the reference it is tested
against (tests/store/test_native_put.py).

Invariants:
- Appends happen only under `put_lock`; queue offsets (`topic_queue_table`) and
  store timestamps are assigned under it, so both grow in log order.
- A message never spans two files: when `size + END_FILE_MIN_BLANK_LENGTH` does not
  fit, the rest of the file becomes a blank end marker and the message goes to the
  next file.
- Nothing is written for a refused message (validation happens before the lock).
- The commitlog only appends what it is given: delay levels, timers and half messages are put
  hooks the store runs before (store/put/put_hook.py).
- Readers see only bytes below a file's read position.
- `damaged_ranges` (sorted, disjoint, persisted in damaged_ranges.json) lists byte ranges
  recovery found damaged with valid messages after them; dispatch and reads skip them.
  The tuple is replaced, never changed in place, so readers take it without a lock.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from core import Clock
from store import _kernels
from store._kernels import GroupFlush, Mapping
from store.codec.message import MessageInner
from store.codec.message_codec import (
    FIXED_PART_BYTES,
    MESSAGE_MAGIC_CODE,
    POS_STORE_TIMESTAMP,
    TOTAL_AND_MAGIC,
    TRANSACTION_PREPARED_TYPE,
    V6_EXTRA_BYTES,
    CheckResult,
    check_message,
    decode_message,
    enters_consume_queue,
    store_timestamp_at,
    write_blank_into,
)
from store.config import MessageStoreConfig
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.logfile.allocate_mapped_file_service import AllocateMappedFileService
from store.logfile.damaged_ranges import DamagedRanges
from store.logfile.mapped_file import OS_PAGE_SIZE, MappedFile, SelectMappedBufferResult, offset_to_file_name
from store.logfile.mapped_file_queue import FlushWindow, MappedFileQueue
from store.logfile.page_cache_window import PageCacheWindow
from store.logfile.write_through import WriteThrough
from store.native import BATCH_ITEM_HEAD, OFFSET_AND_SIZE, CheckedBatch, Stop
from store.status import AppendedHook, AppendMessageResult, AppendMessageStatus, EncodedItems, PutMessageResult, PutMessageStatus, RunItems

if TYPE_CHECKING:
    from store.logfile.transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")

# CommitLog.put_packed: the put lane's one call (its comment in CommitLog.__init__ says what it does).
PackedPut = Callable[[Any, str, bytes, int, bytes, int, int, int], "tuple[bytes, int, int, int, int, int] | None"]
_encode = _kernels.encode_batch  # called positionally under the lock (store.native.encode_batch names the arguments)
_FILE_FULL = int(Stop.FILE_FULL)
# _encode_locked's failures (negative, so a batch position is never mistaken for one).
NO_FILE = -1
TOO_LARGE = -2
# What a message's stored form adds at most to its batch item: the fixed fields with two IPv6 hosts.
_STORED_EXTRA_BYTES = FIXED_PART_BYTES + 2 * V6_EXTRA_BYTES
BLANK_MARKER_BYTES = 8  # TOTALSIZE and the blank magic code at a file's end
_FAILED = {NO_FILE: PutMessageStatus.CREATE_MAPPED_FILE_FAILED, TOO_LARGE: PutMessageStatus.MESSAGE_ILLEGAL}


class CommitLog:
    def __init__(
        self,
        config: MessageStoreConfig,
        allocate_service: AllocateMappedFileService | None = None,
        transient_store_pool: TransientStorePool | None = None,
        clock: Clock | None = None,
        reservation: SpaceReservation = DEFAULT_RESERVATION,
    ) -> None:
        self.config = config
        # Store timestamps come from the wall clock, or from `clock` when one is given (tests pin it).
        self.clock = clock
        self.file_size = config.mapped_file_size_commit_log_bytes
        window = PageCacheWindow(config.page_cache_window_bytes) if config.page_cache_window_bytes else None
        self.mapped_file_queue = MappedFileQueue(
            config.commit_log_dir(),
            self.file_size,
            allocate_service,
            functools.partial(MappedFile, reservation=reservation),
            page_cache_window=window,
            unmap_before_flush=True,
        )
        self.transient_store_pool = transient_store_pool
        # The group commit's native flusher (GroupCommitService sets it): ahead of the queue's flushed position,
        # which follows it in steps.
        self.native_flushes: GroupFlush | None = None
        self.put_lock = threading.Lock()
        self.write_through = WriteThrough(config.write_through_min_bytes)  # large batches: one pwrite each
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.store_host = config.store_host_bytes()
        self.delay_levels_ms = config.delay_levels_ms()
        self.begin_time_in_lock_ms = 0  # non-zero while a put holds the lock (OS_PAGECACHE_BUSY probe)
        self.confirm_offset = -1  # slave mode: the offset confirmed by the master
        self._last_file: MappedFile | None = None
        # The encode kernel's out buffer (offset and size per message), used under put_lock only.
        self._out = bytearray(OFFSET_AND_SIZE.size * config.max_batch_messages)
        # put_packed(batch, topic, topic_bytes, queue_id, born_host, max_body, max_count, max_props): put_batch's common
        # case, a batch in RocketMQ's encoding to one queue, checked and appended in one kernel call
        # (store/_native/put_lane_binding.h) -> (offsets, first queue offset, store timestamp, end offset, messages,
        # stored bytes) as put_batch's EncodedItems would hold them; None when it declines, having changed nothing (the
        # lock is held, no last file, a write buffer, a reservation or a roll to make, a batch the check refuses or with
        # a dedup id, a store clock): put_batch then answers. It reads and writes this object's put_lock, _last_file,
        # topic_queue_table, store_host, file_size, begin_time_in_lock_ms and clock, and the last file's write_buffer,
        # wrote_position, reserved_to, file_from_offset, mm, committed_position and store_timestamp, as put_batch does.
        self.put_packed: PackedPut = functools.partial(_kernels.put_packed, self)
        self.damaged = DamagedRanges(os.path.join(config.store_path_root_dir, "damaged_ranges.json"))

    # Loading ---------------------------------------------------------------------------

    def load(self) -> bool:
        ok = self.mapped_file_queue.load()
        log.info("commitlog load %s, %d files", "ok" if ok else "failed", len(self.mapped_file_queue.mapped_files))
        if ok:
            first = self.mapped_file_queue.get_first_mapped_file()
            self.damaged.load(first.file_from_offset if first is not None else 0)
        return ok

    # Damaged ranges (store/logfile/damaged_ranges.py) ------------------------------------

    @property
    def damaged_ranges(self) -> tuple[tuple[int, int], ...]:
        return self.damaged.ranges

    def add_damaged_range(self, start: int, end: int) -> bool:
        """Record [start, end) as damaged and persist the table; False when it was already known."""
        return self.damaged.add(start, end)

    def damaged_range_end(self, offset: int) -> int | None:
        """The end of the damaged range holding `offset`, None when `offset` is not damaged."""
        return self.damaged.end_of(offset)

    def next_damaged_start(self, offset: int) -> int | None:
        """The start of the first damaged range at or after `offset`, None when there is none."""
        return self.damaged.next_start(offset)

    def damaged_bytes(self) -> int:
        return self.damaged.byte_count()

    # Putting ---------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The time a put stores now (`clock`'s when one is given)."""
        return int(time.time() * 1000) if self.clock is None else self.clock.now_ms()

    def put_message(self, msg: MessageInner) -> PutMessageResult:
        """Append one message (the caller has validated it). Never raises for I/O trouble."""
        return self.put_messages((msg,))

    def put_messages(self, msgs: Sequence[MessageInner], on_appended_locked: AppendedHook | None = None) -> PutMessageResult:
        """Append messages under one lock acquisition; all or, on a failure mid-way, a prefix.

        `on_appended_locked(items)`, when given, runs under the put lock right after the append with
        the items of the messages appended (every one, or the prefix), so what it records follows
        the log's order (store.state.state_log applies state changes this way).

        The messages' batch encoding is built before the lock (`_pack`); under the lock the
        encode kernel writes each run of messages sharing topic, queue and header fields straight
        into the mapped file with their queue offsets, physical offsets and the store time. The
        items are RunItems: the kernel's offsets and sizes, an AppendMessageResult built when asked.
        """
        if len(msgs) == 1:
            return self._put_one(msgs[0], on_appended_locked)
        batch, runs = self._pack(msgs)
        offsets = bytearray()
        starts: list[int] = []
        queue_offsets: list[int] = []
        queue_ids: list[int] = []
        status = PutMessageStatus.PUT_OK
        table = self.topic_queue_table
        with self.put_lock:
            self.begin_time_in_lock_ms = wall = int(time.time() * 1000)
            try:
                now = wall if self.clock is None else self.clock.now_ms()
                pos = 0
                for first, count in runs:
                    starts.append(len(offsets) >> 4)
                    queue_offsets.append(table.get((first.topic, first.queue_id), 0) if enters_consume_queue(first.sys_flag) else 0)
                    queue_ids.append(first.queue_id)
                    pos = self._encode_locked(batch, pos, count, first, now, offsets)
                    if pos < 0:
                        status = _FAILED[pos]
                        break
                items = RunItems(bytes(offsets), (starts, queue_offsets, queue_ids), now, self.store_host)
                if on_appended_locked is not None and len(items):
                    on_appended_locked(items)
            finally:
                self.begin_time_in_lock_ms = 0
        return PutMessageResult(status, items=items)

    def _put_one(self, msg: MessageInner, on_appended_locked: AppendedHook | None = None) -> PutMessageResult:
        """put_messages for one message, without the runs."""
        body, tail = msg.body, msg.tail
        batch = b"".join((BATCH_ITEM_HEAD.pack(20 + len(body) + len(tail), 0, 0, msg.flag, len(body)), body, tail))
        items: list[AppendMessageResult] = []
        with self.put_lock:
            self.begin_time_in_lock_ms = wall = int(time.time() * 1000)
            try:
                pos = self._encode_locked(batch, 0, 1, msg, wall if self.clock is None else self.clock.now_ms(), items)
                if on_appended_locked is not None and items:
                    on_appended_locked(items)
            finally:
                self.begin_time_in_lock_ms = 0
        if pos < 0:
            return PutMessageResult(_FAILED[pos])
        return PutMessageResult(PutMessageStatus.PUT_OK, items=items)

    def put_batch(self, checked: CheckedBatch, head: RunHead, on_appended_locked: AppendedHook | None = None) -> PutMessageResult:
        """Append a batch check_batch accepted, every message to `head`'s topic and queue, as it came.

        No per-message Python work: the items are the kernel's offsets and sizes (EncodedItems).
        `on_appended_locked` as put_messages runs it.
        """
        offsets = bytearray()
        with self.put_lock:
            self.begin_time_in_lock_ms = wall = int(time.time() * 1000)
            try:
                now = wall if self.clock is None else self.clock.now_ms()
                queued = enters_consume_queue(head.sys_flag)
                first = self.topic_queue_table.get((head.topic, head.queue_id), 0) if queued else 0
                crcs = memoryview(checked.crcs) if len(checked.crcs) == 4 * checked.messages else None
                pos = self._encode_locked(checked.data, 0, checked.messages, head, now, offsets, crcs, queued)
                items = EncodedItems(bytes(offsets), first, head.queue_id, now, self.store_host)
                if on_appended_locked is not None and len(items):
                    on_appended_locked(items)
            finally:
                self.begin_time_in_lock_ms = 0
        return PutMessageResult(_FAILED[pos] if pos < 0 else PutMessageStatus.PUT_OK, items=items)

    def _pack(self, msgs: Sequence[MessageInner]) -> tuple[bytes, list[tuple[MessageInner, int]]]:
        """The messages in RocketMQ's batch encoding, and its runs: (first message, count) of
        consecutive messages whose common fields (`_run_key`) agree, one kernel call each."""
        parts: list[bytes | bytearray | memoryview] = []
        runs: list[tuple[MessageInner, int]] = []
        first: MessageInner | None = None
        first_key: tuple[object, ...] = ()
        count = 0
        head = BATCH_ITEM_HEAD.pack
        for msg in msgs:
            body, tail = msg.body, msg.tail
            parts += (head(20 + len(body) + len(tail), 0, 0, msg.flag, len(body)), body, tail)
            key = _run_key(msg)
            # A prepared or rolled-back message (bit 0x4 of both types) is a run of its own: each takes queue offset 0.
            if key == first_key and not msg.sys_flag & TRANSACTION_PREPARED_TYPE:
                count += 1
                continue
            if first is not None:
                runs.append((first, count))
            first, first_key, count = msg, key, 1
        if first is not None:
            runs.append((first, count))
        return b"".join(parts), runs

    def _encode_locked(
        self, batch: bytes, pos: int, n: int, head: RunHead, now: int, into: list[AppendMessageResult] | bytearray,
        crcs: memoryview | None = None, queued: bool | None = None,
    ) -> int:  # fmt: skip
        """Append `n` batch items from `pos` to `head`'s topic and queue; the caller holds `put_lock`.

        Each result goes `into` a list (AppendMessageResult) or a bytearray (the kernel's offset
        and size pairs); `crcs` are the items' BODYCRCs when a check computed them (CheckedBatch).
        `queued` is enters_consume_queue(head.sys_flag) when the caller has it already.
        Returns the batch position after the items; NO_FILE when no file could be created or its
        space not reserved (the store then answers DISK_FULL: store/disk/space_reservation.py),
        TOO_LARGE when an item does not fit an empty file (validation keeps such out).
        """
        key = (head.topic, head.queue_id)
        # A prepared or rolled-back transaction message gets no queue entry, so it takes queue offset 0
        # and leaves the queue's next offset alone (DefaultAppendMessageCallback.doAppend): one at a time.
        if queued is None:
            queued = enters_consume_queue(head.sys_flag)
        queue_offset = self.topic_queue_table.get(key, 0) if queued else 0
        out, file_size, host = self._out, self.file_size, self.store_host
        while n > 0:
            mf = self._last_file
            if mf is None or mf.wrote_position >= file_size:
                mf = self._roll_locked()
                if mf is None:
                    return NO_FILE
            start = mf.wrote_position
            # Blocks for what these items can take at most (each item's stored form is at most its batch
            # form plus the topic and the fixed fields) and the end marker: the kernel writes no further.
            need = start + len(batch) - pos + n * (len(head.topic_bytes) + _STORED_EXTRA_BYTES) + BLANK_MARKER_BYTES
            # A large batch that fits the file whatever its stored size is written with one pwrite (store/logfile/write_through.py).
            through = need <= file_size and self.write_through.takes(mf, need - start)
            if need > mf.reserved_to:  # also when pooled: the commit's pwrite then never meets a full disk
                reserved_before = mf.reserved_to
                if not mf.try_reserve(min(need, file_size), strict=True):
                    return NO_FILE
                if not through:  # what a pwrite writes needs no page faulted in first
                    self._reserved_ahead(mf, max(reserved_before, need))
            if through:
                stop, count, pos, end = self._encode_through_locked(
                    mf, start, need, batch, pos, n if queued else 1, head, now, queue_offset, crcs
                )
            else:
                target = mf.write_buffer if mf.write_buffer is not None else mf.mm  # mf.write_target, written out (every put)
                stop, count, pos, end = _encode(
                    target, start, file_size, batch, pos, out, n if queued else 1, head.topic_bytes, head.queue_id, head.sys_flag,
                    head.born_timestamp, head.born_host, now, host, head.reconsume_times, head.prepared_transaction_offset,
                    queue_offset, mf.file_from_offset + start, crcs,
                )  # fmt: skip
            if count:
                if crcs is not None:
                    crcs = crcs[4 * count :]
                mf.mark_written(end)
                mf.store_timestamp = now
                if isinstance(into, bytearray):  # a batch: the kernel's offsets and sizes as they are
                    into += memoryview(out)[: 16 * count]
                else:
                    _collect(into, count, mf.file_from_offset + start, end - start, queue_offset, head.queue_id, now, host)
                n -= count
                if queued:
                    queue_offset += count
                    self.topic_queue_table[key] = queue_offset
            if stop == _FILE_FULL:
                if start == 0 and count == 0:
                    return TOO_LARGE
                # The end marker's TOTALSIZE is the rest of the file, so a reader skips to the next file.
                write_blank_into(mf.write_target, end, file_size - end)
                mf.mark_written(file_size)
                if self._roll_locked() is None:
                    return NO_FILE
        return pos

    def _encode_through_locked(
        self, mf: MappedFile, start: int, need: int, batch: bytes, pos: int, n: int, head: RunHead, now: int, queue_offset: int,
        crcs: memoryview | None,
    ) -> tuple[int, int, int, int]:  # fmt: skip
        """_encode's answer for items encoded into the write-through buffer and written at `start` of `mf` (the file
        position where the mapping would have had them); `need` bounds their stored form, so they all fit."""
        buffer = self.write_through.buffer()
        stop, count, pos, length = _encode(
            buffer, 0, need - start, batch, pos, self._out, n, head.topic_bytes, head.queue_id, head.sys_flag,
            head.born_timestamp, head.born_host, now, self.store_host, head.reconsume_times, head.prepared_transaction_offset,
            queue_offset, mf.file_from_offset + start, crcs,
        )  # fmt: skip
        assert stop != _FILE_FULL, f"a batch bounded by {need - start} bytes did not fit them"
        if count and not self.write_through.write_locked(mf, start, length):
            mf.mm[start : start + length] = buffer[:length]  # the file refused the write: the mapping takes the bytes
        return stop, count, pos, start + length

    def _reserved_ahead(self, mf: MappedFile, start: int) -> None:
        """Have the allocate service prefault what `mf` reserved past `start` (ahead of this put)."""
        service = self.mapped_file_queue.allocate_service
        if service is not None and mf.reserved_to > start:
            service.prefault_reserved(mf, start - start % OS_PAGE_SIZE)

    def _roll_locked(self) -> MappedFile | None:
        """The next file to append to; the caller holds `put_lock`."""
        mfq = self.mapped_file_queue
        mf = mfq.get_last_mapped_file_or_create(0)
        self._last_file = mf
        return mf

    def order_next_file(self) -> None:
        """Have the allocate service create the file after the last one now (the store's start), so the
        first roll finds it ready instead of waiting under the put lock while it is created; each roll
        then orders the one after it (RocketMQ orders only at a roll: MappedFileQueue.getLastMappedFile).
        A log with no file yet gets its first one at its first put."""
        mfq = self.mapped_file_queue
        last = mfq.get_last_mapped_file()
        if last is not None and mfq.allocate_service is not None:
            next_offset = last.file_from_offset + self.file_size
            mfq.allocate_service.order(os.path.join(mfq.store_path, offset_to_file_name(next_offset)), self.file_size)

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
                try:
                    mf.append_bytes(chunk)
                except OSError as exc:
                    log.error("cannot append replicated bytes at %d: %s", start_offset, exc)
                    return False
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

    def look_message_by_offset(self, offset: int) -> dict[str, Any] | None:
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
        return check_message(mf.mm, pos, min(mf.get_read_position(), mf.data_end), check_crc, decode, self.delay_levels_ms)

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

    def flush(self, least_pages: int = 0, trim: bool = True) -> bool:
        """Flush what is committed (`least_pages`: only when that many pages are dirty); True when nothing moved.
        `trim` False leaves the page-cache window's trim to `trim_page_cache` (the group commit: after its acks)."""
        return self.mapped_file_queue.flush(least_pages, trim)

    def trim_page_cache(self) -> int:
        """Drop flushed pages past the page-cache window behind the flush position (see `flush`'s `trim`)."""
        return self.mapped_file_queue.trim_page_cache()

    def flush_window(self) -> FlushWindow | None:
        """The file holding the flushed position, lent to the group commit's native flusher (MappedFileQueue)."""
        return self.mapped_file_queue.flush_window()

    def window_flushed(self, window: FlushWindow, flushed: int, dropped_to: int) -> None:
        """The lent file given back, flushed below log offset `flushed` (MappedFileQueue.window_flushed)."""
        self.mapped_file_queue.window_flushed(window, flushed, dropped_to)

    def commit(self, least_pages: int = 0) -> bool:
        return self.mapped_file_queue.commit(least_pages)

    def flushed_where(self) -> int:
        """Every byte of the log below it is on disk: the queue's flushed position, or the native flusher's
        when that is ahead (never past the log's end: a cut at recovery moves the end back before it resets)."""
        where = self.mapped_file_queue.flushed_where
        native = self.native_flushes
        if native is not None:
            ahead = native.flushed
            if ahead > where:
                where = min(ahead, self.get_max_offset())
        return where

    # Recovery helpers -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Cut the log at `offset` (after recovery found the last valid message there)."""
        with self.put_lock:
            self.mapped_file_queue.truncate_dirty_files(offset)
            self.mapped_file_queue.set_positions(offset)
            self._last_file = self.mapped_file_queue.get_last_mapped_file()
            self.write_through.close()  # the cut may have removed the file it wrote last
        self.damaged.cut_at(offset)

    def shutdown(self) -> None:
        with self.put_lock:
            self.write_through.close()
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()


class RunHead(Protocol):
    """The fields a run of messages shares in one encode call (MessageInner has them all)."""

    topic: str
    topic_bytes: bytes
    queue_id: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int


@dataclass(slots=True)
class BatchHead:
    """The RunHead of a batch appended as it came (put_batch)."""

    topic: str
    topic_bytes: bytes
    queue_id: int
    born_timestamp: int
    born_host: bytes
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


# The fields a run shares (RunHead's but the topic name, which topic_bytes stands for).
_run_key = operator.attrgetter(
    "queue_id", "topic_bytes", "born_timestamp", "sys_flag", "born_host", "reconsume_times", "prepared_transaction_offset"
)


def _collect(
    into: list[AppendMessageResult], count: int, first_offset: int, written: int, queue_offset: int, queue_id: int, now: int,
    host: bytes,
) -> None:  # fmt: skip
    """Record the one message a single put's kernel call just wrote as its AppendMessageResult (a batch's offsets and
    sizes are appended to its bytearray by the encode loop itself)."""
    assert count == 1, "a list collects a single put"
    into.append(AppendMessageResult(AppendMessageStatus.PUT_OK, first_offset, written, now, queue_offset, queue_id, host))


def _last_store_timestamp(buf: bytearray | Mapping, start: int, end: int) -> int:
    """STORETIMESTAMP of the last whole message in buf[start:end], 0 when there is none."""
    ts = 0
    pos = start
    while pos + POS_STORE_TIMESTAMP + 8 <= end:
        total, magic = TOTAL_AND_MAGIC.unpack_from(buf, pos)
        if magic != MESSAGE_MAGIC_CODE or total < FIXED_PART_BYTES or pos + total > end:
            break
        ts = store_timestamp_at(buf, pos)
        pos += total
    return ts
