"""The native kernels (store.native) against the Python codec, byte for byte, and their bounds.

The Python codec (store.codec.message_codec, store.codec.message, store.queue.reference_getter) is the reference:
every kernel output is compared with what it produces on the same random input,
including non-BMP text, invalid UTF-8, truncated and corrupted bytes.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from store import DefaultMessageStore, MessageStoreConfig, TagFilter, _kernels
from store import native as nk
from store.codec.message import build_message, encode_properties, java_string_hash, tags_hash
from store.codec.message_codec import (
    BLANK_MAGIC_CODE,
    DecodeOutcome,
    DispatchRequest,
    check_message,
    decode_for_dispatch,
    encode_message,
    message_length,
    write_blank_into,
)
from store.index.index_file import key_hash
from store.logfile.damaged_ranges import DamagedRanges
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from store.queue.reference_getter import ReferenceGetter
from store.status import GetMessageStatus
from tests.store.conftest import open_store, small_config, wait_dispatched

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
LEVELS_MS = [1000, 5000, 10000, 30000, 60000]
HOST_A = bytes([10, 0, 0, 7, 0, 0, 0x26, 0xAD])
HOST_B = bytes([192, 168, 1, 2, 0, 0, 0x1F, 0x90])
HOST_A6 = bytes.fromhex("20010db8000000000000000000000007") + bytes([0, 0, 0x26, 0xAD])  # [2001:db8::7]:9901
HOST_B6 = bytes(15) + b"\x01" + bytes([0, 0, 0x1F, 0x90])  # [::1]:8080


def hosts_for(sys_flag: int) -> tuple[bytes, bytes]:
    """(born host, store host) of the forms sys_flag's v6 bits (0x10 born, 0x20 store) name."""
    return (HOST_A6 if sys_flag & 0x10 else HOST_A), (HOST_B6 if sys_flag & 0x20 else HOST_B)


# Property text: anything but the separators (\x01, \x02); keys also without spaces.
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), max_size=12)
key_text = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=["Cs"]), min_size=1, max_size=10)
delay_text = st.one_of(st.integers(-3, 12).map(str), st.sampled_from(["", " 2", "+1", "0x1", "1_0", "99999999999"]), prop_text)


@st.composite
def properties(draw: st.DrawFn, schedule: bool = False) -> dict[str, str]:
    props = draw(st.dictionaries(prop_text.filter(bool), prop_text, max_size=3))
    if draw(st.booleans()):
        props["TAGS"] = draw(prop_text)
    if draw(st.booleans()):
        props["KEYS"] = draw(st.lists(key_text, max_size=3).map(" ".join)) + draw(st.sampled_from(["", " ", "  "]))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(prop_text)
    if schedule and draw(st.booleans()):
        props["DELAY"] = draw(delay_text)
    return props


# A message of a batch: body, properties, flag.
Item = tuple[bytes, dict[str, str], int]
message_item = st.tuples(st.binary(max_size=300), properties(), st.integers(-(2**31), 2**31 - 1))
topics = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=20).map(lambda t: t.encode()[:255])


# Java hash ---------------------------------------------------------------------------------


@given(st.text(max_size=40).filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)))
def test_java_hash_matches_reference_on_text(text: str) -> None:
    assert nk.java_hash(text.encode()) == java_string_hash(text)


@given(st.binary(max_size=40))
def test_java_hash_matches_reference_on_invalid_utf8(raw: bytes) -> None:
    assert nk.java_hash(raw) == java_string_hash(raw.decode("utf-8", errors="replace"))


# Lead bytes with narrowed second-byte ranges, range edges and bytes that lead nothing.
UTF8_EDGES = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xF0, 0xF4, 0xF5, 0xFF]


@given(st.lists(st.sampled_from(UTF8_EDGES), max_size=12).map(bytes))
def test_java_hash_replaces_ill_formed_utf8_as_python_does(raw: bytes) -> None:
    assert nk.java_hash(raw) == java_string_hash(raw.decode("utf-8", errors="replace"))


def test_java_hash_counts_non_bmp_as_a_surrogate_pair() -> None:
    assert nk.java_hash("\U0001f600".encode()) == 0xD83D * 31 + 0xDE00
    assert nk.java_hash("a\U00010000b".encode()) == ((97 * 31 + 0xD800) * 31 + 0xDC00) * 31 + 98


# Encode ------------------------------------------------------------------------------------


def reference_image(
    topic: bytes,
    items: list[Item],
    queue_id: int,
    sys_flag: int,
    qoff: int,
    phys: int,
    born: int,
    stored: int,
) -> bytes:
    out = []
    for i, (body, props, flag) in enumerate(items):
        born_host, store_host = hosts_for(sys_flag)
        image = encode_message(
            topic, body, encode_properties(props), queue_id, qoff + i, phys, flag, sys_flag, born, born_host, stored, store_host
        )
        out.append(image)
        phys += len(image)
    return b"".join(out)


