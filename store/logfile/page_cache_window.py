"""PageCacheWindow: flushed commitlog pages further than a window behind the flush position leave the page cache.

A store that writes faster than anything reads it back fills the OS page cache with log it will
rarely read again, and every new page the writer maps is one the kernel must find, zero and (on a
virtual machine whose free memory was handed back to the host) have backed again; the pages of
old log are only reclaimed when memory runs short, by whoever then needs memory. Dropping the
flushed pages behind a window gives the writer's next pages memory the store itself just freed:
the page cache the store holds stays about `window_bytes` plus what is not flushed yet.

What is dropped is on disk: a read of it faults the page back from the disk. The readers this
costs are the ones further behind than the window, which RocketMQ already counts as reading
from disk (MessageGetter's memory window is capped by it). A page someone maps again (a reader)
stays: POSIX_FADV_DONTNEED leaves mapped and dirty pages alone.

Runs on the thread that flushes the log (MappedFileQueue.flush), after the flush it follows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from store.logfile.mapped_file import OS_PAGE_SIZE, MappedFile

log = logging.getLogger("tidemq.store")

# Least bytes one trim drops: a flush that moved a few pages does not make a system call for them.
DROP_STEP_BYTES = 8 * 1024 * 1024


class PageCacheWindow:
    def __init__(self, window_bytes: int, step_bytes: int = DROP_STEP_BYTES) -> None:
        assert window_bytes > 0, "a window of 0 is no window: the log is not given one"
        self.window_bytes = window_bytes
        step = min(step_bytes, window_bytes // 4)  # a small window is trimmed in small steps
        self.step_bytes = max(OS_PAGE_SIZE, step - step % OS_PAGE_SIZE)
        self.dropped_where = 0  # log offset below which flushed pages were advised out of the page cache
        self.dropped_bytes_total = 0

    def trim(self, files: Sequence[MappedFile], flushed_where: int) -> int:
        """Drop the flushed pages from where the last trim stopped to `window_bytes` behind `flushed_where`,
        once that spans `step_bytes`; returns the bytes advised. A file flushed short of the range (none is,
        below the log's flush position) stops the trim there: the next one starts from it. The first trim of a
        process starts at the log's first file: pages of the log the OS kept from before the start go too."""
        target = flushed_where - self.window_bytes
        target -= target % OS_PAGE_SIZE
        if target - self.dropped_where < self.step_bytes or not files:
            return 0
        # Files are contiguous and of one size (MappedFileQueue's invariant): the first one in the range by arithmetic,
        # so a trim looks at the files it drops from, not at every file of a large store.
        first_base, size = files[0].file_from_offset, files[0].file_size
        advised, reached = 0, target
        for mf in files[max(0, (self.dropped_where - first_base) // size) :]:
            base = mf.file_from_offset
            low, high = max(self.dropped_where, base), min(target, base + mf.file_size)
            if low >= high:
                if base >= target:
                    break
                continue
            advised += mf.drop_cached(low - base, high - base)
            if mf.flushed_position < high - base:
                reached = base + max(low - base, mf.flushed_position)
                break
        self.dropped_where = max(self.dropped_where, reached)
        self.dropped_bytes_total += advised
        return advised
