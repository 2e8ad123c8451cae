"""The offline commitlog walk over hand-built files: blank markers, torn tails, corrupt records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.commitlog_reader import (
    FileScan,
    FileWalk,
    NotACommitLog,
    StopReason,
    commitlog_dir_of,
    list_commitlog_files,
    scan_file,
)
from store.codec.message_codec import POS_BODY_CRC, decode_message
from tests.pipeline.pipeline_helpers import build_commitlog

FILE_SIZE = 4096


def sample(n: int, body_size: int = 300) -> list[tuple[str, int, bytes, dict[str, str]]]:
    return [(f"topic{i % 2}", i % 3, bytes([i % 251]) * body_size, {"TAGS": f"T{i % 4}", "n": str(i)}) for i in range(n)]


def read_all(path: Path, check_crc: bool = True) -> tuple[list[dict[str, Any]], list[FileScan]]:
    messages: list[dict[str, Any]] = []
    scans: list[FileScan] = []
    for f in list_commitlog_files(str(path)):
        walk = FileWalk(f, check_crc)
        messages.extend(decode_message(buf, pos) for buf, pos, _ in walk)
        scans.append(walk.scan)
    return messages, scans


def test_reads_every_message_across_files_and_stops_each_at_its_blank_marker(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, sample(40))
    files = list_commitlog_files(str(tmp_path))
    assert len(files) > 2
    assert [f.start_offset for f in files] == [i * FILE_SIZE for i in range(len(files))]
    messages, scans = read_all(tmp_path)
    assert [(m["topic"], m["queue_id"], m["queue_offset"], m["commitlog_offset"], m["body"]) for m in messages] == [
        (w.topic, w.queue_id, w.queue_offset, w.commitlog_offset, w.body) for w in written
    ]
    assert [m["properties"]["n"] for m in messages] == [str(i) for i in range(40)]
    assert [s.stop for s in scans] == [StopReason.BLANK] * (len(files) - 1) + [StopReason.END]
    assert sum(s.messages for s in scans) == 40
    last = written[-1]
    assert scans[-1].end_offset == last.commitlog_offset + messages[-1]["store_size"]


def test_a_torn_tail_ends_the_walk_at_the_last_whole_message(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, sample(5))
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    torn_at = written[-1].commitlog_offset
    data[torn_at + 40 :] = b"\x00" * (len(data) - torn_at - 40)  # the last message lost its tail
    path.write_bytes(bytes(data))
    messages, scans = read_all(tmp_path)
    assert [m["commitlog_offset"] for m in messages] == [w.commitlog_offset for w in written[:-1]]
    assert scans[0].stop is StopReason.TORN
    assert scans[0].stop_position == torn_at
    assert "at" in scans[0].detail


def test_garbage_after_the_last_message_is_a_torn_tail(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, sample(3))
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    end = written[-1].commitlog_offset + decode_message(data, written[-1].commitlog_offset)["store_size"]
    data[end : end + 16] = bytes(range(1, 17))
    path.write_bytes(bytes(data))
    messages, scans = read_all(tmp_path)
    assert len(messages) == 3
    assert scans[0].stop is StopReason.TORN and "bad magic" in scans[0].detail


def test_a_crc_mismatch_stops_the_file_unless_crc_checks_are_off(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, sample(6))
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    bad = written[2].commitlog_offset
    data[bad + POS_BODY_CRC] ^= 0x01
    path.write_bytes(bytes(data))
    first_file = [w for w in written if w.commitlog_offset < FILE_SIZE]
    checked, scans = read_all(tmp_path)
    assert [m["commitlog_offset"] for m in checked][:2] == [w.commitlog_offset for w in written[:2]]
    assert written[2].commitlog_offset not in [m["commitlog_offset"] for m in checked]
    assert scans[0].stop is StopReason.TORN and "CRC" in scans[0].detail
    unchecked, _ = read_all(tmp_path, check_crc=False)
    assert [m["commitlog_offset"] for m in unchecked][: len(first_file)] == [w.commitlog_offset for w in first_file]


def test_a_damaged_file_does_not_hide_the_next_one(tmp_path: Path) -> None:
    written = build_commitlog(tmp_path / "commitlog", FILE_SIZE, sample(30))
    path = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[written[0].commitlog_offset + 4] ^= 0xFF  # the first record's magic code
    path.write_bytes(bytes(data))
    messages, scans = read_all(tmp_path)
    assert scans[0].messages == 0 and scans[0].stop is StopReason.TORN
    assert [m["commitlog_offset"] for m in messages] == [w.commitlog_offset for w in written if w.commitlog_offset >= FILE_SIZE]


def test_preallocated_zero_and_empty_files_hold_nothing(tmp_path: Path) -> None:
    d = tmp_path / "commitlog"
    d.mkdir()
    (d / f"{0:020d}").write_bytes(b"\x00" * FILE_SIZE)
    (d / f"{FILE_SIZE:020d}").write_bytes(b"")
    scans = [scan_file(f) for f in list_commitlog_files(str(d))]
    assert [(s.messages, s.stop, s.stop_position) for s in scans] == [(0, StopReason.END, 0), (0, StopReason.END, 0)]
    assert scans[1].detail == "empty file"


def test_finds_the_commitlog_from_a_store_root_or_itself_and_ignores_other_names(tmp_path: Path) -> None:
    build_commitlog(tmp_path / "commitlog", FILE_SIZE, sample(2))
    (tmp_path / "commitlog" / "notes.txt").write_text("x")
    (tmp_path / "commitlog" / "123").write_text("x")
    assert commitlog_dir_of(str(tmp_path)) == str(tmp_path / "commitlog")
    assert commitlog_dir_of(str(tmp_path / "commitlog")) == str(tmp_path / "commitlog")
    assert [f.start_offset for f in list_commitlog_files(str(tmp_path))] == [0]


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p])
def test_a_path_without_a_commitlog_is_refused(tmp_path: Path, make: Callable[[Path], Path]) -> None:
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(NotACommitLog):
        list_commitlog_files(str(make(tmp_path)))
