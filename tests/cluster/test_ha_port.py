"""A cluster broker's HA port: held from the start, so a port in use refuses the start and never an election.

Real etcd and real broker processes on loopback (tests/cluster/conftest.py), started with `--ha-port 0` unless a test
names a port.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
from collections.abc import Callable

import pytest

from cluster.etcd_client import EtcdClient
from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import cluster_status, ha_listen_port, in_sync, is_master, wait_master
from tests.ha.cluster import Node
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(180)]
LEASE_TTL_S = 2.0  # tests/cluster/conftest.py's lease_ttl_s
EXIT_START_FAILED = 3  # app/cli.py


def registered(etcd: EtcdServer) -> set[str]:
    client = EtcdClient([etcd.url], 2_000)
    try:
        return {kv.value["broker_id"] for kv in client.prefix("/tidemq/test/brokers/")}
    finally:
        client.close()


def held(port: int) -> bool:
    """Whether another socket cannot take `port` on loopback (it is bound by someone)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as e:
            assert e.errno == errno.EADDRINUSE, e
            return True
    return False


def test_a_broker_whose_ha_port_is_in_use_refuses_to_start_before_it_joins_its_group(
    brokers: Callable[..., Node], etcd: EtcdServer
) -> None:
    first = brokers("a1", "a")
    wait_master([first])
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        second = brokers("a2", "a", ha_port=port, start=False)
        second.start(wait_ready=False)
        assert second.proc is not None
        assert second.proc.wait(30) == EXIT_START_FAILED, second.log()
    assert f"cannot listen on 127.0.0.1:{port}" in second.log()
    assert registered(etcd) == {first.url}, "the refused broker never joined its group"


def test_the_ha_port_is_held_from_the_start_and_kept_by_a_restart(brokers: Callable[..., Node]) -> None:
    first = brokers("a1", "a")
    wait_master([first])
    second = brokers("a2", "a")
    wait_for(lambda: in_sync(first, second), what="the slave to be in sync")
    # A slave already holds the port it will serve from once elected, and advertises it.
    port = ha_listen_port(second)
    assert port != 0 and held(port)
    status = cluster_status(second)
    assert status is not None and status["role"] == "slave" and status["ha_address"] == f"127.0.0.1:{port}"
    # The master pauses past its lease: the slave is elected and serves replication from that port.
    first_port = ha_listen_port(first)
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: is_master(second), timeout_s=LEASE_TTL_S + 10, what="the slave to be elected")
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    # The deposed master restarts in place on the HA port it had, and follows the new master from the port it held.
    wait_for(
        lambda: (s := cluster_status(first)) and s["role"] == "slave" and s["epoch"] == 2, timeout_s=30, what="the old master to rejoin"
    )
    assert "restarting the broker" in first.log() and first.proc.poll() is None
    assert ha_listen_port(first) == first_port and held(first_port)
    wait_for(lambda: in_sync(second, first), what="the old master to be in sync with the new one")
    assert ha_listen_port(second) == port
