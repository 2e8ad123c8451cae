"""Slow and numerous clients against a real server process, over raw sockets.

A connection that never completes its headers is closed; a body that never arrives whole is
answered 408 REQUEST_TIMEOUT and nothing is stored; connections past max_connections get 503
TOO_MANY_CONNECTIONS while /healthz is still served; held pulls past max_held_pulls get 503
TOO_MANY_WAITERS, never a reset, even when the process starts with a low descriptor limit.
"""

from __future__ import annotations

import selectors
import socket
import time

import orjson
import pytest

from app.settings import BrokerSettings
from core.errors import ConfigInvalid
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, BrokerProcess, MakeBroker
from tests.app.helpers import commitlog_max
from tests.app.in_process import InProcessBroker
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
# Liveness bound of each wait (not a timing assertion: the limits under test are far shorter).
PATIENCE_S = 30.0
TIMEOUTS = "header_read_timeout_ms = 300\nbody_read_timeout_ms = 300\nkeep_alive_timeout_s = 60\n"


def connect(broker: BrokerProcess | InProcessBroker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset fails the test)."""
    chunks: list[bytes] = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length body; the connection stays usable."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of a body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def problem_code(raw: bytes, status: int) -> str:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), raw[:200]
    assert b"application/problem+json" in head.lower(), head
    code: str = orjson.loads(body)["code"]
    return code


def test_a_slowloris_connection_is_closed_with_408(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER + TIMEOUTS)
    # Headers that stop halfway: 408 REQUEST_TIMEOUT, then the connection is closed.
    with connect(broker) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
        assert problem_code(read_until_closed(sock), 408) == "REQUEST_TIMEOUT"
    # Headers that trickle in (a line every 50 ms, for ever): the bytes do not extend the deadline.
    with connect(broker) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(0.05)
        raw = b""
        deadline = time.monotonic() + PATIENCE_S
        try:
            while True:
                assert time.monotonic() < deadline, "the slow connection was never closed"
                sock.sendall(b"X-Slow: 1\r\n")
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                raw += data
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while unread header bytes were in flight: the kernel resets instead of closing
        if raw:
            assert problem_code(raw, 408) == "REQUEST_TIMEOUT"
    # An idle connection that never sends a byte is closed too (nothing to answer).
    with connect(broker) as sock:
        assert read_until_closed(sock) == b""
    assert broker.client is not None
    assert broker.client.get("/healthz").status_code == 200


@pytest.mark.parametrize("kind", ["chunked-never-ends", "short-content-length", "short-json"])
def test_a_body_that_never_arrives_whole_is_408_and_nothing_is_stored(make_broker: MakeBroker, kind: str) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER + TIMEOUTS)
    assert broker.client is not None
    assert broker.client.put("/v1/topics/slow", json={"queues": 1}).status_code == 201
    before = commitlog_max(broker.client)
    if kind == "chunked-never-ends":
        head = b"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        body = b"5\r\nhello\r\n"
    elif kind == "short-content-length":
        head = b"Content-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\n"
        body = b"only ten.."
    else:
        head = b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        body = b'{"body": "x"'
    with connect(broker) as sock:
        sock.sendall(b"POST /v1/topics/slow/messages HTTP/1.1\r\nHost: x\r\n" + head + body)
        raw = read_until_closed(sock)
    assert problem_code(raw, 408) == "REQUEST_TIMEOUT"
    assert b"connection: close" in raw.lower()
    assert commitlog_max(broker.client) == before
    assert broker.client.get("/v1/topics/slow/queues/0/messages", params={"offset": 0}).json()["status"] == "NO_NEW_MSG"


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout_and_a_busy_one_is_not(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER + "keep_alive_timeout_s = 1\n")
    assert broker.client is not None
    assert broker.client.put("/v1/topics/idle", json={"queues": 1}).status_code == 201
    health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(broker) as idle, connect(broker) as steady, connect(broker) as held:
        # Idle after one reply: closed once the timeout has passed since that reply, without a reply of its own.
        idle.sendall(health)
        assert read_response(idle)[0] == 200
        answered = time.monotonic()
        assert read_until_closed(idle) == b""
        assert time.monotonic() - answered >= 0.9
        # Requests every 0.3 s for 2.4 s (more than twice the timeout): the deadline runs from the last reply.
        for _ in range(8):
            steady.sendall(health)
            assert read_response(steady)[0] == 200
            time.sleep(0.3)
        steady.sendall(health)
        assert read_response(steady)[0] == 200
        # A pull held 2.5 s right after a reply is not cut by the keep-alive timeout; after its reply the connection
        # idles out.
        held.sendall(health)
        assert read_response(held)[0] == 200
        held.sendall(b"GET /v1/topics/idle/queues/0/messages?offset=0&wait_ms=2500 HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_response(held)
        assert (status, orjson.loads(body)["status"]) == (200, "NO_NEW_MSG")
        assert read_until_closed(held) == b""


def test_connections_past_the_bound_get_503_and_health_is_served(make_broker: MakeBroker) -> None:
    config = (
        SMALL_STORE + SMALL_BROKER + "max_connections = 4\nmax_held_pulls = 2\nkeep_alive_timeout_s = 60\nheader_read_timeout_ms = 60000\n"
    )
    broker = make_broker(config)
    assert broker.client is not None
    broker.client.close()  # its keep-alive connection would count against the bound
    kept = []
    try:
        for _ in range(4):  # the bound, each with a served request and kept alive
            sock = connect(broker)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock)[0] == 200
            kept.append(sock)
        with connect(broker) as sock:
            sock.sendall(b"GET /v1/topics HTTP/1.1\r\nHost: x\r\n\r\n")
            raw = read_until_closed(sock)
        assert problem_code(raw, 503) == "TOO_MANY_CONNECTIONS"
        assert b"retry-after: 1" in raw.lower()
        with connect(broker) as sock:  # a produce too (one the protocol would otherwise serve itself)
            sock.sendall(
                b'POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"body": "x"}'
            )
            assert problem_code(read_until_closed(sock), 503) == "TOO_MANY_CONNECTIONS"
        with connect(broker) as sock:  # monitoring still sees the broker alive
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_until_closed(sock).startswith(b"HTTP/1.1 200 ")
        # The connections within the bound are served as before.
        kept[0].sendall(b"GET /v1/topics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(kept[0])[0] == 200
    finally:
        for sock in kept:
            sock.close()


def test_held_pulls_past_the_bound_get_503_not_resets_with_a_low_descriptor_limit(make_broker: MakeBroker) -> None:
    held, excess = 300, 50
    config = SMALL_STORE + SMALL_BROKER.replace("max_wait_ms = 5000", "max_wait_ms = 60000") + f"max_held_pulls = {held}\n"
    # The process starts with fewer descriptors than held pulls: the start must make room for the bound.
    broker = make_broker(config, nofile_soft=128)
    assert broker.client is not None
    assert broker.client.put("/v1/topics/held", json={"queues": 1}).status_code == 201
    request = b"GET /v1/topics/held/queues/0/messages?offset=0&wait_ms=50000 HTTP/1.1\r\nHost: x\r\n\r\n"
    sock: object  # each connection, then each ready key's file object (checked to be a socket)
    socks = []
    selector = selectors.DefaultSelector()
    try:
        for _ in range(held + excess):
            sock = connect(broker)
            sock.sendall(request)
            socks.append(sock)
            selector.register(sock, selectors.EVENT_READ)
        answered: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + PATIENCE_S
        while len(answered) < excess:
            assert time.monotonic() < deadline, f"only {len(answered)} of {excess} pulls were answered"
            for key, _ in selector.select(1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                selector.unregister(sock)
                answered[sock] = read_response(sock)[2]  # a reset raises here
        codes = [orjson.loads(body)["code"] for body in answered.values()]
        assert codes == ["TOO_MANY_WAITERS"] * excess
        metrics = broker.client.get("/metrics").text
        assert f"tidemq_held_pulls {held}\n" in metrics
        assert not selector.select(0.2), "a held pull was answered although it should wait"
    finally:
        selector.close()
        for sock in socks:
            sock.close()


def test_a_hard_descriptor_limit_below_the_bounds_lowers_them_so_they_still_answer(make_broker: MakeBroker) -> None:
    """The hard limit cannot fit max_connections: the bounds are lowered (WARNING) and still answer, no resets."""
    config = SMALL_STORE + SMALL_BROKER.replace("max_wait_ms = 5000", "max_wait_ms = 60000")
    config += "max_held_pulls = 400\nmax_connections = 500\nreserved_fds = 80\n"
    broker = make_broker(config, nofile_soft=200, nofile_hard=200)
    assert broker.client is not None
    assert "cannot hold max_connections 500 plus reserved_fds 80" in broker.log()
    metrics = broker.client.get("/metrics").text
    bound = int(metrics.split("\ntidemq_held_pulls_max ")[1].split()[0])
    assert 0 < bound < 200
    assert broker.client.put("/v1/topics/low", json={"queues": 1}).status_code == 201
    request = b"GET /v1/topics/low/queues/0/messages?offset=0&wait_ms=50000 HTTP/1.1\r\nHost: x\r\n\r\n"
    sock: object  # each connection, then each ready key's file object (checked to be a socket)
    socks = []
    selector = selectors.DefaultSelector()
    try:
        for _ in range(bound + 20):
            sock = connect(broker)
            sock.sendall(request)
            socks.append(sock)
            selector.register(sock, selectors.EVENT_READ)
        codes: list[str] = []
        deadline = time.monotonic() + PATIENCE_S
        while len(codes) < 20:
            assert time.monotonic() < deadline, f"only {len(codes)} of 20 pulls were answered"
            for key, _ in selector.select(1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                selector.unregister(sock)
                status, _, body = read_response(sock)  # a reset raises here
                assert status == 503
                codes.append(orjson.loads(body)["code"])
        assert set(codes) <= {"TOO_MANY_WAITERS", "TOO_MANY_CONNECTIONS"}, codes
        assert f"tidemq_held_pulls {bound}\n" in broker.client.get("/metrics").text
    finally:
        selector.close()
        for sock in socks:
            sock.close()


def test_held_pulls_must_fit_below_the_connection_bound() -> None:
    with pytest.raises(ConfigInvalid, match="max_held_pulls must be below max_connections"):
        BrokerSettings(max_held_pulls=100, max_connections=100).validate()
    with pytest.raises(ConfigInvalid, match="header_read_timeout_ms"):
        BrokerSettings(header_read_timeout_ms=0).validate()


def broker_rss_bytes(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    with open(f"/proc/{broker.proc.pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_header_bytes_are_bounded_per_request_and_over_all_connections(make_broker: MakeBroker) -> None:
    """100 KB of header lines is 431 HEADERS_TOO_LARGE; 60 connections each holding 60 KB of unfinished
    headers pass the 1 MiB total: the ones past it are answered 503 HEADERS_BUSY and closed, and the
    broker's resident memory grows by less than the bytes the clients sent."""
    limits = "max_header_bytes = 65536\nmax_header_bytes_total = 1048576\nheader_read_timeout_ms = 30000\n"
    broker = make_broker(SMALL_STORE + SMALL_BROKER + limits, process=True)
    assert isinstance(broker, BrokerProcess)  # process=True: its resident memory is read from /proc
    sock = connect(broker)
    # Less than one socket read (the server reads all of it, so its close is a FIN and the reply arrives).
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"x-filler: " + b"a" * 100_000)
    assert problem_code(read_until_closed(sock), 431) == "HEADERS_TOO_LARGE"
    sock.close()

    rss_before = broker_rss_bytes(broker)
    socks, refused = [], 0
    for _ in range(60):
        s = connect(broker)
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"x-filler: " + b"b" * 60_000)  # headers never finished
        socks.append(s)
    for s in socks:
        s.settimeout(0.5)
        try:
            raw = read_until_closed(s)
        except TimeoutError:
            continue  # still held: within the total
        assert problem_code(raw, 503) == "HEADERS_BUSY"
        refused += 1
    assert 60 - 1_048_576 // 60_000 - 1 <= refused <= 60 - 1_048_576 // 61_000 + 1, refused
    assert broker_rss_bytes(broker) - rss_before < 60 * 60_000, "the refused headers were kept"
    for s in socks:
        s.close()
    # The held bytes are given back when their connections close: a full request is served again.

    def served() -> bool:
        with connect(broker) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"x-filler: " + b"c" * 60_000 + b"\r\n\r\n")
            status, _, _ = read_response(s)
        return status == 200

    wait_for(served, PATIENCE_S, what="a full request to be served again", poll_s=0.05)
