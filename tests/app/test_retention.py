"""Delay levels and retention over HTTP: GET /v1/schedule, POST /v1/admin/cleanup and the consumer's view after a cleanup."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.helpers import commitlog_max, problem
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

# An hour far from now: the periodic rule never allows deleting during the test, only a manual cleanup does.
NOT_NOW = f"{(time.localtime().tm_hour + 12) % 24:02d}"
# Tiny files that expire at once; each test adds when passes run.
EXPIRING_STORE = """
[store]
mapped_file_size_commit_log_bytes = 65536
mapped_file_size_consume_queue_bytes = 200
max_message_size_bytes = 8192
max_hash_slot_num = 16
max_index_num = 64
file_reserved_time_hours = 0
delete_commit_log_files_interval_ms = 0
delete_consume_queue_files_interval_ms = 0
"""
RETENTION_CONFIG = EXPIRING_STORE + f'delete_when = "{NOT_NOW}"\nclean_resource_interval_ms = 3600000\n'
# Every hour is a delete hour and a pass runs every 200 ms: the periodic rule alone cleans.
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))
PERIODIC_RETENTION_CONFIG = EXPIRING_STORE + f'delete_when = "{EVERY_HOUR}"\nclean_resource_interval_ms = 200\n'

# Three short levels and one long one, so a message stays waiting for the whole test.
LEVELS = 'message_delay_level = "1s 2s 5s 1h"\n'


def cleaned(c: httpx.Client) -> tuple[dict[str, Any], int] | None:
    """(The store's runtime report, Aged's queue 0 minimum offset) once three files are deleted and the minimum moved."""
    runtime = c.get("/v1/store").json()["runtime"]
    min_offset = c.get("/v1/topics/Aged").json()["queues"][0]["min_offset"]
    return (runtime, min_offset) if deleted_at_least(runtime, 3) and min_offset > 0 else None


def deleted_at_least(runtime: dict[str, Any], files: int) -> bool:
    """Whether `files` commitlog files are deleted, by the count and by the minimum offset. The report
    reads them at different moments: during a pass the minimum already moved past the file shut down
    first while the files after it are still being deleted, and the count grows at the pass's end."""
    deleted: bool = runtime["cleanup"]["commitlog_files_deleted"] >= files and runtime["commitlog_min_offset"] >= files * 65536
    return deleted


def test_manual_cleanup_deletes_expired_files_and_consumers_see_the_new_minimum(make_broker: MakeBroker) -> None:
    broker = make_broker(RETENTION_CONFIG + SMALL_BROKER)
    c = broker.client
    assert c is not None
    assert c.put("/v1/topics/Aged", json={"queues": 1}).status_code == 201
    for batch in range(12):
        messages = [{"body": "a" * 400, "keys": [f"aged-{batch * 50 + i}"], "queue_id": 0} for i in range(50)]
        assert c.post("/v1/topics/Aged/messages", json={"messages": messages}).status_code == 201
    # The flusher holds the file it syncs and a pass stops at a held file; only one pass runs here, so
    # the periodic flush (one file every 500 ms, each an msync that a busy disk can make take seconds)
    # must be past every full file first. Once it is, it holds at most the last full file (its pages
    # are dropped after the move), and the pass still deletes the files before it.

    def flushed_past_full_files() -> dict[str, Any] | None:
        runtime = c.get("/v1/store").json()["runtime"]
        return runtime if runtime["commitlog_flushed_offset"] >= runtime["commitlog_max_offset"] // 65536 * 65536 else None

    runtime = wait_for(
        flushed_past_full_files, 60, what=lambda: f"the flush to pass every full file: {c.get('/v1/store').json()['runtime']}", poll_s=0.05
    )
    assert runtime is not None
    assert runtime["commitlog_max_offset"] // 65536 >= 4, "the pass must find at least four full files"
    cleanup = runtime["cleanup"]
    assert cleanup["commitlog_files_deleted"] == 0 and cleanup["manual_rounds_left"] == 0
    assert cleanup["next_pass_ms"] > time.time() * 1000 + 60_000, "no periodic pass may run during the test"
    assert c.get("/v1/topics/Aged/messages", params={"key": "aged-0"}).json()["messages"] != []

    before_ms = int(time.time() * 1000)
    r = c.post("/v1/admin/cleanup")
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["rounds"] == 20 and started["next_pass_ms"] >= before_ms

    found = wait_for(
        partial(cleaned, c),
        30,
        what=lambda: f"three files deleted: {c.get('/v1/store').json()['runtime']}",
        poll_s=0.05,
    )
    assert found is not None
    runtime, min_offset = found
    cleanup = runtime["cleanup"]
    assert cleanup["passes"] >= 1 and cleanup["manual_rounds_left"] < 20
    assert cleanup["next_pass_ms"] > cleanup["last_pass_ms"] >= before_ms
    assert cleanup["disk_ratio"] is not None and cleanup["disk_warning_ratio"] == 0.9

    stale = c.get("/v1/topics/Aged/queues/0/messages", params={"offset": 0}).json()
    assert stale["status"] == "OFFSET_TOO_SMALL" and stale["messages"] == []
    assert stale["next_offset"] == stale["min_offset"] >= min_offset > 0
    fresh = c.get("/v1/topics/Aged/queues/0/messages", params={"offset": stale["next_offset"], "max": 1}).json()
    assert fresh["status"] == "FOUND" and fresh["messages"][0]["queue_offset"] == stale["next_offset"]
    assert c.get("/v1/topics/Aged/messages", params={"key": "aged-0"}).json()["messages"] == []
    last = c.get("/v1/topics/Aged/messages", params={"key": "aged-599"}).json()["messages"]
    assert [m["keys"] for m in last] == [["aged-599"]]
    text = c.get("/metrics").text
    assert f"tidemq_cleanup_commitlog_files_deleted_total {cleanup['commitlog_files_deleted']}" in text


