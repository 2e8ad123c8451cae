"""MappedFile and MappedFileQueue: positions, flush, reference counting, pool, warm-up, allocation."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from store.disk.space_reservation import SpaceReservation
from store.logfile.allocate_mapped_file_service import PREFAULT_LEAD_BYTES, AllocateMappedFileService
from store.logfile.mapped_file import OS_PAGE_SIZE, MappedFile, offset_to_file_name
from store.logfile.mapped_file_queue import MappedFileQueue
from store.logfile.transient_store_pool import TransientStorePool
from tests.small_volume import small_volume
from tests.waiting import wait_for

SIZE = 16 * 4096


def test_name_and_positions(tmp_path: Path) -> None:
    path = str(tmp_path / offset_to_file_name(SIZE * 3))
    mf = MappedFile(path, SIZE)
    assert os.path.basename(path) == "00000000000000196608" and mf.file_from_offset == SIZE * 3
    assert os.path.getsize(path) == SIZE
    assert mf.append_bytes(b"a" * 5000)
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (5000, 5000, 0)
    assert mf.flush(4) == 0  # one page dirty, four required
    assert mf.flush(0) == 5000
    assert not mf.append_bytes(b"x" * SIZE)
    mf.close()


def test_reader_delays_deletion_until_release(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append_bytes(b"hello world")
    view = mf.select_mapped_buffer(0, 5)
    assert view is not None and bytes(view.view) == b"hello"
    assert not mf.destroy(interval_forcibly_ms=60_000, now_ms=1_000)
    assert os.path.exists(mf.path) and mf.ref_count == 1
    assert mf.select_mapped_buffer(0, 5) is None, "a file being deleted takes no new readers"
    view.release()
    assert mf.destroy(60_000, now_ms=2_000)
    assert not os.path.exists(mf.path)


def test_forced_deletion_after_the_interval(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append_bytes(b"data")
    held = mf.select_mapped_buffer(0, 4)
    assert held is not None
    assert not mf.destroy(1_000, now_ms=10_000)
    assert mf.destroy(1_000, now_ms=11_500)
    assert not os.path.exists(mf.path)
    assert bytes(held.view) == b"data", "a reader forced out still reads valid bytes"
    held.release()


def test_reads_stop_at_the_read_position(tmp_path: Path) -> None:
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.append_bytes(b"abc")
    assert mf.select_mapped_buffer(0, 4) is None
    assert mf.select_mapped_buffer(2, None) is not None
    mf.close()


def test_transient_pool_commit_makes_bytes_readable(tmp_path: Path) -> None:
    pool = TransientStorePool(2, SIZE)
    pool.init()
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE, pool)
    assert pool.available_buffer_count() == 1
    mf.append_bytes(b"z" * 100)
    assert mf.get_read_position() == 0 and mf.select_mapped_buffer(0, 10) is None
    assert mf.commit(0) == 100
    sel = mf.select_mapped_buffer(0, 100)
    assert sel is not None and bytes(sel.view) == b"z" * 100
    sel.release()
    assert mf.flush(0) == 100
    with open(mf.path, "rb") as fh:
        assert fh.read(100) == b"z" * 100
    mf.close()
    assert pool.available_buffer_count() == 2


def test_warm_up_never_fails(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tidemq.store")
    mf = MappedFile(str(tmp_path / offset_to_file_name(0)), SIZE)
    mf.warm_up()
    assert mf.append_bytes(b"ok")
    mf.close()


def test_queue_load_lookup_and_truncate(tmp_path: Path) -> None:
    d = str(tmp_path / "q")
    q = MappedFileQueue(d, SIZE)
    for _ in range(3):
        mf = q.get_last_mapped_file_or_create(0)
        assert mf is not None
        mf.append_bytes(b"x" * SIZE)
    assert q.get_max_offset() == 3 * SIZE
    q.shutdown()
    q2 = MappedFileQueue(d, SIZE)
    assert q2.load() and len(q2.mapped_files) == 3
    found = q2.find_mapped_file_by_offset(SIZE + 5)
    assert found is not None
    assert found.file_from_offset == SIZE
    assert q2.find_mapped_file_by_offset(10 * SIZE) is None
    q2.truncate_dirty_files(SIZE + 100)
    assert len(q2.mapped_files) == 2 and q2.get_max_offset() == SIZE + 100
    assert sorted(os.listdir(d)) == [offset_to_file_name(0), offset_to_file_name(SIZE)]
    q2.shutdown()


def test_allocation_service_creates_the_next_file_ahead(tmp_path: Path) -> None:
    service = AllocateMappedFileService(timeout_ms=5_000)
    service.start()
    try:
        d = tmp_path / "cl"
        q = MappedFileQueue(str(d), SIZE, service)
        first = q.get_last_mapped_file_or_create(0)
        assert first is not None and first.file_from_offset == 0
        wait_for((d / offset_to_file_name(SIZE)).exists, 2, what="the next file to be created before it is needed")
        first.append_bytes(b"x" * SIZE)
        second = q.get_last_mapped_file_or_create(0)
        assert second is not None and second.file_from_offset == SIZE
        q.shutdown()
    finally:
        service.shutdown()
        service.close_unclaimed()


def test_the_allocate_service_is_idle_only_when_every_ordered_file_is_made(tmp_path: Path) -> None:
    service = AllocateMappedFileService(timeout_ms=5_000)
    service.start()
    release = threading.Event()
    try:
        assert service.is_idle()
        assert service.submit(cast(Callable[[], None], lambda: release.wait(5)))
        path = tmp_path / "cl" / offset_to_file_name(0)
        service.order(str(path), SIZE)
        assert not service.is_idle()  # the job waits or runs until released, whichever the service took first
        release.set()
        wait_for(service.is_idle, 2, what="the service to finish")
        assert os.path.getsize(path) == SIZE
    finally:
        release.set()
        service.shutdown()
        service.close_unclaimed()


def minor_faults_writing_one_byte_per_page(mf: MappedFile) -> int:
    """This thread's minor faults while it writes one byte of every page: the process's would also count the
    service's own prefault of the next file, which it starts as soon as this one is taken."""
    import resource

    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for pos in range(0, mf.file_size, OS_PAGE_SIZE):
        mf.mm[pos] = 1
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


