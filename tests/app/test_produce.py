"""Producing: JSON single and batch, raw bodies, queue choice, and every bad form of input."""

from __future__ import annotations

import base64
import socket
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.helpers import commitlog_max, problem
from tests.app.in_process import InProcessBroker

pytestmark = pytest.mark.timeout(60)


def create(client: httpx.Client, topic: str, queues: int = 4, perm: str = "rw") -> None:
    r = client.put(f"/v1/topics/{topic}", json={"queues": queues, "perm": perm})
    assert r.status_code in (200, 201), r.text


def pull_one(client: httpx.Client, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
    # wait_ms: the reply comes as soon as the message is dispatched.
    r = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": offset, "max": 1, "wait_ms": 3000})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "FOUND", body
    message: dict[str, Any] = body["messages"][0]
    return message


def test_send_one_message_and_read_it_back(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=2)
    r = client.post(
        f"/v1/topics/{topic}/messages",
        json={"body": "hello", "tags": "TagA", "keys": ["order-1", "order-2"], "properties": {"source": "web"}, "queue_id": 1},
    )
    assert r.status_code == 201, r.text
    sent = r.json()
    assert sent["queue_id"] == 1 and sent["queue_offset"] == 0
    assert len(sent["msg_id"]) == 32 and len(sent["offset_msg_id"]) == 32
    assert sent["commitlog_offset"] >= 0 and sent["store_timestamp"] > 0
    got = pull_one(client, topic, 1, 0)
    assert got["body"] == "hello" and got["encoding"] == "utf-8"
    assert got["tags"] == "TagA" and got["keys"] == ["order-1", "order-2"]
    assert got["properties"] == {"source": "web"}
    assert got["msg_id"] == sent["msg_id"] and got["offset_msg_id"] == sent["offset_msg_id"]
    assert got["commitlog_offset"] == sent["commitlog_offset"] and got["topic"] == topic
    assert got["reconsume_times"] == 0 and got["born_timestamp"] <= got["store_timestamp"]


def test_client_msg_id_is_kept(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "msg_id": "my-id-1", "queue_id": 0})
    assert r.status_code == 201, r.text
    assert r.json()["msg_id"] == "my-id-1"
    assert pull_one(client, topic, 0, 0)["msg_id"] == "my-id-1"


