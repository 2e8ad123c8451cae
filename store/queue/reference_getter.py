"""ReferenceGetter: MessageGetter's walk over the consume-queue entries written in Python.

This is the pull as it was before the gather kernel took it over, kept as the reference
the tests compare the production path with (tests/store/test_native_pull.py); nothing
in the broker calls it. It selects each message through CommitLog.get_message and copies
it into the result, so its results have the production form (`data` and `meta`).

One change from the loop as it ran in production: an entry of fewer than 8 bytes (no room
for TOTALSIZE and MAGICCODE) is a damaged entry here, as in the kernel; the loop raised
struct.error on it, failing every pull that reached it.
"""

from __future__ import annotations

import time

from store.codec.message_codec import MESSAGE_MAGIC_CODE, TOTAL_AND_MAGIC
from store.native import META
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY, ConsumeQueue
from store.queue.get_message_result import Filter, GetMessageResult
from store.queue.message_getter import DAMAGE_LOG_INTERVAL_S, MessageGetter, log
from store.status import GetMessageStatus


class ReferenceGetter(MessageGetter):
    """MessageGetter with the entry walk in Python (same statuses, limits, filters and skips); an SQL92
    filter is evaluated by the reference evaluator (store.filter.sql_eval) for every message."""

    def _collect(self, result: GetMessageResult, cq: ConsumeQueue, offset: int, max_count: int, message_filter: Filter | None) -> None:
        index_buf = cq.get_index_buffer(offset)
        if index_buf is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = cq.rollnext_file(offset)
            return
        commit_log = self.commit_log
        max_phy = commit_log.get_max_offset()
        min_phy = max(0, commit_log.get_min_offset())
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        next_phy_file_start = -1
        view = index_buf.view
        limit = min(index_buf.size, self.scan_entries(max_count) * CQ_STORE_UNIT_SIZE)
        damaged = commit_log.damaged_ranges
        max_size = self.max_stored_size
        header_of = TOTAL_AND_MAGIC.unpack_from
        data, meta = bytearray(), bytearray()
        pos = 0
        try:
            while pos < limit:
                phy, size, tags_code = ENTRY.unpack_from(view, pos)
                index = pos // CQ_STORE_UNIT_SIZE
                pos += CQ_STORE_UNIT_SIZE
                if size <= 0 or (damaged and commit_log.damaged_range_end(phy) is not None):
                    continue  # a gap entry, or one whose message lies in damaged bytes: nothing to serve
                if size > max_size or phy < 0 or phy > max_phy - size:
                    self._damaged_entry(cq, offset + index, phy, size)
                    continue  # points outside the log: skip this entry alone, never the ones after it
                if phy < min_phy or phy < next_phy_file_start:
                    if not meta:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING  # the file it lay in is gone
                    continue
                in_disk = max_phy - phy > self.memory_window
                if self._batch_full(size, max_count, len(data), len(meta) // META.size, in_disk):
                    pos -= CQ_STORE_UNIT_SIZE
                    break
                if message_filter is not None and not message_filter.matches_code(tags_code):
                    continue
                selection = commit_log.get_message(phy, size)
                if selection is None:
                    if not meta:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = commit_log.roll_next_file(phy)  # phy < max_phy: a file, not garbage
                    continue
                with selection:
                    total, magic = header_of(selection.view, 0) if size >= TOTAL_AND_MAGIC.size else (-1, 0)
                    if total != size or magic != MESSAGE_MAGIC_CODE:
                        self._damaged_entry(cq, offset + index, phy, size)
                        continue  # the entry does not point at the start of a message of its size
                    if message_filter is not None and not message_filter.matches_message(selection.view):
                        continue
                    data += selection.view
                meta += META.pack(phy, index, size)
                status = GetMessageStatus.FOUND
                next_phy_file_start = -1
        finally:
            index_buf.release()
        result.status = status
        result.next_begin_offset = offset + pos // CQ_STORE_UNIT_SIZE
        result.data, result.meta, result.start_offset = data, meta, offset

    def _damaged_entry(self, cq: ConsumeQueue, queue_offset: int, phy: int, size: int) -> None:
        """Count a consume-queue entry that points at no message; log the first one of every minute at ERROR."""
        self.stats.damaged_queue_entries += 1
        now = time.monotonic()
        if now - self._damage_logged_at >= DAMAGE_LOG_INTERVAL_S:
            self._damage_logged_at = now
            log.error(
                "consume queue %s/%d: entry %d points at no message (commitlog offset %d, size %d); skipped",
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
