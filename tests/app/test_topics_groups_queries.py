"""Topic administration, consumer group offsets and queries (key, msg id, offset id, time)."""

from __future__ import annotations

import time

import httpx
import pytest

from store import GROUP_MAX_BYTES
from tests.app.helpers import problem, send
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


# Topics -------------------------------------------------------------------------------


def test_topic_lifecycle(client: httpx.Client, topic: str) -> None:
    r = client.put(f"/v1/topics/{topic}", json={"queues": 3, "perm": "rw"})
    assert r.status_code == 201
    assert r.json() == {
        "topic": topic,
        "read_queues": 3,
        "write_queues": 3,
        "perm": "rw",
        "queues": [{"queue_id": q, "min_offset": 0, "max_offset": 0} for q in range(3)],
    }
    send(client, topic, "x", queue_id=2)
    info = client.get(f"/v1/topics/{topic}").json()
    assert [q["max_offset"] for q in info["queues"]] == [0, 0, 1]
    updated = client.put(f"/v1/topics/{topic}", json={"queues": 5, "perm": "r"})
    assert updated.status_code == 200 and updated.json()["read_queues"] == 5 and updated.json()["perm"] == "r"
    assert topic in [t["topic"] for t in client.get("/v1/topics").json()["topics"]]
    assert client.delete(f"/v1/topics/{topic}").status_code == 204
    problem(client.get(f"/v1/topics/{topic}"), 404, "TOPIC_NOT_FOUND")
    assert topic not in [t["topic"] for t in client.get("/v1/topics").json()["topics"]]
    problem(client.delete(f"/v1/topics/{topic}"), 404, "TOPIC_NOT_FOUND")


def test_put_topic_without_body_uses_defaults(client: httpx.Client, topic: str) -> None:
    r = client.put(f"/v1/topics/{topic}")
    assert r.status_code == 201 and r.json()["read_queues"] == 4 and r.json()["perm"] == "rw"


def test_topic_errors(client: httpx.Client, topic: str) -> None:
    problem(client.put(f"/v1/topics/{topic}", json={"queues": 0}), 400, "QUEUE_COUNT_INVALID")
    problem(client.put(f"/v1/topics/{topic}", json={"queues": 1025}), 400, "QUEUE_COUNT_INVALID")
    problem(client.put(f"/v1/topics/{topic}", json={"queues": "four"}), 400, "BODY_INVALID")
    problem(client.put(f"/v1/topics/{topic}", json={"queues": 1, "perm": "x"}), 400, "BODY_INVALID")
    problem(client.put(f"/v1/topics/{topic}", json={"queues": 1, "other": 1}), 400, "BODY_INVALID")
    problem(client.put(f"/v1/topics/{topic}", content=b"{", headers={"content-type": "application/json"}), 400, "BODY_INVALID")
    for bad in ("a.b", "a" * 128, "%2E%2E"):
        problem(client.put(f"/v1/topics/{bad}", json={"queues": 1}), 400, "TOPIC_INVALID")
    problem(client.put("/v1/topics/SCHEDULE_TOPIC_XXXX", json={"queues": 1}), 403, "TOPIC_RESERVED")
    problem(client.get("/v1/topics/a.b"), 400, "TOPIC_INVALID")
    problem(client.delete("/v1/topics/a.b"), 400, "TOPIC_INVALID")
    for encoded in ("..%2Fetc", "..%2F..%2Fetc%2Fpasswd"):
        for r in (
            client.put(f"/v1/topics/{encoded}", json={"queues": 1}),
            client.get(f"/v1/topics/{encoded}"),
            client.delete(f"/v1/topics/{encoded}"),
        ):
            assert 400 <= r.status_code < 500 and r.headers["content-type"].startswith("application/problem+json"), r.text
    problem(client.get(f"/v1/topics/{topic}"), 404, "TOPIC_NOT_FOUND")


# Groups -------------------------------------------------------------------------------


def test_group_offsets(client: httpx.Client, topic: str) -> None:
    client.put(f"/v1/topics/{topic}", json={"queues": 2})
    for i in range(5):
        send(client, topic, f"m{i}", queue_id=i % 2)
    empty = client.get("/v1/groups/g/offsets", params={"topic": topic}).json()
    assert empty["queues"] == [
        {"queue_id": 0, "committed_offset": -1, "min_offset": 0, "max_offset": 3, "lag": 3},
        {"queue_id": 1, "committed_offset": -1, "min_offset": 0, "max_offset": 2, "lag": 2},
    ]
    assert client.put("/v1/groups/g/offsets", json={"topic": topic, "queue_id": 0, "offset": 2}).status_code == 200
    r = client.put(
        "/v1/groups/g/offsets", json=[{"topic": topic, "queue_id": 0, "offset": 3}, {"topic": topic, "queue_id": 1, "offset": 1}]
    )
    assert r.status_code == 200 and len(r.json()["committed"]) == 2
    got = client.get("/v1/groups/g/offsets", params={"topic": topic}).json()["queues"]
    assert [(q["committed_offset"], q["lag"]) for q in got] == [(3, 0), (1, 1)]