def encode_all(
    topic: bytes,
    items: list[Item],
    dest: bytearray,
    pos: int,
    limit: int,
    **kw: int,
) -> tuple[nk.Encoded, bytearray]:
    batch = nk.pack_batch((b, encode_properties(p), f) for b, p, f in items)
    out = bytearray(16 * len(items))
    born_host, store_host = hosts_for(kw["sys_flag"])
    r = nk.encode_batch(
        dest, pos, limit, batch, 0, out, len(items), topic=topic, queue_id=kw["queue_id"], queue_offset=kw["qoff"],
        physical_offset=kw["phys"], store_timestamp=kw["stored"], store_host=store_host, born_timestamp=kw["born"], born_host=born_host,
        sys_flag=kw["sys_flag"],
    )  # fmt: skip
    return r, out


@given(
    topics,
    st.lists(message_item, min_size=1, max_size=8),
    st.integers(0, 1023),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**45),
    st.integers(0, 64),
)
def test_encode_matches_reference(
    topic: bytes, items: list[Item], queue_id: int, sys_flag: int, qoff: int, phys: int, ts: int, pad: int
) -> None:
    kw = {"queue_id": queue_id, "sys_flag": sys_flag, "qoff": qoff, "phys": phys, "born": ts - 7, "stored": ts}
    want = reference_image(topic, items, queue_id, sys_flag, qoff, phys, ts - 7, ts)
    dest = bytearray(pad + len(want) + 8 + 5)
    r, out = encode_all(topic, items, dest, pad, len(dest), **kw)
    assert (r.stop, r.written, r.dest_pos) == (nk.Stop.DONE, len(items), pad + len(want))
    assert bytes(dest[pad : pad + len(want)]) == want
    assert dest[:pad] == bytes(pad) and dest[pad + len(want) :] == bytes(13)
    offsets = [nk.OFFSET_AND_SIZE.unpack_from(out, 16 * i) for i in range(len(items))]
    p = phys
    for (o, size), (body, props, _) in zip(offsets, items, strict=True):
        assert (o, size) == (p, message_length(len(body), len(topic), len(encode_properties(props)), sys_flag))
        p += size


@given(topics, st.lists(message_item, min_size=1, max_size=6), st.data())
def test_encode_stops_where_the_next_message_and_an_end_marker_do_not_fit(
    topic: bytes,
    items: list[Item],
    data: st.DataObject,
) -> None:
    sizes = [message_length(len(b), len(topic), len(encode_properties(p))) for b, p, _ in items]
    limit = data.draw(st.integers(0, sum(sizes) + 8))
    fits, used = 0, 0
    while fits < len(items) and used + sizes[fits] + 8 <= limit:
        used += sizes[fits]
        fits += 1
    dest = bytearray(limit + 16)
    kw = {"queue_id": 1, "sys_flag": 0, "qoff": 0, "phys": 0, "born": 1, "stored": 2}
    r, _ = encode_all(topic, items, dest, 0, limit, **kw)
    assert (r.written, r.dest_pos) == (fits, used)
    assert r.stop == (nk.Stop.DONE if fits == len(items) else nk.Stop.FILE_FULL)
    assert dest[used:] == bytes(len(dest) - used)


def reference_batch_items(batch: bytes, max_body: int) -> list[bytes] | None:
    """The items of a RocketMQ batch, or None when it is malformed (what check_batch decides)."""
    import zlib

    items, pos = [], 0
    while pos < len(batch):
        if len(batch) - pos < 22:
            return None
        total, magic, crc, _flag, body_len = nk.BATCH_ITEM_HEAD.unpack_from(batch, pos)
        if magic != 0 or not 0 <= body_len <= max_body or total < 22 + body_len or total > len(batch) - pos:
            return None
        props_len = int.from_bytes(batch[pos + 20 + body_len : pos + 22 + body_len], "big")
        body = batch[pos + 20 : pos + 20 + body_len]
        if props_len > 0x7FFF or total != 22 + body_len + props_len or (crc and crc != zlib.crc32(body) & 0x7FFFFFFF):
            return None
        items.append(body)
        pos += total
    return items


@given(st.lists(message_item, min_size=1, max_size=4), st.data())
def test_check_batch_refuses_truncated_or_corrupt_batches_as_the_reference_does(items: list[Item], data: st.DataObject) -> None:
    batch = bytearray(nk.pack_batch((b, encode_properties(p), f) for b, p, f in items))
    cut = data.draw(st.integers(0, len(batch)))
    batch = batch[:cut]
    for _ in range(data.draw(st.integers(0, 3))):
        if batch:
            batch[data.draw(st.integers(0, len(batch) - 1))] = data.draw(st.integers(0, 255))
    want = reference_batch_items(bytes(batch), 200)
    if want is None:
        with pytest.raises(nk.BatchError):
            nk.check_batch(batch, 200)
    else:
        assert nk.check_batch(batch, 200)[0] == len(want)


def test_check_batch_checks_a_non_zero_body_crc() -> None:
    import zlib

    body = b"payload"
    good = bytearray(nk.pack_batch([(body, b"", 0)]))
    good[8:12] = (zlib.crc32(body) & 0x7FFFFFFF).to_bytes(4, "big")
    assert nk.check_batch(good, 100) == (1, 91 + len(body))
    good[8] ^= 0x10
    with pytest.raises(nk.BatchError) as e:
        nk.check_batch(good, 100)
    assert e.value.args[1:] == (nk.BatchErrorCode.BAD_CRC, 0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.sampled_from([b"", b"a\x01b\x02"]), st.booleans()), min_size=1, max_size=6))
