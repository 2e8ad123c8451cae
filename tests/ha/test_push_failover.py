"""A push subscription survives a failover: the slave holds it (standing by: only a master delivers),
and once the master is SIGKILLed and the slave restarted as master, it delivers what is produced
there. Real broker processes with SYNC replication on loopback, a receiver on loopback."""

from __future__ import annotations

from collections.abc import Callable

from tests.app.push_receiver import Delivery, PushReceiver
from tests.ha.cluster import Node
from tests.waiting import wait_for

PUSH = 'push_allowed_hosts = ["127.0.0.1"]\npush_idle_poll_ms = 50\n'


def accepted(got: list[Delivery]) -> set[bytes]:
    return {d.body for d in got if d.status == 200}


def test_a_promoted_slave_delivers_its_masters_push_subscription(cluster: Callable[..., Node]) -> None:
    master: Node = cluster("master", "master", replication="sync", extra_config=PUSH)
    slave: Node = cluster("slave", "slave", master_ha=f"127.0.0.1:{master.ha_port}", extra_config=PUSH)
    wait_for(lambda: master.ha()["connection_state"] == "connected", what="the slave to connect")
    with PushReceiver() as receiver:
        c = master.client
        assert c.put("/v1/topics/hooks", json={"queues": 1}).status_code == 201
        r = c.put("/v1/groups/hooked/push", json={"topic": "hooks", "url": receiver.url, "secret": "a-secret-of-some-length"})
        assert r.status_code == 201, r.text
        assert master.produce("hooks", "before").status_code == 201
        receiver.wait_for(lambda got: accepted(got) == {b"before"})
        wait_for(lambda: slave.client.get("/v1/groups/hooked/push").status_code == 200, what="the subscription to reach the slave")
        standby = slave.client.get("/v1/groups/hooked/push").json()
        assert (standby["url"], standby["state"]) == (receiver.url, "standby")

        master.kill()
        slave.stop()
        slave.args = ["--role", "master", "--ha-port", "0", "--replication", "async"]
        slave.start()
        assert slave.client.get("/v1/groups/hooked/push").json()["state"] == "delivering"
        assert slave.produce("hooks", "after").status_code == 201
        receiver.wait_for(lambda got: accepted(got) == {b"before", b"after"})
