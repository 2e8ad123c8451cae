"""IndexFile layout and key queries: collisions, rolling files, time ranges."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from store import DefaultMessageStore, build_message
from store.index.index_file import HEADER_BYTES, IndexFile, key_hash
from store.index.index_service import IndexService
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.store.test_mapped_file import resident_kib
from tests.waiting import wait_for

FAR = 2**62


def test_index_file_layout(tmp_path: Path) -> None:
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, slot_num=8, index_num=16)
    assert f.put_key("t#a", 100, 1_000_000)
    assert f.put_key("t#b", 200, 1_003_500)
    f.flush()
    with open(path, "rb") as fh:
        data = fh.read()
    assert len(data) == 40 + 8 * 4 + 16 * 20
    begin_ts, end_ts, begin_phy, end_phy, slots_used, count = struct.unpack_from(">qqqqii", data, 0)
    assert (begin_ts, end_ts, begin_phy, end_phy, count) == (1_000_000, 1_003_500, 100, 200, 3)
    assert slots_used in (1, 2)
    h = key_hash("t#b")
    (slot_value,) = struct.unpack_from(">i", data, HEADER_BYTES + (h % 8) * 4)
    assert slot_value == 2
    entry = struct.unpack_from(">iqii", data, HEADER_BYTES + 8 * 4 + 2 * 20)
    assert entry[0] == h and entry[1] == 200 and entry[2] == 3  # time difference in seconds
    f.close()
    again = IndexFile(path, slot_num=8, index_num=16)
    assert again.index_count == 3 and again.select_phy_offsets("t#a", 10, 0, FAR) == [100]
    again.close()


def test_full_index_file_refuses(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "1"), slot_num=4, index_num=3)
    assert f.put_key("a", 1, 1) and f.put_key("b", 2, 2)
    assert not f.put_key("c", 3, 3)
    f.close()


def test_query_by_key_confirms_hits_against_messages(store: DefaultMessageStore) -> None:
    # "Aa" and "BB" collide in Java's hash: the index returns both, the store keeps the right one.
    r1 = store.put_message(build_message("T", b"one", keys=["Aa"]))
    r2 = store.put_message(build_message("T", b"two", keys=["BB"]))
    store.put_message(build_message("Other", b"three", keys=["Aa"]))
    wait_dispatched(store)
    assert key_hash("T#Aa") == key_hash("T#BB")  # a real collision
    got = store.query_message("T", "Aa", 10, 0, FAR)
    assert [m["body"] for m in got] == [b"one"] and got[0]["commitlog_offset"] == r1.items[0].wrote_offset
    assert [m["body"] for m in store.query_message("T", "BB", 10, 0, FAR)] == [b"two"]
    assert r2.ok


def test_forced_hash_collisions_in_one_slot(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "s"), max_hash_slot_num=1, max_index_num=500)
    s = open_store(cfg)
    try:
        for i in range(50):
            s.put_message(build_message("T", f"b{i}".encode(), keys=[f"k{i}"]))
        wait_dispatched(s)
        for i in (0, 17, 49):
            got = s.query_message("T", f"k{i}", 10, 0, FAR)
            assert [m["body"] for m in got] == [f"b{i}".encode()]
    finally:
        s.shutdown()


def test_uniq_key_lookup_and_newest_first_across_rolled_files(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "s"), max_index_num=20)
    s = open_store(cfg)
    try:
        ids = []
        for i in range(40):
            r = s.put_message(build_message("T", f"m{i}".encode(), keys=["same"], uniq_key=f"U{i}"))
            ids.append(r)
            time.sleep(0.001)  # store times apart: newest first is by store time
        wait_dispatched(s)
        assert len(os.listdir(cfg.index_dir())) >= 4
        got = s.query_message("T", "same", 100, 0, FAR)
        assert [m["body"] for m in got] == [f"m{i}".encode() for i in reversed(range(40))]
        assert [m["body"] for m in s.query_message("T", "U7", 5, 0, FAR)] == [b"m7"]
        assert [m["body"] for m in s.query_message("T", "same", 3, 0, FAR)] == [b"m39", b"m38", b"m37"]
    finally:
        s.shutdown()


def test_time_range_filters(store: DefaultMessageStore) -> None:
    store.put_message(build_message("T", b"old", keys=["k"]))
    wait_dispatched(store)
    time.sleep(2.1)  # the two messages' store times must lie well apart (the query below allows 1.5 s)
    mark = int(time.time() * 1000)
    store.put_message(build_message("T", b"new", keys=["k"]))
    wait_dispatched(store)
    assert [m["body"] for m in store.query_message("T", "k", 10, mark, FAR)] == [b"new"]
    assert [m["body"] for m in store.query_message("T", "k", 10, 0, mark - 1500)] == [b"old"]


def test_a_key_query_returns_at_most_max_msgs_num_batch(tmp_path: Path) -> None:
    """RocketMQ's IndexService.queryOffset caps maxNum at maxMsgsNumBatch (64 by default)."""
    s = open_store(small_config(str(tmp_path / "s"), max_msgs_num_batch=5))
    try:
        for i in range(12):
            s.put_message(build_message("T", f"m{i}".encode(), keys=["same"]))
        wait_dispatched(s)
        got = s.query_message("T", "same", 100, 0, FAR)
        assert [m["body"] for m in got] == [f"m{i}".encode() for i in range(11, 6, -1)]
        assert len(s.query_message("T", "same", 3, 0, FAR)) == 3
    finally:
        s.shutdown()
    assert small_config("x").max_msgs_num_batch == 64


