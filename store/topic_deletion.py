"""Deleting a topic: its consume queues, configuration and consumer offsets (its log bytes age out).

The commitlog end at that moment is recorded first (`deleted_topics`, under the put lock, so
every message of the deleted topic lies below it, and persisted before the answer); dispatch,
crash re-dispatch and key queries drop messages of that topic below the cutoff, so neither a
lagging dispatch nor a recovery brings them back into a re-created topic.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import TYPE_CHECKING

from store.message import topic_problem

if TYPE_CHECKING:
    from store.default_message_store import DefaultMessageStore

log = logging.getLogger("tidemq.store")
# Queue directories of a deleted topic are renamed to this prefix (no topic name starts with a dot) before removal.
DELETED_DIR_PREFIX = ".deleted."


def delete_topic(store: DefaultMessageStore, topic: str) -> bool:
    """Drop a topic's consume queues, its config and its consumer offsets; False when it had none."""
    commit_log = store.commit_log
    with commit_log.put_lock, store._cq_lock:
        # Every message of the topic lies below the log's end now (puts hold the put lock).
        store.deleted_topics.record_locked(topic, commit_log.get_max_offset(), max(0, commit_log.get_min_offset()))
        queues = store.consume_queue_table.get(topic, {})
        table = dict(store.consume_queue_table)
        table.pop(topic, None)
        store.consume_queue_table = table
        for key in [k for k in commit_log.topic_queue_table if k[0] == topic]:
            del commit_log.topic_queue_table[key]
        # Moved aside under the locks, so a queue of a re-created topic never lands in a directory being removed.
        doomed = _move_topic_dir_aside_locked(store.config.consume_queue_dir(), topic) if queues else None
    # Durable before the answer: a crash after it must not let recovery re-dispatch the old messages.
    store.deleted_topics.persist()
    for cq in queues.values():
        cq.destroy()
    if doomed is not None:
        shutil.rmtree(doomed, ignore_errors=True)
    existed = store.topic_config_manager.delete(topic)
    store.consumer_offset_manager.remove_topic(topic)
    return existed or bool(queues)


def _move_topic_dir_aside_locked(root: str, topic: str) -> str | None:
    """Rename the topic's queue directory to a name no topic can have; the caller holds the store's `_cq_lock`."""
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
