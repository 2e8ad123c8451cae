"""tidemq's storage engine: a RocketMQ-layout commitlog, consume queues and index files.

The public API is what this module exports; docs/store-api.md describes it.
"""

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.consumer_offset_manager import ConsumerOffsetManager
from store.default_message_store import DefaultMessageStore
from store.errors import ConfigInvalid, MetadataCorrupt, StoreError, StoreLocked, StoreNotRunning, TopicInvalid
from store.get_message_result import GetMessageResult, TagFilter
from store.message import (
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    MessageInner,
    build_message,
    decode_offset_msg_id,
    new_uniq_key,
    new_uniq_keys,
    offset_msg_id,
    topic_problem,
)
from store.message_codec import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, decode_message, iter_messages
from store.native import BatchError, pack_batch
from store.status import AppendMessageResult, EncodedItems, GetMessageStatus, PutMessageResult, PutMessageStatus, PutRefusal
from store.topic_config_manager import TopicConfig, TopicConfigManager

__all__ = [
    "BLANK_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "AppendMessageResult",
    "BatchError",
    "BrokerRole",
    "ConfigInvalid",
    "ConsumerOffsetManager",
    "EncodedItems",
    "DefaultMessageStore",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageInner",
    "MessageStoreConfig",
    "MetadataCorrupt",
    "PutMessageResult",
    "PutMessageStatus",
    "PutRefusal",
    "StoreError",
    "StoreLocked",
    "StoreNotRunning",
    "TagFilter",
    "TopicConfig",
    "TopicConfigManager",
    "TopicInvalid",
    "build_message",
    "decode_message",
    "decode_offset_msg_id",
    "iter_messages",
    "new_uniq_key",
    "new_uniq_keys",
    "offset_msg_id",
    "pack_batch",
    "topic_problem",
]
