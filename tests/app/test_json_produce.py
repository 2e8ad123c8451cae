"""store.packed_json (the json_produce kernel) against its reference: app.produce_parse.parse_json, then the
store's packing of the parsed messages (store.put.put_batch.properties_of, store.pack_batch).

Whatever the kernel packs, the reference accepts and packs to the same bytes with the same keys, queue and form;
the common shape is packed by the kernel, not left to the reference."""

from __future__ import annotations

import json
import random
import tracemalloc
from array import array
from typing import Any

import orjson
import pytest

from app.problems import ProblemError
from app.produce_parse import Limits, parse_json
from app.routes_produce import RESERVED_NAMES, host_hex_bytes, packed_reply
from store import EncodedItems, PackedProduce, pack_batch, packed_json, render_produce_reply
from store.codec.message import UNIQ_KEY_CHUNK, UniqKeyGenerator
from store.put.put_batch import properties_of

LIMITS = Limits(max_message_size_bytes=4096, max_batch_messages=50, delay_levels_ms=[1000] * 18)


def pack(body: bytes, limits: Limits = LIMITS) -> PackedProduce | None:
    return packed_json(body, limits.max_batch_messages, limits.max_message_size_bytes, RESERVED_NAMES)


def reference(body: bytes, keys: list[str], limits: Limits = LIMITS) -> tuple[bytes, int, bool] | None:
    """The reference's bytes (with the kernel's keys), the queue every message names (-1: none) and the form;
    None when it refuses the body."""
    try:
        drafts, is_batch = parse_json(body, limits)
    except ProblemError:
        return None
    queues = {d.queue_id for d in drafts}
    assert len(queues) == 1, "the kernel packed messages naming different queues"
    (queue,) = queues
    assert all(d.msg_id is None and d.dedup_id is None and not d.delay_from and d.transaction is None for d in drafts)
    data = pack_batch([(d.body, properties_of(d, k), 0) for d, k in zip(drafts, keys, strict=True)])
    return data, -1 if queue is None else queue, is_batch


def agrees(body: bytes, limits: Limits = LIMITS) -> PackedProduce | None:
    got = pack(body, limits)
    if got is not None:
        assert reference(body, got.uniq_keys, limits) == (got.data, got.queue_id, got.is_batch), body[:200]
    return got


@pytest.mark.parametrize(
    "doc",
    [
        {"body": "hello"},
        {"body": ""},
        {"body": "x" * 1024, "queue_id": 2},
        {"body": 'quote " slash \\ solidus / controls \b\f\n\r\t\x00\x1f del \x7f', "encoding": "utf-8"},
        {"body": "é 中 😀 \u2028 \ufeff", "tags": "é" * 255, "keys": ["k1", "é"], "properties": {"a": "b", "é": "ü"}},
        {"tags": "t", "body": "tags before the body", "keys": [], "properties": {}},
        {"body": "empty tag", "tags": ""},
        {"messages": [{"body": "a"}, {"body": "b"}]},
        {"messages": [{"body": "a", "queue_id": 0}, {"body": "b", "queue_id": 0, "tags": "t"}]},
        {"messages": [{"body": str(i), "properties": {f"p{j}": str(j) for j in range(i)}} for i in range(20)]},
    ],
)
def test_the_common_shape_is_packed_as_the_reference_packs_it(doc: dict[str, Any]) -> None:
    for text in (
        json.dumps(doc).encode(),
        json.dumps(doc, ensure_ascii=False).encode(),
        orjson.dumps(doc),
        json.dumps(doc, indent=2).encode(),
    ):
        got = agrees(text)
        assert got is not None, text[:120]
        assert len(got.uniq_keys) == (len(doc["messages"]) if "messages" in doc else 1)
        assert len(set(got.uniq_keys)) == len(got.uniq_keys) and all(len(k) == 32 for k in got.uniq_keys)


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"[]",
        b"{}",
        b'{"messages": []}',
        b'{"body": null}',
        b'{"body": 1}',
        b'{"body": "a", "tags": null}',
        b'{"body": "a", "body": "b"}',
        b'{"body": "a", "properties": {"p": "1", "p": "2"}}',
        b'{"b\\u006fdy": "escaped name"}',
        b'{"body": "lone \\ud800 surrogate"}',
        b'{"body": "lone \\udc00 surrogate"}',
        b'{"body": "bad \\x escape"}',
        b'{"body": "raw \x01 control"}',
        b'{"body": "bad utf-8 \xc3\x28"}',
        b'{"body": "surrogate in utf-8 \xed\xa0\x80"}',
        b'{"body": "a"} trailing',
        b'{"body": "a",}',
        b'{"body": "a", "queue_id": -1}',
        b'{"body": "a", "queue_id": 1.0}',
        b'{"body": "a", "queue_id": 1e2}',
        b'{"body": "a", "queue_id": 01}',
        b'{"body": "a", "queue_id": 1234567890123456789}',
        b'{"body": "a", "encoding": "base64"}',
        b'{"body": "a", "msg_id": "m"}',
        b'{"body": "a", "delay_ms": 5}',
        b'{"body": "a", "tags": "*"}',
        b'{"body": "a", "tags": "a||b"}',
        b'{"body": "a", "tags": "\\u0085"}',
        b'{"body": "a", "keys": ["a b"]}',
        b'{"body": "a", "keys": [""]}',
        b'{"body": "a", "properties": {"KEYS": "x"}}',
        b'{"body": "a", "properties": {"": "x"}}',
        b'{"body": "a", "properties": {"n": "\\u0001"}}',
        b'{"messages": [{"body": "a", "queue_id": 1}, {"body": "b"}]}',
        b'{"messages": [{"body": "a"}], "tags": "t"}',
        b'{"body": "a", "messages": []}',
    ],
)
def test_what_the_kernel_does_not_take_goes_to_the_reference(text: bytes) -> None:
    assert agrees(text) is None


