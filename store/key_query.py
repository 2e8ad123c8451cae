"""Key queries: the messages of a topic with a given KEYS entry or UNIQ_KEY, from the index.

The index (store/index_service.py) answers candidate commitlog offsets by a hash of
`topic#key`, newest first. Each candidate is confirmed against the stored message before it
is returned, so a hash collision never returns another topic's or another key's message;
candidates below the log's first offset or below a deleted topic's cutoff
(store/deleted_topic_table.py: the messages of an earlier topic of the same name) are dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from store.message import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, split_keys

if TYPE_CHECKING:
    from store.default_message_store import DefaultMessageStore

# Candidates asked of the index per message wanted (collisions and deleted topics take some), plus a margin.
CANDIDATES_PER_MESSAGE = 4
CANDIDATES_MARGIN = 8


def query_message(store: DefaultMessageStore, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]:
    """Up to `max_num` decoded messages of `topic` whose KEYS or UNIQ_KEY is `key`, stored in [begin_ms, end_ms], newest first.

    `max_num` is capped at `max_msgs_num_batch`, as RocketMQ's IndexService.queryOffset caps it.
    """
    max_num = min(max_num, store.config.max_msgs_num_batch)
    commit_log = store.commit_log
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    lowest = max(commit_log.get_min_offset(), store.deleted_topics.cutoff(topic))
    candidates = store.index_service.query_offsets(topic, key, max_num * CANDIDATES_PER_MESSAGE + CANDIDATES_MARGIN, begin_ms, end_ms)
    for offset in candidates:
        if offset in seen or offset < lowest:
            continue
        seen.add(offset)
        msg = commit_log.look_message_by_offset(offset)
        if msg is None or msg["topic"] != topic:
            continue
        properties = msg["properties"]
        if key != properties.get(PROPERTY_UNIQ_KEY) and key not in split_keys(properties.get(PROPERTY_KEYS, "")):
            continue
        found.append(msg)
        if len(found) >= max_num:
            break
    return found
