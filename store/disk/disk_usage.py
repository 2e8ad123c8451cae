"""Disk usage probes: how full the partition holding a path is.

A probe is any callable `probe(path) -> ratio` answering the used share of the
partition (0.0..1.0), or a negative number when it cannot tell. The cleanup service
takes one as a parameter so tests can drive the disk-ratio branches with a fake.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger("tidemq.store")

DiskUsageProbe = Callable[[str], float]
UNKNOWN_RATIO = -1.0


def _existing(path: str) -> str:
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def disk_free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still allocate on the partition holding `path`; 0 when unreadable."""
    try:
        st = os.statvfs(_existing(path))
    except OSError as exc:
        log.warning("cannot measure free space of %s: %s", path, exc)
        return 0
    return st.f_bavail * st.f_frsize


def disk_used_ratio(path: str) -> float:
    """Used share of the partition holding `path`, out of what the broker may use: used / (used + available),
    as `df` shows it.

    Available is f_bavail, the blocks an unprivileged writer may still allocate, not f_bfree: the blocks
    reserved for root (and a quota's limit) are no room for the broker, so a disk it can no longer write
    to reads 1.0 here. A path that does not exist yet is measured at its nearest existing parent; an
    unreadable partition answers UNKNOWN_RATIO.
    """
    try:
        st = os.statvfs(_existing(path))
    except OSError as exc:
        log.warning("cannot measure disk usage of %s: %s", path, exc)
        return UNKNOWN_RATIO
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    if st.f_blocks <= 0 or usable <= 0:
        return UNKNOWN_RATIO
    return used / usable
