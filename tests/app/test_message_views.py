"""store.render_views writes the JSON views app.message_view.message_json makes of decoded messages,
byte for byte as orjson writes them, and leaves to the Python path every message it cannot render exactly."""

from __future__ import annotations

import random
import zlib
from typing import Any

import orjson
import pytest

from app.message_view import message_json, received_view
from app.receive_models import received_json
from store import Popped, render_received, render_views
from store.codec.message_codec import decode_message, encode_message

LIMIT = 4 * 1024 * 1024
V4_HOST = bytes([10, 0, 0, 7, 0, 0, 0x2A, 0x9F])
V6_HOST = bytes(range(1, 17)) + (10911).to_bytes(4, "big")
BORN_V6, STORE_V6, COMPRESSED = 0x10, 0x20, 0x1
TEXTS = ["", "a", "order-1", "é", "\U0001f600", 'q"u\\o', "tab\tnl\nnul\x00del\x7f", "\x1f\x0b\x08\x0c\r", "a b  c ", "\u2028"]


def stored(rng: random.Random, props: bytes, *, body: bytes | None = None, topic: bytes = b"orders", sys_flag: int = 0) -> bytes:
    if body is None:
        body = rng.choice([rng.choice(TEXTS).encode(), rng.randbytes(rng.randrange(0, 40)), ("x" * rng.randrange(0, 3000)).encode()])
    return encode_message(
        topic, body, props, queue_id=rng.randrange(0, 8), queue_offset=rng.choice([0, 7, 2**40, -1]),
        physical_offset=rng.randrange(0, 2**50), sys_flag=sys_flag, born_timestamp=rng.choice([0, 1795791404840, -5]),
        born_host=V6_HOST if sys_flag & BORN_V6 else V4_HOST, store_timestamp=rng.randrange(0, 2**42),
        store_host=V6_HOST if sys_flag & STORE_V6 else V4_HOST, reconsume_times=rng.randrange(0, 17),
    )  # fmt: skip


def props_of(rng: random.Random) -> bytes:
    """Properties with distinct names: the surfaced ones, odd names and values, empty items, items without \\x01."""
    names = rng.sample(["TAGS", "KEYS", "UNIQ_KEY", "a", "", "é", 'x"y', "DELAY", "n\tm"], rng.randrange(0, 6))
    items = [f"{name}\x01{rng.choice(TEXTS)}\x02" for name in names]
    items += rng.choice([[], ["\x02"], ["noseparator\x02"], ["v\x01with\x01ones\x02"]])
    rng.shuffle(items)
    return "".join(items).encode()


def python_views(data: bytes) -> bytes:
    views, pos = [], 0
    while pos < len(data):
        views.append(orjson.dumps(message_json(decode_message(data, pos, hosts=False), LIMIT)))
        pos += int.from_bytes(data[pos : pos + 4], "big")
    return b",".join(views)


def test_random_messages_render_as_the_python_path_renders_them() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        data = b"".join(stored(rng, props_of(rng), sys_flag=rng.choice([0, BORN_V6, STORE_V6, BORN_V6 | STORE_V6, 0x4]))
                        for _ in range(rng.randrange(1, 4)))  # fmt: skip
        assert render_views(data) == python_views(data), data


@pytest.mark.parametrize(
    "why, message",
    [
        ("compressed", dict(props=b"", sys_flag=COMPRESSED, body=b"x\x9c")),
        ("topic not UTF-8", dict(props=b"", topic=b"or\xffders")),
        ("properties not UTF-8", dict(props=b"a\x01\xff\x02")),
        ("a name twice", dict(props=b"a\x011\x02b\x012\x02a\x013\x02")),
        ("TAGS twice", dict(props=b"TAGS\x01x\x02TAGS\x01y\x02")),
        ("65 properties", dict(props="".join(f"p{i}\x01v\x02" for i in range(65)).encode())),
    ],
)
def test_what_the_kernel_cannot_render_exactly_goes_the_python_way(why: str, message: dict[str, Any]) -> None:
    rng = random.Random(why)
    plain = stored(rng, b"TAGS\x01t\x02")
    assert render_views(plain) == python_views(plain)
    assert render_views(plain + stored(rng, **message)) is None, why


