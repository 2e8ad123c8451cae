"""CommitLog puts: layout on disk, end-of-file blanks, queue offsets, batches and refusals."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from store import DefaultMessageStore, MessageStoreConfig, PutMessageStatus, PutRefusal, build_message
from store.codec.message import MessageInner, encode_properties
from store.codec.message_codec import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, DecodeOutcome, check_message
from tests.store.conftest import open_store, small_config, wait_dispatched


def commitlog_files(root: str) -> list[str]:
    d = os.path.join(root, "commitlog")
    return sorted(os.listdir(d))


def test_files_are_named_by_start_offset_and_end_with_a_blank(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    body = b"b" * 1000
    for _ in range(200):
        assert store.put_message(build_message("T", body)).ok
    names = commitlog_files(config.store_path_root_dir)
    size = config.mapped_file_size_commit_log_bytes
    assert names[:3] == [f"{0:020d}", f"{size:020d}", f"{2 * size:020d}"]
    with open(os.path.join(config.commit_log_dir(), names[0]), "rb") as fh:
        data = fh.read()
    pos = 0
    count = 0
    while True:
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK_MAGIC_CODE:
            assert pos + total == size, "the end marker's size is the rest of the file"
            break
        assert magic == MESSAGE_MAGIC_CODE
        assert struct.unpack_from(">q", data, pos + 28)[0] == pos  # PHYSICALOFFSET is the message's own offset
        pos += total
        count += 1
    assert count == size // (1000 + 91 + 1 + len(build_message("T", b"").properties_bytes))


def test_queue_offsets_are_per_topic_and_queue(store: DefaultMessageStore) -> None:
    offsets: dict[tuple[str, int], list[int]] = {}
    for i in range(60):
        topic, qid = ("A", "B")[i % 2], i % 3
        r = store.put_message(build_message(topic, b"x", queue_id=qid))
        offsets.setdefault((topic, qid), []).append(r.items[0].logics_offset)
    for seq in offsets.values():
        assert seq == list(range(len(seq)))


def test_batch_put_assigns_consecutive_offsets_across_files(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    msgs = [build_message("Batch", b"z" * 3000, queue_id=0) for _ in range(60)]
    result = store.put_messages(msgs)
    assert result.ok and len(result.items) == 60
    assert [i.logics_offset for i in result.items] == list(range(60))
    ends = [i.wrote_offset for i in result.items]
    assert ends == sorted(ends)
    assert len(commitlog_files(config.store_path_root_dir)) >= 3
    wait_dispatched(store)
    with store.get_message("g", "Batch", 0, 0, 100) as got:
        assert [m["body"] for m in got.decode()] == [m.body for m in msgs][: got.message_count]


@pytest.mark.parametrize(
    ("make", "status", "refusal"),
    [
        (lambda: MessageInner("../x", b"b"), PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.TOPIC_INVALID),
        (lambda: MessageInner("t" * 128, b"b"), PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.TOPIC_INVALID),
        (lambda: MessageInner("a b", b"b"), PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.TOPIC_INVALID),
        (lambda: MessageInner("t", b"x" * (8 * 1024 + 1)), PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.MESSAGE_TOO_LARGE),
        (
            lambda: MessageInner("t", b"b", properties={"k": "v" * 40_000}),
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
            PutRefusal.PROPERTIES_TOO_LARGE,
        ),
        (lambda: MessageInner("t", b"b", queue_id=-1), PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.QUEUE_NOT_FOUND),
        (lambda: MessageInner("t", b"b", queue_id=1024), PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.QUEUE_NOT_FOUND),
    ],
)
def test_refused_puts_write_nothing(
    store: DefaultMessageStore,
    config: MessageStoreConfig,
    make: Callable[[], MessageInner],
    status: PutMessageStatus,
    refusal: PutRefusal,
) -> None:
    before = store.commit_log.get_max_offset()
    result = store.put_message(make())
    assert (result.status, result.refusal) == (status, refusal)
    assert not result.stored and result.detail
    assert store.commit_log.get_max_offset() == before
    assert not os.path.exists(os.path.join(config.consume_queue_dir(), "..", "x"))


def test_batch_with_one_bad_message_writes_nothing(store: DefaultMessageStore) -> None:
    good = build_message("t", b"ok")
    bad = MessageInner("t", b"x" * (8 * 1024 + 1))
    result = store.put_messages([good, bad])
    assert result.refusal is PutRefusal.MESSAGE_TOO_LARGE
    assert store.commit_log.get_max_offset() == 0


def test_batch_limits(store: DefaultMessageStore) -> None:
    assert store.put_messages([]).refusal is PutRefusal.BATCH_EMPTY
    too_many = [build_message("t", b"") for _ in range(store.config.max_batch_messages + 1)]
    assert store.put_messages(too_many).refusal is PutRefusal.BATCH_TOO_LARGE


def test_put_on_stopped_store_is_refused(config: MessageStoreConfig) -> None:
    s = open_store(config)
    s.shutdown()
    result = s.put_message(build_message("t", b"x"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and result.refusal is PutRefusal.SHUTTING_DOWN


def test_largest_message_fits_and_rolls(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "s"), max_message_size_bytes=30_000)
    s = open_store(cfg)
    try:
        for _ in range(5):
            assert s.put_message(MessageInner("t", b"m" * 30_000)).ok
        files = s.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 3
        for mf in files[:-1]:
            pos = 0
            while True:
                r = check_message(mf.mm, pos, mf.file_size, decode=False)
                if r.outcome is DecodeOutcome.BLANK:
                    assert pos + r.size == mf.file_size
                    break
                assert r.outcome is DecodeOutcome.MESSAGE
                pos += r.size
    finally:
        s.shutdown()


def test_properties_use_rocketmq_encoding(store: DefaultMessageStore) -> None:
    msg = build_message("t", b"x", tags="TagA", keys=["k1", "k2"], properties={"a": "b"}, uniq_key="U")
    assert msg.properties_bytes == encode_properties({"a": "b", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U"})
    assert b"TAGS\x01TagA\x02" in msg.properties_bytes and b"KEYS\x01k1 k2\x02" in msg.properties_bytes
    r = store.put_message(msg)
    data = store.look_message_by_offset(r.items[0].wrote_offset)
    assert data is not None and data["properties"]["KEYS"] == "k1 k2"
    assert r.items[0].msg_id == data["offset_msg_id"]


def test_append_data_replicates_bytes_at_the_same_offsets(tmp_path: Path, store: DefaultMessageStore) -> None:
    for i in range(500):
        store.put_message(build_message("Rep", f"{i:03d}".encode() * 100, queue_id=i % 2))
    wait_dispatched(store)
    size = store.config.mapped_file_size_commit_log_bytes
    start = size  # a copy that begins at the master's second file, as after its first was deleted
    end = store.commit_log.get_max_offset()
    replica = open_store(small_config(str(tmp_path / "replica")))
    try:
        offset = start
        assert not replica.commit_log.append_data(start + 1, b"x"), "an empty log starts only at a file boundary"
        while offset < end:
            chunk = store.get_commit_log_data(offset, 5000)
            assert replica.commit_log.append_data(offset, chunk)
            offset += len(chunk)
        assert not replica.commit_log.append_data(offset - 10, b"x"), "bytes must continue the log"
        assert replica.commit_log.get_max_offset() == end and replica.commit_log.get_min_offset() == start
        last_file = replica.commit_log.mapped_file_queue.get_last_mapped_file()
        assert last_file is not None and last_file.store_timestamp > 0
        replica.reput_service.wakeup()
        wait_dispatched(replica)
        last = store.get_max_offset_in_queue("Rep", 1) - 1
        with replica.get_message("g", "Rep", 1, last, 1) as got, store.get_message("g", "Rep", 1, last, 1) as want:
            assert got.to_bytes() == want.to_bytes()
    finally:
        replica.shutdown()
