"""The kernels that apply a dispatch scan (queue_runs, index_put) against the Python reference, and their bounds.

queue_runs is compared with a grouping written here from its contract; index_put (through
IndexService.put_hashed_keys_locked) with IndexService.build_index, the message-by-message
reference, on real index files, byte for byte, across file rolls and repeated application.
"""

from __future__ import annotations

import os
import struct
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import native as nk
from store.codec.message import encode_properties
from store.codec.message_codec import decode_for_dispatch, encode_message, write_blank_into
from store.index.index_service import IndexService
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE
from tests.store.conftest import small_config

LEVELS_MS = [1000, 5000, 10000]
SCHEDULE = b"SCHEDULE_TOPIC_XXXX"
HOST = bytes([10, 0, 0, 7, 0, 0, 0x26, 0xAD])


@dataclass
class Message:
    topic: bytes
    queue_id: int
    queue_offset: int
    props: dict[str, str]
    body: bytes = b""


@st.composite
def message_lists(draw: st.DrawFn, max_size: int = 40) -> list[Message]:
    """Messages of a few queues, queue offsets mostly consecutive per queue, sometimes jumping or restarting."""
    out: list[Message] = []
    next_offset: dict[tuple[bytes, int], int] = {}
    for _ in range(draw(st.integers(0, max_size))):
        topic = draw(st.sampled_from([b"A", b"B", b"Topic-\xc3\xa9", SCHEDULE]))
        queue_id = draw(st.integers(0, 2))
        key = (topic, queue_id)
        qoff = next_offset.get(key, draw(st.integers(0, 5)))
        jump = draw(st.integers(0, 12))
        if jump == 0:
            qoff = draw(st.integers(0, 3))  # a queue that starts again (a deleted and re-created topic)
        elif jump == 1:
            qoff += draw(st.integers(1, 3))  # a gap
        next_offset[key] = qoff + 1
        props: dict[str, str] = {}
        if draw(st.booleans()):
            props["TAGS"] = draw(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]))
        if draw(st.booleans()):
            props["KEYS"] = " ".join(draw(st.lists(st.sampled_from(["k1", "k2", "k3", "order-9"]), max_size=3)))
        if draw(st.booleans()):
            props["UNIQ_KEY"] = draw(st.sampled_from(["U1", "U2", "U3"]))
        if topic == SCHEDULE and draw(st.booleans()):
            props["DELAY"] = draw(st.sampled_from(["1", "2", "9", " 2", "+1", "1_0", "-1", "x", ""]))
        out.append(Message(topic, queue_id, qoff, props, draw(st.binary(max_size=30))))
    return out


def encode_log(msgs: list[Message], phys_jitter: list[int] | None = None) -> bytearray:
    """The stored messages; PHYSICALOFFSET is the position, moved by the jitter when given."""
    buf = bytearray()
    for i, m in enumerate(msgs):
        phys = len(buf) + (phys_jitter[i] if phys_jitter else 0)
        store_ts = 10**12 + 1000 * i
        buf += encode_message(m.topic, m.body, encode_properties(m.props), m.queue_id, m.queue_offset, phys, 0, 0, 1, HOST, store_ts, HOST)
    return buf


def scan_all(buf: bytearray, uniq: bool = True) -> tuple[bytearray, int, bytearray, int]:
    records, keys = bytearray(nk.RECORD.size * 64), bytearray(nk.KEY.size * 512)
    r = nk.dispatch_scan(buf, 0, len(buf), records, keys, uniq_key_index=uniq, delay_levels=nk.delay_levels_array(LEVELS_MS))
    assert r.stop == nk.Stop.DONE
    return records, r.records, keys, r.keys


def record(records: bytearray, i: int) -> dict[str, Any]:
    return dict(zip(nk.RECORD_FIELDS, nk.RECORD.unpack_from(records, i * nk.RECORD.size), strict=True))


