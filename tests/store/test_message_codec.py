"""The commitlog message layout, byte for byte, and its round trips."""

from __future__ import annotations

import collections
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.codec.message import (
    MessageInner,
    decode_offset_msg_id,
    decode_properties,
    encode_properties,
    format_properties,
    java_string_hash,
    offset_msg_id,
    parse_properties,
    tags_hash,
    topic_problem,
)
from store.codec.message_codec import (
    BLANK_MAGIC_CODE,
    FIXED_PART_BYTES,
    MESSAGE_MAGIC_CODE,
    DecodeOutcome,
    check_message,
    decode_message,
    encode_message,
    iter_messages,
    write_blank_into,
)


def test_fields_lie_at_rocketmq_positions() -> None:
    body = b"hello"
    props = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"})
    raw = encode_message(
        b"TopicA", body, props, queue_id=3, queue_offset=7, physical_offset=1234, flag=9, sys_flag=2,
        born_timestamp=1111, born_host=bytes([10, 0, 0, 1]) + (5555).to_bytes(4, "big"), store_timestamp=2222,
        store_host=bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big"), reconsume_times=4, prepared_transaction_offset=77,
    )  # fmt: skip
    total = FIXED_PART_BYTES + len(body) + len(b"TopicA") + len(props)
    assert len(raw) == total
    (size, magic, crc, qid, flag, qoff, phys, sysflag, bts) = struct.unpack_from(">iIiiiqqiq", raw, 0)
    assert (size, magic, qid, flag, qoff, phys, sysflag, bts) == (total, 0xDAA320A7, 3, 9, 7, 1234, 2, 1111)
    assert crc == zlib.crc32(body) & 0x7FFFFFFF  # RocketMQ's UtilAll.crc32 masks to 31 bits
    assert raw[48:52] == bytes([10, 0, 0, 1]) and raw[52:56] == (5555).to_bytes(4, "big")  # BORNHOST
    assert struct.unpack_from(">q", raw, 56)[0] == 2222  # STORETIMESTAMP
    assert raw[64:72] == bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")  # STOREHOST
    assert struct.unpack_from(">iq", raw, 72) == (4, 77)  # RECONSUMETIMES, PREPARED TRANSACTION OFFSET
    assert struct.unpack_from(">i", raw, 84)[0] == len(body)
    assert raw[88:93] == body
    assert raw[93] == 6 and raw[94:100] == b"TopicA"
    assert struct.unpack_from(">h", raw, 100)[0] == len(props)
    assert raw[102:] == props


def test_decode_returns_every_field() -> None:
    props = encode_properties({"TAGS": "T", "KEYS": "a b", "UNIQ_KEY": "U1"})
    raw = encode_message(b"top", b"xyz", props, queue_id=1, queue_offset=5, physical_offset=99, born_timestamp=10, store_timestamp=20)
    msg = decode_message(raw, 0)
    assert msg["topic"] == "top" and msg["body"] == b"xyz" and msg["queue_id"] == 1
    assert msg["queue_offset"] == 5 and msg["commitlog_offset"] == 99
    assert msg["tags"] == "T" and msg["keys"] == ["a", "b"] and msg["msg_id"] == "U1"
    assert msg["born_timestamp"] == 10 and msg["store_timestamp"] == 20
    assert decode_offset_msg_id(msg["offset_msg_id"])[2] == 99


