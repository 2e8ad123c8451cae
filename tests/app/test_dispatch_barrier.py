"""Produces served by the server's protocol owe their dispatch to one pass per loop turn (app/dispatch_barrier.py).

The guarantee kept: a produce's reply never leaves before its message can be read; the gain: the
produces of one turn are dispatched in one pass.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from app.dispatch_barrier import BARRIER_KEY
from app.server import create_app
from app.settings import BrokerSettings
from store import MessageStoreConfig

pytestmark = pytest.mark.timeout(120)

PRODUCE_PATH = "/v1/topics/t/messages"


def produce_scope(barrier: object | None) -> dict[str, object]:
    scope: dict[str, object] = {
        "type": "http", "method": "POST", "path": PRODUCE_PATH, "raw_path": PRODUCE_PATH.encode(), "query_string": b"",
        "headers": [(b"host", b"app"), (b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80), "scheme": "http", "http_version": "1.1", "root_path": "",
    }  # fmt: skip
    if barrier is not None:
        scope[BARRIER_KEY] = barrier  # what the server's protocol sets on every request
    return scope


def test_the_produces_of_one_turn_are_dispatched_in_one_pass_and_others_inline(tmp_path: Path) -> None:
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 20, max_message_size_bytes=1 << 16)
    app = create_app(BrokerSettings(store_dir=str(tmp_path / "store"), store=config).validate())
    broker, entry, barrier = app.state.broker, app.state.entry, app.state.dispatch_barrier

    async def produce(n: int, marked: bool) -> list[int]:
        statuses = []
        for i in range(n):
            body = json.dumps({"body": f"m{i}", "queue_id": 0}).encode()
            sent: list[dict[str, object]] = []

            async def receive(body: bytes = body) -> dict[str, object]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message: dict[str, object], sent: list[dict[str, object]] = sent) -> None:
                sent.append(message)

            await entry(produce_scope(barrier if marked else None), receive, send)
            status = sent[0]["status"]
            assert isinstance(status, int), sent
            statuses.append(status)
        return statuses

    async def walk() -> None:
        await broker.start()
        try:
            store = broker.store
            store.create_or_update_topic("t", 1)
            store.reput_service.shutdown()  # only the puts and the barrier dispatch
            # Five marked produces in one turn (a put on the loop never yields): stored, owed, not dispatched yet.
            assert await produce(5, marked=True) == [201] * 5
            assert store.get_max_offset_in_queue("t", 0) == 0 and barrier.pending
            await asyncio.sleep(0)  # the turn ends: its one pass runs
            assert store.get_max_offset_in_queue("t", 0) == 5 and barrier.runs == 1 and not barrier.pending
            # A request without the mark (an in-process client: no ReplyTransport) dispatches inline.
            assert await produce(1, marked=False) == [201]
            assert store.get_max_offset_in_queue("t", 0) == 6 and not barrier.pending
        finally:
            await broker.stop()

    asyncio.run(walk())


def produce_then_read(url_port: int, topic: str, count: int, failures: list[str]) -> None:
    """Produce `count` messages one by one; after each reply, read the message at the replied offset on a second
    connection: it must be there (the reply left after its dispatch)."""
    writer = http.client.HTTPConnection("127.0.0.1", url_port, timeout=30)
    reader = http.client.HTTPConnection("127.0.0.1", url_port, timeout=30)
    try:
        for i in range(count):
            body = f"{threading.get_ident()}-{i}"
            writer.request(
                "POST", f"/v1/topics/{topic}/messages", body=json.dumps({"body": body}), headers={"content-type": "application/json"}
            )
            reply = writer.getresponse()
            sent = json.loads(reply.read())
            if reply.status != 201:
                failures.append(f"produce answered {reply.status}: {sent}")
                return
            reader.request("GET", f"/v1/topics/{topic}/queues/{sent['queue_id']}/messages?offset={sent['queue_offset']}&max=1")
            got = json.loads(reader.getresponse().read())
            if [m["body"] for m in got.get("messages", [])] != [body]:
                failures.append(f"message {body} at {sent['queue_id']}/{sent['queue_offset']} not readable after its reply: {got}")
                return
    finally:
        writer.close()
        reader.close()


def test_a_reply_is_never_ahead_of_its_message_under_concurrent_produces(make_broker: Any, topic: str) -> None:
    broker = make_broker()
    assert broker.client.put(f"/v1/topics/{topic}", json={"queues": 4}).status_code in (200, 201)
    failures: list[str] = []
    threads = [threading.Thread(target=produce_then_read, args=(broker.port, topic, 60, failures)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert failures == []
    barrier = broker.started.app.state.dispatch_barrier  # the server's own: its produces went through it
    assert barrier.runs >= 1
    total = sum(q["max_offset"] for q in broker.client.get(f"/v1/topics/{topic}").json()["queues"])
    assert total == 8 * 60
