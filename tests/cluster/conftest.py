"""Fixtures: a real etcd and broker processes in cluster mode, on free loopback ports, always killed at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.local_cluster import FAST_FAILOVER
from tests.cluster.etcd import ETCD, EtcdServer
from tests.ha.cluster import SMALL_BROKER, SMALL_STORE, Node, Nodes
from tests.ha.conftest import proxies  # noqa: F401  (the fault-injecting TCP proxy fixture)

# A put waiting on a dead slave is answered once the in-sync set shrank (in_sync_lag_max_ms 1.5 s, then an
# etcd write of at most 0.5 s), before it times out: 3 s rather than the HA tests' 1.5 s.
CLUSTER_STORE = SMALL_STORE.replace("sync_flush_timeout_ms = 1500", "sync_flush_timeout_ms = 3000")
assert CLUSTER_STORE != SMALL_STORE


def overridden(table: str, extra: str) -> str:
    """`table` without the lines whose keys `extra` sets again (TOML refuses a key twice)."""
    keys = {line.split("=", 1)[0].strip() for line in extra.splitlines() if "=" in line}
    return "".join(line for line in table.splitlines(keepends=True) if line.split("=", 1)[0].strip() not in keys)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    if ETCD is None:
        pytest.skip("etcd is not installed (Debian package etcd-server)")
    server = EtcdServer(tmp_path).start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def brokers(tmp_path: Path, etcd: EtcdServer) -> Iterator[Callable[..., Node]]:
    """make(name, group, ...) -> a started cluster broker Node (`ha_port` 0 unless given: the broker listens on a
    port the kernel picks, read with tests/cluster/helpers.ha_listen_port); `extra_store` and `extra_cluster` add
    [store] and [cluster] lines, `auto_create` lets a produce create a missing topic (for the tests of how a cluster
    places new topics)."""
    with Nodes() as nodes:

        def make(
            name: str,
            group: str,
            *,
            replication: str = "sync",
            ha_port: int = 0,
            extra_cluster: str = "",
            extra_store: str = "",
            start: bool = True,
            extra_args: tuple[str, ...] = (),
            client_options: dict[str, Any] | None = None,
            auto_create: bool = False,
        ) -> Node:
            broker = SMALL_BROKER + ("auto_create_topics = true\n" if auto_create else "")
            config = CLUSTER_STORE + extra_store + broker + overridden(FAST_FAILOVER, extra_cluster) + extra_cluster
            node = Node(tmp_path, name, [], config, client_options)
            node.args = [
                "--cluster-etcd",
                etcd.url,
                "--cluster-name",
                "test",
                "--broker-name",
                group,
                "--ha-port",
                str(ha_port),
                "--replication",
                replication,
                *extra_args,
            ]  # fmt: skip; the advertised HTTP address is derived from the port the first start binds
            return nodes.add(node, ha_port, start)

        yield make