def test_check_detects_bad_magic_length_and_crc() -> None:
    raw = bytearray(encode_message(b"t", b"body-bytes", b""))
    assert check_message(raw, 0, len(raw)).outcome is DecodeOutcome.MESSAGE
    flipped = bytearray(raw)
    flipped[FIXED_PART_BYTES - 3] ^= 0xFF  # inside the body
    result = check_message(flipped, 0, len(flipped))
    assert result.outcome is DecodeOutcome.CORRUPT and "CRC" in result.reason
    bad_magic = bytearray(raw)
    bad_magic[4] ^= 1
    assert check_message(bad_magic, 0, len(bad_magic)).outcome is DecodeOutcome.CORRUPT
    bad_len = bytearray(raw)
    struct.pack_into(">i", bad_len, 0, len(raw) + 5)
    assert check_message(bad_len, 0, len(bad_len)).outcome is DecodeOutcome.CORRUPT
    torn = raw[: len(raw) - 4]
    assert check_message(torn, 0, len(torn)).outcome is DecodeOutcome.CORRUPT
    assert check_message(bytes(64), 0, 64).outcome is DecodeOutcome.END


def test_blank_marker() -> None:
    buf = bytearray(100)
    write_blank_into(buf, 40, 60)
    assert struct.unpack_from(">iI", buf, 40) == (60, BLANK_MAGIC_CODE)
    result = check_message(buf, 40, 100)
    assert result.outcome is DecodeOutcome.BLANK and result.size == 60


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("TagA", 2598919),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -2147483648),
        ("é", 233),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_tags_hash_of_no_tag_is_zero() -> None:
    assert tags_hash("") == 0
    assert tags_hash("TagA") == 2598919


def test_offset_msg_id_round_trip() -> None:
    host = bytes([192, 168, 1, 2]) + (10911).to_bytes(4, "big")
    msg_id = offset_msg_id(host, 123456789)
    assert msg_id == "C0A80102" + "00002A9F" + "00000000075BCD15"
    assert decode_offset_msg_id(msg_id) == ("192.168.1.2", 10911, 123456789)
    for bad in ("", "XYZ", "0" * 31, "G" * 32):
        with pytest.raises(ValueError):
            decode_offset_msg_id(bad)


@pytest.mark.parametrize("topic", ["", "../x", "a/b", "a b", "x" * 128, "t\x00", "中文"])
def test_topic_problems(topic: str) -> None:
    assert topic_problem(topic) is not None


@pytest.mark.parametrize("topic", ["a", "Topic_1-x", "%RETRY%g", "a|b", "x" * 127])
def test_valid_topics(topic: str) -> None:
    assert topic_problem(topic) is None


property_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), max_size=20)


@settings(max_examples=100, deadline=None)
@given(
    body=st.binary(max_size=2048),
    topic=st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True),
    props=st.dictionaries(property_text.filter(bool), property_text, max_size=6),
    queue_id=st.integers(0, 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    phys=st.integers(0, 2**63 - 1),
    ts=st.integers(0, 2**62),
)
def test_encode_decode_round_trip(
    body: bytes, topic: str, props: dict[str, str], queue_id: int, queue_offset: int, phys: int, ts: int
) -> None:
    raw = encode_message(
        topic.encode(), body, encode_properties(props), queue_id, queue_offset, phys, born_timestamp=ts, store_timestamp=ts
    )
    result = check_message(raw, 0, len(raw))
    assert result.outcome is DecodeOutcome.MESSAGE and result.size == len(raw)
    assert result.request is not None and result.request.topic == topic and result.request.commitlog_offset == phys
    msg = decode_message(raw, 0)
    assert (msg["body"], msg["topic"], msg["properties"], msg["queue_id"], msg["queue_offset"]) == (
        body,
        topic,
        props,
        queue_id,
        queue_offset,
    )
    assert decode_properties(encode_properties(props)) == props
    assert list(iter_messages(raw + raw)) == [(0, len(raw)), (len(raw), len(raw))]
    assert struct.unpack_from(">I", raw, 4)[0] == MESSAGE_MAGIC_CODE


