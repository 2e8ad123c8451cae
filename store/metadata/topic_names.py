"""The names of the topics group consumption makes: revive, retry and dead-letter topics (RocketMQ's).

They live with the metadata, under group consumption, because the topic table recognises them
(store/metadata/rocketmq_system_topics.py) and group consumption makes them.
"""

from __future__ import annotations

from store.codec.message import REVIVE_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS, TOPIC_MAX_BYTES

# MixAll.RETRY_GROUP_TOPIC_PREFIX, MixAll.DLQ_GROUP_TOPIC_PREFIX (the revive topic's prefix is store.codec.message's).
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


def retry_topic(group: str, topic: str) -> str:
    """The topic a group's expired messages of `topic` are re-put into (RocketMQ 5's `%RETRY%{group}_{topic}`)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def is_group_system_topic(topic: str) -> bool:
    """Whether `topic` is a retry or dead-letter topic (a consumer never produced to it)."""
    return topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX)


def dlq_topic(group: str) -> str:
    """The group's dead-letter topic (RocketMQ's `%DLQ%{group}`)."""
    return DLQ_PREFIX + group


def topic_kind(topic: str) -> str:
    """What a topic is for: "system" (the broker's own: delay levels, timers, transactions, the revive topic),
    "retry" (a group's `%RETRY%` topic), "dead_letter" (a group's `%DLQ%` topic) or "user" (every other)."""
    if topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
        return "system"
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dead_letter"
    return "user"


def consumption_problem(group: str, topic: str) -> str | None:
    """Why `group` cannot receive from `topic`: its retry topic `%RETRY%{group}_{topic}` would be longer than a
    topic may be, so an unacked message could never be delivered again; None when it can. (The dead-letter
    topic `%DLQ%{group}` is always shorter.)"""
    length = len(retry_topic(group, topic).encode())
    if length <= TOPIC_MAX_BYTES:
        return None
    return (
        f"group {group[:60]!r} cannot receive from topic {topic[:60]!r}: its retry topic (%RETRY%{{group}}_{{topic}}) would be "
        f"{length} bytes, over the {TOPIC_MAX_BYTES} a topic may have; use a shorter group or topic name"
    )
