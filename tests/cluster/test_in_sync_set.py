"""The in-sync set under SYNC replication: it shrinks in etcd before a put is acknowledged without a dead slave,
the slave rejoins once it caught up, `min_in_sync_replicas` refuses writes with nothing stored, and in a group of
three a put waits for both slaves and the most advanced in-sync broker is elected.

Real etcd and broker processes on loopback (tests/cluster/conftest.py: leases of 2 s, in_sync_lag_max_ms 1.5 s).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import httpx
import pytest

from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import DIRECT, cluster_status, in_sync, is_master, proxied_broker, sync_state, wait_in_sync, wait_master
from tests.ha.cluster import FaultProxy, Node
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
TOPIC = "orders"
LAG_MAX_S = 1.5  # cluster/local_cluster.py's FAST_FAILOVER in_sync_lag_max_ms
LEASE_TTL_S = 2.0


def put(node: Node, body: str) -> httpx.Response:
    return node.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body, "queue_id": 0}, headers=DIRECT)


def queue_end(node: Node) -> int:
    """The end (max offset) of TOPIC's queue 0 on `node`."""
    return int(node.client.get(f"/v1/topics/{TOPIC}", headers=DIRECT).json()["queues"][0]["max_offset"])


def bodies(node: Node) -> list[str]:
    r = node.client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0, "max": 256}, headers=DIRECT)
    assert r.status_code == 200, r.text
    return [m["body"] for m in r.json()["messages"]]


def group(brokers: Callable[..., Node], names: list[str], extra_cluster: str = "") -> tuple[Node, list[Node]]:
    nodes = [brokers(n, "a", extra_cluster=extra_cluster) for n in names]
    master = wait_master(nodes)
    slaves = [n for n in nodes if n is not master]
    wait_in_sync(master, *slaves)
    assert master.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    return master, slaves


def test_a_dead_slave_leaves_the_set_in_etcd_before_puts_are_acknowledged_without_it_then_rejoins(
    brokers: Callable[..., Node], etcd: EtcdServer
) -> None:
    master, (slave,) = group(brokers, ["a1", "a2"])
    assert put(master, "before").status_code == 201
    state = sync_state(etcd.url, "a")
    assert state is not None and state["in_sync"] == [slave.url]
    slave.kill()
    killed_at = time.monotonic()
    r = put(master, "waits-for-the-shrink")
    answered = time.monotonic()
    assert r.status_code == 201, r.text
    state = sync_state(etcd.url, "a")
    assert state is not None and state["in_sync"] == [], "etcd names the dead slave no more once a put is acknowledged without it"
    assert answered - killed_at >= LAG_MAX_S - 0.3, "the put waited for the dead slave until the set shrank"
    for i in range(5):  # and from then on at once
        assert put(master, f"alone{i}").status_code == 201
    status = cluster_status(master)
    assert status is not None and status["in_sync"] == []

    slave.start()  # catches up and rejoins; puts wait for it again
    wait_for(lambda: in_sync(master, slave), timeout_s=20, what="the slave to rejoin the set")
    state = sync_state(etcd.url, "a")
    assert state is not None and state["in_sync"] == [slave.url]
    assert put(master, "after").status_code == 201
    # Acknowledged: the slave holds the bytes; it serves them once its own dispatch (a thread of its own) ran.
    want = ["before", "waits-for-the-shrink", *(f"alone{i}" for i in range(5)), "after"]
    wait_for(lambda: bodies(slave) == want, timeout_s=10, what=lambda: f"the slave to serve {want}, not {bodies(slave)}")


def test_min_in_sync_replicas_of_two_refuses_writes_with_one_broker_left_and_stores_nothing(
    brokers: Callable[..., Node],
) -> None:
    master, (slave,) = group(brokers, ["a1", "a2"], extra_cluster="min_in_sync_replicas = 2\n")
    assert put(master, "both").status_code == 201
    slave.kill()
    # A cast, not an assert (in a lambda): a status not answered still fails at once (None is not indexable).
    wait_for(lambda: cast("dict[str, Any]", cluster_status(master))["in_sync"] == [], timeout_s=10, what="the set to shrink")
    for body in ("refused-1", "refused-2"):
        r = put(master, body)
        assert r.status_code == 503 and r.json()["code"] == "NOT_ENOUGH_REPLICAS", r.text
        assert r.headers["retry-after"] == "1"
    r = master.client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "through forwarding", "queue_id": 0})
    assert r.status_code == 503 and r.json()["code"] == "NOT_ENOUGH_REPLICAS", r.text
    # The queue, not the commitlog's end: a master may write state records of its own meanwhile.
    assert queue_end(master) == 1 and bodies(master) == ["both"], "nothing was stored"
    status = cluster_status(master)
    assert status is not None
    assert status["write_refusal"] == "NOT_ENOUGH_REPLICAS" and status["accepting_puts"] is False
    slave.start()
    wait_for(lambda: put(master, "again").status_code == 201, timeout_s=20, what="writes once the slave rejoined")
    assert "refused-1" not in bodies(slave) and bodies(slave)[0] == "both"


