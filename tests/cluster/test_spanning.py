"""Topics across broker groups through one address: new topics placed once, spanning topics spread and merged.

Real etcd and real broker processes on loopback; group a and group b have one broker each (ASYNC_MASTER).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import httpx
import orjson
import pytest

from cluster.etcd_client import EtcdClient
from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import DIRECT, wait_master
from tests.ha.cluster import Node
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(180)]


def two_groups(brokers: Callable[..., Node]) -> tuple[Node, Node]:
    a1, b1 = brokers("a1", "a", replication="async"), brokers("b1", "b", replication="async")
    wait_master([a1])
    wait_master([b1])
    return a1, b1


def route_groups(node: Node, topic: str) -> list[str]:
    return [g["broker_name"] for g in node.client.get(f"/v1/topics/{topic}/route").json().get("groups", [])]


def stored_bodies(node: Node, topic: str, queues: int) -> list[str]:
    """Every body of the topic in this broker's own store (served here: DIRECT)."""
    bodies = []
    for q in range(queues):
        r = node.client.get(f"/v1/topics/{topic}/queues/{q}/messages", params={"offset": 0, "max": 256}, headers=DIRECT)
        if r.status_code == 200:
            bodies += [m["body"] for m in r.json()["messages"]]
    return bodies


def test_the_first_writes_of_new_topics_at_two_groups_at_once_create_each_topic_in_one_group(
    brokers: Callable[..., Node], etcd: EtcdServer
) -> None:
    # Produces that create their topic (auto_create_topics on), at both groups at once.
    a1, b1 = brokers("a1", "a", replication="async", auto_create=True), brokers("b1", "b", replication="async", auto_create=True)
    wait_master([a1])
    wait_master([b1])
    topics = [f"fresh-{i}" for i in range(6)]

    def produce(args: tuple[Node, str, int]) -> int:
        node, topic, i = args

        def answered() -> httpx.Response | None:
            r = node.client.post(f"/v1/topics/{topic}/messages", json={"body": f"{topic}-{node.url}-{i}"})
            # A broker that just started may not see the other group's master yet: 503 NO_MASTER, retried as a client would.
            return None if r.status_code == 503 and r.json()["code"] == "NO_MASTER" else r

        r = wait_for(answered, 5, what=f"{node.url} to see a master for {topic}", poll_s=0.1)
        assert r is not None  # wait_for answers a truthy value
        assert r.status_code == 201, r.text
        return r.status_code

    # Each topic's first writes arrive at both groups' masters at the same moment, within one registration round.
    work = [(node, topic, i) for topic in topics for i in range(3) for node in (a1, b1)]
    with ThreadPoolExecutor(len(work)) as pool:
        assert set(pool.map(produce, work)) == {201}
    etcd_client = EtcdClient([etcd.url], 2_000)
    try:
        claims = {kv.value["topic"]: kv.value["broker_name"] for kv in etcd_client.prefix("/tidemq/test/topics/")}
    finally:
        etcd_client.close()
    assert set(claims) == set(topics)
    for topic in topics:
        wait_for(  # cast: mypy cannot infer a lambda with a default
            cast(Callable[[], bool], lambda topic=topic: route_groups(a1, topic) == [claims[topic]]),
            what=f"{topic} routed to its claim's group only",
        )
        owner, other = (a1, b1) if claims[topic] == "a" else (b1, a1)
        assert sorted(stored_bodies(owner, topic, 8)) == sorted(f"{topic}-{n.url}-{i}" for n in (a1, b1) for i in range(3))
        assert other.client.get(f"/v1/topics/{topic}", headers=DIRECT).status_code == 404, "the other group never created it"
    # Reads and invalid names claim nothing.
    assert a1.client.get("/v1/topics/never/queues/0/messages", params={"offset": 0}).json()["code"] == "TOPIC_NOT_FOUND"
    assert a1.client.post("/v1/topics/bad%20name/messages", json={"body": "x"}).json()["code"] == "TOPIC_INVALID"
    etcd_client = EtcdClient([etcd.url], 2_000)
    try:
        assert {kv.value["topic"] for kv in etcd_client.prefix("/tidemq/test/topics/")} == set(topics)
    finally:
        etcd_client.close()


def spanning_topic(a1: Node, b1: Node) -> None:
    for node in (a1, b1):
        assert node.client.put("/v1/topics/wide", json={"queues": 2}, headers=DIRECT).status_code == 201
    wait_for(lambda: route_groups(a1, "wide") == ["a", "b"] and route_groups(b1, "wide") == ["a", "b"], what="route of both groups")


def receive_all(node: Node, expected: int) -> list[dict[str, Any]]:
    """Receive through one broker until `expected` messages came (each receive is served by one group in turn)."""
    got: list[dict[str, Any]] = []

    def more() -> bool:
        r = node.client.post("/v1/groups/g/topics/wide/receive", params={"max": 8, "invisible_ms": 60_000})
        assert r.status_code == 200, r.text
        got.extend(r.json()["messages"])
        return len(got) >= expected

    wait_for(more, what=f"{expected} received messages")
    return got


