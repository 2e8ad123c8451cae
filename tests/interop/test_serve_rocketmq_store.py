"""tidemq serving a store RocketMQ 4.9.8 wrote (tests/interop/scenario.py), over HTTP on loopback.

Every expectation comes from the writer, which follows RocketMQ's layout and imports nothing of
tidemq: the bodies as the producer sent them (before compression), the hosts, the offsets, the
keys and the consumer offsets RocketMQ left in config/.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx

import tidemq
from store import decode_message
from store.layouts import iter_messages
from tests.interop import scenario
from tests.interop.conftest import Served
from tests.interop.rocketmq_store import SCHEDULE_TOPIC, Message
from tests.waiting import wait_for

USER_QUEUES = [("orders", 0), ("orders", 1), ("orders", 2), ("orders", 3), ("audit", 0), ("audit", 1)]
POLL_TIMEOUT_S = 20.0


def _pull_all(client: httpx.Client, topic: str, queue_id: int, start: int, end: int) -> list[dict[str, Any]]:
    """JSON pulls from `start` until `end`, following next_offset."""
    got: list[dict[str, Any]] = []
    offset = start
    while offset < end:
        r = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": offset, "max": 256})
        assert r.status_code == 200, r.text
        reply = r.json()
        assert reply["status"] == "FOUND", (topic, queue_id, offset, reply)
        got.extend(reply["messages"])
        assert reply["next_offset"] > offset
        offset = reply["next_offset"]
    return got


def _body_text(m: dict[str, Any]) -> bytes:
    return m["body"].encode() if m["encoding"] == "utf-8" else base64.b64decode(m["body"])


def _expected_json(m: Message) -> dict[str, Any]:
    """The pull view of a stored message: properties other than TAGS, KEYS and UNIQ_KEY stay in `properties`."""
    return {
        "msg_id": m.uniq,
        "offset_msg_id": m.offset_msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "body": m.body,
        "tags": m.tags,
        "keys": m.keys,
        "properties": m.properties,
        "born_timestamp": m.born_ms,
        "store_timestamp": m.store_ms,
        "reconsume_times": m.reconsume_times,
        "compressed": bool(m.compress),
    }


_EXPECTED_FIELDS = (
    "msg_id",
    "offset_msg_id",
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "tags",
    "keys",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
)


def _view(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: m[k] for k in _EXPECTED_FIELDS}
    out["body"] = _body_text(m)
    out["compressed"] = m.get("compressed", False)  # present (true) only for a body stored compressed
    return out


def test_topics_listed_with_the_queue_counts_of_topics_json(served: Served) -> None:
    r = served.client.get("/v1/topics")
    assert r.status_code == 200, r.text
    listed = {t["topic"]: t for t in r.json()["topics"]}
    for config in scenario.TOPICS:
        if config.name in scenario.USER_TOPICS:
            t = listed[config.name]
            assert (t["read_queues"], t["write_queues"], t["perm"]) == (config.read_queues, config.write_queues, "rw"), t


def test_queue_bounds_follow_the_consume_queues(served: Served) -> None:
    """orders/1 begins at 3 behind fillPreBlank units; orders/3 is empty; prepared and rollback messages take no offset."""
    queues = served.client.get("/v1/topics/orders").json()["queues"]
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in queues] == [(0, 0, 5), (1, 3, 6), (2, 0, 1), (3, 0, 0)]
    audit = served.client.get("/v1/topics/audit").json()["queues"]
    assert [(q["min_offset"], q["max_offset"]) for q in audit] == [(0, 25), (0, 25)]


def test_json_pull_of_every_queue_gives_the_exact_messages(served: Served) -> None:
    for topic, queue_id in USER_QUEUES:
        want = served.store.queue(topic, queue_id)
        got = _pull_all(served.client, topic, queue_id, served.store.queue_min(topic, queue_id), served.store.queue_max(topic, queue_id))
        assert [_view(m) for m in got] == [_expected_json(m) for m in want], (topic, queue_id)


def test_pull_below_a_filler_start_is_answered_offset_too_small(served: Served) -> None:
    r = served.client.get("/v1/topics/orders/queues/1/messages", params={"offset": 0})
    assert r.status_code == 200, r.text
    reply = r.json()
    assert (reply["status"], reply["next_offset"], reply["messages"]) == ("OFFSET_TOO_SMALL", 3, [])


def test_prepared_and_rollback_messages_are_in_no_queue(served: Served) -> None:
    held_back = [m for m in served.store.messages if not m.consumable]
    assert len(held_back) == 3
    pulled = _pull_all(served.client, "orders", 2, 0, 1)
    assert [m["commitlog_offset"] for m in pulled] == [next(m for m in served.store.messages if m.transaction == 0x8).commitlog_offset]
    assert all(m["commitlog_offset"] not in {h.commitlog_offset for h in held_back} for m in pulled)


def test_batch_pull_returns_the_stored_bytes_and_hosts(served: Served) -> None:
    for topic, queue_id in USER_QUEUES:
        want = served.store.queue(topic, queue_id)
        offset, data = served.store.queue_min(topic, queue_id), b""
        while offset < served.store.queue_max(topic, queue_id):
            r = served.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages/batch", params={"offset": offset, "max": 256})
            assert r.status_code == 200, r.text
            assert r.headers["x-tidemq-status"] == "FOUND", r.headers
            data += r.content
            offset = int(r.headers["x-tidemq-next-offset"])
        assert data == b"".join(m.stored for m in want), (topic, queue_id)  # RocketMQ's bytes, compressed bodies as stored
        decoded = [decode_message(data, pos) for pos, _size in iter_messages(data)]
        assert [(d["born_host"], d["store_host"], d["sys_flag"]) for d in decoded] == [
            (_host_text(m.born_host.ip, m.born_host.port), _host_text(m.store_host.ip, m.store_host.port), m.sys_flag) for m in want
        ]


def test_python_client_pulls_the_producers_bodies(served: Served) -> None:
    """The SDK reads the stored-bytes format and inflates what the producer compressed."""
    with tidemq.Client(served.broker.url) as client:
        for topic, queue_id in USER_QUEUES:
            want = served.store.queue(topic, queue_id)
            pulled, offset = [], served.store.queue_min(topic, queue_id)
            while offset < served.store.queue_max(topic, queue_id):  # the store's transfer limits may answer fewer
                result = client.pull(topic, queue_id, offset, max_messages=256)
                assert result.status == "FOUND" and result.next_offset > offset, result
                pulled += result.messages
                offset = result.next_offset
            got = [(m.commitlog_offset, m.offset_msg_id, m.msg_id, m.body, m.compressed, m.properties) for m in pulled]
            assert got == [(m.commitlog_offset, m.offset_msg_id, m.uniq, m.body, bool(m.compress), m.properties) for m in want], topic


def _host_text(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def test_every_key_and_client_id_is_found(served: Served) -> None:
    _check_every_key(served)


def _check_every_key(served: Served) -> None:
    """Each key query returns every consumable message with the key, and nothing but indexed messages with it."""
    messages = [m for m in served.store.messages if m.topic in scenario.USER_TOPICS]
    keys = {(m.topic, k) for m in messages if m.consumable for k in m.keys}
    for topic, key in sorted(keys):
        r = served.client.get(f"/v1/topics/{topic}/messages", params={"key": key, "max": 32})
        assert r.status_code == 200, r.text
        got = {m["commitlog_offset"] for m in r.json()["messages"]}
        must = {m.commitlog_offset for m in messages if m.topic == topic and key in m.keys and m.consumable}
        may = {m.commitlog_offset for m in messages if m.topic == topic and key in m.keys and m.indexed}
        assert must <= got <= may, (topic, key, got, must)
    for m in messages:
        if not m.consumable:
            continue
        r = served.client.get(f"/v1/topics/{m.topic}/messages", params={"msg_id": m.uniq})
        assert r.status_code == 200, r.text
        found = [x for x in r.json()["messages"] if x["commitlog_offset"] == m.commitlog_offset]
        assert found and _body_text(found[0]) == m.body, (m.topic, m.uniq)


def test_offset_message_ids_of_ipv4_and_ipv6_store_hosts(served: Served) -> None:
    lengths = set()
    for m in served.store.messages:
        if not m.consumable or m.topic not in scenario.USER_TOPICS:
            continue
        r = served.client.get(f"/v1/messages/{m.offset_msg_id}")
        assert r.status_code == 200, (m.offset_msg_id, r.text)
        got = r.json()
        assert (got["commitlog_offset"], got["offset_msg_id"], _body_text(got)) == (m.commitlog_offset, m.offset_msg_id, m.body)
        lengths.add(len(m.offset_msg_id))
    assert lengths == {32, 56}  # MessageDecoder#createMessageId: 4 + 4 + 8 or 16 + 4 + 8 bytes


def test_group_offsets_are_the_ones_rocketmq_left(served: Served) -> None:
    r = served.client.get("/v1/groups/reporting/offsets", params={"topic": "audit"})
    assert r.status_code == 200, r.text
    assert [(q["queue_id"], q["committed_offset"], q["lag"]) for q in r.json()["queues"]] == [(0, 10, 15), (1, 10, 15)]
    r = served.client.get("/v1/topics/audit/queues/1/messages", params={"group": "reporting", "max": 1})
    assert [m["queue_offset"] for m in r.json()["messages"]] == [10]


def test_receive_and_ack_start_where_rocketmq_left_the_group(served: Served) -> None:
    """billing left orders at 2, 4, 0, 0: a receive loop gets exactly the rest, and acked it stays consumed."""
    committed = scenario.CONSUMER_OFFSETS["orders@billing"]
    want = {
        m.commitlog_offset: m
        for m in served.store.messages
        if m.topic == "orders" and m.consumable and m.queue_offset >= committed[m.queue_id]
    }
    assert len(want) == 6
    got: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while len(got) < len(want):
        assert time.monotonic() < deadline, f"received {sorted(got)} of {sorted(want)}"
        r = served.client.post("/v1/groups/billing/topics/orders/receive", params={"max": 32, "invisible_ms": 60_000})
        assert r.status_code == 200, r.text
        for m in r.json()["messages"]:
            assert m["commitlog_offset"] not in got, m
            got[m["commitlog_offset"]] = m
    assert sorted(got) == sorted(want)
    for offset, m in got.items():
        assert _body_text(m) == want[offset].body
    handles = [m["receipt_handle"] for m in got.values()]
    r = served.client.post("/v1/groups/billing/topics/orders/ack", json={"receipt_handles": handles})
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["results"]] == ["OK"] * len(handles)
    for _ in range(8):  # every queue's turn comes round: nothing is left for the group
        r = served.client.post("/v1/groups/billing/topics/orders/receive", params={"max": 32, "invisible_ms": 60_000})
        assert r.json()["messages"] == []


def test_the_overdue_delayed_message_is_delivered_with_rocketmqs_properties(served: Served) -> None:
    """delayOffset.json left level 1 at 0 with a message due long ago: tidemq delivers it as
    ScheduleMessageService#messageTimeup does, the stored properties keeping DELAY, REAL_TOPIC, REAL_QID."""
    original = next(m for m in served.store.messages if m.topic == SCHEDULE_TOPIC and m.queue_id == 0)
    reply: dict[str, Any] = {}

    def found() -> bool:
        reply.update(served.client.get("/v1/topics/delayed/queues/0/messages", params={"offset": 1}).json())
        delivered: bool = reply["status"] == "FOUND"
        return delivered

    wait_for(found, POLL_TIMEOUT_S, what=lambda: f"the overdue message to be delivered: {reply}", poll_s=0.05)
    copy = reply["messages"][0]
    assert (_body_text(copy), copy["msg_id"], copy["tags"], copy["keys"]) == (original.body, original.uniq, "reminder", ["late-2"])
    assert {k: copy["properties"].get(k) for k in ("DELAY", "REAL_TOPIC", "REAL_QID")} == {
        "DELAY": "1",
        "REAL_TOPIC": "delayed",
        "REAL_QID": "0",
    }
    first = served.client.get("/v1/topics/delayed/queues/0/messages", params={"offset": 0, "max": 1}).json()["messages"]
    assert [_view(m) for m in first] == [_expected_json(served.store.queue("delayed", 0)[0])]  # delivered by RocketMQ, not again


def test_the_schedule_keeps_the_level_18_message_waiting(served: Served) -> None:
    levels = {x["level"]: x for x in served.client.get("/v1/schedule").json()["levels"]}
    assert levels[18]["waiting"] == 1 and levels[18]["oldest_due_in_ms"] > 60 * 60_000
    assert levels[2]["waiting"] == 0  # RocketMQ delivered it (delayOffset.json: 2 -> 1)
