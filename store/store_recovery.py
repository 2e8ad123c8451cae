"""Store recovery at load: the consume queues, the index and the commitlog brought back into agreement.

`recover_store` runs once, inside `DefaultMessageStore.load()`, after the files were loaded and
before any service thread starts, in this order:
  1. each consume queue finds its own end;
  2. when index files were dropped after a crash, the index is rebuilt from where it really ends;
  3. the commitlog is scanned (store/logfile/commit_log_recovery.py: from the last files after a clean
     shutdown, from the checkpoint after a crash) and the high-water marks lowered to its end;
  4. queue entries past the log's end are cut and each queue's min offset follows the log's first file;
  5. whatever the queues and the index lack is dispatched again (they may trail the log after a crash);
     an index that ends far before the queues (a store copied without index/ or with an older
     one) is instead left to the IndexRebuildService (store/dispatch/index_rebuild_service.py), which
     `plan_index_rebuild` sets up and the store starts with its services;
  6. the commitlog's next queue offset per queue is rebuilt from the queues.
Its phases are reported through `RecoveryProgress` (what `recovery_progress()` returns).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from store.codec.message_codec import DecodeOutcome
from store.logfile.commit_log_recovery import RecoveryProgress, lower_checkpoint, recover_abnormally, recover_normally

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.dispatch.reput_message_service import ReputMessageService
    from store.index.index_service import IndexService
    from store.logfile.commit_log import CommitLog
    from store.logfile.store_checkpoint import StoreCheckpoint
    from store.queue.consume_queue import ConsumeQueue


class RecoveredStore(Protocol):
    """What recovery works on: the loaded files, and where it records an index rebuild."""

    index_rebuild_from: int | None  # set when the index must be rebuilt after start

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def index_service(self) -> IndexService: ...
    @property
    def reput_service(self) -> ReputMessageService: ...
    @property
    def checkpoint(self) -> StoreCheckpoint | None: ...
    @property
    def last_exit_ok(self) -> bool: ...
    @property
    def recovery_limit(self) -> int | None: ...
    def all_consume_queues(self) -> list[ConsumeQueue]: ...
    def trim_mappings(self) -> None: ...


log = logging.getLogger("tidemq.store")


def recover_store(store: RecoveredStore, progress: RecoveryProgress) -> int:
    """Recover a loaded store (see the module docstring); returns the commitlog's end after recovery."""
    checkpoint = store.checkpoint
    assert checkpoint is not None
    commit_log, index_service, reput = store.commit_log, store.index_service, store.reput_service
    progress.begin("recovering consume queues", 0)
    for cq in store.all_consume_queues():
        cq.recover()
        store.trim_mappings()
    # The index may end before the checkpoint's file (its newest files were dropped after a
    # crash): dispatch must start where the surviving index really ends.
    rebuild_from: int | None = None
    if store.config.message_index_enable and index_service.dropped_files:
        index_end = index_service.end_phy_offset()
        rebuild_from = index_end if index_end is not None else 0
        log.warning(
            "%d index file(s) dropped after the crash; rebuilding the index from offset %d",
            index_service.dropped_files,
            rebuild_from,
        )
    if store.last_exit_ok:
        scan = recover_normally(commit_log, store.config.recover_clean_shutdown_files, progress)
    else:
        log.warning("the store did not shut down cleanly; recovering from the checkpoint")
        scan = recover_abnormally(commit_log, checkpoint, rebuild_from, progress)
        rebuild_from = scan.start if rebuild_from is None else min(rebuild_from, scan.start)  # re-dispatch it all
    limit = store.recovery_limit
    if limit is not None and limit < scan.end:
        # A cluster's returning old master: bytes past the new epoch's start were never the group's.
        log.warning("commitlog cut at offset %d (the recovery limit); %d bytes after it dropped", limit, scan.end - limit)
        commit_log.truncate_to(limit)
        scan.end = limit
        scan.last_message_offset = -1
    end = scan.end
    index_service.truncate_to(scan.end)  # nothing may claim to hold messages past the cut
    lower_checkpoint(scan, commit_log, checkpoint)
    min_offset = max(0, commit_log.get_min_offset())
    for cq in store.all_consume_queues():
        if cq.max_physic_offset > end:
            cq.truncate_dirty_logic_files(end)
        cq.correct_min_offset(min_offset)
        store.trim_mappings()
    # Dispatch what the queues and the index lack (they may trail the log after a crash).
    start = max([cq.max_physic_offset for cq in store.all_consume_queues()] + [min_offset])
    if rebuild_from is not None:
        start = min(start, max(rebuild_from, min_offset))
    first = min(start, end)
    store.index_rebuild_from = None
    if store.config.message_index_enable:
        first = plan_index_rebuild(store, first, min_offset)
    reput.reput_from_offset = first
    progress.begin("dispatching", end - first)
    reput.on_progress = lambda offset: progress.advance(offset - first)
    try:
        caught_up = reput.do_reput()
    finally:
        reput.on_progress = None
    progress.advance(progress.total_bytes)
    commit_log.topic_queue_table = {(cq.topic, cq.queue_id): cq.get_max_offset_in_queue() for cq in store.all_consume_queues()}
    progress.phase = "recovered"
    log.info("store recovered: commitlog [%d, %d), %d messages re-dispatched", min_offset, end, caught_up)
    if commit_log.damaged_ranges:
        log.error(
            "the commitlog has %d damaged range(s), %d bytes in all, skipped by dispatch and reads: %s",
            len(commit_log.damaged_ranges), commit_log.damaged_bytes(), list(commit_log.damaged_ranges),
        )  # fmt: skip
    return end


def plan_index_rebuild(store: RecoveredStore, first: int, min_offset: int) -> int:
    """Where dispatch starts, given that it would start at `first`: when the index ends before
    `first`, either earlier (after a crash, or for a gap below index_rebuild_background_min_bytes,
    it is dispatched again now; the queues skip the entries they hold) or at `first` with the index left to the
    background rebuild from its end (`store.index_rebuild_from`; dispatch adds no keys meanwhile).
    An index end that is no message's start (IndexService.truncate_to lowered it below a cut)
    plans nothing: dispatch after the cut indexes what follows."""
    index_service = store.index_service
    indexed_to = index_service.end_phy_offset()  # where the last message indexed starts
    if indexed_to is None or indexed_to < min_offset:
        index_from = min_offset
    else:
        end = _message_end(store, indexed_to)
        if end is None:
            return first
        index_from = end
    if index_from >= first:
        return first
    # After a crash the timer's and the transactions' delivery checks read the index as soon as
    # they start: it must be whole by then, so the gap is dispatched with recovery whatever its size.
    if not store.last_exit_ok or first - index_from < store.config.index_rebuild_background_min_bytes:
        log.info("the index ends at offset %d, before the queues' %d: dispatching from there again", index_from, first)
        return index_from
    index_service.rebuilding = True
    store.index_rebuild_from = index_from
    return first


def _message_end(store: RecoveredStore, offset: int) -> int | None:
    """The end of the message starting at `offset`; None when no whole message starts there."""
    mf = store.commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
    if mf is None or not mf.hold():
        return None
    try:
        result = store.commit_log.check_at(mf, offset - mf.file_from_offset, decode=False)
    finally:
        mf.release()
    return offset + result.size if result.outcome is DecodeOutcome.MESSAGE else None
