"""Transaction types in SYSFLAG: a prepared (0x4) or rolled-back (0xC) message gets no consume-queue
entry (CommitLogDispatcherBuildConsumeQueue) and a rolled-back one no index entry either
(IndexService.buildIndex); a committed (0x8) one is dispatched like any other. The native dispatch
and the Python reference agree byte for byte, and the reput offset moves past every one."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import GetMessageStatus, MessageInner
from store.codec.message_codec import decode_message, iter_messages
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.store.reference_dispatch import assert_matches_reference
from tests.store.rocketmq_records import BORN_V6, COMMIT, PREPARED, ROLLBACK, Record, write_commit_log

FAR = 2**62


def typed_records() -> list[Record]:
    """As a RocketMQ broker writes them: prepared and rolled-back ones with queue offset 0, not counted."""
    kinds = [(0, 0), (PREPARED, 0), (COMMIT, 1), (ROLLBACK, 0), (0, 2), (PREPARED | BORN_V6, 0), (ROLLBACK | BORN_V6, 0), (COMMIT, 3)]
    return [
        Record("Tx", f"m{i}".encode(), {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}", "TAGS": "t"}, 0, qoff, flag)
        for i, (flag, qoff) in enumerate(kinds)
    ]


@pytest.mark.parametrize("crashed", [True, False])
def test_prepared_and_rolled_back_messages_get_no_queue_entry(tmp_path: Path, crashed: bool) -> None:
    config = small_config(str(tmp_path / "store"), message_index_uniq_key_enable=True)
    records = typed_records()
    starts = write_commit_log(config.commit_log_dir(), config.mapped_file_size_commit_log_bytes, records)
    end = starts[-1] + len(records[-1].image(starts[-1]))
    if crashed:
        open(config.abort_path(), "w").close()
    s = open_store(config)
    try:
        wait_dispatched(s)
        assert s.reput_service.reput_from_offset == end == s.commit_log.get_max_offset()
        assert s.get_max_offset_in_queue("Tx", 0) == 4
        got = s.get_message("g", "Tx", 0, 0, 32)
        assert got.status is GetMessageStatus.FOUND
        assert [decode_message(got.data, p)["body"] for p, _ in iter_messages(got.data)] == [b"m0", b"m2", b"m4", b"m7"]
        indexed = {i for i in range(len(records)) if s.query_message("Tx", f"k{i}", 4, 0, FAR)}
        assert indexed == {0, 1, 2, 4, 5, 7}  # all but the rolled-back ones
        assert not s.query_message("Tx", "U3", 4, 0, FAR) and s.query_message("Tx", "U5", 4, 0, FAR)
    finally:
        s.shutdown()
    assert_matches_reference(config, {}, str(tmp_path / "reference"))


def test_a_put_prepared_message_takes_queue_offset_zero_and_leaves_the_queue_alone(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "store"))
    s = open_store(config)
    try:

        def msg(body: bytes, sys_flag: int) -> MessageInner:
            return MessageInner("Tp", body, 0, {"KEYS": body.decode()}, sys_flag=sys_flag)

        first = s.put_message(msg(b"a", 0))
        wait_dispatched(s)
        alone = s.put_message(msg(b"p", PREPARED))  # a dispatch chunk of one record that gets no entry
        wait_dispatched(s)
        mixed = s.put_messages([msg(b"r1", ROLLBACK), msg(b"r2", ROLLBACK), msg(b"b", 0), msg(b"c", COMMIT), msg(b"p2", PREPARED)])
        wait_dispatched(s)
        assert first.ok and alone.ok and mixed.ok
        assert first.items[0].logics_offset == 0 and alone.items[0].logics_offset == 0
        assert [item.logics_offset for item in mixed.items] == [0, 0, 1, 2, 0]
        assert s.get_max_offset_in_queue("Tp", 0) == 3
        got = s.get_message("g", "Tp", 0, 0, 32)
        assert [decode_message(got.data, p)["body"] for p, _ in iter_messages(got.data)] == [b"a", b"b", b"c"]
        assert s.reput_service.reput_from_offset == s.commit_log.get_max_offset()
        assert s.query_message("Tp", "p", 4, 0, FAR) and not s.query_message("Tp", "r2", 4, 0, FAR)
    finally:
        s.shutdown()
    assert_matches_reference(config, {}, str(tmp_path / "reference"))
