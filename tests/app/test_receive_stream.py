"""Group consumption as Server-Sent Events: events, max_in_flight, acks freeing room, heartbeats, clean end."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.acl_fixtures import ACL_TEXT, BILLING, as_admin, bearer, start_with_acl
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker, running_broker
from tests.app.helpers import problem, send
from tests.app.in_process import InProcessBroker
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
STREAM_BROKER = SMALL_BROKER + "stream_heartbeat_ms = 300\n"


@pytest.fixture(scope="module")
def sse_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess | InProcessBroker]:
    yield from running_broker(tmp_path_factory, "sse", SMALL_STORE + STREAM_BROKER)


def events(lines: Iterator[str], n: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The next `n` message events (and the comment lines seen meanwhile)."""
    got: list[dict[str, Any]] = []
    comments: list[str] = []
    kind = None
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith(":"):
            comments.append(line)
        elif line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            assert kind == "message"
            got.append(json.loads(line[len("data: ") :]))
            if len(got) == n:
                return got, comments
    return got, comments


def test_stream_holds_max_in_flight_and_an_ack_lets_the_next_one_through(
    sse_broker: BrokerProcess | InProcessBroker,
    topic: str,
) -> None:
    c = sse_broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    for i in range(3):
        send(c, topic, f"e{i}")
    url = f"/v1/groups/sse-g/topics/{topic}/stream"
    with (
        httpx.Client(base_url=sse_broker.url, timeout=10) as own,
        own.stream("GET", url, params={"max_in_flight": 2}, headers={"accept": "text/event-stream"}) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        first, _ = events(lines, 2)
        assert [m["body"] for m in first] == ["e0", "e1"] and all(m["receipt_handle"] for m in first)
        beats = []
        for line in lines:  # no third message while two are unacked; heartbeats keep coming
            beats.append(line)
            if len([b for b in beats if b.startswith(": heartbeat")]) >= 2:
                break
        assert not any(b.startswith("data: ") for b in beats)
        acked = c.post(f"/v1/groups/sse-g/topics/{topic}/ack", json={"receipt_handles": [first[0]["receipt_handle"]]})
        assert acked.json()["results"][0]["status"] == "OK"
        third, _ = events(lines, 1)
        assert [m["body"] for m in third] == ["e2"] and third[0]["reconsume_times"] == 0


def test_a_produce_reaches_an_open_stream_and_curl_reads_it(sse_broker: BrokerProcess | InProcessBroker, topic: str) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    c = sse_broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 2}).status_code == 201
    proc = subprocess.Popen(
        [curl, "-sN", "-H", "accept: text/event-stream", f"{sse_broker.url}/v1/groups/curl-g/topics/{topic}/stream"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    sender = threading.Timer(0.5, lambda: send(c, topic, "to-curl", queue_id=1))  # the test's timeline: sent while open
    try:
        sender.start()
        assert proc.stdout is not None
        got, comments = events(iter(proc.stdout.readline, ""), 1)
        assert [m["body"] for m in got] == ["to-curl"] and comments[0] == ": stream open"
    finally:
        sender.join()  # its send waits for the message to be readable: it must not outlive the test
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_bad_stream_parameters_are_refused(sse_broker: BrokerProcess | InProcessBroker, topic: str) -> None:
    c = sse_broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    url = f"/v1/groups/g/topics/{topic}/stream"
    assert problem(c.get(url, params={"max_in_flight": 0}), 400, "MAX_INVALID")
    assert problem(c.get(url, params={"max_in_flight": 1025}), 400, "MAX_INVALID")
    assert problem(c.get(url, params={"invisible_ms": 5}), 400, "INVISIBLE_TIME_INVALID")
    assert problem(c.get(url, params={"nope": 1}), 400, "REQUEST_INVALID")
    assert problem(c.get(f"/v1/groups/g/topics/none-{topic}/stream"), 404, "TOPIC_NOT_FOUND")


def test_a_stream_ends_cleanly_when_the_broker_stops(make_broker: MakeBroker, topic: str) -> None:
    broker = make_broker(SMALL_STORE + STREAM_BROKER, process=True)  # SIGTERM and its exit status
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    opened, ended = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with httpx.Client(base_url=broker.url, timeout=20) as own, own.stream("GET", f"/v1/groups/g/topics/{topic}/stream") as r:
                for line in r.iter_lines():
                    if line == ": stream open":
                        opened.set()
            ended.set()  # the chunked body was closed properly: no protocol error
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    wait_for(lambda: opened.is_set() or errors, 10, what="the stream to open")
    assert broker.stop(signal.SIGTERM) == 0
    reader.join(20)
    assert errors == [] and ended.is_set()


def end_of(lines: Iterator[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The message events, then the end event's problem document; the body must end right after it."""
    got: list[dict[str, Any]] = []
    kind = None
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            doc = json.loads(line[len("data: ") :])
            if kind == "end":
                rest = list(lines)  # the chunked body closes cleanly after the end event
                assert all(not r.strip() for r in rest), rest
                return got, doc
            got.append(doc)
    raise AssertionError(f"the stream ended without an end event after {got}")


def test_a_topic_deleted_under_a_stream_ends_it_with_an_event_saying_so(make_broker: MakeBroker, topic: str) -> None:
    broker = make_broker(SMALL_STORE + STREAM_BROKER)
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 2}).status_code == 201
    send(c, topic, "before")
    with (
        httpx.Client(base_url=broker.url, timeout=10) as own,
        own.stream("GET", f"/v1/groups/del-g/topics/{topic}/stream") as r,
    ):
        lines = r.iter_lines()
        first, _ = events(lines, 1)
        assert [m["body"] for m in first] == ["before"]
        assert c.delete(f"/v1/topics/{topic}").status_code == 204
        got, end = end_of(lines)
        assert got == [] and end["code"] == "TOPIC_NOT_FOUND" and end["status"] == 404 and topic in end["detail"]
    time.sleep(0.5)  # past a heartbeat, which once found the topic gone with a traceback
    assert "Traceback" not in broker.log() and " ERROR " not in broker.log(), broker.log()


def test_an_acl_reload_ends_the_streams_and_held_requests_it_no_longer_allows(make_broker: MakeBroker, tmp_path: Path) -> None:
    """The billing account loses SUB on its topic: its stream ends (FORBIDDEN) without another request
    arriving, its held pull and receive are answered 403, and nothing produced afterwards reaches it.
    Then the account is removed altogether: a new stream of its token ends UNAUTHENTICATED."""
    config = "acl_reload_interval_ms = 10\nstream_heartbeat_ms = 200\n"
    broker, acl = start_with_acl(make_broker, tmp_path, config=config)
    with as_admin(broker) as admin, httpx.Client(base_url=broker.url, timeout=10, headers=bearer(BILLING)) as billing:
        assert admin.put("/v1/topics/billing-a", json={"queues": 1}).status_code == 201
        pool = ThreadPoolExecutor(2)
        pull = pool.submit(billing.get, "/v1/topics/billing-a/queues/0/messages", params={"offset": 0, "wait_ms": 5000})
        receive = pool.submit(billing.post, "/v1/groups/billing/topics/billing-a/receive", params={"wait_ms": 5000})
        with billing.stream("GET", "/v1/groups/billing/topics/billing-a/stream") as r:
            lines = r.iter_lines()
            assert next(lines) == ": stream open"
            wait_held(admin, 1 + 2)
            acl.write_text(ACL_TEXT.replace('"billing-*" = "PUB|SUB"', '"billing-*" = "PUB"'))
            got, end = end_of(lines)
            assert got == [] and end["code"] == "FORBIDDEN", end
        problem(pull.result(10), 403, "FORBIDDEN")
        problem(receive.result(10), 403, "FORBIDDEN")
        pool.shutdown()
        for i in range(2):
            assert admin.post("/v1/topics/billing-a/messages", json={"body": f"after-{i}"}).status_code == 201
        received = admin.post("/v1/groups/billing/topics/billing-a/receive", params={"max": 4, "wait_ms": 2000}).json()
        assert sorted(m["body"] for m in received["messages"]) == ["after-0", "after-1"], "nothing went to the revoked stream"
        acl.write_text(ACL_TEXT.replace('"billing-*" = "PUB"', '"billing-*" = "PUB|SUB"'))
        time.sleep(0.05)  # past acl_reload_interval_ms (10 ms): the next request reloads the file
        with billing.stream("GET", "/v1/groups/billing/topics/billing-a/stream") as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            assert next(lines) == ": stream open"
            acl.write_text(ACL_TEXT.split('[[accounts]]\nname = "billing"')[0])
            got, end = end_of(lines)
            assert end["code"] == "UNAUTHENTICATED", end
        assert admin.get("/metrics").text.count("tidemq_access_revoked_total 4") == 1


def wait_held(admin: httpx.Client, count: int) -> None:
    wait_for(lambda: f"tidemq_held_pulls {count}" in admin.get("/metrics").text, 10, what=f"{count} held requests", poll_s=0.02)
