"""A consume queue that starts mid-file: filler entries (0, 2^31 - 1, 0) in front of its first
entry, as RocketMQ's ConsumeQueue.fillPreBlank writes, so a RocketMQ broker's recovery (which
ends a queue at the first entry whose size is not > 0) keeps the whole queue."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from store import DefaultMessageStore, build_message
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY, FILLER_ENTRY, FILLER_SIZE, ConsumeQueue
from tests.store.conftest import open_store, small_config, wait_dispatched

TOPIC = "T"
PER_FILE = 64  # entries per consume-queue file (small_config)
COUNT = 700  # three commitlog files of 64 KiB


def rocketmq_recovered_entries(data: bytes) -> int:
    """Entries of one queue file that RocketMQ's ConsumeQueue.recover keeps: it stops at the
    first entry whose offset is < 0 or whose size is not > 0 (a reference for the test only)."""
    kept = 0
    for pos in range(0, len(data) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
        offset, size, _ = ENTRY.unpack_from(data, pos)
        if offset < 0 or size <= 0:
            break
        kept += 1
    return kept


def queue_files(root: str) -> list[str]:
    qdir = os.path.join(root, "consumequeue", TOPIC, "0")
    return [os.path.join(qdir, name) for name in sorted(os.listdir(qdir))]


def store_whose_queue_starts_mid_file(root: str) -> tuple[int, int, dict[int, bytes]]:
    """Fill three commitlog files, drop the first (as retention does) and the consume queues,
    and reopen: dispatch rebuilds the queue from the first surviving message, whose queue
    offset is not a multiple of the file's entries. Returns (min, max, bodies by queue offset)."""
    config = small_config(root)
    s = open_store(config)
    s.topic_config_manager.create_or_update(TOPIC, 1)
    for i in range(COUNT):
        assert s.put_message(build_message(TOPIC, b"body-%04d" % i + b"x" * 150, 0)).ok
    wait_dispatched(s)
    s.shutdown()
    first = sorted(os.listdir(config.commit_log_dir()))[0]
    os.unlink(os.path.join(config.commit_log_dir(), first))
    shutil.rmtree(config.consume_queue_dir())
    with open(config.abort_path(), "w"):
        pass  # crash recovery re-dispatches from the log's start: the queue is rebuilt
    s = open_store(config)
    try:
        low, high = s.get_min_offset_in_queue(TOPIC, 0), s.get_max_offset_in_queue(TOPIC, 0)
        bodies = pull_all(s, low, high)
    finally:
        s.shutdown()
    return low, high, bodies


def pull_all(store: DefaultMessageStore, low: int, high: int) -> dict[int, bytes]:
    served: dict[int, bytes] = {}
    offset = low
    while offset < high:
        with store.get_message("g", TOPIC, 0, offset, 32) as result:
            for queue_offset, message in zip(result.queue_offsets, result.decode(), strict=True):
                served[queue_offset] = message["body"]
            assert result.next_begin_offset > offset
            offset = result.next_begin_offset
    return served


def test_a_queue_created_mid_file_begins_with_filler(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    low, high, bodies = store_whose_queue_starts_mid_file(root)
    assert low % PER_FILE != 0 and high == COUNT, (low, high)
    assert sorted(bodies) == list(range(low, COUNT))
    assert all(bodies[q].startswith(b"body-%04d" % q) for q in bodies)
    first_file = queue_files(root)[0]
    assert int(os.path.basename(first_file)) == (low - low % PER_FILE) * CQ_STORE_UNIT_SIZE
    with open(first_file, "rb") as fh:
        data = fh.read()
    head = low % PER_FILE
    assert data[: head * CQ_STORE_UNIT_SIZE] == FILLER_ENTRY * head
    assert ENTRY.unpack_from(data, head * CQ_STORE_UNIT_SIZE)[1] not in (0, FILLER_SIZE)
    # RocketMQ keeps every entry of the file (filler included), not none of them.
    assert rocketmq_recovered_entries(data) == PER_FILE


def test_filler_and_older_zeros_are_recovered_the_same(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    low, high, bodies = store_whose_queue_starts_mid_file(root)
    config = small_config(root)
    for head_bytes in (FILLER_ENTRY, bytes(CQ_STORE_UNIT_SIZE)):  # as written now, then as older versions left it
        with open(queue_files(root)[0], "r+b") as fh:
            fh.write(head_bytes * (low % PER_FILE))
        s = open_store(config)
        try:
            assert (s.get_min_offset_in_queue(TOPIC, 0), s.get_max_offset_in_queue(TOPIC, 0)) == (low, high)
            assert pull_all(s, low, high) == bodies
            assert s.put_message(build_message(TOPIC, b"after", 0)).ok
            wait_dispatched(s)
            bodies[high] = b"after"
            high += 1
        finally:
            s.shutdown()
        with open(queue_files(root)[0], "rb") as fh:
            assert fh.read((low % PER_FILE) * CQ_STORE_UNIT_SIZE) == FILLER_ENTRY * (low % PER_FILE)  # zeros rewritten


def test_a_queue_whose_only_file_starts_mid_file_recovers_with_filler_or_zeros(tmp_path: Path) -> None:
    size = PER_FILE * CQ_STORE_UNIT_SIZE
    cq = ConsumeQueue(TOPIC, 0, str(tmp_path), size)
    for i in range(5):  # queue offsets 70..74, messages of 100 bytes from commitlog offset 7000
        assert cq.put_message_position_info(7000 + 100 * i, 100, 0, 70 + i, 1)
    cq.flush(0)
    cq.shutdown()
    path = os.path.join(str(tmp_path), TOPIC, "0", f"{PER_FILE * CQ_STORE_UNIT_SIZE:020d}")
    for head_bytes in (FILLER_ENTRY, bytes(CQ_STORE_UNIT_SIZE)):
        with open(path, "r+b") as fh:
            fh.write(head_bytes * 6)
        cq = ConsumeQueue(TOPIC, 0, str(tmp_path), size)
        assert cq.load()
        cq.recover()
        cq.correct_min_offset(0)
        assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue(), cq.max_physic_offset) == (70, 75, 7500)
        assert cq.read_entry(74) == (7400, 100, 0)
        cq.shutdown()
        with open(path, "rb") as fh:
            data = fh.read()
        assert data[: 6 * CQ_STORE_UNIT_SIZE] == FILLER_ENTRY * 6 and rocketmq_recovered_entries(data) == 11
