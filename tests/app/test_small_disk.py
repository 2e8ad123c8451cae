"""Small disks and many queues: a 48 MiB volume fills to 80 % before DISK_FULL and recovers by itself;
an empty broker's footprint; 2,000 queues under a descriptor limit of 256; sizes no volume holds."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, BrokerProcess
from tests.app.helpers import problem
from tests.small_volume import small_volume
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

MIB = 1024 * 1024
# RocketMQ's defaults but for the commitlog and timer log file sizes (a 100 MiB timer log file cannot fit
# 48 MiB: the start would be refused) and the largest message (a 4 MiB file must hold it), and retention off: every stored message is read back afterwards.
SMALL_DISK_STORE = """
[store]
mapped_file_size_commit_log_bytes = 4194304
mapped_file_size_timer_log_bytes = 4194304
max_message_size_bytes = 1048576
disk_max_used_space_ratio_percent = 100
disk_clean_forcibly_ratio_percent = 100
disk_warning_ratio_percent = 100
clean_resource_interval_ms = 1000
"""
BODY = "y" * 16_000


@pytest.fixture
def disk_48m(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs mounted under tmp_path (root only)."""
    with small_volume(tmp_path, "48m") as mount:
        yield mount


def used_ratio(path: Path) -> float:
    st = os.statvfs(path)
    return 1 - st.f_bfree / st.f_blocks


def allocated_bytes(root: Path) -> int:
    """Bytes of blocks allocated under `root` (st_blocks), not the files' apparent sizes."""
    return sum((root / d / f).stat().st_blocks * 512 for d, _, files in os.walk(root) for f in files)


def test_a_48_mib_volume_fills_past_80_percent_then_disk_full_reads_go_on_and_puts_resume(disk_48m: Path, tmp_path: Path) -> None:
    ballast = disk_48m / "ballast"
    ballast.write_bytes(b"\1" * 6 * MIB)  # the test's own file, removed below to give space back
    broker = BrokerProcess(disk_48m / "store", SMALL_DISK_STORE + SMALL_BROKER)
    broker.config_path.unlink()
    broker.config_path = tmp_path / "store.toml"
    broker.config_path.write_text(SMALL_DISK_STORE + SMALL_BROKER)
    broker.log_path = tmp_path / "store.log"
    broker.start()
    try:
        client = broker.client
        assert client is not None
        assert client.put("/v1/topics/fill", json={"queues": 1}).status_code == 201
        stored: list[tuple[int, str]] = []
        ratio_at_first_refusal = None
        for n in range(10_000):
            text = f"{n:06d}{BODY}"
            r = client.post("/v1/topics/fill/messages", json={"body": text, "queue_id": 0})
            if r.status_code == 201:
                assert ratio_at_first_refusal is None, "a put was accepted after DISK_FULL while nothing was freed"
                stored.append((r.json()["queue_offset"], text))
                continue
            problem(r, 503, "DISK_FULL")
            if ratio_at_first_refusal is None:
                ratio_at_first_refusal = used_ratio(disk_48m)
            if n > len(stored) + 5:
                break
        assert ratio_at_first_refusal is not None, "the volume never filled"
        assert ratio_at_first_refusal >= 0.80, f"DISK_FULL at {ratio_at_first_refusal:.0%} used"
        assert broker.proc is not None and broker.proc.poll() is None, broker.log()

        # /readyz names the kind of file that could not be reserved and the free space.
        body = problem(client.get("/readyz"), 503, "SERVICE_NOT_AVAILABLE")
        assert re.search(r"no space to reserve a (commitlog|consume queue|index) file \(\d+ bytes free\)", body["detail"]), body
        assert client.get("/healthz").status_code == 200

        # Reads go on: every acknowledged message, in order.
        offset, read = 0, []
        while offset < len(stored):
            r = client.get("/v1/topics/fill/queues/0/messages", params={"offset": offset, "max": 32})
            assert r.status_code == 200, r.text
            reply = r.json()
            assert reply["status"] == "FOUND", reply
            read += [m["body"] for m in reply["messages"]]
            offset = reply["next_offset"]
        assert read == [b for _, b in stored]

        # Space returns (the ballast is removed): puts are accepted again within a few cleanup passes.
        ballast.unlink()

        def accepted() -> httpx.Response | None:
            r = client.post("/v1/topics/fill/messages", json={"body": "after", "queue_id": 0})
            if r.status_code == 201:
                return r
            problem(r, 503, "DISK_FULL")
            return None

        resumed = wait_for(accepted, 15, what="puts to be accepted after space returned", poll_s=0.2)
        assert resumed is not None
        assert resumed.json()["queue_offset"] == len(stored)
        r = client.get("/v1/topics/fill/queues/0/messages", params={"offset": len(stored), "max": 1})
        assert r.json()["messages"][0]["body"] == "after"
        assert broker.stop() == 0, broker.log()
    finally:
        broker.kill()


