"""Registration, routes and forwarding across broker groups: real etcd, real broker processes on loopback."""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from cluster.etcd_client import EtcdClient
from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import DIRECT, cluster_status, ha_listen_port, in_sync, wait_master
from tests.ha.cluster import ROOT, Node
from tests.loopback import free_port
from tests.tls_certs import make_certs
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(120)]


def test_registration_route_and_forwarding_from_a_broker_that_does_not_own_the_topic(
    brokers: Callable[..., Node], etcd: EtcdServer
) -> None:
    # Group b has no slave: it runs as an ASYNC_MASTER (a SYNC_MASTER without a slave answers 503 SLAVE_NOT_AVAILABLE).
    a1, a2, b1 = brokers("a1", "a"), brokers("a2", "a"), brokers("b1", "b", replication="async")
    master_a = wait_master([a1, a2])
    slave_a = a2 if master_a is a1 else a1
    wait_master([b1])
    wait_for(lambda: in_sync(master_a, slave_a), what="group a's slave to be in sync")

    # A topic created through group a's slave is created on group a's master (one forward).
    r = slave_a.client.put("/v1/topics/orders", json={"queues": 2})
    assert r.status_code == 201, r.text
    r = slave_a.client.put("/v1/topics/orders", json={"queues": 2}, headers=DIRECT)
    assert r.status_code == 403 and r.json()["code"] == "NOT_MASTER", "a request marked as forwarded is served where it arrives"

    # Every broker answers the route, b1 too, which does not hold the topic.
    expected = {
        "topic": "orders",
        "groups": [{"broker_name": "a", "epoch": 1, "master": master_a.url, "slaves": [slave_a.url], "queues": 2}],
    }
    for node in (a1, a2, b1):
        wait_for(  # cast: mypy infers no type for a lambda with a default (it binds the loop's node)
            cast("Callable[[], bool]", lambda node=node: node.client.get("/v1/topics/orders/route").json() == expected),
            what=f"the route on {node.url}",
        )
    assert b1.client.get("/v1/topics/nothing/route").json()["code"] == "TOPIC_NOT_FOUND"

    # The registration records, read from etcd itself.
    etcd_client = EtcdClient([etcd.url], 2_000)
    try:
        records = {kv.value["broker_id"]: kv.value for kv in etcd_client.prefix("/tidemq/test/brokers/")}
    finally:
        etcd_client.close()
    assert set(records) == {a1.url, a2.url, b1.url}
    assert records[master_a.url]["role"] == "master" and records[master_a.url]["topics"] == {"orders": 2}
    # Started with `--ha-port 0`: it advertises the port it listens on, which its slave streams from.
    assert records[master_a.url]["ha_address"] == f"127.0.0.1:{ha_listen_port(master_a)}" != "127.0.0.1:0"
    assert records[b1.url]["broker_name"] == "b" and records[b1.url]["epoch"] == 1

    # b1 does not own "orders": its produce and its pull are forwarded to group a's master.
    for i in range(5):
        r = b1.produce("orders", f"via-b1-{i}")
        assert r.status_code == 201, r.text
    assert b1.client.get("/v1/topics/orders/queues/0/messages", params={"offset": 0, "max": 10}).json()["messages"][0]["body"] == "via-b1-0"
    assert master_a.pull_all("orders", 0, 5) == [f"via-b1-{i}" for i in range(5)]
    status = cluster_status(b1)
    assert status is not None and status["master"] == b1.url
    metrics = b1.client.get("/metrics").text
    assert "tidemq_cluster_master 1" in metrics and "tidemq_cluster_epoch 1" in metrics
    assert re.search(r"^tidemq_cluster_forwarded_total (\d+)", metrics, re.M) and "tidemq_cluster_forwarded_total 0" not in metrics
    # Group b still owns what is created through it.
    assert b1.produce("payments", "local").status_code == 201
    wait_for(lambda: [g["broker_name"] for g in a1.client.get("/v1/topics/payments/route").json().get("groups", [])] == ["b"], what="route")


