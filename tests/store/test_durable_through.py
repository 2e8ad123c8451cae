"""A put with `defer_durability` answers at once and owes its flush wait; `durable_through` is one wait for many puts."""

from __future__ import annotations

from pathlib import Path

from store import FlushDiskType, PutBatch, PutMessageStatus, build_message
from store.logfile.group_commit_service import GroupCommitService
from tests.store.conftest import open_store, small_config
from tests.waiting import wait_for


def owing(topic: str, body: bytes) -> PutBatch:
    batch = PutBatch.of([build_message(topic, body, 0)])
    batch.defer_durability = True
    return batch


def test_puts_owing_durability_share_one_flush_wait_under_sync_flush(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        service = store.flush_service
        assert isinstance(service, GroupCommitService)
        futures = [store.put(owing("S", b"m%d" % i)) for i in range(6)]
        assert all(f.done() for f in futures)  # answered at once: the wait is the caller's
        results = [f.result() for f in futures]
        assert all(r.ok and r.durability_owed for r in results)
        end = max(r.end_offset for r in results)
        served_before = service.requests_served
        durable = store.durable_through(end)
        assert durable is not None and durable.result(10) is PutMessageStatus.PUT_OK
        assert store.commit_log.flushed_where() >= end
        # Counted after the futures are completed: waited for, then exactly one request for the six puts.
        wait_for(lambda: service.requests_served > served_before, what="the group commit to count its request")
        assert service.requests_served == served_before + 1
        plain = store.put(PutBatch.of([build_message("S", b"plain", 0)]))  # without the flag: its own wait
        assert plain.result(10).ok and not plain.result().durability_owed
    finally:
        store.shutdown()


def test_nothing_is_owed_when_puts_are_answered_at_once(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store"), flush_disk_type=FlushDiskType.ASYNC_FLUSH))
    try:
        result = store.put(owing("A", b"x")).result()
        assert result.ok and not result.durability_owed
        assert store.durable_through(result.end_offset) is None
    finally:
        store.shutdown()


def test_a_wait_with_no_room_is_not_confirmed_and_the_put_stays_stored(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "store"), flush_disk_type=FlushDiskType.SYNC_FLUSH, max_group_commit_requests=0)
    store = open_store(config)
    try:
        result = store.put(owing("F", b"kept")).result()
        assert result.stored and result.durability_owed
        durable = store.durable_through(result.end_offset)
        assert durable is not None and durable.result(10) is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert store.get_max_offset_in_queue("F", 0) == 1
    finally:
        store.shutdown()
