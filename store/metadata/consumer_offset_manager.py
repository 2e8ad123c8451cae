"""ConsumerOffsetManager: committed offsets per group, topic and queue.

Durability and replication: a commit is a record of the state topic (store/state/state_log.py): it is
in the commitlog, applied in log order, and answered once the store's flush (and a SYNC_MASTER's
slaves) confirmed it, exactly like a message; a slave applies the same records, so a new master
resumes every group where it was. Records are `{"c": [[key, queue_id, offset], ...]}` for commits,
`{"rt": topic}` for the removal of a topic's offsets and `{"rg": group}` for a group's.

`config/consumerOffset.json` is this table's local snapshot, in ConsumerOffsetManager's shape
(`{"offsetTable": {"topic@group": {"<queue id>": offset}}}`, plus `stateLogOffset`: the first state
record it lacks), written by the StateSnapshotService when something changed and at shutdown;
a restart reads it and applies the records after it. RocketMQ's own file, with the queue ids
unquoted (fastjson), is read too (store.disk.json_file). A `consumerOffset.log` left by an older
version is applied once at load and removed after the next snapshot.

Lock order: docs/concurrency.md (the put lock, then `_lock`); `_lock` is never held across I/O.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from store.disk.json_file import read_json, write_json_atomically
from store.errors import MetadataCorrupt
from store.state.legacy_offset_log import read_legacy_offset_log, remove_legacy_offset_log
from store.state.state_log import StateChange
from store.state.state_table import STATE_OFFSET_FIELD, StateKind, StateTable

if TYPE_CHECKING:
    pass

log = logging.getLogger("tidemq.store")

TOPIC_GROUP_SEPARATOR = "@"
# Commits per record: with a topic and a group of at most 255 bytes each, a record stays below 64 KiB.
COMMITS_PER_RECORD = 100


class ConsumerOffsetManager(StateTable):
    kind = StateKind.CONSUMER_OFFSETS

    def __init__(self, config_dir: str) -> None:
        super().__init__()
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.legacy_log_path = os.path.join(config_dir, "consumerOffset.log")
        self._offsets: dict[str, dict[int, int]] = {}  # "topic@group" -> queue id -> offset

    def load(self) -> None:
        data = read_json(self.path)
        if data is not None:
            try:
                table = data.get("offsetTable", {})
                self._offsets = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in table.items()}
                covered = int(data.get(STATE_OFFSET_FIELD, 0))
            except (TypeError, ValueError, AttributeError) as exc:
                raise MetadataCorrupt(f"{self.path}: {exc}") from exc
            self.loaded(covered)
        for record in read_legacy_offset_log(self.legacy_log_path):
            self.apply_local(record)

    # StateTable --------------------------------------------------------------------------------

    def apply_locked(self, payload: dict[str, Any], log_offset: int = -1) -> None:
        commits = payload.get("c")
        if isinstance(commits, list):
            for item in commits:
                if isinstance(item, list) and len(item) == 3:
                    key, queue_id, offset = item
                    self._offsets.setdefault(str(key), {})[int(queue_id)] = int(offset)
        topic = payload.get("rt")
        if isinstance(topic, str):
            prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
            self._offsets = {k: v for k, v in self._offsets.items() if not k.startswith(prefix)}
        group = payload.get("rg")
        if isinstance(group, str):  # names hold no "@": a key ends in "@group" only for that group
            suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
            self._offsets = {k: v for k, v in self._offsets.items() if not k.endswith(suffix)}

    def rows_locked(self) -> list[Any]:
        return [[key, queue_id, offset] for key, queues in self._offsets.items() for queue_id, offset in queues.items()]

    def row_count_locked(self) -> int:
        return sum(len(queues) for queues in self._offsets.values())

    def restore_locked(self, rows: list[Any]) -> None:
        self._offsets = {}
        self.apply_locked({"c": rows})

    # Commits -----------------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_offsets(group, [(topic, queue_id, offset)])

    def commit_offsets(self, group: str, commits: list[tuple[str, int, int]]) -> None:
        """Record commits (topic, queue id, offset) durably, then return (blocking). StateWriteFailed when not confirmed.
        Many commits go as several records of one put (each below the largest message the store takes)."""
        if self.state_log is None or len(commits) <= COMMITS_PER_RECORD:
            self.record(self.commit_payload(group, commits))
            return
        parts = [commits[i : i + COMMITS_PER_RECORD] for i in range(0, len(commits), COMMITS_PER_RECORD)]
        self.state_log.write_all([StateChange(self, self.commit_payload(group, part)) for part in parts])

    @staticmethod
    def commit_payload(group: str, commits: list[tuple[str, int, int]]) -> dict[str, Any]:
        """The record of commits, for a caller that writes it together with other messages (StateLog.write)."""
        return {"c": [[f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", queue_id, offset] for topic, queue_id, offset in commits]}

    def remove_topic(self, topic: str) -> None:
        self.record({"rt": topic})

    @staticmethod
    def remove_group_payload(group: str) -> dict[str, Any]:
        """The record removing every offset of a group (every topic, its retry topics included)."""
        return {"rg": group}

    # Reads -------------------------------------------------------------------------------------

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        queues = self._offsets.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._offsets.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def topics_by_group(self) -> dict[str, list[str]]:
        """Every group with the topics it committed offsets of, sorted."""
        out: dict[str, list[str]] = {}
        with self._lock:
            keys = sorted(self._offsets)
        for key in keys:
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            out.setdefault(group, []).append(topic)
        return out

    def groups(self) -> list[str]:
        with self._lock:
            keys = list(self._offsets)
        return sorted({key.split(TOPIC_GROUP_SEPARATOR, 1)[1] for key in keys})

    # Local snapshot ----------------------------------------------------------------------------

    def persist(self) -> None:
        """Write consumerOffset.json from the table (and drop an older version's log once it is in)."""
        with self._lock:
            covered = self.covered
            snapshot = {key: {str(q): o for q, o in queues.items()} for key, queues in self._offsets.items()}
            self.dirty = False
        try:
            write_json_atomically(self.path, {"offsetTable": snapshot, STATE_OFFSET_FIELD: covered})
        except OSError:
            self.dirty = True
            raise
        if remove_legacy_offset_log(self.legacy_log_path):
            log.info("%s: applied and removed (consumer offsets are state records now)", self.legacy_log_path)
