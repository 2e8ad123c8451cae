"""Key queries: the messages of a topic with a given KEYS entry or UNIQ_KEY, from the index.

The index (store/index/index_service.py) answers candidate commitlog offsets by a hash of
`topic#key`, newest first. Each candidate is confirmed against the stored message before it
is returned, so a hash collision never returns another topic's or another key's message;
candidates below the log's first offset or below a deleted topic's cutoff
(store/metadata/deleted_topic_table.py: the messages of an earlier topic of the same name) are dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from store.codec.message import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, split_keys

if TYPE_CHECKING:
    from store.index.index_service import IndexService
    from store.logfile.commit_log import CommitLog
    from store.metadata.deleted_topic_table import DeletedTopicTable

# Candidates asked of the index per message wanted (collisions and deleted topics take some), plus a margin.
CANDIDATES_PER_MESSAGE = 4
CANDIDATES_MARGIN = 8


def query_message(
    commit_log: CommitLog,
    index_service: IndexService,
    deleted_topics: DeletedTopicTable,
    topic: str,
    key: str,
    max_num: int,
    begin_ms: int,
    end_ms: int,
) -> list[dict[str, Any]]:
    """Up to `max_num` decoded messages of `topic` whose KEYS or UNIQ_KEY is `key`, stored in [begin_ms, end_ms], newest first.

    The caller caps `max_num` at `max_msgs_num_batch`, as RocketMQ's IndexService.queryOffset caps it.
    """
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    lowest = max(commit_log.get_min_offset(), deleted_topics.cutoff(topic))
    candidates = index_service.query_offsets(topic, key, max_num * CANDIDATES_PER_MESSAGE + CANDIDATES_MARGIN, begin_ms, end_ms)
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
