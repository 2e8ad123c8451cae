"""Recovery of the commitlog after a clean shutdown or a crash.

After a clean shutdown (no abort file) the scan starts at the third-last file; after
a crash it starts at the newest file whose first message was stored before the
checkpoint's minimum timestamp, or earlier when the index ends earlier (`rebuild_from`),
and the store re-dispatches every message from there on (`ScanResult.start`) once the
log is cut: the consume queues and the index skip what they already hold.

Each message is checked for size, magic code and body CRC. Where a check fails (or
zeros stand where a message should be), the scan looks for the next valid message
(magic code, sizes and CRC all right) in the same file, then in the next files:
- a valid message follows: the bytes in between are a damaged range. They are
  recorded in the commitlog's damaged-range table (persisted; dispatch and reads skip
  them), logged at ERROR and shown by runtime_info(); every message after them is kept;
- nothing valid follows: the bad bytes are a torn tail (never completely written) and
  the log is cut there, with a WARNING saying where and why. Nothing past the cut is
  ever served.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field

from store.codec.message import INTERNAL_TOPICS, PROPERTY_PUT_PART, PROPERTY_REAL_TOPIC, REVIVE_TOPIC_PREFIX, TIMER_TOPIC
from store.codec.message_codec import MESSAGE_MAGIC_CODE, DecodeOutcome
from store.logfile.commit_log import CommitLog
from store.logfile.mapped_file import MappedFile
from store.logfile.store_checkpoint import StoreCheckpoint
from store.report_types import RecoveryReport

log = logging.getLogger("tidemq.store")

# Seconds between two progress lines of a long scan.
PROGRESS_LOG_INTERVAL_S = 5.0
# The last messages' offsets a scan keeps: a put recovery keeps whole (PROPERTY_PUT_PART) has at most this many.
TAIL_OFFSETS = 4_096
_MAGIC_BYTES = MESSAGE_MAGIC_CODE.to_bytes(4, "big")


@dataclass
class RecoveryProgress:
    """What recovery is doing; read by other threads (each field is one atomic store)."""

    phase: str = "not started"
    scanned_bytes: int = 0
    total_bytes: int = 0
    _next_log_s: float = field(default=0.0, repr=False)

    def begin(self, phase: str, total_bytes: int) -> None:
        self.scanned_bytes = 0
        self.total_bytes = total_bytes
        self.phase = phase
        self._next_log_s = time.monotonic() + PROGRESS_LOG_INTERVAL_S

    def advance(self, scanned_bytes: int) -> None:
        self.scanned_bytes = scanned_bytes
        now = time.monotonic()
        if now >= self._next_log_s:
            self._next_log_s = now + PROGRESS_LOG_INTERVAL_S
            pct = 100.0 * scanned_bytes / self.total_bytes if self.total_bytes else 100.0
            log.info("recovery: %s, %d of %d bytes (%.1f%%)", self.phase, scanned_bytes, self.total_bytes, pct)

    def snapshot(self) -> RecoveryReport:
        return {"phase": self.phase, "scanned_bytes": self.scanned_bytes, "total_bytes": self.total_bytes}


@dataclass
class ScanResult:
    end: int  # offset just past the last valid message (where the log is cut)
    start: int = 0  # where the scan began: a crash recovery re-dispatches from here
    last_message_offset: int = -1  # -1 when the scan found no message
    damaged: list[tuple[int, int]] = field(default_factory=list)  # ranges skipped, valid messages after each
    tail: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=TAIL_OFFSETS))  # last messages' offsets


def recover_normally(commit_log: CommitLog, files_to_scan: int, progress: RecoveryProgress | None = None) -> ScanResult:
    """Scan the last `files_to_scan` files and cut the log after the last valid message."""
    files = commit_log.mapped_file_queue.mapped_files
    if not files:
        commit_log.truncate_to(0)
        return ScanResult(0)
    start = max(0, len(files) - files_to_scan)
    result = _scan(commit_log, start, progress or RecoveryProgress())
    commit_log.truncate_to(result.end)
    return result


def recover_abnormally(
    commit_log: CommitLog,
    checkpoint: StoreCheckpoint,
    rebuild_from: int | None = None,
    progress: RecoveryProgress | None = None,
) -> ScanResult:
    """Scan from the checkpoint's file (or the file of `rebuild_from`, when earlier) to the end and
    cut after the last valid message; the caller re-dispatches from `start`."""
    files = commit_log.mapped_file_queue.mapped_files
    if not files:
        commit_log.truncate_to(0)
        return ScanResult(0)
    min_ts = checkpoint.get_min_timestamp()
    start = 0
    for index in range(len(files) - 1, -1, -1):
        first_ts = _first_store_timestamp(commit_log, index)
        if first_ts is not None and first_ts <= min_ts:
            start = index
            break
    if rebuild_from is not None:
        while start > 0 and files[start].file_from_offset > rebuild_from:
            start -= 1
    log.info("abnormal recovery: scanning from file %s (checkpoint min timestamp %d)", files[start].file_name, min_ts)
    result = _scan(commit_log, start, progress or RecoveryProgress())
    _cut_torn_put(commit_log, result)
    commit_log.truncate_to(result.end)
    return result


def _cut_torn_put(commit_log: CommitLog, result: ScanResult) -> None:
    """Cut the last put when the crash left it without its last messages: the log's last message says it is
    message i of n (PROPERTY_PUT_PART, i < n - 1), so the put began i messages before it."""
    if not result.tail:
        return
    last = result.tail[-1]
    mf = commit_log.mapped_file_queue.find_mapped_file_by_offset(last)
    check = commit_log.check_at(mf, last - mf.file_from_offset, decode=True, check_crc=False) if mf is not None else None
    request = check.request if check is not None else None
    if request is None:
        return
    props = request.properties
    # Only on what no producer can make (a producer could name a property so): a state record, or a
    # receive's checkpoint on its way through the timer.
    if request.topic not in INTERNAL_TOPICS and not (
        request.topic == TIMER_TOPIC and props.get(PROPERTY_REAL_TOPIC, "").startswith(REVIVE_TOPIC_PREFIX)
    ):
        return
    part = props.get(PROPERTY_PUT_PART, "")
    index, _, count = part.partition("/")
    if not (index.isdigit() and count.isdigit()) or int(index) >= int(count) - 1 or int(index) >= len(result.tail):
        return
    first = result.tail[-1 - int(index)]
    log.warning("commitlog truncated at offset %d: a put of %s messages lost its last %d in the crash (a torn put)",
                first, count, int(count) - int(index) - 1)  # fmt: skip
    result.end = first
    result.last_message_offset = result.tail[-2 - int(index)] if len(result.tail) > int(index) + 1 else -1


def _first_store_timestamp(commit_log: CommitLog, index: int) -> int | None:
    mf = commit_log.mapped_file_queue.mapped_files[index]
    result = commit_log.check_at(mf, 0, decode=True, check_crc=True)
    if result.outcome is not DecodeOutcome.MESSAGE or result.request is None:
        return None
    return result.request.store_timestamp


def _scan(commit_log: CommitLog, start_index: int, progress: RecoveryProgress) -> ScanResult:
    """Walk files from `start_index`; skip damaged ranges, stop where nothing valid follows."""
    files = commit_log.mapped_file_queue.mapped_files
    first = files[start_index].file_from_offset
    progress.begin("scanning commitlog", files[-1].file_from_offset + files[-1].file_size - first)
    result = ScanResult(first, first)
    damage_start: int | None = None  # offset of bad bytes not yet followed by a valid message
    reason = ""
    corrupt = False  # the pending bad bytes failed a check (not only zeros)
    scanned = 0
    for index in range(start_index, len(files)):
        mf = files[index]
        if index > start_index and mf.file_from_offset != files[index - 1].file_from_offset + files[index - 1].file_size:
            log.warning("commitlog file %s does not follow %s; the log ends there", mf.file_name, files[index - 1].file_name)
            break
        pos = 0
        while pos < mf.data_end:  # past it the file has no blocks: zeros (store/logfile/mapped_file.py)
            check = commit_log.check_at(mf, pos, decode=False, check_crc=True)
            if check.outcome is DecodeOutcome.MESSAGE:
                offset = mf.file_from_offset + pos
                if damage_start is not None:
                    _report_damage(commit_log, result, damage_start, offset, reason)
                    damage_start = None
                result.last_message_offset = offset
                result.tail.append(offset)
                pos += check.size
                result.end = mf.file_from_offset + pos
                scanned += 1
                if not scanned & 1023:
                    progress.advance(result.end - first)
                continue
            if check.outcome is DecodeOutcome.BLANK:
                if damage_start is None:
                    result.end = mf.file_from_offset + mf.file_size
                break  # the rest of the file is unused; damage before it ends at a message of the next file
            if damage_start is None:
                damage_start = mf.file_from_offset + pos
                corrupt = check.outcome is DecodeOutcome.CORRUPT
                reason = check.reason if corrupt else "zeros where a message should be"
            pos = _next_candidate(mf, pos + 1)
        progress.advance(mf.file_from_offset + mf.file_size - first)
    if damage_start is not None:
        if corrupt:
            log.warning("commitlog truncated at offset %d: %s, and no valid message follows (a torn tail)", damage_start, reason)
        result.end = damage_start  # zeros with nothing valid after them: the log simply ends here
    log.info("commitlog recovered to offset %d (%d messages scanned)", result.end, scanned)
    return result


def _next_candidate(mf: MappedFile, from_pos: int) -> int:
    """Position of the next possible message start in `mf` at or after `from_pos` (file size when none)."""
    found = mf.mm.find(_MAGIC_BYTES, from_pos + 4, mf.data_end)
    return mf.file_size if found < 0 else found - 4


def _report_damage(commit_log: CommitLog, result: ScanResult, start: int, end: int, reason: str) -> None:
    result.damaged.append((start, end))
    if commit_log.add_damaged_range(start, end):
        log.error(
            "commitlog bytes [%d, %d) are damaged (%s): %d bytes skipped, the valid messages after them are kept",
            start, end, reason, end - start,
        )  # fmt: skip


def lower_checkpoint(scan: ScanResult, commit_log: CommitLog, checkpoint: StoreCheckpoint) -> None:
    """After the log was cut at `scan.end`, the checkpoint's timestamps come down to the last
    message kept. (The index and the consume queues are cut by the store's recovery.)"""
    if scan.last_message_offset < 0:
        return
    last_ts = commit_log.pickup_store_timestamp(scan.last_message_offset, 64)
    if last_ts > 0:
        checkpoint.physic_msg_timestamp = min(checkpoint.physic_msg_timestamp, last_ts)
        checkpoint.logics_msg_timestamp = min(checkpoint.logics_msg_timestamp, last_ts)
        checkpoint.index_msg_timestamp = min(checkpoint.index_msg_timestamp, last_ts)
