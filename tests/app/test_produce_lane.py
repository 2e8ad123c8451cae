"""The produce lane (app/produce_lane.py, app/_native/produce_request.c): a raw produce served from the connection's read.

What must hold:
- `produce_request` takes exactly one form (POST to a topic's messages, HTTP/1.1, no query, an octet-stream body within
  the limit, no header but the harmless ones and one Authorization, a topic of [A-Za-z0-9_-]) and returns None for each
  form that breaks a rule, so nothing else reaches the lane;
- through a real broker over raw sockets, a raw produce the lane serves is answered as the direct way answers it
  (status, head names, body fields, the stored message, the request counted under the produce route); every request
  the lane declines (another form, a missing, reserved or read-only topic, a body too large) gets the direct way's
  answer and nothing is stored twice; with the access log on the lane serves nothing (the log has the line); with an
  ACL it serves the produces the gate lets through unaudited and leaves every other to the gate, which answers it
  (401, 403, 429), its rate limit charged once a request;
- `Connection: close` closes after the reply; under SYNC_FLUSH the reply is held until its flush (a request sent
  meanwhile waits behind it), past its wait it is the 504 an awaited wait answers with the message stored, and at the
  shutdown deadline the connection closes unanswered.
"""

from __future__ import annotations

import gc
import socket
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from app._http import produce_request as read_produce
from app.produce_lane import LaneReply, ProduceLane
from store.logfile.group_commit_service import GroupCommitService
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.in_process import InProcessBroker
from tests.app.test_direct_requests import (
    PATIENCE_S,
    Replies,
    SlowDisk,
    assert_problems,
    collector_off,
    cut_at_the_shutdown_deadline,
    direct_of,
    head_names,
    not_confirmed,
    produce_request,
    sync_broker,
)
from tests.app.test_slow_clients import read_response, read_until_closed

pytestmark = pytest.mark.timeout(120)
MAX_HEAD = 65_536
MAX_BODY = 4_096
RAW = b"application/octet-stream"


def raw(topic: str = "t", body: bytes = b"abc", fields: str = "Host: x\r\n", version: str = "1.1", target: str = "") -> bytes:
    """A raw produce's bytes; `target` replaces the topic's messages path."""
    path = target or f"/v1/topics/{topic}/messages"
    head = f"POST {path} HTTP/{version}\r\n{fields}Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def test_the_reader_takes_the_one_form() -> None:
    assert read_produce(raw("orders-1_A"), MAX_HEAD, MAX_BODY) == (b"orders-1_A", b"", b"abc", True, False, None)
    fields = "HOST: x\r\nUser-Agent: c\r\nAccept: */*\r\nAccept-Encoding: gzip\r\nConnection: keep-alive\r\n"
    assert read_produce(raw(fields=fields), MAX_HEAD, MAX_BODY) == (b"t", b"", b"abc", True, False, None)
    assert read_produce(raw(fields="Connection: close\r\n"), MAX_HEAD, MAX_BODY) == (b"t", b"", b"abc", False, False, None)
    upper = raw().replace(b"application/octet-stream", b"Application/Octet-Stream")
    assert read_produce(upper, MAX_HEAD, MAX_BODY) == (b"t", b"", b"abc", True, False, None)
    json = raw(body=b"{}").replace(b"application/octet-stream", b"application/JSON")
    assert read_produce(json, MAX_HEAD, MAX_BODY) == (b"t", b"", b"{}", True, True, None)
    query = raw(target="/v1/topics/t/messages?queue_id=3&tags=a")
    assert read_produce(query, MAX_HEAD, MAX_BODY) == (b"t", b"queue_id=3&tags=a", b"abc", True, False, None)
    assert read_produce(raw(target="/v1/topics/t/messages?"), MAX_HEAD, MAX_BODY) == (b"t", b"", b"abc", True, False, None)
    assert read_produce(raw(body=b"x" * MAX_BODY), MAX_HEAD, MAX_BODY) is not None
    assert read_produce(raw("t" * 127), MAX_HEAD, MAX_BODY) is not None
    token = raw(fields="Host: x\r\nAuthorization: Bearer abc.def\r\n")
    assert read_produce(token, MAX_HEAD, MAX_BODY) == (b"t", b"", b"abc", True, False, b"Bearer abc.def")


