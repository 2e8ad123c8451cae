"""The one ASGI callable in front (app.hot_routes): what the layers it folds did, it still does.

Requests are driven straight into the broker's real ASGI entry over a real store (no sockets), so
each can be shaped exactly (a Content-Length that is not a number, a chunked body); the departure
of a held request's client is tested on a real server, where the connection tells it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.server import create_app
from app.settings import BrokerSettings
from store import MessageStoreConfig
from tests.app.conftest import SMALL_BROKER, SMALL_STORE, MakeBroker
from tests.app.scrape import samples, value
from tests.waiting import wait_for, wait_for_async

pytestmark = pytest.mark.timeout(60)

PRODUCE = "/v1/topics/{topic}/messages"
ACK = "/v1/groups/{group}/topics/{topic}/ack"
MAX_RAW = 1024  # max_request_body_bytes of these brokers: a raw body
MAX_JSON = 4096  # max_json_body_bytes: a JSON body


class Reply:
    def __init__(self, status: int, headers: dict[bytes, bytes], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def problem(self) -> str:
        assert self.headers[b"content-type"] == b"application/problem+json", (self.status, self.headers, self.body)
        doc = orjson.loads(self.body)
        assert doc["status"] == self.status
        return str(doc["code"])


async def call(
    entry: Any, method: str, path: str, query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None, chunks: Iterable[bytes] = ()
) -> Reply:
    """One HTTP request through the ASGI entry; the body's chunks arrive as separate messages."""
    pending = list(chunks)
    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": query,
        "headers": headers or [], "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "scheme": "http",
        "http_version": "1.1", "root_path": "", "asgi": {"version": "3.0"},
    }  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending)}
        await asyncio.sleep(3600)  # nothing more: a client that waits
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await entry(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Reply(start["status"], dict(start["headers"]), body)


def json_headers(length: int | bytes, content_type: bytes = b"application/json") -> list[tuple[bytes, bytes]]:
    return [(b"content-type", content_type), (b"content-length", length if isinstance(length, bytes) else str(length).encode())]


def small_settings(tmp_path: Path) -> BrokerSettings:
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 22, max_message_size_bytes=1 << 16)
    return BrokerSettings(
        store_dir=str(tmp_path / "s"), store=config, max_request_body_bytes=MAX_RAW, max_json_body_bytes=MAX_JSON
    ).validate()


