"""The put path through the encode kernel: commitlog files byte-identical to the reference codec's.

The reference is store.message_codec.encode_message and write_blank_into, laid out file by file
here as the put path's invariants say (a message and its end marker must fit, queue offsets count
per topic and queue); the store's clock is pinned so store timestamps are known. Random messages
(unicode topics, keys and tags, empty and large bodies, delays) and batches cross file ends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import FakeClock
from store import DefaultMessageStore, PutBatch, PutMessageStatus, PutRefusal, build_message
from store import native as nk
from store.codec.message import MessageInner, encode_properties
from store.codec.message_codec import encode_message, message_length, write_blank_into
from store.logfile.commit_log import BatchHead, CommitLog
from store.logfile.transient_store_pool import TransientStorePool
from store.status import EncodedItems, total_bytes
from tests.store.conftest import open_store, small_config
from tests.waiting import wait_for

FILE_SIZE = 4096
STORE_IP = "10.1.2.3"
HOST = bytes([10, 1, 2, 3, 0, 0, 0x2A, 0x9F])  # STORE_IP and the default store port, 10911

text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), max_size=10)
key_text = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=["Cs"]), min_size=1, max_size=8)


@st.composite
def properties(draw: st.DrawFn) -> dict[str, str]:
    props = draw(st.dictionaries(text.filter(bool), text, max_size=3))
    for name, value in (("TAGS", text), ("KEYS", st.lists(key_text, max_size=3).map(" ".join)), ("UNIQ_KEY", key_text)):
        if draw(st.booleans()):
            props[name] = draw(value)
    if draw(st.integers(0, 7)) == 0:
        props["DELAY"] = draw(st.sampled_from(["1", "2", "0", "x", "40"]))
    return props


@st.composite
def messages(draw: st.DrawFn) -> MessageInner:
    return MessageInner(
        draw(st.sampled_from(["T", "Tópico", "队列", "x" * 80])),
        draw(st.one_of(st.binary(max_size=40), st.binary(min_size=900, max_size=1500))),
        draw(st.integers(0, 3)),
        draw(properties()),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        born_timestamp=draw(st.sampled_from([1_700_000_000_000, 1_700_000_000_001, 5])),
        born_host=draw(st.sampled_from([HOST, bytes(8)])),
        sys_flag=draw(st.sampled_from([0, 0, 4, 8, 0x10, -1])),  # the v6 bits follow the hosts: cleared
        reconsume_times=draw(st.sampled_from([0, 3])),
        prepared_transaction_offset=draw(st.sampled_from([0, 2**40])),
    )


@dataclass
class Expected:
    """The reference layout: the files' bytes, each queue's next offset, the expected put results."""

    files: list[bytearray]
    pos: int = 0
    queues: dict[tuple[str, int], int] | None = None

    def add(self, topic: bytes, body: bytes, props: bytes, fields: dict[str, Any], store_ts: int) -> tuple[int, int, int]:
        """Lay one message out as the invariants say; (physical offset, size, queue offset)."""
        queues = self.queues if self.queues is not None else {}
        self.queues = queues
        total = message_length(len(body), len(topic), len(props))
        if total + 8 > FILE_SIZE - self.pos:
            write_blank_into(self.files[-1], self.pos, FILE_SIZE - self.pos)
            self.files.append(bytearray(FILE_SIZE))
            self.pos = 0
        key = (topic.decode(), fields["queue_id"])
        qoff = queues.get(key, 0)
        if fields["sys_flag"] & 0xC in (0x4, 0xC):  # prepared, rolled back: queue offset 0, the queue's next unchanged
            qoff = 0
        else:
            queues[key] = qoff + 1
        phys = (len(self.files) - 1) * FILE_SIZE + self.pos
        image = encode_message(
            topic, body, props, queue_offset=qoff, physical_offset=phys, store_timestamp=store_ts, store_host=HOST, **fields
        )
        self.files[-1][self.pos : self.pos + total] = image
        self.pos += total
        return phys, total, qoff

    def add_message(self, msg: MessageInner, store_ts: int) -> tuple[int, int, int]:
        """A message as it was put (a delayed one's topic, queue and properties are rewritten by then)."""
        fields = {
            "queue_id": msg.queue_id, "flag": msg.flag, "sys_flag": msg.sys_flag, "born_timestamp": msg.born_timestamp,
            "born_host": msg.born_host, "reconsume_times": msg.reconsume_times,
            "prepared_transaction_offset": msg.prepared_transaction_offset,
        }  # fmt: skip
        return self.add(msg.topic_bytes, bytes(msg.body), encode_properties(msg.properties), fields, store_ts)


def commit_log(root: str, pooled: bool, clock: FakeClock) -> CommitLog:
    config = small_config(
        root,
        mapped_file_size_commit_log_bytes=FILE_SIZE,
        max_message_size_bytes=1600,
        max_properties_size_bytes=1024,
        max_batch_messages=64,
        store_host=STORE_IP,
    )
    pool = None
    if pooled:
        pool = TransientStorePool(2, FILE_SIZE)  # two buffers: later files fall back to the mapping
        pool.init()
    log = CommitLog(config, None, pool, clock=clock)
    assert log.load()
    return log


def assert_files_equal(log: CommitLog, expected: Expected) -> None:
    """Each file holds the reference's bytes; a file the allocation service made ahead holds zeros."""
    names = sorted(os.listdir(log.config.commit_log_dir()))
    assert names[: len(expected.files)] == [f"{i * FILE_SIZE:020d}" for i in range(len(expected.files))]
    assert len(names) <= len(expected.files) + 1
    for i, name in enumerate(names):
        with open(os.path.join(log.config.commit_log_dir(), name), "rb") as fh:
            assert fh.read() == (bytes(expected.files[i]) if i < len(expected.files) else bytes(FILE_SIZE)), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.lists(messages(), min_size=1, max_size=6), min_size=1, max_size=8), st.booleans())
