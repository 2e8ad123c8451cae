"""Event streams at scale, against real broker processes over raw sockets: streams never use up the
long-poll budget, have bounds of their own (the broker's and an account's) that refuse a stream
before its 200, leave produces and long polls answered while thousands are open, are cut when
their client stops reading, and hold no more receipt handles than they have in flight.

Latency here is only "answered while the streams are open", with bounds a loaded machine meets;
the figures are bench/stream_bench.py's."""

from __future__ import annotations

import re
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.acl_fixtures import BILLING, OPS, as_admin, bearer, start_with_acl
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.helpers import problem
from tests.app.scrape import samples, value
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)
# Liveness bound of each wait (not a timing assertion).
PATIENCE_S = 60.0


def open_streams(port: int, path: str, n: int, token: str | None = None) -> list[socket.socket]:
    """`n` event streams over raw sockets, each read up to its ": stream open" comment (a 200 asserted)."""
    auth = f"authorization: Bearer {token}\r\n" if token else ""
    request = f"GET {path} HTTP/1.1\r\nhost: t\r\naccept: text/event-stream\r\n{auth}\r\n".encode()
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)
        sock.sendall(request)
        socks.append(sock)
    for sock in socks:
        head = read_until(sock, b": stream open\n\n")
        assert head.startswith(b"HTTP/1.1 200 "), head[:300]
    return socks


def held(url: str, method: str, path: str, params: dict[str, Any]) -> Future[httpx.Response]:
    """A long poll sent from a thread of its own; its reply, once answered."""
    pool = ThreadPoolExecutor(1)

    def call() -> httpx.Response:
        with httpx.Client(base_url=url, timeout=PATIENCE_S) as own:
            return own.request(method, path, params=params)

    try:
        return pool.submit(call)
    finally:
        pool.shutdown(wait=False)


def read_until(sock: socket.socket, mark: bytes) -> bytes:
    data = b""
    while mark not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before {mark!r}: {data[:300]!r}"
        data += chunk
    return data


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    return value(samples(client.get("/metrics").text), name, **labels)


def test_streams_never_use_up_the_long_poll_budget(make_broker: MakeBroker, topic: str) -> None:
    """200 streams on a 64-queue topic once held 65 pulls each; a budget of 100 held pulls stays free."""
    broker = make_broker(SMALL_STORE + SMALL_BROKER + "max_held_pulls = 100\n", process=True)
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 64}).status_code == 201
    socks = open_streams(broker.port, f"/v1/groups/idle/topics/{topic}/stream", 200)
    try:
        assert metric(c, "tidemq_streams_open") == 200
        assert metric(c, "tidemq_held_pulls") == 0
        pull = held(broker.url, "GET", f"/v1/topics/{topic}/queues/5/messages", {"offset": 0, "wait_ms": 5000})
        receive = held(broker.url, "POST", f"/v1/groups/other/topics/{topic}/receive", {"wait_ms": 5000})
        wait_for(lambda: metric(c, "tidemq_held_pulls") == 1 + 65, PATIENCE_S, "the pull and the receive are held")
        sent = c.post(f"/v1/topics/{topic}/messages", json={"body": "to-poll", "queue_id": 5})
        assert sent.status_code == 201, sent.text
        pulled, received = pull.result(PATIENCE_S), receive.result(PATIENCE_S)
        assert pulled.status_code == 200 and [m["body"] for m in pulled.json()["messages"]] == ["to-poll"], pulled.text
        assert received.status_code == 200 and [m["body"] for m in received.json()["messages"]] == ["to-poll"], received.text
    finally:
        close_all(socks)
    wait_for(lambda: metric(c, "tidemq_streams_open") == 0, PATIENCE_S, "the streams' slots were freed")


def test_streams_past_their_bounds_are_refused_before_a_200(make_broker: MakeBroker, tmp_path: Path) -> None:
    broker, _ = start_with_acl(make_broker, tmp_path, config="max_streams = 5\nmax_streams_per_account = 3\n", process=True)
    with as_admin(broker) as admin:
        assert admin.put("/v1/topics/billing-a", json={"queues": 1}).status_code == 201
        path = "/v1/groups/billing/topics/billing-a/stream"
        mine = open_streams(broker.port, path, 3, BILLING)
        try:
            with httpx.Client(base_url=broker.url, timeout=PATIENCE_S) as c:
                refused = problem(c.get(path, headers=bearer(BILLING)), 503, "TOO_MANY_STREAMS")
                assert "account 'billing'" in refused["detail"]
                others = open_streams(broker.port, path, 2, OPS)  # another account still gets in, up to max_streams
                try:
                    refused = problem(c.get(path, headers=bearer(OPS)), 503, "TOO_MANY_STREAMS")
                    assert "5 event streams are open" in refused["detail"]
                finally:
                    close_all(others)
                assert metric(admin, "tidemq_streams_refused_total") == 2
        finally:
            close_all(mine)
        wait_for(lambda: metric(admin, "tidemq_streams_open") == 0, PATIENCE_S, "a closed stream frees its slot")
        close_all(open_streams(broker.port, path, 3, BILLING))  # the account's slots are back


