"""Safety and network faults: divergence is reported, never overwritten; cut and paused connections recover."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.ha.cluster import FaultProxy, Node, caught_up
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def stopped_copy_of(cluster: Callable[..., Node], master: Node) -> tuple[Node, int]:
    """A slave that copied all of `master` and was stopped, and where its log ends (a master writes
    state records of its own meanwhile, so its end moves on after the copy)."""
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}")
    wait_for(lambda: caught_up(master, slave), what="the slave to copy the first master")
    slave.stop()
    held = slave.max_offset_on_disk()
    return slave, held


def restart_against(slave: Node, master: Node) -> dict[str, Any]:
    """Start the stopped `slave` again pointed at `master`; its HA status once it reports divergence."""
    slave.args[slave.args.index("--master-ha-address") + 1] = f"127.0.0.1:{master.ha_port}"
    slave.start()
    return wait_for(lambda: (h := slave.ha())["diverged"] and h, what="the slave to report divergence")


def test_slave_pointed_at_a_master_with_a_shorter_log_reports_divergence(cluster: Callable[..., Node]) -> None:
    long_master = cluster("long", "master")
    for i in range(40):
        assert long_master.produce("ev", f"long{i}").status_code == 201
    slave, held = stopped_copy_of(cluster, long_master)
    short_master = cluster("short", "master")
    for i in range(5):
        assert short_master.produce("ev", f"short{i}").status_code == 201
    ha = restart_against(slave, short_master)
    assert ha["connection_state"] == "diverged" and "beyond the master's end" in ha["diverged_reason"]
    assert slave.max_offset() == held, "the slave's log is untouched"
    assert slave.pull_all("ev", 0, 40) == [f"long{i}" for i in range(40)]
    assert "DIVERGED" in slave.log()
    master_view = short_master.ha()
    assert master_view["diverged"] is True and master_view["refused_total"] >= 1


def test_slave_whose_bytes_differ_from_the_master_reports_divergence(cluster: Callable[..., Node]) -> None:
    other = cluster("other", "master")
    assert other.produce("ev", "other-history").status_code == 201
    slave, held = stopped_copy_of(cluster, other)
    master = cluster("master", "master")
    for i in range(30):
        assert master.produce("ev", f"real{i}").status_code == 201
    assert master.max_offset() > held
    ha = restart_against(slave, master)
    assert "differ from the master's" in ha["diverged_reason"] or "inside one of the master's messages" in ha["diverged_reason"]
    time.sleep(0.5)  # nothing may arrive meanwhile: time for bytes wrongly sent to be applied
    assert slave.max_offset() == held


def test_connection_cut_mid_frame_leaves_whole_messages_and_resumes(
    cluster: Callable[..., Node], proxies: Callable[[int], FaultProxy]
) -> None:
    master = cluster("master", "master")
    bodies = [f"c{i}-" + "y" * 500 for i in range(200)]
    for body in bodies:
        assert master.produce("ev", body).status_code == 201
    proxy = proxies(master.ha_port)
    # The handshake reply is < 200 bytes; 20 KB in the stream is inside a data frame of 8 KiB batches.
    proxy.cut_after_bytes = 20_000 + 37
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{proxy.port}")
    wait_for(lambda: proxy.cuts == 1, what="the cut")
    wait_for(lambda: caught_up(master, slave), what="the slave to resume after the cut")
    assert proxy.connections >= 2 and slave.ha()["sessions_total"] >= 2
    assert slave.pull_all("ev", 0, 200) == bodies


def test_slave_paused_longer_than_the_heartbeat_keeps_its_connection(
    cluster: Callable[..., Node], proxies: Callable[[int], FaultProxy]
) -> None:
    master = cluster("master", "master", replication="sync")
    proxy = proxies(master.ha_port)
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{proxy.port}")
    wait_for(lambda: master.ha()["connection_state"] == "connected", what="the slave to connect")
    assert master.produce("ev", "before").status_code == 201
    proxy.paused.set()
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        during = pool.submit(master.produce, "ev", "during")
        time.sleep(0.7)  # two heartbeats (300 ms); well within housekeeping (2 s) and the sync timeout (1.5 s) on a loaded machine
        assert not during.done(), "a SYNC_MASTER put must wait for the paused slave"
        proxy.paused.clear()
        r = during.result(10)
    assert r.status_code == 201, r.text
    assert time.monotonic() - started >= 0.7
    wait_for(lambda: caught_up(master, slave), what="the slave to catch up after the pause")
    assert slave.ha()["sessions_total"] == 1, "a pause shorter than housekeeping must not reconnect"
    assert master.produce("ev", "after").status_code == 201
    assert slave.pull_all("ev", 0, 3) == ["before", "during", "after"]


def test_slave_paused_past_housekeeping_is_dropped_and_reconnects(
    cluster: Callable[..., Node], proxies: Callable[[int], FaultProxy]
) -> None:
    master = cluster("master", "master", replication="sync")
    proxy = proxies(master.ha_port)
    slave = cluster("slave", "slave", master_ha=f"127.0.0.1:{proxy.port}")
    wait_for(lambda: master.ha()["connection_state"] == "connected", what="the slave to connect")
    assert master.client.put("/v1/topics/ev", json={"queues": 1}).status_code == 201  # its record acknowledged before the pause
    timeouts_before = master.ha()["sync_timeouts_total"]
    proxy.paused.set()
    r = master.produce("ev", "m0")  # the slave is still connected but acknowledges nothing for 1.5 s
    assert r.status_code == 504 and r.json()["code"] == "FLUSH_SLAVE_TIMEOUT", r.text
    assert r.json()["stored"] is True
    wait_for(lambda: master.ha()["connection_state"] == "no_slave", timeout_s=10, what="the master to drop the silent slave")
    r = master.produce("ev", "m1")
    assert r.status_code == 503 and r.json()["code"] == "SLAVE_NOT_AVAILABLE", r.text
    proxy.paused.clear()
    wait_for(lambda: caught_up(master, slave), what="the slave to reconnect and catch up")
    assert slave.ha()["sessions_total"] >= 2
    assert master.produce("ev", "m2").status_code == 201
    assert slave.pull_all("ev", 0, 3) == ["m0", "m1", "m2"]
    # m0 timed out; m1 did not wait (503 at once). The broker's own state records (timer progress,
    # snapshots) wait for the slave like any put and may have timed out during the pause too.
    assert master.ha()["sync_timeouts_total"] > timeouts_before
