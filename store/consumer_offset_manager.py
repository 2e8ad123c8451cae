"""ConsumerOffsetManager: committed offsets per group, topic and queue.

Durability: `commit_offsets` returns only after the commits are recorded in
config/consumerOffset.log (store/consumer_offset_log.py): written (survives a process
kill) and, when the store is SYNC_FLUSH, fdatasync'd (survives a machine crash).
`persist()` compacts: it snapshots the table into config/consumerOffset.json (written
atomically) and empties the log; ConsumerOffsetFlushService calls it every
`flush_consumer_offset_interval_ms` when something changed, and the store at shutdown.
`load()` reads the snapshot and replays the log over it. The snapshot has ConsumerOffsetManager's
shape, `{"offsetTable": {"topic@group": {"<queue id>": offset}}}`; RocketMQ's own file, with the
queue ids unquoted (fastjson), is read too (store.json_file).

Lock order: docs/concurrency.md. `_lock` guards the table and is never held across I/O; the
log's write lock is held across one os.write so that the table and the log see commits in the
same order.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from store.consumer_offset_log import ConsumerOffsetLog
from store.errors import MetadataCorrupt
from store.json_file import read_json, write_json_atomically

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config_dir: str, sync: bool = False) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.log = ConsumerOffsetLog(os.path.join(config_dir, "consumerOffset.log"), sync)
        self._offsets: dict[str, dict[int, int]] = {}  # "topic@group" -> queue id -> offset
        self._lock = threading.Lock()  # guards the table; never held across I/O
        self._persist_lock = threading.Lock()  # one compaction at a time
        self._dirty = False

    def load(self) -> None:
        data = read_json(self.path)
        if data is not None:
            try:
                table = data.get("offsetTable", {})
                self._offsets = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in table.items()}
            except (TypeError, ValueError, AttributeError) as exc:
                raise MetadataCorrupt(f"{self.path}: {exc}") from exc
        replayed = 0
        for record in self.log.replay():
            self._apply(record)
            replayed += 1
        self._dirty = replayed > 0
        self.log.open()

    def _apply(self, record: dict[str, Any]) -> None:
        """Apply one log record to the table (load time: one thread, no lock needed)."""
        commits = record.get("c")
        if isinstance(commits, list):
            for item in commits:
                if isinstance(item, list) and len(item) == 3:
                    key, queue_id, offset = item
                    self._offsets.setdefault(str(key), {})[int(queue_id)] = int(offset)
        topic = record.get("rt")
        if isinstance(topic, str):
            self._remove_topic_locked(topic)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_offsets(group, [(topic, queue_id, offset)])

    def commit_offsets(self, group: str, commits: list[tuple[str, int, int]]) -> None:
        """Record commits (topic, queue id, offset) durably, then return. Blocking file I/O."""
        rows = [(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", queue_id, offset) for topic, queue_id, offset in commits]

        def apply() -> None:
            with self._lock:
                for key, queue_id, offset in rows:
                    self._offsets.setdefault(key, {})[queue_id] = offset
                self._dirty = True

        self.log.append({"c": rows}, apply)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        queues = self._offsets.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._offsets.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def topics_by_group(self) -> dict[str, list[str]]:
        """Every group with the topics it committed offsets of, sorted."""
        out: dict[str, list[str]] = {}
        for key in sorted(self._offsets):
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            out.setdefault(group, []).append(topic)
        return out

    def groups(self) -> list[str]:
        return sorted({key.split(TOPIC_GROUP_SEPARATOR, 1)[1] for key in self._offsets})

    def remove_topic(self, topic: str) -> None:
        def apply() -> None:
            with self._lock:
                self._remove_topic_locked(topic)
                self._dirty = True

        self.log.append({"rt": topic}, apply)

    def _remove_topic_locked(self, topic: str) -> None:
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        self._offsets = {k: v for k, v in self._offsets.items() if not k.startswith(prefix)}

    def persist(self) -> None:
        """Compact: snapshot the table into the JSON file and empty the log."""
        with self._persist_lock:
            snapshot: dict[str, dict[str, int]] = {}

            def take_snapshot() -> None:
                # Runs with the log's write lock held: no commit is between the snapshot and the rotation.
                with self._lock:
                    snapshot.update({key: {str(q): o for q, o in queues.items()} for key, queues in self._offsets.items()})
                    self._dirty = False

            self.log.rotate(take_snapshot)
            write_json_atomically(self.path, {"offsetTable": snapshot})
            self.log.drop_old()

    def persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()

    def close(self) -> None:
        self.log.close()
