"""What both Spark sources (`tidemq` over HTTP, `tidemq-store` over commitlog files) share: rows
of `pipeline.message_rows.SCHEMA_DDL`, and the format name they are registered under."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.datasource import DataSource

from pipeline.message_rows import SCHEMA_DDL


class MessageSource(DataSource):
    format_name: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def schema(self) -> str:
        return SCHEMA_DDL