@dataclass
class RefRun:
    topic: bytes
    queue_id: int
    first_queue_offset: int
    first_offset: int
    first_record: int
    end_offset: int = 0
    last_store_timestamp: int = 0
    last_record: int = 0
    entries: list[bytes] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    many_codes: bool = False


def reference_runs(buf: bytearray, records: bytearray, first: int, end: int) -> list[RefRun]:
    """queue_runs' contract: a record continues its queue's open run when its queue offset is the
    next one and its message starts at or after the run's end in the log; else it opens a new run."""
    runs: list[RefRun] = []
    open_run: dict[tuple[bytes, int], RefRun] = {}
    for i in range(first, end):
        rec = record(records, i)
        topic = bytes(buf[rec["topic_pos"] : rec["topic_pos"] + rec["topic_length"]])
        run = open_run.get((topic, rec["queue_id"]))
        nxt = None if run is None else run.first_queue_offset + len(run.entries)
        if run is None or rec["queue_offset"] != nxt or rec["commitlog_offset"] < run.end_offset:
            run = RefRun(topic, rec["queue_id"], rec["queue_offset"], rec["commitlog_offset"], i)
            runs.append(run)
            open_run[(topic, rec["queue_id"])] = run
        run.entries.append(rec["cq_entry"])
        run.end_offset = rec["commitlog_offset"] + rec["size"]
        run.last_store_timestamp, run.last_record = rec["store_timestamp"], i
        if rec["flags"] & nk.FLAG_DELAY_FALLBACK:
            run.many_codes = True
        elif rec["tags_code"] not in run.codes:
            run.codes.append(rec["tags_code"])
    return runs


def group(
    buf: bytearray, records: bytearray, n: int, first: int, max_runs: int
) -> tuple[nk.Grouped, list[dict[str, Any]], bytearray, bytearray]:
    runs, entries = bytearray(nk.RUN.size * max_runs), bytearray(CQ_STORE_UNIT_SIZE * n)
    scratch = bytearray(nk.runs_scratch_bytes(n))
    g = nk.queue_runs(buf, records, n, first, runs, entries, scratch)
    got = [
        dict(zip(nk.RUN_FIELDS + [f"code{i}" for i in range(8)], nk.RUN.unpack_from(runs, k * nk.RUN.size), strict=True))
        for k in range(g.runs)
    ]
    return g, got, entries, scratch


def assert_runs_equal(
    buf: bytearray,
    records: bytearray,
    first: int,
    g: nk.Grouped,
    got: list[dict[str, Any]],
    entries: bytearray,
    scratch: bytearray,
) -> None:
    want = reference_runs(buf, records, first, g.record_pos)
    assert len(got) == len(want)
    for run, ref in zip(got, want, strict=True):
        topic = bytes(buf[run["topic_pos"] : run["topic_pos"] + run["topic_length"]])
        assert (topic, run["queue_id"], run["first_queue_offset"], run["first_offset"]) == (
            ref.topic, ref.queue_id, ref.first_queue_offset, ref.first_offset,
        )  # fmt: skip
        assert (run["end_offset"], run["last_store_timestamp"], run["first_record"], run["last_record"]) == (
            ref.end_offset, ref.last_store_timestamp, ref.first_record, ref.last_record,
        )  # fmt: skip
        at = run["entries_at"]
        assert bytes(entries[at * 20 : (at + run["count"]) * 20]) == b"".join(ref.entries)
        if ref.many_codes or len(ref.codes) > nk.RUN_CODES:
            assert run["code_count"] > nk.RUN_CODES
        else:
            assert [run[f"code{i}"] for i in range(run["code_count"])] == ref.codes
    for i in range(first, g.record_pos):
        (entry,) = struct.unpack_from("=i", scratch, 4 * (i - first))
        assert bytes(entries[entry * 20 : entry * 20 + 20]) == record(records, i)["cq_entry"]