def test_limits_send_a_body_to_the_reference() -> None:
    small = Limits(max_message_size_bytes=10, max_batch_messages=2, delay_levels_ms=[1000])
    assert agrees(b'{"body": "0123456789"}', small) is not None
    assert agrees(b'{"body": "0123456789A"}', small) is None
    assert agrees(b'{"body": "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9"}', small) is not None  # 10 bytes once decoded
    assert agrees(b'{"messages": [{"body": "a"}, {"body": "b"}]}', small) is not None
    assert agrees(b'{"messages": [{"body": "a"}, {"body": "b"}, {"body": "c"}]}', small) is None
    many = json.dumps({"messages": [{"body": "x"}] * (UNIQ_KEY_CHUNK + 1)}).encode()
    big = Limits(max_message_size_bytes=10, max_batch_messages=100_000, delay_levels_ms=[1000])
    assert pack(many, big) is None  # one clock reading per UNIQ_KEY_CHUNK keys: the reference draws those


def test_property_size_past_the_batch_encoding_goes_to_the_reference() -> None:
    props = {f"p{i}": "v" * 1000 for i in range(40)}  # over 32767 bytes of properties
    assert agrees(json.dumps({"body": "a", "properties": props}).encode()) is None


def test_reserved_keys_are_the_generators_next_values() -> None:
    generator = UniqKeyGenerator(clock_ms=lambda: 1_700_000_000_000)
    before = generator.next()
    head, first = generator.reserve(3)
    after = generator.next()
    assert head.decode() == before[:28] == after[:28]
    assert first == int(before[28:], 16) + 1 and int(after[28:], 16) == first + 3


_TEXT = ["a", " ", '"', "\\", "/", "\x00", "\x1f", "\x7f", "\x85", "é", "中", "😀", "\u2028", "|", "*", "\x01", "\x02"]


def _text(rng: random.Random, most: int) -> str:
    return "".join(rng.choice(_TEXT) for _ in range(rng.randrange(most)))


def _message(rng: random.Random) -> dict[str, Any]:
    msg: dict[str, Any] = {"body": _text(rng, 40)}
    if rng.random() < 0.3:
        msg["queue_id"] = rng.choice([0, 1, 3, -1, 2.0, True, None, "1"])
    if rng.random() < 0.4:
        msg["tags"] = rng.choice(["", "t", "*", "a||b", "x" * 255, "x" * 256, _text(rng, 6)])
    if rng.random() < 0.3:
        msg["keys"] = [rng.choice(["k", "a b", "", "é", _text(rng, 4)]) for _ in range(rng.randrange(3))]
    if rng.random() < 0.3:
        msg["properties"] = {rng.choice(["a", "b", "", "KEYS", "TAGS", "é", _text(rng, 3)]): _text(rng, 5) for _ in range(rng.randrange(4))}
    if rng.random() < 0.05:
        msg[rng.choice(["encoding", "msg_id", "sharding_key", "delay_level", "unknown"])] = rng.choice(["utf-8", "base64", "m", 1, None])
    items = list(msg.items())
    rng.shuffle(items)
    return dict(items)