@pytest.mark.parametrize(
    "request_bytes",
    [
        raw(target="/v1/topics/a%20b/messages"),  # an escape
        raw(target="/v1/topics/a?b/messages"),  # a query before the route's end
        raw(target="/v1/topics/a/b/messages"),  # another route
        raw(target="/v1/topics/t/messages/batch"),  # the binary batch
        raw(target="/v1/topics//messages"),  # no topic
        raw(target="/v1/groups/g/topics/t/receive"),
        raw("t" * 128),  # past the topic bound
        raw(fields="Idempotency-Key: k\r\n"),  # a header that changes the answer
        raw(fields="X-Other: 1\r\n"),
        raw(fields="Authorization: Bearer x\r\nAuthorization: Bearer y\r\n"),  # two: the general path answers
        raw(version="1.0"),
        raw(body=b""),  # empty: the direct way answers it
        raw(body=b"x" * (MAX_BODY + 1)),  # past the limit: the direct way answers 413
        raw().replace(b"application/octet-stream", b"application/octet-stream; x=1"),
        raw().replace(b"application/octet-stream", b"application/json; charset=utf-8"),
        raw().replace(b"application/octet-stream", b"text/plain"),
        raw().replace(
            b"Content-Type: application/octet-stream\r\n", b"Content-Type: application/json\r\nContent-Type: application/json\r\n"
        ),
        raw().replace(b"Content-Type: application/octet-stream\r\n", b""),  # no media type
        raw().replace(b"POST", b"GET", 1),
        raw()[:-1],  # part of the body
        raw() + raw(),  # pipelined
        raw() + b"x",  # more than its body
    ],
)
def test_the_reader_leaves_every_other_form(request_bytes: bytes) -> None:
    assert read_produce(request_bytes, MAX_HEAD, MAX_BODY) is None


def test_the_reader_keeps_to_the_head_bound() -> None:
    request_bytes = raw()
    head = request_bytes.index(b"\r\n\r\n") + 4
    assert read_produce(request_bytes, head, MAX_BODY) is not None
    assert read_produce(request_bytes, head - 1, MAX_BODY) is None


def lane_of(broker: InProcessBroker) -> ProduceLane:
    lane = direct_of(broker).lane
    assert lane is not None, "the lane is on by default"
    return lane


def lane_broker(make_broker: MakeBroker, topic: str, extra: str = "", store_extra: str = "") -> InProcessBroker:
    """An in-process broker (its server's parts are read) with `topic` of one queue (`extra`: more broker settings,
    `store_extra`: more store settings)."""
    broker = make_broker(SMALL_STORE + store_extra + SMALL_BROKER + extra)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    assert broker.client.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    return broker


def bodies(broker: InProcessBroker, topic: str) -> list[str]:
    assert broker.client is not None
    got = broker.client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
    return [m["body"] for m in got.get("messages", [])]


