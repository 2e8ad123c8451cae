"""IPv6 born and store hosts (SYSFLAG 0x10 / 0x20, 20-byte host fields): decoded, checked,
encoded, recovered, dispatched, pulled and looked up like IPv4 ones, on records built from the
published layout (tests/store/rocketmq_records.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import GetMessageStatus, MessageInner, TagFilter, decode_offset_msg_id, offset_msg_id
from store import native as nk
from store.codec.message_codec import (
    DISPATCH_END,
    DecodeOutcome,
    check_message,
    decode_for_dispatch,
    decode_message,
    encode_message,
    iter_messages,
)
from store.codec.stored_copy import born_host_bytes
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.store.rocketmq_records import (
    BORN_V4,
    BORN_V6,
    BORN_V6_HOST,
    STORE_V6,
    STORE_V6_HOST,
    Record,
    host_text,
    lay_out,
    props_bytes,
    write_commit_log,
)

FAR = 2**62
HOST_FLAGS = [0, BORN_V6, STORE_V6, BORN_V6 | STORE_V6]


def sample(sys_flag: int, i: int = 0) -> Record:
    props = {"TAGS": f"tag{i % 2}", "KEYS": f"key-{i} both", "UNIQ_KEY": f"U{i:04d}"}
    return Record("V6Topic", f"body-{i}".encode() * 3, props, queue_id=i % 2, queue_offset=i // 2, sys_flag=sys_flag)


# Codec ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("sys_flag", HOST_FLAGS)
def test_decode_reads_every_field_past_either_host_form(sys_flag: int) -> None:
    rec = sample(sys_flag, 3)
    raw = rec.image(4096)
    assert len(raw) == 91 + 12 * bin(sys_flag).count("1") + len(rec.body) + len(rec.topic) + len(props_bytes(rec.props))
    m = decode_message(raw, 0)
    assert (m["topic"], m["body"], m["queue_id"], m["queue_offset"], m["commitlog_offset"]) == ("V6Topic", rec.body, 1, 1, 4096)
    assert (m["sys_flag"], m["born_timestamp"], m["store_timestamp"], m["store_size"]) == (sys_flag, rec.born_ts, rec.store_ts, len(raw))
    assert m["born_host"] == host_text(rec.born_host) and m["store_host"] == host_text(rec.store_host)
    assert m["tags"] == "tag1" and m["keys"] == ["key-3", "both"] and m["msg_id"] == "U0003"
    assert m["offset_msg_id"] == (rec.store_host + (4096).to_bytes(8, "big")).hex().upper()
    assert len(m["offset_msg_id"]) == (56 if sys_flag & STORE_V6 else 32)


@pytest.mark.parametrize("sys_flag", HOST_FLAGS)
def test_a_decode_without_hosts_differs_only_in_the_host_texts(sys_flag: int) -> None:
    raw = sample(sys_flag, 5).image(8192)
    full, lean = decode_message(raw, 0), decode_message(raw, 0, hosts=False)
    assert (lean["born_host"], lean["store_host"]) == (None, None)
    assert full["born_host"] == host_text(sample(sys_flag, 5).born_host)
    assert {**full, "born_host": None, "store_host": None} == lean


def test_hosts_show_as_rocketmq_prints_them() -> None:
    m = decode_message(sample(BORN_V6 | STORE_V6).image(0), 0)
    assert (m["born_host"], m["store_host"]) == ("[2001:db8::42]:40124", "[fd00::9]:10911")


@pytest.mark.parametrize("sys_flag", HOST_FLAGS)
def test_check_accepts_v6_records_and_finds_their_corruption(sys_flag: int) -> None:
    raw = bytearray(sample(sys_flag).image(0))
    r = check_message(raw, 0, len(raw))
    assert (r.outcome, r.size) == (DecodeOutcome.MESSAGE, len(raw))
    assert r.request is not None and r.request.uniq_key == "U0000" and r.request.store_timestamp == sample(0).store_ts
    body_at = 88 + 12 * bin(sys_flag).count("1")
    flipped = bytearray(raw)
    flipped[body_at] ^= 0xFF
    assert "CRC" in check_message(flipped, 0, len(flipped)).reason
    # A v6 flag on a record laid out with 8-byte hosts: its parts no longer add up to TOTALSIZE.
    if sys_flag:
        v4 = bytearray(sample(0).image(0))
        v4[36:40] = sys_flag.to_bytes(4, "big")
        assert check_message(v4, 0, len(v4)).outcome is DecodeOutcome.CORRUPT
        assert decode_for_dispatch(v4, 0, len(v4), None) == (DISPATCH_END, None)


@pytest.mark.parametrize("sys_flag", HOST_FLAGS)
def test_encoder_writes_the_published_layout(sys_flag: int) -> None:
    rec = sample(sys_flag, 5)
    raw = encode_message(
        rec.topic.encode(), rec.body, props_bytes(rec.props), rec.queue_id, rec.queue_offset, 777, 0, 0,
        rec.born_ts, rec.born_host, rec.store_ts, rec.store_host,
    )  # fmt: skip
    assert raw == rec.image(777)  # the v6 bits come from the hosts' lengths


@pytest.mark.parametrize("sys_flag", HOST_FLAGS)
def test_encode_kernel_writes_v6_hosts_as_the_reference(sys_flag: int) -> None:
    rec = sample(sys_flag, 2)
    batch = nk.pack_batch([(rec.body, props_bytes(rec.props), 0)])
    dest, out = bytearray(4096), bytearray(16)
    r = nk.encode_batch(
        dest, 0, len(dest), batch, 0, out, 1, topic=rec.topic.encode(), queue_id=rec.queue_id, queue_offset=rec.queue_offset,
        physical_offset=0, store_timestamp=rec.store_ts, store_host=rec.store_host, born_timestamp=rec.born_ts,
        born_host=rec.born_host, sys_flag=0,
    )  # fmt: skip
    want = rec.image(0)
    assert (r.written, r.dest_pos) == (1, len(want)) and bytes(dest[: len(want)]) == want


def test_encode_kernel_refuses_hosts_of_other_lengths() -> None:
    batch = nk.pack_batch([(b"x", b"", 0)])
    for born in (bytes(4), bytes(16), bytes(21)):
        with pytest.raises(ValueError, match="20"):
            nk.encode_batch(
                bytearray(512), 0, 512, batch, 0, bytearray(16), 1, topic=b"T", queue_id=0, queue_offset=0, physical_offset=0,
                store_timestamp=1, store_host=BORN_V4, born_timestamp=1, born_host=born,
            )  # fmt: skip
    with pytest.raises(ValueError):
        encode_message(b"T", b"x", b"", born_host=bytes(16))


def test_dispatch_decoder_and_scan_kernel_agree_on_v6_records() -> None:
    records = [sample(flag, i) for i, flag in enumerate(HOST_FLAGS * 2)]
    buf, starts = lay_out(records)
    recs, keys = bytearray(nk.RECORD.size * 16), bytearray(nk.KEY.size * 64)
    scanned = nk.dispatch_scan(buf, 0, len(buf), recs, keys, uniq_key_index=True)
    assert (scanned.stop, scanned.records, scanned.pos, scanned.keys) == (nk.Stop.DONE, len(records), len(buf), 3 * len(records))
    for i, start in enumerate(starts):
        size, req = decode_for_dispatch(buf, start, len(buf), None)
        assert req is not None and size == len(records[i].image(start))
        rec = dict(zip(nk.RECORD_FIELDS, nk.RECORD.unpack_from(recs, i * nk.RECORD.size), strict=True))
        got = (rec["commitlog_offset"], rec["size"], rec["queue_id"], rec["queue_offset"], rec["store_timestamp"], rec["tags_code"])
        assert got == (start, size, req.queue_id, req.consume_queue_offset, req.store_timestamp, req.tags_code)
        assert buf[rec["topic_pos"] : rec["topic_pos"] + rec["topic_length"]] == b"V6Topic" and req.topic == "V6Topic"
    for stop_at in (starts[3] + 50, starts[3] + 100):  # a torn v6 record: both stop before it
        r = nk.dispatch_scan(buf, 0, stop_at, recs, keys, uniq_key_index=True)
        assert (r.records, r.pos) == (3, starts[3])
        assert [p for p, _ in iter_messages(buf, 0, stop_at)] == starts[:3]


def test_offset_message_ids_of_both_host_forms_decode() -> None:
    v4 = offset_msg_id(BORN_V4, 123456)
    v6 = offset_msg_id(STORE_V6_HOST, 2**40 + 5)
    assert len(v4) == 32 and decode_offset_msg_id(v4) == ("10.1.2.3", 40123, 123456)
    assert len(v6) == 56 and decode_offset_msg_id(v6) == ("fd00::9", 10911, 2**40 + 5)
    for bad in (v6[:40], v6 + "00", "G" * 56):
        with pytest.raises(ValueError):
            decode_offset_msg_id(bad)


def test_born_host_text_goes_back_to_its_bytes() -> None:
    """A delayed or committed copy takes its born host from the decoded original."""
    for raw in (BORN_V4, BORN_V6_HOST, bytes(15) + b"\x01" + (80).to_bytes(4, "big")):
        assert born_host_bytes(host_text(raw)) == raw
    assert born_host_bytes("[zz::1]:80") == born_host_bytes("nonsense") == bytes([127, 0, 0, 1, 0, 0, 0, 0])


# Store ---------------------------------------------------------------------------------------


def mixed_records(n: int) -> list[Record]:
    return [sample(HOST_FLAGS[i % 4], i) for i in range(n)]


@pytest.mark.parametrize("crashed", [True, False])
def test_recovery_keeps_a_log_of_v6_records_and_dispatch_serves_them(tmp_path: Path, crashed: bool) -> None:
    config = small_config(str(tmp_path / "store"))
    records = mixed_records(40)
    starts = write_commit_log(config.commit_log_dir(), config.mapped_file_size_commit_log_bytes, records)
    end = starts[-1] + len(records[-1].image(starts[-1]))
    if crashed:
        open(config.abort_path(), "w").close()  # the scan from the first file, CRCs checked
    s = open_store(config)
    try:
        wait_dispatched(s)
        assert s.commit_log.get_max_offset() == end  # nothing cut
        assert s.runtime_info()["commitlog_damaged_ranges"] == []
        for q in (0, 1):
            assert s.get_max_offset_in_queue("V6Topic", q) == 20
            got = s.get_message("g", "V6Topic", q, 0, 32)
            assert got.status is GetMessageStatus.FOUND
            decoded = [decode_message(got.data, p) for p, _ in iter_messages(got.data)]
            want = [(r, st) for r, st in zip(records, starts, strict=True) if r.queue_id == q]
            assert [m["commitlog_offset"] for m in decoded] == [st for _, st in want]
            assert [m["born_host"] for m in decoded] == [host_text(r.born_host) for r, _ in want]
        found = s.query_message("V6Topic", "key-7", 4, 0, FAR)  # record 7: both hosts v6
        assert [m["commitlog_offset"] for m in found] == [starts[7]] and found[0]["sys_flag"] == BORN_V6 | STORE_V6
        looked = s.look_message_by_offset(decode_offset_msg_id(found[0]["offset_msg_id"])[2])
        assert looked is not None and looked["body"] == records[7].body and len(looked["offset_msg_id"]) == 56
        r = s.put_message(MessageInner("V6Topic", b"after", 0, {"KEYS": "later"}, born_host=BORN_V6_HOST))
        assert r.ok and r.items[0].wrote_offset == end and r.items[0].logics_offset == 20
    finally:
        s.shutdown()


def test_a_v6_born_host_put_is_stored_with_its_flag_and_read_back(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "store"))
    s = open_store(config)
    try:
        msgs = [
            MessageInner("P", f"m{i}".encode(), 0, {"TAGS": "a" if i % 2 else "b"}, born_host=h)
            for i, h in enumerate([BORN_V6_HOST, BORN_V4] * 3)
        ]
        assert s.put_messages(msgs).ok and s.put_message(MessageInner("P", b"one", 0, born_host=BORN_V6_HOST)).ok
        wait_dispatched(s)
        got = s.get_message("g", "P", 0, 0, 32)
        decoded = [decode_message(got.data, p) for p, _ in iter_messages(got.data)]
        assert [m["sys_flag"] for m in decoded] == [BORN_V6, 0] * 3 + [BORN_V6]
        assert [m["born_host"] for m in decoded] == [host_text(BORN_V6_HOST), host_text(BORN_V4)] * 3 + [host_text(BORN_V6_HOST)]
        tagged = s.get_message("g", "P", 0, 0, 32, TagFilter.parse("a"))  # the tag check reads past the 20-byte host
        assert [decode_message(tagged.data, p)["body"] for p, _ in iter_messages(tagged.data)] == [b"m1", b"m3", b"m5"]
    finally:
        s.shutdown()
    with open(os.path.join(config.commit_log_dir(), f"{0:020d}"), "rb") as fh:
        head = fh.read(100)
    assert head[36:40] == BORN_V6.to_bytes(4, "big") and head[48:68] == BORN_V6_HOST
