"""TopicConfigManager: each topic's queue counts and permission: state records in the log, and config/topics.json.

Every change is a record of the state topic (store/state/state_log.py), applied in log order on the master
and on its slaves; topics.json is the table's local snapshot, written in the background with
`stateLogOffset` (the first record it lacks), so creating a topic costs one record whatever the
number of topics. A deletion's record also tells the store to drop the topic's queues and to
remember where the log stood (store.metadata.deleted_topic_table), on every node that applies it.

The file has RocketMQ's shape (TopicConfigManager's TopicConfigSerializeWrapper, under
`<store root>/config/topics.json` as BrokerPathConfigHelper.getTopicConfigPath names it): a
`topicConfigTable` of TopicConfig objects and a `dataVersion` whose counter grows with every
change (DataVersion.nextVersion), so a RocketMQ broker loads the topics tidemq made and the
reverse. `perm` is RocketMQ's PermName bits (4 read, 2 write, 1 inherit, 8 priority); tidemq
keeps its "rw"/"r"/"w"/"" form in memory and in the HTTP API, and keeps the bits it does not use
(inherit, priority) and the fields it does not use (topicFilterType, topicSysFlag, order) as
they were read. A file in tidemq's former shape (`{"topics": {...}}`, snake_case fields) is
migrated when loaded, with one log line. docs/layouts.md has the shape.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from store.codec.message import topic_problem
from store.disk.json_file import read_json, write_json_atomically
from store.errors import MetadataCorrupt, TopicConfigInvalid, TopicInvalid
from store.state.data_version import data_version_counter, versioned_document
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

if TYPE_CHECKING:
    from store.metadata.rocketmq_system_topics import SystemTopics

log = logging.getLogger("tidemq.store")

PERM_READ = "r"
PERM_WRITE = "w"
VALID_PERMS = frozenset({"r", "w", "rw", ""})
# RocketMQ's PermName bits.
PERM_BIT_READ = 4
PERM_BIT_WRITE = 2
PERM_BITS_KEPT = 0x8 | 0x1  # priority and inherit: tidemq ignores them but writes them back as read
DEFAULT_TOPIC_FILTER_TYPE = "SINGLE_TAG"


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: str = "rw"
    # RocketMQ's fields tidemq does not use, written back as a RocketMQ file had them.
    perm_extra_bits: int = 0
    topic_filter_type: str = DEFAULT_TOPIC_FILTER_TYPE
    topic_sys_flag: int = 0
    order: bool = False
    attributes: tuple[tuple[str, str], ...] = ()  # RocketMQ 5's topic attributes (e.g. message.type), as read

    def is_readable(self) -> bool:
        return PERM_READ in self.perm

    def is_writable(self) -> bool:
        return PERM_WRITE in self.perm

    def perm_bits(self) -> int:
        """The permission as RocketMQ's PermName bits."""
        read = PERM_BIT_READ if self.is_readable() else 0
        return read | (PERM_BIT_WRITE if self.is_writable() else 0) | self.perm_extra_bits

    def to_rocketmq(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name, "readQueueNums": self.read_queue_nums, "writeQueueNums": self.write_queue_nums,
            "perm": self.perm_bits(), "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
            "order": self.order, "attributes": dict(self.attributes),
        }  # fmt: skip

    @classmethod
    def from_rocketmq(cls, name: str, doc: Any) -> TopicConfig:
        """A TopicConfig object of RocketMQ's topics.json; MetadataCorrupt when a field has the wrong type."""
        if type(doc) is not dict:
            raise MetadataCorrupt(f"topics.json: topic {name!r} is not an object")
        read, write, perm = doc.get("readQueueNums", 0), doc.get("writeQueueNums", 0), doc.get("perm", PERM_BIT_READ | PERM_BIT_WRITE)
        filter_type, sys_flag, order = (
            doc.get("topicFilterType", DEFAULT_TOPIC_FILTER_TYPE),
            doc.get("topicSysFlag", 0),
            doc.get("order", False),
        )
        attributes = doc.get("attributes") or {}  # absent (RocketMQ 4) or null: none
        if (
            not all(type(v) is int and v >= 0 for v in (read, write, perm, sys_flag))
            or type(filter_type) is not str
            or type(order) is not bool
            or not is_attribute_map(attributes)
        ):
            raise MetadataCorrupt(f"topics.json: topic {name!r} has a field of the wrong type")
        letters = ("r" if perm & PERM_BIT_READ else "") + ("w" if perm & PERM_BIT_WRITE else "")
        return cls(name, read, write, letters, perm & PERM_BITS_KEPT, filter_type, sys_flag, order, tuple(attributes.items()))

    @classmethod
    def from_former_shape(cls, name: str, doc: Any) -> TopicConfig:
        """An entry of tidemq's former topics.json (`{"topics": {name: {snake_case fields}}}`)."""
        try:
            tc = cls(**doc)
        except TypeError as exc:
            raise MetadataCorrupt(f"topics.json: topic {name!r}: {exc}") from exc
        if tc.perm not in VALID_PERMS or type(tc.read_queue_nums) is not int or type(tc.write_queue_nums) is not int:
            raise MetadataCorrupt(f"topics.json: topic {name!r} has a field of the wrong type")
        return tc


