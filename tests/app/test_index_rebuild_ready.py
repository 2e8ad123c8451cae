"""/readyz while a copied store's missing index is rebuilt after start: 503 INDEX_REBUILDING with
the rebuild's progress, every other route served; then 200 and every key found."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import httpx
import pytest

from app.server import create_app
from app.settings import BrokerSettings
from store import DefaultMessageStore, MessageStoreConfig, build_message
from tests.app.helpers import problem
from tests.waiting import wait_for_async

pytestmark = pytest.mark.timeout(120)

TOPIC = "orders"
COUNT = 400


def store_config(root: Path) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log_bytes=64 * 1024,
        max_message_size_bytes=8 * 1024,
        max_hash_slot_num=64,
        max_index_num=256,
        index_rebuild_background_min_bytes=0,  # any gap is rebuilt in the background
    )


def write_store(config: MessageStoreConfig) -> None:
    s = DefaultMessageStore(config)
    s.load()
    s.start()
    s.topic_config_manager.create_or_update(TOPIC, 2)
    for i in range(COUNT):
        assert s.put_message(build_message(TOPIC, f"body-{i}".encode(), i % 2, keys=[f"order-{i}"])).ok
    s.shutdown()


def test_readyz_answers_index_rebuilding_until_the_index_is_whole(tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = store_config(root)
    write_store(config)
    shutil.rmtree(root / "index")
    (root / "index").write_bytes(b"")  # no index file can be created until this goes: the rebuild is seen running
    app = create_app(BrokerSettings(store_dir=str(root), store=config).validate())
    broker = app.state.broker

    async def keys_found(c: httpx.AsyncClient) -> list[int]:
        found = []
        for i in range(COUNT):
            r = await c.get(f"/v1/topics/{TOPIC}/messages", params={"key": f"order-{i}"})
            assert r.status_code == 200, r.text
            if [m["body"] for m in r.json()["messages"]] == [f"body-{i}"]:
                found.append(i)
        return found

    async def scenario() -> None:
        await broker.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as c:
                body = problem(await c.get("/readyz"), 503, "INDEX_REBUILDING")
                assert body["phase"] == "rebuilding index" and body["total_bytes"] > 0
                assert "tidemq_ready 0" in (await c.get("/metrics")).text
                r: httpx.Response | None  # then what wait_for_async answers
                r = await c.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0, "max": 1})
                assert r.status_code == 200 and r.json()["messages"][0]["body"] == "body-0"  # served meanwhile
                os.unlink(root / "index")

                async def ready() -> httpx.Response | None:
                    r = await c.get("/readyz")
                    if r.status_code == 200:
                        return r
                    problem(r, 503, "INDEX_REBUILDING")
                    return None

                r = await wait_for_async(ready, 60, what="the index rebuild to finish", poll_s=0.02)
                assert r is not None  # wait_for_async answers a truthy value
                assert r.json() == {"status": "ready"}
                assert await keys_found(c) == list(range(COUNT))
        finally:
            await broker.stop()

    asyncio.run(scenario())
