"""SpaceReservation: how a store's mapped files reserve disk blocks ahead of their write positions.

A store to a page of a shared file mapping that the filesystem cannot back raises SIGBUS and
kills the process. posix_fallocate turns that into an OSError (ENOSPC) at a time of the store's
choosing, so every file keeps the invariant

    every byte written through a mapping lies below the file's `reserved_to`,

and `reserved_to` moves forward in steps ahead of the write position (MappedFile.ensure_reserved)
instead of covering the whole file at its creation. A file stays sparse past `reserved_to`, and
its apparent size stays the full mapped size (RocketMQ's tools read the files by their size).

Steps double with what a file already reserved, from MIN_STEP_BYTES up to `ahead_bytes`
(the `reserve_ahead_bytes` setting), so a file written once in a while (a quiet queue, a file
made ahead of need) holds a small reservation and a busy one reserves rarely. At most
`max(MIN_STEP_BYTES, min(ahead_bytes, reserved))` bytes past the write position are reserved
and unwritten per file. `ahead_bytes == 0` reserves each file whole at its creation (the former
behaviour, kept for comparison in bench/reserve_bench.py).

A reservation that fails for space is reported to `on_short(kind, path, free_bytes)` (the store
refuses puts with DISK_FULL) whether or not the write that asked for it can still go ahead.
The commitlog's puts reserve `strict`ly: a step that does not fit refuses the put, which stores
nothing, so puts stop while a step of room is left for what follows them (dispatch to the
queues and the index of what was stored). Those other writers are lenient: a step that does
not fit is retried for the bytes the write needs alone, and only when those do not fit either
is the OSError raised to the writer, which then writes nothing (dispatch retries it).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

from store.disk.disk_usage import disk_free_bytes

log = logging.getLogger("tidemq.store")

MIB = 1024 * 1024
MIN_STEP_BYTES = 64 * 1024  # the first step of a file, and the smallest one
DEFAULT_AHEAD_BYTES = 64 * MIB  # the largest step (the `reserve_ahead_bytes` setting's default)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# A directory of the store path -> the kind of file named in logs and /readyz.
_KINDS = {"commitlog": "commitlog", "consumequeue": "consume queue", "index": "index", "timerlog": "timer log"}

ShortListener = Callable[[str, str, int], None]


def file_kind(path: str) -> str:
    """The kind of store file at `path` (its nearest known directory; else its directory's name)."""
    parts = os.path.normpath(path).split(os.sep)
    for part in reversed(parts[:-1]):
        if part in _KINDS:
            return _KINDS[part]
    return parts[-2] if len(parts) > 1 else "file"


def is_no_space(exc: OSError) -> bool:
    """True when an OSError says the disk (or the user's quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def page_up(n: int) -> int:
    return -(-n // PAGE_BYTES) * PAGE_BYTES


class SpaceReservation:
    """The reservation policy of one store's files, and where failures are reported."""

    def __init__(self, ahead_bytes: int = DEFAULT_AHEAD_BYTES, on_short: ShortListener | None = None) -> None:
        assert ahead_bytes == 0 or ahead_bytes >= MIN_STEP_BYTES, ahead_bytes
        self.ahead_bytes = ahead_bytes
        self.on_short = on_short
        self.unsupported = False  # the filesystem has no fallocate: nothing can be reserved (logged once)
        self.steps = 0  # fallocate calls made
        self.short_total = 0  # reservations that failed for space

    def whole_files(self) -> bool:
        return self.ahead_bytes == 0

    def target(self, file_size: int, reserved_to: int, end: int, base: int = 0) -> int:
        """Where a reservation covering `end` reaches: one step past it, within the file. Bytes below
        `base` (a region reserved whole, such as the index's hash slots) do not make steps grow."""
        if self.ahead_bytes == 0:
            return file_size
        step = max(MIN_STEP_BYTES, min(self.ahead_bytes, reserved_to - base))
        return min(file_size, page_up(end + step))

    def reserve(
        self, fd: int, path: str, reserved_to: int, end: int, file_size: int, base: int = 0, strict: bool = False, quiet: bool = False
    ) -> int:
        """Reserve [reserved_to, target) of the open file `fd` so that [0, end) is backed; returns the new
        reserved end. A step that does not fit is reported, then shrinks to `end` unless `strict`;
        OSError when even that fails (or at once when `strict`). `quiet`: a reservation made ahead of any
        write (to prefault what follows it), which on a full disk raises at once, unreported: the write
        that needs the bytes reserves them itself, and reports."""
        target = self.target(file_size, reserved_to, end, base)
        if self.unsupported or target <= reserved_to:
            return max(reserved_to, target) if not self.unsupported else file_size
        try:
            self.steps += 1
            os.posix_fallocate(fd, reserved_to, target - reserved_to)
            return target
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                self._unsupported(path, exc)
                return file_size
            if not is_no_space(exc) or quiet:
                raise
            if strict:
                self.short(path)
                raise
            need = min(file_size, page_up(end))
            try:
                if need > reserved_to:
                    os.posix_fallocate(fd, reserved_to, need - reserved_to)
                return need
            finally:
                self.short(path)

    def reserve_path(
        self, path: str, reserved_to: int, end: int, file_size: int, base: int = 0, strict: bool = False, quiet: bool = False
    ) -> int:
        """`reserve` through a descriptor opened for the call (mapped files keep none)."""
        fd = os.open(path, os.O_RDWR)
        try:
            return self.reserve(fd, path, reserved_to, end, file_size, base, strict, quiet)
        finally:
            os.close(fd)

    def short(self, path: str) -> None:
        """Report a reservation of `path` that failed for space."""
        self.short_total += 1
        if self.on_short is not None:
            self.on_short(file_kind(path), path, disk_free_bytes(path))

    def _unsupported(self, path: str, exc: OSError) -> None:
        if not self.unsupported:
            self.unsupported = True
            log.warning("the filesystem of %s cannot reserve space (%s); a full disk may stop the broker with SIGBUS", path, exc)


DEFAULT_RESERVATION = SpaceReservation()  # files made outside a store (tools, tests): steps, no listener