def test_a_raw_produce_is_answered_as_the_direct_way_answers_it(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "l1")
    assert broker.client is not None
    direct, lane = direct_of(broker), lane_of(broker)
    served, direct_served = lane.served, direct.served
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("l1", b"hello", RAW))
        status, names, reply = head_names(sock)
        assert (lane.served, direct.served) == (served + 1, direct_served)
        direct.lane = None  # the same request the direct way
        try:
            sock.sendall(produce_request("l1", b"hello", RAW))
            status_direct, names_direct, reply_direct = head_names(sock)
        finally:
            direct.lane = lane
        assert (lane.served, direct.served) == (served + 1, direct_served + 1)
    assert status == status_direct == 201
    assert names == names_direct == ["date", "content-length", "content-type"]
    assert sorted(reply) == sorted(reply_direct)
    assert (reply["queue_id"], reply["queue_offset"], reply_direct["queue_offset"]) == (0, 0, 1)
    assert reply["msg_id"] != reply_direct["msg_id"] and reply["offset_msg_id"] != reply_direct["offset_msg_id"]
    assert reply_direct["commitlog_offset"] > reply["commitlog_offset"]
    assert bodies(broker, "l1") == ["hello", "hello"]
    got = broker.client.get("/v1/topics/l1/queues/0/messages", params={"offset": 0}).json()["messages"]
    assert [m["msg_id"] for m in got] == [reply["msg_id"], reply_direct["msg_id"]]
    assert broker.started is not None
    store = broker.started.broker.store
    stored = [store.look_message_by_offset(r["commitlog_offset"]) for r in (reply, reply_direct)]
    assert stored[0] is not None and stored[1] is not None
    assert stored[0]["born_host"] == stored[1]["born_host"] and stored[0]["properties"].keys() == stored[1]["properties"].keys()
    metrics = broker.client.get("/metrics").text
    assert 'tidemq_http_requests_total{route="/v1/topics/{topic}/messages",method="POST",status="201"} 2' in metrics


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (orjson.dumps({"body": "hello", "tags": "a", "keys": ["k1", "k2"], "properties": {"p": "v"}}), "message"),
        (orjson.dumps({"messages": [{"body": "one", "queue_id": 0}, {"body": "two", "queue_id": 0, "tags": "b"}]}), "batch"),
    ],
    ids=["single", "batch"],
)
def test_a_json_produce_is_answered_as_the_direct_way_answers_it(make_broker: MakeBroker, body: bytes, kind: str) -> None:
    broker = lane_broker(make_broker, "l9")
    assert broker.client is not None and broker.started is not None
    direct, lane = direct_of(broker), lane_of(broker)
    served = lane.served
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("l9", body))
        status, names, reply = head_names(sock)
        direct.lane = None
        try:
            sock.sendall(produce_request("l9", body))
            status_direct, names_direct, reply_direct = head_names(sock)
        finally:
            direct.lane = lane
    assert lane.served == served + 1 and status == status_direct == 201
    assert names == names_direct == ["date", "content-length", "content-type"]
    assert reply["kind"] == reply_direct["kind"] == kind and sorted(reply) == sorted(reply_direct)
    ours, theirs = (r["results"] if kind == "batch" else [r] for r in (reply, reply_direct))
    assert [sorted(r) for r in ours] == [sorted(r) for r in theirs]
    store = broker.started.broker.store
    found = [store.look_message_by_offset(r["commitlog_offset"]) for r in [*ours, *theirs]]
    stored = [m for m in found if m is not None]
    assert len(stored) == 2 * len(ours)
    views = [(m["body"], {k: v for k, v in m["properties"].items() if k != "UNIQ_KEY"}, list(m["properties"])) for m in stored]
    assert views[: len(ours)] == views[len(ours) :]  # the same bodies, properties and property order


def test_what_the_lane_declines_gets_the_direct_ways_answer(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "l2")
    assert broker.client is not None
    assert broker.client.put("/v1/topics/l2ro", json={"queues": 1, "perm": "r"}).status_code == 201
    lane = lane_of(broker)
    served = lane.served
    cases = [
        (produce_request("nope", b"x", RAW), 404, "TOPIC_NOT_FOUND"),
        (produce_request("l2ro", b"x", RAW), 403, "TOPIC_NOT_WRITABLE"),
        (produce_request("l2", b"x" * 131_073, RAW), 413, "BODY_TOO_LARGE"),
        (produce_request("RMQ_SYS_TRANS_HALF_TOPIC", b"x", RAW), 403, "TOPIC_RESERVED"),
        (produce_request("l2", b"x", RAW, query="?queue_id=5"), 404, "QUEUE_NOT_FOUND"),
        (produce_request("l2", b"x", RAW, query="?tags=a&tags=b"), 400, "REQUEST_INVALID"),
        (produce_request("l2", b'{"body": '), 400, "BODY_INVALID"),
        (produce_request("l2", b'{"body": "x", "queue_id": 5}'), 404, "QUEUE_NOT_FOUND"),
        (produce_request("l2", b'{"body": "x"}', query="?queue_id=5"), 404, "QUEUE_NOT_FOUND"),
        (produce_request("nope", b'{"body": "x"}'), 404, "TOPIC_NOT_FOUND"),
    ]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        assert_problems(sock, cases)
        sock.sendall(produce_request("l2", b"later", RAW, query="?delay_level=1"))  # a query the lane leaves
        assert read_response(sock)[0] == 201
        sock.sendall(produce_request("l2", b"caps", b"Application/Octet-Stream"))  # not offered to the lane
        assert read_response(sock)[0] == 201
        sock.sendall(produce_request("l2", b'{"body": "later", "delay_level": 1}'))  # a JSON body the lane leaves
        assert read_response(sock)[0] == 201
        sock.sendall(produce_request("l2", b'{"body": "queried"}', query="?queue_id=0"))  # a JSON body with a query
        assert read_response(sock)[0] == 201
    assert lane.served == served
    assert bodies(broker, "l2") == ["caps", "queried"] and bodies(broker, "l2ro") == []  # the delayed ones are not due yet


