"""tidemq's storage engine: a RocketMQ-layout commitlog, consume queues and index files.

The public API is what this module exports; docs/store-api.md describes it. Other packages
hold a store as `MessageStore` (the Protocol of store/message_store.py) and import from `store`
only, never from its submodules; tests/store/test_public_api.py checks both.
"""

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.default_message_store import DefaultMessageStore
from store.errors import ConfigInvalid, MetadataCorrupt, StoreError, StoreLocked, StoreNotRunning, TopicInvalid
from store.get_message_result import GetMessageResult, TagFilter
from store.group_consumption import AckOutcome, GroupConsumption, PopCounts, Popped, SubscriptionGroup
from store.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    MessageInner,
    build_message,
    decode_offset_msg_id,
    decode_properties,
    new_uniq_key,
    new_uniq_keys,
    offset_msg_id,
    properties_are_encodable,
    split_keys,
    tags_hash,
    topic_problem,
)
from store.message_codec import (
    BLANK_MAGIC_CODE,
    HEADER,
    HEADER_BYTES,
    MESSAGE_MAGIC_CODE,
    POS_BODY_LENGTH,
    POS_QUEUE_OFFSET,
    PROPERTIES_LENGTH,
    DecodeOutcome,
    check_message,
    decode_message,
    iter_messages,
    read_long,
)
from store.message_store import ArrivingListener, CommitLogView, MessageStore, ReplicationWaiter
from store.native import BatchError, BatchErrorCode, CheckedBatch, pack_batch
from store.pop_records import dlq_topic, retry_topic
from store.schedule_message_service import level_for_delay_ms
from store.service_thread import ServiceThread
from store.setting import BOUNDS_KEY, Bounds, check_fields, declared_settings, setting
from store.status import AppendMessageResult, EncodedItems, GetMessageStatus, PutMessageResult, PutMessageStatus, PutRefusal
from store.timer_message import (
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_PROPERTIES,
    TIMER_TOPIC,
    deliver_at,
)
from store.topic_config_manager import TopicConfig

__all__ = [
    "BLANK_MAGIC_CODE",
    "BOUNDS_KEY",
    "HEADER",
    "HEADER_BYTES",
    "MESSAGE_MAGIC_CODE",
    "NAME_VALUE_SEPARATOR",
    "POS_BODY_LENGTH",
    "POS_QUEUE_OFFSET",
    "PROPERTIES_LENGTH",
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_REAL_QID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_SEPARATOR",
    "PROPERTY_TAGS",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "TIMER_PROPERTIES",
    "TIMER_TOPIC",
    "AckOutcome",
    "AppendMessageResult",
    "ArrivingListener",
    "BatchError",
    "BatchErrorCode",
    "Bounds",
    "BrokerRole",
    "CheckedBatch",
    "CommitLogView",
    "ConfigInvalid",
    "DecodeOutcome",
    "DefaultMessageStore",
    "EncodedItems",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "GroupConsumption",
    "MessageInner",
    "MessageStore",
    "MessageStoreConfig",
    "MetadataCorrupt",
    "PopCounts",
    "Popped",
    "PutMessageResult",
    "PutMessageStatus",
    "PutRefusal",
    "ReplicationWaiter",
    "ServiceThread",
    "StoreError",
    "StoreLocked",
    "StoreNotRunning",
    "SubscriptionGroup",
    "TagFilter",
    "TopicConfig",
    "TopicInvalid",
    "build_message",
    "check_fields",
    "check_message",
    "declared_settings",
    "decode_message",
    "decode_offset_msg_id",
    "decode_properties",
    "deliver_at",
    "dlq_topic",
    "iter_messages",
    "level_for_delay_ms",
    "new_uniq_key",
    "new_uniq_keys",
    "offset_msg_id",
    "pack_batch",
    "properties_are_encodable",
    "read_long",
    "retry_topic",
    "setting",
    "split_keys",
    "tags_hash",
    "topic_problem",
]
