"""Idempotent produce over HTTP (docs/http-api.md, "Idempotent produce"): an Idempotency-Key (one message),
dedup_id (each message of a JSON batch) or the TIDEMQ_DEDUP_ID property (a binary batch) seen on the topic
within dedup_window_s is answered 200 with the first message's ids and `duplicate`, and nothing is stored."""

from __future__ import annotations

import signal

import httpx

from store import pack_batch
from store.codec.message import encode_properties
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.helpers import commitlog_max, problem

BATCH_TYPE = {"content-type": "application/x-tidemq-batch"}


def create(c: httpx.Client, topic: str, queues: int = 2) -> None:
    assert c.put(f"/v1/topics/{topic}", json={"queues": queues}).status_code == 201


def test_a_resent_key_is_answered_200_with_the_first_ids(quiet_client: httpx.Client, topic: str) -> None:
    c = quiet_client
    create(c, topic)
    first = c.post(f"/v1/topics/{topic}/messages", json={"body": "pay 10", "queue_id": 1}, headers={"Idempotency-Key": "pay-1"})
    assert first.status_code == 201, first.text
    end = commitlog_max(c)
    again = c.post(f"/v1/topics/{topic}/messages", json={"body": "pay 10", "queue_id": 0}, headers={"Idempotency-Key": "pay-1"})
    assert again.status_code == 200, again.text
    want = {k: first.json()[k] for k in ("msg_id", "offset_msg_id", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp")}
    assert again.json() == {"kind": "message", **want, "duplicate": True}
    raw = c.post(
        f"/v1/topics/{topic}/messages?queue_id=1",
        content=b"pay 10",
        headers={"content-type": "application/octet-stream", "Idempotency-Key": "pay-1"},
    )
    assert raw.status_code == 200 and raw.json()["commitlog_offset"] == want["commitlog_offset"]
    assert commitlog_max(c) == end
    got = c.get(f"/v1/topics/{topic}/queues/1/messages", params={"offset": 0, "max": 10}).json()["messages"]
    assert [m["body"] for m in got] == ["pay 10"]


def test_a_json_batch_with_dedup_ids(quiet_client: httpx.Client, topic: str) -> None:
    c = quiet_client
    create(c, topic)
    batch = {"messages": [{"body": f"m{i}", "queue_id": 0, "dedup_id": f"b-{i}"} for i in range(3)]}
    first = c.post(f"/v1/topics/{topic}/messages", json=batch)
    assert first.status_code == 201, first.text
    end = commitlog_max(c)
    again = c.post(f"/v1/topics/{topic}/messages", json=batch)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert [r["msg_id"] for r in again.json()["results"]] == [r["msg_id"] for r in first.json()["results"]]
    mixed = {"messages": [{"body": "m0", "dedup_id": "b-0"}, {"body": "new", "dedup_id": "b-new"}]}
    problem(c.post(f"/v1/topics/{topic}/messages", json=mixed), 409, "DEDUP_PARTIAL")
    problem(c.post(f"/v1/topics/{topic}/messages", json=batch, headers={"Idempotency-Key": "k"}), 400, "DEDUP_ID_INVALID")
    assert commitlog_max(c) == end


def test_a_binary_batch_with_the_property(quiet_client: httpx.Client, topic: str) -> None:
    c = quiet_client
    create(c, topic)
    data = pack_batch([(f"b{i}".encode(), encode_properties({"TIDEMQ_DEDUP_ID": f"bin-{i}"}), 0) for i in range(4)])
    first = c.post(f"/v1/topics/{topic}/messages?queue_id=1", content=data, headers=BATCH_TYPE)
    assert first.status_code == 201, first.text
    assert first.json()["first_queue_offset"] == 0 and first.json()["count"] == 4
    end = commitlog_max(c)
    again = c.post(f"/v1/topics/{topic}/messages?queue_id=1", content=data, headers=BATCH_TYPE)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["commitlog_offsets"] == first.json()["commitlog_offsets"]
    assert commitlog_max(c) == end


def test_bad_keys_are_refused_400(quiet_client: httpx.Client, topic: str) -> None:
    c = quiet_client
    create(c, topic)
    end = commitlog_max(c)
    for key in ("k" * 129, "tab\tkey", "with space"):
        r = c.post(f"/v1/topics/{topic}/messages", json={"body": "x"}, headers={"Idempotency-Key": key})
        problem(r, 400, "DEDUP_ID_INVALID")
    problem(c.post(f"/v1/topics/{topic}/messages", json={"body": "x", "dedup_id": "a\u0001b"}), 400, "DEDUP_ID_INVALID")
    problem(c.post(f"/v1/topics/{topic}/messages", json={"body": "x", "dedup_id": ""}), 400, "DEDUP_ID_INVALID")
    repeated = {"messages": [{"body": "x", "dedup_id": "same"}, {"body": "y", "dedup_id": "same"}]}
    problem(c.post(f"/v1/topics/{topic}/messages", json=repeated), 400, "DEDUP_ID_INVALID")
    reserved = {"body": "x", "properties": {"TIDEMQ_DEDUP_ID": "sneak"}}
    problem(c.post(f"/v1/topics/{topic}/messages", json=reserved), 400, "PROPERTIES_INVALID")
    binary = pack_batch([(b"x", encode_properties({"TIDEMQ_DEDUP_ID": "bad id"}), 0)])
    problem(c.post(f"/v1/topics/{topic}/messages", content=binary, headers=BATCH_TYPE), 400, "DEDUP_ID_INVALID")
    assert commitlog_max(c) == end


def test_the_bound_is_answered_503_with_retry_after(make_broker: MakeBroker, topic: str) -> None:
    broker = make_broker(SMALL_STORE + "dedup_max_keys = 2\n" + SMALL_BROKER)
    c = broker.client
    assert c is not None
    create(c, topic)
    for key in ("a", "b"):
        assert c.post(f"/v1/topics/{topic}/messages", json={"body": key}, headers={"Idempotency-Key": key}).status_code == 201
    full = c.post(f"/v1/topics/{topic}/messages", json={"body": "c"}, headers={"Idempotency-Key": "c"})
    problem(full, 503, "DEDUP_WINDOW_FULL")
    assert full.headers["retry-after"] == "1"
    assert c.post(f"/v1/topics/{topic}/messages", json={"body": "a"}, headers={"Idempotency-Key": "a"}).status_code == 200
    assert c.post(f"/v1/topics/{topic}/messages", json={"body": "no key"}).status_code == 201


def test_a_key_survives_sigkill(make_broker: MakeBroker, topic: str) -> None:
    broker = make_broker(process=True)  # killed
    c = broker.client
    assert c is not None
    create(c, topic)
    first = c.post(f"/v1/topics/{topic}/messages", json={"body": "once", "queue_id": 1}, headers={"Idempotency-Key": "crash-1"})
    assert first.status_code == 201, first.text
    broker.stop(signal.SIGKILL)  # at once after the 201

    broker.start()
    c = broker.client
    assert c is not None
    again = c.post(f"/v1/topics/{topic}/messages", json={"body": "once", "queue_id": 1}, headers={"Idempotency-Key": "crash-1"})
    assert again.status_code == 200, again.text
    assert again.json()["duplicate"] is True and again.json()["msg_id"] == first.json()["msg_id"]
    assert again.json()["commitlog_offset"] == first.json()["commitlog_offset"]
    got = c.get(f"/v1/topics/{topic}/queues/1/messages", params={"offset": 0, "max": 10}).json()["messages"]
    assert [m["body"] for m in got] == ["once"]
