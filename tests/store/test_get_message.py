"""getMessage statuses, tag filtering, transfer limits and offset-by-time."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, PutMessageResult, TagFilter, build_message
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.waiting import wait_for


def put_n(
    store: DefaultMessageStore, n: int, topic: str = "T", queue_id: int = 0, tags: list[str] | None = None, size: int = 10
) -> list[PutMessageResult]:
    out = []
    for i in range(n):
        tag = tags[i % len(tags)] if tags else None
        r = store.put_message(build_message(topic, f"{i:0{size}d}".encode(), queue_id=queue_id, tags=tag, keys=[f"key-{i}"]))
        assert r.ok
        out.append(r)
    wait_dispatched(store)
    return out


def test_statuses_of_an_empty_and_unknown_queue(store: DefaultMessageStore) -> None:
    with store.get_message("g", "Nope", 0, 0, 10) as r:
        assert r.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    put_n(store, 3)
    with store.get_message("g", "T", 0, 3, 10) as r:
        assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 3
    with store.get_message("g", "T", 0, 10, 10) as r:
        # RocketMQ 4.9.4+: the max offset, also when the queue starts at 0.
        assert r.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 3
    with store.get_message("g", "T", 0, 1, 10) as r:
        assert r.status is GetMessageStatus.FOUND and r.queue_offsets == [1, 2] and r.next_begin_offset == 3
        assert (r.min_offset, r.max_offset) == (0, 3)


def test_consume_queue_entries_are_20_bytes(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    results = put_n(store, 70, tags=["TagA"])
    assert store.flush_consume_queue_service is not None
    store.flush_consume_queue_service.do_flush(3)
    qdir = os.path.join(config.consume_queue_dir(), "T", "0")
    names = sorted(os.listdir(qdir))
    assert names[:2] == [f"{0:020d}", f"{20 * 64:020d}"]
    with open(os.path.join(qdir, names[0]), "rb") as fh:
        data = fh.read()
    for i in range(64):
        phy, size, tags_code = struct.unpack_from(">qiq", data, i * 20)
        item = results[i].items[0]
        assert (phy, size, tags_code) == (item.wrote_offset, item.wrote_bytes, 2598919)


def test_a_filtered_get_examines_the_scan_window_of_bytes_or_of_the_count_asked(tmp_path: Path) -> None:
    """RocketMQ's DefaultMessageStore.getMessage: max(maxFilterMessageCount, maxMsgNums * 20) bytes of
    consume queue per get (here max_filter_message_size_bytes = 200: 10 entries)."""
    s = open_store(small_config(str(tmp_path / "s"), max_filter_message_size_bytes=200))
    try:
        put_n(s, 30, tags=["Other"])
        put_n(s, 1, tags=["Wanted"])
        with s.get_message("g", "T", 0, 0, 1, TagFilter.parse("Wanted")) as r:
            assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 10
        with s.get_message("g", "T", 0, 25, 1, TagFilter.parse("Wanted")) as r:
            assert r.status is GetMessageStatus.FOUND and r.queue_offsets == [30] and r.next_begin_offset == 31
        with s.get_message("g", "T", 0, 0, 32, TagFilter.parse("Wanted")) as r:  # 32 asked for: 640 bytes, 32 entries
            assert r.status is GetMessageStatus.FOUND and r.queue_offsets == [30]
    finally:
        s.shutdown()
    assert small_config("x").max_filter_message_size_bytes == 320_000  # 16,000 entries: see docs/benchmarks.md


def test_tag_filter_by_hash_and_exact_tag(store: DefaultMessageStore) -> None:
    # "Aa" and "BB" share a Java hash code: the exact check must tell them apart.
    put_n(store, 30, tags=["Aa", "BB", "C"])
    with store.get_message("g", "T", 0, 0, 32, TagFilter.parse("Aa")) as r:
        assert r.status is GetMessageStatus.FOUND
        assert {m["tags"] for m in r.decode()} == {"Aa"} and r.message_count == 10
        assert r.next_begin_offset == 30
    with store.get_message("g", "T", 0, 0, 32, TagFilter.parse("BB||C")) as r:
        assert {m["tags"] for m in r.decode()} == {"BB", "C"} and r.message_count == 20
    with store.get_message("g", "T", 0, 0, 32, TagFilter.parse("Nope")) as r:
        assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 30
    assert TagFilter.parse("*") is None and TagFilter.parse(None) is None
    for bad in ("A||", "||", "A|| ||B"):
        try:
            TagFilter.parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


def test_transfer_limits_count_and_bytes(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "s"), max_transfer_count_on_message_in_memory=5, max_transfer_bytes_on_message_in_memory=10_000)
    s = open_store(cfg)
    try:
        put_n(s, 20, size=10)
        with s.get_message("g", "T", 0, 0, 100) as r:
            assert r.message_count == 5 and r.next_begin_offset == 5
        with s.get_message("g", "T", 0, 0, 3) as r:
            assert r.message_count == 3
        put_n(s, 10, topic="Big", size=3000)
        with s.get_message("g", "Big", 0, 0, 100) as r:
            assert r.message_count == 3 and r.buffer_total_size <= 10_000
    finally:
        s.shutdown()


def test_raw_buffers_are_the_stored_bytes(store: DefaultMessageStore) -> None:
    results = put_n(store, 5)
    with store.get_message("g", "T", 0, 0, 5) as r:
        raw = r.to_bytes()
        assert len(raw) == sum(i.items[0].wrote_bytes for i in results)
        assert r.commitlog_offsets == [i.items[0].wrote_offset for i in results]
        assert raw[: results[0].items[0].wrote_bytes] == store.get_commit_log_data(0, results[0].items[0].wrote_bytes)


def test_offset_too_small_after_leading_files_are_deleted(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "s"))
    s = open_store(cfg)
    try:
        put_n(s, 300, size=1000)
        mfq = s.commit_log.mapped_file_queue
        assert len(mfq.mapped_files) > 3
        # A pass stops at a file another thread holds (the flush service msyncs the file it has
        # reached, far behind under load) and the next pass deletes it once released, as
        # CleanCommitLogService's passes do; a forcible release is never due here.
        deleted = [0]

        def two_deleted() -> bool:
            deleted[0] += mfq.delete_expired_files_by_time(0, 0, 3_600_000, True, 2 - deleted[0], int(time.time() * 1000))
            return deleted[0] >= 2

        wait_for(two_deleted, 10, what=lambda: f"2 files deleted: {deleted[0]} were", poll_s=0.002)
        min_phy = s.commit_log.get_min_offset()
        assert min_phy == 2 * cfg.mapped_file_size_commit_log_bytes
        cq = s.find_consume_queue("T", 0)
        assert cq is not None
        cq.correct_min_offset(min_phy)
        new_min = s.get_min_offset_in_queue("T", 0)
        assert new_min > 0
        with s.get_message("g", "T", 0, 0, 10) as r:
            assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == new_min
        with s.get_message("g", "T", 0, new_min, 10) as r:
            assert r.status is GetMessageStatus.FOUND and r.decode()[0]["commitlog_offset"] >= min_phy
    finally:
        s.shutdown()


def test_offset_in_queue_by_time(store: DefaultMessageStore) -> None:
    put_n(store, 5)
    time.sleep(0.02)  # the mark lies strictly between the two batches' store times
    mark = int(time.time() * 1000)
    time.sleep(0.02)
    put_n(store, 5)
    first_after = store.get_offset_in_queue_by_time("T", 0, mark)
    # put_n returns cumulative offsets: the second batch starts at queue offset 5
    assert first_after == 5
    assert store.get_offset_in_queue_by_time("T", 0, 0) == 0
    assert store.get_offset_in_queue_by_time("T", 0, mark + 10_000_000) == 10
    assert store.get_offset_in_queue_by_time("Unknown", 0, 0) == 0
