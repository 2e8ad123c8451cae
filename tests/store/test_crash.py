"""Crash test: SIGKILL a SYNC_FLUSH writer at random points; every acknowledged message survives exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from store import DefaultMessageStore, FlushDiskType, GetMessageStatus
from tests.store.conftest import small_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_and_kill(store_dir: str, kill_after_s: float, writers: int) -> list[tuple[str, int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_writer", store_dir, str(writers)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        text=True,
    )
    acked: list[tuple[str, int, int]] = []
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.strip() == "READY"

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ACK":
                acked.append((parts[1], int(parts[2]), int(parts[3])))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    time.sleep(kill_after_s)  # the kill lands at a random point of the writer's puts: the time is the test's input
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    t.join(10)
    proc.stdout.close()
    return acked


def read_queue(store: DefaultMessageStore, queue_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        with store.get_message("check", "Crash", queue_id, offset, 32) as r:
            if r.status is not GetMessageStatus.FOUND:
                assert r.status in (
                    GetMessageStatus.OFFSET_OVERFLOW_ONE,
                    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                )
                return out
            for q_off, msg in zip(r.queue_offsets, r.decode(), strict=True):
                assert msg["queue_offset"] == q_off and msg["queue_id"] == queue_id  # queue and log agree
                out.append(msg)
            offset = r.next_begin_offset


@pytest.mark.slow
@pytest.mark.timeout(180)
# One writer: its puts' waits make their flushes themselves (GroupFlush's leading wait); four: mostly the group
# commit thread's flushes, some led.
@pytest.mark.parametrize(("seed", "writers"), [(1, 4), (2, 4), (3, 4), (4, 1)])
def test_sigkill_loses_no_acknowledged_message(tmp_path: Path, seed: int, writers: int) -> None:
    rng = random.Random(seed)
    store_dir = str(tmp_path / "crash")
    all_acked: list[tuple[str, int, int]] = []
    for _ in range(2):  # crash twice on the same store: recovery of a recovered store
        all_acked += run_and_kill(store_dir, rng.uniform(0.4, 1.5), writers)
    assert len(all_acked) > 50, "the writer acknowledged too little to test anything"
    print(f"seed {seed}: {len(all_acked)} acknowledged messages")
    cfg = small_config(store_dir, flush_disk_type=FlushDiskType.SYNC_FLUSH, max_index_num=4096, max_hash_slot_num=512)
    assert os.path.exists(cfg.abort_path())
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        assert not store.last_exit_ok
        stored: dict[str, int] = {}
        placed: dict[str, tuple[int, int]] = {}
        for qid in range(3):
            for msg in read_queue(store, qid):
                key = msg["properties"]["UNIQ_KEY"]
                stored[key] = stored.get(key, 0) + 1
                placed[key] = (msg["queue_id"], len(msg["body"]))
        for key, qid, size in all_acked:
            assert stored.get(key) == 1, f"acknowledged message {key} found {stored.get(key, 0)} times"
            assert placed[key] == (qid, size)
        assert all(count == 1 for count in stored.values()), "a message was dispatched twice"
        for key, _, size in rng.sample(all_acked, min(20, len(all_acked))):
            hits = store.query_message("Crash", key, 5, 0, 2**62)
            assert len(hits) == 1 and len(hits[0]["body"]) == size
        # The recovered store keeps working: a put lands right after the recovered end.
        end = store.commit_log.get_max_offset()
        from store import build_message

        r = store.put_message(build_message("Crash", b"after", queue_id=0))
        assert r.ok and r.items[0].wrote_offset >= end
    finally:
        store.shutdown()