@settings(max_examples=50, deadline=None)
@given(
    body=st.binary(max_size=512),
    props=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "DELAY"]), property_text, max_size=5),
    queue_id=st.integers(0, 1000),
)
def test_dispatch_decoder_agrees_with_the_checker(body: bytes, props: dict[str, str], queue_id: int) -> None:
    from store.codec.message_codec import DISPATCH_BLANK, DISPATCH_END, decode_for_dispatch

    raw = encode_message(
        b"SCHEDULE_TOPIC_XXXX" if "DELAY" in props else b"Top", body, encode_properties(props), queue_id, 7, 99, store_timestamp=5
    )
    levels = [1000, 5000]
    size, request = decode_for_dispatch(raw, 0, len(raw), levels)
    expected = check_message(raw, 0, len(raw), check_crc=False, delay_levels_ms=levels).request
    assert size == len(raw) and request == expected
    assert decode_for_dispatch(raw[:-1], 0, len(raw) - 1, levels) == (DISPATCH_END, None)
    blank = bytearray(16)
    write_blank_into(blank, 0, 16)
    assert decode_for_dispatch(blank, 0, 16, levels) == (DISPATCH_BLANK, None)
    assert decode_for_dispatch(bytes(16), 0, 16, levels) == (DISPATCH_END, None)


@settings(max_examples=200, deadline=None)
@given(props=st.dictionaries(st.text(max_size=40), st.text(max_size=200), max_size=12))
def test_the_properties_kernel_writes_what_its_reference_writes(props: dict[str, str]) -> None:
    # Any text the standard library encodes, in the dict's order; surrogates are refused below.
    if any("\ud800" <= c <= "\udfff" for text in (*props, *props.values()) for c in text):
        with pytest.raises(UnicodeEncodeError):
            encode_properties(props)
        with pytest.raises(UnicodeEncodeError):
            format_properties(props)
        return
    assert encode_properties(props) == format_properties(props)
    msg = MessageInner("T", b"", properties=dict(props))
    assert msg.properties_bytes == format_properties(props)
    assert msg.tail == len(msg.properties_bytes).to_bytes(2, "big") + msg.properties_bytes  # at most 11,544 bytes here


def test_a_property_value_that_is_not_text_is_formatted_as_the_reference_formats_it() -> None:
    # The kernel declines a name or value that is not a str; the reference's formatting writes it.
    props: Any = {"TAGS": "a", "DELAY": 3}  # a value a caller typed wrong
    assert encode_properties(props) == b"TAGS\x01a\x02DELAY\x013\x02"
    assert MessageInner("T", b"", properties=props).properties_bytes == b"TAGS\x01a\x02DELAY\x013\x02"
    ordered = collections.OrderedDict([("b", "1"), ("a", "2")])  # another mapping: its items() as the reference reads them
    assert encode_properties(ordered) == b"b\x011\x02a\x012\x02"


# Property-string fragments: the separators, ASCII, well-formed UTF-8 of every length, truncated and ill-formed
# sequences (a lone continuation byte, an encoded surrogate, 0xFF), so items end inside what does not decode.
PROPERTY_FRAGMENTS = [b"\x01", b"\x02", b"a", b"\x00", b"\xc3\xa9", b"\xc3", b"\xe2\x98", b"\xe2\x98\x83", b"\xf0\x9f\x98\x80", b"\x80"]
PROPERTY_FRAGMENTS += [b"\xed\xa0\x80", b"\xff", b"\xf0\x9f"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PROPERTY_FRAGMENTS), max_size=24))
def test_the_properties_kernel_reads_what_its_reference_reads(fragments: list[bytes]) -> None:
    data = b"".join(fragments)
    kernel, reference = decode_properties(data), parse_properties(data)
    assert kernel == reference and list(kernel) == list(reference)  # the same names in the same order
    assert decode_properties(memoryview(bytearray(data))) == reference


def test_uniq_keys_of_one_batch_never_repeat_even_past_the_16_bit_counter() -> None:
    from store import new_uniq_key, new_uniq_keys

    keys = new_uniq_keys(70_000) + [new_uniq_key()] + new_uniq_keys(3)
    assert len(set(keys)) == len(keys)
    assert all(len(k) == 32 for k in keys)
