"""A large batch is written to its commitlog file with one pwrite (store/logfile/write_through.py): the same log,
read back, recovered and killed as one written through the mapping."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigInvalid
from store import DefaultMessageStore, MessageStoreConfig, PutBatch
from store.native import pack_batch
from store.put.put_batch import packed_binary, packed_json
from tests.store.conftest import open_store, run_until_killed, small_config, wait_dispatched

FILE_BYTES = 256 * 1024  # commitlog files: a batch of 40 x 1 KiB fits four times, the fifth rolls
MESSAGES = 40


def through_config(root: str, min_bytes: int = 16 * 1024) -> MessageStoreConfig:
    return small_config(root, mapped_file_size_commit_log_bytes=FILE_BYTES, write_through_min_bytes=min_bytes)


def body(batch: int, i: int) -> bytes:
    return b"%04d-%04d:" % (batch, i) + bytes([65 + (batch + i) % 26]) * 1014


def put_batch(store: DefaultMessageStore, number: int, count: int = MESSAGES) -> int:
    """Put batch `number` of `count` 1 KiB messages to T/0; its first queue offset."""
    data = pack_batch([(body(number, i), b"KEYS\x01k%d-%d\x02" % (number, i), 0) for i in range(count)])
    result = store.put(PutBatch.of_encoded("T", 0, store.check_batch(data))).result(10)
    assert result.ok and len(result.items) == count
    return result.items[0].logics_offset


def read_all(store: DefaultMessageStore) -> list[bytes]:
    wait_dispatched(store)
    out: list[bytes] = []
    while True:
        with store.get_message("g", "T", 0, len(out), 64) as got:
            bodies = [m["body"] for m in got.decode()]
        if not bodies:
            return out
        out += bodies


def expected(batches: int) -> list[bytes]:
    return [body(b, i) for b in range(batches) for i in range(MESSAGES)]


def commitlog_bytes(store: DefaultMessageStore) -> int:
    return store.commit_log.get_max_offset()


def test_large_batches_are_written_through_and_read_back_as_through_the_mapping(tmp_path: Path) -> None:
    through = open_store(through_config(str(tmp_path / "through")))
    mapped = open_store(through_config(str(tmp_path / "mapped"), min_bytes=0))
    try:
        for number in range(6):  # crosses a file end: the batch that does not fit goes through the mapping, and rolls
            assert put_batch(through, number) == put_batch(mapped, number) == number * MESSAGES
        assert through.commit_log.write_through.batches == 5  # the sixth met a file's end (need past the file)
        assert mapped.commit_log.write_through.batches == 0
        assert read_all(through) == read_all(mapped) == expected(6)
        assert commitlog_bytes(through) == commitlog_bytes(mapped)
        assert through.query_message("T", "k3-7", 10, 0, 2**62)[0]["body"] == body(3, 7)  # its index entries
    finally:
        through.shutdown()
        mapped.shutdown()
    reopened = open_store(through_config(str(tmp_path / "through")))
    try:
        assert read_all(reopened) == expected(6)
        assert put_batch(reopened, 6) == 6 * MESSAGES  # a new file object at the same path is written, not the old one
        assert read_all(reopened) == expected(7)
    finally:
        reopened.shutdown()


def test_a_batch_the_file_refuses_is_copied_through_the_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(through_config(str(tmp_path / "store")))
    try:
        put_batch(store, 0)

        def refused(fd: int, data: object, offset: int) -> int:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr("store.logfile.write_through.os.pwrite", refused)  # nothing else makes a write fail here
        put_batch(store, 1)
        monkeypatch.undo()
        put_batch(store, 2)
        wt = store.commit_log.write_through
        assert (wt.batches, wt.fallbacks) == (2, 1)
        assert read_all(store) == expected(3)
    finally:
        store.shutdown()
    reopened = open_store(through_config(str(tmp_path / "store")))
    try:
        assert read_all(reopened) == expected(3)
    finally:
        reopened.shutdown()


KILL_AFTER_WRITING_THROUGH = f"""
import os, signal, sys
from store import PutBatch
from store.native import pack_batch
from tests.store.test_write_through import body, open_store, through_config
store = open_store(through_config(sys.argv[1]))
for number in range(9):
    data = pack_batch([(body(number, i), b"", 0) for i in range({MESSAGES})])
    assert store.put(PutBatch.of_encoded("T", 0, store.check_batch(data))).result(10).ok