def test_an_empty_broker_with_default_settings_allocates_under_128_mb(tmp_path: Path) -> None:
    """RocketMQ's default sizes (1 GiB commitlog files, a 420 MB index file): an empty store, and the
    same store after one message, allocate less than 128 MB, while every file keeps its full size."""
    store = tmp_path / "store"
    broker = BrokerProcess(store, SMALL_BROKER).start()
    try:
        client = broker.client
        assert client is not None
        empty = allocated_bytes(store)
        assert empty < 128 * MIB, empty
        assert client.put("/v1/topics/footprint", json={"queues": 4}).status_code == 201
        r = client.post("/v1/topics/footprint/messages", json={"body": "one", "keys": ["k1"]})
        assert r.status_code == 201, r.text
        index_bytes = 40 + 4 * 5_000_000 + 20 * 20_000_000

        def sized(directory: str, size: int) -> list[Path]:
            # A file is created, then sized: one caught between the two is not made yet.
            files = sorted((store / directory).glob("*"))
            return files if files and all(f.stat().st_size == size for f in files) else []

        assert len(wait_for(lambda: sized("index", index_bytes), 10, what="the index file to be made", poll_s=0.05)) == 1
        # The file after the current one is made ahead: both keep RocketMQ's full size, allocated sparsely.
        assert wait_for(lambda: sized("commitlog", 1024 * MIB), 10, what="the commitlog files to be made", poll_s=0.05)
        after_one = allocated_bytes(store)
        assert after_one < 128 * MIB, after_one
        assert broker.stop() == 0, broker.log()
    finally:
        broker.kill()


MANY_QUEUES_STORE = """
[store]
mapped_file_size_commit_log_bytes = 4194304
max_message_size_bytes = 1048576
mapped_file_size_consume_queue_bytes = 20000
max_hash_slot_num = 1000
max_index_num = 4000
max_topic_queue_nums = 2000
"""


def first_message(client: httpx.Client, qid: int) -> dict[str, Any] | None:
    """The pull of queue `qid`'s first message of topic "many", once it holds one."""
    reply = client.get(f"/v1/topics/many/queues/{qid}/messages", params={"offset": 0, "max": 1}).json()
    return reply if reply["messages"] else None


def test_2000_queues_under_a_descriptor_limit_of_256_stay_readable_within_a_second(tmp_path: Path) -> None:
    """Each of 2,000 queues gets a message; each acknowledged one is readable within 1 s, and health answers."""
    broker = BrokerProcess(tmp_path / "store", MANY_QUEUES_STORE + SMALL_BROKER, nofile_soft=256, nofile_hard=256).start()
    try:
        client = broker.client
        assert client is not None
        r = client.put("/v1/topics/many", json={"queues": 2000})
        assert r.status_code in (200, 201), r.text
        worst = 0.0
        for qid in range(2000):
            r = client.post("/v1/topics/many/messages", json={"body": f"m{qid}", "queue_id": qid})
            assert r.status_code == 201, (qid, r.text)
            acked = time.monotonic()
            reply = wait_for(partial(first_message, client, qid), 1.0, what=f"queue {qid}'s acknowledged message to be readable")
            assert reply is not None
            assert reply["messages"][0]["body"] == f"m{qid}"
            worst = max(worst, time.monotonic() - acked)
            if qid % 250 == 0:
                assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200, client.get("/readyz").text
        runtime = client.get("/v1/store").json()["runtime"]
        assert runtime["mapped_consume_queue_files"] <= 128  # half the descriptor limit
        assert broker.stop() == 0, broker.log()
    finally:
        broker.kill()


def test_a_commitlog_file_larger_than_its_volume_refuses_the_start_naming_the_setting(disk_48m: Path, tmp_path: Path) -> None:
    config = SMALL_DISK_STORE.replace("mapped_file_size_commit_log_bytes = 4194304", "mapped_file_size_commit_log_bytes = 67108864")
    broker = BrokerProcess(disk_48m / "store", config + SMALL_BROKER)
    broker.log_path = tmp_path / "refused.log"
    with pytest.raises(RuntimeError, match="mapped_file_size_commit_log_bytes needs 67108864 bytes per file but the volume"):
        broker.start()