def test_a_topic_spanning_groups_is_produced_received_acked_and_queried_through_one_address(
    brokers: Callable[..., Node],
) -> None:
    a1, b1 = two_groups(brokers)
    spanning_topic(a1, b1)
    # Unordered produces through b1 are spread over both groups; ordered ones all go to group a, the first by name.
    sent = []
    for i in range(20):
        r = b1.client.post("/v1/topics/wide/messages", json={"body": f"spread-{i}", "keys": ["common", f"k{i}"]})
        assert r.status_code == 201, r.text
        sent.append(r.json())
    for i in range(6):
        r = b1.client.post("/v1/topics/wide/messages", json={"body": f"ordered-{i}", "sharding_key": "user-7"})
        assert r.status_code == 201, r.text
    in_a, in_b = stored_bodies(a1, "wide", 2), stored_bodies(b1, "wide", 2)
    assert sorted(in_a + in_b) == sorted([f"spread-{i}" for i in range(20)] + [f"ordered-{i}" for i in range(6)])
    assert {b for b in in_a if b.startswith("spread")} and {b for b in in_b if b.startswith("spread")}, "both groups got a share"
    assert [b for b in in_a if b.startswith("ordered")] == [f"ordered-{i}" for i in range(6)], "one sharding key: one queue, in order"

    # A key query merges both groups' answers; a lookup by offset message id finds a message of the other group.
    found = a1.client.get("/v1/topics/wide/messages", params={"key": "common", "max": 64}).json()["messages"]
    assert sorted(m["body"] for m in found) == sorted(f"spread-{i}" for i in range(20))
    assert len(a1.client.get("/v1/topics/wide/messages", params={"key": "common", "max": 5}).json()["messages"]) == 5
    for reply in sent:
        r = a1.client.get(f"/v1/messages/{reply['offset_msg_id']}")
        assert r.status_code == 200 and r.json()["body"] == f"spread-{sent.index(reply)}", r.text

    # Receives through one address reach both groups; one ack carrying handles of both is split and answered in order.
    got = receive_all(a1, 26)
    assert sorted(m["body"] for m in got) == sorted(in_a + in_b)
    assert {m["receipt_handle"].split(":", 1)[0] for m in got} == {"a", "b"}
    handles = [m["receipt_handle"] for m in got]
    r = b1.client.post("/v1/groups/g/topics/wide/ack", json={"receipt_handles": [*handles, "b:forged", "nowhere:x"]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["receipt_handle"] for x in results] == [*handles, "b:forged", "nowhere:x"]
    assert [x["status"] for x in results] == ["OK"] * len(handles) + ["HANDLE_INVALID", "HANDLE_INVALID"]
    for node in (a1, b1):
        r = node.client.post("/v1/groups/g/topics/wide/receive", params={"max": 32}, headers=DIRECT)
        assert r.status_code == 200 and r.json()["messages"] == [], "every message was acked in its own group"


def test_an_invisible_time_change_goes_to_the_group_its_handle_names(brokers: Callable[..., Node]) -> None:
    a1, b1 = two_groups(brokers)
    spanning_topic(a1, b1)
    assert b1.client.post("/v1/topics/wide/messages", json={"body": "in-b", "queue_id": 0}, headers=DIRECT).status_code == 201
    r = b1.client.post("/v1/groups/g/topics/wide/receive", params={"max": 1}, headers=DIRECT)
    handle = r.json()["messages"][0]["receipt_handle"]
    assert handle.startswith("b:")
    r = a1.client.post("/v1/groups/g/topics/wide/invisible", json={"receipt_handle": handle, "invisible_ms": 5_000})
    assert r.status_code == 200, r.text
    assert r.json()["receipt_handle"].startswith("b:")
    r = a1.client.post("/v1/groups/g/topics/wide/ack", json={"receipt_handles": [r.json()["receipt_handle"]]})
    assert r.json()["results"][0]["status"] == "OK"


def test_an_event_stream_is_relayed_as_it_comes_from_the_group_that_owns_the_topic(brokers: Callable[..., Node]) -> None:
    a1, b1 = two_groups(brokers)
    assert b1.client.put("/v1/topics/only-b", json={"queues": 1}, headers=DIRECT).status_code == 201
    wait_for(lambda: route_groups(a1, "only-b") == ["b"], what="a1 to route the topic to group b")
    with a1.client.stream("GET", "/v1/groups/g/topics/only-b/stream", timeout=20.0) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        assert next(lines) == ": stream open", "the head and the first bytes arrive before any message exists"
        assert b1.client.post("/v1/topics/only-b/messages", json={"body": "live"}).status_code == 201
        data = next(line for line in lines if line.startswith("data: "))
    event = orjson.loads(data[len("data: ") :])
    assert event["body"] == "live" and event["receipt_handle"].startswith("b:")