def test_check_batch_crcs_are_the_bodies_crc31(items: list[tuple[bytes, bytes, bool]]) -> None:
    """check_batch_crcs returns what check_batch does and the BODYCRC of every item, non-zero given or not."""
    parts = []
    for body, props, given_crc in items:
        head = nk.BATCH_ITEM_HEAD.pack(22 + len(body) + len(props), 0, _crc31(body) if given_crc else 0, 0, len(body))
        parts += [head, body, len(props).to_bytes(2, "big"), props]
    batch = b"".join(parts)
    count, stored, crcs, has_dedup_id = nk.check_batch_crcs(batch, 1000)
    assert (count, stored) == nk.check_batch(batch, 1000)
    assert list(struct.unpack(f"={count}I", crcs)) == [_crc31(body) for body, _, _ in items]
    assert nk.check_batch_crcs(batch, 1000, max_count=count)[2] == crcs
    assert has_dedup_id is False  # looked for only with the property checks


def _crc31(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def _encode_into(dest: bytearray, batch: bytes, crcs: object) -> nk.Encoded:
    out = bytearray(16 * 8)
    return nk.encode_batch(
        dest, 0, len(dest), batch, 0, out, 8, topic=b"T", queue_id=1, queue_offset=0, physical_offset=0, store_timestamp=5,
        store_host=HOST_A, born_timestamp=4, born_host=HOST_B, crcs=crcs,
    )  # fmt: skip


def test_encode_batch_takes_carried_crcs_as_given_and_computes_the_rest() -> None:
    bodies = [b"one", b"second body", b"3"]
    batch = nk.pack_batch([(b, b"", 0) for b in bodies])
    computed, carried, short = bytearray(512), bytearray(512), bytearray(512)
    assert _encode_into(computed, batch, None).written == 3
    _, _, crcs, _ = nk.check_batch_crcs(batch, 100)
    assert _encode_into(carried, batch, crcs).written == 3
    assert carried == computed, "the carried CRCs are the ones encode computes"
    bogus = struct.pack("=I", 12345)  # one CRC for three items: the first taken unchecked, the others computed
    assert _encode_into(short, batch, bogus).written == 3
    first_size = 91 + 1 + len(bodies[0])
    assert int.from_bytes(short[8:12], "big") == 12345
    assert short[12:first_size] == computed[12:first_size] and short[first_size:] == computed[first_size:]
    with pytest.raises(ValueError):
        _encode_into(computed, batch, memoryview(computed)[:4])  # overlaps dest


def test_dispatch_kernels_keep_the_gil_for_small_inputs() -> None:
    image = encode_message(b"T", b"body", encode_properties({"KEYS": "k1 k2"}), 0, 0, 0)
    records, keys = bytearray(nk.RECORD.size * 4), bytearray(nk.KEY.size * 8)
    before = _kernels.gil_releases()
    assert nk.dispatch_scan(image, 0, len(image), records, keys, uniq_key_index=False).records == 1
    big = image * (_kernels.GIL_RELEASE_MIN_BYTES // len(image) + 1)
    assert _kernels.gil_releases() == before
    scanned = nk.dispatch_scan(big, 0, len(big), bytearray(nk.RECORD.size * 4), bytearray(nk.KEY.size * 8), uniq_key_index=False)
    assert scanned.stop == nk.Stop.OUT_FULL and _kernels.gil_releases() == before + 1


# Dispatch scan -----------------------------------------------------------------------------


@st.composite
def commitlog(draw: st.DrawFn) -> tuple[bytearray, int, list[int]]:
    """Random stored messages (schedule-topic ones among them) and maybe an end marker."""
    buf, starts = bytearray(), []
    for i in range(draw(st.integers(0, 6))):
        schedule = draw(st.booleans())
        topic = SCHEDULE.encode() if schedule else draw(topics)
        props = encode_properties(draw(properties(schedule)))
        if draw(st.integers(0, 5)) == 0:
            props = draw(st.binary(max_size=40)).replace(b"\x02", b"\x02TAGS\x01", 1)  # invalid UTF-8 too
        body = draw(st.binary(max_size=100))
        starts.append(len(buf))
        # IPv4 and IPv6 hosts (the v6 bits follow them), and each transaction type.
        sys_flag = draw(st.sampled_from([0, 0x10, 0x20, 0x30]) | st.sampled_from([0, 0, 0x4, 0x8, 0xC]))
        born_host, store_host = hosts_for(sys_flag)
        buf += encode_message(
            topic, body, props, draw(st.integers(0, 30)), i, 5000 + len(buf), 0, sys_flag, 11, born_host, 10**12 + i, store_host
        )
    end = len(buf)
    if draw(st.booleans()):
        blank = bytearray(draw(st.integers(8, 40)))
        write_blank_into(blank, 0, len(blank))
        buf += blank
    return buf, end, starts


def scan(
    buf: bytes | bytearray, pos: int, limit: int, uniq: bool = True, recs_n: int = 64, keys_n: int = 256
) -> tuple[nk.Scanned, list[dict[str, Any]], list[tuple[Any, ...]]]:
    recs, keys = bytearray(nk.RECORD.size * recs_n), bytearray(nk.KEY.size * keys_n)
    r = nk.dispatch_scan(buf, pos, limit, recs, keys, uniq_key_index=uniq, delay_levels=nk.delay_levels_array(LEVELS_MS))
    records = [dict(zip(nk.RECORD_FIELDS, nk.RECORD.unpack_from(recs, i * nk.RECORD.size), strict=True)) for i in range(r.records)]
    return r, records, [nk.KEY.unpack_from(keys, i * nk.KEY.size) for i in range(r.keys)]


def reference_keys(req: DispatchRequest, uniq: bool) -> list[int]:
    keys = [req.uniq_key] if uniq and req.uniq_key else []
    return [key_hash(f"{req.topic}#{k}") for k in keys + [k for k in req.keys.split(" ") if k]]


def assert_record_matches(
    buf: bytes | bytearray, pos: int, limit: int, rec: dict[str, Any], rec_keys: list[tuple[Any, ...]], uniq: bool
) -> None:
    size, req = decode_for_dispatch(buf, pos, limit, LEVELS_MS)
    assert req is not None and rec["size"] == size
    if req.sys_flag & 0xC in (0x4, 0xC):  # prepared, rolled back: no queue entry; a rolled-back one no index keys
        assert rec["flags"] == nk.FLAG_NO_QUEUE and rec["tags_code"] == tags_hash(req.properties.get("TAGS", ""))
        assert [k[0] for k in rec_keys] == (reference_keys(req, uniq) if req.sys_flag & 0xC == 0x4 else [])
        return
    assert not rec["flags"] & nk.FLAG_NO_QUEUE
    assert rec["cq_entry"] == ENTRY.pack(req.commitlog_offset, size, req.tags_code) or rec["flags"] & nk.FLAG_DELAY_FALLBACK
    if rec["flags"] & nk.FLAG_DELAY_FALLBACK:
        assert not req.properties["DELAY"].isascii() or not req.properties["DELAY"].isdigit() or len(req.properties["DELAY"]) > 9
    else:
        assert rec["tags_code"] == req.tags_code
    got = (rec["queue_id"], rec["queue_offset"], rec["store_timestamp"], rec["commitlog_offset"], rec["sys_flag"])
    assert got == (req.queue_id, req.consume_queue_offset, req.store_timestamp, req.commitlog_offset, req.sys_flag)
    topic = bytes(buf[rec["topic_pos"] : rec["topic_pos"] + rec["topic_length"]]).decode("utf-8", "replace")
    assert topic == req.topic
    assert [k[0] for k in rec_keys] == reference_keys(req, uniq)
    assert all(k[2:] == (req.commitlog_offset, req.store_timestamp) for k in rec_keys)


def reference_walk(buf: bytes | bytearray, pos: int, limit: int) -> tuple[list[int], DecodeOutcome, str, int]:
    """(message positions, outcome, reason, position) where check_message stops."""
    starts: list[int] = []
    while True:
        r = check_message(buf, pos, limit, False, False)
        if r.outcome is not DecodeOutcome.MESSAGE:
            return starts, r.outcome, r.reason, pos
        starts.append(pos)
        pos += r.size


def assert_scan_matches(buf: bytes | bytearray, limit: int, uniq: bool) -> None:
    r, records, keys = scan(buf, 0, limit, uniq)
    starts, outcome, reason, stop_pos = reference_walk(buf, 0, limit)
    assert r.records == len(starts) and r.pos == stop_pos
    expect = {
        DecodeOutcome.END: {nk.Stop.END, nk.Stop.DONE},
        DecodeOutcome.BLANK: {nk.Stop.BLANK},
        DecodeOutcome.CORRUPT: nk.CORRUPT | {nk.Stop.PARTIAL},
    }[outcome]
    assert r.stop in expect, (r, outcome, reason)
    if r.stop in (nk.Stop.PARTIAL, nk.Stop.BAD_TOTAL):
        assert reason.startswith("bad total size")
    k = 0
    for rec, pos in zip(records, starts, strict=True):
        assert_record_matches(buf, pos, limit, rec, keys[k : k + rec["key_count"]], uniq)
        assert all(key[1] == records.index(rec) for key in keys[k : k + rec["key_count"]])
        k += rec["key_count"]
    assert k == len(keys)


@settings(max_examples=200)
@given(commitlog(), st.booleans())
def test_dispatch_scan_matches_decode_for_dispatch(log: tuple[bytearray, int, list[int]], uniq: bool) -> None:
    buf, _end, _starts = log
    assert_scan_matches(buf, len(buf), uniq)


@settings(max_examples=200)
@given(commitlog(), st.data())
def test_dispatch_scan_on_truncated_or_corrupt_log_stops_where_the_reference_does(
    log: tuple[bytearray, int, list[int]], data: st.DataObject
) -> None:
    buf, _end, _starts = log
    assume(buf)
    limit = data.draw(st.integers(0, len(buf)))
    for _ in range(data.draw(st.integers(0, 3))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    assert_scan_matches(buf, limit, True)


def test_dispatch_scan_stops_before_a_message_whose_outputs_do_not_fit() -> None:
    buf = bytearray()
    for i in range(3):
        msg = build_message("T", b"x" * i, keys=["a", "b"], uniq_key=f"U{i}")
        buf += encode_message(b"T", msg.body, msg.properties_bytes, 0, i, len(buf))
    r, records, _ = scan(buf, 0, len(buf), recs_n=2)
    assert (r.stop, r.records, r.pos) == (nk.Stop.OUT_FULL, 2, records[1]["size"] + records[0]["size"])
    r, _, keys = scan(buf, 0, len(buf), keys_n=7)
    assert (r.stop, r.records, r.keys) == (nk.Stop.OUT_FULL, 2, 6)
    r2, _, _ = scan(buf, r.pos, len(buf))
    assert (r2.stop, r2.records, r2.pos) == (nk.Stop.DONE, 1, len(buf))


def test_dispatch_scan_reports_lengths_that_point_past_the_message() -> None:
    buf = bytearray(encode_message(b"T", b"body", b"TAGS\x01a\x02"))
    bad = bytearray(buf)
    bad[84:88] = (10**6).to_bytes(4, "big")  # body length past TOTALSIZE and the buffer
    assert scan(bad, 0, len(bad))[0].stop == nk.Stop.BAD_BODY
    bad = bytearray(buf)
    bad[0:4] = (len(buf) + 1).to_bytes(4, "big")  # TOTALSIZE past the limit
    assert scan(bad, 0, len(bad))[0].stop == nk.Stop.PARTIAL
    bad = bytearray(buf)
    bad[0:4] = (2**31 - 1).to_bytes(4, "big")
    assert scan(bad, 0, len(bad))[0].stop == nk.Stop.PARTIAL
    bad = bytearray(buf)
    bad[4:8] = BLANK_MAGIC_CODE.to_bytes(4, "big")  # a blank marker longer than the buffer
    bad[0:4] = (len(buf) + 8).to_bytes(4, "big")
    assert scan(bad, 0, len(bad))[0].stop == nk.Stop.BAD_BLANK
    assert scan(buf, 0, len(buf) - 1)[0].stop == nk.Stop.PARTIAL
    for pos, limit in ((0, len(buf) + 1), (-1, 4), (5, 4)):
        with pytest.raises((ValueError, OverflowError)):
            scan(buf, pos, limit)


def test_dispatch_scan_checks_the_body_crc_when_asked() -> None:
    buf = bytearray(encode_message(b"T", b"body", b""))
    buf[88] ^= 1
    recs, keys = bytearray(nk.RECORD.size), bytearray(0)
    assert nk.dispatch_scan(buf, 0, len(buf), recs, keys, uniq_key_index=False).stop == nk.Stop.DONE
    assert nk.dispatch_scan(buf, 0, len(buf), recs, keys, uniq_key_index=False, check_crc=True).stop == nk.Stop.BAD_CRC
    assert nk.check_message(buf, 0, len(buf), True) == (nk.Stop.BAD_CRC, 0)


# Encode bounds -----------------------------------------------------------------------------


def test_encode_rejects_bad_positions_hosts_topics_and_overlap() -> None:
    batch = nk.pack_batch([(b"abc", b"", 0)])
    dest, out = bytearray(200), bytearray(16)
    common: dict[str, Any] = {
        "topic": b"T",
        "queue_id": 0,
        "queue_offset": 0,
        "physical_offset": 0,
        "store_timestamp": 0,
        "born_timestamp": 0,
    }
    ok = dict(common, store_host=HOST_B, born_host=HOST_A)
    for args in ((dest, 0, 201, batch, 0, out, 1), (dest, 10, 5, batch, 0, out, 1), (dest, 0, 200, batch, len(batch) + 1, out, 1)):
        with pytest.raises(ValueError):
            nk.encode_batch(*args, **ok)
    with pytest.raises(ValueError):
        nk.encode_batch(dest, 0, 200, batch, 0, out, 1, **dict(ok, born_host=b"1234567"))
    with pytest.raises(ValueError):
        nk.encode_batch(dest, 0, 200, batch, 0, out, 1, **dict(ok, topic=b"t" * 256))
    with pytest.raises(ValueError):
        nk.encode_batch(dest, 0, 200, memoryview(dest)[100:], 0, out, 1, **ok)
    assert nk.encode_batch(dest, 0, 200, batch, 0, bytearray(15), 1, **ok) == (nk.Stop.OUT_FULL, 0, 0, 0)
    assert dest == bytes(200)


def test_encode_refuses_a_body_length_past_the_batch() -> None:
    batch = bytearray(nk.pack_batch([(b"abc", b"", 0)]))
    batch[16:20] = (1000).to_bytes(4, "big")
    dest = bytearray(300)
    with pytest.raises(nk.BatchError):
        nk.encode_batch(
            dest, 0, 300, batch, 0, bytearray(16), 1, topic=b"T", queue_id=0, queue_offset=0, physical_offset=0,
            store_timestamp=0, store_host=HOST_B, born_timestamp=0, born_host=HOST_A,
        )  # fmt: skip
    assert dest == bytes(300)


# Gather ------------------------------------------------------------------------------------

TAGS = ["a", "b", "\U0001f600", "TagC", ""]


@pytest.fixture(scope="module")
def filled_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DefaultMessageStore]:
    """A real store with messages of random tags and sizes over several commitlog files."""
    config: MessageStoreConfig = small_config(
        str(tmp_path_factory.mktemp("native") / "store"),
        mapped_file_size_commit_log_bytes=16 * 1024,
        max_message_size_bytes=1024,
        max_properties_size_bytes=1024,
    )
    store = open_store(config)
    rng = random.Random(18)
    for i in range(400):
        tag = rng.choice(TAGS) or None
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 900)))
        res = store.put_message(build_message("G", body, queue_id=i % 2, tags=tag, keys=[f"k{i}"]))
        assert res.status.name == "PUT_OK"
    wait_dispatched(store)
    try:
        yield store
    finally:
        store.shutdown()


