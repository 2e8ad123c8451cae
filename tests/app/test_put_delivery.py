"""A held pull answered by the put of its message (app.long_poll `deliver`, app.produce_lane `_deliver`, the store's
`get_put_message`), over loopback through a real broker.

What must hold:
- a pull held at its queue's end that takes every message is answered by the produce stored there by a put
  lane (the produce lane's, or the direct way's for a produce the produce lane leaves to it), with exactly what a read
  of that offset answers once the message is dispatched (JSON and the batch format), and counted in
  `tidemq_held_pulls_delivered_total`;
- its reply is written before that produce's dispatch pass (an early write), and a request its consumer sends on
  receiving it finds the message dispatched: a pull of that offset, a query by the message's key;
- a batch answers it with what a read of the pull's `max` answers (the transfer limits too); a tag-filtered pull is
  left to the pass, which wakes it as before (not counted delivered);
- the store's `get_put_message` answers a put's messages as `get_message` does once they are dispatched (its max and
  byte limit), and None for an offset or a size no message has, or spans that do not follow one another.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import orjson
import pytest

from app.reply_transport import ReplyTransport
from store import DefaultMessageStore, EncodedItems, MessageInner
from tests.app.conftest import MakeBroker
from tests.app.in_process import InProcessBroker
from tests.app.test_direct_requests import PATIENCE_S, produce_request
from tests.app.test_produce_lane import lane_broker, metric_value
from tests.app.test_slow_clients import read_response

pytestmark = pytest.mark.timeout(120)
RAW = b"application/octet-stream"
BATCH = "application/x-tidemq-batch"


def counters(broker: InProcessBroker) -> tuple[int, int]:
    """(held pulls woken, of them delivered by their put)."""
    assert broker.started is not None
    held = broker.started.broker.held
    return held.woken_total, held.delivered_total


def hold(broker: InProcessBroker, target: str, accept: str = "", held_before: int = 0) -> socket.socket:
    """A connection whose pull `target` (a path and query) is held by the broker once this returns."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S)
    extra = f"Accept: {accept}\r\n" if accept else ""
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    assert broker.started is not None
    deadline = time.monotonic() + PATIENCE_S
    while broker.started.broker.held.held <= held_before:
        assert time.monotonic() < deadline, "the pull was not held"
        time.sleep(0.005)
    return sock


def produce(broker: InProcessBroker, topic: str, body: bytes, query: str = "", content_type: bytes = RAW) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as producer:
        producer.sendall(produce_request(topic, body, content_type, query=query))
        status, _, reply = read_response(producer)
    assert status == 201, reply
    answer: dict[str, Any] = orjson.loads(reply)
    return answer


def get(broker: InProcessBroker, target: str, accept: str = "") -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        extra = f"Accept: {accept}\r\n" if accept else ""
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
        return read_response(sock)


def test_a_held_pull_is_answered_by_its_messages_put_as_a_read_answers_it(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "d1")
    assert broker.client is not None
    woken, delivered = counters(broker)
    for offset, body in enumerate((b"first", b"second")):
        path = f"/v1/topics/d1/queues/0/messages?offset={offset}"
        with hold(broker, path + "&wait_ms=5000") as puller:
            produce(broker, "d1", body)
            status, headers, reply = read_response(puller)
        assert status == 200 and headers["content-type"] == "application/json"
        assert orjson.loads(reply)["messages"][0]["body"] == body.decode()
        # What the pull answered is what a read of the offset answers now that the message is dispatched.
        assert (status, reply) == get(broker, path)[::2]
    assert counters(broker) == (woken + 2, delivered + 2)
    metrics = broker.client.get("/metrics").text
    assert metric_value(metrics, "tidemq_held_pulls_delivered_total") == delivered + 2


def test_a_produce_the_lane_leaves_to_the_direct_way_answers_a_held_pull_too(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "d7")
    _, delivered = counters(broker)
    path = "/v1/topics/d7/queues/0/messages?offset=0"
    with hold(broker, path + "&wait_ms=5000") as puller:
        # A media type with a parameter: not the lane's form, packed and put by the direct way's put lane.
        produce(broker, "d7", orjson.dumps({"body": "direct"}), content_type=b"application/json; charset=utf-8")
        status, _, reply = read_response(puller)
    assert status == 200 and [m["body"] for m in orjson.loads(reply)["messages"]] == ["direct"]
    assert (status, reply) == get(broker, path)[::2]
    assert counters(broker)[1] == delivered + 1