@settings(max_examples=150, deadline=None)
@given(message_lists(), st.data())
def test_queue_runs_group_as_the_reference(msgs: list[Message], data: st.DataObject) -> None:
    jitter = data.draw(st.lists(st.integers(-200, 0), min_size=len(msgs), max_size=len(msgs))) if data.draw(st.booleans()) else None
    buf = encode_log(msgs, jitter)
    records, n, _keys, _ = scan_all(buf)
    g, got, entries, scratch = group(buf, records, n, 0, max(1, n))
    assert (g.stop, g.record_pos) == (nk.Stop.DONE, n)
    assert g.fallbacks == sum(1 for i in range(n) if record(records, i)["flags"] & nk.FLAG_DELAY_FALLBACK)
    assert_runs_equal(buf, records, 0, g, got, entries, scratch)


@settings(max_examples=100, deadline=None)
@given(message_lists(), st.integers(1, 4))
def test_queue_runs_stops_before_a_record_needing_one_run_too_many(msgs: list[Message], max_runs: int) -> None:
    buf = encode_log(msgs)
    records, n, _keys, _ = scan_all(buf)
    first = 0
    while first < n:
        g, got, entries, scratch = group(buf, records, n, first, max_runs)
        assert_runs_equal(buf, records, first, g, got, entries, scratch)
        if g.stop == nk.Stop.OUT_FULL:
            assert len(reference_runs(buf, records, first, g.record_pos + 1)) == max_runs + 1
        else:
            assert (g.stop, g.record_pos) == (nk.Stop.DONE, n)
        assert g.record_pos > first
        first = g.record_pos


def test_queue_runs_bounds() -> None:
    buf = encode_log([Message(b"A", 0, 0, {"TAGS": "a"}), Message(b"A", 0, 1, {})])
    records, n, _, _ = scan_all(buf)
    runs, entries, scratch = bytearray(nk.RUN.size), bytearray(40), bytearray(nk.runs_scratch_bytes(2))
    assert nk.queue_runs(buf, records, n, 0, runs, entries, scratch) == (nk.Stop.DONE, 2, 1, 0)
    for args in (
        (buf, records, n + 100, 0, runs, entries, scratch),  # more records than the buffer holds
        (buf, records, n, 3, runs, entries, scratch),  # a start past the records
        (buf, records, n, 0, runs, bytearray(39), scratch),  # entries too small
        (buf, records, n, 0, runs, entries, bytearray(len(scratch) - 4)),  # scratch too small
        (buf, records, n, 0, runs, entries, memoryview(scratch)[1:]),  # scratch not aligned
        (buf, records, n, 0, runs, memoryview(runs)[:40], scratch),  # overlapping outputs
    ):
        with pytest.raises(ValueError):
            nk.queue_runs(*args)
    assert nk.queue_runs(buf, records, n, 0, bytearray(0), entries, scratch)[:3] == (nk.Stop.OUT_FULL, 0, 0)
    bad = bytearray(records)
    nk.RECORD.pack_into(bad, 0, *(v if i != 6 else len(buf) for i, v in enumerate(nk.RECORD.unpack_from(records, 0))))
    with pytest.raises(ValueError):  # a topic position past buf
        nk.queue_runs(buf, bad, n, 0, runs, entries, scratch)


# Index ---------------------------------------------------------------------------------------


def index_files(service: IndexService) -> list[bytes]:
    out = []
    for f in service.index_files:
        with open(f.path, "rb") as fh:
            out.append(fh.read())
    return out


def build_reference(root: str, buf: bytearray, slots: int, entries: int, uniq: bool, passes: int) -> IndexService:
    service = IndexService(small_config(root, max_hash_slot_num=slots, max_index_num=entries, message_index_uniq_key_enable=uniq))
    for _ in range(passes):
        pos = 0
        while pos < len(buf):
            size, req = decode_for_dispatch(buf, pos, len(buf), LEVELS_MS)
            if req is None:
                break
            service.build_index(req)
            pos += size
    return service


