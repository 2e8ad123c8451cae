"""Facts about the machine a comparison ran on, measured in the same run as the figures.

The disk figures come from the benchmark's own temporary directory (the one the peers store
into): a sequential write of `write_mib` MiB in 1 MiB chunks ending with one fsync, and the
mean time of a 4 KiB write + fsync (what a synchronous flush of a small message costs).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

# Size of one write of the sequential disk test.
CHUNK_BYTES = 1024 * 1024
# Small write + fsync rounds of the fsync latency test.
FSYNC_ROUNDS = 200
# Size of one write of the fsync latency test.
FSYNC_WRITE_BYTES = 4096


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return float("nan")


def disk_write_mib_s(directory: Path, write_mib: int) -> float:
    """Sequential write of write_mib MiB with a final fsync; MiB/s."""
    path = directory / "disk-write.tmp"
    chunk = os.urandom(CHUNK_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(write_mib):
            os.write(fd, chunk)
        os.fsync(fd)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return write_mib / seconds


def fsync_us(directory: Path) -> float:
    """Mean microseconds of a 4 KiB append followed by fsync."""
    path = directory / "fsync.tmp"
    block = b"\0" * FSYNC_WRITE_BYTES
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(FSYNC_ROUNDS):
            os.write(fd, block)
            os.fsync(fd)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return seconds / FSYNC_ROUNDS * 1e6


def describe(directory: Path, write_mib: int) -> dict[str, object]:
    return {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(memory_gib(), 1),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "disk_write_mib": write_mib,
        "disk_write_mib_s": round(disk_write_mib_s(directory, write_mib), 1),
        "fsync_4k_us": round(fsync_us(directory), 1),
        "load_start": load_average(),
    }


def load_average() -> str:
    """The 1/5/15-minute load averages: the machine is shared, so a reader can judge the noise."""
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"
