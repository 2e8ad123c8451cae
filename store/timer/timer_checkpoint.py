"""TimerCheckpoint: the timer's progress, `config/timercheck` (RocketMQ 5's TimerCheckpoint layout).

One OS page, big-endian longs (docs/layouts.md, "Timer checkpoint"):

    0 LAST READ TIME MS | 8 LAST TIMER LOG FLUSH POS | 16 LAST TIMER QUEUE OFFSET |
    24 MASTER TIMER QUEUE OFFSET | 32 DATA VERSION: STATE VERSION | 40 TIMESTAMP | 48 COUNTER

- LAST READ TIME: every slot before it was delivered (the dequeue service's progress);
- LAST TIMER LOG FLUSH POS: the timer log is flushed up to here (recovery checks from the file holding it);
- LAST TIMER QUEUE OFFSET: the timer topic's consume queue was enqueued up to here;
- MASTER TIMER QUEUE OFFSET: RocketMQ's slave field; a master writes its own queue offset.

Written only by the flush service (and at shutdown), after the timer log and the wheel were
flushed, so every value it holds is backed by flushed data.
"""

from __future__ import annotations

import mmap
import os
import struct
import time

OS_PAGE_SIZE = 4096
_FIELDS = struct.Struct(">qqqqqqq")


class TimerCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.existed = os.path.exists(path) and os.path.getsize(path) >= _FIELDS.size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < OS_PAGE_SIZE:
                os.ftruncate(fd, OS_PAGE_SIZE)
            os.posix_fallocate(fd, 0, OS_PAGE_SIZE)  # its page is written through the mapping: never a hole
            self.mm = mmap.mmap(fd, OS_PAGE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        (
            self.last_read_time_ms,
            self.last_timer_log_flush_pos,
            self.last_timer_queue_offset,
            self.master_timer_queue_offset,
            self.state_version,
            self.timestamp,
            self.counter,
        ) = _FIELDS.unpack_from(self.mm, 0)

    def flush(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)
        _FIELDS.pack_into(
            self.mm, 0, self.last_read_time_ms, self.last_timer_log_flush_pos, self.last_timer_queue_offset,
            self.master_timer_queue_offset, self.state_version, self.timestamp, self.counter,
        )  # fmt: skip
        self.mm.flush()

    def shutdown(self) -> None:
        self.flush()
        self.mm.close()
