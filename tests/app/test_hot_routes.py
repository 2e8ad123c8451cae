"""The produce, pull, receive and ack routes answer the same with and without app.hot_routes in front of them.

Both apps run in this process over real stores in temporary directories (the store's services
are started through the broker as the lifespan would).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from app.server import create_app
from app.settings import BrokerSettings
from store import MessageStoreConfig
from store.native import pack_batch
from tests.waiting import wait_for_async

pytestmark = pytest.mark.timeout(60)

JSON = {"content-type": "application/json"}
RAW = {"content-type": "application/octet-stream"}
BATCH = {"content-type": "application/x-tidemq-batch"}
# (method, path, query, body, headers): a walk over good and bad forms of both routes.
REQUESTS = [
    ("PUT", "/v1/topics/t", {}, b'{"queues": 2}', JSON),
    ("POST", "/v1/topics/t/messages", {}, b'{"body": "a", "queue_id": 0, "tags": "A"}', JSON),
    ("POST", "/v1/topics/t/messages", {}, b'{"messages": [{"body": "b", "queue_id": 0}, {"body": "c", "queue_id": 0}]}', JSON),
    ("POST", "/v1/topics/t/messages", {"queue_id": "0", "tags": "B"}, b"raw", RAW),
    ("POST", "/v1/topics/t/messages", {}, b"{", JSON),
    ("POST", "/v1/topics/t/messages", {}, b'{"body": "x", "queue_id": 5}', JSON),
    ("POST", "/v1/topics/bad.name/messages", {}, b'{"body": "x"}', JSON),
    ("POST", "/v1/topics/t/messages", {}, b"x", {"content-type": "text/plain"}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "0", "max": "10", "wait_ms": "2000"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "0", "tag": "B"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "4"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "-1"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "x"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "0", "max": "0"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "0", "wait_ms": "-5"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "0", "wait_ms": "999999"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "0", "tag": "A||"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"group": "a.b"}, None, {}),
    ("GET", "/v1/topics/t/queues/2/messages", {"offset": "0"}, None, {}),
    ("GET", "/v1/topics/t/queues/-1/messages", {"offset": "0"}, None, {}),
    ("GET", "/v1/topics/t/queues/x/messages", {"offset": "0"}, None, {}),
    ("GET", "/v1/topics/none/queues/0/messages", {"offset": "0"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages", {"offset": "1"}, None, {"accept": "application/x-tidemq-batch"}),
    ("POST", "/v1/topics/t/messages", {"queue_id": "1"}, pack_batch([(b"d", b"TAGS\x01D\x02", 0), (b"e", b"", 0)]), BATCH),
    ("POST", "/v1/topics/t/messages", {}, bytes(30), BATCH),
    ("POST", "/v1/topics/t/messages", {}, pack_batch([(b"f", b"DELAY\x011\x02", 0)]), BATCH),
    ("POST", "/v1/topics/t/messages", {"queue_id": "2"}, pack_batch([(b"g", b"", 0)]), BATCH),
    ("POST", "/v1/topics/t/messages", {"keys": "k"}, pack_batch([(b"g", b"", 0)]), BATCH),
    ("GET", "/v1/topics/t/queues/1/messages", {"offset": "0", "max": "1", "wait_ms": "2000", "tag": "D"}, None, {}),
    # Group consumption's receive and ack (served by the hot path as well).
    ("POST", "/v1/groups/g/topics/t/receive", {"max": "2"}, None, {}),
    ("POST", "/v1/groups/g/topics/t/receive", {"max": "0"}, None, {}),
    ("POST", "/v1/groups/g/topics/t/receive", {"invisible_ms": "5"}, None, {}),
    ("POST", "/v1/groups/bad.g/topics/t/receive", {}, None, {}),
    ("POST", "/v1/groups/g/topics/none/receive", {}, None, {}),
    ("POST", "/v1/groups/g/topics/t/ack", {}, b'{"receipt_handles": ["x"]}', JSON),
    ("POST", "/v1/groups/g/topics/t/ack", {}, b'{"receipt_handles": []}', JSON),
    ("POST", "/v1/groups/g/topics/t/ack", {}, b"{", JSON),
    ("POST", "/v1/groups/g/topics/t/ack", {}, b'{"receipt_handles": ["x"], "receipt_handles": ["y"]}', JSON),
    ("POST", "/v1/groups/g/topics/t/ack", {}, b'{"receipt_handles": ["x"], "more": 1}', JSON),
    # The binary formats' own operations, pullBatch and produceBinaryBatch (served by the hot path as well).
    ("GET", "/v1/topics/t/queues/0/messages/batch", {"offset": "1"}, None, {}),
    ("GET", "/v1/topics/t/queues/0/messages/batch", {"offset": "1", "max": "1"}, None, {"accept": "application/octet-stream"}),
    ("GET", "/v1/topics/t/queues/0/messages/batch", {"offset": "x"}, None, {}),
    ("GET", "/v1/topics/t/queues/9/messages/batch", {"offset": "0"}, None, {}),
    ("POST", "/v1/topics/t/messages/batch", {"queue_id": "1"}, pack_batch([(b"h", b"", 0), (b"i", b"", 0)]), RAW),
    ("POST", "/v1/topics/t/messages/batch", {"queue_id": "1"}, pack_batch([(b"j", b"", 0)]), BATCH),
    ("POST", "/v1/topics/t/messages/batch", {}, b'{"body": "x"}', JSON),
    ("POST", "/v1/topics/bad.name/messages/batch", {}, pack_batch([(b"k", b"", 0)]), RAW),
    ("GET", "/v1/topics/t/queues/1/messages", {"offset": "0"}, None, {}),
]
GROUP_REQUESTS = 30
BATCH_OPERATIONS = 40

FIRST_PULL = 8


def max_offset_reaches(c: httpx.AsyncClient, count: int) -> Callable[[], bool | Awaitable[bool]]:
    async def reached() -> bool:
        max_offset: int = (await c.get("/v1/topics/t")).json()["queues"][0]["max_offset"]
        return max_offset >= count

    return reached


def outcomes(tmp_path: Path, hot_routes: bool) -> list[tuple[int, str]]:
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 22, max_message_size_bytes=1 << 16)
    settings = BrokerSettings(store_dir=str(tmp_path / f"hot-{hot_routes}"), hot_routes=hot_routes, store=config).validate()
    app = create_app(settings)
    broker = app.state.broker

    async def walk() -> list[tuple[int, str]]:
        await broker.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app.state.entry), base_url="http://app", timeout=10) as c:
                out = []
                for i, (method, path, query, body, headers) in enumerate(REQUESTS):
                    if i == FIRST_PULL:  # the four stored messages are dispatched before the pulls
                        await wait_for_async(max_offset_reaches(c, 4), 10, what="the four messages to be dispatched", poll_s=0.005)
                    r = await c.request(method, path, params=query, content=body, headers=headers)
                    if r.headers.get("content-type", "").startswith("application/problem+json"):
                        summary = r.json()["code"]
                    elif r.headers.get("content-type") in ("application/x-tidemq-batch", "application/octet-stream"):
                        media = r.headers["content-type"]
                        summary = f"{media}:{r.headers['x-tidemq-status']}:{r.headers['x-tidemq-count']}:{len(r.content)}"
                    elif path.endswith("/receive"):
                        summary = str([(m["body"], m["reconsume_times"]) for m in r.json()["messages"]])
                    elif path.endswith("/ack"):
                        summary = str([x["status"] for x in r.json()["results"]])
                    elif method == "GET":
                        summary = f"{r.json()['status']}:{[m['body'] for m in r.json()['messages']]}"
                    else:
                        summary = str(sorted(r.json()))
                    out.append((r.status_code, summary))
                return out
        finally:
            await broker.stop()

    return asyncio.run(walk())


def test_hot_routes_answer_like_the_fastapi_routes(tmp_path: Path) -> None:
    hot = outcomes(tmp_path, True)
    plain = outcomes(tmp_path, False)
    assert hot == plain
    assert hot[8] == (200, "FOUND:['a', 'b', 'c', 'raw']")
    assert hot[9] == (200, "FOUND:['raw']")
    assert [status for status, _ in hot[11:22]] == [400, 400, 200, 400, 400, 400, 400, 400, 404, 404, 400]
    assert hot[13] == (200, "FOUND:['a', 'b', 'c', 'raw']"), "a pull without offset starts at the queue's first kept message"
    reply = str(sorted(["kind", "queue_id", "first_queue_offset", "count", "store_timestamp", "offset_msg_id_prefix", "commitlog_offsets"]))
    assert hot[GROUP_REQUESTS:BATCH_OPERATIONS] == [
        (200, "[('a', 0), ('b', 0)]"),
        (400, "MAX_INVALID"),
        (400, "INVISIBLE_TIME_INVALID"),
        (400, "GROUP_INVALID"),
        (404, "TOPIC_NOT_FOUND"),
        (200, "['HANDLE_INVALID']"),
        (400, "BODY_INVALID"),
        (400, "BODY_INVALID"),
        (400, "BODY_INVALID"),
        (400, "BODY_INVALID"),
    ]
    assert hot[24:GROUP_REQUESTS] == [
        (201, reply),
        (400, "BATCH_INVALID"),
        (400, "PROPERTIES_INVALID"),
        (404, "QUEUE_NOT_FOUND"),
        (400, "REQUEST_INVALID"),
        (200, "FOUND:['d']"),
    ]
    batch_pull, octets = hot[BATCH_OPERATIONS][1].split(":"), hot[BATCH_OPERATIONS + 1][1].split(":")
    assert batch_pull[:3] == ["application/x-tidemq-batch", "FOUND", "3"] and octets[:3] == ["application/octet-stream", "FOUND", "1"]
    assert hot[BATCH_OPERATIONS + 2 :] == [
        (400, "OFFSET_INVALID"),
        (404, "QUEUE_NOT_FOUND"),
        (201, reply),
        (201, reply),
        (415, "UNSUPPORTED_MEDIA_TYPE"),
        (400, "TOPIC_INVALID"),
        (200, "FOUND:['d', 'e', 'h', 'i', 'j']"),
    ]


def test_health_is_answered_outermost_byte_for_byte_as_the_fastapi_route(tmp_path: Path) -> None:
    """GET /healthz is the no-op ceiling of the HTTP benchmark: the same reply both ways in."""

    def health(hot_routes: bool) -> tuple[int, list[tuple[str, str]], bytes, int]:
        settings = BrokerSettings(store_dir=str(tmp_path / f"h-{hot_routes}"), hot_routes=hot_routes).validate()
        app = create_app(settings)

        async def ask() -> tuple[int, list[tuple[str, str]], bytes, int]:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app.state.entry), base_url="http://app") as c:
                r = await c.get("/healthz")
                other = await c.post("/healthz")  # not the hot one: FastAPI's 405
                return r.status_code, sorted(r.headers.items()), r.content, other.status_code

        try:
            return asyncio.run(ask())
        finally:
            app.state.broker.executor.shutdown()

    hot, plain = health(True), health(False)
    assert hot == plain
    assert hot[0] == 200 and hot[2] == b'{"status":"ok"}' and hot[3] == 405
