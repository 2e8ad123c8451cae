"""app._http.whole_request (app/_native/http_request.c) and the server's whole-request path (app/connections.py).

What must hold:
- the reader takes exactly one GET or POST in the plain forms, with the parts listed in its tuple (header names
  lowercased, leading blanks of a value skipped), and returns None for every other form: each rule has a request
  here that breaks it, and the head and field bounds are exact;
- what it takes, httptools reads the same way: one complete message, the same method, target, headers, body,
  version and keep-alive (a derandomized property test over a grammar of plain and unusual forms, which reaches
  both outcomes);
- through a real broker over raw sockets, a hot request sent in one write is served by the whole path
  (`DirectRequests.read_whole`) with the answer the httptools path gives; requests the reader leaves (split,
  pipelined, over `max_header_bytes`, not a hot route) are answered as before; `Connection: close` and HTTP/1.0
  close the connection, and a keep-alive connection serves whole request after whole request.
"""

from __future__ import annotations

import socket
from collections import Counter

import httptools
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app._http import whole_request
from app.connections import BoundedHttpProtocol
from tests.app.conftest import MakeBroker
from tests.app.in_process import InProcessBroker
from tests.app.test_direct_requests import DIRECT_WAY, PATIENCE_S, Replies, direct_of, produce_request
from tests.app.test_slow_clients import problem_code, read_until_closed
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
MAX_HEAD = 65_536
Whole = tuple[bool, bytes, list[tuple[bytes, bytes]], bytes, bool, bool]


def req(fields: str = "", body: bytes = b"", method: str = "POST", target: str = "/v1/topics/t/messages", version: str = "1.1") -> bytes:
    """A request with the header lines `fields` (each ending in CRLF) as latin-1 bytes."""
    return f"{method} {target} HTTP/{version}\r\n{fields}\r\n".encode("latin-1") + body


POST = req("Host: x\r\nContent-Length: 5\r\n", b"hello")
HEAD_OF_POST = POST.index(b"\r\n\r\n") + 4