def test_base64_body_round_trips_binary(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    payload = bytes(range(256))
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": base64.b64encode(payload).decode(), "encoding": "base64", "queue_id": 0})
    assert r.status_code == 201, r.text
    got = pull_one(client, topic, 0, 0)
    assert got["encoding"] == "base64" and base64.b64decode(got["body"]) == payload


def test_batch_is_stored_in_order_in_one_queue(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=4)
    r = client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"body": f"m{i}"} for i in range(50)]})
    assert r.status_code == 201, r.text
    results = r.json()["results"]
    assert len(results) == 50
    assert len({x["queue_id"] for x in results}) == 1
    assert [x["queue_offset"] for x in results] == list(range(50))
    offsets = [x["commitlog_offset"] for x in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50


def test_round_robin_spreads_single_messages(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=4)
    queues = [client.post(f"/v1/topics/{topic}/messages", json={"body": "x"}).json()["queue_id"] for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_sharding_key_keeps_a_key_in_one_queue_in_order(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=4)
    sent: dict[str, list[tuple[int, int]]] = {}
    for i in range(30):
        key = f"user-{i % 3}"
        r = client.post(f"/v1/topics/{topic}/messages", json={"body": f"{key}:{i}", "sharding_key": key})
        assert r.status_code == 201
        sent.setdefault(key, []).append((r.json()["queue_id"], r.json()["queue_offset"]))
    for key, places in sent.items():
        assert {q for q, _ in places} == {zlib.crc32(key.encode()) % 4}
        assert [o for _, o in places] == sorted(o for _, o in places)
        queue = places[0][0]
        bodies = [pull_one(client, topic, queue, o)["body"] for _, o in places]
        assert [int(b.split(":")[1]) for b in bodies] == sorted(int(b.split(":")[1]) for b in bodies)


def test_raw_body_with_query_fields(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=2)
    payload = b"\x00\xffraw bytes"
    r = client.post(
        f"/v1/topics/{topic}/messages",
        content=payload,
        params={"tags": "TagR", "keys": "k1,k2", "queue_id": "1"},
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["queue_id"] == 1
    got = pull_one(client, topic, 1, 0)
    assert base64.b64decode(got["body"]) == payload and got["tags"] == "TagR" and got["keys"] == ["k1", "k2"]


def test_produce_auto_creates_topic_with_default_queues_when_it_is_on(make_broker: MakeBroker, topic: str) -> None:
    client = make_broker(SMALL_STORE + SMALL_BROKER + "auto_create_topics = true\n").client
    assert client is not None
    assert client.get(f"/v1/topics/{topic}").status_code == 404
    assert client.post(f"/v1/topics/{topic}/messages", json={"body": "x"}).status_code == 201
    info = client.get(f"/v1/topics/{topic}").json()
    assert info["read_queues"] == info["write_queues"] == 4 and info["perm"] == "rw"
    assert "tidemq_topics_auto_created_total 1" in client.get("/metrics").text


BAD_JSON = [
    (b"{not json", "BODY_INVALID"),
    (b"[]", "BODY_INVALID"),
    (b'"text"', "BODY_INVALID"),
    (b"{}", "BODY_INVALID"),
    (b'{"body": 5}', "BODY_INVALID"),
    (b'{"body": "x", "extra": 1}', "BODY_INVALID"),
    (b'{"body": "x", "extra": null}', "BODY_INVALID"),
    (b'{"body": null}', "BODY_INVALID"),
    (b'{"body": "x", "encoding": "latin-1"}', "BODY_INVALID"),
    (b'{"body": "***", "encoding": "base64"}', "BASE64_INVALID"),
    (b'{"body": "x", "tags": 5}', "TAG_INVALID"),
    (b'{"body": "x", "tags": "A||B"}', "TAG_INVALID"),
    (b'{"body": "x", "keys": "k"}', "KEY_INVALID"),
    (b'{"body": "x", "keys": ["a b"]}', "KEY_INVALID"),
    (b'{"body": "x", "keys": [""]}', "KEY_INVALID"),
    (b'{"body": "x", "properties": {"a": 1}}', "PROPERTIES_INVALID"),
    (b'{"body": "x", "properties": {"UNIQ_KEY": "x"}}', "PROPERTIES_INVALID"),
    (b'{"body": "x", "properties": {"a": "\\u0001"}}', "PROPERTIES_INVALID"),
    (b'{"body": "x", "properties": []}', "PROPERTIES_INVALID"),
    (b'{"body": "x", "msg_id": ""}', "MESSAGE_ID_INVALID"),
    (b'{"body": "x", "msg_id": 7}', "MESSAGE_ID_INVALID"),
    (b'{"body": "x", "queue_id": -1}', "REQUEST_INVALID"),
    (b'{"body": "x", "queue_id": "1"}', "REQUEST_INVALID"),
    (b'{"body": "x", "queue_id": true}', "REQUEST_INVALID"),
    (b'{"body": "x", "sharding_key": 1}', "REQUEST_INVALID"),
    (b'{"body": "x", "delay_level": 99}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_level": 1.5}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_level": -1}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_level": "1"}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_ms": -1}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_ms": "x"}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_ms": "1000"}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_ms": 1000.5}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_ms": true}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "delay_ms": 259200001}', "DELAY_TOO_LONG"),
    (b'{"body": "x", "delay_ms": 100000000000000000000000}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "deliver_at_ms": -5}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "deliver_at_ms": "soon"}', "DELAY_LEVEL_INVALID"),
    (b'{"body": "x", "deliver_at_ms": 99999999999999}', "DELAY_TOO_LONG"),
    (b'{"body": "x", "properties": {"TIMER_DELIVER_MS": "1"}}', "PROPERTIES_INVALID"),
    (b'{"body": "x", "delay_level": 1, "delay_ms": 1000}', "REQUEST_INVALID"),
    (b'{"body": "x", "delay_ms": 1000, "deliver_at_ms": 1}', "REQUEST_INVALID"),
    (b'{"body": "x", "delay_level": 0, "deliver_at_ms": 1}', "REQUEST_INVALID"),
    (b'{"messages": [{"body": "x"}, {"body": "y", "delay_ms": -1}]}', "DELAY_LEVEL_INVALID"),
    (b'{"messages": []}', "BATCH_EMPTY"),
    (b'{"messages": {}}', "BODY_INVALID"),
    (b'{"messages": [{"body": "x"}], "body": "y"}', "BODY_INVALID"),
    (b'{"messages": [{"body": "x"}, 3]}', "BODY_INVALID"),
]


@pytest.mark.parametrize(("data", "code"), BAD_JSON)
def test_bad_json_is_refused_and_nothing_is_stored(quiet_client: httpx.Client, topic: str, data: bytes, code: str) -> None:
    create(quiet_client, topic, queues=1)
    before = commitlog_max(quiet_client)
    r = quiet_client.post(f"/v1/topics/{topic}/messages", content=data, headers={"content-type": "application/json"})
    problem(r, 400, code)
    assert commitlog_max(quiet_client) == before


def test_bad_json_creates_no_topic(client: httpx.Client, topic: str) -> None:
    problem(client.post(f"/v1/topics/{topic}/messages", content=b"{", headers={"content-type": "application/json"}), 400, "BODY_INVALID")
    problem(client.get(f"/v1/topics/{topic}"), 404, "TOPIC_NOT_FOUND")


def test_a_bad_message_in_a_batch_stores_none_of_it(quiet_client: httpx.Client, topic: str) -> None:
    create(quiet_client, topic, queues=1)
    before = commitlog_max(quiet_client)
    r = quiet_client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"body": "ok"}, {"body": "x", "encoding": "base64"}]})
    body = problem(r, 400, "BASE64_INVALID")
    assert "messages[1]" in body["detail"]
    assert commitlog_max(quiet_client) == before


