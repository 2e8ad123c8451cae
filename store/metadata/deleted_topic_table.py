"""DeletedTopicTable: where the commitlog ended when each topic was deleted (config/deletedTopics.json).

A deleted topic's messages stay in the commitlog until they age out. Whatever walks the
log after the deletion — a dispatch that lagged behind it, the re-dispatch of a crash
recovery, a key query over the index — must not bring them back into a topic of the same
name created later. Every message of the deleted incarnation lies below its cutoff (the
log's end at the deletion, taken under the put lock), so "offset < cutoff" tells them apart.

The table is written atomically before `delete_topic` answers, so an answered deletion
survives a crash; a cutoff is dropped once the commitlog's minimum offset passes it (its
messages are gone). The dict is replaced, never mutated, so readers need no lock.
"""

from __future__ import annotations

import os

from store.disk.json_file import read_json, write_json_atomically
from store.errors import MetadataCorrupt


class DeletedTopicTable:
    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "deletedTopics.json")
        self.cutoffs: dict[str, int] = {}  # topic -> commitlog end at its deletion

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        try:
            self.cutoffs = {str(topic): int(end) for topic, end in data["cutoffs"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MetadataCorrupt(f"{self.path}: {exc}") from exc

    def cutoff(self, topic: str) -> int:
        """The commitlog offset below which `topic`'s messages belong to a deleted incarnation; -1 for none."""
        return self.cutoffs.get(topic, -1)

    def record_locked(self, topic: str, log_end: int, log_min: int) -> None:
        """Remember a deletion (caller holds the put lock); cutoffs whose messages are gone are dropped."""
        cutoffs = {t: end for t, end in self.cutoffs.items() if end > log_min}
        cutoffs[topic] = max(log_end, cutoffs.get(topic, -1))
        self.cutoffs = cutoffs

    def persist(self) -> None:
        write_json_atomically(self.path, {"cutoffs": self.cutoffs})
