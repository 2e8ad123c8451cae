"""Process figures for /metrics, read from /proc/self when the page is rendered (no per-request work).

CPU time, resident and virtual memory, threads and start time come from /proc/self/stat, open
descriptors from listing /proc/self/fd, their limit from RLIMIT_NOFILE. Where /proc is missing
(not Linux) the page simply has none of them.
"""

from __future__ import annotations

import os
import resource

# (name, kind, help, value)
Sample = tuple[str, str, str, float]
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _boot_time_s() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def process_samples() -> list[Sample]:
    """The tidemq_process_* samples; empty where /proc/self cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            text = f.read()
        open_fds = len(os.listdir("/proc/self/fd"))
        boot_s = _boot_time_s()
    except OSError:
        return []
    # The fields after the command name (which may hold spaces and parentheses); field n of proc(5) is rest[n - 3].
    rest = text[text.rindex(")") + 2 :].split()
    utime, stime, threads, start_ticks = int(rest[11]), int(rest[12]), int(rest[17]), int(rest[19])
    vsize, rss_pages = int(rest[20]), int(rest[21])
    soft_fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return [
        ("tidemq_process_cpu_seconds_total", "counter", "CPU time the process used (user and system)", (utime + stime) / TICKS_PER_S),
        ("tidemq_process_resident_memory_bytes", "gauge", "Resident memory (RSS)", rss_pages * PAGE_BYTES),
        ("tidemq_process_virtual_memory_bytes", "gauge", "Virtual memory (mapped store files included)", vsize),
        ("tidemq_process_open_fds", "gauge", "Open file descriptors", open_fds),
        ("tidemq_process_max_fds", "gauge", "Soft limit of open file descriptors (RLIMIT_NOFILE)", -1 if soft_fds < 0 else soft_fds),
        ("tidemq_process_threads", "gauge", "Threads of the process", threads),
        (
            "tidemq_process_start_time_seconds",
            "gauge",
            "When the process started (seconds since the epoch)",
            boot_s + start_ticks / TICKS_PER_S,
        ),
    ]
