"""A broker with few file descriptors and more queues than descriptors: nothing acknowledged is lost, it keeps answering."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, BrokerProcess
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

FD_LIMIT = 64
TOPICS = ("fd-a", "fd-b")
QUEUES = 100  # 2 x 100 queues, each with its own consume-queue file: far more files than descriptors
FEW_FDS_STORE = """
[store]
mapped_file_size_commit_log_bytes = 4194304
mapped_file_size_consume_queue_bytes = 20000
max_message_size_bytes = 65536
max_hash_slot_num = 1000
max_index_num = 4000
max_mapped_consume_queue_files = 16
"""


def produce_to_every_queue(client: httpx.Client, round_no: int) -> list[tuple[str, int, int, str]]:
    stored = []
    for topic in TOPICS:
        for qid in range(QUEUES):
            body = f"{topic}/{qid}/{round_no}"
            r = client.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": qid})
            # A refusal is allowed (503, nothing stored); an acknowledged message must become readable.
            assert r.status_code in (201, 503), r.text
            if r.status_code == 201:
                stored.append((topic, qid, r.json()["queue_offset"], body))
            else:
                assert r.json()["code"] in ("DISPATCH_BEHIND", "SERVICE_NOT_AVAILABLE"), r.text
    return stored


def descriptor_limits(pid: int) -> tuple[int, int]:
    """The (soft, hard) RLIMIT_NOFILE of process `pid`, as /proc reports it."""
    line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if x.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


def test_more_queues_than_descriptors_every_acknowledged_message_is_readable(tmp_path: Path) -> None:
    # Soft and hard limit both FD_LIMIT, so start-up cannot raise it.
    broker = BrokerProcess(tmp_path / "store", FEW_FDS_STORE + SMALL_BROKER, nofile_soft=FD_LIMIT, nofile_hard=FD_LIMIT)
    broker.start()
    assert broker.proc is not None
    assert descriptor_limits(broker.proc.pid) == (FD_LIMIT, FD_LIMIT)
    client = broker.client
    assert client is not None
    try:
        for topic in TOPICS:
            assert client.put(f"/v1/topics/{topic}", json={"queues": QUEUES}).status_code in (200, 201)
        stored = []
        for round_no in range(3):
            stored += produce_to_every_queue(client, round_no)
            assert client.get("/healthz").status_code == 200
        assert len(stored) >= len(TOPICS) * QUEUES  # most are taken
        unread = list(stored)

        def all_readable() -> bool:
            """Read the stored messages in order as far as they are readable; whether all are."""
            while unread:
                topic, qid, offset, body = unread[0]
                r = client.get(f"/v1/topics/{topic}/queues/{qid}/messages", params={"offset": offset, "max": 1})
                assert r.status_code == 200, r.text
                reply = r.json()
                if reply["status"] != "FOUND":
                    return False
                assert reply["messages"][0]["body"] == body
                unread.pop(0)
            return True

        wait_for(all_readable, 60, what=lambda: f"{unread[0]} to be readable:\n{broker.log()}", poll_s=0.05)
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        runtime = client.get("/v1/store").json()["runtime"]
        assert runtime["degraded_reasons"] == []
        assert runtime["mapped_consume_queue_files"] <= 16 + 8  # the budget, plus a few readers' mappings not yet trimmed
        assert "Too many open files" not in broker.log()
    finally:
        broker.kill()