def test_put_writes_what_the_reference_encoder_writes(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[MessageInner]], pooled: bool
) -> None:
    clock = FakeClock(now_ms=1_800_000_000_000)
    log = commit_log(str(tmp_path_factory.mktemp("cl")), pooled, clock)
    expected = Expected([bytearray(FILE_SIZE)])
    try:
        for batch in batches:
            clock.advance_ms(7)
            result = log.put_message(batch[0]) if len(batch) == 1 else log.put_messages(batch)
            assert result.status is PutMessageStatus.PUT_OK and len(result.items) == len(batch)
            want = []
            for msg, item in zip(batch, result.items, strict=True):
                phys, size, qoff = expected.add_message(msg, clock.now_ms())
                want.append((phys, size, qoff, msg.queue_id))
                assert (item.wrote_offset, item.wrote_bytes, item.logics_offset, item.queue_id) == want[-1]
                assert (item.store_timestamp, item.store_host) == (clock.now_ms(), HOST)
            got = [(i.wrote_offset, i.wrote_bytes, i.logics_offset, i.queue_id) for i in result.items[::-1]]
            assert got == want[::-1] and total_bytes(result.items) == sum(w[1] for w in want)
            assert (result.items[-1].wrote_offset, result.end_offset) == (want[-1][0], want[-1][0] + want[-1][1])
        log.commit(0)  # a pooled file's bytes reach the file on commit
        assert_files_equal(log, expected)
        assert log.get_max_offset() == (len(expected.files) - 1) * FILE_SIZE + expected.pos
    finally:
        log.shutdown()


