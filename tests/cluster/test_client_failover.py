"""The Python client and the `tidemq` command follow a group's failover: they retry NO_MASTER, FORWARD_FAILED and
NOT_ENOUGH_REPLICAS with jittered backoff within retry_total_s, re-read the topic's route and send to the master
it names. Real etcd and broker processes (tests/cluster/conftest.py: leases of 2 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from tests.client.cli_helpers import tidemq
from tests.cluster.helpers import DIRECT, cluster_status, is_master, wait_in_sync, wait_master
from tests.ha.cluster import Node
from tests.waiting import wait_for
from tidemq import AsyncClient, Client, ServiceUnavailable

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
TOPIC = "orders"
LEASE_TTL_S = 2.0


def group_of_two(brokers: Callable[..., Node], extra_cluster: str = "") -> tuple[Node, Node]:
    a1, a2 = brokers("a1", "a", extra_cluster=extra_cluster), brokers("a2", "a", extra_cluster=extra_cluster)
    master = wait_master([a1, a2])
    slave = a2 if master is a1 else a1
    wait_in_sync(master, slave)
    assert master.client.put(f"/v1/topics/{TOPIC}", json={"queues": 1}).status_code == 201
    return master, slave


def stored(node: Node) -> list[str]:
    r = node.client.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0, "max": 256}, headers=DIRECT)
    return [m["body"] for m in r.json()["messages"]]


def test_the_client_retries_through_an_election_then_follows_the_route_when_its_master_dies(
    brokers: Callable[..., Node],
) -> None:
    master, slave = group_of_two(brokers)
    with Client(slave.url, timeout_s=5.0, retry_backoff_min_s=0.02, retry_backoff_max_s=0.2, retry_total_s=LEASE_TTL_S + 8) as c:
        assert c.produce(TOPIC, b"before", queue_id=0).queue_offset == 0
        # The route lists the topic once the master's registration record does (within a refresh interval).
        wait_for(lambda: slave.client.get(f"/v1/topics/{TOPIC}/route").status_code == 200, what="the topic's route")
        master.kill()
        killed_at = time.monotonic()
        # The slave answers NO_MASTER until it is elected; the client retries, reads the route and sends to it.
        sent = c.produce(TOPIC, b"through the election", queue_id=0)
        assert sent.queue_offset == 1 and time.monotonic() - killed_at <= LEASE_TTL_S + 3
        assert is_master(slave)
        assert c.routes.cluster is True and c.routes.target(TOPIC) == slave.url, "the route was read; the new master is addressed"
        master.start()
        wait_for(lambda: (s := cluster_status(master)) and s["role"] == "slave", timeout_s=30, what="the old master back")
        wait_in_sync(slave, master)
        # Now the master the client sends to dies: the connection is refused, the client tries the route's other
        # broker, which answers NO_MASTER until it is elected, and follows it.
        slave.kill()
        assert c.produce(TOPIC, b"after the second failover", queue_id=0).queue_offset == 2
        assert c.routes.target(TOPIC) == master.url, "later calls go to the broker that took it, not the dead one"
    assert stored(master) == ["before", "through the election", "after the second failover"]


def test_not_enough_replicas_is_retried_until_a_slave_rejoins_and_not_past_retry_total_s(brokers: Callable[..., Node]) -> None:
    master, slave = group_of_two(brokers, extra_cluster="min_in_sync_replicas = 2\n")
    slave.kill()
    wait_for(
        lambda: cast(dict[str, Any], cluster_status(master))["write_refusal"] == "NOT_ENOUGH_REPLICAS",
        timeout_s=10,
        what="the set to shrink",
    )

    async def refused_within_bound() -> float:
        async with AsyncClient(master.url, retry_backoff_min_s=0.05, retry_backoff_max_s=0.2, retry_total_s=1.0) as c:
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable) as caught:
                await c.produce(TOPIC, b"refused", queue_id=0)
            assert caught.value.code == "NOT_ENOUGH_REPLICAS"
            return time.monotonic() - started

    elapsed = asyncio.run(refused_within_bound())
    assert 0.5 <= elapsed <= 2.0, f"retried for {elapsed:.2f} s with retry_total_s 1"
    slave.start()  # the next produce waits through the slave's return (it rejoins the set) and is taken
    done = tidemq(master.url, "produce", TOPIC, "--queue", "0", "--retry-total-s", "30", stdin=b"after the rejoin\n")
    assert done.returncode == 0, done.stderr
    assert stored(master) == ["after the rejoin"]
    done = tidemq(master.url, "produce", TOPIC, "--retry-total-s", "-1", stdin=b"x\n")
    assert done.returncode == 2 and "retry_total_s" in done.stderr
