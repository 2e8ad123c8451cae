"""Idempotent produce across a failover: a key the master stored is a duplicate on its promoted slave,
which finds it in what it replicated and indexed (the window is state in the log, store/put/dedup_window.py).

Real broker processes (`python -m app serve`) with SYNC replication on loopback, as
tests/ha/test_state_replication.py runs and promotes a pair.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.ha.cluster import Node, caught_up
from tests.waiting import wait_for

TOPIC = "payments"


def test_a_promoted_slave_answers_a_key_its_master_stored_as_a_duplicate(cluster: Callable[..., Node]) -> None:
    master = cluster("master", "master", replication="sync")
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: master.ha()["connection_state"] == "connected", what="the slave to connect")
    c = master.client
    assert c.put(f"/v1/topics/{TOPIC}", json={"queues": 2}).status_code == 201
    first = c.post(f"/v1/topics/{TOPIC}/messages", json={"body": "charge 5", "queue_id": 1}, headers={"Idempotency-Key": "charge-77"})
    assert first.status_code == 201, first.text
    batch = {"messages": [{"body": f"b{i}", "queue_id": 0, "dedup_id": f"batch-{i}"} for i in range(3)]}
    stored_batch = c.post(f"/v1/topics/{TOPIC}/messages", json=batch)
    assert stored_batch.status_code == 201, stored_batch.text
    wait_for(lambda: caught_up(master, slave), what="the slave to hold the master's whole log")

    master.kill()  # the producer's reply may be lost with it: it resends to the new master
    slave.stop()
    slave.args = ["--role", "master", "--ha-port", "0", "--replication", "async"]
    slave.start()

    s = slave.client
    again = s.post(f"/v1/topics/{TOPIC}/messages", json={"body": "charge 5", "queue_id": 1}, headers={"Idempotency-Key": "charge-77"})
    assert again.status_code == 200, again.text
    assert again.json()["duplicate"] is True
    assert {k: again.json()[k] for k in ("msg_id", "commitlog_offset", "queue_offset")} == {
        k: first.json()[k] for k in ("msg_id", "commitlog_offset", "queue_offset")
    }
    resent = s.post(f"/v1/topics/{TOPIC}/messages", json=batch)
    assert resent.status_code == 200 and [r["msg_id"] for r in resent.json()["results"]] == [
        r["msg_id"] for r in stored_batch.json()["results"]
    ]
    queues = {q["queue_id"]: q["max_offset"] for q in s.get(f"/v1/topics/{TOPIC}").json()["queues"]}
    assert queues == {0: 3, 1: 1}  # nothing stored twice
    fresh = s.post(f"/v1/topics/{TOPIC}/messages", json={"body": "charge 6"}, headers={"Idempotency-Key": "charge-78"})
    assert fresh.status_code == 201, fresh.text
