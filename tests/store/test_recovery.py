"""Recovery: clean restarts, torn tails, flipped bytes, lost queues; queues and index follow the log."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from store import (
    DefaultMessageStore,
    GetMessageResult,
    GetMessageStatus,
    MessageStoreConfig,
    PutMessageResult,
    build_message,
    decode_message,
)
from tests.store.conftest import open_store, small_config, wait_dispatched

FAR = 2**62


def fill(store: DefaultMessageStore, n: int) -> list[PutMessageResult]:
    results = [store.put_message(build_message("R", f"body-{i:05d}".encode() * 20, queue_id=i % 2, keys=[f"k{i}"])) for i in range(n)]
    assert all(r.ok for r in results)
    wait_dispatched(store)
    return results


def reopen(config: MessageStoreConfig) -> DefaultMessageStore:
    return open_store(config)


def test_clean_restart_keeps_everything(config: MessageStoreConfig) -> None:
    s = open_store(config)
    results = fill(s, 300)
    end = s.commit_log.get_max_offset()
    s.shutdown()
    assert not os.path.exists(config.abort_path()), "a clean shutdown removes the abort file"
    s = reopen(config)
    try:
        assert s.last_exit_ok and s.commit_log.get_max_offset() == end
        assert s.get_max_offset_in_queue("R", 0) == 150 and s.get_max_offset_in_queue("R", 1) == 150
        r = s.put_message(build_message("R", b"next", queue_id=0))
        assert r.items[0].logics_offset == 150 and r.items[0].wrote_offset >= end
        assert [m["body"] for m in s.query_message("R", "k7", 5, 0, FAR)] == [results[7] and f"body-{7:05d}".encode() * 20]
    finally:
        s.shutdown()


@pytest.mark.parametrize("crashed", [True, False])
def test_log_is_cut_at_a_torn_tail(config: MessageStoreConfig, caplog: pytest.LogCaptureFixture, crashed: bool) -> None:
    s = open_store(config)
    results = fill(s, 300)
    s.shutdown()
    victim = results[200].items[0]
    mfq_size = config.mapped_file_size_commit_log_bytes
    # The message is half there and nothing after it was written: zeros to the end of the log.
    for name in sorted(os.listdir(config.commit_log_dir())):
        start = int(name)
        path = os.path.join(config.commit_log_dir(), name)
        if start + mfq_size <= victim.wrote_offset:
            continue
        with open(path, "r+b") as fh:
            pos = max(0, victim.wrote_offset + 40 - start)
            fh.seek(pos)
            fh.write(bytes(mfq_size - pos))
    if crashed:
        open(config.abort_path(), "w").close()
    caplog.set_level(logging.WARNING, logger="tidemq.store")
    s = reopen(config)
    try:
        assert s.commit_log.get_max_offset() == victim.wrote_offset
        assert any("truncated at offset" in rec.getMessage() for rec in caplog.records)
        assert s.runtime_info()["commitlog_damaged_ranges"] == []  # a torn tail is cut, not a damaged range
        q = victim.queue_id
        assert s.get_max_offset_in_queue("R", q) == victim.logics_offset
        r: GetMessageResult | PutMessageResult
        with s.get_message("g", "R", q, victim.logics_offset, 5) as r:
            assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert s.query_message("R", "k250", 5, 0, FAR) == []  # index entries past the end are never served
        assert [m["body"][:10] for m in s.query_message("R", "k199", 5, 0, FAR)] == [b"body-00199"]
        r = s.put_message(build_message("R", b"again", queue_id=q, keys=["fresh"]))
        assert r.items[0].wrote_offset == victim.wrote_offset and r.items[0].logics_offset == victim.logics_offset
        wait_dispatched(s)
        with s.get_message("g", "R", q, victim.logics_offset, 5) as got:
            assert [m["body"] for m in got.decode()] == [b"again"]
        # The index's end offset was lowered to the cut: the new message is indexed.
        assert [m["body"] for m in s.query_message("R", "fresh", 5, 0, FAR)] == [b"again"]
    finally:
        s.shutdown()


def test_lost_consume_queues_are_rebuilt_from_the_log(config: MessageStoreConfig) -> None:
    s = open_store(config)
    fill(s, 200)
    s.shutdown()
    shutil.rmtree(config.consume_queue_dir())
    open(config.abort_path(), "w").close()
    s = reopen(config)
    try:
        assert s.get_max_offset_in_queue("R", 0) == 100 and s.get_max_offset_in_queue("R", 1) == 100
        with s.get_message("g", "R", 1, 99, 5) as r:
            assert r.decode()[0]["body"].startswith(b"body-00199")
    finally:
        s.shutdown()


def test_consume_queue_entries_past_the_log_end_are_dropped(config: MessageStoreConfig) -> None:
    s = open_store(config)
    results = fill(s, 100)
    s.shutdown()
    cut = results[60].items[0].wrote_offset
    # Cut the log itself (as if its tail was never flushed) and keep the longer queues.
    size = config.mapped_file_size_commit_log_bytes
    for name in sorted(os.listdir(config.commit_log_dir())):
        start = int(name)
        path = os.path.join(config.commit_log_dir(), name)
        if start > cut:
            os.truncate(path, 0)
            os.truncate(path, size)
        elif start <= cut < start + size:
            with open(path, "r+b") as fh:
                fh.seek(cut - start)
                fh.write(bytes(start + size - cut))
    open(config.abort_path(), "w").close()
    s = reopen(config)
    try:
        assert s.commit_log.get_max_offset() == cut
        assert s.get_max_offset_in_queue("R", 0) + s.get_max_offset_in_queue("R", 1) == 60
    finally:
        s.shutdown()


def test_a_short_last_file_is_completed_on_load(config: MessageStoreConfig) -> None:
    s = open_store(config)
    fill(s, 10)
    end = s.commit_log.get_max_offset()
    s.shutdown()
    # A crash between creating the next file and sizing it leaves it empty.
    next_name = f"{config.mapped_file_size_commit_log_bytes * 5:020d}"
    open(os.path.join(config.commit_log_dir(), next_name), "wb").close()
    open(config.abort_path(), "w").close()
    s = open_store(config)
    try:
        assert s.commit_log.get_max_offset() == end
        assert s.put_message(build_message("R", b"more")).ok
    finally:
        s.shutdown()


def test_files_of_the_wrong_size_stop_the_load(config: MessageStoreConfig) -> None:
    s = open_store(config)
    fill(s, 10)
    s.shutdown()
    names = sorted(os.listdir(config.commit_log_dir()))
    assert len(names) >= 2, "the first file must not be the last for this test"
    name = names[0]
    os.truncate(os.path.join(config.commit_log_dir(), name), 1000)
    s = DefaultMessageStore(config)
    with pytest.raises(Exception, match="could not be loaded"):
        s.load()
    # The failed load released the lock: a fixed directory can be opened again.
    os.truncate(os.path.join(config.commit_log_dir(), name), config.mapped_file_size_commit_log_bytes)
    s = DefaultMessageStore(small_config(config.store_path_root_dir))
    s.load()
    s.shutdown()


@pytest.mark.parametrize("torn", [True, False])
def test_a_receive_whose_offset_commit_the_crash_tore_off_loses_its_checkpoint_too(
    config: MessageStoreConfig, caplog: pytest.LogCaptureFixture, torn: bool
) -> None:
    # A receive puts its checkpoint and the group's offset commit in one put. A crash inside the put's write can
    # leave the checkpoint whole and the commit torn; kept alone, the checkpoint would revive the message after
    # the next receive took it again (and its consumer acked it there).
    s = open_store(config)
    s.create_or_update_topic("P", 1)
    put = s.put_message(build_message("P", b"taken", queue_id=0))
    assert put.ok
    wait_dispatched(s)
    before = s.commit_log.get_max_offset()
    (popped,) = s.group_consumption.receive("g", "P", 1, 60_000)
    wait_dispatched(s)
    assert s.query_offset("g", "P", 0) == 1
    # The receive's put is the log's last two messages: the checkpoint (a timer message), then the commit.
    offsets, topics = [], []
    pos = before
    while pos < s.commit_log.get_max_offset():
        offsets.append(pos)
        head = s.commit_log.get_message(pos, 4)
        assert head is not None
        size = int.from_bytes(head.view[:4], "big")
        whole = s.commit_log.get_message(pos, size)
        assert whole is not None
        topics.append(decode_message(whole.view, 0)["topic"])
        pos += size
    assert topics[-2:] == ["rmq_sys_wheel_timer", "rmq_sys_TIDEMQ_STATE"], topics
    s.shutdown()
    if torn:  # the commit half written, nothing after it
        before = offsets[-2]
        commit_at = offsets[-1]
        name = f"{commit_at - commit_at % config.mapped_file_size_commit_log_bytes:020d}"
        with open(os.path.join(config.commit_log_dir(), name), "r+b") as fh:
            fh.seek(commit_at % config.mapped_file_size_commit_log_bytes + 30)
            fh.write(bytes(64))
    open(config.abort_path(), "w").close()
    caplog.set_level(logging.WARNING, logger="tidemq.store")
    s = reopen(config)
    try:
        if torn:
            assert s.commit_log.get_max_offset() == before, "the checkpoint is cut with its torn commit"
            assert any("a torn put" in rec.getMessage() for rec in caplog.records)
            assert s.query_offset("g", "P", 0) == -1
            (again,) = s.group_consumption.receive("g", "P", 1, 60_000)  # taken again, as never taken
            assert again.reconsume_times == 0 and again.queue_offset == 0
        else:
            assert s.commit_log.get_max_offset() == pos, "a whole put is kept"
            assert s.query_offset("g", "P", 0) == 1
            assert s.group_consumption.receive("g", "P", 1, 60_000) == []
        assert popped.queue_offset == 0
    finally:
        s.shutdown()


def test_a_producer_naming_the_put_part_property_cuts_nothing(config: MessageStoreConfig) -> None:
    # Recovery reads the marker only on the store's own records: a message a producer gave it is kept whole.
    s = open_store(config)
    s.create_or_update_topic("U", 1)
    plain = s.put_message(build_message("U", b"plain", queue_id=0, properties={"TIDEMQ_PUT_PART": "0/9"}))
    delayed = s.put_message(build_message("U", b"later", queue_id=0, properties={"TIDEMQ_PUT_PART": "0/9", "TIMER_DELAY_MS": "60000"}))
    assert plain.ok and delayed.ok
    end = s.commit_log.get_max_offset()
    s.shutdown()
    open(config.abort_path(), "w").close()
    s = reopen(config)
    try:
        assert s.commit_log.get_max_offset() == end
    finally:
        s.shutdown()
