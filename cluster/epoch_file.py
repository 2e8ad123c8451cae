"""EpochFile: the epochs this broker's commitlog went through, and where each began (RocketMQ 5's epoch file).

One JSON file in the store directory, `cluster_epochs.json`: `[{"epoch": E, "start_offset": S}, ...]`
in increasing epoch order. An entry is added when this broker wins an election (S: its log's end
then) and when, as a slave, it first streams from a master of a newer epoch (S: that epoch's start).
It is written to a temporary file, fsynced and renamed, so a crash leaves the old or the new list.

At start, `truncation_offset` compares it with the group's epoch history in etcd: bytes past the
start of the first epoch newer than this broker's last one were never the group's (a deposed
master's unreplicated tail) and are cut before the store recovers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

FILE_NAME = "cluster_epochs.json"
# Entries kept: older ones are never needed to find a cut (only the last one is compared).
MAX_ENTRIES = 1_000


@dataclass(frozen=True, slots=True)
class Epoch:
    epoch: int
    start_offset: int


class EpochFile:
    def __init__(self, store_dir: str) -> None:
        self.path = os.path.join(store_dir, FILE_NAME)
        self.entries: list[Epoch] = self._read()

    def _read(self) -> list[Epoch]:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return []
        return [Epoch(int(e["epoch"]), int(e["start_offset"])) for e in raw]

    def last(self) -> Epoch | None:
        return self.entries[-1] if self.entries else None

    def append(self, epoch: int, start_offset: int) -> None:
        """Record `epoch` (newer than the last one; an epoch already recorded is ignored)."""
        last = self.last()
        if last is not None and epoch <= last.epoch:
            return
        self.entries = [*self.entries, Epoch(epoch, start_offset)][-MAX_ENTRIES:]
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump([{"epoch": e.epoch, "start_offset": e.start_offset} for e in self.entries], f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def truncation_offset(local: Epoch | None, group_epochs: list[Epoch]) -> int | None:
    """Where this broker's log must end before it rejoins: the start of the group's first epoch newer
    than `local` (the last epoch it took part in); None when there is none, or it never took part."""
    if local is None:
        return None
    newer = [e for e in group_epochs if e.epoch > local.epoch]
    return min(newer, key=lambda e: e.epoch).start_offset if newer else None