def test_sizes(quiet_client: httpx.Client, topic: str) -> None:
    create(quiet_client, topic, queues=1)
    before = commitlog_max(quiet_client)
    # The test broker accepts bodies of 64 KiB (store) in requests of 128 KiB (raw) / 1 MiB (JSON).
    problem(quiet_client.post(f"/v1/topics/{topic}/messages", json={"body": "x" * 65_537}), 413, "MESSAGE_TOO_LARGE")
    raw = {"content-type": "application/octet-stream"}
    problem(quiet_client.post(f"/v1/topics/{topic}/messages", content=b"x" * 65_537, headers=raw), 413, "MESSAGE_TOO_LARGE")
    too_large = problem(quiet_client.post(f"/v1/topics/{topic}/messages", content=b"x" * 200_000, headers=raw), 413, "BODY_TOO_LARGE")
    assert "max_request_body_bytes" in too_large["detail"], too_large
    problem(quiet_client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"body": "x"}] * 1001}), 413, "BATCH_TOO_LARGE")
    big_props = {f"p{i}": "v" * 100 for i in range(400)}
    problem(quiet_client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "properties": big_props}), 413, "PROPERTIES_TOO_LARGE")
    too_large = problem(quiet_client.post(f"/v1/topics/{topic}/messages", json={"body": "x" * 1_100_000}), 413, "BODY_TOO_LARGE")
    assert "max_json_body_bytes" in too_large["detail"], too_large
    assert commitlog_max(quiet_client) == before
    assert quiet_client.post(f"/v1/topics/{topic}/messages", json={"body": "x" * 65_536}).status_code == 201


def test_chunked_body_over_the_limit_is_refused(client: httpx.Client, topic: str) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(17):  # 139,264 bytes: just over the 131,072-byte cap
            yield b"x" * 8192

    r = client.post(f"/v1/topics/{topic}/messages", content=chunks(), headers={"content-type": "application/octet-stream"})
    assert "131072 bytes, the broker's max_request_body_bytes" in problem(r, 413, "BODY_TOO_LARGE")["detail"]
    problem(client.get(f"/v1/topics/{topic}"), 404, "TOPIC_NOT_FOUND")


def test_content_length_over_the_limit_is_refused_before_reading(shared_broker: BrokerProcess | InProcessBroker) -> None:
    with socket.create_connection(("127.0.0.1", shared_broker.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/topics/big/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 99999999\r\n\r\n"
        )
        reply = b""
        while b"BODY_TOO_LARGE" not in reply:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413"), reply[:100]
    assert b"BODY_TOO_LARGE" in reply


def test_raw_query_parameter_errors(client: httpx.Client, topic: str) -> None:
    raw = {"content-type": "application/octet-stream"}
    url = f"/v1/topics/{topic}/messages"
    problem(client.post(url, content=b"x", headers=raw, params={"queue_id": "x"}), 400, "REQUEST_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"queue_id": "-1"}), 400, "REQUEST_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_level": "abc"}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_level": "99"}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_ms": "-1"}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_ms": "1.5"}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_ms": ""}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_ms": "259200001"}), 400, "DELAY_TOO_LONG")
    problem(client.post(url, content=b"x", headers=raw, params={"deliver_at_ms": "tomorrow"}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"deliver_at_ms": "9" * 30}), 400, "DELAY_LEVEL_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"delay_level": "1", "delay_ms": "10"}), 400, "REQUEST_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"keys": "a b"}), 400, "KEY_INVALID")
    problem(client.post(url, content=b"x", headers=raw, params={"nope": "1"}), 400, "REQUEST_INVALID")
    problem(client.post(url, json={"body": "x"}, params={"nope": "1"}), 400, "REQUEST_INVALID")  # with JSON too
    problem(client.post(url, json={"body": "x"}, params={"keys": "a b"}), 400, "KEY_INVALID")
    problem(client.post(url, content=b"x", headers={"content-type": "text/plain"}), 415, "UNSUPPORTED_MEDIA_TYPE")
    problem(client.post(url, content=b"x"), 415, "UNSUPPORTED_MEDIA_TYPE")


