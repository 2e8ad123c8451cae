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

Positions are written by one writer under the owner's lock and read without locks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from store import _kernels

if TYPE_CHECKING:
    from store.transient_store_pool import TransientStorePool

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
    def __init__(self, path: str, file_size: int, transient_store_pool: TransientStorePool | None = None, map_now: bool = True) -> None:
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
        self._address: int | None = None  # the mapping's address, taken at the first flush
        self._fd = -1  # kept open only for a pooled file (pwrite, fdatasync); the mapping holds its own
        self.reserved = False  # True once the file's blocks are allocated (see reserve_space)
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
        """Create or open the file, size it, reserve its blocks and (unless lazy) map it.

        A new file whose space cannot be reserved is removed again and the OSError raised
        (ENOSPC on a full disk), so no file is ever written through an unbacked mapping.
        An existing file is reserved on a best-effort basis (it may come from a version
        that made sparse files); `reserved` says whether that worked.
        """
        path = self.path
        existed = os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != self.file_size:
                os.ftruncate(fd, self.file_size)
            self.reserved = reserve_space(fd, self.file_size, path, required=not existed)
            if self._map_on_open:
                self.mm = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            if not existed:
                _unlink_quietly(path)
            raise
        if keep_fd:
            self._fd = fd
        else:
            os.close(fd)  # mmap keeps a duplicate; one descriptor per mapped file is enough
        if not existed:
            log.debug("created mapped file %s", path)

    def reserve(self) -> bool:
        """Try again to reserve the blocks of a file loaded unreserved; True when they are."""
        if not self.reserved:
            try:
                fd = os.open(self.path, os.O_RDWR)
            except OSError:
                return False
            try:
                self.reserved = reserve_space(fd, self.file_size, self.path, required=False)
            finally:
                os.close(fd)
        return self.reserved

    # Writing -------------------------------------------------------------------------

    @property
    def write_target(self) -> bytearray | mmap.mmap:
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
        self.write_target[pos : pos + n] = data
        self.wrote_position = pos + n
        if self.write_buffer is None:
            self.committed_position = self.wrote_position
        return True

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Write at an explicit position (consume queue gaps, replication); moves wrote_position forward."""
        n = len(data)
        assert 0 <= pos and pos + n <= self.file_size, "write outside the file"
        self.write_target[pos : pos + n] = data
        if pos + n > self.wrote_position:
            self.wrote_position = pos + n
            if self.write_buffer is None:
                self.committed_position = self.wrote_position

    def mark_written(self, new_wrote_position: int) -> None:
        """Record bytes the owner wrote into `write_target` directly."""
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

    def flush(self, flush_least_pages: int) -> int:
        """Make committed bytes durable (msync of the dirty range only); returns the flushed position."""
        readable = self.get_read_position()
        start = self.flushed_position
        if readable > start and self._is_able_to(readable, start, flush_least_pages):
            if self.hold():
                try:
                    if self._pool is not None:
                        os.fdatasync(self._fd)
                    else:
                        aligned = start - (start % OS_PAGE_SIZE)
                        self._msync(aligned, readable - aligned)
                    self.flushed_position = readable
                finally:
                    self.release()
            else:
                self.flushed_position = readable
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
        """Take this file's pages out of the process's resident set once it is full and flushed.

        MADV_DONTNEED on a shared file mapping only unmaps the pages: their bytes are on disk and
        in the page cache, and a later read faults them back from there. Without it every byte the
        store ever wrote stays counted in its RSS while the file is mapped. Refusals (pages locked
        by warm-up's mlock) are logged and harmless.
        """
        if not hasattr(mmap, "MADV_DONTNEED") or not self.hold():
            return
        try:
            self.mm.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError) as exc:
            log.debug("madvise(DONTNEED) refused for %s: %s", self.path, exc)
        finally:
            self.release()

    def _msync(self, offset: int, length: int) -> None:
        """msync(MS_SYNC) of [offset, offset+length) with the GIL released.

        CPython's mmap.flush() holds the GIL through the whole msync, which would stop every
        producer thread while a group commit waits for the disk; ctypes releases it. The
        caller holds a reference, so the mapping cannot be closed meanwhile.
        """
        if self._address is None:
            self._address = mapping_address(self.mm)
        libc = _libc()
        if self._address and libc is not None and sys.platform.startswith("linux"):
            if libc.msync(ctypes.c_void_p(self._address + offset), ctypes.c_size_t(length), _MS_SYNC) == 0:
                return
            log.warning("msync failed for %s (errno %d); flushing through mmap.flush", self.path, ctypes.get_errno())
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
            _kernels.prefault(self.mm, pos, length)
            return True
        finally:
            self.release()

    def warm_up(self) -> None:
        """Touch every page, advise the kernel and lock the pages; refusals are logged."""
        mm = self.mm
        for pos in range(0, self.file_size, OS_PAGE_SIZE):
            mm[pos] = 0
        madvise = getattr(mm, "madvise", None)
        if madvise is not None and hasattr(mmap, "MADV_WILLNEED"):
            try:
                madvise(mmap.MADV_WILLNEED)
            except OSError as exc:
                log.info("madvise refused for %s: %s", self.path, exc)
        _mlock(mm, self.file_size, self.path)


def reserve_space(fd: int, size: int, path: str, required: bool) -> bool:
    """Allocate the blocks of [0, size) so that writing through a mapping never meets a full disk.

    A store to a mapped page the filesystem cannot back raises SIGBUS and kills the process;
    after posix_fallocate succeeded it cannot happen, and a full disk is an OSError (ENOSPC)
    here, at the file's creation. With `required` that error is raised; otherwise it is
    logged and False returned. A filesystem without fallocate support is logged once and
    treated as reserved (nothing better can be done there).
    """
    global _FALLOCATE_UNSUPPORTED_LOGGED
    try:
        os.posix_fallocate(fd, 0, size)
        return True
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            if not _FALLOCATE_UNSUPPORTED_LOGGED:
                _FALLOCATE_UNSUPPORTED_LOGGED = True
                log.warning("the filesystem of %s cannot reserve space (%s); a full disk may stop the broker with SIGBUS", path, exc)
            return True
        if required:
            raise
        log.error("cannot reserve the space of %s (%s); it is not written until space is available", path, exc)
        return False


def is_no_space(exc: OSError) -> bool:
    """True when an OSError says the disk (or the user's quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_FALLOCATE_UNSUPPORTED_LOGGED = False
_MS_SYNC = 4  # Linux's value of MS_SYNC (not exported by Python's mmap module)
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


def mapping_address(mm: mmap.mmap) -> int:
    """The address of a mapping, or 0 when it cannot be taken."""
    try:
        anchor = ctypes.c_char.from_buffer(mm)
    except (TypeError, ValueError):
        return 0
    address = ctypes.addressof(anchor)
    del anchor  # the export must not outlive this call, or the mapping cannot close
    return address


def _mlock(mm: mmap.mmap, size: int, path: str) -> None:
    libc = _libc()
    address = mapping_address(mm)
    if libc is None or not address:
        log.info("mlock unavailable for %s", path)
        return
    if libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) != 0:
        log.info("mlock refused for %s: errno %d", path, ctypes.get_errno())
