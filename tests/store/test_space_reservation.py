"""Blocks reserved in steps ahead of each file's writes: the apparent size stays whole, the allocated
blocks follow the writes, and nothing is ever written where no block is reserved."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.disk.space_reservation import MIN_STEP_BYTES, SpaceReservation, file_kind
from store.index.index_file import HEADER_BYTES, SLOT_BYTES, IndexFile
from store.logfile.mapped_file import MappedFile, offset_to_file_name
from store.logfile.mapped_file_queue import MappedFileQueue

MIB = 1024 * 1024


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def first_hole(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE)
    finally:
        os.close(fd)


def test_a_new_file_reserves_one_small_step_and_keeps_its_full_size(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 64 * MIB, reservation=SpaceReservation(8 * MIB))
    assert os.path.getsize(mf.path) == 64 * MIB
    assert MIN_STEP_BYTES <= mf.reserved_to <= MIN_STEP_BYTES + 4096
    assert allocated(mf.path) <= MIN_STEP_BYTES + 4096
    mf.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 300_000), min_size=1, max_size=40))
def test_every_written_byte_lies_below_the_reserved_mark_and_steps_stay_bounded(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int]
) -> None:
    ahead = 1 * MIB
    path = str(tmp_path_factory.mktemp("r") / offset_to_file_name(0))
    mf = MappedFile(path, 8 * MIB, reservation=SpaceReservation(ahead))
    try:
        for n in sizes:
            if not mf.append_bytes(b"\x01" * n):
                break
            # Blocks back everything below the mark (SEEK_HOLE is no test here: ext4 reports reserved,
            # unwritten blocks as a hole), and the written bytes read back as data.
            assert mf.wrote_position <= mf.reserved_to <= allocated(path)
            assert first_hole(path) >= mf.wrote_position - mf.wrote_position % 4096
            # At most one step (which never passes `ahead`) is reserved past what was written.
            assert mf.reserved_to - mf.wrote_position <= max(MIN_STEP_BYTES, ahead) + n + 4096
    finally:
        mf.close()


def test_whole_file_reservation_when_ahead_is_zero(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), 4 * MIB, reservation=SpaceReservation(0))
    assert mf.reserved_to == 4 * MIB and allocated(mf.path) >= 4 * MIB
    mf.close()


def test_the_index_reserves_its_slots_whole_and_its_entries_in_steps(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    f = IndexFile(str(tmp_path / "index" / "20260101000000000"), 500_000, 2_000_000, reservation=SpaceReservation(8 * MIB))
    slots_end = HEADER_BYTES + 500_000 * SLOT_BYTES
    assert slots_end < f.mapped_file.reserved_to <= slots_end + MIN_STEP_BYTES + 4096
    assert allocated(f.path) < f.file_size // 10
    for i in range(5_000):
        assert f.put_key(f"t#k{i}", 100 + i, 1_000)
    assert allocated(f.path) >= f.mapped_file.reserved_to >= slots_end + 5_001 * 20
    assert f.select_phy_offsets("t#k4321", 4, 0, 10_000) == [4421]
    f.close()


def test_a_cut_log_punches_its_tail_and_reserves_it_again_when_written(tmp_path: Path) -> None:
    q = MappedFileQueue(str(tmp_path / "cl"), 4 * MIB)
    mf = q.get_last_mapped_file_or_create(0)
    assert mf is not None
    mf.append_bytes(b"\x07" * (2 * MIB))
    q.truncate_dirty_files(100_000)
    assert mf.wrote_position == 100_000 and mf.reserved_to <= 100_000
    assert mf.mm[99_999] == 7 and mf.mm[100_000] == 0 and mf.mm[2 * MIB - 1] == 0
    assert allocated(mf.path) <= 100_000 + 4096
    mf.append_bytes(b"\x08" * 10)
    assert mf.mm[100_000:100_010] == b"\x08" * 10 and mf.reserved_to >= 100_010
    q.shutdown()


def test_a_loaded_file_counts_only_the_blocks_it_has_as_reserved(tmp_path: Path) -> None:
    path = str(tmp_path / offset_to_file_name(0))
    mf = MappedFile(path, 4 * MIB, reservation=SpaceReservation(1 * MIB))
    mf.append_bytes(b"\x01" * 300_000)
    reserved = mf.reserved_to
    mf.close()
    again = MappedFile(path, 4 * MIB)
    assert 300_000 <= again.data_end <= reserved and again.reserved_to <= again.data_end
    again.close()


def test_file_kinds_are_named_by_their_directory() -> None:
    assert file_kind("/s/commitlog/00000000000000000000") == "commitlog"
    assert file_kind("/s/consumequeue/t/0/00000000000000000000") == "consume queue"
    assert file_kind("/s/index/20260101000000000") == "index"
    assert file_kind("/s/timerlog/00000000000000000000") == "timer log"
