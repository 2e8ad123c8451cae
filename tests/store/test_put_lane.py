"""The put lane: a packed batch appended by the commitlog's one kernel call (CommitLog.put_packed) stores what the
general path (CommitLog.put_batch) stores, and a lane that declines changes nothing."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import DefaultMessageStore, PutBatch, build_message
from store import native as nk
from store.codec.message import encode_properties
from store.codec.message_codec import decode_message, encode_message
from store.logfile.commit_log import BatchHead, CommitLog
from store.put.put_batch import PackedProduce, packed_binary, packed_json
from tests.store.conftest import open_store, small_config
from tests.waiting import wait_for

IPV4_HOST = bytes([10, 0, 0, 7, 0, 0, 0x1F, 0x90])
IPV6_HOST = bytes(range(16)) + bytes([0, 0, 0x1F, 0x91])
LIMITS = (8 * 1024, 1024, 32767)  # small_config's max_message_size_bytes, the default batch and properties limits


def pack(messages: list[dict[str, Any]], max_body: int = 64 * 1024) -> PackedProduce:
    body = {"messages": messages} if len(messages) > 1 else messages[0]
    got = packed_json(json.dumps(body).encode(), 64, max_body, b"")
    assert got is not None
    return got


def produces() -> list[tuple[str, int, PackedProduce, bytes]]:
    """Puts of every shape the lane takes: single and batched, tags, keys and properties, both host sizes, two topics
    and queues, bodies of 5 bytes to 7 KiB; enough of them to roll a 64 KiB commitlog file twice."""
    out = []
    for i in range(64):
        one = {"body": "b" * (100 + 110 * i), "tags": f"T{i % 3}", "keys": [f"k{i}"], "properties": {"n": str(i)}}
        batch = [{"body": f"m{i}-{j}" * (j + 1)} for j in range(1 + i % 4)]
        out.append(("lane-a" if i % 2 else "lane-b", i % 3, pack([one] if i % 5 else batch), IPV6_HOST if i % 7 == 0 else IPV4_HOST))
    return out


def put_all(store: DefaultMessageStore, puts: list[tuple[str, int, PackedProduce, bytes]]) -> list[Any]:
    results = []
    for topic, queue_id, packed, host in puts:
        result, waiter = store.put_answer(PutBatch.of_packed(topic, queue_id, packed, born_host=host))
        assert result.ok and waiter is None
        results.append(result)
    return results


def stored_messages(store: DefaultMessageStore, puts: list[tuple[str, int, PackedProduce, bytes]]) -> list[tuple[int, bytes]]:
    """Every message of the log, by its commitlog offset, as stored but for its two timestamps (zeroed):
    BORNTIMESTAMP at byte 40, STORETIMESTAMP at 56 (68 after a 20-byte born host). The lane reads the clock once for
    both; the general path reads it for the born time before the put lock and for the store time under it, so a
    millisecond may pass between them there."""
    got = []
    for topic, queue_id in sorted({(t, q) for t, q, _, _ in puts}):
        with store.get_message("G", topic, queue_id, 0, 1000) as found:
            for pos, size in found.positions():
                message = decode_message(found.data, pos)
                assert 0 < message["born_timestamp"] <= message["store_timestamp"] and message["store_size"] == size
                raw = bytearray(found.data[pos : pos + size])
                store_ts_at = 56 + (12 if message["sys_flag"] & 0x10 else 0)  # BORNHOST_V6_FLAG
                raw[40:48] = raw[store_ts_at : store_ts_at + 8] = bytes(8)
                got.append((message["commitlog_offset"], bytes(raw)))
    assert len(got) == sum(p.messages for _, _, p, _ in puts)
    return sorted(got)


def counting(store: DefaultMessageStore) -> list[int]:
    """Calls of the store's put lane and those it answered, counted (the lane is the commitlog's put_packed)."""
    calls = [0, 0]
    lane: Callable[..., Any] = store.commit_log.put_packed

    def counted(*args: Any) -> Any:
        calls[0] += 1
        answer = lane(*args)
        calls[1] += answer is not None
        return answer

    store.commit_log.put_packed = counted
    return calls


def test_the_lane_stores_what_the_general_path_stores_byte_for_byte(tmp_path: Path) -> None:
    puts = produces()
    lane = open_store(small_config(str(tmp_path / "lane")))
    general = open_store(small_config(str(tmp_path / "general")))
    try:
        calls = counting(lane)
        general.pipeline.lane_admits = None  # every packed put takes the general path
        lane_results, general_results = put_all(lane, puts), put_all(general, puts)
        # The lane answered all but the puts that needed a file made or reserved further (a roll, a reservation step).
        assert calls[0] == len(puts) and len(puts) - 16 <= calls[1] < len(puts)
        for a, b in zip(lane_results, general_results, strict=True):
            assert [(i.wrote_offset, i.wrote_bytes, i.logics_offset, i.queue_id) for i in a.items] == [
                (i.wrote_offset, i.wrote_bytes, i.logics_offset, i.queue_id) for i in b.items
            ]
            assert a.end_offset == b.end_offset
        assert lane.commit_log.get_max_offset() == general.commit_log.get_max_offset() > 2 * 64 * 1024
        assert lane.commit_log.topic_queue_table == general.commit_log.topic_queue_table
        assert lane.stats.put_messages == general.stats.put_messages and lane.stats.put_bytes == general.stats.put_bytes
        assert stored_messages(lane, puts) == stored_messages(general, puts)
    finally:
        lane.shutdown()
        general.shutdown()


def test_a_lane_that_declines_changes_nothing_and_the_general_path_answers(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        cl = store.commit_log
        put = cl.put_packed
        one = pack([{"body": "first"}])
        args = ("q", b"q", 0, IPV4_HOST, *LIMITS)
        assert put(one.data, *args) is None  # no file yet: the general path makes the first one
        assert store.put_answer(PutBatch.of_packed("q", 0, one))[0].ok
        mf = cl.mapped_file_queue.get_last_mapped_file()
        assert mf is not None

        def unchanged(data: bytes, *rest: Any) -> None:
            before = (mf.wrote_position, dict(cl.topic_queue_table), cl.get_max_offset())
            assert put(data, *(rest or args)) is None
            assert (mf.wrote_position, dict(cl.topic_queue_table), cl.get_max_offset()) == before

        with cl.put_lock:  # another put holds the lock: the lane does not wait for it
            unchanged(pack([{"body": "locked"}]).data)
        unchanged(one.data[:-3])  # a malformed batch: the general path says why
        unchanged(pack([{"body": "x" * 5000}]).data, "q", b"q", 0, IPV4_HOST, 4096, 1024, 32767)  # past max_body
        unchanged(pack([{"body": "a"}, {"body": "b"}]).data, "q", b"q", 0, IPV4_HOST, 8192, 1, 32767)  # past max_count
        dedup = packed_json(json.dumps({"body": "d", "properties": {"TIDEMQ_DEDUP_ID": "x"}}).encode(), 64, 8192, b"")
        assert dedup is not None
        unchanged(dedup.data)  # a dedup id: the dedup hook's to see
        taken = put(pack([{"body": "second"}]).data, *args)
        assert taken is not None
        offsets, first_queue_offset, store_timestamp, end, messages, stored = taken
        assert (first_queue_offset, messages, end, len(offsets)) == (1, 1, cl.get_max_offset(), 16)
        assert mf.wrote_position == mf.committed_position and mf.store_timestamp == store_timestamp
        assert cl.topic_queue_table[("q", 0)] == 2 and stored == end - int.from_bytes(offsets[:8], "little")
    finally:
        store.shutdown()


def test_refusals_are_the_general_paths_and_store_nothing(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        calls = counting(store)
        for body in ("first", "second"):  # the first makes the file, the second takes the lane
            assert store.put_answer(PutBatch.of_packed("r", 0, pack([{"body": body}])))[0].ok
        assert calls == [2, 1]
        before = (store.commit_log.get_max_offset(), store.stats.put_messages)
        too_big, _ = store.put_answer(PutBatch.of_packed("r", 0, pack([{"body": "y" * 9000}])))
        no_queue, _ = store.put_answer(PutBatch.of_packed("r", 100_000, pack([{"body": "q"}])))
        assert not too_big.ok and too_big.refusal.name == "MESSAGE_TOO_LARGE"
        assert not no_queue.ok and no_queue.refusal.name == "QUEUE_NOT_FOUND"
        assert (store.commit_log.get_max_offset(), store.stats.put_messages) == before
        assert calls == [3, 1]  # the oversized body reached the lane, which declined; the queue was refused before it
    finally:
        store.shutdown()


def test_a_binary_batch_as_sent_takes_the_lane_or_is_left_to_its_caller(tmp_path: Path) -> None:
    """`put_lane` of a binary batch as a producer sent it (`packed_binary`): stored as the ENCODED put stores it, or
    None with nothing changed when the lane declines (the caller then checks it and puts it the general way)."""
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        calls = counting(store)
        body = nk.pack_batch([(b"one", encode_properties({"TAGS": "t", "KEYS": "k"}), 0), (b"\x00two", b"", 3)])
        assert store.put_answer(PutBatch.of_packed("b", 0, pack([{"body": "first"}])))[0].ok  # makes the file
        answer = store.put_lane(PutBatch.of_packed("b", 1, packed_binary(body, 1), born_host=IPV6_HOST))
        assert answer is not None and calls == [2, 1]
        lane = answer[0]
        general = store.put_answer(PutBatch.of_encoded("b", 2, store.check_batch(body), IPV6_HOST))[0]
        assert lane.ok and general.ok
        assert [(i.logics_offset, i.queue_id) for i in lane.items] == [(0, 1), (1, 1)]
        for a, b in zip(lane.items, general.items, strict=True):  # the same message but for the queue and the log offset
            x, y = store.look_message_by_offset(a.wrote_offset), store.look_message_by_offset(b.wrote_offset)
            assert x is not None and y is not None and x["body"] in (b"one", b"\x00two")
            for key in ("queue_id", "queue_offset", "commitlog_offset", "offset_msg_id", "msg_id", "store_timestamp", "born_timestamp"):
                x.pop(key), y.pop(key)
            assert x == y and a.wrote_bytes == b.wrote_bytes
        cl = store.commit_log
        before = (cl.get_max_offset(), dict(cl.topic_queue_table), store.stats.put_messages)
        dedup = nk.pack_batch([(b"d", encode_properties({"TIDEMQ_DEDUP_ID": "x"}), 0)])
        for declined in (dedup, body[:-1], b"", nk.pack_batch([(b"x", encode_properties({"DELAY": "2"}), 0)])):
            assert store.put_lane(PutBatch.of_packed("b", 1, packed_binary(declined, 1))) is None
        with cl.put_lock:  # another put holds the lock: the lane does not wait for it
            assert store.put_lane(PutBatch.of_packed("b", 1, packed_binary(body, 1))) is None
        assert (cl.get_max_offset(), dict(cl.topic_queue_table), store.stats.put_messages) == before
    finally:
        store.shutdown()


def test_a_pooled_store_takes_no_lane_and_its_packed_puts_are_stored(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store"), transient_store_pool_enable=True, transient_store_pool_size=2))
    try:
        calls = counting(store)
        assert store.pipeline.lane_admits is None  # every file writes into a pool buffer, which the lane declines
        for i in range(3):
            result, _ = store.put_answer(PutBatch.of_packed("p", 0, pack([{"body": f"pooled {i}"}])))
            assert result.ok and result.items[0].logics_offset == i
        assert calls == [0, 0]
        assert store.put_lane(PutBatch.of_packed("p", 0, pack([{"body": "pooled"}]))) is None
    finally:
        store.shutdown()


def dispatched(store: DefaultMessageStore, queue_id: int) -> bool:
    return store.get_max_offset_in_queue("shared", queue_id) == 240


def test_lane_puts_and_locked_puts_from_other_threads_share_the_queues_exactly(tmp_path: Path) -> None:
    """The lane takes the put lock without waiting and declines when another put holds it: puts from four threads
    (two of packed batches, which take the lane or the general path, two of messages, which lock) to the same two
    queues leave every message stored once, queue offsets without a gap or a repeat, across file rolls."""
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        calls = counting(store)
        stored: list[tuple[int, int, bytes]] = []
        lock = threading.Lock()

        def producer(name: str, packed: bool) -> None:
            for i in range(120):
                body = f"{name}-{i}".encode() * (20 + i % 20)
                batch = (
                    PutBatch.of_packed("shared", i % 2, pack([{"body": body.decode()}]))
                    if packed
                    else PutBatch.of([build_message("shared", body, i % 2)])
                )
                result, waiter = store.put_answer(batch)
                assert result.ok and waiter is None
                with lock:
                    stored.append((i % 2, result.items[0].logics_offset, body))

        threads = [threading.Thread(target=producer, args=(f"t{n}", n < 2)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads) and len(stored) == 480
        assert calls[1] > 0 and store.commit_log.get_max_offset() > 2 * 64 * 1024
        for queue_id in range(2):
            offsets = sorted(offset for q, offset, _ in stored if q == queue_id)
            assert offsets == list(range(240))
            wait_for(partial(dispatched, store, queue_id), 10, "dispatch")
            got: dict[int, bytes] = {}
            while len(got) < 240:  # a get returns at most max_transfer_count_on_message_in_memory messages
                with store.get_message("G", "shared", queue_id, len(got), 1000) as found:
                    messages = found.decode()
                assert messages
                got.update((m["queue_offset"], m["body"]) for m in messages)
            assert got == {offset: body for q, offset, body in stored if q == queue_id}
    finally:
        store.shutdown()


safe_text = st.text(st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters="\x01\x02"), max_size=12)
lane_properties = st.dictionaries(st.sampled_from(["a", "order", "ключ", "来源", "x-y"]), safe_text, max_size=3).map(
    lambda props: {k: v for k, v in props.items() if v}
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.binary(max_size=1500), lane_properties, st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=5),
    st.sampled_from(["L", "Läne", "队列"]),
    st.integers(0, 3),
    st.sampled_from([IPV4_HOST, IPV6_HOST]),
)
def test_the_lane_writes_what_the_reference_encoder_writes(
    tmp_path_factory: pytest.TempPathFactory, items: list[tuple[bytes, dict[str, str], int]], topic: str, queue_id: int, born: bytes
) -> None:
    """Random batches (binary bodies, unicode topics and properties, any flag, both host sizes) appended by the lane are
    the bytes message_codec.encode_message makes of the same fields, at the offsets, queue offsets and timestamp the
    lane answered."""
    config = small_config(str(tmp_path_factory.mktemp("lane")), mapped_file_size_commit_log_bytes=64 * 1024)
    log = CommitLog(config, None, None)
    assert log.load()
    try:
        first = nk.pack_batch([(b"first", encode_properties({}), 0)])  # the general path makes the file
        checked = nk.CheckedBatch(first, *nk.check_batch_crcs(first, 8 * 1024)[:1], 0, b"", False)
        assert log.put_batch(checked, BatchHead(topic, topic.encode(), queue_id, 1, born)).ok
        encoded = [(body, encode_properties(props), flag) for body, props, flag in items]
        answer = log.put_packed(nk.pack_batch(encoded), topic, topic.encode(), queue_id, born, 8 * 1024, 64, 32767)
        assert answer is not None  # the file holds its whole reservation (64 KiB, the first step): the lane takes it
        offsets, first_queue_offset, store_timestamp, end, messages, stored = answer
        assert (first_queue_offset, messages) == (1, len(items))
        sys_flag = 0x10 if len(born) == 20 else 0  # BORNHOST_V6_FLAG from the born host's length
        want = b""
        for i, (body, props, flag) in enumerate(encoded):
            phys, size = struct.unpack_from("<qq", offsets, 16 * i)
            image = encode_message(
                topic.encode(), body, props, queue_id=queue_id, queue_offset=1 + i, physical_offset=phys, flag=flag,
                sys_flag=sys_flag, born_timestamp=store_timestamp, born_host=born, store_timestamp=store_timestamp,
                store_host=log.store_host,
            )  # fmt: skip
            assert size == len(image) and phys == struct.unpack_from("<q", offsets)[0] + len(want)
            want += image
        mf = log.mapped_file_queue.get_last_mapped_file()
        assert mf is not None and end == mf.file_from_offset + mf.wrote_position and stored == len(want)
        start = end - stored
        assert bytes(mf.mm[start:end]) == want
        assert log.topic_queue_table[(topic, queue_id)] == 1 + len(items)
    finally:
        log.shutdown()
