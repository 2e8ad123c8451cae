"""StoreLockFile: one process at a time uses a store directory.

The lock is an exclusive, non-blocking flock on the directory's lock file, which then holds the
owner's pid (for a person looking; the flock is what excludes). The kernel drops the flock when
the process dies, so a crash never leaves the directory locked.
"""

from __future__ import annotations

import fcntl
import os

from store.errors import StoreLocked


class StoreLockFile:
    def __init__(self, root_dir: str, path: str) -> None:
        self.root_dir = root_dir
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory); StoreLocked when another process holds it. No-op when held."""
        if self._fd is not None:
            return
        os.makedirs(self.root_dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreLocked(f"{self.root_dir} is used by another process (lock file held)") from exc
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock; no-op when not held."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