def _mutated(rng: random.Random, text: bytes) -> bytes:
    at = rng.randrange(len(text) + 1)
    choice = rng.randrange(4)
    if choice == 0:
        return text[:at]
    if choice == 1:
        return text[:at] + bytes([rng.randrange(256)]) + text[at:]
    if choice == 2:
        return text[:at] + text[at + 1 :]
    return text[:at] + rng.choice([b",", b"}", b"]", b'"', b"\\", b"\\u", b" ", b'"body":"d",']) + text[at:]


def _common_shape(doc: dict[str, Any]) -> bool:
    """Whether every message has only the members the kernel takes, with values of their types, one queue or none."""
    messages = doc["messages"] if "messages" in doc else [doc]
    takes = {"body": str, "tags": str, "keys": list, "properties": dict}
    for msg in messages:
        for name, value in msg.items():
            if name == "queue_id":
                if type(value) is not int:
                    return False
            elif name == "encoding":
                if value != "utf-8":
                    return False
            elif type(value) is not takes.get(name):
                return False
    return len({m.get("queue_id") for m in messages}) == 1


def _accepted(text: bytes) -> bool:
    try:
        parse_json(text, LIMITS)
    except ProblemError:
        return False
    return True


def test_random_bodies_agree_with_the_reference() -> None:
    rng = random.Random(31)
    for _ in range(4000):
        doc: dict[str, Any] = {"messages": [_message(rng) for _ in range(rng.randrange(4))]} if rng.random() < 0.5 else _message(rng)
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1])).encode()
        if rng.random() < 0.3:
            agrees(_mutated(rng, text))
            continue
        got = agrees(text)
        if _common_shape(doc) and _accepted(text):
            assert got is not None, text[:200]  # the common shape is the kernel's, not the reference's


@pytest.mark.parametrize("messages", [1, 2, 100])
@pytest.mark.parametrize("store_host", [b"\x7f\x00\x00\x01\x00\x00\x27\x11", bytes(range(20))])
def test_the_reply_is_written_as_orjson_writes_the_reference_reply(messages: int, store_host: bytes) -> None:
    body = json.dumps({"messages": [{"body": "x"}] * messages} if messages > 1 else {"body": "x"}).encode()
    packed = pack(body, Limits(max_message_size_bytes=10, max_batch_messages=100, delay_levels_ms=[1000]))
    assert packed is not None
    rng = random.Random(messages)
    offsets = array("q", [v for i in range(messages) for v in (rng.randrange(1 << 62) if i == 0 else 2**63 - 1 - i, 90)]).tobytes()
    items = EncodedItems(offsets, rng.randrange(1 << 40), 7, 1_700_000_000_123, store_host)
    reply = render_produce_reply(
        packed.head, packed.first, host_hex_bytes(store_host), items.queue_id, items.first_queue_offset, items.store_timestamp,
        items.offsets, packed.is_batch,
    )  # fmt: skip
    assert reply == orjson.dumps(packed_reply(packed.uniq_keys, items, packed.is_batch))


def test_a_key_counter_wraps_as_the_generator_wraps_it() -> None:
    head, first = b"7F000001ABCD0123456789AB00000000"[:28], 0xFFFE
    items = EncodedItems(array("q", [0, 90, 90, 90, 180, 90]).tobytes(), 0, 0, 0, b"\x7f\x00\x00\x01\x00\x00\x27\x11")
    keys = json.loads(render_produce_reply(head, first, b"7F00000100002711", 0, 0, 0, items.offsets, True))
    assert [r["msg_id"][28:] for r in keys["results"]] == ["FFFE", "FFFF", "0000"]


@pytest.mark.parametrize("special", ['"', "\\", "\n", "\x1f", "\x7f", "é", "😀", "\u2028"])
def test_a_special_character_at_every_place_of_a_step(special: str) -> None:
    """Strings are read 16 and 8 bytes a step: a character that ends a plain run, at every place of a step."""
    for before in range(40):
        text = "x" * before + special + "y" * (before % 19)
        for ensure_ascii in (True, False):
            doc = {"body": text, "tags": text} if special.isprintable() else {"body": text}  # a control is no tag
            got = agrees(json.dumps(doc, ensure_ascii=ensure_ascii).encode())
            assert got is not None


def test_a_body_of_braces_is_sized_by_the_message_limit() -> None:
    """The output is allocated before the parse: bounded by the message limit, not by the body's '{' bytes."""
    braces = b"{" * 4_000_000
    tracemalloc.start()
    try:
        assert pack(braces) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < len(braces) + (1 << 20)  # the output: the body plus 76 bytes an item of 50, and room for others
    assert pack(b'{"messages": [' + b'{"body": "{{{{{{{{"},' * 49 + b'{"body": "{{{{"}]}') is not None
