"""Deleting a topic: its consume queues, configuration and consumer offsets (its log bytes age out).

A deletion is two state records in one put (store/state/state_log.py): the topic table's `{"del": topic}`
and the consumer offsets' `{"rt": topic}`. Applying the first — under the put lock on the master,
in dispatch on a slave, at load after a crash — drops the topic from the table, drops its queues
from the store's queue table, moves their directory aside and records the record's own commitlog
offset as the topic's cutoff (store.metadata.deleted_topic_table): every message of the deleted incarnation
lies below it, so neither a lagging dispatch, nor a recovery, nor a key query brings them back
into a topic of the same name created later. The files are removed and the cutoffs written
(`TopicRemovals.finish`) right after, outside the put lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from typing import TYPE_CHECKING

from store.codec.message import topic_problem
from store.metadata.deleted_topic_table import DeletedTopicTable
from store.queue.consume_queue import ConsumeQueue
from store.queue.consume_queue_table import DELETED_DIR_PREFIX
from store.state.state_log import StateChange, StateLog

if TYPE_CHECKING:
    from store.metadata.consumer_offset_manager import ConsumerOffsetManager
    from store.metadata.topic_config_manager import TopicConfigManager

log = logging.getLogger("tidemq.store")


class TopicRemovals:
    """Queues of deleted topics waiting to be destroyed outside the put lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a leaf lock: guards `_doomed`
        self._doomed: list[tuple[list[ConsumeQueue], str | None]] = []
        self._changed = False

    def add_locked(self, root: str, topic: str, queues: list[ConsumeQueue]) -> None:
        """Called with the store's queue-table lock held: move the directory aside now, remove it later."""
        doomed = _move_topic_dir_aside_locked(root, topic) if queues else None
        with self._lock:
            self._doomed.append((queues, doomed))
            self._changed = True

    def finish(self, deleted_topics: DeletedTopicTable) -> None:
        """Write the cutoffs (durable before a deletion is answered), then destroy the queues and their files."""
        with self._lock:
            doomed, self._doomed = self._doomed, []
            changed, self._changed = self._changed, False
        if changed:
            deleted_topics.persist()
        for queues, path in doomed:
            for cq in queues:
                cq.destroy()
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)


def delete_topic(
    state_log: StateLog, topics: TopicConfigManager, offsets: ConsumerOffsetManager, removals: TopicRemovals,
    deleted_topics: DeletedTopicTable, topic: str, has_queues: bool,
) -> bool:  # fmt: skip
    """Drop a topic's consume queues, its config and its consumer offsets; False when it had none.
    StateWriteFailed when the deletion could not be recorded."""
    existed = topics.get(topic) is not None
    state_log.write_all([StateChange(topics, topics.deletion(topic)), StateChange(offsets, {"rt": topic})])
    removals.finish(deleted_topics)
    return existed or has_queues


def _move_topic_dir_aside_locked(root: str, topic: str) -> str | None:
    """Rename the topic's queue directory to a name no topic can have; the caller holds the consume-queue table's lock (`ConsumeQueueTable.removing`)."""
    if topic_problem(topic):
        return None
    path = os.path.join(root, topic)
    doomed = os.path.join(root, f"{DELETED_DIR_PREFIX}{topic}.{time.time_ns()}")
    try:
        os.rename(path, doomed)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot move %s aside (%s); removing it in place", path, exc)
        return path
    return doomed