@pytest.mark.parametrize("prefault", [True, False])
def test_allocation_service_prefaults_files_made_ahead_so_first_writes_do_not_fault(tmp_path: Path, prefault: bool) -> None:
    """The process's minor page faults while one byte of every page of the file ordered ahead is
    written: none to speak of after the service prefaulted it, one per page without (the
    comparison that makes the first assertion mean something). The first file, which the
    writer waited for, is not prefaulted."""

    size = 8 * 1024 * 1024 + 3 * OS_PAGE_SIZE  # a prefault chunk and a part of one
    pages = size // OS_PAGE_SIZE
    # Whole files reserved: this test writes every page through the mapping (reserve-ahead's prefault
    # of each step is test_prefault_follows_the_reserved_steps).
    service = AllocateMappedFileService(timeout_ms=5_000, prefault=prefault, reservation=SpaceReservation(0))
    service.start()
    try:
        q = MappedFileQueue(str(tmp_path / "cl"), size, service)
        first = q.get_last_mapped_file_or_create(0)
        assert first is not None
        if prefault:
            wait_for(lambda: service.prefaulted_bytes >= size, 20, what="the service to prefault the file made ahead")
        assert minor_faults_writing_one_byte_per_page(first) >= pages * 0.9, "the file the writer waited for"
        first.mark_written(size)
        second = q.get_last_mapped_file_or_create(0)
        assert second is not None and second.file_from_offset == size
        faults = minor_faults_writing_one_byte_per_page(second)
        if prefault:
            assert faults < pages // 20, faults
        else:
            assert faults >= pages * 0.9, faults
            assert service.prefaulted_bytes == 0
        q.shutdown()
    finally:
        service.shutdown()
        service.close_unclaimed()


def test_allocation_failure_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    service = AllocateMappedFileService(timeout_ms=2_000)
    service.start()
    try:
        q = MappedFileQueue(str(blocker / "sub"), SIZE, service)
        assert q.get_last_mapped_file_or_create(0) is None
    finally:
        service.shutdown()


def test_commit_log_with_pool_round_trips(tmp_path: Path) -> None:
    from store import build_message
    from tests.store.conftest import open_store, small_config, wait_dispatched

    cfg = small_config(str(tmp_path / "s"), transient_store_pool_enable=True, transient_store_pool_size=3, commit_interval_commit_log_ms=5)
    s = open_store(cfg)
    try:
        for i in range(200):
            assert s.put_message(build_message("P", f"m{i}".encode() * 50)).ok
        wait_dispatched(s)
        with s.get_message("g", "P", 0, 199, 1) as r:
            assert r.decode()[0]["body"] == b"m199" * 50
    finally:
        s.shutdown()
    s = open_store(cfg)
    try:
        assert s.get_max_offset_in_queue("P", 0) == 200
    finally:
        s.shutdown()


