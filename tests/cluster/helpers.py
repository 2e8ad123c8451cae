"""Reading a cluster under test: each broker's view of itself, and its group's master."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from cluster.etcd_client import EtcdClient
from tests.ha.cluster import FaultProxy, Node
from tests.waiting import wait_for

# Sent on requests a test addresses to one broker: it serves them itself, never forwards (cluster/forwarding.py).
DIRECT = {"tidemq-forwarded-by": "test"}


def cluster_status(node: Node) -> dict[str, Any] | None:
    """The broker's `cluster` status, None while it does not answer."""
    try:
        r = node.client.get("/v1/store", timeout=2.0)
    except httpx.TransportError:
        return None
    return r.json().get("cluster") if r.status_code == 200 else None


def is_master(node: Node) -> bool:
    status = cluster_status(node)
    return bool(status and status["role"] == "master" and status["accepting_puts"])


def ha_listen_port(node: Node) -> int:
    """The HA port the broker listens on (a cluster broker started with `--ha-port 0`: the one the kernel picked)."""
    status = cluster_status(node)
    assert status is not None, f"{node.url} does not answer"
    return int(str(status["ha_listen_address"]).rsplit(":", 1)[1])


def proxied_broker(brokers: Callable[..., Node], proxies: Callable[[int], FaultProxy], name: str, group: str) -> tuple[Node, FaultProxy]:
    """A broker whose slaves reach it through a fault-injecting proxy, its advertised HA address. The proxy is told
    the broker's HA port once the broker listens on it, before any slave follows it: no port is picked in advance,
    so none can be taken by another process in between."""
    proxy = proxies(0)
    node = brokers(name, group, extra_cluster=f'advertised_ha_address = "127.0.0.1:{proxy.port}"\n')
    proxy.target_port = ha_listen_port(node)
    return node, proxy


def wait_master(nodes: list[Node], timeout_s: float = 15.0) -> Node:
    def what() -> str:  # each broker's status and its log's end: why none became master
        return "a master; " + "; ".join(f"{n.url}: {cluster_status(n)}\n{n.log()[-3000:]}" for n in nodes)

    master = wait_for(lambda: next((n for n in nodes if is_master(n)), None), timeout_s, what)
    assert master is not None  # wait_for answers a truthy value
    return master


def in_sync(master: Node, slave: Node) -> bool:
    status = cluster_status(master)
    return bool(status and slave.url in status["in_sync"])


def sync_state(etcd_url: str, group: str) -> dict[str, Any] | None:
    """The group's `sync_state` key as etcd holds it now (cluster name "test", as tests/cluster/conftest.py starts brokers)."""
    client = EtcdClient([etcd_url], 2_000)
    try:
        kv = client.get(f"/tidemq/test/groups/{group}/sync_state")
    finally:
        client.close()
    return kv.value if kv is not None else None


def wait_in_sync(master: Node, *slaves: Node, timeout_s: float = 20.0) -> None:
    wait_for(lambda: all(in_sync(master, s) for s in slaves), timeout_s, f"{len(slaves)} slave(s) to be in sync")