batch_items = st.lists(
    st.tuples(st.binary(max_size=1400), properties().map(encode_properties), st.integers(-(2**31), 2**31 - 1)), min_size=1
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(["B", "Bätch"]), st.integers(0, 2), batch_items), min_size=1, max_size=5),
    st.booleans(),
    st.booleans(),
)
def test_put_batch_writes_what_the_reference_encoder_writes(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[str, int, list[tuple[bytes, bytes, int]]]],
    pooled: bool,
    carried: bool,
) -> None:
    """A batch appended as it came (the binary produce's path) against the same reference, with the
    CRCs its check computed carried to the encoder (across file ends) or computed again."""
    clock = FakeClock(now_ms=1_800_000_000_000)
    log = commit_log(str(tmp_path_factory.mktemp("cl")), pooled, clock)
    expected = Expected([bytearray(FILE_SIZE)])
    try:
        for topic, queue_id, items in batches:
            clock.advance_ms(3)
            data = nk.pack_batch(items)
            count, _, crcs, has_dedup_id = nk.check_batch_crcs(data, 1600)
            assert (count, _) == nk.check_batch(data, 1600)
            head = BatchHead(topic, topic.encode(), queue_id, clock.now_ms() - 1, HOST, sys_flag=0)
            result = log.put_batch(nk.CheckedBatch(data, count, 0, crcs if carried else b"", has_dedup_id), head)
            assert result.status is PutMessageStatus.PUT_OK and isinstance(result.items, EncodedItems)
            fields = {"queue_id": queue_id, "sys_flag": 0, "born_timestamp": clock.now_ms() - 1, "born_host": HOST}
            want = [expected.add(topic.encode(), body, props, dict(fields, flag=flag), clock.now_ms()) for body, props, flag in items]
            got = [(i.wrote_offset, i.wrote_bytes, i.logics_offset) for i in result.items]
            assert got == want and result.items.commitlog_offsets() == [w[0] for w in want]
            assert result.items.total_bytes() == sum(w[1] for w in want)
        log.commit(0)
        assert_files_equal(log, expected)
    finally:
        log.shutdown()


def test_a_message_larger_than_an_empty_file_is_refused_not_looped_on(tmp_path: Path) -> None:
    """Validation keeps such messages out; the commit log itself still stops instead of rolling forever."""
    log = commit_log(str(tmp_path / "cl"), False, FakeClock())
    try:
        r = log.put_message(MessageInner("T", b"x" * FILE_SIZE))
        assert (r.status, r.items) == (PutMessageStatus.MESSAGE_ILLEGAL, [])
        assert len(log.mapped_file_queue.mapped_files) <= 2 and log.put_message(MessageInner("T", b"ok")).ok
    finally:
        log.shutdown()


# The store's put of checked batches -----------------------------------------------------------


@pytest.fixture
def pooled_store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    config = small_config(
        str(tmp_path / "store"), mapped_file_size_commit_log_bytes=FILE_SIZE, max_message_size_bytes=1600, max_properties_size_bytes=1024,
        transient_store_pool_enable=True, transient_store_pool_size=2, max_batch_messages=16, store_host=STORE_IP,
    )  # fmt: skip
    store = open_store(config)
    try:
        yield store
    finally:
        store.shutdown()


def test_store_puts_json_and_binary_batches_in_pool_mode_as_the_reference_does(pooled_store: DefaultMessageStore) -> None:
    clock = FakeClock(now_ms=1_900_000_000_000)
    pooled_store.commit_log.clock = clock
    expected = Expected([bytearray(FILE_SIZE)])
    for round_ in range(12):
        clock.advance_ms(1)
        msgs = [build_message("S", bytes([round_]) * (i * 211), i % 2, tags=f"标签{i}", keys=[f"k{i}"]) for i in range(4)]
        assert pooled_store.put_messages(msgs).ok
        for msg in msgs:
            expected.add_message(msg, clock.now_ms())
        items = [(b"\xff" * 700, encode_properties({"TAGS": "t", "UNIQ_KEY": f"U{round_}"}), 9), (b"", b"", 0)]
        checked = pooled_store.check_batch(nk.pack_batch(items))
        assert pooled_store.put(PutBatch.of_encoded("S", 1, checked)).result().ok
        fields = {"queue_id": 1, "sys_flag": 0, "born_timestamp": clock.now_ms(), "born_host": bytes([127, 0, 0, 1, 0, 0, 0, 0])}
        for body, props, flag in items:
            expected.add(b"S", body, props, dict(fields, flag=flag), clock.now_ms())
    assert len(expected.files) >= 3  # both paths crossed file ends
    mfq = pooled_store.commit_log.mapped_file_queue
    # CommitRealTimeService copies the buffers to the files.
    wait_for(lambda: mfq.committed_where >= mfq.get_max_wrote_position(), 10, what="the commit service to commit")
    assert_files_equal(pooled_store.commit_log, expected)


