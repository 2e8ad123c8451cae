"""The `tidemq` sink: DataFrame rows sent as messages in batched produce requests.

Row columns (others are ignored, so a DataFrame read from tidemq can be written back):
body (binary or string, required), keys (array<string> or string), tags (string),
properties (map<string,string>), queue_id (int), sharding_key (string), msg_id (string),
and topic (string; used when the `topic` option is absent).

Options: url (required), topic, batchMessages (messages per request, at most the
broker's 1,000), maxBatchBytes (body bytes per request).

Rows go out as binary batches (application/x-tidemq-batch: RocketMQ's batch encoding, one
queue per request), which the broker checks and appends without per-message work; rows with a
sharding_key and no queue_id go out as JSON batches, since the broker picks their queue from the
key. A row without msg_id gets a generated one (UNIQ_KEY), as the JSON produce would give it.

Invariants: rows are sent in their input order per queue (pending rows are split, in order, into
runs of JSON rows and of binary rows; a binary run goes out as one request per queue), a topic's
pending rows being at most `batch_messages` messages and about `max_batch_bytes` of bodies; a
write task returns only once the broker acknowledged every row. A refused request fails the task
with the broker's problem code in the message; a key, property, tag or msg_id the binary encoding
cannot carry (a separator, a space in a key, a reserved property name) fails it with that code
before anything of the request is sent. Delivery is at least once: a task Spark retries sends its
rows again (give rows a msg_id to recognise repeats).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, LongType, MapType, ShortType, StringType, StructType

from pipeline.errors import BrokerProblem, OptionInvalid, RowInvalid
from pipeline.http_client import MAX_PRODUCE_BATCH, BrokerClient, ClientSettings, batch_item, check_url, encode_body
from pipeline.options import get_option, int_option
from store import new_uniq_key

DEFAULT_BATCH_MESSAGES = 500  # messages per produce request
DEFAULT_MAX_BATCH_BYTES = 8 * 1024 * 1024  # body bytes per produce request (the broker takes 32 MiB of JSON)

_STRING = (StringType,)
COLUMN_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "body": (BinaryType, StringType),
    "keys": (ArrayType, StringType),
    "tags": _STRING,
    "properties": (MapType,),
    "queue_id": (IntegerType, LongType, ShortType),
    "sharding_key": _STRING,
    "msg_id": _STRING,
    "topic": _STRING,
}


@dataclass(frozen=True, slots=True)
class SinkSettings:
    client: ClientSettings
    topic: str | None  # None: each row's topic column
    columns: tuple[str, ...]  # the message columns the input has
    batch_messages: int = DEFAULT_BATCH_MESSAGES
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES


@dataclass
class SentCount(WriterCommitMessage):
    messages: int


def sink_settings(options: dict[str, str], schema: StructType) -> SinkSettings:
    """Check the options and the input's columns on the driver, before any task runs."""
    url = check_url(get_option(options, "url"))
    topic = (get_option(options, "topic") or "").strip() or None
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise OptionInvalid("schema", f"the sink needs a body column (binary or string); the input has {sorted(fields)}")
    if topic is None and "topic" not in fields:
        raise OptionInvalid("topic", "is required unless the input has a topic column")
    for name, allowed in COLUMN_TYPES.items():
        if name in fields and not isinstance(fields[name], allowed):
            kinds = " or ".join(t.typeName() for t in allowed)
            raise OptionInvalid("schema", f"column {name} must be {kinds}, not {fields[name].simpleString()}")
    keys_type = fields.get("keys")
    if isinstance(keys_type, ArrayType) and not isinstance(keys_type.elementType, StringType):
        raise OptionInvalid("schema", "column keys must be array<string> or string")
    props_type = fields.get("properties")
    if isinstance(props_type, MapType) and not (
        isinstance(props_type.keyType, StringType) and isinstance(props_type.valueType, StringType)
    ):
        raise OptionInvalid("schema", "column properties must be map<string,string>")
    return SinkSettings(
        client=ClientSettings(url=url),
        topic=topic,
        columns=tuple(n for n in COLUMN_TYPES if n in fields),
        batch_messages=int_option(options, "batchMessages", DEFAULT_BATCH_MESSAGES, 1, MAX_PRODUCE_BATCH) or DEFAULT_BATCH_MESSAGES,
        max_batch_bytes=int_option(options, "maxBatchBytes", DEFAULT_MAX_BATCH_BYTES, 1) or DEFAULT_MAX_BATCH_BYTES,
    )


def message_of(row: Any, columns: tuple[str, ...]) -> tuple[str | None, dict[str, Any], int]:
    """(row topic, produce message, encoded body size) of one row; RowInvalid when its body is null."""
    body = row["body"]
    if body is None:
        raise RowInvalid("a row has a null body; every message needs one (an empty string or empty binary is fine)")
    text, encoding = encode_body(bytes(body) if isinstance(body, bytearray) else body)
    msg: dict[str, Any] = {"body": text, "encoding": encoding}
    topic = None
    for name in columns:
        if name == "body":
            continue
        value = row[name]
        if value is None:
            continue
        if name == "topic":
            topic = value
        elif name == "keys":
            msg["keys"] = value.split() if isinstance(value, str) else list(value)
        elif name == "properties":
            msg["properties"] = dict(value)
        else:
            msg[name] = value
    return topic, msg, len(text)


