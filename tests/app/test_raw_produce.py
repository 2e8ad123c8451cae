"""A raw produce the store packs (store.packed_raw) against its reference: app.produce_parse.parse_raw, then the
store's packing of the parsed message (store.put.put_batch.properties_of, store.pack_one).

The packed path takes a raw body with no query parameter but `queue_id` and neither the transaction nor the
Idempotency-Key header; it stores the bytes the reference would, and the broker answers as it answers the
reference's way (which a query the packed path does not take, here an empty `tags`, still goes)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.produce_parse import Limits, check_msg_id, parse_raw
from app.routes_produce import packed_raw_queue
from app.server import create_app
from app.settings import BrokerSettings
from store import MessageStoreConfig, packed_raw
from store.native import pack_one
from store.put.put_batch import properties_of

pytestmark = pytest.mark.timeout(60)

LIMITS = Limits(max_message_size_bytes=4096, max_batch_messages=50, delay_levels_ms=[1000] * 18)
RAW = {"content-type": "application/octet-stream"}


@pytest.mark.parametrize(
    "body",
    [b"", b"x", b"\x00\x01\x02\xff" * 3, random.Random(7).randbytes(1024), b"a" * 4096],
    ids=["empty", "one-byte", "binary", "random-1KiB", "at-the-limit"],  # one id on every worker
)
def test_a_raw_body_is_packed_as_the_reference_packs_it(body: bytes) -> None:
    got = packed_raw(body, 3, LIMITS.max_message_size_bytes)
    assert got is not None
    (key,) = got.uniq_keys
    assert check_msg_id(key) == key and len(key) == 32
    draft = parse_raw(body, {}, LIMITS)
    assert got.data == pack_one(draft.body, properties_of(draft, key))
    assert (got.messages, got.queue_id, got.is_batch) == (1, 3, False)


def test_a_body_over_the_limit_is_left_to_the_reference() -> None:
    assert packed_raw(b"a" * 4097, -1, LIMITS.max_message_size_bytes) is None


def test_each_packed_body_gets_a_fresh_key() -> None:
    keys = [packed_raw(b"x", -1, 10) for _ in range(300)]
    assert len({k.uniq_keys[0] for k in keys if k is not None}) == 300


@pytest.mark.parametrize(
    ("query", "queue"),
    [
        (b"", -1),
        (b"queue_id=0", 0),
        (b"queue_id=17", 17),
        (b"queue_id=" + b"9" * 18, 10**18 - 1),
        (b"queue_id=", None),
        (b"queue_id=-1", None),
        (b"queue_id=1x", None),
        (b"queue_id=" + b"9" * 19, None),
        (b"queue_id=1&tags=a", None),
        (b"tags=a", None),
        (b"queue_id=%31", None),
    ],
)
def test_only_a_lone_queue_id_query_is_taken(query: bytes, queue: int | None) -> None:
    assert packed_raw_queue(query) == queue


def exchange(tmp_path: Path, requests: list[tuple[dict[str, str], bytes, dict[str, str]]]) -> tuple[list[Any], list[Any]]:
    """The replies to raw produces (query, body, extra headers) on topic t (2 queues), and what each queue holds."""
    config = MessageStoreConfig(mapped_file_size_commit_log_bytes=1 << 22, max_message_size_bytes=4096)
    app = create_app(BrokerSettings(store_dir=str(tmp_path / "store"), store=config).validate())
    broker = app.state.broker

    async def run() -> tuple[list[Any], list[Any]]:
        await broker.start()
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app.state.entry), base_url="http://app", timeout=10) as c:
                assert (await c.put("/v1/topics/t", json={"queues": 2})).status_code in (200, 201)
                replies = []
                for query, body, headers in requests:
                    r = await c.post("/v1/topics/t/messages", params=query, content=body, headers={**RAW, **headers})
                    replies.append((r.status_code, r.json()))
                held = []
                for q in (0, 1):
                    for _ in range(200):
                        got = (await c.get(f"/v1/topics/t/queues/{q}/messages", params={"offset": "0", "max": "32"})).json()
                        if got["status"] != "NO_NEW_MSG" or q == 1:
                            break
                        await asyncio.sleep(0.01)
                    held.append(got["messages"])
                return replies, held
        finally:
            await broker.stop()

    return asyncio.run(run())


def test_the_broker_answers_and_stores_a_packed_raw_produce_as_the_reference(tmp_path: Path) -> None:
    body = bytes(range(256)) * 2
    replies, held = exchange(
        tmp_path,
        [
            ({"queue_id": "0"}, body, {}),  # packed
            ({"queue_id": "0", "tags": ""}, body, {}),  # the reference: an empty tags is no tag
            ({"queue_id": "5"}, body, {}),  # no such queue: nothing stored
            ({}, b"b" * 4097, {}),  # over the limit: the reference refuses it
            ({"queue_id": "1"}, b"", {}),  # an empty body, packed
        ],
    )
    (s0, packed), (s1, reference), (s2, missing), (s3, large), (s4, empty) = replies
    assert (s0, s1, s4) == (201, 201, 201)
    assert sorted(packed) == sorted(reference) and packed["queue_id"] == reference["queue_id"] == 0
    assert packed["queue_offset"] == 0 and reference["queue_offset"] == 1
    assert (s2, missing["code"]) == (404, "QUEUE_NOT_FOUND")
    assert (s3, large["code"]) == (413, "MESSAGE_TOO_LARGE")
    q0, q1 = held
    assert [m["msg_id"] for m in q0] == [packed["msg_id"], reference["msg_id"]]
    for stored in q0:  # UNIQ_KEY, the only property, is shown as the msg_id
        assert (stored["properties"], stored["tags"], stored["keys"], stored["encoding"]) == ({}, None, [], "base64")
    assert [(m["msg_id"], m["queue_id"]) for m in q1] == [(empty["msg_id"], 1)]
    varying = ("msg_id", "queue_offset", "commitlog_offset", "offset_msg_id", "store_timestamp", "born_timestamp")
    views = [{k: v for k, v in m.items() if k not in varying} for m in q0]
    assert views[0] == views[1] and views[0]["properties"] == {} and views[0]["tags"] is None
