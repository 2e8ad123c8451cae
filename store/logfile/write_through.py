"""WriteThrough: a large batch encoded into a buffer and written to its commitlog file with one pwrite.

Written through the file's mapping, every new page of a file costs a page fault on the putting
thread (or on the allocation service's prefault, which zeroes the page first); on a virtual machine
that is 0.8–2 µs a 4 KiB page against 0.1 µs for the copy, and the most of a large batch's cost.
A `pwrite` of the same bytes puts them in the page cache with no fault and no zeroing of a whole
page. The bytes are the file's as soon as the call returns: the mapping shows them (one page
cache), the flush's msync writes them back with the rest of the range, recovery reads them as any
others. So the commitlog (store/logfile/commit_log.py) encodes a batch whose stored form may take at
least `min_bytes` here and has it written through, and leaves the prefault out of the range it
reserved for it (docs/store-api.md). The put lane (CommitLog.put_packed) writes through the mapping, so
the put pipeline leaves a packed batch of `min_bytes` or more to put_batch.

The file being written through is advised MADV_RANDOM while it is: the dispatch reads each batch
back through the mapping right after it is written, and a read fault there would otherwise read
ahead into the pages past the write position, which the kernel allocates and zeroes (what the
pwrite avoided, on the loop thread). Its pages are in the page cache (just written), so nothing
needs a readahead; the file gets MADV_NORMAL back when another file is written or at `close`, so
a later reader of it (a consumer catching up from disk) reads ahead as usual.

Invariants: used under the commitlog's put lock only (one writer); a batch is written whole or the
caller copies the buffer into the mapping instead (`write_locked` returns False), so the file
never holds a part of one the log does not count; the descriptor is the one of the file written
last (that file object, never another file at its path), closed when another file is written, when the
log is cut and at `close`.
"""

from __future__ import annotations

import logging
import mmap
import os

from store.logfile.mapped_file import MappedFile

log = logging.getLogger("tidemq.store")

# Largest stored batch written through; a larger one goes through the mapping (the buffer is this size, made once).
WRITE_THROUGH_MAX_BYTES = 4 * 1024 * 1024


class WriteThrough:
    """The buffer large batches are encoded into and the descriptor they are written with."""

    def __init__(self, min_bytes: int, max_bytes: int = WRITE_THROUGH_MAX_BYTES) -> None:
        assert 0 <= min_bytes and 0 < max_bytes
        self.min_bytes = min_bytes  # 0: nothing is written through
        self.max_bytes = max_bytes
        self._buffer: bytearray | None = None
        self._fd = -1
        self._file: MappedFile | None = None  # the file `_fd` is open on (the object: a path can be a new file's again)
        self.batches = 0  # batches written through (tests and benchmarks)
        self.fallbacks = 0  # batches copied into the mapping after a failed write

    def takes(self, mf: MappedFile, length: int) -> bool:
        """Whether a batch whose stored form may take `length` bytes of `mf` is written through."""
        return 0 < self.min_bytes <= length <= self.max_bytes and mf.write_buffer is None

    def buffer(self) -> bytearray:
        """The buffer to encode into (made at the first use, then reused)."""
        buffer = self._buffer
        if buffer is None:
            buffer = self._buffer = bytearray(self.max_bytes)
        return buffer

    def write_locked(self, mf: MappedFile, pos: int, length: int) -> bool:
        """Write the buffer's first `length` bytes at `pos` of `mf`; False (nothing counted, logged once a file) when
        the file refused them: the caller then copies them into the mapping."""
        view = memoryview(self.buffer())[:length]
        try:
            if self._file is not mf:
                self.close()
                self._fd = os.open(mf.path, os.O_WRONLY | os.O_CLOEXEC)
                self._file = mf
                _advise(mf, mmap.MADV_RANDOM)
            written = 0
            while written < length:  # a short write goes on from where it stopped
                written += os.pwrite(self._fd, view[written:], pos + written)
        except OSError as e:
            self.fallbacks += 1
            log.warning("writing a batch to %s failed (%s); copied through its mapping instead", mf.path, e.strerror or e)
            self.close()
            return False
        self.batches += 1
        return True

    def close(self) -> None:
        """Close the descriptor and give the file it wrote its usual readahead back."""
        if self._file is not None:
            _advise(self._file, mmap.MADV_NORMAL)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._file = -1, None


def _advise(mf: MappedFile, advice: int) -> None:
    """madvise the whole mapping of `mf`; nothing when it is closed already (a file cut away or destroyed) or the
    kernel refuses (the advice only spares work)."""
    mm = mf.mm
    if mm is None or mm.closed:
        return
    try:
        mm.madvise(advice)
    except (OSError, ValueError) as e:
        log.debug("madvise(%d) of %s: %s", advice, mf.path, e)
