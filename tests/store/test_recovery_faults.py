"""Recovery from faults a killed process or a failing disk leaves: the index is rebuilt where it
really ends, damaged bytes in flushed data are skipped (the messages after them kept), and
recovery reports its progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, build_message
from store.codec.message_codec import HEADER_BYTES
from tests.store.conftest import open_store, wait_dispatched
from tests.store.phased_writer import TOPIC, body_of
from tests.store.phased_writer import config as writer_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAR = 2**62


def run_writer_and_kill(store_dir: str, plan: str) -> list[tuple[int, int, int]]:
    """Run tests/store/phased_writer.py to its DONE line, SIGKILL it; the acknowledged messages."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.phased_writer", store_dir, plan], stdout=subprocess.PIPE, cwd=ROOT, text=True
    )
    assert proc.stdout is not None
    acked: list[tuple[int, int, int]] = []
    for line in proc.stdout:
        if line.startswith("ACK "):
            _, offset, queue_id, queue_offset = line.split()
            acked.append((int(offset), int(queue_id), int(queue_offset)))
        elif line.strip() == "DONE":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    assert acked, "the writer acknowledged nothing"
    return acked


def pull_all(store: DefaultMessageStore, queue_id: int) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    while offset < store.get_max_offset_in_queue(TOPIC, queue_id):
        with store.get_message("check", TOPIC, queue_id, offset, 32) as r:
            assert r.status is GetMessageStatus.FOUND or r.next_begin_offset > offset, r.status
            bodies += [m["body"] for m in r.decode()]
            offset = r.next_begin_offset
    return bodies


def assert_all_readable(store: DefaultMessageStore, count: int, missing: AbstractSet[int] = frozenset()) -> None:
    expected = [i for i in range(count) if i not in missing]
    pulled = pull_all(store, 0) + pull_all(store, 1)
    assert sorted(pulled) == sorted(body_of(i) for i in expected)
    lost_keys = [i for i in expected if [m["body"] for m in store.query_message(TOPIC, f"k{i}", 4, 0, FAR)] != [body_of(i)]]
    assert lost_keys == [], f"{len(lost_keys)} of {len(expected)} key queries found nothing, first {lost_keys[:5]}"
    for i in missing:
        assert store.query_message(TOPIC, f"k{i}", 4, 0, FAR) == []


@pytest.mark.timeout(120)
def test_index_dropped_after_a_crash_is_rebuilt_from_where_it_really_ends(tmp_path: Path) -> None:
    store_dir = str(tmp_path / "s")
    # Old messages, 3.5 s later newer ones and a full flush (the checkpoint), then a few more:
    # the one index file ends past the checkpoint and is dropped; the checkpoint's commitlog
    # file is past the old messages.
    acked = run_writer_and_kill(store_dir, "w400,s3.5,w600,s0.5,f,w20")
    cfg = writer_config(store_dir)
    assert os.path.exists(cfg.abort_path())
    s = open_store(cfg)
    try:
        assert s.index_service.dropped_files >= 1, "the scenario must drop an index file"
        assert_all_readable(s, len(acked))
    finally:
        s.shutdown()


def flip_bit(cfg: MessageStoreConfig, offset: int) -> None:
    size = cfg.mapped_file_size_commit_log_bytes
    path = os.path.join(cfg.commit_log_dir(), f"{offset - offset % size:020d}")
    with open(path, "r+b") as fh:
        fh.seek(offset % size)
        b = fh.read(1)
        fh.seek(offset % size)
        fh.write(bytes([b[0] ^ 0x10]))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", ["clean", "sigkill"])
@pytest.mark.parametrize("where", ["body", "magic"])
def test_flipped_bit_in_flushed_data_loses_only_its_message(tmp_path: Path, stop: str, where: str) -> None:
    store_dir = str(tmp_path / "s")
    cfg = writer_config(store_dir)
    if stop == "sigkill":
        acked = run_writer_and_kill(store_dir, "w1200,s0.5,f")
    else:
        s = open_store(cfg)
        results = [s.put_message(build_message(TOPIC, body_of(i), queue_id=i % 2, keys=[f"k{i}"])) for i in range(1200)]
        wait_dispatched(s)
        s.shutdown()
        acked = [(r.items[0].wrote_offset, r.items[0].queue_id, r.items[0].logics_offset) for r in results]
    size = cfg.mapped_file_size_commit_log_bytes
    files = sorted({o - o % size for o, _, _ in acked})
    assert len(files) >= 4
    # A message in the middle of a flushed file that is not the last (a clean restart scans the last three).
    in_file = [n for n, (o, _, _) in enumerate(acked) if o - o % size == files[-2]]
    victim = in_file[len(in_file) // 2]
    offset = acked[victim][0]
    msg_size = acked[victim + 1][0] - offset
    flip_bit(cfg, offset + (HEADER_BYTES + 7 if where == "body" else 5))
    end_before = max(o for o, _, _ in acked) + 1
    for _round in range(2):  # the second start finds the range in the persisted table
        s = open_store(cfg)
        try:
            assert s.commit_log.get_max_offset() >= end_before, "nothing after the damage is cut"
            info = s.runtime_info()
            assert info["commitlog_damaged_ranges"] == [[offset, offset + msg_size]]
            assert info["commitlog_damaged_bytes"] == msg_size and info["commitlog_damaged_range_count"] == 1
            assert_all_readable(s, len(acked), {victim})
            assert s.look_message_by_offset(offset) is None
            r = s.put_message(build_message("After", b"after", keys=[f"after{_round}"]))
            assert r.ok
            wait_dispatched(s)  # dispatch passed the damaged range and goes on
            assert [m["body"] for m in s.query_message("After", f"after{_round}", 4, 0, FAR)] == [b"after"]
        finally:
            s.shutdown()
        if stop == "sigkill":
            open(cfg.abort_path(), "w").close()  # the second start recovers as after a crash again


def test_recovery_progress_after_load(tmp_path: Path) -> None:
    cfg = writer_config(str(tmp_path / "s"))
    s = DefaultMessageStore(cfg)
    assert s.recovery_progress() == {"phase": "not started", "scanned_bytes": 0, "total_bytes": 0}
    s.load()
    s.start()
    try:
        for i in range(400):
            assert s.put_message(build_message(TOPIC, body_of(i), keys=[f"k{i}"])).ok
        wait_dispatched(s)
    finally:
        s.shutdown()
    open(cfg.abort_path(), "w").close()
    s = DefaultMessageStore(cfg)
    s.load()
    try:
        p = s.recovery_progress()
        assert p["phase"] == "recovered"
        assert p["scanned_bytes"] == p["total_bytes"]
    finally:
        s.shutdown()