def test_queue_and_topic_errors(quiet_client: httpx.Client, topic: str) -> None:
    create(quiet_client, topic, queues=2)
    create(quiet_client, topic + "-ro", queues=1, perm="r")
    before = commitlog_max(quiet_client)
    problem(quiet_client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 2}), 404, "QUEUE_NOT_FOUND")
    problem(quiet_client.post("/v1/topics/bad.name/messages", json={"body": "x"}), 400, "TOPIC_INVALID")
    problem(quiet_client.post(f"/v1/topics/{'a' * 128}/messages", json={"body": "x"}), 400, "TOPIC_INVALID")
    r = quiet_client.post("/v1/topics/..%2Fetc/messages", json={"body": "x"})
    assert 400 <= r.status_code < 500 and r.headers["content-type"].startswith("application/problem+json")
    problem(quiet_client.post(f"/v1/topics/{topic}-ro/messages", json={"body": "x"}), 403, "TOPIC_NOT_WRITABLE")
    assert commitlog_max(quiet_client) == before


@pytest.mark.parametrize(
    "reserved",
    # The store's own, then RocketMQ's other system topics (TopicValidator.isSystemTopic, the cluster's name and reply topic).
    ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "OFFSET_MOVED_EVENT", "TBW102", "rmq_sys_any", "DefaultCluster_REPLY_TOPIC"],
)
def test_system_topics_are_reserved(quiet_client: httpx.Client, reserved: str) -> None:
    before = commitlog_max(quiet_client)
    body = problem(quiet_client.post(f"/v1/topics/{reserved}/messages", json={"body": "x"}), 403, "TOPIC_RESERVED")
    assert reserved in body["detail"]
    raw = {"content-type": "application/octet-stream"}
    problem(quiet_client.post(f"/v1/topics/{reserved}/messages", content=b"x", headers=raw), 403, "TOPIC_RESERVED")
    problem(quiet_client.put(f"/v1/topics/{reserved}", json={"queues": 1}), 403, "TOPIC_RESERVED")
    problem(quiet_client.delete(f"/v1/topics/{reserved}"), 403, "TOPIC_RESERVED")
    assert commitlog_max(quiet_client) == before


def test_delayed_message_reply_names_its_level_not_a_schedule_offset(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=2)
    r = client.post(f"/v1/topics/{topic}/messages", json={"body": "later", "delay_level": 1, "queue_id": 1})
    assert r.status_code == 201, r.text
    sent = r.json()
    assert sent["queue_id"] == 1 and sent["queue_offset"] is None
    assert sent["delay_level"] == 1 and sent["deliver_at_ms"] == sent["store_timestamp"] + 1000
    # Delivered to its own queue once due, at offset 0, no earlier than promised.
    got = pull_one(client, topic, 1, 0)
    assert got["body"] == "later" and got["msg_id"] == sent["msg_id"] and got["topic"] == topic
    assert got["store_timestamp"] >= sent["deliver_at_ms"]
    # As RocketMQ's ScheduleMessageService.messageTimeup stores the delivered copy.
    assert (got["properties"]["DELAY"], got["properties"]["REAL_TOPIC"], got["properties"]["REAL_QID"]) == ("1", topic, "1")
    # Delivered once: nothing follows it in its queue, and a later pull finds nothing new.
    later = client.get(f"/v1/topics/{topic}/queues/1/messages", params={"offset": 1, "wait_ms": 1500}).json()
    assert later["status"] == "NO_NEW_MSG" and later["max_offset"] == 1


