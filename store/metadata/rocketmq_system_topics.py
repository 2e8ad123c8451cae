"""RocketMQ's system topics: the ones its broker puts in topics.json at start, which tidemq writes too.

RocketMQ 5.3's TopicConfigManager.init puts these in its table (so in every topics.json it
writes), with BrokerConfig's and MessageStoreConfig's defaults, or tidemq's setting of the same
meaning where it has one:

| topic | read = write queues | perm | RocketMQ's condition |
|---|---|---|---|
| `SELF_TEST_TOPIC` | 1 | 6 | |
| `TBW102` | `default_topic_queue_nums` (defaultTopicQueueNums) | 7 | autoCreateTopicEnable (on) |
| `BenchmarkTest` | 1024 | 6 | |
| `{broker_cluster_name}` | 16 | 7 | clusterTopicEnable (on) adds read and write to inherit |
| `OFFSET_MOVED_EVENT` | 1 | 6 | |
| `SCHEDULE_TOPIC_XXXX` | 18 | 6 | |
| `{broker_cluster_name}_REPLY_TOPIC` | 1 | 6 | |
| `rmq_sys_REVIVE_LOG_{broker_cluster_name}` | `pop_revive_queue_num` (reviveQueueNum) | 6 | |
| `RMQ_SYS_TRANS_HALF_TOPIC`, `RMQ_SYS_TRANS_OP_HALF_TOPIC` | 1 | 6 | |
| `rmq_sys_wheel_timer` | 1 | 6 | timerWheelEnable (`timer_wheel_enable`) |

Not written: the two named after the broker (`{brokerName}`, 1 queue, perm 7, and
`rmq_sys_SYNC_BROKER_MEMBER_{brokerName}`, perm 1): tidemq's store has no broker name, and a
RocketMQ broker adds its own at start; `RMQ_SYS_TRACE_TOPIC` (traceTopicEnable is off).

A system topic is one TopicValidator.isSystemTopic names (its SYSTEM_TOPIC_SET, or the
`rmq_sys_` prefix) or one init registers by the cluster's name. TopicConfigManager keeps the ones
it reads from topics.json apart from the topics it serves, and writes them back as read; the HTTP
API refuses to write or configure any of them. The revive topic is one: group consumption creates
it in the served table when it first needs it (after each start, as before it was ever written).
"""

from __future__ import annotations

from dataclasses import dataclass

from store.codec.message import SCHEDULE_TOPIC, TIMER_TOPIC
from store.metadata.topic_config_manager import TopicConfig
from store.metadata.topic_names import revive_topic

# TopicValidator.SYSTEM_TOPIC_SET.
FIXED_SYSTEM_TOPICS = frozenset(
    {
        "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
    }
)  # fmt: skip
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # TopicValidator.SYSTEM_TOPIC_PREFIX
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"  # "_" + MixAll.REPLY_TOPIC_POSTFIX
PERM_INHERIT = 1  # PermName.PERM_INHERIT, kept in TopicConfig.perm_extra_bits
CLUSTER_TOPIC_QUEUES = 16  # TopicConfig.defaultReadQueueNums / defaultWriteQueueNums
BENCHMARK_TOPIC_QUEUES = 1024
SCHEDULE_TOPIC_QUEUES = 18  # TopicConfigManager.SCHEDULE_TOPIC_QUEUE_NUM


def is_rocketmq_system_topic(name: str, cluster_name: str) -> bool:
    """Whether RocketMQ's broker counts `name` a system topic (TopicValidator.isSystemTopic after init)."""
    return (
        name in FIXED_SYSTEM_TOPICS
        or name.startswith(SYSTEM_TOPIC_PREFIX)
        or name == cluster_name
        or name == cluster_name + REPLY_TOPIC_SUFFIX
    )


@dataclass(frozen=True)
class SystemTopics:
    """What TopicConfigManager writes for RocketMQ's system topics and which names it keeps apart."""

    cluster_name: str
    startup: tuple[TopicConfig, ...]  # the entries RocketMQ's init makes, in its order

    def kept_apart(self, name: str) -> bool:
        """Whether an entry read from topics.json is kept apart: written back as read, not served."""
        return is_rocketmq_system_topic(name, self.cluster_name)


def system_topics(cluster_name: str, default_topic_queue_nums: int, revive_queue_num: int, timer_wheel_enable: bool) -> SystemTopics:
    """RocketMQ 5.3's TopicConfigManager.init entries for a broker of these settings (module docstring)."""

    def topic(name: str, queues: int, inherit: bool = False) -> TopicConfig:
        return TopicConfig(name, queues, queues, "rw", PERM_INHERIT if inherit else 0)

    startup = [
        topic("SELF_TEST_TOPIC", 1),
        topic("TBW102", default_topic_queue_nums, inherit=True),
        topic("BenchmarkTest", BENCHMARK_TOPIC_QUEUES),
        topic(cluster_name, CLUSTER_TOPIC_QUEUES, inherit=True),
        topic("OFFSET_MOVED_EVENT", 1),
        topic(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUES),
        topic(cluster_name + REPLY_TOPIC_SUFFIX, 1),
        topic(revive_topic(cluster_name), revive_queue_num),
        topic("RMQ_SYS_TRANS_HALF_TOPIC", 1),
        topic("RMQ_SYS_TRANS_OP_HALF_TOPIC", 1),
    ]
    if timer_wheel_enable:
        startup.append(topic(TIMER_TOPIC, 1))
    return SystemTopics(cluster_name, tuple(startup))
