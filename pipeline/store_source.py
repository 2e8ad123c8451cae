"""The `tidemq-store` Spark source: a store's commitlog files read offline, one partition per file.

    spark.read.format("tidemq-store").load("/copy/of/store")            # store root or its commitlog/
    spark.read.format("tidemq-store").option("topic", "orders").load(path)

Options: `path` (the load path), `topic` (keep one topic's messages), `checkCrc`
("true" by default; "false" skips the body CRC for speed over a trusted copy).

Invariants: each file is walked by `pipeline.commitlog_reader.FileWalk`, so a row is
only produced for a record that passed the same checks recovery applies, and a file's
rows end at its blank end marker or at its first torn record. The files are listed on
the driver when the query is planned; files added to the directory later are not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.commitlog_reader import CommitLogFile, FileWalk, list_commitlog_files, topic_at
from pipeline.errors import OptionInvalid
from pipeline.message_rows import RowBatchBuilder
from pipeline.message_source import MessageSource
from pipeline.options import bool_option, get_option

SOURCE_NAME = "tidemq-store"


class FilePartition(InputPartition):
    """One commitlog file."""

    def __init__(self, file: CommitLogFile) -> None:
        super().__init__(file.start_offset)
        self.file = file


class TidemqStoreDataSource(MessageSource):
    format_name = SOURCE_NAME

    def reader(self, schema: StructType) -> DataSourceReader:
        return StoreReader(dict(self.options))


class StoreReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        path = get_option(options, "path")
        if not path:
            raise OptionInvalid("path", "load(PATH) needs the store directory (or its commitlog/ directory)")
        self.path = path
        topic = get_option(options, "topic")
        self.topic = topic.encode("utf-8") if topic else None
        self.check_crc = bool_option(options, "checkCrc", True)

    def partitions(self) -> list[InputPartition]:
        return [FilePartition(f) for f in list_commitlog_files(self.path)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, FilePartition):  # Spark's stand-in when there are no files
            return
        builder = RowBatchBuilder()
        topic = self.topic
        for buf, pos, _size in FileWalk(partition.file, self.check_crc):
            if topic is not None and topic_at(buf, pos) != topic:
                continue
            builder.add(buf, pos)
            if builder.full:
                yield builder.flush()
        batch = builder.flush()
        if batch is not None:
            yield batch
