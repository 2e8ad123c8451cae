"""BulkDispatch: committed commitlog bytes into consume-queue entries, index entries and arrival notices.

The native `dispatch_scan` checks and decodes a range of messages into records (the 20-byte
consume-queue entry, queue, queue offset, store time, ...) and index keys with their hashes;
`queue_runs` groups the records into runs (one queue, consecutive queue offsets, each message
after the one before it in the log) with their entries copied contiguous; each run is written
to its queue in one call and the keys go to the index file in one call. Python touches each
run and each chunk, not each message. `message_codec.decode_for_dispatch` with
`ConsumeQueue.put_message_position_info` and `IndexService.build_index` is the message-by-message
reference the tests compare this with, byte for byte.

What the reference does per message is kept per run: a message of a deleted topic below its
cutoff is dropped, a message with an invalid topic or queue id gets no entry (it is still
indexed, as before), a prepared or rolled-back transaction message gets no entry and a rolled-back
one no index keys (RocketMQ's CommitLogDispatcherBuildConsumeQueue and IndexService.buildIndex;
the scan flags them), a schedule-topic message's tags code is its due time (the kernel computes
it, or this module when the DELAY value needs Python's int()), duplicates and gaps are handled
by the queue entry by entry.

Applying a chunk is idempotent: a queue skips the messages it holds, the index skips messages at
or below its end offset. So when a write fails in the middle of a chunk (no file could be
created), the caller keeps its cursor at the chunk's start and applies the same chunk again
later: what was written is skipped and dispatch goes on exactly at the first message not fully
dispatched.

Every method ending in `_locked` runs under the dispatch lock (ReputMessageService): it is the
only writer of the queues and the index, and the scan buffers here are its own.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

from store import _kernels, native
from store.codec.message import decode_properties
from store.codec.message_codec import delay_due_time_ms
from store.errors import DispatchFailed
from store.index.index_service import IndexService
from store.logfile.lazy_mapped_file import MappingBudget
from store.metadata.deleted_topic_table import DeletedTopicTable
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY, ConsumeQueue

log = logging.getLogger("tidemq.store")

# (topic, queue id, the queue's max offset after the chunk, distinct tags codes of the new entries or
# None when there are more than native.RUN_CODES). Runs on the dispatching thread under the dispatch lock.
ArrivingListener = Callable[[str, int, int, tuple[int, ...] | None], None]
QueueFor = Callable[[str, int, int], ConsumeQueue | None]
Arrivals = dict[tuple[str, int], tuple[int, set[int] | None]]  # (topic, queue id) -> (max offset after, codes)
# A run: topic position and length in the scanned bytes, queue id, first queue offset, first
# message's offset, the end of the last one, the last one's store time.
RunHead = tuple[int, int, int, int, int, int, int]

MAX_RECORDS = 4096  # messages per scan chunk
# Keys a chunk can hold: two per message on average, and always every key of one message (at most
# one per two bytes of a 32,767-byte KEYS property, and the UNIQ_KEY), so a chunk is never empty.
MAX_KEYS = 2 * MAX_RECORDS + 16_385
MAX_RUNS = 1024  # runs per queue_runs call; more are grouped in further calls
_TOPIC_NAMES_MAX = 65_536
_CODES_AT = 13  # first tags code in a native.RUN tuple
_INT32 = struct.Struct("=i")
_RECORD = native.RECORD
_NOT_ALONE = native.FLAG_DELAY_FALLBACK | native.FLAG_NO_QUEUE  # a record that is not a run of its own
_RECORD_BYTES = native.RECORD.size
_scan = _kernels.dispatch_scan


class BulkDispatch:
    def __init__(
        self,
        queue_for: QueueFor,
        index_service: IndexService | None,
        deleted_topics: DeletedTopicTable,
        mapping_budget: MappingBudget,
        delay_levels_ms: list[int],
        uniq_key_index: bool,
    ) -> None:
        self.queue_for = queue_for  # the queue of (topic, queue id) for a message at an offset; None: no entry
        self.index_service = index_service  # None: message_index_enable is off
        self.deleted_topics = deleted_topics
        self.mapping_budget = mapping_budget
        self.delay_levels_ms = delay_levels_ms
        self._levels = native.delay_levels_array(delay_levels_ms)
        self._scan_flags = native.SCAN_UNIQ_KEY if uniq_key_index else 0
        self.listeners: list[ArrivingListener] = []
        # Per system topic, what its entries wake (the timer's enqueue, the delay scan), called with the queue id
        # after the chunk: a dict lookup per notice instead of a listener call for every user topic's.
        self.topic_wakers: dict[str, Callable[[int], object]] = {}
        self.last_dispatched_timestamp = 0  # store time of the last message given a queue entry (checkpoint)
        self._records = bytearray(native.RECORD.size * MAX_RECORDS)
        self._one_entry = memoryview(self._records)[:CQ_STORE_UNIT_SIZE]  # the entry of a chunk's only record
        self._arrivals: Arrivals = {}  # notices of the chunk being applied, when there are listeners
        self._keys = bytearray(native.KEY.size * MAX_KEYS)
        self._runs = bytearray(native.RUN.size * MAX_RUNS)
        self._entries = bytearray(CQ_STORE_UNIT_SIZE * MAX_RECORDS)
        self._entries_view = memoryview(self._entries)
        self._scratch = bytearray(native.runs_scratch_bytes(MAX_RECORDS))
        self._topics: dict[bytes, str] = {}

    def apply_chunk_locked(self, buf: Any, pos: int, limit: int) -> tuple[int, int, int]:
        """Scan buf[pos:limit] (at most MAX_RECORDS messages) and apply what it holds.

        Returns (stop, next position, messages dispatched): the next chunk starts at the next
        position; the stop (a native.Stop) says why the scan ended (DONE at the limit, OUT_FULL
        when more follow). Raises when a file cannot be created; then nothing past `pos` counts
        as dispatched.
        """
        self._arrivals.clear()  # what a failed attempt collected is collected again
        stop, end, n, n_keys = _scan(buf, pos, limit, self._records, self._keys, self._scan_flags, self._levels)
        if n == 0:
            if stop == native.Stop.OUT_FULL:
                raise DispatchFailed(f"a message at {pos} has more index keys than a scan chunk holds")
            return stop, end, 0
        last = _RECORD.unpack_from(self._records, (n - 1) * _RECORD_BYTES)
        if n == 1 and not last[12] & _NOT_ALONE:  # one message: its record is its run
            codes = (last[5],)
            head = (last[6], last[10], last[1], last[2], last[4], last[4] + last[8], last[3])
            written = self._write_run_locked(buf, head, self._one_entry, codes)
            last_ts = last[3] if written else -1
        else:
            last_ts = self._write_queues_locked(buf, n)
        if self.index_service is not None:
            self.index_service.put_hashed_keys_locked(self._keys, n_keys, n, last[4], last[3])
        if last_ts >= 0:
            self.last_dispatched_timestamp = last_ts
        if self._arrivals:
            self._notify_locked()
        return stop, end, n

    def _notify_locked(self) -> None:
        arrivals, self._arrivals = self._arrivals, {}
        wakers = self.topic_wakers
        for (topic, queue_id), (after, codes) in arrivals.items():
            listed = None if codes is None else tuple(codes)
            for listener in self.listeners:
                listener(topic, queue_id, after, listed)
            waker = wakers.get(topic)
            if waker is not None:
                waker(queue_id)

    def _write_queues_locked(self, buf: Any, n_records: int) -> int:
        """Write the queue entries of the chunk's records; the store time of the last one written, -1 for none."""
        last_record, last_ts = -1, -1
        pos = 0
        while pos < n_records:
            g = native.queue_runs(buf, self._records, n_records, pos, self._runs, self._entries, self._scratch)
            if g.fallbacks:
                self._patch_delay_codes_locked(buf, pos, g.record_pos)
            for k in range(g.runs):
                run = native.RUN.unpack_from(self._runs, k * native.RUN.size)
                qoff, offset, end, ts, topic_pos, topic_len, queue_id, count, at, _first, last_rec, n_codes = run[:12]
                codes = run[_CODES_AT : _CODES_AT + n_codes] if n_codes <= native.RUN_CODES else None
                entries = self._entries_view[at * CQ_STORE_UNIT_SIZE : (at + count) * CQ_STORE_UNIT_SIZE]
                head = (topic_pos, topic_len, queue_id, qoff, offset, end, ts)
                if self._write_run_locked(buf, head, entries, codes) and last_rec > last_record:
                    last_record, last_ts = last_rec, ts
            pos = g.record_pos
        return last_ts

    def _write_run_locked(self, buf: Any, head: RunHead, entries: memoryview, codes: tuple[int, ...] | None) -> bool:
        """Write one run to its queue; False when it gets no entries (deleted topic, invalid topic or queue)."""
        topic_pos, topic_len, queue_id, first_qoff, first_offset, end_offset, last_ts = head
        topic = self._topic_name_locked(buf, topic_pos, topic_len)
        cutoffs = self.deleted_topics.cutoffs
        if cutoffs and first_offset < cutoffs.get(topic, -1):
            skip = _entries_below(entries, cutoffs[topic])  # messages of the deleted incarnation
            if skip * CQ_STORE_UNIT_SIZE == len(entries):
                return False
            first_qoff, first_offset = first_qoff + skip, _offset_at(entries, skip)
            entries = entries[skip * CQ_STORE_UNIT_SIZE :]
        cq = self.queue_for(topic, queue_id, first_offset)
        if cq is None:
            return False
        if not cq.put_raw_entries_locked(entries, first_qoff, first_offset, end_offset, last_ts):
            reason = cq.mapped_file_queue.create_error or "no file for the entry"
            raise DispatchFailed(f"consume queue {topic}/{queue_id}: {reason}")
        if self.mapping_budget.over():
            self.mapping_budget.trim()
        if self.listeners or self.topic_wakers:
            key = (topic, queue_id)
            seen = self._arrivals.get(key)
            merged: set[int] | None = None if codes is None else set(codes)
            if seen is not None:  # a second run of the queue in one chunk (a discontinuity): one notice for both
                merged = None if merged is None or seen[1] is None else merged | seen[1]
            self._arrivals[key] = (first_qoff + len(entries) // CQ_STORE_UNIT_SIZE, merged)
        return True

    def _topic_name_locked(self, buf: Any, pos: int, length: int) -> str:
        raw = buf[pos : pos + length]  # bytes when buf is a mapping (as dispatch passes it)
        if not isinstance(raw, bytes):
            raw = bytes(raw)
        name = self._topics.get(raw)
        if name is None:
            name = raw.decode("utf-8", errors="replace")
            if len(self._topics) < _TOPIC_NAMES_MAX:
                self._topics[raw] = name
        return name

    def _patch_delay_codes_locked(self, buf: Any, first: int, end: int) -> None:
        """Tags codes the kernel left to Python (a DELAY value int() reads but the kernel does not)."""
        for i in range(first, end):
            rec = native.RECORD.unpack_from(self._records, i * native.RECORD.size)
            if rec[12] & native.FLAG_DELAY_FALLBACK:
                props = decode_properties(buf[rec[7] : rec[7] + rec[11]])
                due = delay_due_time_ms(props, rec[3], self.delay_levels_ms)
                (entry,) = _INT32.unpack_from(self._scratch, 4 * (i - first))
                ENTRY.pack_into(self._entries, entry * CQ_STORE_UNIT_SIZE, rec[4], rec[8], due)


def _entries_below(entries: memoryview, cutoff: int) -> int:
    """How many leading entries point below `cutoff` (the run's offsets grow)."""
    n = len(entries) // CQ_STORE_UNIT_SIZE
    i = 0
    while i < n and _offset_at(entries, i) < cutoff:
        i += 1
    return i


def _offset_at(entries: memoryview, i: int) -> int:
    offset: int = ENTRY.unpack_from(entries, i * CQ_STORE_UNIT_SIZE)[0]
    return offset
