"""Failover per broker group under SYNC_MASTER: SIGSTOP of the master, the old master's return, loss of etcd.
(Rounds of SIGKILLs and SIGSTOPs under load, checked by the history checker: tests/cluster/test_history.py.)

Real etcd and real broker processes on loopback, leases of 2 s (tests/cluster/conftest.py). Every
acknowledged put (201) must stay readable; a new master must be elected within the lease TTL + 2 s.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import pytest

from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import DIRECT, cluster_status, in_sync, is_master, proxied_broker, wait_master
from tests.ha.cluster import FaultProxy, Node
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
LEASE_TTL_S = 2.0  # tests/cluster/conftest.py's lease_ttl_s
TOPIC = "orders"
# A refused or failed put is retried this much later: retrying at once spins the test process and the
# brokers on two cores through every election (thousands of 503s a second), slowing the brokers it measures.
RETRY_AFTER_REFUSAL_S = 0.01


@dataclass
class Ack:
    body: str
    broker: str
    sent: float
    received: float


@dataclass
class Producer:
    """Puts numbered messages to a group, through whichever broker answers, and records each acknowledged one."""

    nodes: list[Node]
    direct: bool = False  # address each broker itself (no forwarding): acks then name the broker that accepted
    acks: list[Ack] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Producer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def _run(self) -> None:
        clients = {n.url: httpx.Client(base_url=n.url, timeout=5.0) for n in self.nodes}
        i = 0
        try:
            while not self._stop.is_set():
                url = self.nodes[i % len(self.nodes)].url
                body = f"m{i}"
                i += 1
                sent = time.monotonic()
                try:
                    r = clients[url].post(
                        f"/v1/topics/{TOPIC}/messages", json={"body": body, "queue_id": 0}, headers=DIRECT if self.direct else None
                    )
                except httpx.TransportError:
                    self._stop.wait(RETRY_AFTER_REFUSAL_S)
                    continue
                if r.status_code == 201:
                    self.acks.append(Ack(body, url, sent, time.monotonic()))
                else:
                    self.refused[r.status_code] = self.refused.get(r.status_code, 0) + 1
                    self._stop.wait(RETRY_AFTER_REFUSAL_S)
        finally:
            for c in clients.values():
                c.close()


def readable(node: Node) -> set[str]:
    """Every body in queue 0 of the topic on `node`, read from offset 0 to the queue's end."""
    bodies: set[str] = set()
    offset = 0
    while True:
        r = node.client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": offset, "max": 256}, headers=DIRECT)
        if r.status_code != 200:
            return bodies
        reply = r.json()
        bodies.update(m["body"] for m in reply["messages"])
        if reply["next_offset"] >= reply["max_offset"] or reply["next_offset"] == offset:
            return bodies
        offset = reply["next_offset"]


def group_of_two(brokers: Callable[..., Node]) -> tuple[Node, Node]:
    a1, a2 = brokers("a1", "a"), brokers("a2", "a")
    master = wait_master([a1, a2])
    slave = a2 if master is a1 else a1
    wait_for(lambda: in_sync(master, slave), what="the slave to be in sync")
    assert master.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    return master, slave


