"""Bodies stored compressed (SYSFLAG bit 0x1, RocketMQ's COMPRESSED_FLAG) are served inflated in
every JSON view and as stored, with X-Tidemq-Body-Encoding, in the batch format; a body that
cannot be inflated is marked, never a 500, and never stops a pull."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import tidemq
from tests.app.conftest import SMALL_BROKER, SMALL_STORE
from tests.app.in_process import InProcessBroker
from tests.compressed_store import CASES, TOPIC, Case, write_compressed_store


@pytest.fixture(scope="module")
def zipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    store_dir = tmp_path_factory.mktemp("zipped") / "store"
    write_compressed_store(str(store_dir))
    # A short ack margin and revive interval: an unacked message comes back about a second after its invisible time.
    broker = InProcessBroker(store_dir, SMALL_STORE + "pop_ack_margin_ms = 100\npop_revive_interval_ms = 20\n" + SMALL_BROKER)
    try:
        yield broker.start()
    finally:
        broker.kill()


@pytest.fixture
def c(zipped: InProcessBroker) -> httpx.Client:
    assert zipped.client is not None
    return zipped.client


def shown_body(view: dict[str, Any]) -> bytes:
    return view["body"].encode() if view["encoding"] == "utf-8" else base64.b64decode(view["body"])


def assert_view(view: dict[str, Any], case: Case) -> None:
    assert shown_body(view) == case.body, case.key
    assert view.get("body_error") == case.error, case.key
    assert view.get("compressed") == (True if case.sys_flag & 1 else None), case.key
    if case.error is not None:
        assert view["encoding"] == "base64"  # the stored bytes are never passed off as text


def test_a_json_pull_shows_bodies_as_produced_and_marks_the_ones_it_cannot_inflate(c: httpx.Client) -> None:
    r = c.get(f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": 0, "max": 32})
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["status"] == "FOUND" and reply["next_offset"] == len(CASES)
    assert [m["keys"] for m in reply["messages"]] == [[case.key] for case in CASES]
    for view, case in zip(reply["messages"], CASES, strict=True):
        assert_view(view, case)
    assert reply["messages"][1]["encoding"] == "utf-8"  # inflated text is text


def test_the_batch_format_keeps_the_stored_bytes_and_says_so(c: httpx.Client) -> None:
    r = c.get(f"/v1/topics/{TOPIC}/queues/0/messages/batch", params={"offset": 0, "max": 32})
    assert r.status_code == 200 and r.headers["X-Tidemq-Body-Encoding"] == "stored"
    for case in CASES[1:]:
        assert case.stored in r.content  # the stored bytes, not the inflated ones
    assert CASES[1].body not in r.content


@pytest.mark.parametrize("stored_format", [True, False])
def test_the_python_client_decodes_bodies_as_produced(zipped: InProcessBroker, stored_format: bool) -> None:
    with tidemq.Client(zipped.url) as client:
        result = client.pull(TOPIC, 0, 0, max_messages=32, stored_format=stored_format)
    assert [m.keys for m in result.messages] == [[case.key] for case in CASES]
    for m, case in zip(result.messages, CASES, strict=True):
        assert (m.body, m.body_error, m.compressed) == (case.body, case.error, bool(case.sys_flag & 1)), case.key


def test_a_receive_shows_bodies_as_produced(c: httpx.Client) -> None:
    got: list[dict[str, Any]] = []
    for _ in range(len(CASES)):  # bounded: each receive returns at least one message until all are taken
        r = c.post(f"/v1/groups/zipped-readers/topics/{TOPIC}/receive", params={"max": 32})
        assert r.status_code == 200, r.text
        got += r.json()["messages"]
        if len(got) >= len(CASES):
            break
    by_key = {m["keys"][0]: m for m in got}
    assert sorted(by_key) == sorted(case.key for case in CASES)
    for case in CASES:
        assert_view(by_key[case.key], case)


@pytest.mark.parametrize("case", CASES, ids=[case.key for case in CASES])
def test_queries_by_key_and_by_offset_id_show_bodies_as_produced(c: httpx.Client, case: Case) -> None:
    r = c.get(f"/v1/topics/{TOPIC}/messages", params={"key": case.key})
    assert r.status_code == 200, r.text
    (view,) = r.json()["messages"]
    assert_view(view, case)
    r = c.get(f"/v1/messages/{view['offset_msg_id']}")
    assert r.status_code == 200, r.text
    assert_view(r.json(), case)
    r = c.get(f"/v1/topics/{TOPIC}/messages", params={"msg_id": view["msg_id"]})
    assert r.status_code == 200, r.text
    assert_view(r.json()["messages"][0], case)


def test_a_redelivered_message_is_still_shown_as_produced(c: httpx.Client) -> None:
    """The retry copy keeps the stored body and its compression bits (RocketMQ's consumerSendMsgBack keeps the SYSFLAG)."""
    base = f"/v1/groups/zipped-retry/topics/{TOPIC}"
    first = c.post(base + "/receive", params={"max": 32, "invisible_ms": 1000}).json()["messages"]
    assert len(first) == len(CASES)
    kept = {"text", "corrupt", "plain"}
    acked = [m["receipt_handle"] for m in first if m["keys"][0] not in kept]
    assert c.post(base + "/ack", json={"receipt_handles": acked}).status_code == 200
    again: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while len(again) < len(kept):
        assert time.monotonic() < deadline, f"redelivered {[m['keys'] for m in again]}"
        r = c.post(base + "/receive", params={"max": 32, "invisible_ms": 30_000, "wait_ms": 1000})
        again += r.json()["messages"]
    assert sorted(m["keys"][0] for m in again) == sorted(kept) and all(m["reconsume_times"] == 1 for m in again)
    for m in again:
        assert_view(m, next(case for case in CASES if case.key == m["keys"][0]))


def test_a_receive_stream_shows_bodies_as_produced(zipped: InProcessBroker) -> None:
    url = f"/v1/groups/zipped-stream/topics/{TOPIC}/stream"
    got: list[dict[str, Any]] = []
    with httpx.Client(base_url=zipped.url, timeout=10) as own, own.stream("GET", url, params={"max_in_flight": 32}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[len("data: ") :]))
                if len(got) == len(CASES):
                    break
    by_key = {m["keys"][0]: m for m in got}
    for case in CASES:
        assert_view(by_key[case.key], case)
