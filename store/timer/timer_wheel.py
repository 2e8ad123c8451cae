"""TimerWheel: the timing wheel file (RocketMQ 5's TimerWheel, same 32-byte slot).

`timerwheel` holds 2 x `timer_wheel_slots` slots; the slot of time t is
(t / precision) mod (2 x slots). A slot (docs/layouts.md, "Timer wheel slot"):

    TIME 8 (t / precision) | FIRST POS 8 | LAST POS 8 | NUM 4 | MAGIC 4      (big-endian)

FIRST / LAST POS are the timer log positions of the slot's first and last unit (the units
chain backwards through PREV POS); NUM counts them. A slot whose TIME is not the time asked
for is empty (it belongs to another turn of the wheel): that is how a slot is reused without
being cleared. RocketMQ keeps a heap copy and flushes differences; this wheel is the mapped
file itself, so its state lives in the page cache, not in the process's heap.

Invariants: only the enqueue service writes slots (recovery before it starts); the dequeue
service reads them. Both hold TimerMessageStore.wheel_lock around a slot's read-modify-write
and around moving the read time, so no unit appended to a slot being delivered is missed.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from core.errors import ConfigInvalid

SLOT = struct.Struct(">qqqii")
SLOT_SIZE = SLOT.size
assert SLOT_SIZE == 32
RESERVE_CHUNK_BYTES = 64 * 1024  # blocks reserved at a time, the first time a slot of the chunk is written
_SCAN_CHUNK_SLOTS = 4096  # slots unpacked per chunk when counting or searching
# A chunk of never-written slots (a sparse file reads as zeros) holds no live slot: TIME 0 is no tick
# of a real time, so such a chunk is skipped with one comparison instead of unpacked slot by slot.
_ZERO_CHUNK = bytes(_SCAN_CHUNK_SLOTS * SLOT_SIZE)


class Slot(NamedTuple):
    time_ms: int  # -1 for an empty slot
    first_pos: int
    last_pos: int
    num: int
    magic: int


EMPTY_SLOT = Slot(-1, -1, -1, 0, 0)


class TimerWheel:
    def __init__(self, path: str, slots_total: int, precision_ms: int) -> None:
        self.path = path
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.ring = slots_total * 2
        self.length = self.ring * SLOT_SIZE
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size not in (0, self.length):
                raise ConfigInvalid(
                    f"{path} has {size} bytes but timer_wheel_slots={slots_total} needs {self.length}; "
                    "the wheel size cannot change while timers are pending"
                )
            if size == 0:
                os.ftruncate(fd, self.length)  # sparse: blocks are reserved chunk by chunk as slots are written
            self.mm = mmap.mmap(fd, self.length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._fd = os.dup(fd)  # for the reservations of chunks written later
        finally:
            os.close(fd)
        # Chunks whose blocks are reserved (posix_fallocate) since the open: a slot is written only into
        # one, so no write through the mapping meets a full disk (SIGBUS).
        self._reserved = bytearray((self.length + RESERVE_CHUNK_BYTES - 1) // RESERVE_CHUNK_BYTES)

    def index_of(self, time_ms: int) -> int:
        return (time_ms // self.precision_ms) % self.ring

    def get_slot(self, time_ms: int) -> Slot:
        """The slot of `time_ms`; EMPTY_SLOT when the stored slot belongs to another turn."""
        t, first, last, num, magic = SLOT.unpack_from(self.mm, self.index_of(time_ms) * SLOT_SIZE)
        if t != time_ms // self.precision_ms:
            return EMPTY_SLOT
        return Slot(t * self.precision_ms, first, last, num, magic)

    def reserve(self, time_ms: int) -> bool:
        """Reserve the blocks of the chunk holding the slot of `time_ms` (once per chunk); False when the disk is full."""
        chunk = self.index_of(time_ms) * SLOT_SIZE // RESERVE_CHUNK_BYTES
        if self._reserved[chunk]:
            return True
        start = chunk * RESERVE_CHUNK_BYTES
        try:
            os.posix_fallocate(self._fd, start, min(RESERVE_CHUNK_BYTES, self.length - start))
        except OSError:
            return False
        self._reserved[chunk] = 1
        return True

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int, magic: int = 0) -> None:
        """Write a slot; OSError (ENOSPC) when its chunk's blocks cannot be reserved (nothing written)."""
        if not self.reserve(time_ms):
            raise OSError(errno.ENOSPC, f"no disk space for the timer wheel's slot of {time_ms}", self.path)
        SLOT.pack_into(self.mm, self.index_of(time_ms) * SLOT_SIZE, time_ms // self.precision_ms, first_pos, last_pos, num, magic)

    def live_slots(self, from_ms: int, to_ms: int) -> Iterator[Slot]:
        """The non-empty slots with from_ms <= time < to_ms, in time order (at most one turn)."""
        p = self.precision_ms
        first_tick = from_ms // p
        ticks = min(max(0, (to_ms - from_ms + p - 1) // p), self.ring)
        done = 0
        while done < ticks:
            start = (first_tick + done) % self.ring
            n = min(_SCAN_CHUNK_SLOTS, ticks - done, self.ring - start)
            tick = first_tick + done
            chunk = self.mm[start * SLOT_SIZE : (start + n) * SLOT_SIZE]
            if tick > 0 and chunk == _ZERO_CHUNK[: len(chunk)]:
                done += n
                continue
            for i, (t, first, last, num, magic) in enumerate(SLOT.iter_unpack(chunk)):
                if t == tick + i and last >= 0:
                    yield Slot(t * p, first, last, num, magic)
            done += n

    def count(self, from_ms: int, to_ms: int) -> int:
        """Units held by the slots with from_ms <= time < to_ms (RocketMQ's getAllNum over a window)."""
        return sum(slot.num for slot in self.live_slots(from_ms, to_ms))

    def next_slot(self, from_ms: int, to_ms: int) -> Slot | None:
        """The first non-empty slot at or after `from_ms` and before `to_ms`."""
        return next(self.live_slots(from_ms, to_ms), None)

    def flush(self) -> None:
        self.mm.flush()

    def shutdown(self) -> None:
        self.mm.flush()
        self.mm.close()
        os.close(self._fd)
