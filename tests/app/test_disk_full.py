"""A broker filling a real small filesystem: 201 or 503 DISK_FULL, never a signal; restart and reads on a full disk."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from store.native import pack_batch
from tests.app.conftest import SMALL_BROKER, BrokerProcess
from tests.app.helpers import problem
from tests.small_volume import small_volume
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

# Cleanup must not delete commitlog files when the disk fills (that is retention, tested elsewhere):
# every stored message is checked afterwards. So the usage ratios are all 100 %, and the only
# thing that refuses puts is a file whose space cannot be reserved.
FULL_DISK_STORE = """
[store]
mapped_file_size_commit_log_bytes = 1048576
mapped_file_size_consume_queue_bytes = 20000
max_message_size_bytes = 65536
max_hash_slot_num = 1000
max_index_num = 4000
mapped_file_size_timer_log_bytes = 1048576
disk_max_used_space_ratio_percent = 100
disk_clean_forcibly_ratio_percent = 100
disk_warning_ratio_percent = 100
clean_resource_interval_ms = 1000
"""
TOPIC = "fill"
QUEUES = 4
BODY = "x" * 8000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 12 MiB tmpfs mounted under tmp_path (root only)."""
    with small_volume(tmp_path, "12m") as mount:
        yield mount


def start_on(mount: Path, tmp_path: Path) -> BrokerProcess:
    """A broker whose store is on `mount`; its config and log stay off the small disk."""
    broker = BrokerProcess(mount / "store", FULL_DISK_STORE + SMALL_BROKER)
    broker.config_path.unlink()
    broker.config_path = tmp_path / "store.toml"
    broker.config_path.write_text(FULL_DISK_STORE + SMALL_BROKER)
    broker.log_path = tmp_path / "store.log"
    return broker.start()


def fill(client: httpx.Client) -> list[tuple[int, int, str]]:
    """Produce until the disk refuses 20 times in a row; every answer is 201 or 503 DISK_FULL."""
    stored: list[tuple[int, int, str]] = []
    refused_in_row = 0
    n = 0
    while refused_in_row < 20:
        n += 1
        assert n < 5000, "the disk never filled"
        body = f"{n:06d}{BODY}"
        r = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body, "queue_id": n % QUEUES})
        if r.status_code == 201:
            stored.append((r.json()["queue_id"], r.json()["queue_offset"], body))
            refused_in_row = 0
        else:
            problem(r, 503, "DISK_FULL")
            refused_in_row += 1
    return stored


def assert_all_readable(client: httpx.Client, stored: list[tuple[int, int, str]]) -> None:
    by_queue: dict[int, dict[int, str]] = {}
    for qid, offset, body in stored:
        by_queue.setdefault(qid, {})[offset] = body
    found: dict[int, dict[int, str]] = {qid: {} for qid in by_queue}
    next_offset = dict.fromkeys(by_queue, 0)

    def read_more() -> bool:
        """Read each queue on as far as it is dispatched; whether every stored message was found."""
        for qid, expected in by_queue.items():
            while len(found[qid]) < len(expected):
                r = client.get(f"/v1/topics/{TOPIC}/queues/{qid}/messages", params={"offset": next_offset[qid], "max": 64})
                assert r.status_code == 200, r.text
                reply = r.json()
                for m in reply["messages"]:
                    found[qid][m["queue_offset"]] = m["body"]
                next_offset[qid] = reply["next_offset"]
                if reply["status"] != "FOUND":
                    break  # not dispatched yet
        return all(len(found[qid]) >= len(expected) for qid, expected in by_queue.items())

    wait_for(
        read_more, 20, what=lambda: f"every message readable: {[(q, len(found[q]), len(e)) for q, e in by_queue.items()]}", poll_s=0.05
    )
    assert found == by_queue


def accepted_put(client: httpx.Client, body: str) -> httpx.Response | None:
    """The put's answer if it was accepted; None while it is refused with DISK_FULL (anything else fails)."""
    r = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body, "queue_id": 0})
    if r.status_code == 201:
        return r
    problem(r, 503, "DISK_FULL")
    return None


def test_full_disk_is_503_disk_full_never_a_signal_and_reads_survive_a_restart(small_disk: Path, tmp_path: Path) -> None:
    broker = start_on(small_disk, tmp_path)
    assert broker.client is not None
    assert broker.client.put(f"/v1/topics/{TOPIC}", json={"queues": QUEUES}).status_code == 201
    stored = fill(broker.client)
    assert len(stored) > 100
    assert broker.proc is not None and broker.proc.poll() is None, broker.log()
    assert broker.client.get("/healthz").status_code == 200
    status = broker.client.get("/v1/store").json()["runtime"]
    assert status["disk_full"] is True
    # /readyz and the status name the kind of file whose space could not be reserved, and the free space.
    assert re.fullmatch(
        r"disk full: no space to reserve a (commitlog|consume queue|index) file \(\d+ bytes free\)", status["degraded_reasons"][0]
    )
    problem(broker.client.get("/readyz"), 503, "SERVICE_NOT_AVAILABLE")
    assert_all_readable(broker.client, stored)

    # Restart on the full disk: it starts, and every stored message is readable.
    assert broker.stop() == 0, broker.log()
    broker = start_on(small_disk, tmp_path)
    assert broker.client is not None
    assert_all_readable(broker.client, stored)
    problem(broker.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": BODY, "queue_id": 0}), 503, "DISK_FULL")
    before = broker.client.get("/v1/store").json()["runtime"]["commitlog_max_offset"]
    batch = pack_batch([(BODY.encode(), b"", 0)] * 3)
    r = broker.client.post(f"/v1/topics/{TOPIC}/messages", content=batch, headers={"content-type": "application/x-tidemq-batch"})
    problem(r, 503, "DISK_FULL")
    assert broker.client.get("/v1/store").json()["runtime"]["commitlog_max_offset"] == before

    # Space returns: puts are accepted again (within a cleanup pass) and readable.
    subprocess.run(["mount", "-o", "remount,size=24m", str(small_disk)], check=True)
    client = broker.client
    accepted = wait_for(lambda: accepted_put(client, "after"), 15, what="puts to be accepted after space returned", poll_s=0.2)
    assert accepted is not None  # wait_for answers a truthy value
    r = accepted
    stored.append((0, r.json()["queue_offset"], "after"))
    assert_all_readable(broker.client, stored)
    assert broker.stop() == 0, broker.log()