def test_refused_hot_requests_are_problems_counted_under_their_route_and_store_nothing(tmp_path: Path) -> None:
    app = create_app(small_settings(tmp_path))
    broker = app.state.broker
    entry = app.state.entry

    async def scenario() -> None:
        await broker.start()
        try:
            body = b'{"queues": 1}'
            assert (await call(entry, "PUT", "/v1/topics/t", headers=json_headers(len(body)), chunks=iter([body]))).status == 201
            big = b'{"body": "' + b"x" * MAX_JSON + b'"}'
            # A Content-Length past the JSON limit: 413 before the body is read.
            too_long = await call(entry, "POST", "/v1/topics/t/messages", headers=json_headers(len(big)), chunks=iter([big]))
            assert (too_long.status, too_long.problem()) == (413, "BODY_TOO_LARGE")
            assert b"max_json_body_bytes" in too_long.body
            # A chunked raw body cut as soon as it passes the raw limit.
            chunked = [(b"content-type", b"application/octet-stream"), (b"transfer-encoding", b"chunked")]
            cut = await call(entry, "POST", "/v1/topics/t/messages", b"queue_id=0", chunked, iter([b"y" * 600] * 3))
            assert (cut.status, cut.problem()) == (413, "BODY_TOO_LARGE")
            # A Content-Length that is not a number, a repeated query parameter, a bad ack body.
            bad_length = await call(entry, "POST", "/v1/topics/t/messages", headers=json_headers(b"12x"), chunks=iter([b"{}"]))
            assert (bad_length.status, bad_length.problem()) == (400, "REQUEST_INVALID")
            twice = await call(entry, "GET", "/v1/topics/t/queues/0/messages", b"offset=0&offset=1")
            assert (twice.status, twice.problem()) == (400, "REQUEST_INVALID")
            ack = await call(entry, "POST", "/v1/groups/g/topics/t/ack", headers=json_headers(1), chunks=iter([b"{"]))
            assert (ack.status, ack.problem()) == (400, "BODY_INVALID")
            # Nothing was stored, and every refusal was counted under its route template.
            topic = orjson.loads((await call(entry, "GET", "/v1/topics/t")).body)
            assert [q["max_offset"] for q in topic["queues"]] == [0]
            scrape = samples((await call(entry, "GET", "/metrics")).body.decode())
            requests = "tidemq_http_requests_total"
            assert value(scrape, requests, route=PRODUCE, method="POST", status="413") == 2
            assert value(scrape, requests, route=PRODUCE, method="POST", status="400") == 1
            assert value(scrape, requests, route="other", method="GET", status="400") == 1  # refused before any route
            assert value(scrape, requests, route=ACK, method="POST", status="400") == 1
            assert value(scrape, "tidemq_http_problems_total", code="BODY_TOO_LARGE") == 2
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_hot_routes_answer_503_starting_while_the_store_loads_and_serve_once_it_is_loaded(tmp_path: Path) -> None:
    app = create_app(small_settings(tmp_path))
    broker = app.state.broker
    entry = app.state.entry
    failures: list[str] = []

    async def scenario() -> None:
        broker.start_in_background(failures.append)
        try:
            body = b'{"body": "early"}'
            early = await call(entry, "POST", "/v1/topics/t/messages", headers=json_headers(len(body)), chunks=iter([body]))
            assert (early.status, early.problem()) == (503, "STARTING")
            assert early.headers[b"retry-after"] == b"1"
            receive = await call(entry, "POST", "/v1/groups/g/topics/t/receive")
            assert (receive.status, receive.problem()) == (503, "STARTING")
            health = await call(entry, "GET", "/healthz")
            assert (health.status, health.body) == (200, b'{"status":"ok"}')
            await wait_for_async(lambda: not broker.loading, 30, what="the store to load")
            assert not failures
            topic = b'{"queues": 1}'
            assert (await call(entry, "PUT", "/v1/topics/t", headers=json_headers(len(topic)), chunks=iter([topic]))).status == 201
            later = await call(entry, "POST", "/v1/topics/t/messages", headers=json_headers(len(body)), chunks=iter([body]))
            assert later.status == 201, later.body
        finally:
            await broker.stop()

    asyncio.run(scenario())


def held_request(port: int, request: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def test_a_held_pull_and_a_held_receive_end_when_their_client_goes_away(make_broker: MakeBroker) -> None:
    broker = make_broker(SMALL_STORE + SMALL_BROKER)
    c = broker.client
    assert c is not None
    assert c.put("/v1/topics/held", json={"queues": 2}).status_code == 201

    def metric(name: str) -> float:
        return value(samples(c.get("/metrics").text), name)

    abandoned = metric("tidemq_pulls_abandoned_total")
    pull = held_request(broker.port, b"GET /v1/topics/held/queues/0/messages?offset=0&wait_ms=5000 HTTP/1.1\r\nhost: b\r\n\r\n")
    wait_for(lambda: metric("tidemq_held_pulls") == 1, 20, "the pull to be held")
    pull.close()
    wait_for(lambda: metric("tidemq_held_pulls") == 0, 20, "the pull to be released after its client left")
    assert metric("tidemq_pulls_abandoned_total") == abandoned + 1
    receive = held_request(
        broker.port, b"POST /v1/groups/g/topics/held/receive?wait_ms=5000 HTTP/1.1\r\nhost: b\r\ncontent-length: 0\r\n\r\n"
    )
    wait_for(lambda: metric("tidemq_held_pulls") == 3, 20, "the receive to be held on both queues and the retry queue")
    receive.close()
    wait_for(lambda: metric("tidemq_held_pulls") == 0, 20, "the receive to be released after its client left")
    # Nothing was taken by the receive that left: the next one gets the message.
    assert c.post("/v1/topics/held/messages", json={"body": "after", "queue_id": 1}).status_code == 201
    got = c.post("/v1/groups/g/topics/held/receive", params={"wait_ms": 2000})
    assert [m["body"] for m in got.json()["messages"]] == ["after"]
