"""A put with `defer_durability` answers at once and owes its flush wait; `durable_through` is one wait for many puts."""

from __future__ import annotations

import json
from pathlib import Path

from store import FlushDiskType, PutBatch, PutMessageStatus, build_message
from store.logfile.group_commit_service import GroupCommitService
from store.put.put_batch import packed_json
from store.status import PutRefusal
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


def packed(topic: str, body: str, queue_id: int = 0) -> PutBatch:
    """A JSON produce as the front end packs it, owing durability (a single produce's batch)."""
    got = packed_json(json.dumps({"body": body}).encode(), 64, 4096, b"")
    assert got is not None
    batch = PutBatch.of_packed(topic, queue_id, got)
    batch.defer_durability = True
    return batch


def test_put_answer_is_the_result_of_a_packed_put_with_no_waiter_and_counts_it_once(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        messages_before, bytes_before = store.stats.put_messages, store.stats.put_bytes
        result, waiter = store.put_answer(packed("P", "one"))
        assert waiter is None and result.ok and result.durability_owed
        assert len(result.items) == 1 and store.get_max_offset_in_queue("P", 0) == 1
        assert store.stats.put_messages == messages_before + 1
        assert store.stats.put_bytes == bytes_before + result.items[0].wrote_bytes
        assert result.end_offset == store.commit_log.get_max_offset()
        durable = store.durable_through(result.end_offset)
        assert durable is not None and durable.result(10) is PutMessageStatus.PUT_OK
        with store.get_message("G", "P", 0, 0, 1) as got:
            assert [m["body"] for m in got.decode()] == [b"one"]
        # A batch of three of different sizes: counted as three messages and their stored bytes.
        three = packed_json(json.dumps({"messages": [{"body": f"b{i}" * (i + 1)} for i in range(3)]}).encode(), 64, 4096, b"")
        assert three is not None
        batch = PutBatch.of_packed("P", 0, three)
        batch.defer_durability = True
        counted = store.stats.put_bytes
        batch_result, waiter = store.put_answer(batch)
        assert waiter is None and batch_result.ok and len(batch_result.items) == 3
        assert store.stats.put_messages == messages_before + 4
        assert store.stats.put_bytes == counted + sum(item.wrote_bytes for item in batch_result.items)
        assert (
            batch_result.end_offset
            == store.commit_log.get_max_offset()
            == batch_result.items[2].wrote_offset + batch_result.items[2].wrote_bytes
        )
        refused, waiter = store.put_answer(packed("P", "two", queue_id=10_000))  # past max_topic_queue_nums
        assert waiter is None and not refused.ok and not refused.items and refused.refusal is PutRefusal.QUEUE_NOT_FOUND
        assert store.get_max_offset_in_queue("P", 0) == 4 and store.stats.put_messages == messages_before + 4
    finally:
        store.shutdown()