def test_group_errors(client: httpx.Client, topic: str) -> None:
    client.put(f"/v1/topics/{topic}", json={"queues": 1})
    send(client, topic, "x")
    url = "/v1/groups/g/offsets"
    problem(client.put(url, json={"topic": topic, "queue_id": 0, "offset": 2}), 409, "OFFSET_OUT_OF_RANGE")
    problem(client.put(url, json={"topic": topic, "queue_id": 0, "offset": -1}), 400, "OFFSET_INVALID")
    problem(client.put(url, json={"topic": topic, "queue_id": 1, "offset": 0}), 404, "QUEUE_NOT_FOUND")
    problem(client.put(url, json={"topic": "no-such-topic-x", "queue_id": 0, "offset": 0}), 404, "TOPIC_NOT_FOUND")
    problem(client.put(url, json={"topic": "a/b", "queue_id": 0, "offset": 0}), 400, "TOPIC_INVALID")
    problem(client.put(url, json={"topic": topic, "queue_id": 0}), 400, "BODY_INVALID")
    problem(client.put(url, json={"topic": topic, "queue_id": 0, "offset": "1"}), 400, "BODY_INVALID")
    problem(client.put(url, content=b"nope", headers={"content-type": "application/json"}), 400, "BODY_INVALID")
    problem(client.put("/v1/groups/bad.group/offsets", json={"topic": topic, "queue_id": 0, "offset": 0}), 400, "GROUP_INVALID")
    problem(client.get("/v1/groups/bad.group/offsets", params={"topic": topic}), 400, "GROUP_INVALID")
    problem(client.get("/v1/groups/g/offsets"), 400, "REQUEST_INVALID")
    # A consumer group's limit is GROUP_MAX_BYTES, and its error speaks of a group, not a topic.
    assert client.get(f"/v1/groups/{'g' * GROUP_MAX_BYTES}/offsets", params={"topic": topic}).status_code == 200
    detail = problem(client.get(f"/v1/groups/{'g' * (GROUP_MAX_BYTES + 1)}/offsets", params={"topic": topic}), 400, "GROUP_INVALID")[
        "detail"
    ]
    assert detail.startswith(f"group is longer than {GROUP_MAX_BYTES} bytes") and "topic" not in detail
    problem(client.get("/v1/groups/g/offsets", params={"topic": "no-such-topic-x"}), 404, "TOPIC_NOT_FOUND")
    # A list with one bad entry commits nothing.
    r = client.put(url, json=[{"topic": topic, "queue_id": 0, "offset": 1}, {"topic": topic, "queue_id": 0, "offset": 9}])
    problem(r, 409, "OFFSET_OUT_OF_RANGE")
    assert client.get(url, params={"topic": topic}).json()["queues"][0]["committed_offset"] == -1


# Queries ------------------------------------------------------------------------------


def test_query_by_key_and_msg_id(client: httpx.Client, topic: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"queues": 4}).status_code == 201
    a = send(client, topic, "first", keys=["order-1"])
    b = send(client, topic, "second", keys=["order-1", "order-2"])
    send(client, topic, "third", keys=["order-3"])
    found = wait_for(  # the index is built by the dispatch thread
        lambda: m if len(m := client.get(f"/v1/topics/{topic}/messages", params={"key": "order-1"}).json()["messages"]) == 2 else None,
        5,
        what="both messages of key order-1 to be indexed",
        poll_s=0.05,
    )
    assert found is not None
    assert sorted(m["body"] for m in found) == ["first", "second"]
    assert {m["msg_id"] for m in found} == {a["msg_id"], b["msg_id"]}
    one = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-1", "max": 1}).json()["messages"]
    assert len(one) == 1
    by_id = client.get(f"/v1/topics/{topic}/messages", params={"msg_id": b["msg_id"]}).json()["messages"]
    assert [m["body"] for m in by_id] == ["second"]
    assert client.get(f"/v1/topics/{topic}/messages", params={"key": "order-9"}).json()["messages"] == []
    both = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-2", "msg_id": b["msg_id"]}).json()["messages"]
    assert [m["body"] for m in both] == ["second"]
    assert client.get(f"/v1/topics/{topic}/messages", params={"key": "order-3", "msg_id": b["msg_id"]}).json()["messages"] == []
    future = int(time.time() * 1000) + 60_000
    assert (
        client.get(f"/v1/topics/{topic}/messages", params={"key": "order-1", "begin_ms": future, "end_ms": future + 1}).json()["messages"]
        == []
    )


