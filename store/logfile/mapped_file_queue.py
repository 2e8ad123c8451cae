"""MappedFileQueue: the ordered files of one log (commitlog, or one consume queue).

Invariants:
- files are contiguous: file i+1 starts where file i ends (start = i * file size
  from the first file's start);
- `mapped_files` is replaced, never mutated in place, so readers can index a
  snapshot without a lock; the writer and the cleaner change it under `_lock`;
- flushed_where <= committed_where <= max offset.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from store import _kernels
from store.disk.space_reservation import is_no_space
from store.logfile.mapped_file import OS_PAGE_SIZE, MappedFile, SelectMappedBufferResult, offset_to_file_name

if TYPE_CHECKING:
    from store.logfile.allocate_mapped_file_service import AllocateMappedFileService
    from store.logfile.page_cache_window import PageCacheWindow

log = logging.getLogger("tidemq.store")

# Flushed bytes behind a file's flush position that stay in the process's resident set (see flush).
RESIDENT_TAIL_BYTES = 4 * 1024 * 1024


class FlushWindow(NamedTuple):
    """A file lent to an outside flusher (MappedFileQueue.flush_window), with what its flush needs."""

    file: MappedFile  # held until window_flushed
    mapping: _kernels.Mapping
    file_from: int  # the log offset of the file's first byte
    dropped_to: int  # pages below it are out of the mapping already
    unmap_first: bool  # MappedFile.flush's unmap_first
    store_timestamp: int  # of a message below read_position
    read_position: int  # the file's readable bytes when lent


class MappedFileQueue:
    def __init__(
        self,
        store_path: str,
        mapped_file_size: int,
        allocate_service: AllocateMappedFileService | None = None,
        file_factory: Callable[[str, int], MappedFile] = MappedFile,
        page_cache_window: PageCacheWindow | None = None,
        unmap_before_flush: bool = False,
    ) -> None:
        self.store_path = store_path
        self.page_cache_window = page_cache_window  # None: flushed pages stay in the page cache (the OS evicts them)
        self.unmap_before_flush = unmap_before_flush  # MappedFile.flush's unmap_first (the commitlog's)
        self.file_factory = file_factory  # how files without an allocation service are made (lazy for queues)
        # Told the path of a file that could not be created for lack of disk space (the store marks the disk full).
        self.no_space_listener: Callable[[str], None] | None = None
        self.create_error = ""  # why the last file creation failed; "" once one succeeds
        self.mapped_file_size = mapped_file_size
        self.allocate_service = allocate_service
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0  # store time of the last flushed message (commitlog)
        self._lock = threading.Lock()

    # Loading -------------------------------------------------------------------------

    def load(self) -> bool:
        """Map the existing files; False when a file has the wrong size (the store must not start)."""
        if not os.path.isdir(self.store_path):
            return True
        names = sorted(n for n in os.listdir(self.store_path) if n.isdigit() and len(n) == 20)
        files: list[MappedFile] = []
        for index, name in enumerate(names):
            path = os.path.join(self.store_path, name)
            size = os.path.getsize(path)
            if size < self.mapped_file_size and index == len(names) - 1:
                # Files are sized before their first byte is written, so a short last file is one
                # whose creation a crash interrupted: it holds nothing and is completed here.
                log.warning("%s has %d bytes (creation interrupted); extending it to %d", path, size, self.mapped_file_size)
                os.truncate(path, self.mapped_file_size)
                size = self.mapped_file_size
            if size != self.mapped_file_size:
                log.error("%s has %d bytes, expected %d; refusing to load", path, size, self.mapped_file_size)
                for f in files:
                    f.close()
                return False
            mf = self.file_factory(path, self.mapped_file_size)
            mf.wrote_position = mf.committed_position = mf.flushed_position = self.mapped_file_size
            files.append(mf)
        self.mapped_files = files
        return True

    # Lookup --------------------------------------------------------------------------

    def get_first_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def get_last_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[-1] if files else None

    def get_last_mapped_file_or_create(self, start_offset: int = 0) -> MappedFile | None:
        """The file to append to, creating the next one when the last is full or none exists."""
        last = self.get_last_mapped_file()
        if last is not None and not last.is_full():
            return last
        if last is None:
            create_offset = start_offset - (start_offset % self.mapped_file_size)
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        return self._create_file(create_offset)

    def _create_file(self, create_offset: int) -> MappedFile | None:
        path = os.path.join(self.store_path, offset_to_file_name(create_offset))
        next_next = os.path.join(self.store_path, offset_to_file_name(create_offset + self.mapped_file_size))
        try:
            if self.allocate_service is not None:
                mf = self.allocate_service.put_request_and_return_mapped_file(path, next_next, self.mapped_file_size)
            else:
                os.makedirs(self.store_path, exist_ok=True)
                mf = self.file_factory(path, self.mapped_file_size)
        except OSError as exc:
            self._creation_failed(path, exc)
            return None
        if mf is None:
            return None
        if self.create_error:
            log.info("created %s; file creation works again after: %s", path, self.create_error)
            self.create_error = ""
        with self._lock:
            self.mapped_files = [*self.mapped_files, mf]
        return mf

    def append_file(self, mf: MappedFile) -> None:
        """Append a file created elsewhere (ahead of need: store/logfile/file_ahead.py); it starts where the last one ends."""
        last = self.get_last_mapped_file()
        assert last is None or mf.file_from_offset == last.file_from_offset + self.mapped_file_size, mf.path
        self.create_error = ""
        with self._lock:
            self.mapped_files = [*self.mapped_files, mf]

    def _creation_failed(self, path: str, exc: OSError) -> None:
        """Log the first failure of an episode (callers retry), and report a full disk."""
        reason = exc.strerror or str(exc)
        if not self.create_error:
            log.error("cannot create %s: %s", path, exc)
        self.create_error = reason
        if is_no_space(exc) and self.no_space_listener is not None:
            self.no_space_listener(path)

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        index = (offset // self.mapped_file_size) - (first.file_from_offset // self.mapped_file_size)
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        first = self.get_first_mapped_file()
        return first.file_from_offset if first is not None else 0

    def get_max_offset(self) -> int:
        files = self.mapped_files  # the last file without get_last_mapped_file: read several times by every put
        return files[-1].file_from_offset + files[-1].get_read_position() if files else 0

    def get_max_wrote_position(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def select(self, offset: int, size: int | None = None) -> SelectMappedBufferResult | None:
        """A held view starting at `offset` (to the file's readable end when size is None)."""
        mf = self.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset - mf.file_from_offset, size)

    # Flush and commit ------------------------------------------------------------------

    def flush(self, flush_least_pages: int, trim: bool = True) -> bool:
        """Flush the file holding flushed_where; True when nothing moved (RocketMQ's result). `trim` False: the
        page-cache window's trim is left to the caller (`trim_page_cache`, after it answered the flush's waiters)."""
        before = self.flushed_where
        self.flushed_where = self._past_deleted(before)
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        store_ts = mf.store_timestamp
        where = mf.file_from_offset + mf.flush(flush_least_pages, self.unmap_before_flush)
        unchanged = where == before
        self._after_flush(mf, before, where, trim)
        if flush_least_pages == 0 or not unchanged:
            self.store_timestamp = max(self.store_timestamp, store_ts)
        return unchanged

    def _after_flush(self, mf: MappedFile, before: int, where: int, trim: bool) -> None:
        """The flushed position moved from `before` to `where` in `mf`: flushed pages leave the resident set
        and (with `trim`) the page-cache window trims. Run by the thread that flushes (one per queue)."""
        assert where >= before, f"the flushed position would move back from {before} to {where} (only truncation moves it back)"
        unchanged = where == before
        self.flushed_where = where
        if not unchanged and where == mf.file_from_offset + self.mapped_file_size:
            mf.drop_resident()  # full and on disk: its pages need not count in the process's memory
        elif not unchanged and where - mf.file_from_offset - mf.dropped_to >= 2 * RESIDENT_TAIL_BYTES:
            # Flushed pages well behind the write position leave the resident set too; the last
            # RESIDENT_TAIL_BYTES stay mapped for the readers of recent entries (a read of an older
            # one faults its page back from the page cache). The commitlog's left before its flush.
            mf.drop_resident_below(where - mf.file_from_offset - RESIDENT_TAIL_BYTES)
        if trim and not unchanged and self.page_cache_window is not None:
            self.page_cache_window.trim(self.mapped_files, where)

    def flush_window(self) -> FlushWindow | None:
        """The file holding the flushed position, held, for flushes made outside this queue (the group
        commit's store._kernels.GroupFlush); None when there is none, or it is not a plain mapped file (a
        pooled one flushes its descriptor). Given back with `window_flushed`, which moves the positions."""
        self.flushed_where = self._past_deleted(self.flushed_where)
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None or not mf.plainly_mapped() or not mf.hold():
            return None
        # The time and position read together, the time first: the time is of a message at or below the position.
        store_ts = mf.store_timestamp
        return FlushWindow(mf, mf.mm, mf.file_from_offset, mf.dropped_to, self.unmap_before_flush, store_ts, mf.get_read_position())

    def window_flushed(self, window: FlushWindow, flushed: int, dropped_to: int) -> None:
        """The window's file is on disk below log offset `flushed` and out of the mapping below `dropped_to`
        (file offsets): the positions move as `flush`'s would; the file is released."""
        mf = window.file
        try:
            mf.dropped_to = max(mf.dropped_to, dropped_to)
            before = self.flushed_where
            moved = mf.note_flushed(flushed - mf.file_from_offset)
            where = mf.file_from_offset + moved
            if where > before:
                self._after_flush(mf, before, where, trim=False)
            if moved >= window.read_position:
                self.store_timestamp = max(self.store_timestamp, window.store_timestamp)
        finally:
            mf.release()

    def trim_page_cache(self) -> int:
        """The page-cache window's trim behind the flushed position (a flush made with `trim` False); bytes advised."""
        if self.page_cache_window is None:
            return 0
        return self.page_cache_window.trim(self.mapped_files, self.flushed_where)

    def commit(self, commit_least_pages: int) -> bool:
        before = self.committed_where
        self.committed_where = self._past_deleted(before)
        mf = self.find_mapped_file_by_offset(self.committed_where, self.committed_where == 0)
        if mf is None:
            return True
        where = mf.file_from_offset + mf.commit(commit_least_pages)
        assert where >= before, f"the committed position would move back from {before} to {where} (only truncation moves it back)"
        unchanged = where == before
        self.committed_where = where
        return unchanged

    def _past_deleted(self, offset: int) -> int:
        """`offset`, or the first file's start when cleanup deleted the files holding it before they were
        flushed (or committed): nothing is left below to write, and no file holds the offset, so the
        lookup would find none and the position would never move again. RocketMQ's MappedFileQueue.flush
        looks up findMappedFileByOffset(flushedWhere, flushedWhere == 0) and stays there in that case."""
        first = self.get_first_mapped_file()
        return first.file_from_offset if first is not None and 0 < offset < first.file_from_offset else offset

    # Truncation and deletion --------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log at `offset`: files past it are deleted, the one holding it is rewound."""
        keep: list[MappedFile] = []
        for mf in self.mapped_files:
            end = mf.file_from_offset + self.mapped_file_size
            if end <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset % self.mapped_file_size
                _zero_tail(mf, pos)
                mf.wrote_position = mf.committed_position = mf.flushed_position = pos
                keep.append(mf)
            else:
                mf.destroy(0)
        with self._lock:
            self.mapped_files = keep
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)

    def set_positions(self, offset: int) -> None:
        """After recovery: everything below `offset` is written, committed and flushed."""
        self.flushed_where = self.committed_where = offset

    def delete_expired_files_by_time(
        self,
        expired_ms: int,
        delete_interval_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
        max_files: int,
        now_ms: int,
        sleep: Callable[[float], None] = time.sleep,
        may_delete: Callable[[MappedFile], bool] = lambda mf: True,
    ) -> int:
        """Delete files last modified more than `expired_ms` ago (all but the last file).

        With `clean_immediately` the age is ignored. Stops at the first file still held by
        readers (it is retried on the next pass, forcibly after the interval), and at the first
        file `may_delete` keeps (the state log still needs it).
        """
        files = self.mapped_files[:-1]
        deleted: list[MappedFile] = []
        for mf in files:
            if len(deleted) >= max_files:
                break
            last_modified_ms = int(os.path.getmtime(mf.path) * 1000)
            if not clean_immediately and now_ms < last_modified_ms + expired_ms:
                break
            if not may_delete(mf):
                break
            if not mf.destroy(interval_forcibly_ms, now_ms):
                break
            deleted.append(mf)
            if delete_interval_ms > 0 and len(deleted) < max_files:
                sleep(delete_interval_ms / 1000.0)
        self._remove(deleted)
        return len(deleted)

    def delete_files_below(self, offset: int, is_below: Callable[[MappedFile], bool], interval_forcibly_ms: int, now_ms: int) -> int:
        """Delete leading files (never the last) for which `is_below(file)` holds."""
        deleted: list[MappedFile] = []
        for mf in self.mapped_files[:-1]:
            # A file whose deletion began in an earlier pass was judged then; it only waits for readers.
            if mf.is_available() and not is_below(mf):
                break
            if not mf.destroy(interval_forcibly_ms, now_ms):
                break
            deleted.append(mf)
        self._remove(deleted)
        return len(deleted)

    def _remove(self, deleted: list[MappedFile]) -> None:
        if not deleted:
            return
        gone = {id(f) for f in deleted}
        with self._lock:
            self.mapped_files = [f for f in self.mapped_files if id(f) not in gone]

    def shutdown(self) -> None:
        for mf in self.mapped_files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.mapped_files:
            mf.destroy(0)
        with self._lock:
            self.mapped_files = []
        self.flushed_where = self.committed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass


def _zero_tail(mf: MappedFile, pos: int) -> None:
    """Zero the bytes past `pos` so a later scan never mistakes old bytes for messages.

    The range is deallocated (a hole reads as zeros), not written: writing zeros through the
    mapping would store to pages that may have no blocks (past `reserved_to`). The file's
    reservation then ends at `pos`'s page. Where holes cannot be punched, zeros are written
    with pwrite, which answers a full disk with ENOSPC instead of a signal.
    """
    if pos >= mf.file_size:
        return
    fd = os.open(mf.path, os.O_RDWR)
    try:
        try:
            _kernels.punch_hole(fd, pos, mf.file_size - pos)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            zeros = bytes(1 << 20)
            for p in range(pos, mf.file_size, len(zeros)):
                os.pwrite(fd, zeros[: min(len(zeros), mf.file_size - p)], p)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    mf.reserved_to = min(mf.reserved_to, pos - pos % OS_PAGE_SIZE)
    mf.data_end = min(mf.data_end, pos)  # past it the blocks are gone again
    mf.dropped_to = min(mf.dropped_to, pos - pos % OS_PAGE_SIZE)
