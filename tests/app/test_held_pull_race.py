"""A held pull whose deadline overtakes the wake-up of a message already dispatched.

The real store, broker and puller run in-process on a plain asyncio loop, so the order of the
loop's callbacks is deterministic: the pull's wait times out, and in the same loop iteration
(before the pull's coroutine resumes) a message is put and dispatched by the store's own reput
thread, whose wake-up then reaches the loop after the coroutine. That is the order a loaded
machine produces by chance (728 of 2,000 held pulls answered NO_NEW_MSG while their message was
stored); here it is forced, so the answer must be the message.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.requests import Request

from app.broker import Broker
from app.routes_pull import Puller
from app.settings import BrokerSettings
from store import DefaultMessageStore, MessageStoreConfig, PutBatch, build_message
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
WAIT_MS = 200


def pull_request(topic: str, offset: int, wait_ms: int) -> Request:
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()  # the client stays connected
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "method": "GET",
        "path": f"/v1/topics/{topic}/queues/0/messages",
        "query_string": f"offset={offset}&wait_ms={wait_ms}".encode(),
        "headers": [],
        "path_params": {"topic": topic, "queue_id": "0"},
    }
    return Request(scope, receive)


def test_a_wake_up_overtaken_by_the_deadline_still_answers_the_message(tmp_path: Path) -> None:
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 23, mapped_file_size_consume_queue_bytes=6000)
    settings = BrokerSettings(store_dir=str(tmp_path / "s"), store=config).validate()
    broker = Broker(settings)

    async def scenario() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        await broker.start()
        try:
            store = broker.store
            assert isinstance(store, DefaultMessageStore)
            store.topic_config_manager.create_or_update("t", 1)
            puller = Puller(broker)
            # Listeners are called in order: once this one ran, the broker's (added at its start) has
            # queued its wake-up on the loop.
            notified = threading.Event()
            store.add_message_arriving_listener(lambda *_: notified.set())

            def put_and_wait_dispatched() -> None:
                # Runs on the loop, after the wait's timeout was released but before the pull resumes.
                future = store.put(PutBatch.of((build_message("t", b"late", 0),)))
                assert future.result(5).ok
                # Dispatched by the reput thread, whose listener call queues the wake-up behind the pull.
                wait_for(notified.is_set, 5, what="the dispatch to call the arriving listeners", poll_s=0.001)
                assert store.get_max_offset_in_queue("t", 0) == 1

            def block_past_the_deadline() -> None:
                time.sleep(WAIT_MS / 1000 + 0.05)  # the test's timeline: the loop is busy past the pull's deadline

            start = loop.time()
            # Both due when the loop wakes from the block: the pull's timeout first, then the put.
            loop.call_at(start + WAIT_MS / 1000 - 0.05, block_past_the_deadline)
            loop.call_at(start + WAIT_MS / 1000 + 0.02, put_and_wait_dispatched)
            response = await puller.serve(pull_request("t", 0, WAIT_MS))
            return {"max_offset": store.get_max_offset_in_queue("t", 0), "reply": orjson.loads(response.body)}
        finally:
            await broker.stop()

    got = asyncio.run(scenario())
    assert got["max_offset"] == 1
    reply = got["reply"]
    assert reply["status"] == "FOUND", reply
    assert [m["body"] for m in reply["messages"]] == ["late"]
