"""The RocketMQ store writer against RocketMQ 4.9.8's layout, byte offsets computed by hand.

These tests use nothing of tidemq: they check that the fixture the interop tests serve is what
RocketMQ writes (CommitLog, ConsumeQueue, IndexFile, StoreCheckpoint, fastjson config files).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

from tests.interop import scenario
from tests.interop.rocketmq_store import (
    COMPRESSED_FLAG,
    COMPRESSION_ZLIB_TYPE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    Host,
    Message,
    RocketMQStoreWriter,
    StoreLayout,
    index_key_hash,
    java_string_hash,
    uniq_key,
)

V4_STORE = Host("10.0.0.7", 10911)
V4_BORN = Host("1.2.3.4", 5)
V6_STORE = Host("fd00::7", 10911)
V6_BORN = Host("2001:db8::20", 6)
SMALL = StoreLayout(commitlog_file_bytes=256, cq_file_bytes=200, hash_slots=8, index_entries=32)


def _msg(body: bytes = b"hello", born: Host = V4_BORN, store: Host = V4_STORE, **kw: Any) -> Message:
    return Message("T", 1, body, born, store, 1000, 2000, tags="A", keys=["k1"], **kw)


def _int(buf: bytes, pos: int) -> int:
    value: int = struct.unpack_from(">i", buf, pos)[0]
    return value


def _long(buf: bytes, pos: int) -> int:
    value: int = struct.unpack_from(">q", buf, pos)[0]
    return value


def test_java_string_hash_matches_known_java_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0  # Math.abs(MIN_VALUE) < 0, then 0
    assert java_string_hash("\u00e9") == 0xE9  # one UTF-16 unit, not the UTF-8 bytes


def test_ipv4_message_fields_at_rocketmq_offsets(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), SMALL)
    m = w.append(_msg())
    b = m.stored
    props = b"TAGS\x01A\x02KEYS\x01k1\x02"
    assert len(b) == 91 + 5 + 1 + len(props) == 112
    assert _int(b, 0) == 112
    assert b[4:8] == bytes.fromhex("DAA320A7")
    assert _int(b, 8) == zlib.crc32(b"hello") & 0x7FFFFFFF == 0x3610A686
    assert _int(b, 12) == 1  # queue id
    assert _int(b, 16) == 0  # flag
    assert _long(b, 20) == 0 and _long(b, 28) == 0  # queue offset, physical offset
    assert _int(b, 36) == 0  # sys flag
    assert _long(b, 40) == 1000
    assert b[48:56] == bytes([1, 2, 3, 4, 0, 0, 0, 5])
    assert _long(b, 56) == 2000
    assert b[64:72] == bytes([10, 0, 0, 7]) + (10911).to_bytes(4, "big")
    assert _int(b, 72) == 0 and _long(b, 76) == 0  # reconsume times, prepared offset
    assert _int(b, 84) == 5 and b[88:93] == b"hello"
    assert b[93] == 1 and b[94:95] == b"T"
    assert struct.unpack_from(">h", b, 95)[0] == len(props) and b[97:112] == props
    assert m.offset_msg_id == "0A00000700002A9F0000000000000000"


def test_ipv6_hosts_take_20_bytes_and_set_the_flags(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), SMALL)
    m = w.append(_msg(born=V6_BORN, store=V6_STORE))
    b = m.stored
    assert len(b) == 112 + 12 + 12
    assert _int(b, 36) == 0x10 | 0x20
    assert b[48:68] == bytes.fromhex("20010db8000000000000000000000020") + (6).to_bytes(4, "big")
    assert _long(b, 68) == 2000  # store timestamp after the 20-byte born host
    assert b[76:96] == bytes.fromhex("fd000000000000000000000000000007") + (10911).to_bytes(4, "big")
    assert _int(b, 108) == 5 and b[112:117] == b"hello"
    assert m.offset_msg_id == "FD000000000000000000000000000007" + "00002A9F" + "0" * 16
    assert len(m.offset_msg_id) == 56
    mixed = w.append(_msg(born=V4_BORN, store=V6_STORE))
    assert _int(mixed.stored, 36) == 0x20 and len(mixed.stored) == 112 + 12


def test_compressed_body_crc_is_of_the_stored_bytes(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), StoreLayout(commitlog_file_bytes=65536))
    body = b"abc" * 3000
    old = w.append(_msg(body, compress=COMPRESSED_FLAG))
    new = w.append(_msg(body, compress=COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE))
    for m, flag in ((old, 0x1), (new, 0x301)):
        b = m.stored
        assert _int(b, 36) == flag
        stored_len = _int(b, 84)
        stored = b[88 : 88 + stored_len]
        assert stored_len < len(body) and stored[:1] == b"\x78"  # a zlib stream (java.util.zip.Deflater)
        assert zlib.decompress(stored) == body
        assert _int(b, 8) == zlib.crc32(stored) & 0x7FFFFFFF


def test_transactions_prepared_and_rollback_take_no_queue_offset(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), StoreLayout(commitlog_file_bytes=4096))
    first = w.append(_msg())
    half = w.append(_msg(transaction=TRANSACTION_PREPARED_TYPE))
    commit = w.append(_msg(transaction=TRANSACTION_COMMIT_TYPE, prepared_offset=half.commitlog_offset))
    rollback = w.append(_msg(transaction=TRANSACTION_ROLLBACK_TYPE, prepared_offset=half.commitlog_offset))
    assert (first.queue_offset, half.queue_offset, commit.queue_offset, rollback.queue_offset) == (0, 0, 1, 0)
    assert _int(half.stored, 36) == 0x4 and _int(commit.stored, 36) == 0x8 and _int(rollback.stored, 36) == 0xC
    assert _long(commit.stored, 76) == half.commitlog_offset == 112
    units = w.cq_units("T", 1)[0]
    assert struct.unpack_from(">qiq", units, 0) == (0, 112, 65)  # tags code: "A".hashCode()
    assert struct.unpack_from(">qiq", units, 20) == (commit.commitlog_offset, commit.size, 65)
    assert units[40:60] == bytes(20)
    assert [m for _, m in w.index_keys()].count(rollback) == 0
    assert [m for _, m in w.index_keys()].count(half) == 1  # IndexService indexes prepared messages


def test_end_of_file_blank(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), SMALL)
    a, b, c = (w.append(_msg()) for _ in range(3))
    # 112 + 112 leave 32 bytes: 112 + 8 does not fit, so 224..256 is a blank and c starts file 256.
    assert (a.commitlog_offset, b.commitlog_offset, c.commitlog_offset) == (0, 112, 256)
    assert w.blanks == [(224, 32)]
    w.write(with_index=False)
    f0 = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    f1 = (tmp_path / "commitlog" / "00000000000000000256").read_bytes()
    assert len(f0) == len(f1) == 256
    assert _int(f0, 224) == 32 and f0[228:232] == bytes.fromhex("CBD43194") and f0[232:] == bytes(24)
    assert _long(f1, 28) == 256 and f1[:112] == c.stored


def test_queue_starting_mid_file_has_fill_pre_blank_units(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), StoreLayout(commitlog_file_bytes=4096, cq_file_bytes=200), first_commitlog_offset=4096)
    w.start_queue_at("T", 1, 13)
    m = w.append(_msg())
    assert m.queue_offset == 13 and m.commitlog_offset == 4096 and _long(m.stored, 20) == 13
    w.write(with_index=False)
    directory = tmp_path / "consumequeue" / "T" / "1"
    assert sorted(os.listdir(directory)) == ["00000000000000000200"]  # 13 * 20 = 260 lies in file 200
    data = (directory / "00000000000000000200").read_bytes()
    assert len(data) == 200
    for pos in (0, 20, 40):
        assert data[pos : pos + 20] == bytes(8) + bytes.fromhex("7FFFFFFF") + bytes(8)
    assert struct.unpack_from(">qiq", data, 60) == (4096, 112, 65)
    assert data[80:] == bytes(120)
    assert sorted(os.listdir(tmp_path / "commitlog")) == ["00000000000000004096"]


def test_index_file_header_slots_and_entries(tmp_path: Path) -> None:
    w = RocketMQStoreWriter(str(tmp_path), SMALL)
    a = w.append(Message("T", 0, b"x", V4_BORN, V4_STORE, 1000, 5_000, keys=["k1"], uniq="U1"))
    b = w.append(Message("T", 0, b"y", V4_BORN, V4_STORE, 1000, 9_500, keys=["k1"]))
    name, data = w.index_file()
    assert name == "19700101000005000"  # yyyyMMddHHmmssSSS of the first indexed store time
    assert len(data) == 40 + 8 * 4 + 32 * 20
    # Header: begin/end timestamp, begin/end physical offset, slots used, entry count (next free).
    assert struct.unpack_from(">qqqqii", data, 0)[:4] == (5_000, 9_500, a.commitlog_offset, b.commitlog_offset)
    keys = ["T#U1", "T#k1", "T#k1"]
    used_slots = {index_key_hash(k) % 8 for k in keys}
    assert struct.unpack_from(">ii", data, 32) == (len(used_slots), 4)
    entries = 40 + 8 * 4
    # Entry 1: T#U1 of a; entry 2: T#k1 of a; entry 3: T#k1 of b, chained to entry 2, 4 s after the begin.
    assert struct.unpack_from(">iqii", data, entries + 20) == (index_key_hash("T#U1"), a.commitlog_offset, 0, 0)
    assert struct.unpack_from(">iqii", data, entries + 40) == (index_key_hash("T#k1"), a.commitlog_offset, 0, 0)
    assert struct.unpack_from(">iqii", data, entries + 60) == (index_key_hash("T#k1"), b.commitlog_offset, 4, 2)
    assert _int(data, 40 + (index_key_hash("T#k1") % 8) * 4) == 3
    assert data[entries : entries + 20] == bytes(20)  # entry 0 is never used
    _, stale = w.index_file(upto=1)  # an index/ copied before b was indexed
    assert struct.unpack_from(">qqqqii", stale, 0)[1:4:2] == (5_000, a.commitlog_offset) and _int(stale, 36) == 3


def test_uniq_key_layout() -> None:
    born_ms = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z; November started at 1_698_796_800_000
    key = uniq_key("192.168.1.20", 4242, 0x1B6D3586, born_ms, 7)
    assert key == "C0A80114" + "1092" + "1B6D3586" + f"{born_ms - 1_698_796_800_000:08X}" + "0007"
    assert len(uniq_key("2001:db8::20", 1, 2, born_ms, 3)) == 56


def test_scenario_store_files(tmp_path: Path) -> None:
    w = scenario.build(str(tmp_path), base_ms=1_700_000_000_000)
    assert sorted(os.listdir(tmp_path / "commitlog")) == ["00000000000000065536", "00000000000000131072"]
    assert len(w.blanks) == 1
    assert sorted(os.listdir(tmp_path / "consumequeue" / "audit" / "0")) == [
        "00000000000000000000", "00000000000000000200", "00000000000000000400",
    ]  # fmt: skip
    orders1 = (tmp_path / "consumequeue" / "orders" / "1" / "00000000000000000000").read_bytes()
    assert orders1[:60] == (bytes(8) + bytes.fromhex("7FFFFFFF") + bytes(8)) * 3
    assert _long(orders1, 60) == w.queue("orders", 1)[0].commitlog_offset
    assert not (tmp_path / "abort").exists() and (tmp_path / "lock").read_bytes() == b"lock"
    cp = (tmp_path / "checkpoint").read_bytes()
    assert len(cp) == 4096 and _long(cp, 0) == max(m.store_ms for m in w.messages)
    offsets = (tmp_path / "config" / "consumerOffset.json").read_text()
    assert '"orders@billing":{0:2,1:4,2:0,3:0\n\t\t}' in offsets
    assert (tmp_path / "config" / "delayOffset.json").read_text() == '{\n\t"offsetTable":{1:0,2:1,18:0\n\t}\n}'
    topics = (tmp_path / "config" / "topics.json").read_text()
    assert '\t\t"orders":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,' in topics
    sched = [m for m in w.messages if m.topic == "SCHEDULE_TOPIC_XXXX" and m.queue_id == 17][0]
    units = (tmp_path / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "17" / "00000000000000000000").read_bytes()
    assert _long(units, 12) == sched.store_ms + 7_200_000  # the tags code of a delayed message is its due time
    assert not (tmp_path / "index").exists() or len(os.listdir(tmp_path / "index")) == 1


def test_scenario_holds_every_kind_the_interop_tests_check(tmp_path: Path) -> None:
    """A guard against a thinned fixture: both host forms each side, both compression flags, all transaction kinds."""
    w = scenario.build(str(tmp_path), base_ms=1_700_000_000_000)
    consumable = [m for m in w.messages if m.consumable and m.topic in scenario.USER_TOPICS]
    assert {(m.born_host.v6, m.store_host.v6) for m in consumable} == {(False, False), (False, True), (True, False), (True, True)}
    assert {m.sys_flag & 0x301 for m in consumable if m.compress} == {0x1, 0x301}
    assert all(len(m.body) > 4096 for m in consumable if m.compress)
    assert sorted(m.transaction for m in w.messages if m.transaction) == [0x4, 0x4, 0x8, 0xC]