def build_bulk(root: str, buf: bytearray, slots: int, entries: int, uniq: bool, passes: int, chunk: int) -> IndexService:
    service = IndexService(small_config(root, max_hash_slot_num=slots, max_index_num=entries, message_index_uniq_key_enable=uniq))
    records, keys = bytearray(nk.RECORD.size * chunk), bytearray(nk.KEY.size * 64)
    for _ in range(passes):
        pos = 0
        while pos < len(buf):
            r = nk.dispatch_scan(buf, pos, len(buf), records, keys, uniq_key_index=uniq)
            last = record(records, r.records - 1)
            service.put_hashed_keys_locked(keys, r.keys, r.records, last["commitlog_offset"], last["store_timestamp"])
            pos = r.pos
    return service


@settings(max_examples=120, deadline=None)
@given(message_lists(max_size=30), st.integers(1, 8), st.integers(2, 9), st.booleans(), st.integers(1, 2), st.integers(1, 5))
def test_index_put_writes_the_files_build_index_writes(
    msgs: list[Message], slots: int, entries: int, uniq: bool, passes: int, chunk: int
) -> None:
    """Also across rolls (a message's keys split over two files), keyless messages after a full file,
    chunks of a few messages, and the whole log applied twice (the second pass adds nothing)."""
    buf = encode_log(msgs)
    with tempfile.TemporaryDirectory() as root:
        ref = build_reference(os.path.join(root, "ref"), buf, slots, entries, uniq, passes)
        bulk = build_bulk(os.path.join(root, "bulk"), buf, slots, entries, uniq, passes, chunk)
        try:
            assert index_files(bulk) == index_files(ref)
            assert bulk.last_store_timestamp == ref.last_store_timestamp
        finally:
            ref.shutdown()
            bulk.shutdown()


def test_index_put_bounds() -> None:
    buf = encode_log([Message(b"A", 0, 0, {"KEYS": "k1 k2"})])
    _, _, keys, n_keys = scan_all(buf)
    header = nk.IndexHeader(0, 0, 0, 0, 0, 1)
    size = 40 + 4 * 4 + 20 * 4
    r = nk.index_put(bytearray(size), 4, 4, header, keys, 0, n_keys, -1)
    assert (r.stop, r.key_pos, r.last_put_record, r.header.index_count) == (nk.Stop.DONE, 2, 0, 3)
    r = nk.index_put(bytearray(size), 4, 2, header, keys, 0, n_keys, -1)
    assert (r.stop, r.key_pos, r.current_record, r.header.index_count) == (nk.Stop.FILE_FULL, 1, 0, 2)
    for args in (
        (bytearray(size - 1), 4, 4, header, keys, 0, n_keys, -1),  # the file is shorter than its slots and entries
        (bytearray(size), 0, 4, header, keys, 0, n_keys, -1),
        (bytearray(size), 4, 4, header, keys, 0, len(keys) // nk.KEY.size + 1, -1),  # keys past the buffer
        (bytearray(size), 4, 4, header, keys, 2, 1, -1),
        (bytearray(size), 4, 4, header._replace(index_count=-1), keys, 0, n_keys, -1),
    ):
        with pytest.raises(ValueError):
            nk.index_put(*args)
    shared = bytearray(size + 100)
    with pytest.raises(ValueError):
        nk.index_put(shared, 4, 4, header, memoryview(shared)[size:], 0, 1, -1)


def test_index_put_after_a_blank_marker_and_without_keys() -> None:
    buf = encode_log([Message(b"A", 0, 0, {})])
    blank = bytearray(16)
    write_blank_into(blank, 0, 16)
    buf += blank
    records, keys = bytearray(nk.RECORD.size * 4), bytearray(nk.KEY.size * 4)
    r = nk.dispatch_scan(buf, 0, len(buf), records, keys, uniq_key_index=True)
    assert (r.stop, r.records, r.keys) == (nk.Stop.BLANK, 1, 0)
    file = bytearray(40 + 16 + 80)
    out = nk.index_put(file, 4, 4, nk.IndexHeader(5, 6, 7, 8, 0, 1), keys, 0, 0, -1)
    assert out.stop == nk.Stop.DONE and out.header == (5, 6, 7, 8, 0, 1) and out.last_put_record == -1