def native_get(
    store: DefaultMessageStore, queue_id: int, offset: int, max_count: int, tag_filter: TagFilter | None
) -> tuple[nk.Gathered, bytes, list[tuple[Any, ...]]]:
    cq = store.find_consume_queue("G", queue_id)
    assert cq is not None
    index_buf = cq.get_index_buffer(offset)
    assert index_buf is not None
    cl = store.commit_log
    cfg = store.config
    files = cl.mapped_file_queue.mapped_files
    segments = [(mf.file_from_offset, memoryview(mf.mm)[: mf.get_read_position()]) for mf in files]
    limits = nk.GatherLimits(
        max_count, cfg.max_transfer_count_on_message_in_memory, cfg.max_transfer_bytes_on_message_in_memory,
        cfg.max_transfer_count_on_message_in_disk, cfg.max_transfer_bytes_on_message_in_disk,
        cl.get_max_offset() - store.getter.memory_window, max(0, cl.get_min_offset()),
        cl.get_max_offset(), store.getter.max_stored_size,
    )  # fmt: skip
    out, meta = bytearray(cfg.max_transfer_bytes_on_message_in_memory + 8192), bytearray(16 * 64)
    codes = nk.tag_codes_array(tag_filter.codes) if tag_filter else None
    tags = tuple(t.encode() for t in tag_filter.tags) if tag_filter else None
    try:
        n = min(index_buf.size, 16_000 * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        g = nk.gather(index_buf.view, n, segments, out, meta, limits, codes, tags)
    finally:
        index_buf.release()
        for _, view in segments:
            view.release()
    return g, bytes(out[: g.bytes]), [nk.META.unpack_from(meta, 16 * i) for i in range(g.taken)]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.integers(0, 1), st.integers(0, 199), st.integers(1, 40), st.sets(st.sampled_from(TAGS[:4] + ["none"]), max_size=2))