def test_query_errors(client: httpx.Client, topic: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"queues": 4}).status_code == 201
    send(client, topic, "x")
    url = f"/v1/topics/{topic}/messages"
    problem(client.get(url, params={"key": ""}), 400, "REQUEST_INVALID")
    assert client.get(url, params={"key": "a", "begin_ms": 10, "end_ms": 5}).json() == {"messages": []}
    problem(client.get(url, params={"key": "a", "begin_ms": -1}), 400, "REQUEST_INVALID")
    problem(client.get(url, params={"key": "a", "max": 0}), 400, "MAX_INVALID")
    problem(client.get(url, params={"key": "a", "max": 100_000}), 400, "MAX_INVALID")
    problem(client.get(url, params={"key": "a", "max": 65}), 400, "MAX_INVALID")  # past max_msgs_num_batch (64)
    assert client.get(url, params={"key": "a", "max": 64}).status_code == 200
    problem(client.get("/v1/topics/nope-nope-x/messages", params={"key": "a"}), 404, "TOPIC_NOT_FOUND")


def test_without_key_or_id_the_newest_messages_of_every_queue(client: httpx.Client, topic: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"queues": 3}).status_code == 201
    sent = [send(client, topic, f"m{i}", queue_id=i % 3) for i in range(8)]
    url = f"/v1/topics/{topic}/messages"
    newest = client.get(url).json()["messages"]
    assert [m["body"] for m in newest] == [f"m{i}" for i in range(7, -1, -1)]  # newest first, across queues
    assert [m["body"] for m in client.get(url, params={"max": 3}).json()["messages"]] == ["m7", "m6", "m5"]
    middle = sent[4]["store_timestamp"]
    before = client.get(url, params={"end_ms": middle, "max": 2}).json()["messages"]
    assert all(m["store_timestamp"] < middle for m in before) and len(before) == 2
    after = client.get(url, params={"begin_ms": sent[6]["store_timestamp"]}).json()["messages"]
    assert {m["body"] for m in after} >= {"m6", "m7"} and all(m["store_timestamp"] >= sent[6]["store_timestamp"] for m in after)


def test_message_by_offset_id(client: httpx.Client, topic: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"queues": 4}).status_code == 201
    sent = send(client, topic, "direct", tags="T")
    got = client.get(f"/v1/messages/{sent['offset_msg_id']}")
    assert got.status_code == 200 and got.json()["body"] == "direct" and got.json()["tags"] == "T"
    assert client.get(f"/v1/messages/{sent['offset_msg_id'].lower()}").json()["msg_id"] == sent["msg_id"]
    problem(client.get("/v1/messages/xyz"), 400, "MESSAGE_ID_INVALID")
    problem(client.get("/v1/messages/" + "Z" * 32), 400, "MESSAGE_ID_INVALID")
    problem(client.get("/v1/messages/" + "F" * 32), 404, "MESSAGE_NOT_FOUND")  # well formed, negative offset
    problem(client.get("/v1/messages/7F00000100002A9F00000000FFFFFFFF"), 404, "MESSAGE_NOT_FOUND")
    # An offset inside a message is not a message.
    inside = sent["offset_msg_id"][:16] + f"{sent['commitlog_offset'] + 3:016X}"
    problem(client.get(f"/v1/messages/{inside}"), 404, "MESSAGE_NOT_FOUND")


def test_offset_by_time(client: httpx.Client, topic: str) -> None:
    client.put(f"/v1/topics/{topic}", json={"queues": 1})
    first = send(client, topic, "a")
    time.sleep(0.02)  # the two store times must differ
    second = send(client, topic, "b")
    url = f"/v1/topics/{topic}/queues/0/offset"
    assert client.get(url, params={"timestamp_ms": 0}).json()["offset"] == 0
    assert client.get(url, params={"timestamp_ms": second["store_timestamp"]}).json()["offset"] in (0, 1)
    assert client.get(url, params={"timestamp_ms": first["store_timestamp"] + 1}).json()["offset"] == 1
    problem(client.get(url), 400, "REQUEST_INVALID")
    problem(client.get(url, params={"timestamp_ms": -5}), 400, "REQUEST_INVALID")
    problem(client.get(f"/v1/topics/{topic}/queues/7/offset", params={"timestamp_ms": 0}), 404, "QUEUE_NOT_FOUND")
