"""StoreLockFile: one process at a time uses a store directory.

Two locks on the store root's `lock` file, both exclusive and non-blocking, both taken before
anything else is opened:
- an flock, which excludes another tidemq store object even inside the same process (flock
  belongs to the open file, so a second open of the file conflicts);
- a POSIX record lock (fcntl F_SETLK, write lock) over the whole file, which is what RocketMQ's
  DefaultMessageStore.start takes with `FileChannel.tryLock(0, 1, false)` on `<store root>/lock`
  (the JVM implements it with fcntl on Linux). Our range covers RocketMQ's byte 0, so a RocketMQ
  broker and tidemq can never open one store at once, whichever came first. A record lock
  belongs to the process, not the file descriptor, and the process drops it when it closes any
  descriptor of the file: this module is the only code that opens the lock file, and a second
  store object of this process on a held file is refused before the file is opened (`_HELD`).
The file then holds the owner's pid (for a person looking; the locks are what exclude). The
kernel drops both locks when the process dies, so a crash never leaves the directory locked; it
may drop them a moment after the dead process was reaped, so a lock whose recorded owner is no
longer alive is tried again for up to DEAD_OWNER_WAIT_MS (a broker restarted right after a kill).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

from store.errors import StoreLocked

# (device, inode) of the lock files this process holds: opening one again and closing it would
# drop the process's record lock, so a second acquire is refused without opening the file.
_HELD: set[tuple[int, int]] = set()
_HELD_LOCK = threading.Lock()  # leaf lock
# How long a lock whose recorded owner is dead is tried again before StoreLocked.
DEAD_OWNER_WAIT_MS = 2_000
DEAD_OWNER_RETRY_MS = 20


class StoreLockFile:
    def __init__(self, root_dir: str, path: str) -> None:
        self.root_dir = root_dir
        self.path = path
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take both locks (creating the directory); StoreLocked when another process or store
        object holds either. No-op when held."""
        if self._fd is not None:
            return
        os.makedirs(self.root_dir, exist_ok=True)
        with _HELD_LOCK:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                pass
            else:
                if (st.st_dev, st.st_ino) in _HELD:
                    raise StoreLocked(f"{self.root_dir} is used by another process (lock file held)")
            self._take_locked()

    def _take_locked(self) -> None:
        """Open the file and take both locks; the caller holds _HELD_LOCK."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + DEAD_OWNER_WAIT_MS / 1000.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if time.monotonic() < deadline and not _owner_alive(fd):
                    time.sleep(DEAD_OWNER_RETRY_MS / 1000.0)  # its owner is dead: the kernel is about to drop the lock
                    continue
                os.close(fd)
                raise StoreLocked(f"{self.root_dir} is used by another process (lock file held)") from exc
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # length 0: the whole file, byte 0 included
        except OSError as exc:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise StoreLocked(
                f"{self.root_dir} is used by another process (a record lock on {self.path}, as a RocketMQ broker takes)"
            ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        st = os.fstat(fd)
        self._key = (st.st_dev, st.st_ino)
        _HELD.add(self._key)
        self._fd = fd

    def release(self) -> None:
        """Drop both locks; no-op when not held."""
        with _HELD_LOCK:
            if self._fd is None:
                return
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            if self._key is not None:
                _HELD.discard(self._key)
                self._key = None


def _owner_alive(fd: int) -> bool:
    """Whether the pid the lock file records names a live process (True when it cannot be told)."""
    try:
        pid = int(os.pread(fd, 32, 0).strip() or b"0")
    except (OSError, ValueError):
        return True
    if pid <= 0 or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