def test_the_index_walk_stops_after_the_first_file_begun_before_the_range(tmp_path: Path) -> None:
    """Files are read newest first; once one began before `begin`, no older file is read
    (RocketMQ's IndexService.queryOffset). An older file whose entries claim later times
    (written before the clock stepped back) is therefore not consulted."""
    cfg = small_config(str(tmp_path / "s"), max_hash_slot_num=8, max_index_num=16)
    os.makedirs(cfg.index_dir())
    older = IndexFile(os.path.join(cfg.index_dir(), "20260101000000000"), 8, 16)
    assert older.put_key("T#k", 100, 9_000_000)
    newer = IndexFile(os.path.join(cfg.index_dir(), "20260101000001000"), 8, 16)
    assert newer.put_key("T#k", 200, 5_000_000) and newer.put_key("T#k", 300, 7_000_000)
    for f in (older, newer):
        f.flush()
        f.close()
    service = IndexService(cfg)
    service.load(True, 0)
    try:
        assert service.query_offsets("T", "k", 10, 6_000_000, FAR) == [300]  # the older file is not read
        assert service.query_offsets("T", "k", 10, 0, FAR) == [300, 200, 100]  # a range from 0 reads both
    finally:
        service.shutdown()


def test_a_message_put_after_a_restart_past_the_loaded_blocks_is_found_by_offset_and_key(tmp_path: Path) -> None:
    """A reopened file's readable bytes were bounded by the blocks it had when loaded, and that bound never
    moved: a message put after a restart, further into the same file, was not found by offset or key until
    the next restart (the timer's and the delay levels' checks after a failover read it so)."""
    config = small_config(str(tmp_path / "s"), mapped_file_size_commit_log_bytes=1024 * 1024)
    s = open_store(config)
    first = s.put_message(build_message("T", b"before", queue_id=0, keys=["before"])).items[0].wrote_offset
    s.shutdown()
    s = open_store(config)
    try:
        mf = s.commit_log.mapped_file_queue.get_last_mapped_file()
        assert mf is not None
        loaded_end = mf.data_end
        if loaded_end >= mf.file_size:
            pytest.skip("this filesystem reports no hole (SEEK_HOLE): every byte counts as backed")
        wrote = 0
        i = 0
        while wrote <= loaded_end:
            wrote = s.put_message(build_message("T", b"x" * 2000, queue_id=0, keys=[f"k{i}"])).items[0].wrote_offset
            i += 1
        wait_dispatched(s)
        found = s.look_message_by_offset(wrote)
        assert found is not None and found["properties"]["KEYS"] == f"k{i - 1}"
        assert [m["commitlog_offset"] for m in s.query_message("T", f"k{i - 1}", 4, 0, 1 << 62)] == [wrote]
        assert s.look_message_by_offset(first) is not None
    finally:
        s.shutdown()


def _slot_pages_resident(f: IndexFile) -> int:
    """Kibibytes of `f`'s header and slots resident in this process (its mapping's pages faulted in)."""
    slots_end = HEADER_BYTES + 4 * f.slot_num
    assert f.mapped_file.reserved_to >= slots_end  # the slots are reserved whole with the header
    return resident_kib(f.path)


def test_an_index_files_slots_are_faulted_in_by_the_allocate_service(tmp_path: Path) -> None:
    """Any key's hash picks any slot: the allocate service faults in the header and slots of a file made at a
    roll, of one made ahead, and of the last one at a start, so the dispatching thread does not fault there."""
    slot_num = 256 * 1024  # 1 MiB of slots
    config = small_config(str(tmp_path), max_hash_slot_num=slot_num, max_index_num=8, prefault_mapped_file_enable=True)
    slots_kib = (HEADER_BYTES + 4 * slot_num) // 1024
    store = open_store(config)
    try:
        service = store.allocate_service
        store.put_message(build_message("T", b"one", keys=["k1"]))  # the first file: made at the roll
        wait_dispatched(store)
        wait_for(lambda: _slot_pages_resident(store.index_service.index_files[0]) >= slots_kib, 20, what="the first file's slots")
        for i in range(8):  # past ORDER_NEXT_FILE_AT_PERCENT of 8 entries: the next file is made ahead, then rolled to
            store.put_message(build_message("T", b"more", keys=[f"k{i + 2}"]))
        wait_dispatched(store)
        files = store.index_service.index_files
        assert len(files) >= 2
        wait_for(lambda: all(_slot_pages_resident(f) >= slots_kib for f in files), 20, what="every file's slots")
        assert service.prefaulted_bytes >= 2 * slots_kib * 1024
    finally:
        store.shutdown()
    again = open_store(config)  # a new process's mapping: the start prefaults the last file's slots
    try:
        last = again.index_service.index_files[-1]
        wait_for(lambda: _slot_pages_resident(last) >= slots_kib, 20, what="the last file's slots after a start")
    finally:
        again.shutdown()
