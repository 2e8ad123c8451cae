"""tidemq on Apache Spark: the `tidemq` source and sink (over HTTP) and the `tidemq-store` offline reader.

    from pipeline import register
    register(spark)
    spark.read.format("tidemq").option("url", "http://127.0.0.1:8080").option("topic", "orders").load()

The Spark modules import pyspark and pyarrow (the `spark` extra); `pipeline.commitlog_reader`
and `pipeline.offline_cli` need neither.
"""

from __future__ import annotations

from typing import Any

SOURCE_NAMES = ("tidemq", "tidemq-store")


def register(spark: Any) -> None:
    """Register the `tidemq` and `tidemq-store` data sources with a SparkSession."""
    from pipeline.store_source import TidemqStoreDataSource
    from pipeline.tidemq_source import TidemqDataSource

    spark.dataSource.register(TidemqDataSource)
    spark.dataSource.register(TidemqStoreDataSource)