@pytest.mark.parametrize("bad", [0, 4095])
def test_config_rejects_tiny_files(tmp_path: Path, bad: int) -> None:
    from core import ConfigInvalid
    from store import MessageStoreConfig

    with pytest.raises(ConfigInvalid):
        MessageStoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log_bytes=bad).validate()


def resident_kib(path: str) -> int:
    """The Rss this process's mapping of `path` has, from /proc/self/smaps."""
    rss, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:  # a mapping's header line
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


def test_a_full_flushed_file_leaves_the_resident_set_and_reads_back(tmp_path: Path) -> None:
    size = 16 * OS_PAGE_SIZE
    q = MappedFileQueue(str(tmp_path), size)
    first = q.get_last_mapped_file_or_create(0)
    assert first is not None
    payload = bytes(range(256)) * (size // 256)
    first.append_bytes(payload)
    second = q.get_last_mapped_file_or_create(0)  # the log goes on in the next file
    assert second is not None and second is not first
    second.append_bytes(b"x" * OS_PAGE_SIZE)
    assert resident_kib(first.path) >= size // 1024  # written: every page resident
    q.flush(0)
    assert q.flushed_where == size
    assert resident_kib(first.path) == 0  # full and flushed: out of the resident set
    q.flush(0)
    assert resident_kib(second.path) > 0  # the file being written stays resident
    selected = first.select_mapped_buffer(0, size)
    assert selected is not None
    assert bytes(selected.view) == payload  # and the bytes read back from the page cache
    q.shutdown()


def test_flushed_pages_far_behind_the_write_position_leave_the_resident_set(tmp_path: Path) -> None:
    """Only the last RESIDENT_TAIL_BYTES flushed of a file being written stay resident."""
    from store.logfile.mapped_file_queue import RESIDENT_TAIL_BYTES

    size = 4 * RESIDENT_TAIL_BYTES
    q = MappedFileQueue(str(tmp_path), size)
    mf = q.get_last_mapped_file_or_create(0)
    assert mf is not None
    payload = bytes(range(256)) * (OS_PAGE_SIZE // 256)
    for _ in range(3 * RESIDENT_TAIL_BYTES // OS_PAGE_SIZE):
        mf.append_bytes(payload)
    assert resident_kib(mf.path) >= 3 * RESIDENT_TAIL_BYTES // 1024
    q.flush(0)
    assert mf.dropped_to == 2 * RESIDENT_TAIL_BYTES
    assert RESIDENT_TAIL_BYTES // 1024 <= resident_kib(mf.path) <= RESIDENT_TAIL_BYTES // 1024 + 64
    view = mf.select_mapped_buffer(5 * OS_PAGE_SIZE, OS_PAGE_SIZE)
    assert view is not None and bytes(view.view) == payload  # a dropped page reads back from the page cache
    view.release()
    q.shutdown()


@pytest.mark.parametrize("pooled", [False, True])
def test_flush_and_commit_go_on_when_cleanup_deleted_files_they_had_not_reached(tmp_path: Path, pooled: bool) -> None:
    """A lagging flusher (one file per call) and a cleanup that deletes leading files at once:
    the positions skip the deleted files instead of staying below the first file for good."""
    pool = TransientStorePool(6, SIZE) if pooled else None
    if pool is not None:
        pool.init()
    q = MappedFileQueue(str(tmp_path), SIZE, file_factory=lambda path, size: MappedFile(path, size, pool))
    for _ in range(4):
        mf = q.get_last_mapped_file_or_create(0)
        assert mf is not None and mf.append_bytes(b"m" * SIZE)
    tail = q.get_last_mapped_file_or_create(0)
    assert tail is not None and tail.append_bytes(b"t" * 100)
    if pooled:
        assert not q.commit(0) and q.committed_where == SIZE
    assert not q.flush(0) and q.flushed_where == SIZE  # one file per call: the next flush starts in the second
    assert q.delete_expired_files_by_time(0, 0, 0, True, 3, 0) == 3
    assert q.get_min_offset() == 3 * SIZE
    for _ in range(4):
        q.commit(0)
        q.flush(0)
    end = 4 * SIZE + 100
    assert (q.committed_where if pooled else end, q.flushed_where, q.get_max_offset()) == (end, end, end)
    with open(tail.path, "rb") as fh:
        assert fh.read(100) == b"t" * 100
    q.shutdown()


def test_prefault_follows_the_reserved_steps(tmp_path: Path) -> None:
    """Each step a writer reserves is prefaulted once: a step queued while the service was busy is faulted in
    from where it starts to where it ends, not on to the file's latest reservation (which the later steps'
    own requests fault in again)."""
    service = AllocateMappedFileService(timeout_ms=5_000, prefault=True, reservation=SpaceReservation(1024 * 1024))
    service.start()
    release = threading.Event()
    try:
        q = MappedFileQueue(str(tmp_path / "cl"), 8 * 1024 * 1024, service)
        mf = q.get_last_mapped_file_or_create(0)  # waited for: not prefaulted
        assert mf is not None
        # The next file, ordered ahead, is prefaulted for its first PREFAULT_LEAD_BYTES (the whole of it here).
        wait_for(lambda: service.prefaulted_bytes >= PREFAULT_LEAD_BYTES, 20, what="the file made ahead to be prefaulted")
        wait_for(service.is_idle, 5, what="the service to finish")
        ahead, first = service.prefaulted_bytes, mf.reserved_to
        assert service.submit(cast(Callable[[], None], lambda: release.wait(5)))  # the service is busy while the steps queue up
        for _ in range(5):
            before = mf.reserved_to
            mf.ensure_reserved(before + 1)
            service.prefault_reserved(mf, before)
        release.set()
        wait_for(lambda: service.prefaulted_bytes - ahead >= mf.reserved_to - first, 20, what="the steps to be prefaulted")
        wait_for(service.is_idle, 5, what="the service to finish")
        assert service.prefaulted_bytes - ahead == mf.reserved_to - first
        q.shutdown()
    finally:
        release.set()
        service.shutdown()
        service.close_unclaimed()


def test_a_file_made_ahead_is_reserved_and_prefaulted_for_its_first_megabytes(tmp_path: Path) -> None:
    """A file ordered ahead comes with its first PREFAULT_LEAD_BYTES reserved and faulted in, though its
    writer's own steps would start at the smallest one: writing them does not fault."""
    size = PREFAULT_LEAD_BYTES + 1024 * 1024
    service = AllocateMappedFileService(timeout_ms=5_000, prefault=True, reservation=SpaceReservation(1024 * 1024))
    service.start()
    try:
        q = MappedFileQueue(str(tmp_path / "cl"), size, service)
        first = q.get_last_mapped_file_or_create(0)
        assert first is not None and first.reserved_to < PREFAULT_LEAD_BYTES  # the writer's own: one small step
        wait_for(lambda: service.prefaulted_bytes >= PREFAULT_LEAD_BYTES, 20, what="the file made ahead to be prefaulted")
        first.mark_written(size)
        second = q.get_last_mapped_file_or_create(0)
        assert second is not None and second.file_from_offset == size
        assert second.reserved_to >= PREFAULT_LEAD_BYTES
        import resource

        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for pos in range(0, PREFAULT_LEAD_BYTES, OS_PAGE_SIZE):
            second.mm[pos] = 1
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        assert faults < PREFAULT_LEAD_BYTES // OS_PAGE_SIZE // 20, faults
        q.shutdown()
    finally:
        service.shutdown()
        service.close_unclaimed()


def test_a_quiet_reservation_on_a_full_disk_changes_and_reports_nothing(tmp_path: Path) -> None:
    """A reservation made ahead of any write (a file made ahead of need) that finds no room leaves the file as
    it was and reports no shortage, which the write that needs the bytes reports itself when it comes."""
    with small_volume(tmp_path, "2m") as mount:
        shorts: list[str] = []
        reservation = SpaceReservation(256 * 1024, on_short=lambda kind, path, free: shorts.append(path))
        mf = MappedFile(str(mount / offset_to_file_name(0)), 8 * 1024 * 1024, reservation=reservation)
        reserved = mf.reserved_to
        assert not mf.reserve_quietly(4 * 1024 * 1024)
        assert mf.reserved_to == reserved and shorts == []
        assert mf.reserve_quietly(512 * 1024) and mf.reserved_to >= 512 * 1024
        with pytest.raises(OSError):
            mf.ensure_reserved(4 * 1024 * 1024, strict=True)
        assert len(shorts) == 1
        mf.shutdown(0)
