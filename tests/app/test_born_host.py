"""The BORNHOST of a produced message is the HTTP client's address and port, 8 bytes for IPv4 and
20 with SYSFLAG 0x10 for IPv6, on every produce path; pulled back as stored bytes and decoded."""

from __future__ import annotations

import http.client
import json
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import decode_message, pack_batch
from store.layouts import iter_messages
from tests.app.conftest import SMALL_BROKER, SMALL_STORE
from tests.app.helpers import wait_visible
from tests.app.in_process import InProcessBroker

BORNHOST_V6_FLAG = 0x10


def ipv6_loopback_bindable() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def post(broker: InProcessBroker, path: str, body: bytes, content_type: str) -> tuple[dict[str, Any], tuple[str, int]]:
    """POST on a connection of its own: (the JSON reply, the client's own address and port)."""
    connection = http.client.HTTPConnection(broker.host, broker.port, timeout=15)
    try:
        connection.connect()
        local = connection.sock.getsockname()
        connection.request("POST", path, body, {"content-type": content_type})
        response = connection.getresponse()
        payload = response.read()
        assert response.status == 201, payload
        return json.loads(payload), (local[0], local[1])
    finally:
        connection.close()


def produce_every_way(broker: InProcessBroker, topic: str) -> dict[int, tuple[str, int]]:
    """One message (or batch) per produce path; commitlog offset -> the sender's address."""
    sent: dict[int, tuple[str, int]] = {}
    path = f"/v1/topics/{topic}/messages"
    single, local = post(broker, path, json.dumps({"body": "json single", "queue_id": 0}).encode(), "application/json")
    sent[single["commitlog_offset"]] = local
    # Two queues in one batch: the MessageInner path rather than the packed one.
    spread = {"messages": [{"body": "spread 0", "queue_id": 0}, {"body": "spread 1", "queue_id": 1}]}
    batch, local = post(broker, path, json.dumps(spread).encode(), "application/json")
    sent.update({r["commitlog_offset"]: local for r in batch["results"]})
    raw, local = post(broker, path + "?queue_id=0", b"raw body", "application/octet-stream")
    sent[raw["commitlog_offset"]] = local
    binary = pack_batch([(b"binary 0", b"", 0), (b"binary 1", b"", 0)])
    packed, local = post(broker, path + "/batch?queue_id=0", binary, "application/x-tidemq-batch")
    sent.update(dict.fromkeys(packed["commitlog_offsets"], local))
    return sent


def pulled(broker: InProcessBroker, topic: str) -> list[dict[str, Any]]:
    assert broker.client is not None
    out = []
    for queue_id in (0, 1):
        r = broker.client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages",
            params={"offset": 0, "max": 32},
            headers={"accept": "application/x-tidemq-batch"},
        )
        out += [decode_message(r.content, p) for p, _ in iter_messages(r.content)]
    return out


def assert_born_hosts(broker: InProcessBroker, want_text: str, v6: bool) -> None:
    assert broker.client is not None
    topic = f"born-{uuid.uuid4().hex[:8]}"
    assert broker.client.put(f"/v1/topics/{topic}", json={"queues": 2}).status_code in (200, 201)
    sent = produce_every_way(broker, topic)
    assert len(sent) == 6
    wait_visible(broker.client, topic, 0, 4)
    wait_visible(broker.client, topic, 1, 0)
    messages = pulled(broker, topic)
    assert sorted(m["commitlog_offset"] for m in messages) == sorted(sent)
    for m in messages:
        host, port = sent[m["commitlog_offset"]]
        assert m["born_host"] == want_text.format(port=port), m
        assert bool(m["sys_flag"] & BORNHOST_V6_FLAG) is v6
        assert m["store_host"].startswith("127.0.0.1:") and len(m["offset_msg_id"]) == 32  # the broker's own IPv4 host


@pytest.fixture
def broker_on(tmp_path: Path) -> Iterator[Callable[[str], InProcessBroker]]:
    started: list[InProcessBroker] = []

    def start(host: str) -> InProcessBroker:
        broker = InProcessBroker(tmp_path / f"store-{len(started)}", SMALL_STORE + SMALL_BROKER, ["--host", host])
        broker.host = host
        started.append(broker)
        return broker.start()

    try:
        yield start
    finally:
        for broker in started:
            broker.kill()


def test_born_host_of_an_ipv4_client(broker_on: Callable[[str], InProcessBroker]) -> None:
    assert_born_hosts(broker_on("127.0.0.1"), "127.0.0.1:{port}", v6=False)


@pytest.mark.skipif(not ipv6_loopback_bindable(), reason="::1 cannot be bound on this machine (no IPv6 loopback)")
def test_born_host_of_an_ipv6_client(broker_on: Callable[[str], InProcessBroker]) -> None:
    assert_born_hosts(broker_on("::1"), "[::1]:{port}", v6=True)