def test_a_query_the_lane_takes_stores_what_the_direct_way_stores(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "l8")
    assert broker.client is not None and broker.started is not None
    direct, lane = direct_of(broker), lane_of(broker)
    served = lane.served
    query = "?queue_id=0&tags=blue&keys=k1,,k2"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("l8", b"q", RAW, query=query))
        reply = read_response(sock)
        direct.lane = None
        try:
            sock.sendall(produce_request("l8", b"q", RAW, query=query))
            reply_direct = read_response(sock)
        finally:
            direct.lane = lane
    assert lane.served == served + 1 and reply[0] == reply_direct[0] == 201
    store = broker.started.broker.store
    found = [store.look_message_by_offset(orjson.loads(r[2])["commitlog_offset"]) for r in (reply, reply_direct)]
    stored = [m for m in found if m is not None]
    assert len(stored) == 2
    props = [{k: v for k, v in m["properties"].items() if k != "UNIQ_KEY"} for m in stored]
    assert props[0] == props[1] == {"TAGS": "blue", "KEYS": "k1 k2"}
    assert list(stored[0]["properties"]) == list(stored[1]["properties"])  # the same order, so the same bytes


def test_connection_close_closes_after_the_reply(make_broker: MakeBroker) -> None:
    broker = lane_broker(make_broker, "l3")
    lane = lane_of(broker)
    served = lane.served
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("l3", b"bye", RAW, extra=b"Connection: close\r\n"))
        got = read_until_closed(sock)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 ") and b"\r\nconnection: close" in head
    assert orjson.loads(body)["queue_offset"] == 0 and lane.served == served + 1
    assert bodies(broker, "l3") == ["bye"]


def lane_replies(tasks: set[Any]) -> list[LaneReply]:
    return [t for t in list(tasks) if isinstance(t, LaneReply)]  # uvicorn's task set is typed for tasks only


def wait_held(tasks: set[Any]) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not lane_replies(tasks):
        assert time.monotonic() < deadline, "the reply was not held"
        time.sleep(0.01)


