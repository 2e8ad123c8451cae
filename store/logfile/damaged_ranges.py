"""DamagedRanges: the commitlog byte ranges a recovery found damaged, kept in damaged_ranges.json at the store's root.

Reads skip them (their queue entries are counted, not served) and later recoveries start from the table instead of
finding them again. The table is sorted and its ranges never overlap (`add` merges); it is written whole, atomically,
each time it changes.
"""

from __future__ import annotations

import bisect
import logging

from store.disk.json_file import read_json, write_json_atomically
from store.errors import MetadataCorrupt

log = logging.getLogger("tidemq.store")

Ranges = tuple[tuple[int, int], ...]


class DamagedRanges:
    def __init__(self, path: str, ranges: Ranges = ()) -> None:
        self.path = path  # damaged_ranges.json
        self.ranges: Ranges = ranges  # sorted [start, end) pairs, none overlapping

    def load(self, low: int) -> None:
        """Read the table, keeping the ranges that end past `low` (the log's first offset: older files are gone)."""
        try:
            data = read_json(self.path)
        except MetadataCorrupt as exc:
            log.error("%s; recovery finds the damaged ranges it scans again", exc)
            return
        if not isinstance(data, dict) or not isinstance(data.get("damaged"), list):
            return
        ranges = [(int(a), int(b)) for a, b in data["damaged"] if int(b) > max(low, int(a))]
        self.ranges = tuple(sorted(ranges))
        for start, end in self.ranges:
            log.error("commitlog bytes [%d, %d) are damaged (found by an earlier recovery); they are skipped", start, end)

    def add(self, start: int, end: int) -> bool:
        """Record [start, end) as damaged and persist the table; False when it was already known."""
        assert start < end, "a damaged range holds at least one byte"
        if any(a <= start and end <= b for a, b in self.ranges):
            return False
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.ranges, (start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.ranges = tuple(merged)
        write_json_atomically(self.path, {"damaged": [list(r) for r in self.ranges]})
        return True

    def cut_at(self, offset: int) -> None:
        """The log was cut at `offset`: bytes past it will hold new messages, so no range may cover them."""
        ranges = tuple((a, min(b, offset)) for a, b in self.ranges if a < offset)
        if ranges != self.ranges:
            self.ranges = ranges
            write_json_atomically(self.path, {"damaged": [list(r) for r in ranges]})

    def end_of(self, offset: int) -> int | None:
        """The end of the damaged range holding `offset`, None when `offset` is not damaged."""
        ranges = self.ranges
        if not ranges:
            return None
        i = bisect.bisect_right(ranges, (offset, 1 << 62)) - 1
        if i >= 0 and ranges[i][0] <= offset < ranges[i][1]:
            return ranges[i][1]
        return None

    def next_start(self, offset: int) -> int | None:
        """The start of the first damaged range at or after `offset`, None when there is none."""
        ranges = self.ranges
        if not ranges:
            return None
        i = bisect.bisect_left(ranges, (offset, -1))
        return ranges[i][0] if i < len(ranges) else None

    def byte_count(self) -> int:
        return sum(b - a for a, b in self.ranges)
