"""The `tidemq` sink: DataFrame rows sent as messages in batched produce requests.

Row columns (others are ignored, so a DataFrame read from tidemq can be written back):
body (binary or string, required), keys (array<string> or string), tags (string),
properties (map<string,string>), queue_id (int), sharding_key (string), msg_id (string),
and topic (string; used when the `topic` option is absent).

Options: url (required), topic, batchMessages (messages per request, at most the
broker's 1,000), maxBatchBytes (body bytes per request).

Invariants: rows are sent in their input order, one request holding at most
`batch_messages` messages and about `max_batch_bytes` of bodies; a write task returns
only once the broker acknowledged every row. A refused request fails the task with the
broker's problem code in the message. Delivery is at least once: a task Spark retries
sends its rows again (give rows a msg_id to recognise repeats).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, LongType, MapType, ShortType, StringType, StructType

from pipeline.errors import OptionInvalid, RowInvalid
from pipeline.http_client import MAX_PRODUCE_BATCH, BrokerClient, ClientSettings, check_url, encode_body
from pipeline.options import get_option, int_option

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


def send_rows(settings: SinkSettings, rows: Iterator[Any]) -> SentCount:
    """Send every row, batched per topic; raises the broker's problem on the first refused request."""
    sent = 0
    pending: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
    with BrokerClient(settings.client) as client:

        def flush(topic: str) -> None:
            nonlocal sent
            messages, _size = pending.pop(topic)
            client.produce(topic, messages)
            sent += len(messages)

        for row in rows:
            row_topic, msg, size = message_of(row, settings.columns)
            topic = settings.topic or row_topic
            if not topic:
                raise OptionInvalid("topic", "a row has no topic and the topic option is not set")
            messages, total = pending.setdefault(topic, ([], [0]))
            messages.append(msg)
            total[0] += size
            if len(messages) >= settings.batch_messages or total[0] >= settings.max_batch_bytes:
                flush(topic)
        for topic in list(pending):
            flush(topic)
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