def test_admin_routes_refuse_other_methods(client: httpx.Client) -> None:
    problem(client.get("/v1/admin/cleanup"), 405, "METHOD_NOT_ALLOWED")
    problem(client.delete("/v1/admin/cleanup"), 405, "METHOD_NOT_ALLOWED")
    problem(client.post("/v1/schedule"), 405, "METHOD_NOT_ALLOWED")
    problem(client.get("/v1/admin"), 404, "NOT_FOUND")


def test_schedule_status_counts_waiting_messages_per_level(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + LEVELS + SMALL_BROKER)
    c = broker.client
    assert c is not None
    status = c.get("/v1/schedule").json()
    assert [(x["level"], x["delay"], x["delay_ms"], x["waiting"]) for x in status["levels"]] == [
        (1, "1s", 1000, 0),
        (2, "2s", 2000, 0),
        (3, "5s", 5000, 0),
        (4, "1h", 3_600_000, 0),
    ]
    assert all(x["oldest_age_ms"] is None and x["oldest_due_in_ms"] is None for x in status["levels"])
    assert status["delivered"] == 0
    assert c.put("/v1/topics/later", json={"queues": 1}).status_code == 201
    sent = [c.post("/v1/topics/later/messages", json={"body": f"h{i}", "delay_level": 4, "queue_id": 0}) for i in range(3)]
    assert all(r.status_code == 201 and r.json()["delay_level"] == 4 for r in sent), [r.text for r in sent]
    quick = c.post("/v1/topics/later/messages", json={"body": "soon", "delay_level": 1, "queue_id": 0}).json()

    level_4 = c.get("/v1/schedule").json()["levels"][3]
    assert level_4["waiting"] == 3 and level_4["max_offset"] - level_4["offset"] == 3
    assert 0 <= level_4["oldest_age_ms"] < 60_000
    assert 3_600_000 - 60_000 < level_4["oldest_due_in_ms"] <= 3_600_000
    # The 1 s message is delivered to its queue; the level empties and the delivered count grows.
    got = c.get("/v1/topics/later/queues/0/messages", params={"offset": 0, "wait_ms": 5000}).json()
    assert got["status"] == "FOUND" and [m["body"] for m in got["messages"]] == ["soon"]
    assert got["messages"][0]["store_timestamp"] >= quick["deliver_at_ms"]
    status = wait_for(
        lambda: s if (s := c.get("/v1/schedule").json())["delivered"] >= 1 else None,
        10,
        what=lambda: f"the delivery to be counted: {c.get('/v1/schedule').json()}",
        poll_s=0.05,
    )
    assert status is not None
    assert status["levels"][0]["waiting"] == 0 and status["levels"][3]["waiting"] == 3
    # delay_ms and deliver_at_ms are timer messages, bounded by timer_max_delay_ms (3 days), not the longest level.
    before = commitlog_max(c)
    problem(c.post("/v1/topics/later/messages", json={"body": "x", "delay_ms": 3 * 86_400_000 + 1}), 400, "DELAY_TOO_LONG")
    far = int(time.time() * 1000) + 4 * 86_400_000
    problem(c.post("/v1/topics/later/messages", json={"body": "x", "deliver_at_ms": far}), 400, "DELAY_TOO_LONG")
    problem(c.post("/v1/topics/later/messages", json={"body": "x", "delay_level": 5}), 400, "DELAY_LEVEL_INVALID")
    assert commitlog_max(c) == before


def test_consumers_see_the_new_minimum_and_lose_deleted_keys_over_http(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "http-store", PERIODIC_RETENTION_CONFIG + SMALL_BROKER)
    try:
        client = broker.start().client
        assert client is not None
        assert client.put("/v1/topics/Aged", json={"queues": 1}).status_code == 201
        body = "a" * 400
        for batch in range(12):
            messages = [{"body": body, "keys": [f"aged-{batch * 50 + i}"], "queue_id": 0} for i in range(50)]
            r = client.post("/v1/topics/Aged/messages", json={"messages": messages})
            assert r.status_code == 201, r.text
        # Every file but the last is expired at once; the periodic pass deletes them.
        found = wait_for(
            partial(cleaned, client), 30, what=lambda: f"three files deleted: {client.get('/v1/store').json()['runtime']}", poll_s=0.05
        )
        assert found is not None
        _, new_min = found

        stale = client.get("/v1/topics/Aged/queues/0/messages", params={"offset": 0}).json()
        assert stale["status"] == "OFFSET_TOO_SMALL"
        assert stale["next_offset"] == stale["min_offset"] >= new_min
        # Cleanup goes on meanwhile: a consumer following next_offset always reaches messages.
        offset = stale["next_offset"]
        for _ in range(50):
            fresh = client.get("/v1/topics/Aged/queues/0/messages", params={"offset": offset, "max": 1}).json()
            if fresh["status"] == "FOUND":
                break
            assert fresh["status"] in ("OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING"), fresh
            assert fresh["next_offset"] > offset or fresh["status"] == "OFFSET_TOO_SMALL"
            offset = fresh["next_offset"]
        assert fresh["status"] == "FOUND", fresh
        assert client.get("/v1/topics/Aged/messages", params={"key": "aged-0"}).json()["messages"] == []
        assert len(client.get("/v1/topics/Aged/messages", params={"key": "aged-599"}).json()["messages"]) == 1
    finally:
        broker.stop()