def test_sixty_four_properties_still_render() -> None:
    data = stored(random.Random(3), "".join(f"p{i}\x01v{i}\x02" for i in range(64)).encode())
    assert render_views(data) == python_views(data)


def test_bytes_that_are_no_whole_message_are_refused_without_reading_past_them() -> None:
    rng = random.Random(5)
    data = stored(rng, b"KEYS\x01a b\x02UNIQ_KEY\x01U1\x02") + stored(rng, b"")
    first = int.from_bytes(data[:4], "big")
    for cut in range(len(data)):
        got = render_views(data[:cut])
        if cut in (0, first):
            assert got == python_views(data[:cut])
        else:
            assert got is None, cut
    for _ in range(2000):  # damaged bytes: an answer or None, never a read outside the buffer
        broken = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            broken[rng.randrange(len(broken))] = rng.randrange(256)
        got = render_views(bytes(broken))
        assert got is None or isinstance(got, bytes)


def test_a_received_message_renders_as_the_python_path_renders_it() -> None:
    rng = random.Random(13)
    for _ in range(2000):
        message = stored(rng, props_of(rng), sys_flag=rng.choice([0, BORN_V6 | STORE_V6]))
        topic = rng.choice(["orders", "%RETRY%g_orders", 'é"x'])
        handle = rng.choice(["MCAxNzk1NzkxNDA2MDg2IDMwMDAwIDcgMCAwIDAgMA.HLX4YUc0VqrR5jpho_t-nw", "a:b", ""])
        times, until = rng.randrange(0, 20), rng.randrange(0, 2**42)
        view = received_json(message_json(decode_message(message, 0, hosts=False), LIMIT), handle, until, times, topic)
        assert render_received(message, topic, times, handle, until) == orjson.dumps(view)


def test_a_received_message_the_kernel_cannot_render_goes_the_python_way() -> None:
    rng = random.Random(17)
    assert render_received(stored(rng, b"a\x011\x02a\x012\x02"), "orders", 0, "h", 1) is None
    assert render_received(stored(rng, b"", sys_flag=COMPRESSED, body=b"x"), "orders", 0, "h", 1) is None
    two = stored(rng, b"") + stored(rng, b"")
    assert render_received(two, "orders", 0, "h", 1) is None  # exactly one message
    assert render_received(two[:-1], "orders", 0, "h", 1) is None


def test_a_received_view_falls_back_per_message_to_the_same_bytes() -> None:
    rng = random.Random(19)
    compressed = zlib.compress(b"inflated body")
    for message in (stored(rng, b"KEYS\x01k\x02"), stored(rng, b"TAGS\x01t\x02", sys_flag=COMPRESSED, body=compressed)):
        p = Popped(message, "orders", 0, 3, "handle", 1795791436086, 2)
        python = received_json(message_json(decode_message(message, 0, hosts=False), LIMIT), "g:handle", p.invisible_until_ms, 2, "orders")
        assert received_view(p, "g:handle", "orders", LIMIT) == orjson.dumps(python)
    assert b'"body":"inflated body"' in received_view(p, "g:handle", "orders", LIMIT)  # the Python path inflated it


def test_strings_render_whole_whatever_the_position_of_what_they_escape() -> None:
    # The kernel skips plain bytes 16 and 8 at a time: every escape at every offset of a long string, beside UTF-8.
    rng = random.Random(5)
    for special in ['"', "\\", "\x00", "\x1f", "\n", "\x7f", "é", "\U0001f600"]:
        for at in range(0, 40):
            text = "y" * at + special + "z" * rng.randrange(0, 40)
            props = f"TAGS\x01{text}\x02k\x01{text[::-1]}\x02".encode()
            data = stored(rng, props, body=text.encode())
            assert render_views(data) == python_views(data), (special, at)
