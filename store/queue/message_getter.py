"""MessageGetter: RocketMQ's getMessage and getOffsetInQueueByTime over the consume queues.

getMessage walks consume queue entries from `offset`, filters by tag hash, then by the exact
tag, then by an SQL92 expression over the message's properties (store.filter.message_filter), and copies
the messages out of the commitlog until a transfer limit is hit:
count and bytes, with tighter limits when the data is probably on disk (more than
`access_message_in_memory_max_ratio_percent` of memory, or more than `page_cache_window_bytes`, behind
the log's end).
At most `scan_entries(max_count)` entries are examined per call (RocketMQ's
max(maxFilterMessageCount, maxMsgNums * 20) bytes of consume queue, with the byte count the
setting `max_filter_message_size_bytes`), so a pull over a queue full of other tags is bounded too.

The walk is the native gather kernel (store.native.gather, docs/native.md) over the queue's
entries and the readable bytes of the commitlog files it meets; store.queue.reference_getter keeps
the same walk in Python as the reference the tests compare it with.

An entry is served only when it points inside the log at the start of a message of its size
(TOTALSIZE and MAGICCODE checked); one that does not is damaged: it is skipped alone and
counted, and the entries after it are served, so `next_begin_offset` never passes a readable
message. An entry whose message starts in a damaged commitlog range is skipped like a gap.
Only a message whose file is gone (below the log's minimum offset, or a file that cannot be
read) skips the rest of its file, as RocketMQ does.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from store import native
from store.codec.message_codec import MESSAGE_MAGIC_CODE, TOTAL_AND_MAGIC, message_length
from store.logfile.mapped_file import MappedFile
from store.native import META, Gathered, GatherLimits, GatherState, Stop
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY, ConsumeQueue, is_filler
from store.queue.get_message_result import Filter, GetMessageResult
from store.status import GetMessageStatus

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.logfile.commit_log import CommitLog
    from store.logfile.mapped_file_queue import MappedFileQueue
    from store.stats.store_stats_service import StoreStatsService

DAMAGE_LOG_INTERVAL_S = 60.0  # at most one ERROR line per interval for damaged consume-queue entries

log = logging.getLogger("tidemq.store")


def total_physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class HeldFiles:
    """The commitlog files one pull reads, each held (a reference, its readable bytes exported)
    until `release()`: a file deleted meanwhile is neither closed nor unmapped under the kernel."""

    __slots__ = ("_queue", "_files", "segments")

    def __init__(self, queue: MappedFileQueue) -> None:
        self._queue = queue
        self._files: list[MappedFile] = []
        self.segments: list[tuple[int, memoryview]] = []  # (file start offset, readable bytes)

    def add(self, phy: int, size: int) -> bool:
        """Hold the file of the message at `phy` when it can be read there, as CommitLog.get_message
        would select it; False when the file is gone, shut down or shorter than phy + size."""
        mf = self._queue.find_mapped_file_by_offset(phy)
        if mf is None:
            return False
        pos = phy - mf.file_from_offset
        readable = mf.get_read_position()
        if pos < 0 or size <= 0 or pos + size > readable or not mf.hold():
            return False
        try:
            view = memoryview(mf.mm)[:readable]
        except ValueError:  # closed by a forced deletion between the position check and the hold
            mf.release()
            return False
        self._files.append(mf)
        self.segments.append((mf.file_from_offset, view))
        return True

    def view(self, phy: int, size: int) -> memoryview:
        """The bytes of the message at `phy` in a file held (the kernel found it there)."""
        for base, data in self.segments:
            if base <= phy and phy - base + size <= len(data):
                return data[phy - base : phy - base + size]
        raise AssertionError(f"no held file holds the message at {phy}")

    def release(self) -> None:
        for _, view in self.segments:
            view.release()
        for mf in self._files:
            mf.release()
        self.segments = []
        self._files = []


class MessageGetter:
    def __init__(
        self,
        cfg: MessageStoreConfig,
        commit_log: CommitLog,
        stats: StoreStatsService,
        find_consume_queue: Callable[[str, int], ConsumeQueue | None],
    ) -> None:
        self.commit_log = commit_log
        self.stats = stats
        self.find_consume_queue = find_consume_queue
        self.memory_window = total_physical_memory_bytes() * cfg.access_message_in_memory_max_ratio_percent // 100
        if cfg.page_cache_window_bytes:  # further behind, the flushed log was dropped from the page cache
            self.memory_window = min(self.memory_window, cfg.page_cache_window_bytes)
        self.limits_memory = (cfg.max_transfer_count_on_message_in_memory, cfg.max_transfer_bytes_on_message_in_memory)
        self.limits_disk = (cfg.max_transfer_count_on_message_in_disk, cfg.max_transfer_bytes_on_message_in_disk)
        # No stored message is longer than a body of max_message_size_bytes with its largest topic and properties.
        self.max_stored_size = message_length(cfg.max_message_size_bytes, 255, 32767)
        self.filter_scan_bytes = cfg.max_filter_message_size_bytes
        self._damage_logged_at = -DAMAGE_LOG_INTERVAL_S
        self._ranges: tuple[tuple[tuple[int, int], ...], bytes | None] = ((), None)

    def scan_entries(self, max_count: int) -> int:
        """Consume-queue entries one get for `max_count` messages examines at most (DefaultMessageStore.getMessage)."""
        return max(self.filter_scan_bytes, max_count * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_count: int, message_filter: Filter | None = None
    ) -> GetMessageResult:
        result = GetMessageResult()
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            result.status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
            result.next_begin_offset = 0
            self.stats.record_get(False, 0, 0)
            return result
        min_offset = cq.get_min_offset_in_queue()
        max_offset = cq.get_max_offset_in_queue()
        result.min_offset, result.max_offset = min_offset, max_offset
        if max_offset == 0:
            result.status, result.next_begin_offset = GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
        elif offset < min_offset:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
        elif offset == max_offset:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_offset:
            # RocketMQ 4.9.4+ (DefaultMessageStore.getMessage) answers the max offset here; earlier
            # versions went back to 0 when the queue started at 0, which re-reads the whole queue.
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset
        else:
            self._collect(result, cq, offset, max_count, message_filter)
        self.stats.record_get(result.status is GetMessageStatus.FOUND, result.message_count, result.buffer_total_size)
        return result

    def get_put_message(
        self, topic: str, queue_id: int, queue_offset: int, spans: Sequence[tuple[int, int]], max_count: int
    ) -> GetMessageResult | None:
        """The messages a put has just stored (`spans`: each one's commitlog offset and size, in order, one after another
        in the log; the first `queue_offset` in `topic`'s `queue_id`), read by their commitlog offsets before their
        consume-queue entries are written: what `get_message(.., queue_offset, max_count)` answers once they are
        dispatched (the same count, byte and memory limits), with the queue's end at the put's last message. None when
        they do not lie one after another or a message of its size does not start where its span says (TOTALSIZE and
        MAGICCODE checked, as the gather kernel checks them)."""
        taken, total = self._put_taken(spans, max_count) if len(spans) != 1 else (1, spans[0][1])  # one: the usual put
        if not taken or total <= 0:
            return None
        first = spans[0][0]
        res = self.commit_log.get_message(first, total)
        if res is None:
            return None
        try:
            view = res.view
            if len(view) < total:
                return None
            pos = 0
            for i in range(taken):
                size = spans[i][1]
                if TOTAL_AND_MAGIC.unpack_from(view, pos) != (size, MESSAGE_MAGIC_CODE):
                    return None
                pos += size
            data = bytearray(view[:total])
        finally:
            res.release()
        cq = self.find_consume_queue(topic, queue_id)
        result = GetMessageResult(GetMessageStatus.FOUND)
        result.min_offset = cq.get_min_offset_in_queue() if cq is not None else queue_offset
        result.max_offset = queue_offset + len(spans)
        result.next_begin_offset = queue_offset + taken
        result.start_offset = queue_offset
        result.data = data
        if taken == 1:
            result.meta = bytearray(META.pack(first, 0, total))
        else:
            result.meta = bytearray(b"".join(META.pack(phy, i, size) for i, (phy, size) in enumerate(spans[:taken])))
        self.stats.record_get(True, taken, total)
        return result

    def _put_taken(self, spans: Sequence[tuple[int, int]], max_count: int) -> tuple[int, int]:
        """How many of a put's first messages a read takes (the gather kernel's `batch_full`: the first always, then
        `max_count` and the transfer limits, on disk's or in memory's by where each lies) and their bytes; (0, 0) when
        they do not lie one after another in the log."""
        (count_mem, bytes_mem), (count_disk, bytes_disk) = self.limits_memory, self.limits_disk
        disk_below = self.commit_log.get_max_offset() - self.memory_window
        taken = total = 0
        end = spans[0][0] if spans else 0
        for phy, size in spans:
            if phy != end or size <= 0:
                return 0, 0
            if taken:
                count_limit, bytes_limit = (count_disk, bytes_disk) if phy < disk_below else (count_mem, bytes_mem)
                if taken >= max_count or total + size > bytes_limit or taken >= count_limit:
                    break
            taken += 1
            total += size
            end = phy + size
        return taken, total

    def _collect(self, result: GetMessageResult, cq: ConsumeQueue, offset: int, max_count: int, message_filter: Filter | None) -> None:
        index_buf = cq.get_index_buffer(offset)
        if index_buf is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = cq.rollnext_file(offset)
            return
        commit_log = self.commit_log
        max_phy = commit_log.get_max_offset()
        (count_mem, bytes_mem), (count_disk, bytes_disk) = self.limits_memory, self.limits_disk
        limits = GatherLimits(
            max_count, count_mem, bytes_mem, count_disk, bytes_disk, max_phy - self.memory_window,
            max(0, commit_log.get_min_offset()), max_phy, self.max_stored_size,
        )  # fmt: skip
        n = min(index_buf.size // CQ_STORE_UNIT_SIZE, self.scan_entries(max_count))
        files = HeldFiles(commit_log.mapped_file_queue)
        try:
            g, out, meta = self._gather(index_buf.view, n, limits, files, message_filter)
        finally:
            files.release()
            index_buf.release()
        if g.damaged:
            self._damaged_entries(cq, offset, offset + g.examined, g.damaged)
        if g.taken:
            result.status = GetMessageStatus.FOUND
        else:
            result.status = GetMessageStatus.MESSAGE_WAS_REMOVING if g.removed_seen else GetMessageStatus.NO_MATCHED_MESSAGE
        result.next_begin_offset = offset + g.examined
        del out[g.bytes :], meta[g.taken * META.size :]
        result.data, result.meta, result.start_offset = out, meta, offset

    def _gather(
        self, entries: memoryview, n: int, limits: GatherLimits, files: HeldFiles, message_filter: Filter | None
    ) -> tuple[Gathered, bytearray, bytearray]:
        """Run the gather kernel over `n` entries until it is done or a transfer limit is reached.

        It stops early at an entry it cannot decide alone: an output that is full (grown here),
        a message outside the files held so far (its file is held now, or, when it is gone or
        cannot hold the message, the rest of that file is skipped), a message whose TAGS or
        properties cannot be read (skipped alone, counted as damaged), or a message whose SQL92
        filter it leaves to Python (decided here by the reference evaluator). The call then goes
        on from there.
        """
        codes, tags, sql = message_filter.kernel_args() if message_filter is not None else (None, None, None)
        ranges = self._damaged_ranges()
        out, meta = self._buffers(entries, n, limits)
        if n:
            phy, size, _ = ENTRY.unpack_from(entries, 0)
            files.add(phy, size)  # the usual pull lies in one file: hold it before the first call
        state = GatherState()
        while True:
            g = native.gather(entries, n, files.segments, out, meta, limits, codes, tags, ranges, state, sql)
            if g.stop is Stop.DONE or g.stop is Stop.COUNT_LIMIT:
                return g, out, meta
            skip_below = -1 if g.taken > state.taken else state.skip_below
            state = GatherState(g.examined, g.taken, g.bytes, g.removed_seen, g.damaged, skip_below, state.filter_passed)
            phy, size, _ = ENTRY.unpack_from(entries, g.examined * CQ_STORE_UNIT_SIZE)
            if g.stop is Stop.OUT_FULL:
                if g.bytes + size > len(out):
                    out.extend(bytes(max(len(out), g.bytes + size - len(out))))
                if len(meta) < (g.taken + 1) * META.size:
                    meta.extend(bytes(len(meta)))
            elif g.stop is Stop.SEGMENT_MISS:
                if not files.add(phy, size):
                    # Its file is gone (or cannot hold it): RocketMQ skips the rest of that file.
                    next_file = self.commit_log.roll_next_file(phy)
                    state = state._replace(examined=g.examined + 1, removed_seen=g.removed_seen or g.taken == 0, skip_below=next_file)
            elif g.stop is Stop.BAD_PARTS:
                state = state._replace(examined=g.examined + 1, damaged=g.damaged + 1)
            elif g.stop is Stop.FILTER_DEFER:
                assert message_filter is not None
                with files.view(phy, size) as message:
                    passed = message_filter.matches_message(message)
                state = state._replace(filter_passed=g.examined) if passed else state._replace(examined=g.examined + 1)
            else:
                raise AssertionError(f"gather stopped with {g.stop!r}")

    def _buffers(self, entries: memoryview, n: int, limits: GatherLimits) -> tuple[bytearray, bytearray]:
        """Output buffers sized for the usual pull: the most messages the limits let through, each
        the size of the first entry's message; a pull that needs more grows them."""
        most = max(1, min(limits.max_count, max(limits.count_in_memory, limits.count_on_disk), n))
        size = ENTRY.unpack_from(entries, 0)[1] if n else 0
        size = size if 0 < size <= self.max_stored_size else 1024
        byte_limit = max(limits.bytes_in_memory, limits.bytes_on_disk, size)
        return bytearray(min(byte_limit, size * most + size // 4 * most)), bytearray(META.size * most)

    def _damaged_ranges(self) -> bytes | None:
        """The commitlog's damaged ranges as gather takes them, converted once per table."""
        ranges = self.commit_log.damaged_ranges
        cached = self._ranges
        if cached[0] is not ranges:
            cached = (ranges, native.ranges_array(ranges) if ranges else None)
            self._ranges = cached  # one assignment: a concurrent reader sees the old pair or the new one
        return cached[1]

    def _damaged_entries(self, cq: ConsumeQueue, first: int, end: int, count: int) -> None:
        """Count consume-queue entries that point at no message; log the first pull of every minute at ERROR."""
        self.stats.damaged_queue_entries += count
        now = time.monotonic()
        if now - self._damage_logged_at >= DAMAGE_LOG_INTERVAL_S:
            self._damage_logged_at = now
            log.error(
                "consume queue %s/%d: %d of the entries %d..%d point at no message; skipped, "
                "the entries after them are served (tidemq_store_damaged_queue_entries counts them)",
                cq.topic,
                cq.queue_id,
                count,
                first,
                end - 1,
            )

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after `timestamp_ms`.

        Binary search over the queue's entries, reading each probe's store time from the
        commitlog; max offset when every message is older, min offset when none is.
        """
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        low = cq.get_min_offset_in_queue()
        high = cq.get_max_offset_in_queue()
        first = low
        while low < high:
            mid = (low + high) // 2
            ts = self._store_time_at(cq, mid)
            if ts is None:
                low = mid + 1  # an entry whose message is gone counts as older
                first = low
                continue
            if ts < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return max(low, first)

    def _store_time_at(self, cq: ConsumeQueue, index: int) -> int | None:
        entry = cq.read_entry(index)
        if entry is None:
            return None
        phy, size, _ = entry
        if size <= 0 or is_filler(phy, size):
            return None
        ts = self.commit_log.pickup_store_timestamp(phy, size)
        return None if ts < 0 else ts
