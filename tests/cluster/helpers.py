"""Reading a cluster under test: each broker's view of itself, and its group's master."""

from __future__ import annotations

from typing import Any

import httpx

from cluster.etcd_client import EtcdClient
from tests.ha.cluster import Node
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


def wait_master(nodes: list[Node], timeout_s: float = 15.0) -> Node:
    master = wait_for(lambda: next((n for n in nodes if is_master(n)), None), timeout_s, "a master")
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
