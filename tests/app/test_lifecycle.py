"""Whole-process behaviour: restart, SIGTERM with held pulls, SYNC_FLUSH, settings, start-up failures."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.helpers import problem, send, wait_visible
from tests.loopback import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def test_restart_keeps_messages_offsets_and_topics(make_broker: MakeBroker) -> None:
    first = make_broker()
    c = first.client
    assert c is not None
    assert c.put("/v1/topics/orders", json={"queues": 3}).status_code == 201
    assert c.put("/v1/topics/audit", json={"queues": 1, "perm": "r"}).status_code == 201
    sent = [send(c, "orders", f"order-{i}", queue_id=i % 3, keys=[f"k{i}"], tags="T") for i in range(30)]
    # Enough bytes to roll over several 256 KiB commitlog files.
    big = send(c, "orders", "x" * 60_000, queue_id=0)
    for _ in range(10):
        send(c, "orders", "y" * 60_000, queue_id=1)
    assert c.put("/v1/groups/g1/offsets", json={"topic": "orders", "queue_id": 0, "offset": 4}).status_code == 200
    assert first.stop() == 0

    second = make_broker()
    c = second.client
    assert c is not None
    topics = {t["topic"]: t for t in c.get("/v1/topics").json()["topics"]}
    assert topics["orders"]["read_queues"] == 3 and topics["audit"]["perm"] == "r"
    got = c.get("/v1/topics/orders/queues/0/messages", params={"offset": 0, "max": 20}).json()
    assert [m["body"] for m in got["messages"]] == [f"order-{i}" for i in range(0, 30, 3)] + ["x" * 60_000]
    assert got["messages"][-1]["commitlog_offset"] == big["commitlog_offset"]
    offsets = c.get("/v1/groups/g1/offsets", params={"topic": "orders"}).json()["queues"]
    assert offsets[0]["committed_offset"] == 4 and offsets[0]["max_offset"] == 11
    assert offsets[1]["max_offset"] == 20
    found = c.get("/v1/topics/orders/messages", params={"key": "k7"}).json()["messages"]
    assert [m["msg_id"] for m in found] == [sent[7]["msg_id"]]
    assert c.get(f"/v1/messages/{sent[5]['offset_msg_id']}").json()["body"] == "order-5"
    # Writing continues after the old end.
    after = send(c, "orders", "after-restart", queue_id=2)
    assert after["queue_offset"] == 10 and after["commitlog_offset"] > big["commitlog_offset"]
    assert second.stop() == 0


def test_sigterm_answers_held_pulls_and_exits_cleanly(make_broker: MakeBroker) -> None:
    broker = make_broker(process=True)  # signalled; its exit status and log
    assert isinstance(broker, BrokerProcess)
    c = broker.client
    assert c is not None
    assert c.put("/v1/topics/t", json={"queues": 1}).status_code == 201
    replies: list[httpx.Response] = []

    def held_pull() -> None:
        replies.append(httpx.get(f"{broker.url}/v1/topics/t/queues/0/messages", params={"offset": 0, "wait_ms": 5000}, timeout=15))

    thread = threading.Thread(target=held_pull)
    thread.start()
    wait_for(lambda: "tidemq_held_pulls 1" in c.get("/metrics").text, 5, what="the pull to be held", poll_s=0.02)
    started = time.monotonic()
    assert broker.stop(signal.SIGTERM) == 0
    thread.join(10)
    assert time.monotonic() - started < 4.0
    assert replies and replies[0].status_code == 200 and replies[0].json()["status"] == "NO_NEW_MSG"
    assert "store shut down" in broker.log()


def test_sync_flush_replies_after_the_flush(make_broker: MakeBroker) -> None:
    broker = make_broker(env={"TIDEMQ_FLUSH": "sync"})
    assert isinstance(broker, BrokerProcess)
    c = broker.client
    assert c is not None
    status = c.get("/v1/store").json()
    assert status["flush_mode"] == "SYNC_FLUSH"
    assert c.put("/v1/topics/s", json={"queues": 1}).status_code == 201
    for i in range(5):
        r = c.post("/v1/topics/s/messages", json={"body": f"durable-{i}" * 50, "queue_id": 0})
        assert r.status_code == 201, r.text
        flushed = c.get("/v1/store").json()["runtime"]["commitlog_flushed_offset"]
        assert flushed > r.json()["commitlog_offset"]
    batch = c.post("/v1/topics/s/messages", json={"messages": [{"body": "b"}] * 20})
    assert batch.status_code == 201
    runtime = c.get("/v1/store").json()["runtime"]
    assert runtime["commitlog_flushed_offset"] > batch.json()["results"][-1]["commitlog_offset"]
    # Seven durable puts (the topic's record, five produces, the batch) each waited for a flush: counted.
    assert runtime["commitlog_flush_waits"] >= 7 and 1 <= runtime["commitlog_group_flushes"] <= runtime["commitlog_flush_waits"]
    counted = re.search(r"^tidemq_commitlog_flush_waits_total (\d+)$", c.get("/metrics").text, re.M)
    assert counted is not None and int(counted.group(1)) >= runtime["commitlog_flush_waits"]


def test_flush_timeout_is_504_and_the_message_is_stored(make_broker: MakeBroker) -> None:
    # With no room for group commit requests the store answers FLUSH_DISK_TIMEOUT at once (the bytes are written).
    config = SMALL_STORE + "max_group_commit_requests = 0\n" + SMALL_BROKER
    broker = make_broker(config, args=["--flush", "sync"])
    c = broker.client
    assert c is not None
    # The topic's record is a put too: answered 504 as well, and stored.
    problem(c.put("/v1/topics/s", json={"queues": 1}), 504, "FLUSH_DISK_TIMEOUT")
    assert c.get("/v1/topics/s").json()["read_queues"] == 1
    r = c.post("/v1/topics/s/messages", json={"body": "maybe-durable", "queue_id": 0})
    body = problem(r, 504, "FLUSH_DISK_TIMEOUT")
    assert body["stored"] is True and "stored" in body["detail"]
    wait_visible(c, "s", 0, 0)
    got = c.get("/v1/topics/s/queues/0/messages", params={"offset": 0}).json()
    assert got["messages"][0]["body"] == "maybe-durable"


def test_topics_are_not_created_by_default_and_held_pull_bound(make_broker: MakeBroker) -> None:
    config = SMALL_STORE + SMALL_BROKER + "max_held_pulls = 1\n"  # auto_create_topics left at its default: off
    broker = make_broker(config)
    c = broker.client
    assert c is not None
    assert c.put("/v1/topics/orders", json={"queues": 1}).status_code == 201
    before = c.get("/v1/store").json()["runtime"]["commitlog_max_offset"]
    body = problem(c.post("/v1/topics/ordres/messages", json={"body": "x"}), 404, "TOPIC_NOT_FOUND")
    assert "did you mean orders?" in body["detail"] and "PUT /v1/topics/ordres" in body["detail"], body
    assert "did you mean" not in problem(c.post("/v1/topics/zzzzzz/messages", json={"body": "x"}), 404, "TOPIC_NOT_FOUND")["detail"]
    problem(c.get("/v1/topics/ordres"), 404, "TOPIC_NOT_FOUND")
    assert c.get("/v1/store").json()["runtime"]["commitlog_max_offset"] == before
    assert "tidemq_topics_auto_created_total 0" in c.get("/metrics").text
    assert c.put("/v1/topics/t", json={"queues": 1}).status_code == 201
    thread = threading.Thread(target=lambda: httpx.get(f"{broker.url}/v1/topics/t/queues/0/messages?offset=0&wait_ms=1500", timeout=10))
    thread.start()
    wait_for(lambda: "tidemq_held_pulls 1" in c.get("/metrics").text, 5, what="the pull to be held", poll_s=0.02)
    problem(c.get("/v1/topics/t/queues/0/messages", params={"offset": 0, "wait_ms": 1000}), 503, "TOO_MANY_WAITERS")
    # A pull that need not wait is still served.
    assert c.get("/v1/topics/t/queues/0/messages", params={"offset": 0}).json()["status"] == "NO_NEW_MSG"
    thread.join()


def test_second_broker_on_the_same_store_fails_to_start(make_broker: MakeBroker) -> None:
    make_broker(process=True)  # two processes: the lock file excludes another process
    with pytest.raises(RuntimeError, match="broker exited with 3"):
        make_broker(process=True)


def test_cli_refuses_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[broker]\nmax_wait_ms = 'long'\n")
    cmd = [sys.executable, "-m", "app", "serve", "--config", str(bad), "--store", str(tmp_path / "s")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "max_wait_ms must be an integer" in done.stderr
    assert not (tmp_path / "s").exists()


def test_a_slave_refuses_puts_with_not_master_and_names_its_master(make_broker: MakeBroker) -> None:
    # No master listens at the HA address: the slave still serves, and names the configured master.
    args = ["--role", "slave", "--master-ha-address", f"127.0.0.1:{free_port()}", "--master-http-address", "http://127.0.0.1:1"]
    broker = make_broker(args=args)
    c = broker.client
    assert c is not None
    status = c.get("/v1/store").json()
    assert status["role"] == "SLAVE" and status["ha"]["role"] == "slave"
    assert status["ha"]["connection_state"] in ("connecting", "disconnected")
    body = problem(c.post("/v1/topics/t/messages", json={"body": "x"}), 403, "NOT_MASTER")
    assert body["master_http_address"] == "http://127.0.0.1:1" and "http://127.0.0.1:1" in body["detail"]
    raw = c.post("/v1/topics/t/messages", content=b"x", headers={"content-type": "application/octet-stream"})
    problem(raw, 403, "NOT_MASTER")
    problem(c.put("/v1/topics/t", json={"queues": 1}), 403, "NOT_MASTER")
    problem(c.get("/v1/topics/t"), 404, "TOPIC_NOT_FOUND")  # the refused produce created nothing
    assert c.get("/v1/store").json()["runtime"]["commitlog_max_offset"] == 0
    text = c.get("/metrics").text
    assert "tidemq_ha_connected 0" in text and "tidemq_ha_connects_total" in text


def test_store_role_contradicting_the_replication_role_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[store]\nbroker_role = "SLAVE"\n')
    cmd = [sys.executable, "-m", "app", "serve", "--config", str(config), "--store", str(tmp_path / "s")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "contradicts the replication role" in done.stderr, done.stderr
    assert not (tmp_path / "s").exists()


def test_a_taken_ha_port_fails_the_start_cleanly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ha_port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "app", "serve", "--store", str(tmp_path / "s"), "--port", "0"]
        cmd += ["--role", "master", "--ha-port", str(ha_port)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert f"replication could not start: cannot listen on 127.0.0.1:{ha_port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_full_disk_refuses_puts_with_disk_full(make_broker: MakeBroker) -> None:
    # Every ratio at 1 %: any real disk is "full", so the cleanup service raises the flag.
    ratios = "disk_max_used_space_ratio_percent = 1\ndisk_clean_forcibly_ratio_percent = 1\ndisk_warning_ratio_percent = 1\n"
    # Auto-creation on: the topic's own record, a put made by the produce, is refused as well.
    broker = make_broker(
        SMALL_STORE + ratios + "clean_resource_interval_ms = 50\n" + SMALL_BROKER + "auto_create_topics = true\n",
    )
    c = broker.client
    assert c is not None
    if c.get("/v1/store").json()["runtime"]["disk_used_ratio"] <= 0.01:
        pytest.skip("the temporary directory's disk is almost empty")
    wait_for(lambda: c.get("/v1/store").json()["runtime"]["disk_full"], 10, what="the store to flag the disk as full", poll_s=0.05)
    before = c.get("/v1/store").json()["runtime"]["commitlog_max_offset"]
    r = c.post("/v1/topics/t/messages", json={"body": "x"})
    problem(r, 503, "DISK_FULL")
    assert r.headers["retry-after"] == "1"
    assert c.get("/v1/store").json()["runtime"]["commitlog_max_offset"] == before
    assert "tidemq_disk_full 1" in c.get("/metrics").text
