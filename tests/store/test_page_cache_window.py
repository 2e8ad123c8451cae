"""The commitlog's page-cache window (store/logfile/page_cache_window.py) and the unmapping of its pages before
a flush (MappedFile.flush's unmap_first), on real files: what is dropped is flushed, reads back intact from the
disk, and what is within the window or not flushed stays cached."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from pathlib import Path

import pytest

from core import ConfigInvalid
from store import FlushDiskType, GetMessageStatus, MessageStoreConfig, PutBatch, build_message
from store.logfile.mapped_file import OS_PAGE_SIZE
from store.logfile.mapped_file_queue import MappedFileQueue
from store.logfile.page_cache_window import PageCacheWindow
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.store.test_mapped_file import resident_kib
from tests.waiting import wait_for

PAGES_PER_FILE = 16
FILE_BYTES = PAGES_PER_FILE * OS_PAGE_SIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def cached_pages(path: str) -> list[bool]:
    """Which pages of the file are in the OS page cache (mincore over a mapping of the whole file)."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            pages = (size + OS_PAGE_SIZE - 1) // OS_PAGE_SIZE
            vector = (ctypes.c_ubyte * pages)()
            assert _libc.mincore(address, size, vector) == 0, ctypes.get_errno()
            return [bool(b & 1) for b in vector]
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def page_payload(n: int) -> bytes:
    return n.to_bytes(8, "big") * (OS_PAGE_SIZE // 8)


def write_pages(q: MappedFileQueue, first: int, count: int, flush_each: bool) -> None:
    """Append pages numbered first.. (each page's bytes say its number), rolling files as they fill."""
    for n in range(first, first + count):
        mf = q.get_last_mapped_file_or_create(0)
        assert mf is not None and mf.append_bytes(page_payload(n))
        if flush_each:
            q.flush(0)


def log_pages_cached(q: MappedFileQueue) -> list[bool]:
    return [cached for mf in q.mapped_files for cached in cached_pages(mf.path)]


def read_page(q: MappedFileQueue, n: int) -> bytes:
    selected = q.select(n * OS_PAGE_SIZE, OS_PAGE_SIZE)
    assert selected is not None
    try:
        return bytes(selected.view)
    finally:
        selected.release()


def test_flushed_pages_behind_the_window_leave_the_page_cache_and_read_back_from_disk(tmp_path: Path) -> None:
    window = PageCacheWindow(8 * OS_PAGE_SIZE, step_bytes=2 * OS_PAGE_SIZE)
    q = MappedFileQueue(str(tmp_path), FILE_BYTES, page_cache_window=window, unmap_before_flush=True)
    written = 4 * PAGES_PER_FILE + 5  # four files and five pages of the fifth
    write_pages(q, 0, written, flush_each=True)
    assert q.flushed_where == written * OS_PAGE_SIZE
    cached = log_pages_cached(q)
    behind = window.dropped_where // OS_PAGE_SIZE
    # The trims went in steps of 2 pages: what is left is the window and at most one step short of it.
    assert written - 8 - 2 < behind <= written - 8
    assert not any(cached[:behind]), [i for i in range(behind) if cached[i]]
    assert all(cached[written - 8 : written])  # the window is still in the page cache
    assert window.dropped_bytes_total == behind * OS_PAGE_SIZE
    for n in range(written):  # every page reads back as written, the dropped ones from the disk
        assert read_page(q, n) == page_payload(n), n
    q.shutdown()


def test_without_a_window_flushed_pages_stay_cached(tmp_path: Path) -> None:
    q = MappedFileQueue(str(tmp_path), FILE_BYTES, unmap_before_flush=True)
    write_pages(q, 0, 2 * PAGES_PER_FILE + 3, flush_each=True)
    assert all(log_pages_cached(q)[: 2 * PAGES_PER_FILE + 3])
    q.shutdown()


def test_a_trim_drops_nothing_that_is_not_flushed(tmp_path: Path) -> None:
    """Told of a flush position past what the files flushed, a trim advises only flushed bytes and stops where
    they end, so the pages it skipped are dropped by a later trim once flushed."""
    window = PageCacheWindow(OS_PAGE_SIZE, step_bytes=OS_PAGE_SIZE)
    q = MappedFileQueue(str(tmp_path), FILE_BYTES)
    write_pages(q, 0, PAGES_PER_FILE + 4, flush_each=False)
    first, second = q.mapped_files
    first.flush(0)  # the first file flushed, the second not
    assert window.trim(q.mapped_files, (PAGES_PER_FILE + 4) * OS_PAGE_SIZE) == FILE_BYTES
    assert window.dropped_where == FILE_BYTES
    assert not any(cached_pages(first.path)) and all(cached_pages(second.path)[:4])
    second.flush(0)
    assert window.trim(q.mapped_files, (PAGES_PER_FILE + 4) * OS_PAGE_SIZE) == 3 * OS_PAGE_SIZE
    assert cached_pages(second.path)[:4] == [False, False, False, True]
    q.shutdown()


def test_a_file_deleted_under_the_trim_is_passed_over(tmp_path: Path) -> None:
    window = PageCacheWindow(OS_PAGE_SIZE, step_bytes=OS_PAGE_SIZE)
    q = MappedFileQueue(str(tmp_path), FILE_BYTES)
    write_pages(q, 0, 2 * PAGES_PER_FILE, flush_each=False)
    for mf in q.mapped_files:
        mf.flush(0)
    os.unlink(q.mapped_files[0].path)  # as a cleanup's forced delete leaves it: unlinked, still mapped
    assert window.trim(q.mapped_files, 2 * FILE_BYTES) == FILE_BYTES - OS_PAGE_SIZE  # the second file only
    assert window.dropped_where == 2 * FILE_BYTES - OS_PAGE_SIZE
    q.shutdown()


def test_unmapped_before_the_flush_the_pages_are_written_back(tmp_path: Path) -> None:
    """The whole pages flushed leave the writer's mapping first; the flush still writes them to the disk: once
    advised out they are gone from the page cache (a dirty page would stay) and read back from the disk."""
    q = MappedFileQueue(str(tmp_path), 4 * FILE_BYTES, unmap_before_flush=True)
    mf = q.get_last_mapped_file_or_create(0)
    assert mf is not None
    for n in range(10):
        assert mf.append_bytes(page_payload(n))
    assert mf.append_bytes(b"tail" * 100)  # a partial eleventh page: the writer goes on in it
    assert resident_kib(mf.path) >= 11 * OS_PAGE_SIZE // 1024
    q.flush(0)
    assert mf.dropped_to == 10 * OS_PAGE_SIZE
    assert resident_kib(mf.path) <= 4 * OS_PAGE_SIZE // 1024  # the partial page (and what the kernel maps around it)
    fd = os.open(mf.path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 10 * OS_PAGE_SIZE, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert not any(cached_pages(mf.path)[:10])  # clean: written back by the flush
    for n in range(10):
        assert read_page(q, n) == page_payload(n)
    tail = q.select(10 * OS_PAGE_SIZE, 400)
    assert tail is not None and bytes(tail.view) == b"tail" * 100
    tail.release()
    q.shutdown()


def test_a_store_keeps_its_window_cached_and_serves_older_messages_from_disk(tmp_path: Path) -> None:
    window_bytes = 16 * OS_PAGE_SIZE
    config = small_config(str(tmp_path), page_cache_window_bytes=window_bytes)
    store = open_store(config)
    try:
        bodies = [f"{n:06d}".encode() * 170 for n in range(400)]  # about 1 KiB each: seven 64 KiB files
        for body in bodies:
            assert store.put_message(build_message("window", body, queue_id=0)).ok
        wait_dispatched(store)
        log_queue = store.commit_log.mapped_file_queue
        window = log_queue.page_cache_window
        assert window is not None and window.step_bytes == window_bytes // 4
        # The flush service leaves fewer than flush_commit_log_least_pages (4) pages to its thorough flush.
        flushed = log_queue.get_max_offset() - 4 * OS_PAGE_SIZE
        assert wait_for(lambda: window.dropped_where >= flushed - window_bytes - window.step_bytes, 10)
        assert not any(cached_pages(log_queue.mapped_files[0].path))  # the flush service's trims dropped it
        got: list[bytes] = []
        while len(got) < len(bodies):
            with store.get_message("g", "window", 0, len(got), 32) as r:
                assert r.status is GetMessageStatus.FOUND
                got.extend(m["body"] for m in r.decode())
        assert got == bodies  # every body read back, the dropped ones from the disk
        # Behind the window a read counts as on disk (RocketMQ's transfer limit there: 8); within it, in memory.
        with store.get_message("g", "window", 0, 0, 32) as r:
            assert r.message_count == 8
        with store.get_message("g", "window", 0, len(bodies) - 16, 32) as r:
            assert r.message_count == 16
    finally:
        store.shutdown()


def test_the_group_commit_answers_its_puts_before_it_trims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SYNC_FLUSH: the put whose flush first reaches a step past the window is answered before that trim runs (a trim
    # advises up to 8 MiB: no put waits for it), and the trim follows.
    window_bytes = 16 * OS_PAGE_SIZE
    store = open_store(small_config(str(tmp_path), page_cache_window_bytes=window_bytes, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    gate = threading.Event()
    try:
        window = store.commit_log.mapped_file_queue.page_cache_window
        assert window is not None
        first_trim_at = window_bytes + window.step_bytes  # the flush position of the first trim
        body = b"t" * 1000
        while store.commit_log.get_max_offset() + 2 * len(body) < first_trim_at:
            assert store.put_message(build_message("trim", body, queue_id=0)).ok
        assert window.dropped_where == 0
        # A slow disk: the flush waits until the put's callback is registered, so the callback runs at the ack.
        real_flush = store.commit_log.flush

        def held_flush(least_pages: int = 0, trim: bool = True) -> bool:
            gate.wait(30)
            return real_flush(least_pages, trim)

        monkeypatch.setattr(store.commit_log, "flush", held_flush)
        seen_at_ack: list[int] = []
        future = store.put(PutBatch.of((build_message("trim", b"t" * 4000, queue_id=0),)))
        future.add_done_callback(lambda _: seen_at_ack.append(window.dropped_where))
        gate.set()
        result = future.result(30)
        assert result.ok and result.end_offset >= first_trim_at
        assert seen_at_ack == [0]
        assert wait_for(lambda: window.dropped_where >= window.step_bytes, 10)
    finally:
        gate.set()
        store.shutdown()


@pytest.mark.parametrize("bad", [-1, 2**51])
def test_the_window_setting_is_checked_at_start(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ConfigInvalid):
        MessageStoreConfig(store_path_root_dir=str(tmp_path), page_cache_window_bytes=bad).validate()
