"""The store's bytes as other programs read them: the commitlog's message layout and its readers.

The offline reader (pipeline/), replication (ha/) and the wire formats of the front end read
stored messages byte by byte; they take the layout from here, the one public module of store
besides the package itself (whose API is the MessageStore Protocol, the message and result
types and the errors). docs/layouts.md has the tables.
"""

from store.codec.message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from store.codec.message_codec import (
    BLANK_MAGIC_CODE,
    FIXED_PART_BYTES,
    HEADER,
    HEADER_BYTES,
    MESSAGE_MAGIC_CODE,
    POS_BODY_LENGTH,
    POS_QUEUE_OFFSET,
    POS_SYS_FLAG,
    PROPERTIES_LENGTH,
    V6_EXTRA_BYTES,
    DecodeOutcome,
    body_length_at,
    check_message,
    header_bytes,
    header_of,
    iter_messages,
    read_int,
    read_long,
)
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY

__all__ = [
    "BLANK_MAGIC_CODE",
    "CQ_STORE_UNIT_SIZE",
    "ENTRY",
    "FIXED_PART_BYTES",
    "HEADER",
    "HEADER_BYTES",
    "MESSAGE_MAGIC_CODE",
    "NAME_VALUE_SEPARATOR",
    "POS_BODY_LENGTH",
    "POS_QUEUE_OFFSET",
    "POS_SYS_FLAG",
    "PROPERTIES_LENGTH",
    "PROPERTY_SEPARATOR",
    "V6_EXTRA_BYTES",
    "DecodeOutcome",
    "body_length_at",
    "check_message",
    "header_bytes",
    "header_of",
    "iter_messages",
    "read_int",
    "read_long",
]
