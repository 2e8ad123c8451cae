"""Reads of consumer state in a group of two on etcd: only a master that holds its lease answers them; and what a
read may rightly see after a commit whose client gave up.

A master cut off from etcd keeps taking writes under SYNC replication (docs/cluster.md, "Losing etcd"): each needs
its slave's acknowledgement, which a slave elected meanwhile no longer gives. A read needs none, so the same master
answering reads from its own tables would hand out a committed offset its successor has already moved on from.
Here the old master reaches etcd through a proxy that is then held, so its lease ends while it runs and the slave,
which still reaches etcd, is elected and takes a commit.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import DIRECT, cluster_status, is_master, wait_in_sync, wait_master
from tests.ha.cluster import FaultProxy, Node
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
TOPIC = "ledger"
GROUP = "auditors"
OFFSETS = f"/v1/groups/{GROUP}/offsets"


def committed(reply_json: dict[str, Any]) -> int:
    offset: int = next(q["committed_offset"] for q in reply_json["queues"] if q["queue_id"] == 0)
    return offset


def test_a_master_cut_off_from_etcd_answers_no_consumer_state_read_once_a_successor_may_be_elected(
    brokers: Callable[..., Node], etcd: EtcdServer, proxies: Callable[[int], FaultProxy]
) -> None:
    proxy = proxies(etcd.client_port)
    old = brokers("a1", "a", start=False)
    old.args = [f"http://127.0.0.1:{proxy.port}" if arg == etcd.url else arg for arg in old.args]
    old.start()
    wait_master([old])
    new = brokers("a2", "a")
    wait_in_sync(old, new)
    assert old.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    for i in range(4):
        assert old.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": f"m{i}", "queue_id": 0}).status_code == 201
    commit = {"topic": TOPIC, "queue_id": 0, "offset": 1}
    assert old.client.put(OFFSETS, json=commit).status_code == 200
    reply = old.client.get(OFFSETS, params={"topic": TOPIC})
    assert reply.status_code == 200 and committed(reply.json()) == 1
    status = cluster_status(old)
    assert status is not None
    assert reply.headers["tidemq-served-by"] == f"{old.url}; role=master; epoch={status['epoch']}"

    proxy.paused.set()  # the old master's etcd requests go unanswered from now on; the slave's still reach etcd
    wait_for(lambda: is_master(new), timeout_s=15, what="the slave elected once the old master's lease ended")
    assert new.client.put(OFFSETS, json={**commit, "offset": 3}, headers=DIRECT).status_code == 200
    status = cluster_status(old)
    assert status is not None
    assert status["role"] == "master"  # it cannot learn of its successor: etcd does not answer it
    for headers in (DIRECT, None):  # asked as the master (forwarded to it), and as any broker
        reply = old.client.get(OFFSETS, params={"topic": TOPIC}, headers=headers)
        assert reply.status_code == 503 and reply.json()["code"] == "NO_MASTER", reply.text

    proxy.paused.clear()  # it learns it is deposed, restarts as a slave, and forwards reads to the new master
    wait_for(lambda: (s := cluster_status(old)) and s["role"] == "slave", timeout_s=30, what="the old master back as a slave")
    served = wait_for(lambda: (r := old.client.get(OFFSETS, params={"topic": TOPIC})).status_code == 200 and r, what="a read")
    assert isinstance(served, httpx.Response)  # wait_for answers the truthy value: the response
    assert committed(served.json()) == 3
    assert served.headers["tidemq-served-by"].startswith(f"{new.url}; role=master;")


def test_a_commit_its_client_gave_up_on_may_take_effect_after_a_later_commit_answered_ok(
    brokers: Callable[..., Node], etcd: EtcdServer
) -> None:
    """Why the history checker lets a read below an answered commit pass when the log shows an unanswered commit
    applied after it: a broker that was not running (paused here; on a loaded machine, starved) still holds the
    request its client gave up on, and forwards it to the master once it runs, after a later commit was answered."""
    nodes = [brokers("a1", "a"), brokers("a2", "a")]
    master = wait_master(nodes)
    slave = next(n for n in nodes if n is not master)
    wait_in_sync(master, slave)
    assert master.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    for i in range(4):
        assert master.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": f"m{i}", "queue_id": 0}).status_code == 201
    assert slave.proc is not None
    os.kill(slave.proc.pid, signal.SIGSTOP)
    try:
        with httpx.Client(timeout=1.0) as client, pytest.raises(httpx.TimeoutException):
            client.put(f"{slave.url}{OFFSETS}", json={"topic": TOPIC, "queue_id": 0, "offset": 1})  # held by the slave
        assert master.client.put(OFFSETS, json={"topic": TOPIC, "queue_id": 0, "offset": 3}).status_code == 200
        assert committed(master.client.get(OFFSETS, params={"topic": TOPIC}).json()) == 3
    finally:
        os.kill(slave.proc.pid, signal.SIGCONT)
    wait_for(lambda: committed(master.client.get(OFFSETS, params={"topic": TOPIC}).json()) == 1, what="the held commit applied")
