"""A topic's newest messages, across its queues: what `GET /v1/topics/{topic}/messages` answers without a key
or a message id (Redpanda Console's and rocketmq-dashboard's topic view opens on them).

Each queue is read once, its last `max_count` messages before `end_ms` (from the first offset stored at
or after `end_ms`, or the queue's end); the messages are merged by store time, newest first, and those
stored before `begin_ms` are left out. So at most `max_count` messages per queue are read, whatever the
queue holds, and the answer is exactly the newest `max_count` of the range.
"""

from __future__ import annotations

from typing import Any

from store import MessageStore

# The group name reads are counted under (the store's get statistics): none.
NO_GROUP = ""


def latest_messages(
    store: MessageStore, topic: str, queues: int, max_count: int, begin_ms: int, end_ms: int | None
) -> list[dict[str, Any]]:
    """The newest `max_count` messages of `topic` stored in [begin_ms, end_ms) (end: none = now), newest first (blocking)."""
    found: list[dict[str, Any]] = []
    for queue_id in range(queues):
        low = store.get_min_offset_in_queue(topic, queue_id)
        high = store.get_max_offset_in_queue(topic, queue_id)
        if end_ms is not None:
            high = min(high, store.get_offset_in_queue_by_time(topic, queue_id, end_ms))
        start = max(low, high - max_count)
        while start < high:
            result = store.get_message(NO_GROUP, topic, queue_id, start, high - start)
            try:
                messages = result.decode(hosts=False)  # shown by message_json, which has no host fields
                following = result.next_begin_offset
            finally:
                result.release()
            found.extend(m for m in messages if m["queue_offset"] < high and begin_ms <= m["store_timestamp"])
            if following <= start:
                break
            start = following  # the store's transfer limits may return fewer than asked
    found.sort(key=lambda m: (m["store_timestamp"], m["commitlog_offset"]), reverse=True)
    return found[:max_count]
