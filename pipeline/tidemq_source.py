"""The `tidemq` Spark data source: batch and streaming reads of a topic over HTTP, and the sink.

    spark.read.format("tidemq").option("url", "http://127.0.0.1:8080").option("topic", "orders").load()
    spark.readStream.format("tidemq").option("url", ...).option("topic", "orders").load()
    df.write.format("tidemq").option("url", ...).option("topic", "orders").mode("append").save()

Read options: url, topic (required); startingOffsets (batch default earliest, stream
default latest) and endingOffsets (batch only, default latest): `earliest`, `latest` or
JSON per queue; tag ("TagA||TagB"); maxMessagesPerPartition (split a queue's range);
maxMessagesPerTrigger (stream); pullMessages (messages per pull); failOnDataLoss.

Invariants of the stream: an offset is a JSON object of queue id -> next offset to read;
`partitions(start, end)` depends on nothing but its arguments, so a micro-batch replayed
after a restart from a checkpoint reads exactly the messages it read before. A queue added
to the topic while the query runs enters the next offset (from offset 0). Under
trigger(availableNow=True) the target is fixed when the query starts; queues and messages
that appear later wait for the next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pipeline.errors import OptionInvalid
from pipeline.http_client import BrokerClient, ClientSettings, TopicMeta, check_url
from pipeline.message_source import MessageSource
from pipeline.offsets import (
    EARLIEST,
    LATEST,
    allot_rows,
    check_queue_ids,
    from_json_offsets,
    parse_offset_spec,
    raise_to_min,
    resolve_one,
    resolve_ranges,
    to_json_offsets,
)
from pipeline.options import bool_option, get_option, int_option, required_option
from pipeline.queue_reader import DEFAULT_PULL_MESSAGES, ReadSettings, read_partition, split_range
from pipeline.tidemq_sink import TidemqStreamWriter, TidemqWriter, sink_settings

SOURCE_NAME = "tidemq"
DEFAULT_MAX_PER_PARTITION = 200_000  # offsets per input partition before a queue's range is split


def read_settings(options: dict[str, str]) -> ReadSettings:
    """The reader's settings from Spark's options; OptionInvalid when one is malformed."""
    url = check_url(get_option(options, "url"))
    tag = get_option(options, "tag")
    return ReadSettings(
        client=ClientSettings(url=url),
        topic=required_option(options, "topic"),
        tag=tag.strip() if tag and tag.strip() not in ("", "*") else None,
        pull_messages=int_option(options, "pullMessages", DEFAULT_PULL_MESSAGES, 1, 100_000) or DEFAULT_PULL_MESSAGES,
        fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
    )


def fetch_topic(settings: ReadSettings) -> TopicMeta:
    with BrokerClient(settings.client) as client:
        return client.topic(settings.topic)


class TidemqDataSource(MessageSource):
    format_name = SOURCE_NAME

    def reader(self, schema: StructType) -> DataSourceReader:
        return TidemqBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TidemqStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionInvalid("mode", "a topic can only be appended to; use mode('append')")
        return TidemqWriter(sink_settings(dict(self.options), schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return TidemqStreamWriter(sink_settings(dict(self.options), schema))


class TidemqBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.settings = read_settings(options)
        self.starting = parse_offset_spec("startingOffsets", get_option(options, "startingOffsets"), EARLIEST)
        self.ending = parse_offset_spec("endingOffsets", get_option(options, "endingOffsets"), LATEST)
        self.max_per_partition = int_option(options, "maxMessagesPerPartition", DEFAULT_MAX_PER_PARTITION) or DEFAULT_MAX_PER_PARTITION

    def partitions(self) -> list[InputPartition]:
        meta = fetch_topic(self.settings)
        ranges = resolve_ranges(meta.topic, meta.queues, self.starting, self.ending, self.settings.fail_on_data_loss)
        parts: list[InputPartition] = []
        for qid, (start, end) in ranges.items():
            parts.extend(split_range(qid, start, end, self.max_per_partition))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.settings, partition)


class TidemqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.settings = read_settings(options)
        self.starting = parse_offset_spec("startingOffsets", get_option(options, "startingOffsets"), LATEST)
        if get_option(options, "endingOffsets") is not None:
            raise OptionInvalid("endingOffsets", "is for batch reads; a stream reads on (use trigger(availableNow=True) to stop)")
        self.max_per_trigger = int_option(options, "maxMessagesPerTrigger", None)
        self.max_per_partition = int_option(options, "maxMessagesPerPartition", DEFAULT_MAX_PER_PARTITION) or DEFAULT_MAX_PER_PARTITION
        self.target: dict[int, int] | None = None  # availableNow: the max offsets when the query started

    def initialOffset(self) -> dict[str, int]:
        meta = fetch_topic(self.settings)
        check_queue_ids(self.starting, meta.topic, meta.queues)
        offsets: dict[int, int] = {}
        for qid, queue in meta.queues.items():
            offset = resolve_one(self.starting, qid, queue)
            if offset > queue.max_offset:
                raise OptionInvalid("startingOffsets", f"offset {offset} of queue {qid} is past the queue's max offset {queue.max_offset}")
            if offset < queue.min_offset:
                offset = raise_to_min(meta.topic, qid, offset, queue.min_offset, self.settings.fail_on_data_loss)
            offsets[qid] = offset
        return to_json_offsets(offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._max_offsets()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = from_json_offsets(start)
        available = self.target if self.target is not None else self._max_offsets()
        # A queue never goes back; one missing from `available` (gone from the topic) stays where it is.
        end = {qid: max(begin.get(qid, 0), available.get(qid, begin.get(qid, 0))) for qid in set(begin) | set(available)}
        if isinstance(limit, ReadMaxRows):
            end = allot_rows(begin, end, limit.max_rows)
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return to_json_offsets(self._max_offsets())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        parts: list[InputPartition] = []
        for qid in sorted(finish):
            new_queue = qid not in begin  # appeared after the query started: read it from its first offset
            parts.extend(split_range(qid, begin.get(qid, 0), finish[qid], self.max_per_partition, tolerate_gap=new_queue))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the query's checkpoint is the only record of what it has read."""

    def _max_offsets(self) -> dict[int, int]:
        meta = fetch_topic(self.settings)
        return {qid: queue.max_offset for qid, queue in meta.queues.items()}
