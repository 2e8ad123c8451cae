"""Answers that say what went wrong and what to do: the closest route to an unknown path, where a batch's
fields belong, what a pull past the end means, what a PUT of an existing topic changed."""

from __future__ import annotations

import httpx

from tests.app.helpers import commitlog_max, problem, send
from tests.app.test_produce import create


def test_an_unknown_route_names_the_closest_one_and_the_docs(client: httpx.Client) -> None:
    body = problem(client.get("/v1/topic/orders"), 404, "NOT_FOUND")
    assert "did you mean /v1/topics/{topic} (DELETE, GET, PUT)?" in body["detail"] and "/docs" in body["detail"], body
    body = problem(client.post("/v1/topics/orders/message", json={"body": "x"}), 404, "NOT_FOUND")
    assert "/v1/topics/{topic}/messages (GET, POST)" in body["detail"], body
    body = problem(client.get("/nothing-like-it-at-all"), 404, "NOT_FOUND")
    assert "did you mean" not in body["detail"] and "/docs" in body["detail"], body


def test_a_batch_level_field_is_refused_saying_it_belongs_on_each_message(quiet_client: httpx.Client, topic: str) -> None:
    create(quiet_client, topic)
    before = commitlog_max(quiet_client)
    r = quiet_client.post(f"/v1/topics/{topic}/messages", json={"queue_id": 0, "messages": [{"body": "a"}]})
    detail = problem(r, 400, "BODY_INVALID")["detail"]
    assert '"queue_id" belongs on each message' in detail and '{"messages": [{"body": "...", "queue_id": ...}]}' in detail, detail
    detail = problem(quiet_client.post(f"/v1/topics/{topic}/messages", json={"colour": 1, "messages": []}), 400, "BODY_INVALID")["detail"]
    assert "'colour'" in detail and "belong" not in detail, detail
    assert commitlog_max(quiet_client) == before


def test_query_parameters_are_defaults_for_each_message_of_a_json_body(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=4)
    batch = {"messages": [{"body": "a"}, {"body": "b", "queue_id": 3, "tags": "own"}, {"body": "c", "delay_ms": 0}]}
    r = client.post(f"/v1/topics/{topic}/messages", json=batch, params={"queue_id": "2", "tags": "q", "keys": "k1,k2"})
    assert r.status_code == 201, r.text
    assert [m["queue_id"] for m in r.json()["results"]] == [2, 3, 2]
    send(client, topic, "marker", queue_id=3)
    got = {
        m["body"]: m for q in (2, 3) for m in client.get(f"/v1/topics/{topic}/queues/{q}/messages", params={"offset": 0}).json()["messages"]
    }
    assert (got["a"]["tags"], got["a"]["keys"]) == ("q", ["k1", "k2"]) and got["b"]["tags"] == "own" and got["c"]["tags"] == "q"
    # A number JSON Schema calls an integer (2.0) is one.
    assert client.post(f"/v1/topics/{topic}/messages", content=b'{"body": "d", "queue_id": 1.0}',
                       headers={"content-type": "application/json"}).json()["queue_id"] == 1  # fmt: skip


def test_a_pull_past_the_end_explains_itself(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=1)
    send(client, topic, "only")
    got = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 5}).json()
    assert got["status"] == "OFFSET_OVERFLOW_BADLY" and got["next_offset"] == 1
    assert "offset 5 is past the end of queue 0" in got["hint"] and "continue from next_offset 1" in got["hint"], got
    found = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
    assert found["status"] == "FOUND" and "hint" not in found


def test_a_put_of_an_existing_topic_says_what_it_changed(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=4)
    send(client, topic, "in queue 3", queue_id=3)
    same = client.put(f"/v1/topics/{topic}", json={"queues": 4})
    assert same.status_code == 200 and same.json()["changed"] == {} and "warning" not in same.json()
    perm_only = client.put(f"/v1/topics/{topic}", json={"perm": "r"})  # no queues: the count stays
    assert perm_only.json()["changed"] == {"perm": {"old": "rw", "new": "r"}} and perm_only.json()["read_queues"] == 4
    grown = client.put(f"/v1/topics/{topic}", json={"queues": 8, "perm": "rw"}).json()
    assert grown["changed"]["read_queues"] == {"old": 4, "new": 8} and grown["changed"]["write_queues"] == {"old": 4, "new": 8}
    assert "warning" not in grown
    shrunk = client.put(f"/v1/topics/{topic}", json={"queues": 2}).json()
    assert shrunk["changed"]["read_queues"] == {"old": 8, "new": 2}
    assert shrunk["warning"].startswith("1 stored message in queue 3 is no longer served (the topic now has queues 0..1)"), shrunk
    created = client.put(f"/v1/topics/{topic}-new", json={"queues": 2})
    assert created.status_code == 201 and "changed" not in created.json()
