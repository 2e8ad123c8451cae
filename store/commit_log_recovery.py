"""Recovery of the commitlog after a clean shutdown or a crash.

After a clean shutdown (no abort file) the scan starts at the third-last file; after
a crash it starts at the newest file whose first message was stored before the
checkpoint's minimum timestamp, and every message from there on is re-dispatched to
the consume queues and the index (they skip what they already hold).

Each message is checked for size, magic code and body CRC; the log is cut at the
first one that fails, with a log line saying where and why. Nothing past the cut is
ever served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from store.commit_log import CommitLog
from store.message_codec import DecodeOutcome, DispatchRequest
from store.store_checkpoint import StoreCheckpoint

log = logging.getLogger("tidemq.store")

DispatchFn = Callable[[DispatchRequest], None]


def recover_normally(commit_log: CommitLog, files_to_scan: int) -> int:
    """Scan the last `files_to_scan` files and cut the log after the last valid message."""
    files = commit_log.mapped_file_queue.mapped_files
    if not files:
        commit_log.truncate_to(0)
        return 0
    start = max(0, len(files) - files_to_scan)
    end = _scan(commit_log, start, None)
    commit_log.truncate_to(end)
    return end


def recover_abnormally(commit_log: CommitLog, checkpoint: StoreCheckpoint, dispatch: DispatchFn) -> int:
    """Scan from the checkpoint's file to the end, re-dispatching every message; cut after the last valid one."""
    files = commit_log.mapped_file_queue.mapped_files
    if not files:
        commit_log.truncate_to(0)
        return 0
    min_ts = checkpoint.get_min_timestamp()
    start = 0
    for index in range(len(files) - 1, -1, -1):
        first_ts = _first_store_timestamp(commit_log, index)
        if first_ts is not None and first_ts <= min_ts:
            start = index
            break
    log.info("abnormal recovery: scanning from file %s (checkpoint min timestamp %d)", files[start].file_name, min_ts)
    end = _scan(commit_log, start, dispatch)
    commit_log.truncate_to(end)
    return end


def _first_store_timestamp(commit_log: CommitLog, index: int) -> int | None:
    mf = commit_log.mapped_file_queue.mapped_files[index]
    result = commit_log.check_at(mf, 0, decode=True, check_crc=True)
    if result.outcome is not DecodeOutcome.MESSAGE or result.request is None:
        return None
    return result.request.store_timestamp


def _scan(commit_log: CommitLog, start_index: int, dispatch: DispatchFn | None) -> int:
    """Walk files from `start_index`; return the offset just past the last valid message."""
    files = commit_log.mapped_file_queue.mapped_files
    end = files[start_index].file_from_offset
    scanned = 0
    for index in range(start_index, len(files)):
        mf = files[index]
        pos = 0
        while True:
            result = commit_log.check_at(mf, pos, decode=dispatch is not None, check_crc=True)
            if result.outcome is DecodeOutcome.MESSAGE:
                if dispatch is not None and result.request is not None:
                    dispatch(result.request)
                pos += result.size
                end = mf.file_from_offset + pos
                scanned += 1
                continue
            if result.outcome is DecodeOutcome.BLANK:
                end = mf.file_from_offset + mf.file_size
                break
            if result.outcome is DecodeOutcome.CORRUPT:
                log.warning(
                    "commitlog truncated at offset %d (file %s, position %d): %s",
                    mf.file_from_offset + pos, mf.file_name, pos, result.reason,
                )  # fmt: skip
            return end
        if index + 1 < len(files) and files[index + 1].file_from_offset != end:
            log.warning("commitlog file %s does not follow %s; truncated there", files[index + 1].file_name, mf.file_name)
            return end
    log.info("commitlog recovered to offset %d (%d messages scanned)", end, scanned)
    return end
