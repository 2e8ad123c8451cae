"""The sink's sending without a SparkSession: rows to binary batches (and JSON for sharded rows) against a live server."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from pipeline.errors import BrokerProblem, RowInvalid
from pipeline.http_client import BrokerClient, ClientSettings
from store import native as nk
from store.codec.message import decode_properties
from store.codec.message_codec import decode_message, iter_messages
from tests.pipeline.pipeline_helpers import Server, create_topic, queue_max_offsets
from tests.waiting import wait_for

pytest.importorskip("pyspark")

from pipeline.tidemq_sink import SinkSettings, outgoing_of, send_rows

pytestmark = pytest.mark.timeout(120)

COLUMNS = ("body", "keys", "tags", "properties", "queue_id", "sharding_key", "msg_id", "topic")


@pytest.fixture(scope="module")
def server(tidemq_server: Server) -> Server:
    return tidemq_server  # the package's broker fixture (tests/pipeline/conftest.py), under this module's name


def row(body: bytes | str, **fields: object) -> dict[str, Any]:
    return {name: fields.get(name) for name in COLUMNS} | {"body": body}


def stored(server: Server, topic: str, queue_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with BrokerClient(ClientSettings(server.url)) as client:
        while True:
            batch = client.pull(topic, queue_id, len(out), 32)
            if batch.status != "FOUND":
                return out
            out += [decode_message(batch.data, pos) for pos, _ in iter_messages(batch.data)]


def test_a_row_becomes_a_binary_batch_item_unless_only_its_sharding_key_names_a_queue() -> None:
    topic, out = outgoing_of(row(b"\x00b", keys="k1 k2", tags="T", properties={"p": "v"}, queue_id=2, msg_id="M", topic="x"), COLUMNS)
    assert (topic, out.queue_id, out.json, out.size) == ("x", 2, None, 2)
    assert nk.check_batch(out.item, 10, check_properties=True) == (1, 91 + 2 + len(out.item) - 24)
    body_len = int.from_bytes(out.item[16:20], "big")
    assert out.item[20 : 20 + body_len] == b"\x00b"
    props = decode_properties(out.item[22 + body_len :])
    assert props == {"p": "v", "TAGS": "T", "KEYS": "k1 k2", "UNIQ_KEY": "M"} and list(props)[0] == "p"
    generated = decode_properties(outgoing_of(row("é"), COLUMNS)[1].item[22 + 2 :])["UNIQ_KEY"]  # after "é", 2 bytes
    assert len(generated) == 32, "a row without msg_id gets a client message id, as the JSON produce would give it"
    _, sharded = outgoing_of(row("s", sharding_key="user-7", tags="T"), COLUMNS)
    assert sharded.json == {"body": "s", "encoding": "utf-8", "tags": "T", "sharding_key": "user-7"} and not sharded.item
    _, pinned = outgoing_of(row("s", sharding_key="user-7", queue_id=1), COLUMNS)
    assert pinned.json is None and pinned.queue_id == 1  # queue_id wins over the key, as in the JSON produce


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"keys": ["a b"]}, "KEY_INVALID"),
        ({"keys": [""]}, "KEY_INVALID"),
        ({"properties": {"TAGS": "x"}}, "PROPERTIES_INVALID"),
        ({"properties": {"DELAY": "1"}}, "PROPERTIES_INVALID"),
        ({"properties": {"a\x01": "v"}}, "PROPERTIES_INVALID"),
        ({"properties": {"a": None}}, "PROPERTIES_INVALID"),
        ({"tags": "a\x02"}, "TAG_INVALID"),
        ({"msg_id": "m\x01"}, "MESSAGE_ID_INVALID"),
    ],
)
def test_a_field_the_encoding_cannot_carry_fails_the_row_with_the_json_produce_code(fields: dict[str, Any], code: str) -> None:
    with pytest.raises(RowInvalid) as e:
        outgoing_of(row("x", **fields), COLUMNS)
    assert str(e.value).startswith(code)


def test_rows_reach_their_queues_in_order_through_binary_and_json_batches(server: Server) -> None:
    topic = "sunk-binary"
    create_topic(server.url, topic, 3)
    rows = []
    for i in range(40):
        if i % 10 == 9:
            rows.append(row(f"s{i}", sharding_key="user-7"))
        elif i % 4 == 3:
            rows.append(row(f"r{i}", tags="RR"))  # round-robin
        else:
            rows.append(row(f"q{i}".encode(), queue_id=i % 2, keys=[f"k{i}"], properties={"i": str(i)}, msg_id=f"id-{i}"))
    settings = SinkSettings(ClientSettings(server.url), topic, COLUMNS, batch_messages=7)
    assert send_rows(settings, iter(rows)).messages == 40
    # Acknowledged; dispatched a moment later.
    wait_for(lambda: sum(queue_max_offsets(server.url, topic).values()) >= 40, 10, what="the rows to become readable")
    queues = {q: stored(server, topic, q) for q in range(3)}
    assert sum(len(v) for v in queues.values()) == 40
    for q in (0, 1):  # explicit queues: every row, in input order, with its fields
        pinned = [m for m in queues[q] if m["body"].startswith(b"q")]
        want = [r for r in rows if r["queue_id"] == q]
        assert [m["body"] for m in pinned] == [r["body"] for r in want]
        assert [(m["msg_id"], m["keys"], m["properties"]["i"]) for m in pinned] == [
            (r["msg_id"], r["keys"], r["properties"]["i"]) for r in want
        ]
    sharded = [m["body"] for m in queues[zlib.crc32(b"user-7") % 3] if m["body"].startswith(b"s")]
    assert sharded == [r["body"].encode() for r in rows if r["sharding_key"]]
    round_robin = sorted(m["body"] for ms in queues.values() for m in ms if m["body"].startswith(b"r"))
    assert round_robin == sorted(r["body"].encode() for r in rows if r["tags"] == "RR")


def test_a_refused_request_fails_with_the_broker_code_and_earlier_requests_only_are_stored(server: Server) -> None:
    topic = "sunk-refused"
    create_topic(server.url, topic, 1)
    rows = [row("ok", queue_id=0), row("bad", queue_id=0, tags="A||B")]
    with pytest.raises(BrokerProblem) as e:
        send_rows(SinkSettings(ClientSettings(server.url), topic, COLUMNS), iter(rows))
    assert e.value.code == "TAG_INVALID"
    assert queue_max_offsets(server.url, topic) == {0: 0}, "one request: the batch is refused whole"
    with pytest.raises(RowInvalid):
        send_rows(SinkSettings(ClientSettings(server.url), topic, COLUMNS), iter([row("ok", queue_id=0), row("x", keys=["a b"])]))
    assert queue_max_offsets(server.url, topic) == {0: 0}, "a row that cannot be carried fails the task before its batch is sent"