def test_gather_matches_the_message_getter(
    filled_store: DefaultMessageStore, queue_id: int, offset: int, max_count: int, tags: set[str]
) -> None:
    tag_filter = TagFilter(frozenset(tags)) if tags else None
    ref = ReferenceGetter(filled_store.config, filled_store.commit_log, filled_store.stats, filled_store.find_consume_queue).get_message(
        "", "G", queue_id, offset, max_count, tag_filter
    )
    try:
        want, want_offsets = ref.to_bytes(), list(ref.commitlog_offsets)
        want_queue = list(ref.queue_offsets)
        status, next_offset = ref.status, ref.next_begin_offset
    finally:
        ref.release()
    g, got, meta = native_get(filled_store, queue_id, offset, max_count, tag_filter)
    assert g.stop in (nk.Stop.DONE, nk.Stop.COUNT_LIMIT)
    got_status = GetMessageStatus.FOUND if g.taken else GetMessageStatus.NO_MATCHED_MESSAGE
    assert (got, got_status, offset + g.examined) == (want, status, next_offset)
    assert [m[0] for m in meta] == want_offsets and [offset + m[1] for m in meta] == want_queue


def test_gather_keeps_the_gil_for_a_small_read() -> None:
    """A pull or receive of a few messages (on the event loop) keeps the GIL; a read that may copy
    GIL_RELEASE_MIN_BYTES or more releases it."""
    msg = encode_message(b"T", b"x" * 10, b"", physical_offset=0)
    entries = ENTRY.pack(0, len(msg), 0)
    limits = nk.GatherLimits(32, 32, 1 << 30, 8, 1 << 16, 0, 0, len(msg), 1 << 20)
    before = _kernels.gil_releases()
    assert nk.gather(entries, 1, [(0, msg)], bytearray(300), None, limits).taken == 1
    assert _kernels.gil_releases() == before
    assert nk.gather(entries, 1, [(0, msg)], bytearray(_kernels.GIL_RELEASE_MIN_BYTES), None, limits).taken == 1
    assert _kernels.gil_releases() == before + 1


