"""Consumer offsets: the commit log beside consumerOffset.json, its torn tail and its compaction."""

from __future__ import annotations

import os
import threading

from store.consumer_offset_log import decode_records
from store.consumer_offset_manager import ConsumerOffsetManager


def test_torn_tail_of_the_offset_log_is_dropped_and_the_log_continues(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path), sync=True)
    m.load()
    m.commit_offset("g", "T", 0, 5)
    m.commit_offsets("g", [("T", 1, 7), ("U", 0, 1)])
    m.close()  # no compaction: everything is in the log only
    assert not os.path.exists(tmp_path / "consumerOffset.json")
    log_path = tmp_path / "consumerOffset.log"
    whole = log_path.read_bytes()
    m = ConsumerOffsetManager(str(tmp_path), sync=True)
    m.load()
    m.commit_offset("g", "T", 0, 9)
    m.close()
    full = log_path.read_bytes()
    torn = full[: len(whole) + (len(full) - len(whole)) // 2]  # the last record half written
    log_path.write_bytes(torn)

    m = ConsumerOffsetManager(str(tmp_path), sync=True)
    m.load()
    assert (m.query_offset("g", "T", 0), m.query_offset("g", "T", 1), m.query_offset("g", "U", 0)) == (5, 7, 1)
    assert log_path.stat().st_size == len(whole), "the torn tail is cut so new records follow whole ones"
    m.commit_offset("g", "T", 0, 11)
    m.close()
    m = ConsumerOffsetManager(str(tmp_path), sync=False)
    m.load()
    assert m.query_offset("g", "T", 0) == 11


def test_flipped_byte_in_a_record_stops_replay_there(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.load()
    for i in range(3):
        m.commit_offset("g", "T", i, i + 10)
    m.close()
    path = tmp_path / "consumerOffset.log"
    data = bytearray(path.read_bytes())
    records, good = decode_records(bytes(data))
    assert len(records) == 3 and good == len(data)
    data[-3] ^= 0x01  # inside the last record's payload: its CRC no longer matches
    path.write_bytes(bytes(data))
    m = ConsumerOffsetManager(str(tmp_path))
    m.load()
    assert [m.query_offset("g", "T", i) for i in range(3)] == [10, 11, -1]


def test_compaction_keeps_every_commit_made_during_it(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path), sync=True)
    m.load()
    stop = threading.Event()
    last: dict[int, int] = {}

    def committer(q: int) -> None:
        i = 0
        while not stop.is_set():
            m.commit_offset("g", "T", q, i)
            last[q] = i
            i += 1

    threads = [threading.Thread(target=committer, args=(q,)) for q in range(3)]
    for t in threads:
        t.start()
    for _ in range(20):
        m.persist()
    stop.set()
    for t in threads:
        t.join()
    m.close()
    assert not os.path.exists(tmp_path / "consumerOffset.log.old")
    m2 = ConsumerOffsetManager(str(tmp_path))
    m2.load()
    assert {q: m2.query_offset("g", "T", q) for q in range(3)} == last


def test_removed_topic_stays_removed_after_replay(tmp_path) -> None:
    m = ConsumerOffsetManager(str(tmp_path))
    m.load()
    m.commit_offset("g", "Gone", 0, 3)
    m.persist()
    m.remove_topic("Gone")
    m.commit_offset("g", "Kept", 0, 4)
    m.close()
    m = ConsumerOffsetManager(str(tmp_path))
    m.load()
    assert m.query_offset("g", "Gone", 0) == -1 and m.query_offset("g", "Kept", 0) == 4
