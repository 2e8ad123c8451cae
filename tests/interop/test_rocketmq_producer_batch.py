"""A batch as a RocketMQ producer sends it, posted as a binary batch, stored and served.

The body is built by tests/interop/rocketmq_store.py (RocketMQ's published layouts, nothing of
tidemq's codec) with the properties DefaultMQProducer#batch leaves on each message: WAIT=true from
Message's constructor, UNIQ_KEY from MessageClientIDSetter#setUniqID, TAGS and KEYS when given,
user properties. The stored bytes are compared with what RocketMQ's MessageExtEncoder writes for
the same message, and the served message with what the producer sent.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE
from tests.app.in_process import InProcessBroker
from tests.interop.rocketmq_store import Host, Message, encode_batch, stored_hosts_and_times, uniq_key

PRODUCER = Host("192.168.1.20", 53412)
BATCH = "application/x-tidemq-batch"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    broker = InProcessBroker(tmp_path / "store", SMALL_STORE + SMALL_BROKER).start()
    try:
        assert broker.client is not None
        yield broker.client
    finally:
        broker.kill()


def producer_messages(topic: str) -> list[Message]:
    """Messages as DefaultMQProducer#batch hands them to MessageBatch#encode (hosts and times are the broker's)."""
    nowhere = Host("0.0.0.0", 0)
    specs = [
        (b"order 1 paid", "paid", ["order-1", "cust-7"], {}, 0),
        (b"order 2 new", "new", [], {"BUYER_ID": "b-42", "region": "eu"}, 7),
        (b"no tag", None, ["order-3"], {}, 0),
    ]
    out = []
    for i, (body, tags, keys, user, flag) in enumerate(specs):
        uniq = uniq_key(PRODUCER.ip, 4242, 0x1B6D3586, 1_767_225_600_000 + i, i)
        props = {"WAIT": "true", **user}
        out.append(Message(topic, 0, body, nowhere, nowhere, 0, 0, tags, keys, uniq, props, flag=flag))
    return out


def test_a_rocketmq_producers_batch_is_stored_and_served(client: httpx.Client) -> None:
    sent = producer_messages("orders")
    body = encode_batch([(m.body, m.properties_bytes(), m.flag) for m in sent])
    assert client.put("/v1/topics/orders", json={"queues": 4}).status_code == 201
    r = client.post("/v1/topics/orders/messages/batch", params={"queue_id": "0"}, content=body, headers={"content-type": BATCH})
    assert r.status_code == 201, r.text
    reply = r.json()
    assert (reply["count"], reply["first_queue_offset"]) == (3, 0)

    r = client.get("/v1/topics/orders/queues/0/messages/batch", params={"offset": 0, "max": 8})
    assert r.status_code == 200 and r.headers["x-tidemq-status"] == "FOUND", r.text
    data, pos = r.content, 0
    for queue_offset, m in enumerate(sent):
        (size,) = struct.unpack_from(">i", data, pos)
        record = data[pos : pos + size]
        born, born_ms, store, store_ms = stored_hosts_and_times(record)
        stored = Message(m.topic, 0, m.body, born, store, born_ms, store_ms, m.tags, m.keys, m.uniq, m.properties, flag=m.flag)
        assert record == stored.encode(queue_offset, reply["commitlog_offsets"][queue_offset])  # MessageExtEncoder's bytes
        pos += size
    assert pos == len(data)

    r = client.get("/v1/topics/orders/queues/0/messages", params={"offset": 0, "max": 8})
    served = r.json()["messages"]
    assert [(x["msg_id"], x["tags"], x["keys"], x["properties"], x["body"]) for x in served] == [
        (m.uniq, m.tags, m.keys, m.properties, m.body.decode()) for m in sent
    ]
    assert served[0]["properties"] == {"WAIT": "true"}  # stored as the producer set it
    for m in sent:  # indexed by UNIQ_KEY and by each key
        for params in [{"msg_id": m.uniq}] + [{"key": k} for k in m.keys]:
            found = client.get("/v1/topics/orders/messages", params=params).json()["messages"]
            assert [x["msg_id"] for x in found] == [m.uniq], params