def test_gather_bounds() -> None:
    msgs = [encode_message(b"T", b"x" * 10, b"TAGS\x01a\x02", physical_offset=0), encode_message(b"T", b"y" * 20, b"")]
    log = msgs[0] + msgs[1]
    entries = ENTRY.pack(0, len(msgs[0]), java_string_hash("a")) + ENTRY.pack(len(msgs[0]), len(msgs[1]), 0)
    limits = nk.GatherLimits(32, 32, 1 << 20, 8, 1 << 16, 0, 0, len(log), 1 << 20)
    g = nk.gather(entries, 2, [(0, log)], bytearray(300), None, limits)
    assert g == (nk.Stop.DONE, 2, 2, len(log), False, 0)
    g = nk.gather(entries, 2, [(0, log)], bytearray(len(log) - 1), None, limits)
    assert g == (nk.Stop.OUT_FULL, 1, 1, len(msgs[0]), False, 0)
    g = nk.gather(entries, 2, [(0, log[:-1])], bytearray(300), None, limits._replace(max_phy=len(log) + 1))  # past the segment
    assert g.stop == nk.Stop.SEGMENT_MISS and g.examined == 1
    g = nk.gather(entries, 2, [(0, log)], bytearray(300), bytearray(16), limits)
    assert g.stop == nk.Stop.OUT_FULL and g.taken == 1
    with pytest.raises(ValueError):
        nk.gather(entries, 3, [(0, log)], bytearray(300), None, limits)
    with pytest.raises(ValueError):
        nk.gather(entries, 2, [(0, log)], bytearray(300), None, limits, codes=b"1234")
    with pytest.raises(ValueError):
        buf = bytearray(log + bytes(300))
        nk.gather(entries, 2, [(0, buf)], memoryview(buf)[len(log) :], None, limits)
    corrupt = bytearray(log)
    corrupt[84:88] = (10**6).to_bytes(4, "big")  # a body length past the message: the tag cannot be read
    g = nk.gather(entries, 2, [(0, corrupt)], bytearray(300), None, limits, nk.tag_codes_array([java_string_hash("a")]), (b"a",))
    assert g.stop == nk.Stop.BAD_PARTS


