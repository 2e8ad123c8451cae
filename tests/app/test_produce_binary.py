"""Binary batch produce (application/x-tidemq-batch) over a real server on loopback: good batches
read back field by field, and every malformed form refused whole with a stable code and nothing stored."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import httpx
import pytest

from store.codec.message_codec import decode_message, iter_messages
from store.native import pack_batch
from tests.app.helpers import commitlog_max, problem, wait_visible
from tests.app.test_produce import create

pytestmark = pytest.mark.timeout(60)

BATCH = {"content-type": "application/x-tidemq-batch"}


def props(**pairs: str) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs.items()).encode()


def post(client: httpx.Client, topic: str, body: bytes, **params: str) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", content=body, headers=BATCH, params=params)


def pull_stored(client: httpx.Client, topic: str, queue_id: int, offset: int, count: int) -> list[dict[str, Any]]:
    """The stored messages as the batch pull returns them, decoded (once all `count` are dispatched)."""
    wait_visible(client, topic, queue_id, offset + count - 1)
    r = client.get(
        f"/v1/topics/{topic}/queues/{queue_id}/messages",
        params={"offset": offset, "max": count},
        headers={"accept": "application/x-tidemq-batch"},
    )
    assert r.status_code == 200 and r.headers["x-tidemq-count"] == str(count), r.headers
    return [decode_message(r.content, pos) for pos, _ in iter_messages(r.content)]


def test_a_batch_is_stored_in_one_queue_as_sent(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=3)
    items = [
        (b"\x00\xffbinary", props(TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="ID-1", colour="blue"), 7),
        (b"", b"", 0),
        ("ünïcode €".encode(), props(TAGS="标签", UNIQ_KEY="ID-3"), -1),
    ]
    body = bytearray(pack_batch(items))
    body[8:12] = (zlib.crc32(items[0][0]) & 0x7FFFFFFF).to_bytes(4, "big")  # a client may send the CRC: it is checked
    r = post(client, topic, bytes(body), queue_id="2")
    assert r.status_code == 201, r.text
    sent = r.json()
    assert {k: sent[k] for k in ("queue_id", "first_queue_offset", "count")} == {"queue_id": 2, "first_queue_offset": 0, "count": 3}
    assert len(sent["offset_msg_id_prefix"]) == 16 and sent["store_timestamp"] > 0
    offsets = sent["commitlog_offsets"]
    assert offsets == sorted(offsets) and len(offsets) == 3
    got = pull_stored(client, topic, 2, 0, 3)
    for i, (msg, (data, _, flag)) in enumerate(zip(got, items, strict=True)):
        assert (msg["topic"], msg["queue_id"], msg["queue_offset"], msg["body"], msg["flag"]) == (topic, 2, i, data, flag)
        assert msg["commitlog_offset"] == offsets[i] and msg["store_timestamp"] == sent["store_timestamp"]
        assert msg["offset_msg_id"] == sent["offset_msg_id_prefix"] + f"{offsets[i]:016X}"
        assert msg["body_crc"] == zlib.crc32(data) & 0x7FFFFFFF and msg["sys_flag"] == 0
    assert got[0]["properties"] == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID-1", "colour": "blue"}
    assert (got[0]["tags"], got[0]["keys"], got[0]["msg_id"]) == ("TagA", ["k1", "k2"], "ID-1")
    assert got[1]["properties"] == {} and got[1]["msg_id"] == got[1]["offset_msg_id"]  # no UNIQ_KEY sent: none added
    # Dispatched like any message: the tag filter and the key index find them.
    r = client.get(f"/v1/topics/{topic}/queues/2/messages", params={"offset": 0, "tag": "标签"})
    assert [m["body"] for m in r.json()["messages"]] == ["ünïcode €"]
    r = client.get(f"/v1/topics/{topic}/messages", params={"key": "k2"})
    assert [m["commitlog_offset"] for m in r.json()["messages"]] == [offsets[0]]


def test_without_queue_id_each_request_goes_round_robin(client: httpx.Client, topic: str) -> None:
    create(client, topic, queues=2)
    queues = [post(client, topic, pack_batch([(b"m", b"", 0)] * 2)).json()["queue_id"] for _ in range(4)]
    assert sorted(queues) == [0, 0, 1, 1] and queues[0] != queues[1]
    second = post(client, topic, pack_batch([(b"n", b"", 0)]), queue_id="1").json()
    assert second["first_queue_offset"] == 4  # after the two round-robin batches of two in queue 1


@pytest.mark.parametrize(
    ("path", "media"),
    [
        ("messages", "application/x-tidemq-batch"),
        ("messages/batch", "application/x-tidemq-batch"),  # produceBinaryBatch
        ("messages/batch", "application/octet-stream"),  # produceBinaryBatch, as generated clients send it
    ],
)
def test_a_batch_larger_than_the_raw_body_cap_is_taken_up_to_the_batch_cap(client: httpx.Client, topic: str, path: str, media: str) -> None:
    """Binary batches are capped like JSON ones (max_json_body_bytes, 1 MiB here), not like a raw body (128 KiB)."""
    create(client, topic)
    body = pack_batch([(b"z" * 60_000, b"", 0)] * 10)
    assert 131_072 < len(body) < 1_048_576
    r = client.post(f"/v1/topics/{topic}/{path}", content=body, headers={"content-type": media})
    assert r.status_code == 201, r.text
    wait_visible(client, topic, r.json()["queue_id"], 9)
    assert r.json()["count"] == 10
    over = pack_batch([(b"z" * 60_000, b"", 0)] * 18)
    refused = problem(client.post(f"/v1/topics/{topic}/{path}", content=over, headers={"content-type": media}), 413, "BODY_TOO_LARGE")
    assert "max_json_body_bytes" in refused["detail"], refused


def corrupt(body: bytes, pos: int, value: bytes) -> bytes:
    out = bytearray(body)
    out[pos : pos + len(value)] = value
    return bytes(out)


GOOD = pack_batch([(b"first", props(TAGS="a"), 0), (b"second", b"", 0)])
SECOND = 22 + 5 + len(props(TAGS="a"))  # where the second message starts


MALFORMED = [
        (GOOD[:10], 400, "BATCH_INVALID", 0),  # shorter than a message's fixed part
        (GOOD[:-1], 400, "BATCH_INVALID", 1),  # the last message cut short
        (GOOD + b"\x00", 400, "BATCH_INVALID", 2),  # a stray byte after the last message
        (corrupt(GOOD, 16, struct.pack(">i", 1000)), 400, "BATCH_INVALID", 0),  # body length past the body
        (corrupt(GOOD, SECOND, struct.pack(">i", 10**6)), 400, "BATCH_INVALID", 1),  # TOTALSIZE past the body
        (corrupt(GOOD, 16, struct.pack(">i", -1)), 400, "BATCH_INVALID", 0),  # negative body length
        (corrupt(GOOD, 0, struct.pack(">i", len(GOOD) - 1)), 400, "BATCH_INVALID", 0),  # TOTALSIZE disagrees with the parts
        (corrupt(GOOD, SECOND + 4, b"\xda\xa3\x20\xa7"), 400, "BATCH_INVALID", 1),  # a MAGICCODE that is not 0
        (corrupt(GOOD, 8, struct.pack(">i", 12345)), 400, "BATCH_INVALID", 0),  # a wrong BODYCRC
        (pack_batch([(b"x", props(DELAY="2"), 0)]), 400, "PROPERTIES_INVALID", 0),
        (pack_batch([(b"x", props(WAIT="true"), 0), (b"y", props(TIMER_DELAY_MS="500"), 0)]), 400, "PROPERTIES_INVALID", 1),
        (pack_batch([(b"x", b"", 0), (b"y", props(REAL_TOPIC="other"), 0)]), 400, "PROPERTIES_INVALID", 1),
        (pack_batch([(b"x", b"", 0), (b"y", props(TIMER_OUT_MS="1"), 0)]), 400, "PROPERTIES_INVALID", 1),
        (pack_batch([(b"x", props(WAIT="true", TRAN_MSG="true", PGROUP="pg"), 0)]), 400, "PROPERTIES_INVALID", 0),
        (pack_batch([(b"x", b"TAGS\x01a", 0)]), 400, "PROPERTIES_INVALID", 0),  # no closing \x02
        (pack_batch([(b"x", b"\xff\x01v\x02", 0)]), 400, "PROPERTIES_INVALID", 0),  # not UTF-8
        (pack_batch([(b"x", props(TAGS="a||b"), 0)]), 400, "TAG_INVALID", 0),
        (pack_batch([(b"x", props(UNIQ_KEY="has space"), 0)]), 400, "MESSAGE_ID_INVALID", 0),
        (pack_batch([(b"x", b"", 0)] * 1001), 413, "BATCH_TOO_LARGE", 1000),
        (pack_batch([(b"x", b"", 0), (b"y" * 65537, b"", 0)]), 413, "MESSAGE_TOO_LARGE", 1),
        (pack_batch([(b"x", props(p="v" * 33_000), 0)]), 413, "PROPERTIES_TOO_LARGE", 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "status", "code", "index"),
    MALFORMED,
    ids=[
        "short-head", "short-last", "stray-byte", "body-length-past-end", "total-past-end", "negative-body", "total-disagrees",
        "magic", "crc", "delay", "timer", "real-topic", "timer-mark", "transaction-mark", "unterminated-property", "property-not-utf8", "tags", "uniq-key", "too-many",
        "body-too-large", "properties-too-large",
    ],
)  # fmt: skip
def test_a_malformed_batch_is_refused_whole_and_stores_nothing(
    quiet_client: httpx.Client, topic: str, body: bytes, status: int, code: str, index: int
) -> None:
    before = commitlog_max(quiet_client)
    reply = problem(post(quiet_client, topic, body), status, code)
    assert reply["index"] == index and reply["batch_error"] and f"message {index}" in reply["detail"]
    assert commitlog_max(quiet_client) == before
    assert quiet_client.get(f"/v1/topics/{topic}").status_code == 404, "a refused batch creates no topic"


@pytest.mark.parametrize("queue_id", [None, "1"])
def test_a_malformed_batch_to_a_topic_that_exists_is_refused_whole_as_well(
    quiet_client: httpx.Client, topic: str, queue_id: str | None
) -> None:
    """To a topic that exists a batch first meets the put lane, whose kernel declines what the check refuses: the same
    answers as for a new topic, message named, nothing stored; then a good batch is stored in order."""
    create(quiet_client, topic, queues=4)
    params = {} if queue_id is None else {"queue_id": queue_id}
    before = commitlog_max(quiet_client)
    for body, status, code, index in MALFORMED:
        reply = problem(post(quiet_client, topic, body, **params), status, code)
        assert reply["index"] == index and f"message {index}" in reply["detail"], (code, reply)
    problem(post(quiet_client, topic, b"", **params), 400, "BATCH_EMPTY")
    assert commitlog_max(quiet_client) == before
    sent = post(quiet_client, topic, GOOD, queue_id="1").json()
    assert (sent["queue_id"], sent["first_queue_offset"], sent["count"]) == (1, 0, 2)
    assert [m["body"] for m in pull_stored(quiet_client, topic, 1, 0, 2)] == [b"first", b"second"]


def test_a_batch_the_lane_declines_keeps_the_queue_the_round_robin_gave_it(client: httpx.Client, topic: str) -> None:
    """A batch with a dedup id goes past the put lane (the store puts it message by message): it is stored in the queue
    chosen for it before the lane declined, so the round robin moves one queue a request either way."""
    create(client, topic, queues=3)
    plain = pack_batch([(b"plain", b"", 0)])
    deduped = pack_batch([(b"once", props(TIDEMQ_DEDUP_ID="rr-1"), 0)])
    replies = [post(client, topic, body) for body in (plain, deduped, plain, deduped)]
    assert [r.status_code for r in replies] == [201, 201, 201, 200]  # the second dedup id was seen: nothing stored
    assert [r.json()["queue_id"] for r in replies[:3]] == [0, 1, 2]
    assert [m["body"] for m in pull_stored(client, topic, 1, 0, 1)] == [b"once"]
    assert post(client, topic, plain).json()["queue_id"] == 1  # the duplicate took queue 0's turn


def test_a_malformed_batch_without_queue_id_leaves_the_round_robin_where_it_was(client: httpx.Client, topic: str) -> None:
    """The lane takes the next queue before it looks at the body; a batch the check then refuses stores nothing and
    gives that queue back, so the next request gets it."""
    create(client, topic, queues=3)
    plain = pack_batch([(b"plain", b"", 0)])
    assert post(client, topic, plain).json()["queue_id"] == 0
    for bad in (plain[:-3], b"\x00" * 3):  # cut inside its message; too short for a message's TOTALSIZE
        refused = post(client, topic, bad)
        assert refused.status_code == 400 and refused.json()["code"] == "BATCH_INVALID"
    assert [post(client, topic, plain).json()["queue_id"] for _ in range(3)] == [1, 2, 0]


@pytest.mark.parametrize(
    ("body", "params", "status", "code"),
    [
        (b"", {}, 400, "BATCH_EMPTY"),
        (GOOD, {"tags": "x"}, 400, "REQUEST_INVALID"),
        (GOOD, {"queue_id": "one"}, 400, "REQUEST_INVALID"),
        (GOOD, {"queue_id": "4"}, 404, "QUEUE_NOT_FOUND"),
    ],
)
def test_bad_requests_store_nothing(
    quiet_client: httpx.Client, topic: str, body: bytes, params: dict[str, str], status: int, code: str
) -> None:
    create(quiet_client, topic, queues=4)
    before = commitlog_max(quiet_client)
    problem(post(quiet_client, topic, body, **params), status, code)
    assert commitlog_max(quiet_client) == before


def test_body_over_the_batch_cap_and_reserved_topics_are_refused(quiet_client: httpx.Client) -> None:
    before = commitlog_max(quiet_client)
    problem(post(quiet_client, "big", b"\x00" * (1_048_576 + 1)), 413, "BODY_TOO_LARGE")
    problem(post(quiet_client, "SCHEDULE_TOPIC_XXXX", GOOD), 403, "TOPIC_RESERVED")
    problem(post(quiet_client, "bad.topic", GOOD), 400, "TOPIC_INVALID")
    assert commitlog_max(quiet_client) == before