def test_a_held_batch_format_pull_is_answered_with_the_stored_bytes_a_read_answers(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "d2")
    produce(broker, "d2", b"already there")
    _, delivered = counters(broker)
    path = "/v1/topics/d2/queues/0/messages?offset=1"
    with hold(broker, path + "&wait_ms=5000", BATCH) as puller:
        produce(broker, "d2", b"x" * 700, "?tags=T&keys=k1")
        status, headers, body = read_response(puller)
    assert status == 200 and headers["x-tidemq-status"] == "FOUND" and headers["x-tidemq-count"] == "1"
    again = get(broker, path, BATCH)
    assert (status, body) == (again[0], again[2])
    named = ("x-tidemq-next-offset", "x-tidemq-min-offset", "x-tidemq-max-offset", "content-type")
    assert {h: headers[h] for h in named} == {h: again[1][h] for h in named} and headers["x-tidemq-next-offset"] == "2"
    assert counters(broker)[1] == delivered + 1


def test_the_early_reply_leaves_before_the_pass_and_what_its_consumer_asks_next_is_dispatched(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = lane_broker(make_broker, "d3")
    writes: list[tuple[bool, bool]] = []  # (early, the pass still pending) of each reply written at once
    write_now = ReplyTransport.write_now

    def recorded(self: ReplyTransport, data: bytes, early: bool = False) -> None:
        barrier = self._barrier
        writes.append((early, barrier is not None and barrier.pending))
        write_now(self, data, early)

    monkeypatch.setattr(ReplyTransport, "write_now", recorded)
    with hold(broker, "/v1/topics/d3/queues/0/messages?offset=0&wait_ms=5000") as puller:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as producer:
            producer.sendall(produce_request("d3", b"keyed", RAW, query="?keys=order-17"))
            status, _, reply = read_response(puller)
            assert status == 200 and orjson.loads(reply)["next_offset"] == 1
            # Asked the moment the reply is read: the message is in its queue and in the index.
            status, _, again = get(broker, "/v1/topics/d3/queues/0/messages?offset=0")
            assert status == 200 and [m["body"] for m in orjson.loads(again)["messages"]] == ["keyed"]
            status, _, found = get(broker, "/v1/topics/d3/messages?key=order-17")
            assert status == 200 and [m["body"] for m in orjson.loads(found)["messages"]] == ["keyed"]
            assert read_response(producer)[0] == 201
    assert writes[0] == (True, True)  # the pull's reply, written with the produce's pass still to run


def test_filtered_pulls_are_left_to_the_dispatch_pass(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "d4")
    woken, delivered = counters(broker)
    with hold(broker, "/v1/topics/d4/queues/0/messages?offset=0&wait_ms=5000&tag=T") as puller:
        produce(broker, "d4", b"tagged", "?tags=T")
        status, _, reply = read_response(puller)
    assert status == 200 and [m["body"] for m in orjson.loads(reply)["messages"]] == ["tagged"]
    assert counters(broker) == (woken + 1, delivered)


def test_a_batch_answers_a_held_pull_with_what_a_read_of_its_max_answers(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "d8")
    woken, delivered = counters(broker)
    batch = orjson.dumps({"messages": [{"body": b} for b in ("one", "two", "three")]})
    for offset, (query, want) in enumerate((("&max=2", ["one", "two"]), ("", ["one", "two", "three"]))):
        path = f"/v1/topics/d8/queues/0/messages?offset={3 * offset}{query}"
        with hold(broker, path + "&wait_ms=5000") as puller:
            produce(broker, "d8", batch, content_type=b"application/json")
            status, _, reply = read_response(puller)
        assert status == 200 and [m["body"] for m in orjson.loads(reply)["messages"]] == want
        assert (status, reply) == get(broker, path)[::2]  # the same next_offset and views as a read of its max now
    assert counters(broker) == (woken + 2, delivered + 2)


def test_a_puts_spans_are_its_messages_offsets_and_sizes() -> None:
    one = EncodedItems(struct.pack("=qq", 4096, 180), 7, 0, 0, b"")
    three = EncodedItems(struct.pack("=6q", 0, 10, 10, 20, 30, 5), 7, 0, 0, b"")
    assert one.spans() == [(4096, 180)] and three.spans() == [(0, 10), (10, 20), (30, 5)]


def test_get_put_message_answers_as_get_message_does_once_dispatched(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "d5", store_extra="max_transfer_bytes_on_message_in_memory = 50000\n")
    assert broker.started is not None
    store = broker.started.broker.store
    assert isinstance(store, DefaultMessageStore)

    def same(spans: list[tuple[int, int]], first: int, max_count: int, max_offset: int, count: int) -> None:
        early = store.get_put_message("d5", 0, first, spans, max_count)
        read = store.get_message("", "d5", 0, first, max_count)
        assert early is not None and early.message_count == count
        got = [(r.status, r.next_begin_offset, r.min_offset, r.start_offset, bytes(r.data), bytes(r.meta)) for r in (early, read)]
        assert got[0] == got[1] and early.max_offset == max_offset

    result = store.put_message(MessageInner(topic="d5", queue_id=0, body=b"stored"))
    (item,) = result.items
    span = (item.wrote_offset, item.wrote_bytes)
    same([span], item.logics_offset, 1, 1, 1)
    same([span], item.logics_offset, 32, 1, 1)
    # A put of four messages of 20 KB: a read takes two of them (max_transfer_bytes_on_message_in_memory, 50,000 here),
    # or fewer by its max.
    result = store.put_messages([MessageInner(topic="d5", queue_id=0, body=bytes([i]) * 20_000) for i in range(4)])
    spans = [(i.wrote_offset, i.wrote_bytes) for i in result.items]
    assert len(spans) == 4 and all(spans[i][0] + spans[i][1] == spans[i + 1][0] for i in range(3))
    same(spans, 1, 32, 5, 2)
    same(spans, 1, 1, 5, 1)
    # Nothing where the spans say, or spans that do not follow one another: None.
    (phy, size) = span
    for wrong in ([(phy + 1, size)], [(phy, size - 1)], [(1 << 40, size)], [spans[0], spans[2]], []):
        assert store.get_put_message("d5", 0, item.logics_offset, wrong, 32) is None


def test_consumers_following_a_queue_get_every_message_once_in_order(make_broker: MakeBroker) -> None:
    """Eight consumers each follow the queue with held pulls while a producer sends single produces (answered by their
    put when a pull waits at their offset) and, every seventh, a batch of two (left to the pass): each consumer gets
    every message exactly once, in the order stored."""
    broker = lane_broker(make_broker, "d6")
    _, delivered = counters(broker)
    sent: list[str] = []
    for i in range(120):
        sent += [f"{i}a", f"{i}b"] if i % 7 == 6 else [f"{i}"]
    got: dict[int, list[str]] = {}
    failures: list[BaseException] = []

    def consume(index: int) -> None:
        bodies: list[str] = []
        offset = 0
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
                while len(bodies) < len(sent):
                    sock.sendall(f"GET /v1/topics/d6/queues/0/messages?offset={offset}&wait_ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                    status, _, reply = read_response(sock)
                    assert status == 200, reply
                    answer = orjson.loads(reply)
                    bodies += [m["body"] for m in answer.get("messages", [])]
                    offset = answer["next_offset"]
        except BaseException as e:  # reported by the test's thread
            failures.append(e)
        got[index] = bodies

    consumers = [threading.Thread(target=consume, args=(i,)) for i in range(8)]
    for thread in consumers:
        thread.start()
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as producer:
        i = 0
        while i < len(sent):
            if sent[i].endswith("a"):
                body = orjson.dumps({"messages": [{"body": sent[i]}, {"body": sent[i + 1]}]})
                producer.sendall(produce_request("d6", body, b"application/json"))
                i += 2
            else:
                producer.sendall(produce_request("d6", sent[i].encode(), RAW))
                i += 1
            assert read_response(producer)[0] == 201
            if i % 5 == 0:
                time.sleep(0.002)  # let the consumers come back and be held
    for thread in consumers:
        thread.join(PATIENCE_S)
    assert failures == [] and all(not thread.is_alive() for thread in consumers)
    assert got == {i: sent for i in range(8)}
    assert counters(broker)[1] > delivered  # some were answered by their put