def test_a_stopped_master_is_fenced_and_returns_as_a_slave_with_its_divergent_tail_cut(
    brokers: Callable[..., Node], proxies: Callable[[int], FaultProxy]
) -> None:
    # The first master's slave connects through a proxy, so the test can hold back what it sends.
    old, proxy = proxied_broker(brokers, proxies, "a1", "a")
    wait_for(lambda: is_master(old), what="the first master")
    new = brokers("a2", "a")
    wait_for(lambda: in_sync(old, new), what="the slave to be in sync")
    assert old.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    producer = Producer([old, new], direct=True).start()
    wait_for(lambda: len(producer.acks) > 30, what="acknowledged puts")
    # Replication stalls: the master stores puts its slave never receives (504 after sync_flush_timeout_ms).
    assert new.proc is not None and old.proc is not None
    proxy.paused.set()
    before = old.max_offset()
    pool = ThreadPoolExecutor(4)
    tail = [pool.submit(old.client.post, f"/v1/topics/{TOPIC}/messages", json={"body": f"tail{i}"}, headers=DIRECT) for i in range(4)]
    wait_for(lambda: old.max_offset() > before, what="the master to store puts its slave cannot confirm")
    os.kill(old.proc.pid, signal.SIGSTOP)  # the master pauses before it noticed the slave's silence
    stopped_at = time.monotonic()
    wait_for(lambda: is_master(new), timeout_s=LEASE_TTL_S + 5, what="the paused master's slave to be elected")
    assert time.monotonic() - stopped_at <= LEASE_TTL_S + 2
    os.kill(old.proc.pid, signal.SIGCONT)
    # The old master refuses puts at once, restarts in place, cuts its tail and follows the new master,
    # which acknowledges puts again once its new slave confirms them.
    wait_for(lambda: (s := cluster_status(old)) and s["role"] == "slave" and s["epoch"] == 2, timeout_s=30, what="the old master to rejoin")
    wait_for(lambda: any(a.broker == new.url for a in producer.acks), what="a put acknowledged by the new master")
    producer.stop()
    # Never acknowledged: stored but unconfirmed (503/504), or read only after the old master became a slave (403).
    answers = [t.result() for t in tail]
    assert {r.status_code for r in answers} <= {503, 504, 403}, "the tail was never acknowledged"
    assert all(r.json()["code"] == "NOT_MASTER" for r in answers if r.status_code == 403)
    pool.shutdown()
    first_new = min(a.sent for a in producer.acks if a.broker == new.url)
    last_old = max(a.received for a in producer.acks if a.broker == old.url)
    assert last_old < first_new, "two masters accepted puts for one group at the same time"
    assert producer.refused.get(503, 0) > 0
    bodies = readable(new)
    assert not {f"tail{i}" for i in range(4)} & bodies, "the unacknowledged tail is not the new master's"
    assert not {a.body for a in producer.acks} - bodies
    wait_for(lambda: old.max_offset() == new.max_offset(), what="the returned slave to catch up")
    assert readable(old) == bodies, "the returned slave holds exactly the new master's log"
    log = old.log_path.read_text()
    assert "(the recovery limit)" in log, "the tail was cut when the old master restarted"
    assert old.proc.poll() is None, "the old master restarted in place (same process id)"


def test_losing_etcd_keeps_the_roles_and_elects_nobody(brokers: Callable[..., Node], etcd: EtcdServer) -> None:
    master, slave = group_of_two(brokers)
    assert master.produce(TOPIC, "before").status_code == 201
    etcd.kill()
    lost_at = time.monotonic()
    wait_for(lambda: (s := cluster_status(slave)) and s["etcd_error"], what="the slave to notice etcd is gone")
    # Past the lease's TTL the master still accepts puts (its slave acknowledges them), and nobody is elected.
    n = 0
    while time.monotonic() - lost_at < LEASE_TTL_S + 1.5:
        r = master.produce(TOPIC, f"during{n}")
        assert r.status_code == 201, r.text
        n += 1
    assert cast(dict[str, Any], cluster_status(slave))["role"] == "slave"
    assert cast(dict[str, Any], cluster_status(master))["role"] == "master"
    etcd.start()
    wait_for(
        lambda: (
            cast(dict[str, Any], cluster_status(master))["etcd_error"] is None
            and cast(dict[str, Any], cluster_status(slave))["etcd_error"] is None
        ),
        what="etcd back",
    )
    assert is_master(master) and cast(dict[str, Any], cluster_status(slave))["role"] == "slave"
    assert master.produce(TOPIC, "after").status_code == 201
    assert readable(slave) >= {"before", "after", *(f"during{i}" for i in range(n))}