def test_a_group_of_three_acknowledges_a_put_once_both_slaves_have_it(
    brokers: Callable[..., Node], proxies: Callable[[int], FaultProxy], etcd: EtcdServer
) -> None:
    """The master's slaves connect through a proxy; one slave's connection is held back: the put waits for it."""
    first, proxy = proxied_broker(brokers, proxies, "a1", "a")
    wait_for(lambda: is_master(first), what="the first master")
    fast, slow = brokers("a2", "a"), brokers("a3", "a")
    wait_in_sync(first, fast, slow)
    assert first.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    assert put(first, "m0").status_code == 201
    proxy.pause_peer(slave_port(first, slow))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(put, first, "m1")
        # The master's end once it holds the put (read before, it could still be the end without it).
        wait_for(lambda: queue_end(first) == 2, what="the put to reach the master's queue")
        end = first.max_offset()
        wait_for(lambda: fast.max_offset() >= end > slow.max_offset(), what="one slave to have the put")
        time.sleep(0.5)  # the put must stay unanswered meanwhile
        assert not pending.done(), "a put is not acknowledged while one in-sync slave lacks it"
        proxy.resume_peers()
        assert pending.result(10).status_code == 201
    state = sync_state(etcd.url, "a")
    assert state is not None and state["in_sync"] == sorted([fast.url, slow.url]), "the slave held back never left the set"


def test_a_group_of_three_elects_its_most_advanced_in_sync_broker(
    brokers: Callable[..., Node], proxies: Callable[[int], FaultProxy], etcd: EtcdServer
) -> None:
    """Two in-sync slaves, one with puts the other lacks: the master dies; the one that lacks them reads the cluster
    ten times as often (so it would win any race to campaign) and defers; the most advanced one is elected."""
    first, proxy = proxied_broker(brokers, proxies, "a1", "a")
    wait_for(lambda: is_master(first), what="the first master")
    ahead = brokers("a2", "a", extra_cluster="refresh_interval_ms = 600\n")
    behind = brokers("a3", "a")
    wait_in_sync(first, ahead, behind)
    assert first.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    assert put(first, "m0").status_code == 201
    proxy.pause_peer(slave_port(first, behind))
    with ThreadPoolExecutor(1) as pool:
        pool.submit(put, first, "tail")  # stored on the master and `ahead`, waiting for `behind`
        wait_for(lambda: queue_end(first) == 2, what="the put to reach the master's queue")
        end = first.max_offset()
        wait_for(lambda: ahead.max_offset() >= end > behind.max_offset(), what="one slave to be ahead")
        first.kill()  # within in_sync_lag_max_ms: both slaves are still in the set
    state = sync_state(etcd.url, "a")
    assert state is not None and sorted(state["in_sync"]) == sorted([ahead.url, behind.url])
    wait_for(lambda: is_master(ahead) or is_master(behind), timeout_s=LEASE_TTL_S + 5, what="a new master")
    assert is_master(ahead) and not is_master(behind), "the most advanced in-sync broker was elected"
    assert "deferring to " + ahead.url in behind.log()
    wait_for(lambda: behind.max_offset() == ahead.max_offset(), what="the other slave to follow the new master")
    wait_for(lambda: bodies(behind) == ["m0", "tail"], timeout_s=10, what=lambda: f"the other slave to serve both, not {bodies(behind)}")


def slave_port(master: Node, slave: Node) -> int:
    """The master-side peer port of `slave`'s HA connection (through the proxy: the proxy's upstream socket)."""
    rows = master.ha()["slaves"]
    row = next(r for r in rows if r["broker_id"] == slave.url and r["state"] == "streaming")
    return int(row["address"].rsplit(":", 1)[1])
