"""ConsumerOffsetManager: committed offsets per group, topic and queue (config/consumerOffset.json).

Commits are kept in memory and persisted atomically by `persist()`, which the store
calls every `persist_interval` and at shutdown, and which the front end may call after
a commit it must make durable at once.
"""

from __future__ import annotations

import os
import threading

from store.errors import MetadataCorrupt
from store.json_file import read_json, write_json_atomically

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self._offsets: dict[str, dict[int, int]] = {}  # "topic@group" -> queue id -> offset
        self._lock = threading.Lock()  # guards the table; never held across I/O
        self._persist_lock = threading.Lock()  # one writer of the file at a time
        self._dirty = False

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        try:
            table = data.get("offsetTable", {})
            self._offsets = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in table.items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise MetadataCorrupt(f"{self.path}: {exc}") from exc

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        with self._lock:
            self._offsets.setdefault(key, {})[queue_id] = offset
            self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        queues = self._offsets.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def groups(self) -> list[str]:
        return sorted({key.split(TOPIC_GROUP_SEPARATOR, 1)[1] for key in self._offsets})

    def remove_topic(self, topic: str) -> None:
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        with self._lock:
            self._offsets = {k: v for k, v in self._offsets.items() if not k.startswith(prefix)}
            self._dirty = True

    def persist(self) -> None:
        with self._persist_lock:
            with self._lock:
                snapshot = {key: {str(q): o for q, o in queues.items()} for key, queues in self._offsets.items()}
                self._dirty = False
            write_json_atomically(self.path, {"offsetTable": snapshot})

    def persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()