def test_role_is_refused_in_cluster_mode(etcd: EtcdServer, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "app", "serve", "--store", str(tmp_path / "s"), "--cluster-etcd", etcd.url, "--broker-name", "a"]
    done = subprocess.run([*cmd, "--role", "master"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "a cluster's roles come from its elections" in done.stderr
    done = subprocess.run([*cmd[:-2]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs --broker-name" in done.stderr
    # A broker reads its group's epochs before its store loads: without etcd it does not start, once it has
    # asked for etcd_start_wait_ms (5 s by default: a loaded machine's etcd can miss one request and answer the next).
    silent = f"http://127.0.0.1:{free_port()}"
    ports = ["--port", "0", "--ha-port", "0"]  # bound at start: none picked in advance, none another process may hold
    done = subprocess.run([*cmd[:7], silent, *cmd[8:], *ports], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "the cluster's etcd cannot be read" in done.stderr, done.stderr
    assert "the cluster's etcd did not answer" in done.stderr and "asking again (etcd_start_wait_ms)" in done.stderr


def test_a_topic_spanning_two_groups_is_pulled_by_broker_name_and_queue_id_from_any_broker(brokers: Callable[..., Node]) -> None:
    a1, b1 = brokers("a1", "a", replication="async"), brokers("b1", "b", replication="async")
    wait_master([a1])
    wait_master([b1])
    # The topic is created on each group's master, and each gets its own messages (a smart client, addressing masters itself).
    for node, group in ((a1, "a"), (b1, "b")):
        assert node.client.put("/v1/topics/wide", json={"queues": 2}, headers=DIRECT).status_code == 201
        for i in range(3):
            r = node.client.post("/v1/topics/wide/messages", json={"body": f"{group}-{i}", "queue_id": 1}, headers=DIRECT)
            assert r.status_code == 201, r.text
    route = wait_for(lambda: (r := a1.client.get("/v1/topics/wide/route").json()) and len(r.get("groups", [])) == 2 and r, what="route")
    assert route  # wait_for answers the truthy value: the route
    assert [(g["broker_name"], g["master"], g["queues"]) for g in route["groups"]] == [("a", a1.url, 2), ("b", b1.url, 2)]
    for node in (a1, b1):
        for group in ("a", "b"):
            r = node.client.get(f"/v1/topics/wide/queues/{group}:1/messages", params={"offset": 0, "max": 10})
            assert r.status_code == 200, r.text
            assert [m["body"] for m in r.json()["messages"]] == [f"{group}-{i}" for i in range(3)]
    r = a1.client.get("/v1/topics/wide/queues/nowhere:1/messages", params={"offset": 0})
    assert r.status_code == 503 and r.json()["code"] == "NO_MASTER"


def test_forwarding_over_https_trusts_the_configured_ca_and_only_it(brokers: Callable[..., Node], tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    client = {"verify": ssl.create_default_context(cafile=str(certs.ca))}
    tls = ("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key))
    trusting = f'forward_ca_file = "{certs.ca}"\n'
    a1 = brokers("a1", "a", replication="async", extra_args=tls, client_options=client, extra_cluster=trusting)
    b1 = brokers("b1", "b", replication="async", extra_args=tls, client_options=client)  # trusts the system's CAs only
    wait_master([a1])
    wait_master([b1])
    assert a1.url.startswith("https://")
    assert b1.client.put("/v1/topics/at-b", json={"queues": 1}, headers=DIRECT).status_code == 201
    assert a1.client.put("/v1/topics/at-a", json={"queues": 1}, headers=DIRECT).status_code == 201
    wait_for(lambda: a1.client.get("/v1/topics/at-b/route").status_code == 200, what="a1 to see group b's topic")
    wait_for(lambda: b1.client.get("/v1/topics/at-a/route").status_code == 200, what="b1 to see group a's topic")
    # a1 verifies b1's certificate with the configured CA: its forward is served by b1.
    r = a1.client.post("/v1/topics/at-b/messages", json={"body": "over https"})
    assert r.status_code == 201, r.text
    assert b1.pull_all("at-b", 0, 1) == ["over https"]
    # b1 knows no such CA: it refuses to forward to a1 rather than trust its certificate.
    r = b1.client.post("/v1/topics/at-a/messages", json={"body": "refused"})
    assert r.status_code == 503 and r.json()["code"] == "FORWARD_FAILED", r.text


def test_an_unreadable_forward_ca_file_refuses_the_start(etcd: EtcdServer, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(f'[cluster]\nforward_ca_file = "{tmp_path / "missing.pem"}"\n')
    cmd = [sys.executable, "-m", "app", "serve", "--store", str(tmp_path / "s"), "--config", str(config),
           "--cluster-etcd", etcd.url, "--broker-name", "a", "--port", "0", "--ha-port", "0"]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "forward_ca_file" in done.stderr and "cannot be loaded" in done.stderr, done.stderr
