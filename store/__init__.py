"""tidemq's storage engine: a RocketMQ-layout commitlog, consume queues and index files.

The public API is what this module exports; docs/store-api.md describes it. Other packages
hold a store as `MessageStore` (the Protocol of store/message_store.py) and import from `store`
only (and the byte layouts from store.layouts), never from its other submodules;
tests/store/test_public_api.py checks both.
"""

from store.codec.compressed_body import COMPRESSED_FLAG, BodyStatus, inflate_body
from store.codec.message import (
    DEFAULT_BORN_HOST,
    GROUP_MAX_BYTES,
    INTERNAL_TOPICS,
    OFFSET_MSG_ID_LENGTHS,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TIMER_TOPIC,
    TOPIC_MAX_BYTES,
    TOPIC_NAME_PATTERN,
    MessageInner,
    build_message,
    decode_offset_msg_id,
    decode_properties,
    group_problem,
    new_uniq_key,
    new_uniq_keys,
    offset_msg_id,
    properties_are_encodable,
    split_keys,
    tags_hash,
    topic_problem,
)
from store.codec.message_codec import (
    decode_message,
)
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.default_message_store import DefaultMessageStore
from store.dispatch.index_rebuild_service import REBUILD_PHASE as INDEX_REBUILD_PHASE
from store.errors import MetadataCorrupt, StoreError, StoreLocked, StoreNotRunning, TopicConfigInvalid, TopicInvalid
from store.filter.message_filter import MessageFilter
from store.filter.sql_filter import SqlFilter
from store.filter.sql_parser import MAX_SQL_CHARS, FilterInvalid
from store.message_store import ArrivingListener, CommitLogView, MessageStore, ReplicationWaiter
from store.metadata.rocketmq_system_topics import is_rocketmq_system_topic
from store.metadata.topic_config_manager import TopicConfig
from store.metadata.topic_names import dlq_topic, retry_topic, topic_kind
from store.native import BatchError, BatchErrorCode, CheckedBatch, pack_batch
from store.pop.dead_letter_resend import MAX_RESEND, Resent
from store.pop.group_consumption import (
    AckOutcome,
    GroupConsumption,
    PopCounts,
    Popped,
    PushSubscription,
    Redrive,
    RedriveState,
    SubscriptionGroup,
)
from store.queue.get_message_result import GetMessageResult, TagFilter
from store.schedule.schedule_message_service import level_for_delay_ms
from store.state.state_log import StateWriteFailed
from store.status import AppendMessageResult, EncodedItems, GetMessageStatus, PutMessageResult, PutMessageStatus, PutRefusal
from store.timer.timer_message import (
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_PROPERTIES,
    deliver_at,
)
from store.transaction.producer_group_manager import ProducerGroup, check_url_problem
from store.transaction.transaction_message import (
    HALF_TOPIC,
    OP_TOPIC,
    PRODUCER_GROUP_MAX_BYTES,
    TRANSACTION_PROPERTIES,
    TransactionAction,
    TransactionState,
    producer_group_problem,
)
from store.transaction.transaction_store import (
    CheckAnswer,
    CheckRequest,
    CheckTransport,
    PendingHalf,
    Resolution,
    ResolveStatus,
    Transactions,
)

__all__ = [
    "COMPRESSED_FLAG",
    "DEFAULT_BORN_HOST",
    "GROUP_MAX_BYTES",
    "HALF_TOPIC",
    "INDEX_REBUILD_PHASE",
    "INTERNAL_TOPICS",
    "MAX_RESEND",
    "MAX_SQL_CHARS",
    "OFFSET_MSG_ID_LENGTHS",
    "OP_TOPIC",
    "PRODUCER_GROUP_MAX_BYTES",
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_REAL_QID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_TAGS",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "TIMER_PROPERTIES",
    "TIMER_TOPIC",
    "TOPIC_MAX_BYTES",
    "TOPIC_NAME_PATTERN",
    "TRANSACTION_PROPERTIES",
    "AckOutcome",
    "AppendMessageResult",
    "ArrivingListener",
    "BatchError",
    "BatchErrorCode",
    "BodyStatus",
    "BrokerRole",
    "CheckAnswer",
    "CheckRequest",
    "CheckTransport",
    "CheckedBatch",
    "CommitLogView",
    "DefaultMessageStore",
    "EncodedItems",
    "FilterInvalid",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "GroupConsumption",
    "MessageFilter",
    "MessageInner",
    "MessageStore",
    "MessageStoreConfig",
    "MetadataCorrupt",
    "PendingHalf",
    "PopCounts",
    "Popped",
    "ProducerGroup",
    "PushSubscription",
    "PutMessageResult",
    "PutMessageStatus",
    "PutRefusal",
    "Redrive",
    "RedriveState",
    "ReplicationWaiter",
    "Resent",
    "Resolution",
    "ResolveStatus",
    "SqlFilter",
    "StateWriteFailed",
    "StoreError",
    "StoreLocked",
    "StoreNotRunning",
    "SubscriptionGroup",
    "TagFilter",
    "TopicConfig",
    "TopicConfigInvalid",
    "TopicInvalid",
    "TransactionAction",
    "TransactionState",
    "Transactions",
    "build_message",
    "check_url_problem",
    "decode_message",
    "decode_offset_msg_id",
    "decode_properties",
    "deliver_at",
    "dlq_topic",
    "group_problem",
    "inflate_body",
    "is_rocketmq_system_topic",
    "level_for_delay_ms",
    "new_uniq_key",
    "new_uniq_keys",
    "offset_msg_id",
    "pack_batch",
    "producer_group_problem",
    "properties_are_encodable",
    "retry_topic",
    "split_keys",
    "tags_hash",
    "topic_kind",
    "topic_problem",
]
