"""The raw-disk baseline of the store benches: records appended to a plain file with os.write."""

from __future__ import annotations

import os
import resource
import time


def raw_append(path: str, record: bytes, seconds: float, sync: bool) -> tuple[float, float]:
    """Appends of `record` to a new file at `path` for `seconds`, each followed by fdatasync when
    `sync`: (appends per second, CPU microseconds per append of the calling thread). The file is
    removed afterwards."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    count = 0
    deadline = time.perf_counter() + seconds
    start, cpu = time.perf_counter(), time.thread_time()
    try:
        while time.perf_counter() < deadline:
            os.write(fd, record)
            if sync:
                os.fdatasync(fd)
            count += 1
        used = time.thread_time() - cpu
    finally:
        os.close(fd)
        os.unlink(path)
    return count / (time.perf_counter() - start), used / max(1, count) * 1e6


def raw_append_rate(path: str, record: bytes, seconds: float, sync: bool) -> float:
    """Appends per second of `raw_append`."""
    return raw_append(path, record, seconds, sync)[0]


def raw_append_system(path: str, record: bytes, seconds: float) -> tuple[float, float, float]:
    """`raw_append` with fdatasync, its CPU split: (appends per second, CPU microseconds per append, of which
    system CPU) of the calling thread (getrusage)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    count = 0
    deadline = time.perf_counter() + seconds
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
    try:
        while time.perf_counter() < deadline:
            os.write(fd, record)
            os.fdatasync(fd)
            count += 1
        done = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        os.close(fd)
        os.unlink(path)
    system = done.ru_stime - used.ru_stime
    total = system + done.ru_utime - used.ru_utime
    return count / (time.perf_counter() - start), total / max(1, count) * 1e6, system / max(1, count) * 1e6
