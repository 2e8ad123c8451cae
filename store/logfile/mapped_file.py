"""MappedFile: one fixed-size memory-mapped file named by its 20-digit start offset.

Positions (bytes from the file's start), always ordered
    flushed_position <= committed_position <= wrote_position <= file_size.
Without a write buffer the data is written straight into the mapping and
`committed_position` follows `wrote_position`. With a write buffer from the
TransientStorePool, data is written into the buffer, `commit()` copies it to the
file with pwrite and only committed bytes are readable.

Readers take slices through `select_mapped_buffer()`, which holds a reference that
`SelectMappedBufferResult.release()` gives back. `destroy()` waits for readers: the
mapping is closed only when the reference count drops to zero, or forcibly after
`interval_forcibly_ms` (then the file is unlinked and the mapping left to the
readers still holding views; on Linux an unlinked mapping stays valid).

Mappings are store._kernels.Mapping: they hold no file descriptor (a pooled file keeps one for
pwrite). Disk blocks are reserved ahead of the write position, never written past
(`reserved_to`, store/disk/space_reservation.py): a page without blocks is never stored to, so a
full disk is an OSError at a reservation, never a SIGBUS.

Positions are written by one writer under the owner's lock and read without locks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import threading
import time
from typing import TYPE_CHECKING

from store import _kernels
from store._kernels import Mapping
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation, is_no_space

if TYPE_CHECKING:
    from store.logfile.transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")

OS_PAGE_SIZE = mmap.PAGESIZE
FILE_NAME_DIGITS = 20


def offset_to_file_name(offset: int) -> str:
    return f"{offset:0{FILE_NAME_DIGITS}d}"


class SelectMappedBufferResult:
    """A read-only view of part of a mapped file; holds a reference until released."""

    __slots__ = ("start_offset", "view", "size", "mapped_file", "_released")

    def __init__(self, start_offset: int, view: memoryview, size: int, mapped_file: MappedFile) -> None:
        self.start_offset = start_offset
        self.view = view
        self.size = size
        self.mapped_file = mapped_file
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            try:
                self.view.release()
            except BufferError:
                pass  # a caller still exports the view; the mapping outlives it (see module docstring)
            self.mapped_file.release()

    def __enter__(self) -> SelectMappedBufferResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class MappedFile:
    def __init__(
        self,
        path: str,
        file_size: int,
        transient_store_pool: TransientStorePool | None = None,
        map_now: bool = True,
        reservation: SpaceReservation = DEFAULT_RESERVATION,
    ) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_size = file_size
        self.file_from_offset = int(self.file_name)
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message written (commitlog only)
        self._pool = transient_store_pool
        self.write_buffer: bytearray | None = None
        self._fd = -1  # kept open only for a pooled file (pwrite, fdatasync); a mapping holds no descriptor
        self.reservation = reservation
        self.reserved_to = 0  # bytes [0, reserved_to) have their blocks allocated (store/disk/space_reservation.py)
        self.reserve_base = 0  # bytes below it are reserved whole (index slots) and do not make steps grow
        # Bytes [0, data_end) have blocks: they had them when the file was loaded, or were reserved since
        # (ensure_reserved moves it, so a message written after a restart is readable past the loaded end).
        # Recovery and reads check no further: past it the file reads as zeros, and on tmpfs reading a
        # hole of a full volume through a mapping is a SIGBUS.
        self.data_end = file_size
        self.dropped_to = 0  # pages below this were taken out of the resident set (drop_resident_below)
        self._map_on_open = map_now  # False for LazyMappedFile, which maps on first use
        self._open(transient_store_pool is not None)
        if transient_store_pool is not None:
            self.write_buffer = transient_store_pool.borrow_buffer()
        self._ref_lock = threading.Lock()
        self._ref_count = 1  # the file's own reference, dropped by shutdown()
        self._available = True
        self._cleanup_over = False
        self._first_shutdown_ms = 0

    def _open(self, keep_fd: bool) -> None:
        """Create or open the file, size it (sparse), reserve a new file's first step and (unless lazy) map it.

        A new file whose first step cannot be reserved is removed again and the OSError raised
        (ENOSPC on a full disk). An existing file starts with nothing counted as reserved: its
        writer reserves from its write position on (fallocate of blocks already there costs nothing).
        """
        path = self.path
        existed = os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != self.file_size:
                os.ftruncate(fd, self.file_size)
            if not existed:
                self.reserved_to = self.reservation.reserve(fd, path, 0, 1, self.file_size)
            else:
                self.data_end = data_end(fd, self.file_size)
                self.reserved_to = self.data_end - self.data_end % OS_PAGE_SIZE
            if self._map_on_open:
                self.mm = map_file(fd, self.file_size)
        except OSError:
            os.close(fd)
            if not existed:
                _unlink_quietly(path)
            raise
        if keep_fd:
            self._fd = fd
        else:
            os.close(fd)  # the mapping needs no descriptor (store._kernels.Mapping)
        if not existed:
            log.debug("created mapped file %s", path)

    def ensure_reserved(self, end: int, strict: bool = False) -> None:
        """Make sure bytes [0, end) of the file are backed by disk blocks before they are written.

        Reserves one step ahead (store/disk/space_reservation.py; `strict`: the whole step or nothing).
        Raises the OSError of a reservation that failed (ENOSPC: the disk is full, already reported
        to the store); nothing may then be written past `reserved_to`.
        """
        if end > self.reserved_to:
            assert end <= self.file_size, f"{self.path}: reservation past the file ({end} > {self.file_size})"
            if self._fd >= 0:
                self.reserved_to = self.reservation.reserve(
                    self._fd, self.path, self.reserved_to, end, self.file_size, self.reserve_base, strict
                )
            else:
                self.reserved_to = self.reservation.reserve_path(
                    self.path, self.reserved_to, end, self.file_size, self.reserve_base, strict
                )
            if self.reserved_to > self.data_end:
                self.data_end = self.reserved_to

    def reserve_quietly(self, end: int) -> bool:
        """Reserve [0, end) ahead of any write to it (so that it can be prefaulted before its writer comes);
        False, unreported and with nothing changed, when the disk has no room for it (its writer's own
        reservation then reports) or the filesystem refuses."""
        if end <= self.reserved_to:
            return True
        assert end <= self.file_size, f"{self.path}: reservation past the file ({end} > {self.file_size})"
        try:
            if self._fd >= 0:
                self.reserved_to = self.reservation.reserve(
                    self._fd, self.path, self.reserved_to, end, self.file_size, self.reserve_base, quiet=True
                )
            else:
                self.reserved_to = self.reservation.reserve_path(
                    self.path, self.reserved_to, end, self.file_size, self.reserve_base, quiet=True
                )
        except OSError:
            return False
        if self.reserved_to > self.data_end:
            self.data_end = self.reserved_to
        return True

    def try_reserve(self, end: int, strict: bool = False) -> bool:
        """ensure_reserved that answers False instead of raising (the failure is logged and reported)."""
        try:
            self.ensure_reserved(end, strict)
            return True
        except OSError as exc:
            # A full disk was reported to the store (once per episode in its log); anything else is logged here.
            if not is_no_space(exc):
                log.error("cannot reserve the space of %s up to %d: %s", self.path, end, exc)
            return False

    # Writing -------------------------------------------------------------------------

    @property
    def write_target(self) -> bytearray | Mapping:
        """Where appends go: the write buffer when pooled, else the mapping."""
        return self.write_buffer if self.write_buffer is not None else self.mm

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def append_bytes(self, data: bytes | memoryview) -> bool:
        """Append raw bytes at the wrote position; False when they do not fit."""
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            return False
        if pos + n > self.reserved_to:  # also when pooled: the commit's pwrite then never meets a full disk
            self.ensure_reserved(pos + n)
        self.write_target[pos : pos + n] = data
        self.wrote_position = pos + n
        if self.write_buffer is None:
            self.committed_position = self.wrote_position
        assert self.committed_position <= self.wrote_position <= self.file_size, self.positions()
        return True

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write at an explicit position (consume queue gaps, replication); moves wrote_position forward."""
        self._write_into(self.write_target, pos, data)

    def _write_into(self, target: bytearray | Mapping, pos: int, data: bytes | bytearray | memoryview) -> None:
        """write_at into `target` (this file's write target, which a subclass may have at hand already)."""
        n = len(data)
        assert 0 <= pos and pos + n <= self.file_size, "write outside the file"
        if pos + n > self.reserved_to:
            self.ensure_reserved(pos + n)
        target[pos : pos + n] = data
        if pos + n > self.wrote_position:
            self.wrote_position = pos + n
            if self.write_buffer is None:
                self.committed_position = self.wrote_position

    def mark_written(self, new_wrote_position: int) -> None:
        """Record bytes the owner wrote into `write_target` directly (after ensure_reserved covered them),
        or mark the file full (a blank end that is not written)."""
        assert self.wrote_position <= new_wrote_position <= self.file_size, "the wrote position only grows, within the file"
        self.wrote_position = new_wrote_position
        if self.write_buffer is None:
            self.committed_position = new_wrote_position

    # Commit and flush ----------------------------------------------------------------

    def commit(self, commit_least_pages: int) -> int:
        """Copy pending write-buffer bytes to the file; returns the committed position."""
        if self.write_buffer is None:
            return self.wrote_position
        wrote = self.wrote_position
        start = self.committed_position
        if wrote > start and self._is_able_to(wrote, start, commit_least_pages):
            if self.hold():
                try:
                    os.pwrite(self._fd, memoryview(self.write_buffer)[start:wrote], start)
                    self.committed_position = wrote
                finally:
                    self.release()
        if self.committed_position == self.file_size and self._pool is not None and self.write_buffer is not None:
            self._pool.return_buffer(self.write_buffer)
            self.write_buffer = None
        assert self.positions_ordered(0), self.positions()
        return self.committed_position

    def flush(self, flush_least_pages: int, unmap_first: bool = False) -> int:
        """Make committed bytes durable (msync of the dirty range only); returns the flushed position.

        `unmap_first` (the commitlog's): the whole pages about to be flushed leave the mapping first, in
        one madvise. A page still mapped writable when the kernel writes it back is write-protected
        first, page by page, each with a TLB shootdown (an interrupt to the other CPUs the process's
        threads run on); an unmapped dirty page is written back without one. The page the writer is
        in stays mapped; readers fault what they read again from the page cache.
        """
        readable = self.get_read_position()
        start = self.flushed_position
        if readable > start and self._is_able_to(readable, start, flush_least_pages):
            if self.hold():
                try:
                    if self._pool is not None:
                        os.fdatasync(self._fd)
                    else:
                        if unmap_first:
                            self._unmap_below(readable - readable % OS_PAGE_SIZE)
                        aligned = start - (start % OS_PAGE_SIZE)
                        self._msync(aligned, readable - aligned)
                    self.flushed_position = readable
                finally:
                    self.release()
            else:
                self.flushed_position = readable
        assert self.positions_ordered(start), self.positions()
        return self.flushed_position

    def plainly_mapped(self) -> bool:
        """True when an msync of the mapping flushes this file (no pool, no write buffer, mapped now): what an
        outside flusher (MappedFileQueue.flush_window) needs."""
        return self._pool is None and self.write_buffer is None and isinstance(self.mm, Mapping) and not self.mm.closed

    def note_flushed(self, position: int) -> int:
        """An outside flusher made the bytes below `position` (a file offset) durable: the flushed position
        moves there, never back, never past the readable bytes; returns it."""
        start = self.flushed_position
        self.flushed_position = max(start, min(position, self.get_read_position()))
        assert self.positions_ordered(start), self.positions()
        return self.flushed_position

    def positions_ordered(self, flushed_before: int) -> bool:
        """flushed_before <= flushed <= committed <= wrote <= file_size, read so that a concurrent append
        cannot break it: each position is read before the ones a writer sets earlier (wrote, then committed)."""
        flushed, committed, wrote = self.flushed_position, self.committed_position, self.wrote_position
        readable = wrote if self.write_buffer is None and self._pool is None else committed  # as get_read_position
        return flushed_before <= flushed <= readable and committed <= wrote <= self.file_size

    def positions(self) -> str:
        """The positions, for an assertion's message."""
        return f"{self.file_name}: flushed {self.flushed_position} committed {self.committed_position} wrote {self.wrote_position}"

    def drop_resident(self) -> None:
        """Take this file's pages out of the process's resident set once it is full and flushed."""
        self.drop_resident_below(self.file_size)

    def drop_resident_below(self, end: int) -> None:
        """Take the flushed pages below `end` out of the process's resident set (from where the last call stopped).

        MADV_DONTNEED on a shared file mapping only unmaps the pages: their bytes are on disk and
        in the page cache, and a later read faults them back from there. Without it every byte the
        store ever wrote stays counted in its RSS while the file is mapped. Only flushed bytes are
        dropped (`end` is capped at the flushed position): the kernel keeps dirty pages anyway, but
        a dropped page written again costs a fault. Refusals (pages locked by warm-up's mlock) are
        logged and harmless.
        """
        end = min(end, self.flushed_position)
        end -= end % OS_PAGE_SIZE if end < self.file_size else 0
        if end <= self.dropped_to or not self.hold():
            return
        try:
            self._unmap_below(end)
        finally:
            self.release()

    def _unmap_below(self, end: int) -> None:
        """MADV_DONTNEED of [dropped_to, end), whole pages; the caller holds a reference. Dirty pages stay
        dirty in the page cache (the kernel moves the mapping's dirty bit to the page)."""
        start = self.dropped_to
        if end <= start:
            return
        try:
            self.mm.madvise(_kernels.MADV_DONTNEED, start, end - start)
            self.dropped_to = end
        except (OSError, ValueError) as exc:
            log.debug("madvise(DONTNEED) refused for %s: %s", self.path, exc)

    def drop_cached(self, start: int, end: int) -> int:
        """Take the flushed pages of [start, end) out of the process's mapping and out of the OS page cache
        (POSIX_FADV_DONTNEED); returns the bytes advised, 0 when the file is closed or refuses.

        Only flushed bytes are dropped (`end` is capped at the flushed position): a dirty page stays
        in the page cache whatever the advice, and so does a page a reader maps again after the
        madvise. The file is opened for the advice (mappings hold no descriptor); one deleted
        meanwhile has nothing left to drop.
        """
        end = min(end, self.flushed_position)
        end -= end % OS_PAGE_SIZE if end < self.file_size else 0
        if end <= start or not self.hold():
            return 0
        try:
            self.mm.madvise(_kernels.MADV_DONTNEED, start, end - start)  # also what readers mapped again since
            self.dropped_to = max(self.dropped_to, end)
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            return end - start
        except (OSError, ValueError) as exc:
            log.debug("dropping cached pages of %s refused: %s", self.path, exc)
            return 0
        finally:
            self.release()

    def _msync(self, offset: int, length: int) -> None:
        """msync(MS_SYNC) of [offset, offset+length), the GIL released (store._kernels.Mapping.flush): a group
        commit waiting for the disk does not stop the producer threads. The caller holds a reference,
        so the mapping cannot be closed meanwhile."""
        self.mm.flush(offset, length)

    def _is_able_to(self, current: int, done: int, least_pages: int) -> bool:
        if current >= self.file_size:
            return True
        if least_pages > 0:
            return (current // OS_PAGE_SIZE) - (done // OS_PAGE_SIZE) >= least_pages
        return current > done

    def get_read_position(self) -> int:
        """Bytes readers may see: committed bytes when pooled, else written bytes."""
        return self.wrote_position if self.write_buffer is None and self._pool is None else self.committed_position

    # Reading -------------------------------------------------------------------------

    def select_mapped_buffer(self, pos: int, size: int | None = None) -> SelectMappedBufferResult | None:
        """A held view of [pos, pos+size) (or to the read position); None when unreadable."""
        readable = self.get_read_position()
        end = readable if size is None else pos + size
        if pos < 0 or end > readable or end <= pos:
            return None
        if not self.hold():
            return None
        view = memoryview(self.mm)[pos:end]
        return SelectMappedBufferResult(self.file_from_offset + pos, view, end - pos, self)

    # Reference counting and destruction -----------------------------------------------

    def hold(self) -> bool:
        with self._ref_lock:
            if not self._available:
                return False
            self._ref_count += 1
            return True

    def release(self) -> None:
        with self._ref_lock:
            self._ref_count -= 1
            if self._ref_count > 0:
                return
        self._cleanup()

    @property
    def ref_count(self) -> int:
        return self._ref_count

    def is_available(self) -> bool:
        return self._available

    def shutdown(self, interval_forcibly_ms: int, now_ms: int | None = None) -> None:
        """Refuse new readers and drop the file's own reference; force after the interval."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        if self._available:
            self._available = False
            self._first_shutdown_ms = now
            self.release()
        elif not self._cleanup_over:
            # Also reached with no reader left when the mapping could not close then (a view was still exported).
            if now - self._first_shutdown_ms >= interval_forcibly_ms:
                log.warning("forcing release of %s with %d readers", self.path, self._ref_count)
                with self._ref_lock:
                    self._ref_count = 0
                self._cleanup(force=True)
            elif self._ref_count <= 0:
                self._cleanup()

    def _cleanup(self, force: bool = False) -> None:
        if self._cleanup_over:
            return
        if self._pool is not None and self.write_buffer is not None:
            self._pool.return_buffer(self.write_buffer)
            self.write_buffer = None
        try:
            self._close_mapping()
        except BufferError:
            # Readers still hold views; the mapping is freed when they let go.
            if not force:
                return
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._cleanup_over = True

    def _close_mapping(self) -> None:
        """Close the mapping; BufferError while views of it are exported."""
        self.mm.close()

    def is_cleanup_over(self) -> bool:
        return self._cleanup_over

    def destroy(self, interval_forcibly_ms: int = 0, now_ms: int | None = None) -> bool:
        """Shut down and delete the file; False while readers still hold it."""
        self.shutdown(interval_forcibly_ms, now_ms)
        if not self._cleanup_over:
            return False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        log.info("deleted mapped file %s", self.path)
        return True

    def close(self) -> None:
        """Close at store shutdown (no deletion)."""
        if self._available:
            self._available = False
            self.release()
        if not self._cleanup_over:
            self._cleanup(force=True)

    # Warm-up -------------------------------------------------------------------------

    def prefault(self, pos: int, length: int) -> bool:
        """Fault [pos, pos+length) of the mapping in for writing, GIL released; False when the file is closed.

        No byte changes (store.native.prefault), so it may run while the file is written.
        Raises the OSError of a kernel that refuses (ENOMEM, EFAULT).
        """
        if not self.hold():
            return False
        try:
            assert pos + length <= self.reserved_to or self.reservation.unsupported, "prefault past the reserved bytes"
            _kernels.prefault(self.mm, pos, length)
            return True
        finally:
            self.release()

    def warm_up(self) -> None:
        """Reserve the whole file, touch every page, advise the kernel and lock the pages; refusals are logged."""
        self.ensure_reserved(self.file_size)
        mm = self.mm
        for pos in range(0, self.file_size, OS_PAGE_SIZE):
            mm[pos] = 0
        try:
            mm.madvise(_kernels.MADV_WILLNEED)
        except OSError as exc:
            log.info("madvise refused for %s: %s", self.path, exc)
        _mlock(mm, self.file_size, self.path)


def data_end(fd: int, size: int) -> int:
    """Where the file's first hole starts (SEEK_HOLE): its blocks before it are allocated; `size`
    when the filesystem cannot tell. Reserved blocks never written may count as a hole (ext4's
    unwritten extents), so this is a lower bound of what is reserved and an upper bound of what
    holds data (writes and reservations go in order from the file's start)."""
    try:
        return min(size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return size


def map_file(fd: int, size: int) -> Mapping:
    """A shared read-write mapping of the file's first `size` bytes that keeps no descriptor."""
    return _kernels.Mapping(fd, size)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_LIBC: ctypes.CDLL | None = None
_LIBC_FAILED = False


def _libc() -> ctypes.CDLL | None:
    """The C library through ctypes (its calls release the GIL), or None where it cannot load."""
    global _LIBC, _LIBC_FAILED
    if _LIBC is None and not _LIBC_FAILED:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError as exc:
            _LIBC_FAILED = True
            log.info("libc unavailable through ctypes (%s); msync and mlock fall back", exc)
    return _LIBC


def _mlock(mm: Mapping, size: int, path: str) -> None:
    libc = _libc()
    address = mm.address
    if libc is None or not address:
        log.info("mlock unavailable for %s", path)
        return
    if libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) != 0:
        log.info("mlock refused for %s: errno %d", path, ctypes.get_errno())
