"""Hot requests served by the server's protocol without an ASGI cycle (app/direct_requests.py), over raw sockets.

What must hold: the same answers as the ASGI way (status, headers, body, problems, counting), replies
in their requests' order on a pipelined connection, `Connection: close` honoured, a durable produce's reply
held until its flush (SYNC_FLUSH), a held pull continued to its reply, and the requests the protocol must not serve left to the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.direct_requests import DirectExchange, DirectRequests, _Resumed
from app.held_reply import HeldReply
from store import DefaultMessageStore
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.in_process import InProcessBroker
from tests.app.test_slow_clients import problem_code, read_response, read_until_closed

pytestmark = pytest.mark.timeout(120)
PATIENCE_S = 30.0
# A raw produce goes through the produce lane (app.produce_lane, tests/app/test_produce_lane.py); these tests are about
# the direct way, so the raw ones turn the lane off.
NO_LANE = "produce_lane = false\n"
# A broker whose produces go the direct way (the lane off): what these tests are about.
DIRECT_WAY = SMALL_STORE + SMALL_BROKER + NO_LANE


def produce_request(topic: str, body: bytes, content_type: bytes = b"application/json", extra: bytes = b"", query: str = "") -> bytes:
    return (
        f"POST /v1/topics/{topic}/messages{query} HTTP/1.1\r\nHost: x\r\n".encode()
        + b"Content-Type: " + content_type + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
    )  # fmt: skip


def chunked_produce_request(topic: str, body: bytes) -> bytes:
    """The same produce with a chunked body: no Content-Length, so it goes the ASGI way."""
    return (
        f"POST /v1/topics/{topic}/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
        + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    )  # fmt: skip


class Replies:
    """Reads one reply after another from a connection (pipelined replies may share a read)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.data = b""

    def next(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.data:
            self._more()
        head, _, self.data = self.data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(self.data) < length:
            self._more()
        body, self.data = self.data[:length], self.data[length:]
        return int(lines[0].split()[1]), headers, body

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"closed before a whole reply: {self.data!r}"
        self.data += chunk


def direct_of(broker: InProcessBroker) -> DirectRequests:  # the server's DirectRequests (in-process brokers only)
    assert broker.started is not None
    direct: DirectRequests = broker.started.app.state.direct_requests
    return direct


def head_names(sock: socket.socket) -> tuple[int, list[str], dict[str, Any]]:
    status, headers, body = read_response(sock)
    return status, list(headers), orjson.loads(body)


def test_a_produce_is_answered_as_the_app_answers_it(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d1", json={"queues": 1}).status_code == 201
    direct = direct_of(broker)
    before = direct.served
    message = orjson.dumps({"body": "hello", "tags": "a", "queue_id": 0})
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("d1", message))
        status, names, reply = head_names(sock)
        assert direct.served == before + 1
        sock.sendall(chunked_produce_request("d1", message))  # the ASGI way
        status_app, names_app, reply_app = head_names(sock)
        assert direct.served == before + 1
    assert status == status_app == 201
    assert names == names_app == ["date", "content-length", "content-type"]
    assert sorted(reply) == sorted(reply_app) and reply["queue_offset"] == 0 and reply_app["queue_offset"] == 1
    got = broker.client.get("/v1/topics/d1/queues/0/messages", params={"offset": 0}).json()
    assert [m["body"] for m in got["messages"]] == ["hello", "hello"]
    # Counted and timed like every request: under the produce route, by method and status.
    metrics = broker.client.get("/metrics").text
    assert 'tidemq_http_requests_total{route="/v1/topics/{topic}/messages",method="POST",status="201"} 2' in metrics


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """The cyclic collector off (after a collection) while the block runs: what it would free is what is left to it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def assert_problems(sock: socket.socket, cases: list[tuple[bytes, int, str]]) -> None:
    """Each request of `cases`, sent on `sock` one after another, is answered with its status and problem code."""
    for request, status, code in cases:
        sock.sendall(request)
        got_status, headers, body = read_response(sock)
        assert (got_status, orjson.loads(body)["code"]) == (status, code), body
        assert headers["content-type"] == "application/problem+json"


def test_problems_are_the_apps_and_nothing_is_stored(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d2", json={"queues": 1}).status_code == 201
    direct = direct_of(broker)
    before = direct.served
    cases = [
        (produce_request("d2", b'{"body": '), 400, "BODY_INVALID"),
        (produce_request("d2", b'{"body": "x", "body": "y"}'), 400, "BODY_INVALID"),
        (produce_request("d2", b'{"body": "x"}', query="?queue_id=1&queue_id=2"), 400, "REQUEST_INVALID"),
        (produce_request("d2", b'{"body": "x", "queue_id": 5}'), 404, "QUEUE_NOT_FOUND"),
        (produce_request("d2", b"x", content_type=b"text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE"),
        (produce_request("bad%20topic", b'{"body": "x"}'), 400, "TOPIC_INVALID"),
    ]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        assert_problems(sock, cases)
    assert direct.served == before + len(cases)
    assert broker.client.get("/v1/topics/d2/queues/0/messages", params={"offset": 0}).json()["status"] == "NO_NEW_MSG"


def test_pipelined_requests_are_answered_in_order(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d3", json={"queues": 1}).status_code == 201
    produce = produce_request("d3", orjson.dumps({"body": "p", "queue_id": 0}))
    # Produces, a request of the app and a held pull between them, all in one write.
    held_pull = b"GET /v1/topics/d3/queues/0/messages?offset=2&wait_ms=300 HTTP/1.1\r\nHost: x\r\n\r\n"
    health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce + produce + health + held_pull + produce + produce)
        reader = Replies(sock)
        replies = [reader.next() for _ in range(6)]
    statuses = [status for status, _, _ in replies]
    assert statuses == [201, 201, 200, 200, 201, 201]
    offsets = [orjson.loads(body)["queue_offset"] for status, _, body in replies if status == 201]
    assert offsets == [0, 1, 2, 3]
    assert orjson.loads(replies[3][2])["status"] == "NO_NEW_MSG"  # the pull ran after the produces before it only


def test_connection_close_and_http_1_0_are_honoured(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d4", json={"queues": 1}).status_code == 201
    body = orjson.dumps({"body": "c", "queue_id": 0})
    close = produce_request("d4", body, extra=b"Connection: close\r\n")
    old = produce_request("d4", body).replace(b"HTTP/1.1\r\n", b"HTTP/1.0\r\n", 1)
    for request in (close, old):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(request)
            raw = read_until_closed(sock)  # the server closes after the reply
        head, _, rest = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 201 ") and b"\r\nconnection: close" in head.lower()
        assert orjson.loads(rest)["queue_id"] == 0
    assert broker.client.get("/v1/topics/d4/queues/0/messages", params={"offset": 0}).json()["next_offset"] == 2


def test_a_body_in_pieces_is_served_whole(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d5", json={"queues": 1}).status_code == 201
    text = "y" * 5000
    request = produce_request("d5", orjson.dumps({"body": text, "queue_id": 0}))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start in range(0, len(request), 700):
            sock.sendall(request[start : start + 700])
            time.sleep(0.005)
        status, _, _ = read_response(sock)
    assert status == 201
    got = broker.client.get("/v1/topics/d5/queues/0/messages", params={"offset": 0}).json()
    assert [m["body"] for m in got["messages"]] == [text]


class SlowDisk:
    """A disk that stalls: no flush of the store's commitlog starts until `go` (the only way to hold a group commit
    still while its produce's reply is held). The group commit's thread stops at its next flush of its own or before
    it lends the next file to its native flusher; made, the thread is stopped there."""

    def __init__(self, store: DefaultMessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        held = threading.Event()
        real_flush, real_window = store.commit_log.flush, store.commit_log.flush_window

        def held_flush(least_pages: int = 0, trim: bool = True) -> bool:
            held.set()
            self.gate.wait(PATIENCE_S)
            return real_flush(least_pages, trim)

        def held_window() -> object:
            held.set()
            self.gate.wait(PATIENCE_S)
            return real_window()

        monkeypatch.setattr(store.commit_log, "flush", held_flush)
        monkeypatch.setattr(store.commit_log, "flush_window", held_window)
        store.flush_service.wakeup()  # the native flusher's serve under way comes back to Python
        assert held.wait(PATIENCE_S), "the group commit did not stop"

    def go(self) -> None:
        self.gate.set()


def sync_broker(
    make_broker: MakeBroker, topic: str, extra: str = "", broker_extra: str = ""
) -> tuple[InProcessBroker, DefaultMessageStore]:
    """An in-process SYNC_FLUSH broker (its server's parts are read) with `topic` of one queue, and its store
    (`extra`: more store settings; `broker_extra`: more broker settings)."""
    broker = make_broker(SMALL_STORE + 'flush_disk_type = "SYNC_FLUSH"\n' + extra + SMALL_BROKER + broker_extra)
    assert isinstance(broker, InProcessBroker)
    assert broker.started is not None
    assert broker.client is not None
    assert broker.client.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    store = broker.started.broker.store
    assert isinstance(store, DefaultMessageStore)
    return broker, store


def held_replies(tasks: set[Any]) -> list[HeldReply]:
    return [t for t in list(tasks) if isinstance(t, HeldReply)]  # uvicorn's task set is typed for tasks only


def test_a_durable_produce_holds_its_reply_until_its_flush(make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker, store = sync_broker(make_broker, "d6")
    assert broker.started is not None
    direct = direct_of(broker)
    continued, released = direct.continued, direct.held_released
    tasks = broker.started.server.server_state.tasks  # what graceful shutdown waits for
    stats = broker.started.broker.http_requests
    disk = SlowDisk(store, monkeypatch)
    produce = produce_request("d6", orjson.dumps({"body": "s", "queue_id": 0}))
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(produce * 3)  # the second and third wait in uvicorn's pipeline for the first's reply
            deadline = time.monotonic() + PATIENCE_S
            while not held_replies(tasks):
                assert time.monotonic() < deadline, "the reply was not held"
                time.sleep(0.01)
            sock.settimeout(0.3)
            with pytest.raises(TimeoutError):
                sock.recv(1)  # nothing is answered while its flush has not finished
            assert stats.in_flight == 1 and direct.held_released == released
            disk.go()
            sock.settimeout(PATIENCE_S)
            reader = Replies(sock)
            replies = [reader.next() for _ in range(3)]
    finally:
        disk.go()
    assert [status for status, _, _ in replies] == [201, 201, 201]
    assert [orjson.loads(body)["queue_offset"] for _, _, body in replies] == [0, 1, 2]
    assert direct.held_released == released + 1  # held, not suspended; the app served the two behind it
    assert direct.continued == continued
    assert not held_replies(tasks) and stats.in_flight == 0
    last = orjson.loads(replies[2][2])
    assert store.commit_log.flushed_where() >= last["commitlog_offset"] + 1


def test_a_held_reply_past_its_wait_answers_not_confirmed(make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    # The disk stalls past the produce's wait (sync_flush_timeout_ms plus the server's slack): the reply held for it
    # becomes the problem an awaited wait answers, the message stored.
    broker, store = sync_broker(make_broker, "d12", "sync_flush_timeout_ms = 100\n", NO_LANE)
    assert broker.client is not None
    direct = direct_of(broker)
    released = direct.held_released
    problem = not_confirmed(broker, SlowDisk(store, monkeypatch), produce_request("d12", b"late", b"application/octet-stream"))
    assert problem["instance"] == "/v1/topics/d12/messages"
    assert direct.held_released == released + 1
    got = broker.client.get("/v1/topics/d12/queues/0/messages", params={"offset": 0}).json()
    assert [m["body"] for m in got["messages"]] == ["late"]


def not_confirmed(broker: InProcessBroker, disk: SlowDisk, request: bytes) -> dict[str, Any]:
    """Send `request`, a produce whose flush `disk` holds past its wait, and check it is answered 504
    FLUSH_DISK_TIMEOUT with `stored`; the problem (the disk is let go after)."""
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(request)
            status, headers, body = read_response(sock)
    finally:
        disk.go()
    problem: dict[str, Any] = orjson.loads(body)
    assert (status, headers["content-type"]) == (504, "application/problem+json")
    assert (problem["code"], problem["stored"]) == ("FLUSH_DISK_TIMEOUT", True)
    assert "not confirmed within" in problem["detail"]
    return problem


def cut_at_the_shutdown_deadline(broker: InProcessBroker, disk: SlowDisk, request: bytes, held_of: Callable[[set[Any]], list[Any]]) -> None:
    """Send `request`, a produce whose reply `disk` holds, cancel the held reply (`held_of` finds it in the server's
    task set) as graceful shutdown's deadline does, and check that the connection closes unanswered and the request
    leaves the in-flight count and the task set; the disk is let go after."""
    assert broker.started is not None
    tasks = broker.started.server.server_state.tasks
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(request)
            deadline = time.monotonic() + PATIENCE_S
            while not held_of(tasks):
                assert time.monotonic() < deadline, "the reply was not held"
                time.sleep(0.01)
            (held,) = held_of(tasks)
            loop = next(iter(broker.started.server.server_state.connections)).loop  # the server's
            loop.call_soon_threadsafe(held.cancel, "the graceful shutdown's deadline")
            assert read_until_closed(sock) == b""  # no reply: the connection is closed
        deadline = time.monotonic() + PATIENCE_S
        while broker.started.broker.http_requests.in_flight != 0 or held_of(tasks):
            assert time.monotonic() < deadline, "the cancelled produce stayed in flight or in the task set"
            time.sleep(0.01)
    finally:
        disk.go()


def test_a_held_reply_cancelled_at_the_shutdown_deadline_closes_its_connection_unanswered(
    make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, store = sync_broker(make_broker, "d11", broker_extra=NO_LANE)
    assert broker.client is not None
    cut_at_the_shutdown_deadline(
        broker, SlowDisk(store, monkeypatch), produce_request("d11", b"cut", b"application/octet-stream"), held_replies
    )
    # The flush ends later: nothing is written for the cancelled request, and its message is stored.
    got = broker.client.get("/v1/topics/d11/queues/0/messages", params={"offset": 0}).json()
    assert [m["body"] for m in got["messages"]] == ["cut"]


def test_requests_the_protocol_does_not_serve(make_broker: MakeBroker) -> None:
    # Hot routes off: every produce goes to the FastAPI app.
    broker = make_broker(SMALL_STORE + SMALL_BROKER + "hot_routes = false\n")
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d7", json={"queues": 1}).status_code == 201
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(produce_request("d7", orjson.dumps({"body": "h"})))
        assert read_response(sock)[0] == 201
        # A body past its limit is refused before it is read (the app's 413), not collected.
        sock.sendall(b"POST /v1/topics/d7/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                     b"Content-Length: 999999999\r\n\r\n")  # fmt: skip
        assert problem_code(read_until_closed(sock), 413) == "BODY_TOO_LARGE"
    assert direct_of(broker).served == 0


def test_a_produce_expecting_100_continue_is_answered_by_the_app(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d8", json={"queues": 1}).status_code == 201
    body = orjson.dumps({"body": "e", "queue_id": 0})
    request = produce_request("d8", body, extra=b"Expect: 100-continue\r\n")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(request[: -len(body)])  # the headers only: the body follows the interim answer
        interim = b""
        while b"\r\n\r\n" not in interim:
            chunk = sock.recv(1)
            assert chunk, "closed before the interim answer"
            interim += chunk
        assert interim.startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        assert read_response(sock)[0] == 201
    assert direct_of(broker).served == 0


def test_a_held_pull_is_continued_until_a_message_arrives_and_a_gone_client_ends_it(make_broker: MakeBroker) -> None:
    broker = make_broker(DIRECT_WAY)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.started is not None
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d9", json={"queues": 1}).status_code == 201
    direct = direct_of(broker)
    served, continued = direct.served, direct.continued
    held = b"GET /v1/topics/d9/queues/0/messages?offset=0&wait_ms=4000 HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as gone:
        gone.sendall(held)  # held, then its client goes away: the pull ends without a reply
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(held)
            deadline = time.monotonic() + PATIENCE_S
            while direct.continued < continued + 2:  # both pulls are held in tasks
                assert time.monotonic() < deadline, "the pulls were not held"
                time.sleep(0.01)
            gone.close()
            assert broker.client.post("/v1/topics/d9/messages", json={"body": "arrived", "queue_id": 0}).status_code == 201
            status, _, body = read_response(sock)
    assert status == 200 and [m["body"] for m in orjson.loads(body)["messages"]] == ["arrived"]
    assert direct.served == served + 3  # the two pulls and the produce
    deadline = time.monotonic() + PATIENCE_S
    while broker.started.broker.http_requests.in_flight != 0:  # the gone client's pull ended too, and was counted
        assert time.monotonic() < deadline, "a held pull stayed in flight"
        time.sleep(0.01)


def test_a_resumed_request_cancelled_at_the_shutdown_deadline_closes_its_connection_unanswered(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER.replace("max_wait_ms = 5000", "max_wait_ms = 60000"))  # held past the test
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.started is not None
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d10", json={"queues": 1}).status_code == 201
    direct = direct_of(broker)
    resumed = direct.resumed
    tasks = broker.started.server.server_state.tasks  # what graceful shutdown waits for, and cancels at its deadline
    held = b"GET /v1/topics/d10/queues/0/messages?offset=0&wait_ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(held)
        deadline = time.monotonic() + PATIENCE_S
        while direct.resumed < resumed + 1:
            assert time.monotonic() < deadline, "the pull was not held"
            time.sleep(0.01)
        (waiting,) = [t for t in list(tasks) if not isinstance(t, asyncio.Task)]
        assert isinstance(waiting, _Resumed)  # uvicorn's task set is typed for tasks only
        waiting.protocol.loop.call_soon_threadsafe(waiting.cancel, "the graceful shutdown's deadline")
        assert read_until_closed(sock) == b""  # no reply: the connection is closed
    deadline = time.monotonic() + PATIENCE_S
    while broker.started.broker.http_requests.in_flight != 0 or waiting in tasks:
        assert time.monotonic() < deadline, "the cancelled pull stayed in flight or in the task set"
        time.sleep(0.01)
    assert broker.client.get("/v1/topics/d10/queues/0/messages", params={"offset": 0}).json()["status"] == "NO_NEW_MSG"


def test_with_an_acl_the_gate_judges_what_the_protocol_serves(make_broker: MakeBroker, tmp_path: Path) -> None:
    from tests.app.acl_fixtures import BILLING, LIMITED, OPS, bearer, start_with_acl

    # start_with_acl is typed for a factory of BrokerProcess; make_broker's brokers serve it alike.
    broker, _ = start_with_acl(make_broker, tmp_path)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    ops = bearer(OPS)
    assert broker.client.put("/v1/topics/billing-d", json={"queues": 1}, headers=ops).status_code == 201
    direct = direct_of(broker)
    served = direct.served
    message = orjson.dumps({"body": "b", "queue_id": 0})

    def produce(topic: str, token: str | None) -> tuple[int, dict[str, str], bytes]:
        auth = b"" if token is None else b"Authorization: Bearer " + token.encode() + b"\r\n"
        with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
            sock.sendall(produce_request(topic, message, extra=auth))
            return read_response(sock)

    status, headers, body = produce("billing-d", None)
    assert (status, orjson.loads(body)["code"], headers["www-authenticate"]) == (401, "UNAUTHENTICATED", "Bearer")
    assert orjson.loads(produce("billing-d", "not-a-token")[2])["code"] == "UNAUTHENTICATED"
    assert orjson.loads(produce("billing-secret", BILLING)[2])["code"] == "FORBIDDEN"
    assert orjson.loads(produce("billing-d", LIMITED)[2])["code"] == "FORBIDDEN"  # no right on this topic
    got = broker.client.get("/v1/topics/billing-d/queues/0/messages", params={"offset": 0}, headers=ops).json()
    assert got["status"] == "NO_NEW_MSG"  # nothing refused was stored
    lane = direct.lane
    assert lane is not None
    lane_served = lane.served
    status, _, body = produce("billing-d", BILLING)
    assert status == 201 and orjson.loads(body)["queue_offset"] == 0
    # The four refused produces and the pull between them, each judged by the gate there; the produce the gate lets
    # through is the produce lane's (tests/app/test_produce_lane.py), which asks the gate too.
    assert direct.served == served + 5 and lane.served == lane_served + 1
    # A pull on the same path: judged too (the billing account may read its topic, nobody without a token).
    with socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        sock.sendall(b"GET /v1/topics/billing-d/queues/0/messages?offset=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 401
        sock.sendall(b"GET /v1/topics/billing-d/queues/0/messages?offset=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     + BILLING.encode() + b"\r\n\r\n")  # fmt: skip
        status, _, body = read_response(sock)
    assert status == 200 and [m["body"] for m in orjson.loads(body)["messages"]] == ["b"]


def test_an_answered_request_is_freed_without_the_cyclic_collector(make_broker: MakeBroker) -> None:
    # A reference cycle per hot request left every one to the cyclic collector: a collection every few dozen
    # requests, whose pauses were a held pull's slowest deliveries. With the collector off, an answered
    # exchange must be freed by its last reference going away; only a connection's last one is kept (uvicorn's
    # protocol holds its current cycle).
    broker = make_broker(DIRECT_WAY)
    assert isinstance(broker, InProcessBroker)  # its server's parts are read
    assert broker.client is not None
    assert broker.client.put("/v1/topics/d10", json={"queues": 1}).status_code == 201
    direct = direct_of(broker)
    served = direct.served
    with collector_off(), socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S) as sock:
        replies = Replies(sock)
        for i in range(20):
            sock.sendall(produce_request("d10", orjson.dumps({"body": f"m{i}", "queue_id": 0})))
            assert replies.next()[0] == 201
            sock.sendall(f"GET /v1/topics/d10/queues/0/messages?offset={i}&max=1 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert replies.next()[0] == 200
        sock.sendall(b"GET /v1/topics/d10/queues/0/messages?offset=20&wait_ms=4000 HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + PATIENCE_S
        while direct.served < served + 41:  # the held pull is in
            assert time.monotonic() < deadline, "the pull was not held"
            time.sleep(0.01)
        assert broker.client.post("/v1/topics/d10/messages", json={"body": "late", "queue_id": 0}).status_code == 201
        status, _, body = replies.next()
        assert status == 200 and [m["body"] for m in orjson.loads(body)["messages"]] == ["late"]
        alive = sum(1 for o in gc.get_objects() if type(o) is DirectExchange)
    assert direct.served == served + 42
    assert alive <= 2, f"{alive} answered exchanges were left for the cyclic collector"
