"""Files made ahead of need: a consume queue's and the index's next file, ordered at their mark.

Real store on real files (tiny files, so a few dozen messages cross the marks). Waits poll with a
deadline for the allocate service's thread; nothing asserts a duration.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, build_message
from store.logfile.file_ahead import AheadStatus
from store.logfile.mapped_file import offset_to_file_name
from tests.store.ahead_crash_writer import body_of
from tests.store.conftest import open_store, small_config
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOPIC = "Ahead"
DEADLINE_S = 20.0
CQ_UNITS = 64  # entries per consume-queue file in small_config; the next file is ordered at 32
TOTAL = CQ_UNITS + CQ_UNITS // 2 + 1  # the consume-queue test's messages: past the second file's mark
INDEX_ENTRIES = 256  # entries per index file in small_config; the next file is ordered at 128


def put(store: DefaultMessageStore, start: int, count: int, queue_id: int = 0, body_bytes: int = 100) -> None:
    for i in range(start, start + count):
        key = f"k{i}"
        body = f"{key}:".encode().ljust(body_bytes, b".")
        assert store.put_message(build_message(TOPIC, body, queue_id, keys=[key])).ok


def bodies(store: DefaultMessageStore, queue_id: int = 0) -> list[str]:
    out: list[str] = []
    offset = 0
    while True:
        with store.get_message("check", TOPIC, queue_id, offset, 32) as r:
            if r.status is not GetMessageStatus.FOUND:
                return out
            out += [m["body"].split(b":")[0].decode() for m in r.decode()]
            offset = r.next_begin_offset


def test_a_consume_queue_s_next_file_is_made_at_its_mark_and_taken_by_the_roll(config: MessageStoreConfig) -> None:
    store = open_store(config)
    try:
        put(store, 0, CQ_UNITS // 2)
        cq = store.find_consume_queue(TOPIC, 0)
        assert cq is not None and cq.ahead.status is AheadStatus.NONE  # up to the mark: nothing ordered
        put(store, CQ_UNITS // 2, 1)
        wait_for(lambda: cq.ahead.status is AheadStatus.READY, DEADLINE_S, what="the queue's next file made", poll_s=0.005)
        following = os.path.join(cq.queue_dir, offset_to_file_name(CQ_UNITS * 20))
        assert os.path.exists(following) and len(cq.mapped_file_queue.mapped_files) == 1
        put(store, CQ_UNITS // 2 + 1, CQ_UNITS)  # past the first file's end, and past the second one's mark
        assert cq.ahead.taken == 1
        assert [mf.path for mf in cq.mapped_file_queue.mapped_files][1] == following
        assert store.get_max_offset_in_queue(TOPIC, 0) == TOTAL
        assert bodies(store) == [f"k{i}" for i in range(TOTAL)]
        wait_for(lambda: cq.ahead.status is AheadStatus.READY, DEADLINE_S, what="the third file made", poll_s=0.005)
        third = os.path.join(cq.queue_dir, offset_to_file_name(2 * CQ_UNITS * 20))
        assert os.path.exists(third)
    finally:
        store.shutdown()
    assert not os.path.exists(third)  # made and never taken: a clean shutdown removes it
    store = open_store(config)
    try:
        assert store.get_max_offset_in_queue(TOPIC, 0) == TOTAL
        put(store, TOTAL, CQ_UNITS)
        assert bodies(store) == [f"k{i}" for i in range(TOTAL + CQ_UNITS)]
    finally:
        store.shutdown()


def test_the_index_s_next_file_is_made_at_its_mark_and_continues_the_last(config: MessageStoreConfig) -> None:
    store = open_store(config)
    try:
        index = store.index_service
        n = 0
        while not index.index_files or index.index_files[-1].index_count < INDEX_ENTRIES // 2:  # a KEYS and a UNIQ_KEY entry each
            put(store, n, 1)
            n += 1
        wait_for(lambda: index.ahead.status is AheadStatus.READY, DEADLINE_S, what="the index's next file made", poll_s=0.005)
        assert len(index.index_files) == 1
        while len(index.index_files) == 1:
            put(store, n, 1)
            n += 1
        put(store, n, 10)
        n += 10
        assert index.ahead.taken == 1 and len(index.index_files) == 2
        first, second = index.index_files
        assert second.begin_phy_offset == first.end_phy_offset and second.begin_timestamp == first.end_timestamp
        for i in (0, n // 2, n - 12, n - 1):
            found = store.query_message(TOPIC, f"k{i}", 4, 0, 2**62)
            assert [m["body"].split(b":")[0].decode() for m in found] == [f"k{i}"]
    finally:
        store.shutdown()


def test_without_the_allocate_service_running_every_roll_creates_its_file(tmp_path: Path) -> None:
    """Loading and recovery run before the service starts: their orders are refused, the rolls create the files."""
    cfg = small_config(str(tmp_path / "store"))
    store = DefaultMessageStore(cfg)
    store.load()
    cq = store.find_consume_queue(TOPIC, 0, create=True)
    assert cq is not None
    for i in range(2 * CQ_UNITS + 1):
        assert cq.put_message_position_info(1000 + 100 * i, 100, 0, i, 0)
    assert cq.ahead.status is AheadStatus.NONE and cq.ahead.taken == 0
    assert len(cq.mapped_file_queue.mapped_files) == 3
    assert cq.read_entry(2 * CQ_UNITS) == (1000 + 100 * 2 * CQ_UNITS, 100, 0)
    store.shutdown()


def run_writer_and_kill(store_dir: str) -> int:
    """Run tests.store.ahead_crash_writer until every log has a file made ahead, SIGKILL it; its message count."""
    with subprocess.Popen(
        [sys.executable, "-m", "tests.store.ahead_crash_writer", store_dir], stdout=subprocess.PIPE, cwd=ROOT, text=True
    ) as proc:  # leaving the block closes the pipe
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().split()
            assert line[:1] == ["READY"], line
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
    return int(line[1])


def check_exactly(store: DefaultMessageStore, count: int) -> None:
    for q in (0, 1):
        assert bodies(store, q) == [f"k{i}" for i in range(q, count, 2)]
    for i in sorted({0, count // 3, count // 2, count - 2, count - 1}):
        found = store.query_message(TOPIC, f"k{i}", 4, 0, 2**62)
        assert [m["body"] for m in found] == [body_of(i)]


@pytest.mark.timeout(180)
def test_files_made_ahead_are_harmless_after_a_sigkill(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    count = run_writer_and_kill(root)
    cfg = small_config(root)
    made_ahead = [
        os.path.join(cfg.consume_queue_dir(), TOPIC, str(q), offset_to_file_name((count // 2 // CQ_UNITS + 1) * CQ_UNITS * 20))
        for q in (0, 1)
    ]
    assert all(os.path.exists(p) for p in made_ahead)  # the kill left them on disk
    index_files = sorted(os.listdir(cfg.index_dir()))
    store = open_store(cfg)
    try:
        check_exactly(store, count)
        assert not any(os.path.exists(p) for p in made_ahead)  # the file before each is not full: recovery removed them
        assert len(store.index_service.index_files) == len(index_files) - 1  # the empty one made ahead is removed
        assert all(f.index_count > 1 for f in store.index_service.index_files)
        for i in range(count, count + 3 * CQ_UNITS):  # through the next files of every log
            assert store.put_message(build_message(TOPIC, body_of(i), i % 2, keys=[f"k{i}"])).ok
        check_exactly(store, count + 3 * CQ_UNITS)
    finally:
        store.shutdown()
    store = open_store(cfg)
    try:
        check_exactly(store, count + 3 * CQ_UNITS)
    finally:
        store.shutdown()