# Property names a row's properties may not set (the JSON produce's reserved names): the sink sets
# TAGS, KEYS and UNIQ_KEY from their columns, the broker refuses a delay and the real destination in
# a batch, and WAIT in a JSON produce (a row with a sharding key goes as JSON).
RESERVED_PROPERTIES = frozenset(
    {"KEYS", "TAGS", "UNIQ_KEY", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "WAIT", "REAL_TOPIC", "REAL_QID"}
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One row ready to send: a binary batch item for `queue_id` (None: round-robin), or a JSON message."""

    size: int  # body bytes, counted against max_batch_bytes
    item: bytes = b""
    queue_id: int | None = None
    json: dict[str, Any] | None = None


def _separated(text: str) -> bool:
    return "\x01" in text or "\x02" in text


def _row_properties(row: Any, columns: tuple[str, ...]) -> dict[str, str]:
    """The row's properties as the binary encoding carries them; RowInvalid (with the JSON produce's code) otherwise."""
    props: dict[str, str] = {}
    if "properties" in columns and row["properties"]:
        for name, value in dict(row["properties"]).items():
            if not name or _separated(name) or value is None or _separated(value) or name in RESERVED_PROPERTIES:
                raise RowInvalid(f"PROPERTIES_INVALID: property {name!r} is empty, reserved, or holds \\x01 or \\x02")
            props[name] = value
    if "tags" in columns and row["tags"]:
        if _separated(row["tags"]):
            raise RowInvalid("TAG_INVALID: a tag may not hold \\x01 or \\x02")
        props["TAGS"] = row["tags"]
    if "keys" in columns and row["keys"] is not None:
        keys = row["keys"].split() if isinstance(row["keys"], str) else list(row["keys"])
        if any(not k or " " in k or _separated(k) for k in keys):
            raise RowInvalid(f"KEY_INVALID: keys must be non-empty and hold no space, \\x01 or \\x02: {keys!r}"[:300])
        if keys:
            props["KEYS"] = " ".join(keys)
    msg_id = row["msg_id"] if "msg_id" in columns else None
    if msg_id is not None and _separated(msg_id):
        raise RowInvalid("MESSAGE_ID_INVALID: a msg_id may not hold \\x01 or \\x02")
    props["UNIQ_KEY"] = msg_id or new_uniq_key()
    return props


def outgoing_of(row: Any, columns: tuple[str, ...]) -> tuple[str | None, Outgoing]:
    """(row topic, what to send) of one row; RowInvalid when its body is null or a field cannot be carried."""
    queue_id = row["queue_id"] if "queue_id" in columns else None
    if queue_id is None and "sharding_key" in columns and row["sharding_key"] is not None:
        topic, msg, size = message_of(row, columns)
        return topic, Outgoing(size, json=msg)
    body = row["body"]
    if body is None:
        raise RowInvalid("a row has a null body; every message needs one (an empty string or empty binary is fine)")
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    topic = row["topic"] if "topic" in columns else None
    return topic, Outgoing(len(raw), batch_item(raw, _row_properties(row, columns)), queue_id)


def send_pending(client: BrokerClient, topic: str, items: list[Outgoing]) -> int:
    """Send a topic's pending rows in order: each run of JSON rows as one JSON batch, each run of binary
    rows as one binary batch per queue (so every queue gets its rows in input order)."""
    for is_json, run in itertools.groupby(items, key=lambda o: o.json is not None):
        group = list(run)
        if is_json:
            client.produce(topic, [o.json for o in group if o.json is not None])
            continue
        by_queue: dict[int | None, list[bytes]] = {}
        for o in group:
            by_queue.setdefault(o.queue_id, []).append(o.item)
        for queue_id, parts in by_queue.items():
            reply = client.produce_batch(topic, b"".join(parts), queue_id)
            if reply.get("count") != len(parts):
                raise BrokerProblem(
                    201, "PROTOCOL_ERROR", f"the broker stored {reply.get('count')} of {len(parts)} messages", "POST", topic
                )
    return len(items)


def send_rows(settings: SinkSettings, rows: Iterator[Any]) -> SentCount:
    """Send every row, batched per topic; raises the broker's problem on the first refused request."""
    sent = 0
    pending: dict[str, tuple[list[Outgoing], list[int]]] = {}
    with BrokerClient(settings.client) as client:
        for row in rows:
            row_topic, out = outgoing_of(row, settings.columns)
            topic = settings.topic or row_topic
            if not topic:
                raise OptionInvalid("topic", "a row has no topic and the topic option is not set")
            items, total = pending.setdefault(topic, ([], [0]))
            items.append(out)
            total[0] += out.size
            if len(items) >= settings.batch_messages or total[0] >= settings.max_batch_bytes:
                sent += send_pending(client, topic, pending.pop(topic)[0])
        for topic in list(pending):
            sent += send_pending(client, topic, pending.pop(topic)[0])
    return SentCount(sent)


class TidemqWriter(DataSourceWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return send_rows(self.settings, iterator)


class TidemqStreamWriter(DataSourceStreamWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return send_rows(self.settings, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task's rows were acknowledged before the task ended."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: acknowledged messages stay (at-least-once delivery)."""