def is_attribute_map(value: Any) -> bool:
    """Whether `value` is RocketMQ's attributes field (a Map<String, String>) as JSON."""
    return type(value) is dict and all(type(v) is str for v in value.values())


class TopicConfigManager(StateTable):
    """The topics; each change is a state record (store/state/state_log.py) applied in log order, so a slave
    and a new master hold the same table. topics.json is the local snapshot, written in the
    background (StateSnapshotService), so a change costs one record, not a rewrite of the file."""

    kind = StateKind.TOPICS

    def __init__(self, config_dir: str, max_queue_nums: int, system_topics: SystemTopics | None = None) -> None:
        super().__init__()
        self.path = os.path.join(config_dir, "topics.json")
        self.max_queue_nums = max_queue_nums
        # RocketMQ's system topics (store.metadata.rocketmq_system_topics): written as its broker writes them,
        # those read from the file kept apart (as read) from tidemq's topics.
        self.system_topics = system_topics
        self._kept_apart: dict[str, TopicConfig] = {}
        # Changed in place under `_lock` (one change costs O(1)); `get` reads without it, every walk under it.
        self._topics: dict[str, TopicConfig] = {}
        self.data_version_counter = 0  # the file's dataVersion.counter: grows with every write, across restarts
        # Set by the store: a deletion was applied (topic, the record's commitlog offset); runs where the record is applied.
        self.on_deleted_locked: Callable[[str, int], None] = lambda topic, cutoff: None
        # (queue counts on disk, why topics.json was not read, its error): load_or_rebuild's case for settle().
        self._unsettled: tuple[dict[str, int], str, MetadataCorrupt | None] | None = None

    def load(self) -> bool:
        """Read topics.json (or its .bak); False when neither exists. MetadataCorrupt when unreadable."""
        data = read_json(self.path)
        if data is None:
            return False
        if type(data) is not dict:
            raise MetadataCorrupt(f"{self.path} is not an object")
        table, former = data.get("topicConfigTable"), data.get("topics")
        if type(table) is dict:
            read = {name: TopicConfig.from_rocketmq(name, doc) for name, doc in table.items()}
            apart = {name for name in read if self._is_kept_apart(name)}
            self._kept_apart = {name: tc for name, tc in read.items() if name in apart}
            self._topics = {name: tc for name, tc in read.items() if name not in apart}
            self.data_version_counter = data_version_counter(data)
            covered = data.get(STATE_OFFSET_FIELD, 0)
            self.loaded(covered if type(covered) is int else 0)
        elif type(former) is dict:
            self._topics = {name: TopicConfig.from_former_shape(name, doc) for name, doc in former.items()}
            self.loaded(0)
            self.snapshot_covers = -1  # not in the log yet
            self.persist()
            log.info("%s: migrated %d topic(s) from tidemq's former shape to RocketMQ's topicConfigTable", self.path, len(self._topics))
        else:
            raise MetadataCorrupt(f"{self.path} has no topicConfigTable object")
        return True

    def load_or_rebuild(self, queue_ids_on_disk: dict[str, list[int]]) -> None:
        """Load topics.json; when it (and its .bak) is missing or unreadable, what to do is decided by
        `settle()` once the state records are read: the log's topic records, else the consume queues."""
        counts = {topic: max(ids) + 1 for topic, ids in queue_ids_on_disk.items() if ids}
        try:
            if self.load():
                return
            self._unsettled = (counts, "is missing", None)
        except MetadataCorrupt as exc:
            self._unsettled = (counts, f"cannot be read ({exc})", exc)

    def settle(self) -> None:
        """After the state records were applied (StateLog.load): a table with no local file takes its
        base from the log's topic records; without any, it is rebuilt from the consume queues on disk
        (queue count = highest queue id + 1, permission rw), with a WARNING. Unreadable with nothing to
        rebuild from raises MetadataCorrupt: never start empty."""
        if self._unsettled is None:
            return
        counts, reason, error = self._unsettled
        self._unsettled = None
        if self.base_from_log:
            log.warning("%s %s; its %d topic(s) were rebuilt from the state records in the log", self.path, reason, self.count())
            self.persist()
            return
        if not counts:
            if error is not None:
                raise error
            return  # a new store
        rebuilt = self.rebuild(counts)
        log.warning(
            "%s %s; rebuilt %d topic(s) from the consume queues on disk (queue count = highest queue id + 1, permission rw): %s",
            self.path, reason, len(rebuilt), ", ".join(f"{t.topic_name}:{t.read_queue_nums}" for t in rebuilt),
        )  # fmt: skip

    def rebuild(self, queue_counts: dict[str, int]) -> list[TopicConfig]:
        """Replace the table by read-write topics with these queue counts (capped) and persist it (load time)."""
        topics = [
            TopicConfig(name, min(count, self.max_queue_nums), min(count, self.max_queue_nums))
            for name, count in queue_counts.items()
            if topic_problem(name) is None and count > 0 and not self._is_kept_apart(name)
        ]
        with self._lock:
            self.restore_locked([t.to_rocketmq() for t in topics])
            self.snapshot_covers = -1  # not in the log: the next snapshot carries it
        self.persist()
        return sorted(topics, key=lambda t: t.topic_name)

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def all(self) -> list[TopicConfig]:
        with self._lock:  # changed in place under it: a copy per change would cost O(topics)
            topics = list(self._topics.values())
        return sorted(topics, key=lambda t: t.topic_name)

    def count(self) -> int:
        return len(self._topics)

    def create_or_update(self, topic: str, queues: int, perm: str = "rw") -> TopicConfig:
        """Create or change a topic (blocking: recorded durably); TopicInvalid, TopicConfigInvalid, StateWriteFailed."""
        problem = topic_problem(topic)
        if problem:
            raise TopicInvalid(problem)
        if not 1 <= queues <= self.max_queue_nums:
            raise TopicConfigInvalid(f"queues must be in 1..{self.max_queue_nums}")
        if perm not in VALID_PERMS:
            raise TopicConfigInvalid("perm must be one of r, w, rw")
        current = self._topics.get(topic)
        # The API has one queue count: it sets both; RocketMQ's fields tidemq does not use are kept.
        tc = (
            TopicConfig(topic, queues, queues, perm)
            if current is None
            else replace(current, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
        )
        self.record({"put": tc.to_rocketmq()})
        return tc

    def deletion(self, topic: str) -> dict[str, Any]:
        """The record of a topic's deletion (its apply drops the config and calls `on_deleted_locked`)."""
        return {"del": topic}

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        doc = payload.get("put")
        if type(doc) is dict:
            tc = TopicConfig.from_rocketmq(str(doc.get("topicName")), doc)
            self._topics[tc.topic_name] = tc
        name = payload.get("del")
        if type(name) is str:
            self._topics.pop(name, None)
            if log_offset >= 0:
                self.on_deleted_locked(name, log_offset)

    def rows_locked(self) -> list[Any]:
        return [tc.to_rocketmq() for tc in self._topics.values()]

    def row_count_locked(self) -> int:
        return len(self._topics)

    def restore_locked(self, rows: list[Any]) -> None:
        topics = {}
        for doc in rows:
            tc = TopicConfig.from_rocketmq(str(doc.get("topicName")), doc)
            topics[tc.topic_name] = tc
        self._topics = topics

    def _is_kept_apart(self, name: str) -> bool:
        return self.system_topics is not None and self.system_topics.kept_apart(name)

    def persist(self) -> None:
        """Write topics.json from the table. Each write is a new dataVersion (RocketMQ's DataVersion.nextVersion).

        RocketMQ's system topics first, as read or, when the file had none, as its broker makes them
        at start; then the served topics (which win for the one group consumption creates, the revive topic)."""
        startup = self.system_topics.startup if self.system_topics is not None else ()
        with self._lock:
            self.data_version_counter += 1
            table = {tc.topic_name: tc.to_rocketmq() for tc in startup}
            table.update((name, tc.to_rocketmq()) for name, tc in self._kept_apart.items())
            table.update((name, tc.to_rocketmq()) for name, tc in self._topics.items())
            covered, counter = self.covered, self.data_version_counter
            self.dirty = False
        document = versioned_document("topicConfigTable", table, counter)
        document[STATE_OFFSET_FIELD] = covered
        try:
            write_json_atomically(self.path, document)
        except OSError:
            self.dirty = True
            raise
