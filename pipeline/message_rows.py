"""Stored messages as Spark rows: the one schema of both sources and its Arrow builder.

Both the HTTP source (batch pull bytes) and the offline reader (commitlog files) see
messages in the commitlog layout, so both decode with `RowBatchBuilder`: one header
unpack per message, column lists appended in place, and one Arrow record batch per
`batch_rows` messages (Spark takes Arrow batches without a per-row conversion).

Invariants: the Arrow types match `SCHEMA` exactly (Spark refuses a batch whose types
differ, e.g. `list<item>` for `list<element>` or `timestamp[ms]` for `timestamp[us]`);
`properties` holds every stored property except TAGS, KEYS and UNIQ_KEY, which have
their own columns (`tags`, `keys`, `msg_id`), so what a producer sent as properties is
what a reader gets back; `body` is the body the producer sent: one stored compressed (SYSFLAG
bit 0x1, RocketMQ's COMPRESSED_FLAG) is inflated (store.inflate_body, at most to
`body_limit_bytes`), and one that cannot be is kept as stored with `body_error` saying why.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from store import (
    COMPRESSED_FLAG,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageStoreConfig,
    decode_properties,
    inflate_body,
    offset_msg_id,
    split_keys,
)
from store.layouts import POS_SYS_FLAG, PROPERTIES_LENGTH, header_of, read_int

SCHEMA_DDL = (
    "topic string, queue_id int, queue_offset bigint, commitlog_offset bigint, msg_id string, "
    "keys array<string>, tags string, body binary, properties map<string,string>, "
    "born_timestamp timestamp, store_timestamp timestamp, body_error string"
)

_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")  # Spark's TimestampType in Arrow
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("commitlog_offset", pa.int64()),
        pa.field("msg_id", pa.string()),
        pa.field("keys", pa.list_(pa.field("element", pa.string()))),
        pa.field("tags", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("born_timestamp", _TIMESTAMP_US),
        pa.field("store_timestamp", _TIMESTAMP_US),
        pa.field("body_error", pa.string()),
    ]
)
COLUMN_NAMES = ARROW_SCHEMA.names
DEFAULT_BATCH_ROWS = 4096  # rows per Arrow batch: large enough to amortise Arrow's per-batch cost
DEFAULT_BODY_LIMIT_BYTES = MessageStoreConfig.max_message_size_bytes  # the store's default largest message


class RowBatchBuilder:
    """Collects decoded messages column by column and emits Arrow record batches."""

    def __init__(self, batch_rows: int = DEFAULT_BATCH_ROWS, body_limit_bytes: int = DEFAULT_BODY_LIMIT_BYTES) -> None:
        assert batch_rows > 0
        self.batch_rows = batch_rows
        self.body_limit_bytes = body_limit_bytes
        self._reset()

    def _reset(self) -> None:
        self.topic: list[str] = []
        self.queue_id: list[int] = []
        self.queue_offset: list[int] = []
        self.commitlog_offset: list[int] = []
        self.msg_id: list[str] = []
        self.keys: list[list[str]] = []
        self.tags: list[str | None] = []
        self.body: list[bytes] = []
        self.properties: list[list[tuple[str, str]]] = []
        self.born: list[int] = []
        self.stored: list[int] = []
        self.body_error: list[str | None] = []

    def __len__(self) -> int:
        return len(self.queue_id)

    @property
    def full(self) -> bool:
        return len(self.queue_id) >= self.batch_rows

    def add(self, buf: Any, pos: int) -> None:
        """Decode the checked message at `pos` of `buf` into the columns."""
        sys_flag = read_int(buf, pos + POS_SYS_FLAG)
        header = header_of(sys_flag)  # host fields of 8 or 20 bytes
        (_total, _magic, _crc, queue_id, _flag, queue_offset, phys, _sys, born_ts, _bh, store_ts, store_host, _rc, _pto, body_len) = (
            header.unpack_from(buf, pos)
        )
        body_start = pos + header.size
        topic_pos = body_start + body_len
        topic_len = buf[topic_pos]
        props_pos = topic_pos + 1 + topic_len
        (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)
        props = decode_properties(buf[props_pos + 2 : props_pos + 2 + props_len]) if props_len else {}
        tags = props.pop(PROPERTY_TAGS, None)
        keys = props.pop(PROPERTY_KEYS, None)
        uniq = props.pop(PROPERTY_UNIQ_KEY, None)
        self.topic.append(bytes(buf[topic_pos + 1 : props_pos]).decode("utf-8", errors="replace"))
        self.queue_id.append(queue_id)
        self.queue_offset.append(queue_offset)
        self.commitlog_offset.append(phys)
        self.msg_id.append(uniq or offset_msg_id(bytes(store_host), phys))
        self.keys.append(split_keys(keys) if keys else [])
        self.tags.append(tags or None)
        body = bytes(buf[body_start:topic_pos])
        if sys_flag & COMPRESSED_FLAG:
            body, status = inflate_body(body, sys_flag, self.body_limit_bytes)
            self.body_error.append(status.value if status.failed else None)
        else:
            self.body_error.append(None)
        self.body.append(body)
        self.properties.append(list(props.items()))
        self.born.append(born_ts)
        self.stored.append(store_ts)

    def flush(self) -> pa.RecordBatch | None:
        """The collected rows as one record batch (None when empty); the builder starts over."""
        if not self.queue_id:
            return None
        arrays = [
            pa.array(self.topic, pa.string()),
            pa.array(self.queue_id, pa.int32()),
            pa.array(self.queue_offset, pa.int64()),
            pa.array(self.commitlog_offset, pa.int64()),
            pa.array(self.msg_id, pa.string()),
            pa.array(self.keys, ARROW_SCHEMA.field("keys").type),
            pa.array(self.tags, pa.string()),
            pa.array(self.body, pa.binary()),
            pa.array(self.properties, ARROW_SCHEMA.field("properties").type),
            _timestamps(self.born),
            _timestamps(self.stored),
            pa.array(self.body_error, pa.string()),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _timestamps(ms: list[int]) -> pa.Array:
    return pa.array(ms, pa.int64()).cast(_TIMESTAMP_MS).cast(_TIMESTAMP_US)
