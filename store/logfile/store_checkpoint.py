"""StoreCheckpoint: the timestamps up to which each part of the store is known durable.

Layout (big-endian, one 4 KiB file `checkpoint`):
    physic_msg_timestamp 8 | logics_msg_timestamp 8 | index_msg_timestamp 8
Each is the store time of the last message whose commitlog bytes / consume queue
entry / index entry were flushed. Crash recovery starts at the commitlog file whose
first message is older than the minimum of these (less 3 s, as RocketMQ does, for
messages stored in the same second).
"""

from __future__ import annotations

import os
import struct

CHECKPOINT_FILE_BYTES = 4096
_LAYOUT = struct.Struct(">qqq")
SAME_SECOND_MARGIN_MS = 3000


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size >= _LAYOUT.size:
            data = os.pread(self._fd, _LAYOUT.size, 0)
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _LAYOUT.unpack(data)
        else:
            os.ftruncate(self._fd, CHECKPOINT_FILE_BYTES)

    def flush(self) -> None:
        os.pwrite(self._fd, _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp), 0)
        os.fsync(self._fd)

    def get_min_timestamp(self, include_index: bool = True) -> int:
        values = [self.physic_msg_timestamp, self.logics_msg_timestamp]
        if include_index:
            values.append(self.index_msg_timestamp)
        return max(0, min(values) - SAME_SECOND_MARGIN_MS)

    def shutdown(self) -> None:
        self.flush()
        os.close(self._fd)
