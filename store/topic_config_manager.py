"""TopicConfigManager: each topic's queue counts and permission, persisted as config/topics.json."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import asdict, dataclass

from store.errors import MetadataCorrupt, TopicInvalid
from store.json_file import read_json, write_json_atomically
from store.message import topic_problem

log = logging.getLogger("tidemq.store")

PERM_READ = "r"
PERM_WRITE = "w"
VALID_PERMS = frozenset({"r", "w", "rw", ""})


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: str = "rw"

    def is_readable(self) -> bool:
        return PERM_READ in self.perm

    def is_writable(self) -> bool:
        return PERM_WRITE in self.perm


class TopicConfigManager:
    def __init__(self, config_dir: str, max_queue_nums: int) -> None:
        self.path = os.path.join(config_dir, "topics.json")
        self.max_queue_nums = max_queue_nums
        self._topics: dict[str, TopicConfig] = {}
        self.version = 0  # bumped on every change, so watchers (replication) compare one integer
        self._lock = threading.Lock()  # serializes changes and their persistence (rare, off the hot path)

    def load(self) -> bool:
        """Read topics.json (or its .bak); False when neither exists. MetadataCorrupt when unreadable."""
        data = read_json(self.path)
        if data is None:
            return False
        try:
            topics = {name: TopicConfig(**value) for name, value in data.get("topics", {}).items()}
        except (TypeError, AttributeError) as exc:
            raise MetadataCorrupt(f"{self.path}: {exc}") from exc
        self._topics = topics
        return True

    def load_or_rebuild(self, queue_ids_on_disk: dict[str, list[int]]) -> None:
        """Load; when topics.json (and its .bak) is missing or unreadable while consume queues hold
        data, rebuild it from them (queue count = highest queue id + 1, permission rw) and say so at
        WARNING. Unreadable with nothing to rebuild from raises MetadataCorrupt: never start empty."""
        counts = {topic: max(ids) + 1 for topic, ids in queue_ids_on_disk.items() if ids}
        try:
            if self.load():
                return
            reason = "is missing"
        except MetadataCorrupt as exc:
            if not counts:
                raise
            reason = f"cannot be read ({exc})"
        if not counts:
            return  # a new store
        rebuilt = self.rebuild(counts)
        log.warning(
            "%s %s; rebuilt %d topic(s) from the consume queues on disk (queue count = highest queue id + 1, permission rw): %s",
            self.path, reason, len(rebuilt), ", ".join(f"{t.topic_name}:{t.read_queue_nums}" for t in rebuilt),
        )  # fmt: skip

    def rebuild(self, queue_counts: dict[str, int]) -> list[TopicConfig]:
        """Replace the table by read-write topics with these queue counts (capped) and persist it."""
        topics = {
            name: TopicConfig(name, min(count, self.max_queue_nums), min(count, self.max_queue_nums))
            for name, count in queue_counts.items()
            if topic_problem(name) is None and count > 0
        }
        with self._lock:
            self._topics = topics
            self.version += 1
            self._persist_locked()
        return sorted(topics.values(), key=lambda t: t.topic_name)

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.topic_name)

    def create_or_update(self, topic: str, queues: int, perm: str = "rw") -> TopicConfig:
        problem = topic_problem(topic)
        if problem:
            raise TopicInvalid(problem)
        if not 1 <= queues <= self.max_queue_nums:
            raise ValueError(f"queues must be in 1..{self.max_queue_nums}")
        if perm not in VALID_PERMS:
            raise ValueError("perm must be one of r, w, rw")
        tc = TopicConfig(topic, queues, queues, perm)
        with self._lock:
            self._topics = {**self._topics, topic: tc}
            self.version += 1
            self._persist_locked()
        return tc

    def delete(self, topic: str) -> bool:
        with self._lock:
            if topic not in self._topics:
                return False
            topics = dict(self._topics)
            del topics[topic]
            self._topics = topics
            self.version += 1
            self._persist_locked()
        return True

    def _persist_locked(self) -> None:
        """Caller holds `_lock`."""
        write_json_atomically(self.path, {"topics": {name: asdict(tc) for name, tc in self._topics.items()}})