def test_gather_skips_damaged_entries_alone_and_counts_them() -> None:
    """Entries outside the log, too long, or not at the start of a message of their size are
    skipped one by one, as MessageGetter skips them; the messages after them are gathered."""
    msgs = [encode_message(b"T", b"x" * 10, b""), encode_message(b"T", b"y" * 20, b"")]
    log = msgs[0] + msgs[1]
    entries = b"".join(
        [
            ENTRY.pack(2**40, 100, 0),  # past the log
            ENTRY.pack(0, len(msgs[0]), 0),
            ENTRY.pack(-5, 60, 0),  # negative offset
            ENTRY.pack(7, 60, 0),  # inside the first message
            ENTRY.pack(0, len(msgs[0]) + 1, 0),  # the right start, the wrong size
            ENTRY.pack(0, 1 << 21, 0),  # longer than any stored message
            ENTRY.pack(len(msgs[0]), len(msgs[1]), 0),
        ]
    )
    limits = nk.GatherLimits(32, 32, 1 << 20, 8, 1 << 16, 0, 0, len(log), 1 << 20)
    g = nk.gather(entries, 7, [(0, log)], bytearray(300), None, limits)
    assert g == (nk.Stop.DONE, 7, 2, len(log), False, 5)


@st.composite
def gather_log(draw: st.DrawFn) -> tuple[bytes, list[int], list[int], list[int]]:
    """Stored messages of random sizes and tags: (log, starts, sizes, tags codes)."""
    log, starts, sizes, codes = b"", [], [], []
    for _ in range(draw(st.integers(1, 12))):
        tag = draw(st.sampled_from(TAGS))
        born_host, store_host = hosts_for(draw(st.sampled_from([0, 0x10, 0x20, 0x30])))  # the tag filter finds TAGS past either
        props = encode_properties({"TAGS": tag} if tag else {})
        image = encode_message(b"T", draw(st.binary(max_size=120)), props, 0, 0, len(log), born_host=born_host, store_host=store_host)
        starts.append(len(log))
        sizes.append(len(image))
        codes.append(java_string_hash(tag) if tag else 0)
        log += image
    return log, starts, sizes, codes


def gather_all(log: bytes, starts: list[int], sizes: list[int], codes: list[int]) -> tuple[bytes, nk.GatherLimits]:
    entries = b"".join(ENTRY.pack(p, s, c) for p, s, c in zip(starts, sizes, codes, strict=True))
    return entries, nk.GatherLimits(64, 64, 1 << 20, 64, 1 << 20, 0, 0, len(log), 1 << 20)


@given(gather_log(), st.data())
def test_gather_skips_entries_in_damaged_ranges_as_the_commit_log_decides(
    log_parts: tuple[bytes, list[int], list[int], list[int]], data: st.DataObject
) -> None:
    log, starts, sizes, codes = log_parts
    # Range ends on, just before and just after message starts; overlapping ranges too: the rule is CommitLog's.
    near_start = st.tuples(st.sampled_from(starts + [len(log)]), st.integers(-2, 2)).map(sum)
    spans = data.draw(st.lists(st.tuples(near_start, near_start).filter(lambda r: r[0] < r[1]), max_size=4))
    ranges = tuple(sorted(spans))
    owner = DamagedRanges("", ranges)  # the commit log's rule (CommitLog.damaged_range_end), no file
    kept = [i for i, p in enumerate(starts) if owner.end_of(p) is None]
    entries, limits = gather_all(log, starts, sizes, codes)
    out, meta = bytearray(len(log)), bytearray(16 * len(starts))
    g = nk.gather(entries, len(starts), [(0, log)], out, meta, limits, damaged_ranges=nk.ranges_array(ranges) if ranges else None)
    assert (g.stop, g.examined, g.taken, g.damaged) == (nk.Stop.DONE, len(starts), len(kept), 0)
    assert out[: g.bytes] == b"".join(log[starts[i] : starts[i] + sizes[i]] for i in kept)
    assert [nk.META.unpack_from(meta, 16 * k)[1] for k in range(g.taken)] == kept


