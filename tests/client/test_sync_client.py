"""tidemq.Client against a real broker on loopback: every call, its models and its typed errors."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Generator, Iterator

import pytest

from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tidemq import (
    BadRequest,
    BatchMessage,
    Client,
    ConnectFailed,
    NotFound,
    ProblemError,
    TidemqClientError,
)


@pytest.fixture
def tq(shared_broker: BrokerProcess) -> Iterator[Client]:
    c = Client(shared_broker.url, max_connections=4)
    yield c
    c.close()


def test_produce_single_raw_and_json_then_pull_both_formats(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 2)
    first = tq.produce(topic, b"order 1", tags="created", keys=["order-1", "o1"], msg_id="ID-1", queue_id=1)
    second = tq.produce(topic, "order 2", properties={"region": "eu"}, queue_id=1)
    assert (first.queue_id, first.queue_offset, first.msg_id) == (1, 0, "ID-1")
    assert second.queue_offset == 1 and len(second.offset_msg_id) == 32
    for stored in (True, False):
        got = tq.pull(topic, 1, 0, stored_format=stored)
        assert got.status == "FOUND" and got.next_offset == 2 and got.max_offset == 2
        a, b = got.messages
        assert (a.body, a.tags, a.keys, a.msg_id, a.topic, a.queue_id) == (b"order 1", "created", ["order-1", "o1"], "ID-1", topic, 1)
        assert a.offset_msg_id == first.offset_msg_id and a.commitlog_offset == first.commitlog_offset
        assert (b.body, b.properties, b.tags) == (b"order 2", {"region": "eu"}, None)


def test_json_batch_keeps_binary_bodies(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    results = tq.produce_batch(topic, [b"text", b"\xff\x00\x01", BatchMessage(b"tagged", tags="t", keys=["k"])], queue_id=0)
    assert [r.queue_offset for r in results] == [0, 1, 2]
    got = tq.pull(topic, 0, 0)
    assert [m.body for m in got.messages] == [b"text", b"\xff\x00\x01", b"tagged"]
    assert got.messages[2].tags == "t" and got.messages[2].keys == ["k"]
    assert tq.pull(topic, 0, 0, stored_format=False).messages[1].body == b"\xff\x00\x01"


def test_binary_batch_lands_in_one_queue_with_its_properties(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    messages: list[BatchMessage | bytes] = [
        b"plain",
        BatchMessage(b"full", tags="paid", keys=["a", "b"], msg_id="U-1", properties={"p": "v"}),
    ]
    result = tq.produce_binary(topic, messages, queue_id=0, with_crc=True)
    assert (result.queue_id, result.first_queue_offset, result.count) == (0, 0, 2)
    got = tq.pull(topic, 0, 0).messages
    assert [m.offset_msg_id for m in got] == result.offset_msg_ids()
    assert (got[1].body, got[1].tags, got[1].keys, got[1].msg_id, got[1].properties) == (b"full", "paid", ["a", "b"], "U-1", {"p": "v"})
    assert got[0].msg_id == got[0].offset_msg_id  # no UNIQ_KEY given: the broker adds none


def test_idempotent_produce_returns_the_first_ids_on_a_resend(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    first = tq.produce(topic, b"charge", queue_id=0, idempotency_key="charge-1")
    again = tq.produce(topic, b"charge", queue_id=0, idempotency_key="charge-1")
    assert not first.duplicate and again.duplicate
    assert (again.msg_id, again.commitlog_offset, again.queue_offset) == (first.msg_id, first.commitlog_offset, first.queue_offset)
    batch = tq.produce_batch(topic, [b"a", b"b"], queue_id=0, dedup_ids=["b-1", "b-2"])
    resent = tq.produce_batch(topic, [b"a", b"b"], queue_id=0, dedup_ids=["b-1", "b-2"])
    assert [r.duplicate for r in resent] == [True, True] and [r.msg_id for r in resent] == [r.msg_id for r in batch]
    binary = [BatchMessage(b"x", properties={"TIDEMQ_DEDUP_ID": "bin-1"})]
    assert not tq.produce_binary(topic, binary, queue_id=0).duplicate
    assert tq.produce_binary(topic, binary, queue_id=0).duplicate
    assert tq.pull(topic, 0, 0).max_offset == 4


def test_long_poll_returns_the_message_produced_while_it_waits(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    results = []
    poller = threading.Thread(target=lambda: results.append(tq.pull(topic, 0, 0, wait_ms=4000)))
    poller.start()
    tq.produce(topic, b"late", queue_id=0)
    poller.join(30)
    assert not poller.is_alive()
    assert results[0].status == "FOUND" and [m.body for m in results[0].messages] == [b"late"]


def test_long_poll_with_nothing_arriving_answers_no_new_message(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    tq.produce(topic, b"one", queue_id=0)
    got = tq.pull(topic, 0, 1, wait_ms=200)
    assert got.status == "NO_NEW_MSG" and got.messages == [] and got.next_offset == 1


def test_receive_ack_and_change_invisible(tq: Client, topic: str) -> None:
    group = "g-" + uuid.uuid4().hex[:8]
    tq.create_topic(topic, 1)
    tq.produce_batch(topic, [b"m1", b"m2", b"m3"], queue_id=0)
    received = tq.receive(group, topic, max_messages=2, invisible_ms=60_000)
    assert [m.body for m in received] == [b"m1", b"m2"] and all(m.receipt_handle for m in received)
    handle, until = tq.change_invisible(group, topic, received[0].receipt_handle or "", 120_000)
    assert handle and until > (received[0].invisible_until_ms or 0)
    acks = tq.ack(group, topic, [handle, received[1].receipt_handle or ""])
    assert [a.status for a in acks] == ["OK", "OK"]
    rest = tq.receive(group, topic, wait_ms=1000)
    assert [m.body for m in rest] == [b"m3"]
    assert tq.ack(group, topic, [rest[0].receipt_handle or ""])[0].status == "OK"
    assert tq.receive(group, topic) == []
    with pytest.raises(BadRequest) as refused:
        tq.change_invisible(group, topic, "not-a-handle", 60_000)
    assert refused.value.code == "HANDLE_INVALID"


def test_a_group_configured_with_a_filter_receives_only_what_it_passes_and_a_bad_one_is_refused(tq: Client, topic: str) -> None:
    group = "f-" + uuid.uuid4().hex[:8]
    tq.create_topic(topic, 1)
    info = tq.configure_group(group, max_reconsume_times=3, sql="region = 'eu'")
    assert info["filter"] == {"sql": "region = 'eu'"} and info["max_reconsume_times"] == 3
    for region in ("us", "eu"):
        tq.produce(topic, f"from {region}".encode(), properties={"region": region}, queue_id=0)
    assert [m.body for m in tq.pull(topic, 0, offset=0, sql="region = 'us'").messages] == [b"from us"]
    assert [m.body for m in tq.receive(group, topic, wait_ms=1000, sql="region IS NOT NULL")] == [b"from eu"]
    stream = tq.stream(group + "-s", topic, sql="region = 'eu'")
    assert isinstance(stream, Generator)  # Client.stream is a generator function: it closes
    with contextlib.closing(stream):
        first = next(stream)
        assert first.body == b"from eu"
        tq.ack(group + "-s", topic, [first.receipt_handle or ""])
    with pytest.raises(BadRequest) as refused:
        tq.configure_group(group, sql="region = ")
    assert refused.value.code == "FILTER_INVALID"
    assert tq.group(group)["filter"] == {"sql": "region = 'eu'"}  # the refused change left the group as it was
    assert tq.configure_group(group)["filter"] is None  # a PUT without sql: the group has no filter from then on


def test_stream_yields_received_messages(tq: Client, topic: str) -> None:
    group = "s-" + uuid.uuid4().hex[:8]
    tq.create_topic(topic, 1)
    tq.produce_batch(topic, [b"s1", b"s2"], queue_id=0)
    seen = []
    stream = tq.stream(group, topic, max_in_flight=8)
    assert isinstance(stream, Generator)  # Client.stream is a generator function: it closes
    for m in stream:
        seen.append(m.body)
        assert tq.ack(group, topic, [m.receipt_handle or ""])[0].status == "OK"
        if len(seen) == 2:
            break
    stream.close()
    assert seen == [b"s1", b"s2"]


def test_a_stream_the_broker_ends_raises_the_error_its_end_event_names(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    tq.produce(topic, b"d1", queue_id=0)
    stream = tq.stream("s-del-" + uuid.uuid4().hex[:8], topic)
    with pytest.raises(NotFound) as ended:
        for m in stream:
            assert m.body == b"d1"
            tq.delete_topic(topic)
    assert ended.value.code == "TOPIC_NOT_FOUND" and ended.value.status == 404 and topic in ended.value.detail


def test_problem_replies_are_typed_exceptions_with_their_code(tq: Client, topic: str) -> None:
    tq.create_topic(topic, 1)
    with pytest.raises(NotFound) as missing:
        tq.pull(topic, 7, 0)
    assert (missing.value.code, missing.value.status) == ("QUEUE_NOT_FOUND", 404) and "queue" in missing.value.detail
    with pytest.raises(BadRequest) as bad:
        tq.produce("bad topic!", b"x")
    assert bad.value.code == "TOPIC_INVALID" and isinstance(bad.value, ProblemError | TidemqClientError)
    with pytest.raises(BadRequest) as too_many:
        tq.query(topic, key="k", max_messages=0)
    assert too_many.value.code in ("MAX_INVALID", "REQUEST_INVALID")
    with pytest.raises(NotFound) as no_topic:
        tq.topic("t-never-" + uuid.uuid4().hex[:8])
    assert no_topic.value.code == "TOPIC_NOT_FOUND" and no_topic.value.problem["status"] == 404


def test_an_unreachable_broker_is_a_transport_error(shared_broker: BrokerProcess) -> None:
    from tests.loopback import free_port

    with Client(f"http://127.0.0.1:{free_port()}", connect_timeout_s=5) as c, pytest.raises(ConnectFailed) as e:
        c.topics()
    assert e.value.code == "CONNECT_FAILED" and e.value.status is None


@pytest.mark.parametrize("url", ["ftp://127.0.0.1", "http://127.0.0.1:8080/v1", "127.0.0.1:8080", "http://u:p@127.0.0.1"])
def test_a_bad_url_is_refused_at_once(url: str) -> None:
    with pytest.raises(ValueError):
        Client(url)


def test_topics_offsets_and_queries(tq: Client, topic: str) -> None:
    created = tq.create_topic(topic, 3)
    assert (created.read_queues, created.write_queues, [q.queue_id for q in created.queues or []]) == (3, 3, [0, 1, 2])
    sent = tq.produce(topic, b"find me", keys=["needle"], msg_id="FIND-1", queue_id=2)
    assert topic in [t.topic for t in tq.topics()]
    assert [m.body for m in tq.query(topic, key="needle")] == [b"find me"]
    assert [m.body for m in tq.query(topic, msg_id="FIND-1")] == [b"find me"]
    assert tq.message(sent.offset_msg_id).body == b"find me"
    assert tq.offset_at(topic, 2, 0) == 0 and tq.offset_at(topic, 2, sent.store_timestamp + 60_000) == 1
    group = "o-" + uuid.uuid4().hex[:8]
    tq.commit_offset(group, topic, 2, 1)
    lags = {q.queue_id: q for q in tq.offsets(group, topic)}
    assert (lags[2].committed_offset, lags[2].lag, lags[0].committed_offset) == (1, 0, -1)
    assert any(g["group"] == group for g in tq.groups())
    tq.delete_topic(topic)
    with pytest.raises(NotFound):
        tq.topic(topic)


def test_a_connection_the_broker_closed_while_idle_is_replaced(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER + "keep_alive_timeout_s = 1\n")
    with Client(broker.url, max_connections=1) as c:
        c.create_topic("idle", 1)
        broker_closed = threading.Event()
        broker_closed.wait(2.0)  # longer than the broker's keep-alive timeout, shorter than the client's idle expiry
        assert c.produce("idle", b"after idle", queue_id=0).queue_offset == 0
        assert [m.body for m in c.pull("idle", 0, 0).messages] == [b"after idle"]


def test_a_token_that_cannot_be_a_header_is_refused_at_once() -> None:
    with pytest.raises(ValueError):
        Client("http://127.0.0.1:8080", token="two\r\nlines")
