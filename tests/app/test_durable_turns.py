"""The durable produces of one loop turn wait on one flush future (app/durable_turns.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from pathlib import Path

import pytest

from app.completion_relay import CompletionRelay
from app.durable_turns import DurableTurns
from app.server import create_app
from app.settings import BrokerSettings
from store import FlushDiskType, MessageStoreConfig, PutMessageStatus

pytestmark = pytest.mark.timeout(60)


class Through:
    """The store's side of a group's wait: records the offsets asked for, and the futures it gave."""

    def __init__(self, answer_at_once: bool = False) -> None:
        self.asked: list[int] = []
        self.futures: list[concurrent.futures.Future[PutMessageStatus]] = []
        self.answer_at_once = answer_at_once

    def __call__(self, offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        self.asked.append(offset)
        if self.answer_at_once:
            return None
        future: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()
        self.futures.append(future)
        return future


def offset_of(reply: dict[str, object], name: str) -> int:
    """An offset field of a produce's reply (a JSON number)."""
    offset = reply[name]
    assert isinstance(offset, int), reply
    return offset


def test_members_of_a_turn_share_one_wait_through_their_highest_end() -> None:
    async def run() -> tuple[list[int], list[object], bool]:
        through = Through()
        turns = DurableTurns(through, CompletionRelay(asyncio.get_running_loop()), 10.0)
        members = [turns.wait(end) for end in (300, 900, 600)]
        cancelled = members[1]
        await asyncio.sleep(0)  # the turn ends: one request, through 900
        later = turns.wait(1200)  # the next turn's group
        await asyncio.sleep(0)
        cancelled.cancel()  # its request went away: the others still get the outcome
        threading.Thread(target=through.futures[0].set_result, args=(PutMessageStatus.PUT_OK,)).start()  # the flush thread
        done = await asyncio.gather(members[0], members[2])
        assert not later.done()
        through.futures[1].set_result(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return through.asked, [*done, await later], turns.groups == 2 and turns.members == 4

    asked, outcomes, counted = asyncio.run(run())
    assert asked == [900, 1200]
    assert outcomes == [PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT]
    assert counted


def test_a_group_past_its_deadline_gets_none_and_one_answered_at_once_gets_put_ok() -> None:
    async def run() -> tuple[object, object]:
        late = DurableTurns(Through(), CompletionRelay(asyncio.get_running_loop()), 0.05)
        at_once = DurableTurns(Through(answer_at_once=True), CompletionRelay(asyncio.get_running_loop()), 10.0)
        return await late.wait(10), await at_once.wait(10)

    assert asyncio.run(run()) == (None, PutMessageStatus.PUT_OK)


def test_concurrent_durable_produces_share_a_group_commit(tmp_path: Path) -> None:
    """A real store under SYNC_FLUSH: twenty produces started in one turn are answered 201 after one wait,
    each with its own offsets, and the flushed offset passes all of them."""
    config = MessageStoreConfig(
        mapped_file_size_commit_log_bytes=1 << 20, max_message_size_bytes=1 << 16, flush_disk_type=FlushDiskType.SYNC_FLUSH
    )
    app = create_app(BrokerSettings(store_dir=str(tmp_path / "store"), store=config).validate())
    broker, entry = app.state.broker, app.state.entry

    async def produce(i: int) -> dict[str, object]:
        body = json.dumps({"body": f"durable-{i}", "queue_id": 0}).encode()
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {
            "type": "http", "method": "POST", "path": "/v1/topics/d/messages", "raw_path": b"/v1/topics/d/messages",
            "query_string": b"", "headers": [(b"host", b"app"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "scheme": "http", "http_version": "1.1", "root_path": "",
        }  # fmt: skip
        await entry(scope, receive, send)
        assert sent[0]["status"] == 201, sent
        reply_body = sent[1]["body"]
        assert isinstance(reply_body, bytes), sent
        reply: dict[str, object] = json.loads(reply_body)
        return reply

    async def walk() -> None:
        await broker.start()
        try:
            broker.store.create_or_update_topic("d", 1)
            producer = entry.produce.__self__  # the handler's Producer
            replies = await asyncio.gather(*(produce(i) for i in range(20)))
            assert sorted(offset_of(r, "queue_offset") for r in replies) == list(range(20))
            assert producer.turns.members == 20 and producer.turns.groups == 1
            flushed = broker.store.commit_log.flushed_where()
            assert all(flushed > offset_of(r, "commitlog_offset") for r in replies)
        finally:
            await broker.stop()

    asyncio.run(walk())