TAKEN: dict[str, tuple[bytes, Whole]] = {
    "post with body and query": (
        req("Host: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n", b'{"body":"hi"}', target="/v1/topics/t/messages?queue_id=1&tags=a"),
        (True, b"/v1/topics/t/messages?queue_id=1&tags=a", [(b"host", b"x"), (b"content-type", b"application/json"), (b"content-length", b"13")], b'{"body":"hi"}', True, False),
    ),
    "get without body": (
        req("Host: x\r\n", method="GET", target="/v1/topics/t/queues/0/messages?offset=0"),
        (False, b"/v1/topics/t/queues/0/messages?offset=0", [(b"host", b"x")], b"", True, False),
    ),
    "http/1.0": (req("", method="GET", version="1.0"), (False, b"/v1/topics/t/messages", [], b"", False, True)),
    "http/1.0 keep-alive": (
        req("Connection: keep-alive\r\n", method="GET", version="1.0"),
        (False, b"/v1/topics/t/messages", [(b"connection", b"keep-alive")], b"", False, True),
    ),
    "connection close": (
        req("Connection: cLoSe\r\nContent-Length: 1\r\n", b"x"),
        (True, b"/v1/topics/t/messages", [(b"connection", b"cLoSe"), (b"content-length", b"1")], b"x", False, False),
    ),
    "connection keep-alive": (
        req("Connection: Keep-Alive\r\n", method="GET"),
        (False, b"/v1/topics/t/messages", [(b"connection", b"Keep-Alive")], b"", True, False),
    ),
    "mixed-case names": (
        req("HoSt: X\r\nCONTENT-length: 2\r\nX-TideMQ-Tag: AbC\r\n", b"ab"),
        (True, b"/v1/topics/t/messages", [(b"host", b"X"), (b"content-length", b"2"), (b"x-tidemq-tag", b"AbC")], b"ab", True, False),
    ),
    "empty values": (
        req("X-Empty:\r\nX-Blanks: \t \r\n", method="GET"),
        (False, b"/v1/topics/t/messages", [(b"x-empty", b""), (b"x-blanks", b"")], b"", True, False),
    ),
    "leading blanks skipped": (
        req("X-A: \t  v \tw\r\nX-B:v\r\n", method="GET"),
        (False, b"/v1/topics/t/messages", [(b"x-a", b"v \tw"), (b"x-b", b"v")], b"", True, False),
    ),
    "length with leading zeros": (
        req("Content-Length: 000000000000003\r\n", b"abc"),
        (True, b"/v1/topics/t/messages", [(b"content-length", b"000000000000003")], b"abc", True, False),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_a_plain_request_is_taken_with_its_parts(name: str) -> None:
    data, expected = TAKEN[name]
    assert whole_request(data, MAX_HEAD) == expected


NOT_TAKEN: dict[str, bytes] = {
    "incomplete head": POST[: HEAD_OF_POST - 2],
    "incomplete body": POST[:-1],
    "a byte past the body": POST + b"x",
    "a second request": POST + req("", method="GET"),
    "transfer-encoding": req("Transfer-Encoding: chunked\r\n", b"1\r\nx\r\n0\r\n\r\n"),
    "expect": req("Expect: 100-continue\r\nContent-Length: 1\r\n", b"x"),
    "upgrade": req("Upgrade: websocket\r\n", method="GET"),
    "connection upgrade": req("Connection: upgrade\r\n", method="GET"),
    "connection list": req("Connection: keep-alive, close\r\n", method="GET"),
    "connection empty": req("Connection:\r\n", method="GET"),
    "proxy-connection": req("Proxy-Connection: close\r\n", method="GET"),  # llhttp reads it as Connection
    "two lengths": req("Content-Length: 1\r\nContent-Length: 1\r\n", b"x"),
    "an empty length": req("Content-Length:\r\n", method="GET"),
    "a non-digit length": req("Content-Length: 1x\r\n", b"x"),
    "a signed length": req("Content-Length: +1\r\n", b"x"),
    "a 16-digit length": req("Content-Length: 0000000000000001\r\n", b"x"),
    "a blank before the colon": req("Content-Length : 1\r\n", b"x"),
    "an empty name": req(": v\r\nContent-Length: 1\r\n", b"x"),
    "an obs-fold line": req("X-A: 1\r\n 2\r\nContent-Length: 1\r\n", b"x"),
    "a trailing blank": req("X-A: v \r\nContent-Length: 1\r\n", b"x"),
    "a trailing tab": req("X-A: v\t\r\nContent-Length: 1\r\n", b"x"),
    "a non-ASCII value": req("X-A: caf\xe9\r\nContent-Length: 1\r\n", b"x"),
    "a control in a value": req("X-A: a\x01b\r\nContent-Length: 1\r\n", b"x"),
    "a DEL in a value": req("X-A: a\x7fb\r\nContent-Length: 1\r\n", b"x"),
    "a bare LF line": b"GET /v1/topics/t/messages HTTP/1.1\nHost: x\r\n\r\n",
    "a bare LF field": b"GET /v1/topics/t/messages HTTP/1.1\r\nHost: x\n\r\n",
    "an absolute target": req("", method="GET", target="http://x/v1/topics/t/messages"),
    "a fragment": req("", method="GET", target="/v1/topics/t/messages#f"),
    "a space in the target": req("", method="GET", target="/v1/topics/a b/messages"),
    "a control in the target": req("", method="GET", target="/v1/topics/\x01/messages"),
    "a non-ASCII target": req("", method="GET", target="/v1/topics/\xe9/messages"),
    "HEAD": req("", method="HEAD"),
    "PUT": req("Content-Length: 1\r\n", b"x", method="PUT"),
    "a lower-case method": req("", method="get"),
    "HTTP/2.0": req("", method="GET", version="2.0"),
    "HTTP/1.2": req("", method="GET", version="1.2"),
    "a POST without a length": req("Host: x\r\n"),
}


@pytest.mark.parametrize("name", sorted(NOT_TAKEN))
def test_every_other_form_is_left_to_httptools(name: str) -> None:
    assert whole_request(NOT_TAKEN[name], MAX_HEAD) is None


@pytest.mark.parametrize(
    ("data", "max_head", "taken"),
    [
        (POST, HEAD_OF_POST, True),
        (POST, HEAD_OF_POST - 1, False),
        (POST, 0, False),
        (POST, -1, False),
        (req("X-0: v\r\n" * 64, method="GET"), MAX_HEAD, True),
        (req("X-0: v\r\n" * 65, method="GET"), MAX_HEAD, False),
    ],
    ids=["head at max_head", "head one over", "max_head 0", "negative max_head", "64 fields", "65 fields"],
)
def test_the_bounds_are_exact(data: bytes, max_head: int, taken: bool) -> None:
    got = whole_request(data, max_head)
    assert (got is not None) == taken
    if got is not None and data.startswith(b"GET"):
        assert len(got[2]) == 64


class Parsed:
    """What httptools reports of a request through its callbacks; keep-alive read at the headers' end (where uvicorn
    reads it)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.keep_alive: bool | None = None
        self.complete = 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete += 1


def httptools_agrees(data: bytes, got: Whole) -> None:
    """Assert httptools reads `data` as exactly the one request `got` describes (raises on what it refuses)."""
    is_post, target, headers, body, keep_alive, http_10 = got
    parsed = Parsed()
    parsed.parser.feed_data(data)
    assert parsed.complete == 1
    assert parsed.parser.get_method() == (b"POST" if is_post else b"GET")
    assert (parsed.url, parsed.headers, parsed.body) == (target, headers, body)
    assert parsed.parser.get_http_version() == ("1.0" if http_10 else "1.1")
    assert keep_alive == (False if http_10 else parsed.keep_alive)
    url = httptools.parse_url(target)  # uvicorn's split of the target; begin_whole partitions at the first '?'
    raw_path, _, query = target.partition(b"?")
    assert (url.path, url.query or b"") == (raw_path, query)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A request from a small grammar: every part plain (a request the reader takes), or, in a wild request, each
    part an unusual form one time in four."""
    wild = draw(st.booleans())

    def pick(plain: list[str], unusual: list[str]) -> str:
        return draw(st.sampled_from(unusual if wild and draw(st.integers(0, 3)) == 0 else plain))

    method = pick(["GET", "POST"], ["HEAD", "PUT", "get"])
    target = pick(
        ["/v1/topics/t/messages", "/v1/topics/t/messages?queue_id=0&tags=a", "/a?b?c", "/a;p=1/b:c@d!$'()*+,=", "/%41%zz", "//x", "/a?"],
        ["http://h/a", "*", "/a#f", "/a b", "/a\x01", "/\xe9", '/a"b', "/a[1]"],
    )
    version = pick(["1.1", "1.0"], ["2.0", "0.9", "1.1 "])
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        names = ["Host", "X-Tag", "Content-Type", "Accept", "Connection", "Connection", "X-!#$%&'*+.^_`|~9"]  # Connection drawn more often
        name = pick(names, ["Transfer-Encoding", "Expect", "Upgrade", "Proxy-Connection", "X A", ""])
        name = "".join(c.upper() if draw(st.booleans()) else c.lower() for c in name)
        if name.lower().endswith("connection"):
            value = pick(["close", "CLOSE", "keep-alive", "Keep-Alive"], ["upgrade", "keep-alive, close", "", "close "])
        else:
            value = pick(
                ["x", "", "a b", "a\tb", " \tlead", "~!@#"], ["trail ", "trail\t", "a\x7fb", "a\x80b", "a\x00b", "a\rb", "chunked"]
            )
        separator = pick([": ", ":", ":\t"], [" :", "\r\n :"])
        lines.append(name + separator + value)
    body: bytes = draw(st.binary(max_size=12))
    n = len(body)
    length = pick([str(n), f"00{n}"], [str(n + 1), f"+{n}", f"{n},{n}", "1" * 16, "", "none", "two", f"{n} "])
    if length == "two":
        lines += [f"Content-Length: {n}"] * 2
    elif length != "none":
        lines.append(f"Content-Length: {length}")
    lines = draw(st.permutations(lines))
    end = pick(["\r\n"], ["\n"])
    head = f"{method} {target} HTTP/{version}{end}" + "".join(line + end for line in lines) + "\r\n"
    trailing = pick([""], ["x", "\r\n", "GET / HTTP/1.1\r\n\r\n"])
    return head.encode("latin-1") + body + trailing.encode("latin-1")


SEEN: Counter[str] = Counter()


@settings(derandomize=True, database=None, deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def taken_requests_parse_alike(data: bytes) -> None:
    got = whole_request(data, MAX_HEAD)
    SEEN["taken" if got is not None else "left"] += 1
    if got is not None:
        httptools_agrees(data, got)
        SEEN["taken with a body"] += got[3] != b""
        SEEN["taken HTTP/1.0"] += got[5]
        SEEN["taken HTTP/1.1 closing"] += not got[4] and not got[5]


def test_what_is_taken_httptools_reads_the_same_way() -> None:
    SEEN.clear()
    taken_requests_parse_alike()
    assert SEEN["taken"] >= 100 and SEEN["left"] >= 100, SEEN
    assert min(SEEN["taken with a body"], SEEN["taken HTTP/1.0"], SEEN["taken HTTP/1.1 closing"]) >= 10, SEEN


def test_the_table_parses_alike() -> None:
    for data, expected in TAKEN.values():
        httptools_agrees(data, expected)


def broker_with_topic(make_broker: MakeBroker, topic: str, config: str = DIRECT_WAY) -> InProcessBroker:
    """A broker with `topic` whose produces go the direct way (the produce lane off: these tests are about the whole
    read of the direct way)."""
    broker = make_broker(config)
    assert isinstance(broker, InProcessBroker) and broker.client is not None  # its server's parts are read
    assert broker.client.put(f"/v1/topics/{topic}", json={"queues": 1}).status_code == 201
    return broker


def pulled(broker: InProcessBroker, topic: str) -> list[tuple[str, str | None]]:
    assert broker.client is not None
    got = broker.client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
    return [(m["body"], m.get("tags")) for m in got.get("messages", [])]


def connect(broker: InProcessBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=PATIENCE_S)


def test_a_whole_produce_is_answered_as_a_split_one(make_broker: MakeBroker) -> None:
    broker = broker_with_topic(make_broker, "w1")
    direct = direct_of(broker)
    produce = produce_request("w1", orjson.dumps({"body": "same", "tags": "a", "queue_id": 0}))
    head = produce.index(b"\r\n\r\n") + 4
    whole_before, served_before = direct.read_whole, direct.served
    with connect(broker) as sock:
        replies = Replies(sock)
        sock.sendall(produce)
        whole = replies.next()
        assert (direct.read_whole, direct.served) == (whole_before + 1, served_before + 1)
        sock.sendall(produce[:head])
        assert broker.started is not None
        connections = broker.started.server.server_state.connections
        # httptools has the head and waits for the body: the body's read is not the start of a request.
        wait_for(lambda: any(isinstance(c, BoundedHttpProtocol) and c.in_body for c in list(connections)), PATIENCE_S, "the head parsed")
        sock.sendall(produce[head:])
        split = replies.next()
        assert (direct.read_whole, direct.served) == (whole_before + 1, served_before + 2)
    assert whole[0] == split[0] == 201
    assert list(whole[1]) == list(split[1])  # the same header names, in the same order
    whole_json, split_json = orjson.loads(whole[2]), orjson.loads(split[2])
    assert sorted(whole_json) == sorted(split_json)
    assert (whole_json["queue_offset"], split_json["queue_offset"]) == (0, 1)
    assert pulled(broker, "w1") == [("same", "a"), ("same", "a")]


@pytest.mark.parametrize(
    ("version", "extra"),
    [(b"HTTP/1.1", b"Connection: close\r\n"), (b"HTTP/1.0", b""), (b"HTTP/1.0", b"Connection: keep-alive\r\n")],
    ids=["connection-close", "http-1.0", "http-1.0-keep-alive"],
)
def test_close_and_http_10_end_the_connection(make_broker: MakeBroker, version: bytes, extra: bytes) -> None:
    # The keep-alive timeout (60 s) is past the socket's (PATIENCE_S): only the server's close ends the read below.
    broker = broker_with_topic(make_broker, "w2", DIRECT_WAY + "keep_alive_timeout_s = 60\n")
    direct = direct_of(broker)
    produce = produce_request("w2", orjson.dumps({"body": "c", "queue_id": 0}), extra=extra).replace(b"HTTP/1.1", version, 1)
    before = direct.read_whole
    with connect(broker) as sock:
        sock.sendall(produce)
        raw = read_until_closed(sock)
    head = raw.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 201 ") and b"\r\nconnection: close" in head, raw[:300]
    assert direct.read_whole == before + 1
    assert pulled(broker, "w2") == [("c", None)]


def test_pipelined_produces_are_answered_in_order(make_broker: MakeBroker) -> None:
    broker = broker_with_topic(make_broker, "w3")
    direct = direct_of(broker)
    first = produce_request("w3", orjson.dumps({"body": "one", "queue_id": 0}))
    second = produce_request("w3", orjson.dumps({"body": "two", "queue_id": 0}))
    whole_before, served_before = direct.read_whole, direct.served
    with connect(broker) as sock:
        replies = Replies(sock)
        sock.sendall(first + second)  # two requests in one read: not whole, httptools splits them
        answers = [replies.next() for _ in range(2)]
    assert [(status, orjson.loads(body)["queue_offset"]) for status, _, body in answers] == [(201, 0), (201, 1)]
    assert (direct.read_whole, direct.served) == (whole_before, served_before + 2)
    assert pulled(broker, "w3") == [("one", None), ("two", None)]


def test_a_head_over_max_header_bytes_is_431_and_one_at_it_is_served(make_broker: MakeBroker) -> None:
    broker = broker_with_topic(make_broker, "w4", DIRECT_WAY + "max_header_bytes = 1024\n")
    direct = direct_of(broker)
    body = orjson.dumps({"body": "big", "queue_id": 0})

    def padded(head_bytes: int) -> bytes:
        bare = len(produce_request("w4", body, extra=b"X-Filler: \r\n")) - len(body)
        return produce_request("w4", body, extra=b"X-Filler: " + b"f" * (head_bytes - bare) + b"\r\n")

    at_limit, over = padded(1024), padded(1025)
    assert (at_limit.index(b"\r\n\r\n") + 4, over.index(b"\r\n\r\n") + 4) == (1024, 1025)
    before = direct.read_whole
    with connect(broker) as sock:
        sock.sendall(at_limit)
        assert Replies(sock).next()[0] == 201
    assert direct.read_whole == before + 1
    with connect(broker) as sock:
        sock.sendall(over)
        assert problem_code(read_until_closed(sock), 431) == "HEADERS_TOO_LARGE"
    assert direct.read_whole == before + 1
    assert pulled(broker, "w4") == [("big", None)]


def test_a_hot_prefix_that_is_no_hot_route_is_the_apps(make_broker: MakeBroker) -> None:
    broker = broker_with_topic(make_broker, "w5")
    assert broker.client is not None
    direct = direct_of(broker)
    whole_before, served_before = direct.read_whole, direct.served
    cases = [("GET", "/v1/topics/w5", b""), ("GET", "/v1/topics/w5/messages", b""), ("POST", "/v1/groups/g/topics/w5/nothing", b"{}")]
    with connect(broker) as sock:
        replies = Replies(sock)
        for method, path, body in cases:
            length = f"Content-Length: {len(body)}\r\n" if method == "POST" else ""
            data = req(f"Host: x\r\nContent-Type: application/json\r\n{length}", body, method=method, target=path)
            assert whole_request(data, MAX_HEAD) is not None  # read whole, then left by begin_whole
            sock.sendall(data)
            status, _, got = replies.next()
            expected = broker.client.request(method, path, content=body, headers={"content-type": "application/json"})
            assert (status, orjson.loads(got)) == (expected.status_code, expected.json())
    assert orjson.loads(broker.client.get("/v1/topics/w5").content)["topic"] == "w5"
    assert (direct.read_whole, direct.served) == (whole_before, served_before)


def test_a_whole_pull_and_keep_alive_produces(make_broker: MakeBroker) -> None:
    broker = broker_with_topic(make_broker, "w6")
    direct = direct_of(broker)
    before = direct.read_whole
    with connect(broker) as sock:
        replies = Replies(sock)
        offsets = []
        for i in range(3):  # one connection: each produce a whole read after the previous reply
            sock.sendall(produce_request("w6", orjson.dumps({"body": f"m{i}", "tags": "k", "queue_id": 0})))
            status, headers, body = replies.next()
            assert status == 201 and "connection" not in headers
            offsets.append(orjson.loads(body)["queue_offset"])
        assert offsets == [0, 1, 2] and direct.read_whole == before + 3
        sock.sendall(b"GET /v1/topics/w6/queues/0/messages?offset=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = replies.next()
    assert direct.read_whole == before + 4
    messages = orjson.loads(body)["messages"]
    assert status == 200 and [(m["body"], m["tags"]) for m in messages] == [("m0", "k"), ("m1", "k"), ("m2", "k")]