def test_thousands_of_streams_leave_produces_and_long_polls_answered(make_broker: MakeBroker, topic: str) -> None:
    """3,000 streams of one group: each message goes to exactly one of them, produces and a held pull
    are answered while they are open, and nothing is cut after its 200 (no READS_BUSY, no traceback)."""
    streams = 3_000
    broker = make_broker(SMALL_STORE + SMALL_BROKER + f"max_streams = {streams}\n", process=True)
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 8}).status_code == 201
    socks = open_streams(broker.port, f"/v1/groups/many/topics/{topic}/stream?max_in_flight=1", streams)
    try:
        assert metric(c, "tidemq_streams_open") == streams
        pull = held(broker.url, "GET", f"/v1/topics/{topic}/queues/3/messages", {"offset": 0, "wait_ms": 5000})
        wait_for(lambda: metric(c, "tidemq_held_pulls") == 1, PATIENCE_S, "the pull is held")
        for i in range(20):
            started = time.monotonic()
            sent = c.post(f"/v1/topics/{topic}/messages", json={"body": f"m{i}", "queue_id": i % 8})
            assert sent.status_code == 201, sent.text
            assert time.monotonic() - started < 10.0, "a produce waited on the streams"
        pulled = pull.result(PATIENCE_S)
        assert pulled.status_code == 200 and pulled.json()["status"] == "FOUND", pulled.text
        bodies = delivered(socks, 20)
        assert sorted(bodies) == sorted(f"m{i}" for i in range(20)), "each message went to exactly one stream"
        assert metric(c, "tidemq_streams_open") == streams, "no stream was cut"
        assert metric(c, "tidemq_http_problems_total", code="READS_BUSY") == 0
    finally:
        close_all(socks)
    log = broker.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def delivered(socks: list[socket.socket], expected: int) -> list[str]:
    """The bodies of the message events the streams received (read until `expected` arrived)."""
    import selectors

    bodies: list[str] = []
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + PATIENCE_S
        while len(bodies) < expected:
            assert time.monotonic() < deadline, f"only {bodies} arrived"
            for key, _ in selector.select(timeout=1.0):
                readable = key.fileobj
                assert isinstance(readable, socket.socket)
                data = readable.recv(65536)
                bodies += re.findall(r'"body":"([^"]*)"', data.decode("utf-8", "replace"))
        time.sleep(0.5)  # a duplicate delivery would arrive now
        for key, _ in selector.select(timeout=0):
            readable = key.fileobj
            assert isinstance(readable, socket.socket)
            bodies += re.findall(r'"body":"([^"]*)"', readable.recv(65536).decode("utf-8", "replace"))
    return bodies


def test_a_stream_whose_client_stops_reading_is_cut(make_broker: MakeBroker, topic: str) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER + "send_stall_timeout_ms = 500\n", process=True)
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read: a stopped client
        sock.settimeout(PATIENCE_S)
        sock.connect(("127.0.0.1", broker.port))
        path = f"/v1/groups/stopped/topics/{topic}/stream?max_in_flight=1024&invisible_ms=600000"
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: t\r\n\r\n".encode())
        wait_for(lambda: metric(c, "tidemq_streams_open") == 1, PATIENCE_S, "the stream opened")
        body = b"x" * 60_000
        for _ in range(150):  # ~9 MB of events: more than the connection's buffers hold
            sent = c.post(f"/v1/topics/{topic}/messages", content=body, headers={"content-type": "application/octet-stream"})
            assert sent.status_code == 201, sent.text
        wait_for(lambda: metric(c, "tidemq_streams_open") == 0, PATIENCE_S, "the stalled stream was cut")
        assert metric(c, "tidemq_http_send_stalls_total") == 1


def test_a_never_acking_stream_holds_no_more_handles_than_it_has_in_flight(make_broker: MakeBroker, topic: str) -> None:
    """Expired handles are forgotten: redelivery after redelivery, the stream tracks at most max_in_flight."""
    config = SMALL_STORE + "pop_ack_margin_ms = 0\n" + SMALL_BROKER + "stream_heartbeat_ms = 200\n"
    broker = make_broker(config, process=True)
    c = broker.client
    assert c is not None
    assert c.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    for i in range(4):
        assert c.post(f"/v1/topics/{topic}/messages", json={"body": f"n{i}", "queue_id": 0}).status_code == 201
    with (
        httpx.Client(base_url=broker.url, timeout=PATIENCE_S) as own,
        own.stream("GET", f"/v1/groups/never/topics/{topic}/stream", params={"max_in_flight": 4, "invisible_ms": 1000}) as r,
    ):
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: ") and '"reconsume_times":3' in line:
                seen += 1
                if seen == 4:  # every message went out four times, three of them after it expired unacked
                    break
        assert metric(c, "tidemq_stream_unacked_messages") <= 4