@pytest.mark.parametrize(
    ("items", "code"),
    [
        ([(b"x" * 1601, b"", 0)], nk.BatchErrorCode.BODY_TOO_LARGE),
        ([(b"x", b"DELAY\x013\x02", 0)], nk.BatchErrorCode.RESERVED_PROPERTY),
        ([(b"x", b"TAGS\x01a||b\x02", 0)], nk.BatchErrorCode.BAD_TAGS),
        ([(b"x", b"\x01v\x02", 0)], nk.BatchErrorCode.BAD_PROPERTY),
        ([(b"x", b"", 0)] * 17, nk.BatchErrorCode.TOO_MANY),
    ],
)
def test_store_check_batch_refuses_what_the_store_would_not_take(
    pooled_store: DefaultMessageStore, items: list[tuple[bytes, bytes, int]], code: nk.BatchErrorCode
) -> None:
    with pytest.raises(nk.BatchError) as e:
        pooled_store.check_batch(nk.pack_batch(items))
    assert e.value.args[1] == code


def test_put_batch_refusals_store_nothing(pooled_store: DefaultMessageStore) -> None:
    checked = pooled_store.check_batch(nk.pack_batch([(b"x", b"", 0)]))
    assert pooled_store.put(PutBatch.of_encoded("a b", 0, checked)).result().refusal is PutRefusal.TOPIC_INVALID
    assert pooled_store.put(PutBatch.of_encoded("t", 1024, checked)).result().refusal is PutRefusal.QUEUE_NOT_FOUND
    empty = pooled_store.check_batch(b"")
    assert pooled_store.put(PutBatch.of_encoded("t", 0, empty)).result().refusal is PutRefusal.BATCH_EMPTY
    assert pooled_store.commit_log.get_max_offset() == 0  # a full disk: tests/app/test_disk_full.py fills a real one


@pytest.mark.parametrize("binary", [False, True])
def test_a_put_holding_the_lock_too_long_makes_puts_answer_busy(pooled_store: DefaultMessageStore, binary: bool) -> None:
    """A put stuck under the put lock (held here as a put holds it) makes others answer OS_PAGECACHE_BUSY at once."""
    cl = pooled_store.commit_log
    held, release = threading.Event(), threading.Event()

    def stuck_put() -> None:
        with cl.put_lock:
            cl.begin_time_in_lock_ms = int(time.time() * 1000) - pooled_store.config.os_page_cache_busy_timeout_ms - 1
            held.set()
            release.wait(10)
            cl.begin_time_in_lock_ms = 0

    t = threading.Thread(target=stuck_put)
    t.start()
    try:
        assert held.wait(10)
        if binary:
            r = pooled_store.put(PutBatch.of_encoded("t", 0, pooled_store.check_batch(nk.pack_batch([(b"x", b"", 0)])))).result()
        else:
            r = pooled_store.put_message(build_message("t", b"x"))
        assert r.status is PutMessageStatus.OS_PAGECACHE_BUSY and not r.items
    finally:
        release.set()
        t.join()
    assert cl.get_max_offset() == 0