@given(gather_log(), st.integers(0, 11), st.integers(1, 64), st.sets(st.sampled_from(TAGS[:3]), max_size=2))
def test_gather_resumed_where_it_stopped_gives_what_one_call_gives(
    log_parts: tuple[bytes, list[int], list[int], list[int]], cut: int, grow: int, tags: set[str]
) -> None:
    """Out grown from one byte and the second file's segment added only when missed, as
    MessageGetter drives it: the same messages, counts and meta as one call with everything."""
    log, starts, sizes, codes = log_parts
    entries, limits = gather_all(log, starts, sizes, codes)
    tag_args: tuple[bytes | None, tuple[bytes, ...] | None] = (
        (nk.tag_codes_array(java_string_hash(t) for t in tags), tuple(t.encode() for t in tags)) if tags else (None, None)
    )
    n = len(starts)
    want_out, want_meta = bytearray(len(log)), bytearray(16 * n)
    want = nk.gather(entries, n, [(0, log)], want_out, want_meta, limits, *tag_args)
    split = starts[min(cut, n - 1)]  # the first message of the second "file"
    segments: list[tuple[int, bytes]] = [(0, log[:split])]
    out, meta, state, calls = bytearray(1), bytearray(16 * n), nk.GatherState(), 0
    while True:
        g = nk.gather(entries, n, segments, out, meta, limits, *tag_args, start=state)
        calls += 1
        if g.stop is nk.Stop.DONE:
            break
        assert g.stop in (nk.Stop.OUT_FULL, nk.Stop.SEGMENT_MISS) and calls <= len(log) // grow + 3
        if g.stop is nk.Stop.OUT_FULL:
            out += bytes(grow)
        else:
            assert len(segments) == 1 and starts[g.examined] >= split
            segments.append((split, log[split:]))
        state = nk.GatherState(g.examined, g.taken, g.bytes, g.removed_seen, g.damaged)
    assert g == want
    assert out[: g.bytes] == want_out[: want.bytes] and meta == want_meta


def test_gather_counts_entries_below_skip_below_as_removed_until_a_message_is_taken() -> None:
    msgs = [encode_message(b"T", b"x" * n, b"") for n in (10, 20, 30)]
    log, starts = b"".join(msgs), [0, len(msgs[0]), len(msgs[0]) + len(msgs[1])]
    limits = nk.GatherLimits(32, 32, 1 << 20, 32, 1 << 20, 0, 0, len(log), 1 << 20)
    entries = b"".join(ENTRY.pack(p, len(m), 0) for p, m in zip(starts, msgs, strict=True))
    g = nk.gather(entries, 3, [(0, log)], bytearray(len(log)), None, limits, start=nk.GatherState(skip_below=starts[2]))
    assert (g.taken, g.bytes, g.removed_seen) == (1, len(msgs[2]), True)
    back = ENTRY.pack(starts[2], len(msgs[2]), 0) + ENTRY.pack(0, len(msgs[0]), 0)  # a taken message ends the skip
    g = nk.gather(back, 2, [(0, log)], bytearray(len(log)), None, limits, start=nk.GatherState(skip_below=starts[1]))
    assert (g.taken, g.bytes, g.removed_seen) == (2, len(msgs[2]) + len(msgs[0]), False)
    g = nk.gather(entries, 3, [(0, log)], bytearray(len(log)), None, limits._replace(min_phy=starts[1]))
    assert (g.taken, g.removed_seen) == (2, True)


def test_gather_refuses_malformed_ranges_and_start_states() -> None:
    log = encode_message(b"T", b"x", b"")
    entries = ENTRY.pack(0, len(log), 0)
    limits = nk.GatherLimits(32, 32, 1 << 20, 32, 1 << 20, 0, 0, len(log), 1 << 20)
    out = bytearray(len(log))
    for ranges in (bytes(8), nk.ranges_array([(5, 5)]), nk.ranges_array([(9, 20), (3, 4)]), nk.ranges_array([(0, 9), (0, 1)])):
        with pytest.raises(ValueError):
            nk.gather(entries, 1, [(0, log)], out, None, limits, damaged_ranges=ranges)
    assert nk.gather(entries, 1, [(0, log)], out, None, limits, damaged_ranges=nk.ranges_array([(0, 1), (0, 9)])).taken == 0
    for state in (nk.GatherState(examined=2), nk.GatherState(bytes=len(log) + 1), nk.GatherState(taken=-1), nk.GatherState(damaged=-1)):
        with pytest.raises(ValueError):
            nk.gather(entries, 1, [(0, log)], out, None, limits, start=state)
    with pytest.raises(ValueError):
        nk.gather(entries, 1, [(0, log)], out, bytearray(16), limits, start=nk.GatherState(taken=2))
    shared = bytearray(nk.ranges_array([(100, 200)]) + bytes(len(log)))
    before = bytes(shared)
    with pytest.raises(ValueError):
        nk.gather(
            entries,
            1,
            [(0, log)],
            memoryview(shared)[8:],
            None,
            limits,
            damaged_ranges=cast(bytes, memoryview(shared)[:16]),
        )
    assert shared == before
