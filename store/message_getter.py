"""MessageGetter: RocketMQ's getMessage and getOffsetInQueueByTime over the consume queues.

getMessage walks consume queue entries from `offset`, filters by tag hash and then by
the exact tag, and collects slices of the commitlog until a transfer limit is hit:
count and bytes, with tighter limits when the data is probably on disk (more than
`access_message_in_memory_max_ratio_percent` of memory behind the log's end).
At most MAX_FILTER_ENTRIES entries are examined per call, so a pull over a queue
full of other tags is bounded too.

An entry is served only when it points inside the log at the start of a message of its size
(TOTALSIZE and MAGICCODE checked); one that does not is damaged: it is skipped alone and
counted, and the entries after it are served, so `next_begin_offset` never passes a readable
message. Only a message whose file is gone (below the log's minimum offset, or a file that
cannot be read) skips the rest of its file, as RocketMQ does.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from store.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from store.get_message_result import GetMessageResult, TagFilter
from store.message_codec import MESSAGE_MAGIC_CODE, TOTAL_AND_MAGIC, message_length
from store.status import GetMessageStatus

if TYPE_CHECKING:
    from store.default_message_store import DefaultMessageStore

MAX_FILTER_ENTRIES = 16_000  # entries examined per get (RocketMQ's maxFilterMessageCount)
DAMAGE_LOG_INTERVAL_S = 60.0  # at most one ERROR line per interval for damaged consume-queue entries

log = logging.getLogger("tidemq.store")


def total_physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class MessageGetter:
    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        cfg = store.config
        self.memory_window = total_physical_memory_bytes() * cfg.access_message_in_memory_max_ratio_percent // 100
        self.limits_memory = (cfg.max_transfer_count_on_message_in_memory, cfg.max_transfer_bytes_on_message_in_memory)
        self.limits_disk = (cfg.max_transfer_count_on_message_in_disk, cfg.max_transfer_bytes_on_message_in_disk)
        # No stored message is longer than a body of max_message_size_bytes with its largest topic and properties.
        self.max_stored_size = message_length(cfg.max_message_size_bytes, 255, 32767)
        self._damage_logged_at = -DAMAGE_LOG_INTERVAL_S

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_count: int, tag_filter: TagFilter | None = None
    ) -> GetMessageResult:
        store = self.store
        result = GetMessageResult()
        cq = store.find_consume_queue(topic, queue_id)
        if cq is None:
            result.status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
            result.next_begin_offset = 0
            store.stats.record_get(False, 0, 0)
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
            result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            result.next_begin_offset = min_offset if min_offset == 0 else max_offset
        else:
            self._collect(result, cq, offset, max_count, tag_filter)
        store.stats.record_get(result.status is GetMessageStatus.FOUND, result.message_count, result.buffer_total_size)
        return result

    def _collect(self, result: GetMessageResult, cq, offset: int, max_count: int, tag_filter: TagFilter | None) -> None:
        store = self.store
        index_buf = cq.get_index_buffer(offset)
        if index_buf is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = cq.rollnext_file(offset)
            return
        commit_log = store.commit_log
        max_phy = commit_log.get_max_offset()
        min_phy = max(0, commit_log.get_min_offset())
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        next_phy_file_start = -1
        view = index_buf.view
        limit = min(index_buf.size, MAX_FILTER_ENTRIES * CQ_STORE_UNIT_SIZE)
        damaged = commit_log.damaged_ranges  # usually empty: one test per batch
        max_size = self.max_stored_size
        header_of = TOTAL_AND_MAGIC.unpack_from
        pos = 0
        try:
            while pos < limit:
                phy, size, tags_code = ENTRY.unpack_from(view, pos)
                if size <= 0 or (damaged and commit_log.damaged_range_end(phy) is not None):
                    pos += CQ_STORE_UNIT_SIZE
                    continue  # a gap entry, or one whose message lies in damaged bytes: nothing to serve
                if size > max_size or phy < 0 or phy > max_phy - size:
                    self._damaged_entry(cq, offset + pos // CQ_STORE_UNIT_SIZE, phy, size)
                    pos += CQ_STORE_UNIT_SIZE
                    continue  # points outside the log: skip this entry alone, never the ones after it
                if phy < min_phy or phy < next_phy_file_start:
                    if result.message_count == 0:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING  # the file it lay in is gone
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if size > max_size or phy < 0 or phy > max_phy - size:
                    self._damaged_entry(cq, offset + pos // CQ_STORE_UNIT_SIZE, phy, size)
                    pos += CQ_STORE_UNIT_SIZE
                    continue  # points past the log: skip this entry alone, never the ones after it
                in_disk = max_phy - phy > self.memory_window
                if self._batch_full(size, max_count, result.buffer_total_size, result.message_count, in_disk):
                    break
                if tag_filter is not None and not tag_filter.matches_code(tags_code):
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                selection = commit_log.get_message(phy, size)
                if selection is None:
                    if result.message_count == 0:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = commit_log.roll_next_file(phy)  # phy < max_phy: a file, not garbage
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                total, magic = header_of(selection.view, 0)
                if total != size or magic != MESSAGE_MAGIC_CODE:
                    selection.release()
                    self._damaged_entry(cq, offset + pos // CQ_STORE_UNIT_SIZE, phy, size)
                    pos += CQ_STORE_UNIT_SIZE
                    continue  # the entry does not point at the start of a message of its size
                if tag_filter is not None and not tag_filter.matches_message(selection.view):
                    selection.release()
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                result.add_message(selection, offset + pos // CQ_STORE_UNIT_SIZE)
                status = GetMessageStatus.FOUND
                next_phy_file_start = -1
                pos += CQ_STORE_UNIT_SIZE
        finally:
            index_buf.release()
        result.status = status
        result.next_begin_offset = offset + pos // CQ_STORE_UNIT_SIZE

    def _damaged_entry(self, cq, queue_offset: int, phy: int, size: int) -> None:
        """Count a consume-queue entry that points at no message; log the first one of every minute at ERROR."""
        self.store.stats.damaged_queue_entries += 1
        now = time.monotonic()
        if now - self._damage_logged_at >= DAMAGE_LOG_INTERVAL_S:
            self._damage_logged_at = now
            log.error(
                "consume queue %s/%d: entry %d points at no message (commitlog offset %d, size %d); skipped, "
                "the entries after it are served (tidemq_store_damaged_queue_entries counts them)",
                cq.topic,
                cq.queue_id,
                queue_offset,
                phy,
                size,
            )

    def _batch_full(self, size: int, max_count: int, total_bytes: int, total_msgs: int, in_disk: bool) -> bool:
        if total_bytes == 0 or total_msgs == 0:
            return False
        if total_msgs >= max_count:
            return True
        count_limit, bytes_limit = self.limits_disk if in_disk else self.limits_memory
        return total_bytes + size > bytes_limit or total_msgs >= count_limit

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after `timestamp_ms`.

        Binary search over the queue's entries, reading each probe's store time from the
        commitlog; max offset when every message is older, min offset when none is.
        """
        cq = self.store.find_consume_queue(topic, queue_id)
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

    def _store_time_at(self, cq, index: int) -> int | None:
        entry = cq.read_entry(index)
        if entry is None:
            return None
        phy, size, _ = entry
        if size <= 0:
            return None
        ts = self.store.commit_log.pickup_store_timestamp(phy, size)
        return None if ts < 0 else ts