def test_a_durable_raw_produce_holds_its_reply_until_its_flush(make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker, store = sync_broker(make_broker, "l4")
    assert broker.started is not None
    lane = lane_of(broker)
    held = lane.held
    tasks = broker.started.server.server_state.tasks  # what graceful shutdown waits for
    stats = broker.started.broker.http_requests
    disk = SlowDisk(store, monkeypatch)
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(produce_request("l4", b"first", RAW))
            wait_held(tasks)
            sock.sendall(produce_request("l4", b"second", RAW))  # waits behind the held reply
            sock.settimeout(0.3)
            with pytest.raises(TimeoutError):
                sock.recv(1)  # nothing is answered while its flush has not finished
            assert stats.in_flight == 1 and lane.held == held + 1
            disk.go()
            sock.settimeout(PATIENCE_S)
            reader = Replies(sock)  # the two replies may come in one read
            replies = [reader.next() for _ in range(2)]
    finally:
        disk.go()
    assert [status for status, _, _ in replies] == [201, 201]
    offsets = [orjson.loads(body)["queue_offset"] for _, _, body in replies]
    assert offsets == [0, 1]
    assert not lane_replies(tasks) and stats.in_flight == 0
    assert store.commit_log.flushed_where() >= orjson.loads(replies[1][2])["commitlog_offset"] + 1
    assert bodies(broker, "l4") == ["first", "second"]


def test_a_held_lane_reply_past_its_wait_answers_not_confirmed(make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker, store = sync_broker(make_broker, "l5", "sync_flush_timeout_ms = 100\n")
    lane = lane_of(broker)
    held = lane.held
    problem = not_confirmed(broker, SlowDisk(store, monkeypatch), produce_request("l5", b"late", RAW))
    assert problem["instance"] == "/v1/topics/l5/messages"  # the lane's problem names the request's path too
    assert lane.held == held + 1
    assert bodies(broker, "l5") == ["late"]


def test_a_flush_outlasting_the_loops_wait_is_answered_when_it_ends(make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    # The loop waits for its turn's flush at most durable_wait_in_loop_ms, then serves on: /metrics answers while
    # the disk still holds the flush and counts the wait outlasted; the produce's 201 follows the flush.
    broker, store = sync_broker(make_broker, "l7", "", "durable_wait_in_loop_ms = 50\n")
    client = broker.client
    assert client is not None
    disk = SlowDisk(store, monkeypatch)
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(produce_request("l7", b"slow disk", RAW))
            deadline = time.monotonic() + PATIENCE_S
            while metric_value(client.get("/metrics").text, "tidemq_durable_loop_waits_outlasted_total") < 1:
                assert time.monotonic() < deadline, "the loop's wait was not outlasted"
                time.sleep(0.01)
            sock.settimeout(0.2)
            with pytest.raises(TimeoutError):
                sock.recv(1)  # nothing answered while the flush is held
            sock.settimeout(PATIENCE_S)
            disk.go()
            status, _, body = read_response(sock)
    finally:
        disk.go()
    assert status == 201 and orjson.loads(body)["queue_offset"] == 0
    assert store.commit_log.flushed_where() > orjson.loads(body)["commitlog_offset"]
    text = client.get("/metrics").text
    assert metric_value(text, "tidemq_durable_groups_total") == 1
    assert metric_value(text, "tidemq_durable_loop_waits_outlasted_total") == 1


def test_a_held_pull_woken_by_a_durable_produce_is_answered_before_the_loop_waits(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's wait for a durable turn starts a hop after the turn's dispatch: the pull that dispatch woke is
    # answered while the disk still holds the flush (the loop would wait up to 1 s otherwise), the produce after it.
    broker, store = sync_broker(make_broker, "l8", "", "durable_wait_in_loop_ms = 1000\n")
    pull = b"GET /v1/topics/l8/queues/0/messages?offset=0&wait_ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n"
    disk = SlowDisk(store, monkeypatch)
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as puller:
            puller.sendall(pull)
            deadline = time.monotonic() + PATIENCE_S
            while broker.started is not None and broker.started.broker.held.held < 1:
                assert time.monotonic() < deadline, "the pull was not held"
                time.sleep(0.01)
            with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as producer:
                producer.sendall(produce_request("l8", b"delivered first", RAW))
                puller.settimeout(0.5)  # well within the loop's 1 s wait
                status, _, body = read_response(puller)
                assert (status, [m["body"] for m in orjson.loads(body)["messages"]]) == (200, ["delivered first"])
                disk.go()
                status, _, _ = read_response(producer)
                assert status == 201
    finally:
        disk.go()


def metric_value(text: str, name: str) -> float:
    """The value of an unlabelled sample of the metrics page `text`."""
    (value,) = [line.split(" ")[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


def test_a_held_lane_reply_cancelled_at_the_shutdown_deadline_closes_unanswered(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, store = sync_broker(make_broker, "l6")
    cut_at_the_shutdown_deadline(broker, SlowDisk(store, monkeypatch), produce_request("l6", b"cut", RAW), lane_replies)
    assert bodies(broker, "l6") == ["cut"]  # the flush ends later: stored, nothing written for it


def test_with_an_acl_the_lane_serves_what_the_gate_lets_through_and_leaves_it_the_rest(make_broker: MakeBroker, tmp_path: Path) -> None:
    from tests.app.acl_fixtures import BILLING, LIMITED, OPS, bearer, start_with_acl

    broker, _ = start_with_acl(make_broker, tmp_path)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    for topic in ("billing-l", "limited", "billing-secret"):
        assert broker.client.put(f"/v1/topics/{topic}", json={"queues": 1}, headers=bearer(OPS)).status_code == 201
    lane = lane_of(broker)
    served = lane.served

    def token(value: str) -> bytes:
        return b"Authorization: " + value.encode() + b"\r\n"

    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        refused = [
            (produce_request("billing-l", b"x", RAW), 401, "UNAUTHENTICATED"),  # in the lane's form, without a token
            (produce_request("billing-l", b"x", RAW, extra=token("Bearer unknown")), 401, "UNAUTHENTICATED"),
            (produce_request("billing-l", b"x", RAW, extra=token("Basic " + BILLING)), 401, "UNAUTHENTICATED"),
            (produce_request("billing-secret", b"x", RAW, extra=token("Bearer " + BILLING)), 403, "FORBIDDEN"),
        ]
        for request, status, code in refused:
            sock.sendall(request)
            got, headers, body = read_response(sock)
            assert (got, orjson.loads(body)["code"]) == (status, code), body
        assert lane.served == served
        sock.sendall(produce_request("billing-l", b"ok", RAW, extra=token("bearer " + BILLING)))
        assert read_response(sock)[0] == 201
        sock.sendall(produce_request("billing-l", b'{"body": "json"}', b"application/json", extra=token("Bearer " + BILLING)))
        assert read_response(sock)[0] == 201
        assert lane.served == served + 2
        # A burst of 2 at 1 a second: the lane serves two, the third is the gate's 429, charged once.
        answers = []
        for body in (b"1", b"2", b"3"):
            sock.sendall(produce_request("limited", body, RAW, extra=token("Bearer " + LIMITED)))
            status, headers, _ = read_response(sock)
            answers.append((status, headers.get("retry-after")))
        assert answers == [(201, None), (201, None), (429, "1")] and lane.served == served + 4
    got = broker.client.get("/v1/topics/billing-l/queues/0/messages", params={"offset": 0}, headers=bearer(OPS)).json()
    assert [m["body"] for m in got["messages"]] == ["ok", "json"]
    got = broker.client.get("/v1/topics/limited/queues/0/messages", params={"offset": 0}, headers=bearer(OPS)).json()
    assert [m["body"] for m in got["messages"]] == ["1", "2"]


def test_with_the_access_log_on_the_direct_way_logs_each_produce(make_broker: MakeBroker, caplog: pytest.LogCaptureFixture) -> None:
    broker = lane_broker(make_broker, "l7", "access_log = true\n")
    lane = lane_of(broker)
    served = lane.served
    with caplog.at_level("INFO"), socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("l7", b"logged", RAW))
        assert read_response(sock)[0] == 201
    assert lane.served == served
    assert any("/v1/topics/l7/messages" in record.getMessage() for record in caplog.records)


def test_released_lane_replies_are_freed_without_the_cyclic_collector(make_broker: MakeBroker) -> None:
    # A held reply is its connection's cycle and refers to the connection: left there, the two would wait for the
    # cyclic collector (whose pauses are the slowest replies) once the connection goes.
    broker, _ = sync_broker(make_broker, "l10")
    lane = lane_of(broker)
    held = lane.held
    with collector_off(), socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        replies = Replies(sock)
        for i in range(10):
            sock.sendall(produce_request("l10", b"m%d" % i, RAW))
            assert replies.next()[0] == 201
        alive = sum(1 for o in gc.get_objects() if type(o) is LaneReply)
    assert lane.held == held + 10
    assert alive == 0, f"{alive} released lane replies were left for the cyclic collector"


def test_keys_past_a_batch_items_property_length_are_refused_not_crashed_on(make_broker: MakeBroker) -> None:
    """A raw produce whose query gives more KEYS than a batch item's 2-byte property length holds (possible with a
    large max_header_bytes) is left by the lane to the direct way, which refuses it with a problem; the connection
    is served after it."""
    broker = lane_broker(make_broker, "l9", "max_header_bytes = 262144\n")
    lane = lane_of(broker)
    served = lane.served
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("l9", b"x", RAW, query="?keys=" + "k" * 70_000))
        status, _, body = read_response(sock)
        assert 400 <= status < 500 and orjson.loads(body)["code"] == "PROPERTIES_TOO_LARGE", body[:200]
        sock.sendall(produce_request("l9", b'{"body": "x", "keys": ["%s"]}' % (b"k" * 70_000)))  # the same in JSON
        status, _, body = read_response(sock)
        assert 400 <= status < 500 and orjson.loads(body)["code"] == "PROPERTIES_TOO_LARGE", body[:200]
        sock.sendall(produce_request("l9", b"after", RAW))
        assert read_response(sock)[0] == 201
    assert lane.served == served + 1
    assert bodies(broker, "l9") == ["after"]


def test_a_group_smaller_than_the_last_lingers_for_the_produces_of_later_turns(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lane produces on three connections. Two produces sent while the loop waits for a held flush are read in the
    # turn after it: one group of two, answered within the loop's wait, is the next group's siblings. A produce
    # alone then waits the whole linger (1 s) for another that never comes; a produce alone with another sent 20 ms
    # later on another connection is answered with it (one group, filled), long before the linger's end.
    broker, store = sync_broker(make_broker, "l9", "", "durable_wait_in_loop_ms = 1000\ndurable_group_linger_us = 1000000\n")
    client = broker.client
    assert client is not None
    assert isinstance(store.flush_service, GroupCommitService)
    group_flush = store.flush_service.group_flush
    conns = [socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) for _ in range(3)]

    def answered(conn: socket.socket) -> int:
        status, _, body = read_response(conn)
        assert status == 201, body
        offset: int = orjson.loads(body)["queue_offset"]
        return offset

    def one_then_two(tag: str) -> None:
        """A group of one (its flush held while two more produces arrive), then a group of those two."""
        disk = SlowDisk(store, monkeypatch)
        try:
            before = store.commit_log.get_max_offset()
            conns[0].sendall(produce_request("l9", f"{tag}-1".encode(), RAW))
            deadline = time.monotonic() + PATIENCE_S
            while store.commit_log.get_max_offset() == before or group_flush.requested < store.commit_log.get_max_offset():
                assert time.monotonic() < deadline, "the loop did not wait for the first produce's flush"
                time.sleep(0.005)
            conns[1].sendall(produce_request("l9", f"{tag}-2".encode(), RAW))
            conns[2].sendall(produce_request("l9", f"{tag}-3".encode(), RAW))
        finally:
            disk.go()
        for conn in conns:
            answered(conn)

    try:
        one_then_two("a")
        started = time.monotonic()
        conns[0].sendall(produce_request("l9", b"alone", RAW))
        answered(conns[0])
        alone_s = time.monotonic() - started
        one_then_two("b")
        started = time.monotonic()
        conns[0].sendall(produce_request("l9", b"first", RAW))
        time.sleep(0.02)
        conns[1].sendall(produce_request("l9", b"second", RAW))
        pair = [answered(conns[0]), answered(conns[1])]
        pair_s = time.monotonic() - started
    finally:
        for conn in conns:
            conn.close()
    assert alone_s >= 0.99  # the loop's timers (uvloop's: whole milliseconds) may end a linger a little early
    assert pair_s < alone_s and pair == [pair[0], pair[0] + 1]
    text = client.get("/metrics").text
    # a-1, a-2+a-3, alone, b-1, b-2+b-3, first+second
    assert metric_value(text, "tidemq_durable_groups_total") == 6
    assert metric_value(text, "tidemq_durable_groups_lingered_total") == 2
    assert metric_value(text, "tidemq_durable_groups_lingered_out_total") == 1
    assert bodies(broker, "l9") == ["a-1", "a-2", "a-3", "alone", "b-1", "b-2", "b-3", "first", "second"]
