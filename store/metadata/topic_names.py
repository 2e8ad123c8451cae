"""The names of the topics group consumption makes: revive, retry and dead-letter topics (RocketMQ's).

They live with the metadata, under group consumption, because the topic table recognises them
(store/metadata/rocketmq_system_topics.py) and group consumption makes them.
"""

from __future__ import annotations

from store.codec.message import SYSTEM_TOPICS

# PopAckConstants.REVIVE_TOPIC + cluster; MixAll.RETRY_GROUP_TOPIC_PREFIX, MixAll.DLQ_GROUP_TOPIC_PREFIX.
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
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


# RocketMQ's TopicValidator.SYSTEM_TOPIC_PREFIX: topics the broker makes for itself (the revive topic, ...).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


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
