"""Topic table replication: the master sends its whole topic table; the slave mirrors it.

A slave must know a topic's queues and permission to serve pulls for it (RocketMQ's
SlaveSynchronize does the same over its own channel). The master sends the table in a
control frame at the start of every connection and whenever it changed; the slave applies it
as a whole: topics it lacks or holds differently are written, topics the master no longer
has are dropped from its table. Consumer offsets are not replicated: they belong to the
broker a consumer commits to.
"""

from __future__ import annotations

import logging
from typing import Any

from store import MessageStore, StoreError, TopicConfig

log = logging.getLogger("tidemq.ha")

KIND_TOPICS = "topics"


def topic_snapshot(store: MessageStore) -> list[TopicConfig]:
    return store.topic_configs()


def topics_payload(topics: list[TopicConfig]) -> dict[str, Any]:
    return {
        "kind": KIND_TOPICS,
        "topics": [{"name": t.topic_name, "queues": t.write_queue_nums, "read": t.read_queue_nums, "perm": t.perm} for t in topics],
    }


def apply_topics(store: MessageStore, payload: dict[str, Any]) -> int:
    """Mirror the master's topic table; returns how many entries changed. Bad entries are skipped and logged."""
    wanted: dict[str, tuple[int, str]] = {}
    for entry in payload.get("topics", []):
        try:
            wanted[str(entry["name"])] = (int(entry["queues"]), str(entry["perm"]))
        except (KeyError, TypeError, ValueError):
            log.warning("ignoring a malformed topic entry from the master: %r", entry)
    changed = 0
    for name, (queues, perm) in wanted.items():
        current = store.topic_config(name)
        if current is not None and current.write_queue_nums == queues and current.perm == perm:
            continue
        try:
            store.create_or_update_topic(name, queues, perm)
            changed += 1
        except (StoreError, ValueError, OSError) as exc:  # a name or queue count this slave's settings refuse
            log.warning("cannot mirror topic %r from the master: %s", name, exc)
    for current in store.topic_configs():
        if current.topic_name not in wanted:
            store.delete_topic_config(current.topic_name)
            changed += 1
    return changed
