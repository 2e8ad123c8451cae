"""The standalone master/slave pair replicates every state a consumer depends on: after the master is
SIGKILLed and the slave restarted as master on its own store, committed offsets, groups, topics and
received-but-unacked messages are all there, and acked messages stay acked.

Real broker processes (`python -m app serve`) with SYNC replication on loopback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.ha.cluster import Node, caught_up
from tests.waiting import wait_for

TOPIC = "billing"
GROUP = "payments"
INVISIBLE_MS = 3_000


def receive(node: Node, max_count: int, wait_ms: int = 0) -> list[dict[str, Any]]:
    r = node.client.post(
        f"/v1/groups/{GROUP}/topics/{TOPIC}/receive", params={"max": max_count, "invisible_ms": INVISIBLE_MS, "wait_ms": wait_ms}
    )
    assert r.status_code == 200, r.text
    messages: list[dict[str, Any]] = r.json()["messages"]
    return messages


def ack(node: Node, handles: list[str]) -> list[str]:
    r = node.client.post(f"/v1/groups/{GROUP}/topics/{TOPIC}/ack", json={"receipt_handles": handles})
    assert r.status_code == 200, r.text
    return [x["status"] for x in r.json()["results"]]


def offsets(node: Node, group: str, topic: str) -> dict[int, int]:
    r = node.client.get(f"/v1/groups/{group}/offsets", params={"topic": topic})
    assert r.status_code == 200, r.text
    return {q["queue_id"]: q["committed_offset"] for q in r.json()["queues"]}


def test_a_promoted_slave_holds_every_state_of_its_master(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master", replication="sync")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: master.ha()["connection_state"] == "connected", what="the slave to connect")
    c = master.client
    assert c.put(f"/v1/topics/{TOPIC}", json={"queues": 2}).status_code == 201
    assert c.put("/v1/topics/orders", json={"queues": 2}).status_code == 201
    assert c.put(f"/v1/groups/{GROUP}", json={"max_reconsume_times": 4}).status_code in (200, 201)
    for i in range(40):
        assert master.produce(TOPIC, f"b{i}", queue_id=i % 2).status_code == 201
        assert master.produce("orders", f"o{i}", queue_id=i % 2).status_code == 201
    commit = [{"topic": "orders", "queue_id": 0, "offset": 15}, {"topic": "orders", "queue_id": 1, "offset": 12}]
    assert c.put("/v1/groups/billing/offsets", json=commit).status_code == 200
    received: list[dict[str, Any]] = []
    while len(received) < 30:
        received += receive(master, 16)
    acked, unacked = received[:20], received[20:]
    assert ack(master, [m["receipt_handle"] for m in acked]) == ["OK"] * 20
    wait_for(lambda: caught_up(master, slave), what="the slave to hold the master's whole log")
    # A slave takes no commit: nothing is stored there, the client is sent to the master. Its log stays its
    # master's (the master writes state records of its own meanwhile, so the end is waited for, not compared once).
    refused = slave.client.put("/v1/groups/billing/offsets", json={"topic": "orders", "queue_id": 0, "offset": 1})
    assert refused.status_code == 403 and refused.json()["code"] == "NOT_MASTER", refused.text
    wait_for(lambda: caught_up(master, slave), what="the slave to hold exactly its master's log")
    assert slave.ha()["diverged"] is False

    master.kill()
    slave.stop()
    slave.args = ["--role", "master", "--ha-port", "0", "--replication", "async"]
    slave.start()

    assert offsets(slave, "billing", "orders") == {0: 15, 1: 12}
    group = slave.client.get(f"/v1/groups/{GROUP}").json()
    assert group["max_reconsume_times"] == 4
    topics = {t["topic"]: t for t in slave.client.get("/v1/topics").json()["topics"]}
    assert topics[TOPIC]["read_queues"] == 2 and topics["orders"]["read_queues"] == 2
    # Every received-but-unacked message comes back once its invisible time is over; no acked one does.
    want = {m["body"] for m in unacked} | {f"b{i}" for i in range(40)} - {m["body"] for m in received}
    got: dict[str, int] = {}
    deadline = time.monotonic() + INVISIBLE_MS / 1000 + 20
    while not want <= set(got) and time.monotonic() < deadline:
        for m in receive(slave, 16, wait_ms=500):
            got[m["body"]] = got.get(m["body"], 0) + 1
            ack(slave, [m["receipt_handle"]])
    assert want <= set(got), f"never delivered again on the new master: {sorted(want - set(got))}"
    assert not {m["body"] for m in acked} & set(got), "a message acked on the old master was delivered again"
