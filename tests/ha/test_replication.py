"""A master and a slave as two real processes: catching up, reading from the slave, SYNC_MASTER guarantees."""

from __future__ import annotations

import re
import signal
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from store import decode_message
from store.layouts import iter_messages
from tests.ha.cluster import Node, caught_up
from tests.store.rocketmq_records import Record, host_text, write_commit_log
from tests.waiting import wait_for

HOST_FLAGS = (0, 0x10, 0x20, 0x30)  # IPv4 hosts, an IPv6 born host, an IPv6 store host, both

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, f"{name} missing"
    return float(match.group(1))


def test_slave_started_late_catches_up_and_serves_reads(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master")
    bodies = [f"m{i}-" + "x" * (i % 700) for i in range(600)]  # ~220 KB: crosses 256 KiB files with the headers
    for i, body in enumerate(bodies):
        assert master.produce("orders", body, queue_id=i % 2).status_code == 201
    assert master.max_offset() > 262_144, "the log must span more than one file"
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up")
    for qid in (0, 1):
        assert slave.pull_all("orders", qid, 300) == bodies[qid::2]
    ha = slave.ha()
    assert ha["role"] == "slave" and ha["connection_state"] == "streaming" and ha["diverged"] is False
    # The master writes state records of its own: each acknowledged end is waited for, not compared once.
    wait_for(lambda: slave.ha()["acknowledged_offset"] == master.max_offset(), what="the slave to acknowledge the master's end")
    assert ha["master_http_address"] == master.url
    mha = master.ha()
    assert mha["connection_state"] == "connected"
    wait_for(lambda: caught_up(master, slave) and master.ha()["acknowledged_offset"] == master.max_offset(), what="the master to see it")
    assert mha["role"] == "master" and mha["peer_address"] and ha["peer_address"] == f"127.0.0.1:{master.ha_port}"
    assert slave.client.get("/v1/store").json()["role"] == "SLAVE"
    assert master.client.get("/v1/store").json()["role"] == "ASYNC_MASTER"

    def metrics_agree() -> bool:  # read again until no state record of the master's moved the end in between
        end = master.max_offset()
        texts = [node.client.get("/metrics").text for node in (master, slave)]
        for text in texts:
            assert metric(text, "tidemq_ha_connected") == 1 and metric(text, "tidemq_ha_diverged") == 0
        agree = all(metric(t, "tidemq_ha_acknowledged_offset") == end and metric(t, "tidemq_ha_bytes_behind") == 0 for t in texts)
        return agree and metric(texts[1], "tidemq_ha_received_bytes_total") >= end and master.max_offset() == end

    wait_for(metrics_agree, what="both brokers' metrics to show the slave at the master's end")
    assert metric(master.client.get("/metrics").text, "tidemq_ha_slaves") == 1


def test_slave_refuses_produce_and_stores_nothing(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master")
    assert master.produce("orders", "first").status_code == 201
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up")
    r = slave.produce("orders", "refused")
    assert r.status_code == 403, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["code"] == "NOT_MASTER" and body["status"] == 403
    assert body["master_http_address"] == master.url and master.url in body["detail"]
    assert slave.ha()["master_http_address"] == master.url
    # A refused produce to a topic the master never had creates nothing on the slave.
    r = slave.produce("never-on-master", "refused")
    assert r.status_code == 403 and r.json()["code"] == "NOT_MASTER"
    assert slave.client.get("/v1/topics/never-on-master").status_code == 404
    assert slave.client.put("/v1/topics/local", json={"queues": 1}).json()["code"] == "NOT_MASTER"
    # Group consumption writes checkpoints and acks: a slave takes none of it.
    for r in (
        slave.client.post("/v1/groups/g/topics/orders/receive"),
        slave.client.post("/v1/groups/g/topics/orders/ack", json={"receipt_handles": ["x"]}),
        slave.client.post("/v1/groups/g/topics/orders/invisible", json={"receipt_handle": "x", "invisible_ms": 5000}),
        slave.client.put("/v1/groups/g", json={"fifo": True}),
    ):
        assert r.status_code == 403 and r.json()["code"] == "NOT_MASTER", r.text
    # The slave's log is its master's, byte for byte in length: a record it stored itself would put it past the
    # master or off its bytes. (The master writes state records of its own meanwhile, a snapshot for its new
    # slave among them, so the slave's end moves on with it; comparing with the end before raced with those.)
    wait_for(lambda: caught_up(master, slave), what="the slave to hold exactly its master's log")
    assert slave.ha()["diverged"] is False


def test_sync_master_acknowledged_puts_survive_master_sigkill(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master", replication="sync")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: master.ha()["connection_state"] == "connected", what="the slave to connect")

    def put(i: int) -> tuple[int, dict[str, Any]]:
        r = master.produce("pay", f"p{i}", queue_id=i % 4)
        return r.status_code, r.json()

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(put, range(400)))
    acked = [(reply["queue_id"], reply["queue_offset"], f"p{i}") for i, (status, reply) in enumerate(results) if status == 201]
    assert len(acked) == 400, [r for r in results if r[0] != 201][:3]
    assert master.proc is not None
    master.proc.send_signal(signal.SIGKILL)
    master.proc.wait(10)
    # Every acknowledged message is on the slave, whatever the dead master had not sent.
    for qid in range(4):
        expected = {offset: body for q, offset, body in acked if q == qid}
        got = slave.pull_all("pay", qid, len(expected))
        assert got == [expected[o] for o in range(len(expected))]


def test_sync_master_without_a_slave_answers_slave_not_available(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master", replication="sync")
    r = master.client.put("/v1/topics/pay", json={"queues": 1})  # the topic's record waits for a slave as a message does
    assert r.status_code == 503 and r.json()["code"] == "SLAVE_NOT_AVAILABLE" and r.json()["stored"] is True, r.text
    counted = master.ha()["sync_slave_not_available_total"]
    before = master.max_offset()
    r = master.produce("pay", "lonely")
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["code"] == "SLAVE_NOT_AVAILABLE" and body["stored"] is True and r.headers["retry-after"] == "1"
    assert master.max_offset() > before, "the message is stored, only not replicated"
    assert master.ha()["sync_slave_not_available_total"] == counted + 1


def test_async_master_keeps_working_with_the_slave_down(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    assert master.produce("ev", "before").status_code == 201
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up")
    slave.kill()
    wait_for(lambda: master.ha()["connection_state"] == "no_slave", what="the master to see the slave go")
    for i in range(50):
        assert master.produce("ev", f"down{i}").status_code == 201
    slave.start()
    wait_for(lambda: caught_up(master, slave), what="the restarted slave to catch up")
    assert slave.pull_all("ev", 0, 51) == ["before", *[f"down{i}" for i in range(50)]]


def test_slave_reconnects_after_the_master_restarts(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    assert master.produce("ev", "one").status_code == 201
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up")
    assert master.proc is not None
    master.proc.send_signal(signal.SIGKILL)
    master.proc.wait(10)
    wait_for(lambda: slave.ha()["connection_state"] in ("disconnected", "connecting"), what="the slave to notice")
    master.start()
    assert master.produce("ev", "two").status_code == 201
    wait_for(lambda: caught_up(master, slave), what="the slave to resume")
    assert slave.pull_all("ev", 0, 2) == ["one", "two"]
    ha = slave.ha()
    assert ha["sessions_total"] >= 2 and ha["diverged"] is False


def test_slave_killed_with_a_torn_tail_truncates_and_resumes(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    for i in range(100):
        assert master.produce("ev", f"a{i}").status_code == 201
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up")
    end = slave.max_offset()
    assert slave.proc is not None
    slave.proc.send_signal(signal.SIGKILL)
    slave.proc.wait(10)
    # A torn write: the start of a message (valid size and magic) with the rest missing.
    file_size = 262_144
    last = slave.store_dir / "commitlog" / f"{end - end % file_size:020d}"
    position = end % file_size
    with open(last, "r+b") as f:
        f.seek(position)
        f.write(struct.pack(">iI", 300, 0xDAA320A7) + b"\x01" * 40)
    for i in range(100, 150):
        assert master.produce("ev", f"a{i}").status_code == 201
    slave.start()
    wait_for(lambda: caught_up(master, slave), what="the restarted slave to catch up")
    assert slave.pull_all("ev", 0, 150) == [f"a{i}" for i in range(150)]
    assert slave.ha()["diverged"] is False
    assert f"commitlog truncated at offset {end}" in slave.log()


def test_messages_with_ipv6_hosts_replicate_and_are_served_by_the_slave(cluster: Callable[..., Node]) -> None:
    """A log holding 20-byte (IPv6) host fields is streamed, applied and dispatched on the slave like any other."""
    master = cluster("master", "master", start=False)
    records = [Record("v6hosts", f"r{i}".encode(), {"KEYS": f"k{i}"}, 0, i, HOST_FLAGS[i % 4]) for i in range(40)]
    starts = write_commit_log(str(master.store_dir / "commitlog"), 262_144, records)
    master.start()
    # Every record is kept (the master writes state records of its own after them; the slave's pull below reads all 40).
    assert master.max_offset() >= starts[-1] + len(records[-1].image(starts[-1]))
    assert master.produce("v6hosts", "after", queue_id=0).status_code == 201  # also makes the topic known
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up")
    assert slave.pull_all("v6hosts", 0, 41) == [f"r{i}" for i in range(40)] + ["after"]
    decoded: list[dict[str, Any]] = []
    while len(decoded) < 41:  # a pull answers a bounded count: page through the queue
        r = slave.client.get(
            "/v1/topics/v6hosts/queues/0/messages",
            params={"offset": len(decoded), "max": 64},
            headers={"accept": "application/x-tidemq-batch"},
        )
        assert r.status_code == 200 and r.content
        decoded += [decode_message(r.content, p) for p, _ in iter_messages(r.content)]
    assert [m["born_host"] for m in decoded[:40]] == [host_text(rec.born_host) for rec in records]
    assert [m["store_host"] for m in decoded[:40]] == [host_text(rec.store_host) for rec in records]
    assert decoded[40]["born_host"].startswith("127.0.0.1:") and decoded[40]["sys_flag"] & 0x30 == 0


FILE_BYTES = 262_144  # tests/app/conftest.py's commitlog file size


def test_a_file_ending_in_an_eight_byte_end_marker_is_replicated_past(cluster: Callable[..., Node]) -> None:
    """A file whose last message leaves exactly 8 bytes ends with an end marker of 8 bytes (RocketMQ's
    END_FILE_MIN_BLANK_LENGTH): the master streams it like any marker, and the slave goes on into the next file."""
    master = cluster("master", "master")
    assert master.client.put("/v1/topics/T", json={"queues": 1}).status_code == 201

    def put(body: str) -> int:
        r = master.client.post("/v1/topics/T/messages", json={"body": body, "queue_id": 0})
        assert r.status_code == 201, r.text
        return int(r.json()["commitlog_offset"])

    base = "x" * 200
    first, second = put(base), put(base)
    size = second - first  # one message of this body; a longer body adds its length exactly
    end = second + size
    while FILE_BYTES - end >= 2 * size + 8:
        end = put(base) + size
    last_size = FILE_BYTES - end - 8
    assert put(base + "y" * (last_size - size)) + last_size == FILE_BYTES - 8
    assert put("next") == FILE_BYTES, "the next message starts the next file, after an end marker of 8 bytes"
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: caught_up(master, slave), timeout_s=20, what="the slave past the 8-byte end marker")
    last = slave.client.get("/v1/topics/T/queues/0/messages", params={"offset": 0, "max": 1}).json()["max_offset"] - 1
    r = slave.client.get("/v1/topics/T/queues/0/messages", params={"offset": last, "max": 1})
    assert r.status_code == 200 and [m["body"] for m in r.json()["messages"]] == ["next"]