def test_delay_ms_and_deliver_at_ms_are_timer_messages_due_when_asked(client: httpx.Client, topic: str) -> None:
    """delay_ms and deliver_at_ms are no longer rounded up to a level: the reply says the time asked for."""
    create(client, topic)
    url = f"/v1/topics/{topic}/messages"
    one = client.post(url, json={"body": "a", "delay_ms": 1500, "queue_id": 0}).json()
    assert one["queue_offset"] is None and "delay_level" not in one
    assert one["deliver_at_ms"] == one["store_timestamp"] + 1500
    due = int(time.time() * 1000) + 900
    at = client.post(url, json={"body": "c", "deliver_at_ms": due, "queue_id": 0}).json()
    assert at["deliver_at_ms"] == due and "delay_level" not in at
    longest = client.post(url, json={"body": "d", "delay_ms": 7_200_001, "queue_id": 0}).json()
    assert longest["queue_offset"] is None and "delay_level" not in longest
    raw = client.post(url, content=b"e", headers={"content-type": "application/octet-stream"}, params={"delay_ms": "2000", "queue_id": "0"})
    assert raw.status_code == 201 and raw.json()["deliver_at_ms"] == raw.json()["store_timestamp"] + 2000
    batch = client.post(url, json={"messages": [{"body": "f", "delay_ms": 30_000}, {"body": "g"}]}).json()["results"]
    assert batch[0]["queue_offset"] is None and batch[0]["deliver_at_ms"] == batch[0]["store_timestamp"] + 30_000
    assert "deliver_at_ms" not in batch[1] and batch[1]["queue_offset"] is not None
    level = client.post(url, json={"body": "h", "delay_level": 2, "queue_id": 0}).json()
    assert level["delay_level"] == 2 and level["deliver_at_ms"] == level["store_timestamp"] + 5000


def test_no_delay_and_past_times_deliver_now(client: httpx.Client, topic: str) -> None:
    create(client, topic)
    url = f"/v1/topics/{topic}/messages"
    past = client.post(url, json={"body": "p", "deliver_at_ms": int(time.time() * 1000) - 60_000, "queue_id": 0}).json()
    zero = client.post(url, json={"body": "z", "delay_ms": 0, "queue_id": 0}).json()
    level_zero = client.post(url, json={"body": "l", "delay_level": 0, "queue_id": 0}).json()
    assert [m["queue_offset"] for m in (past, zero, level_zero)] == [0, 1, 2]
    assert all("delay_level" not in m for m in (past, zero, level_zero))
    assert pull_one(client, topic, 0, 0)["body"] == "p"


def test_a_batch_to_one_queue_is_stored_as_a_batch_over_queues_is(client: httpx.Client, topic: str) -> None:
    """A JSON batch to one queue is packed for the encode kernel; one over two queues goes message by
    message. Both store the same bytes but for offsets and times, and answer the stored UNIQ_KEY."""
    from store import decode_message
    from store.layouts import iter_messages

    create(client, topic, queues=2)
    message = {"body": "é body", "tags": "TagA", "keys": ["k1", "k2"], "properties": {"b": "2", "a": "1"}}
    packed = client.post(f"/v1/topics/{topic}/messages", json={"messages": [{**message, "queue_id": 0}, message | {"queue_id": 0}]})
    spread = client.post(f"/v1/topics/{topic}/messages", json={"messages": [{**message, "queue_id": 0}, {**message, "queue_id": 1}]})
    assert packed.status_code == 201 and spread.status_code == 201, (packed.text, spread.text)
    sent = packed.json()["results"] + spread.json()["results"][:1]
    assert len({s["msg_id"] for s in sent}) == 3
    pull_one(client, topic, 0, 2)  # all three are dispatched
    r = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "max": 3}, headers={"accept": "application/x-tidemq-batch"}
    )
    stored = [decode_message(r.content, pos) for pos, _ in iter_messages(r.content)]
    assert [m["properties"]["UNIQ_KEY"] for m in stored] == [s["msg_id"] for s in sent]
    assert [m["commitlog_offset"] for m in stored] == [s["commitlog_offset"] for s in sent]
    assert [m["queue_offset"] for m in stored] == [s["queue_offset"] for s in sent] == [0, 1, 2]
    varying = {"queue_offset", "commitlog_offset", "born_timestamp", "store_timestamp", "properties", "msg_id", "offset_msg_id"}
    general = {k: v for k, v in stored[2].items() if k not in varying}
    for m in stored[:2]:
        assert {k: v for k, v in m.items() if k not in varying} == general
        assert list(m["properties"].items())[:-1] == list(stored[2]["properties"].items())[:-1]
    assert list(stored[0]["properties"]) == ["b", "a", "TAGS", "KEYS", "UNIQ_KEY"]
    assert stored[0]["body"] == "é body".encode()