assert store.commit_log.write_through.batches >= 7
print("STORED", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_batches_written_through_are_all_there_after_the_writer_is_killed(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    run_until_killed(KILL_AFTER_WRITING_THROUGH, root, "STORED")
    store = open_store(through_config(root))
    try:
        assert not store.last_exit_ok
        assert read_all(store) == expected(9)  # every acknowledged message, whole, in order
    finally:
        store.shutdown()


def test_the_setting_turns_it_off_and_is_checked(tmp_path: Path) -> None:
    store = open_store(through_config(str(tmp_path / "store"), min_bytes=0))
    try:
        put_batch(store, 0)
        assert store.commit_log.write_through.batches == 0
        assert read_all(store) == expected(1)
    finally:
        store.shutdown()
    with pytest.raises(ConfigInvalid, match="write_through_min_bytes must be an integer in 0"):
        through_config(str(tmp_path / "bad"), min_bytes=-1).validate()


def reads_at_random(store: DefaultMessageStore, index: int) -> bool:
    """Whether commitlog file `index`'s mapping is advised MADV_RANDOM (the "rr" of its VmFlags in smaps)."""
    address = store.commit_log.mapped_file_queue.mapped_files[index].mm.address
    flags = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and ":" not in fields[0]:
                low, high = (int(x, 16) for x in fields[0].split("-"))
                inside = low <= address < high
            elif fields[0] == "VmFlags:" and inside:
                flags = fields[1:]
                break
    assert flags is not None, "the mapping is not in smaps"
    return "rr" in flags


def test_the_file_written_through_reads_no_further_ahead_until_another_is_written(tmp_path: Path) -> None:
    store = open_store(through_config(str(tmp_path / "store")))
    try:
        put_batch(store, 0)
        assert reads_at_random(store, 0)
        for number in range(1, 7):  # the sixth batch rolls into the second file, the seventh is written through there
            put_batch(store, number)
        assert store.commit_log.write_through.batches == 6
        assert reads_at_random(store, 1) and not reads_at_random(store, 0)
        store.commit_log.write_through.close()
        assert not reads_at_random(store, 1)
        assert read_all(store) == expected(7)
    finally:
        store.shutdown()


def test_a_large_packed_batch_leaves_the_put_lane_for_the_write_through(tmp_path: Path) -> None:
    """The put lane writes through the mapping: a packed batch (a JSON body, a binary batch as sent) of
    write_through_min_bytes or more is left to put_batch, which writes it through; a smaller one takes the lane."""
    store = open_store(through_config(str(tmp_path / "store")))
    try:
        small = packed_json(b'{"messages": [{"body": "a"}, {"body": "b"}]}', 64, 8192, b"")
        assert small is not None
        assert store.put_answer(PutBatch.of_packed("T", 0, small))[0].ok  # the first file is made on the general path
        lane_calls = [0]
        lane: Callable[..., Any] = store.commit_log.put_packed

        def counted(*args: Any) -> Any:
            lane_calls[0] += 1
            return lane(*args)

        store.commit_log.put_packed = counted
        assert store.put_answer(PutBatch.of_packed("T", 0, small))[0].ok
        assert (lane_calls[0], store.commit_log.write_through.batches) == (1, 0)
        large_json = packed_json(json.dumps({"messages": [{"body": body(0, i).decode()} for i in range(20)]}).encode(), 64, 8192, b"")
        large_binary = pack_batch([(body(1, i), b"", 0) for i in range(20)])
        assert large_json is not None and len(large_json.data) >= 16 * 1024 <= len(large_binary)
        assert store.put_answer(PutBatch.of_packed("T", 0, large_json))[0].ok
        assert store.put_lane(PutBatch.of_packed("T", 0, packed_binary(large_binary, 0))) is None  # nothing stored
        assert store.put(PutBatch.of_encoded("T", 0, store.check_batch(large_binary))).result(10).ok
        assert (lane_calls[0], store.commit_log.write_through.batches) == (1, 2)
        bodies = read_all(store)
        assert bodies[4:24] == [body(0, i) for i in range(20)] and bodies[24:] == [body(1, i) for i in range(20)]
    finally:
        store.shutdown()
