"""Per topic, tag and minute: message count, body bytes and p50/p99 end-to-end delay, as Parquet.

    python -m pipeline.jobs.topic_stats --url http://127.0.0.1:8080 --topic orders --out stats.parquet
    spark-submit pipeline/jobs/topic_stats.py --url ... --topic orders --out stats.parquet

The job reads each topic as a stream with trigger(availableNow=True): everything the topic
holds when the job starts, in micro-batches of at most --max-messages-per-trigger, with
one progress line per micro-batch. Each micro-batch's (topic, tag, minute, bytes, delay)
rows are staged as Parquet under the work directory, one directory per batch id, written
with overwrite so a batch replayed after a failure replaces its earlier copy. The output
is then computed from all staged rows at once, so percentiles are exact over every
message, not merged per batch. With --checkpoint the work directory persists and a
later run reads only what arrived since, yet reports over everything seen so far.

Delay is store time minus born time in milliseconds; minute is the store time truncated
to the minute (UTC); a message without a tag counts under a null tag.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

OUTPUT_COLUMNS = ("topic", "tag", "minute", "messages", "bytes", "delay_p50_ms", "delay_p99_ms")
DEFAULT_MAX_PER_TRIGGER = 100_000  # messages per micro-batch


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="topic_stats", description="Per topic, tag and minute message statistics as Parquet.")
    p.add_argument("--url", required=True, help="broker base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--topic", required=True, action="append", help="topic to read (repeat for several)")
    p.add_argument("--out", required=True, help="output Parquet directory (replaced)")
    p.add_argument("--checkpoint", help="work directory kept between runs (default: a temporary one, a full recount)")
    p.add_argument("--max-messages-per-trigger", type=_positive, default=DEFAULT_MAX_PER_TRIGGER, help="messages per micro-batch")
    p.add_argument("--tag", help="only messages with these tags, e.g. TagA||TagB")
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def staging_dir(work_dir: str, topic: str) -> str:
    """Where a topic's staged rows go (hex, since topic names may hold % and |, which paths treat specially)."""
    return os.path.join(work_dir, "rows", topic.encode("utf-8").hex())


def stage_topic(spark: Any, args: argparse.Namespace, topic: str, work_dir: str, log: Callable[[str], None]) -> None:
    """Stream the topic's available messages into staged Parquet rows, one directory per micro-batch."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("tidemq")
        .option("url", args.url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(args.max_messages_per_trigger))
    )
    if args.tag:
        reader = reader.option("tag", args.tag)
    rows = reader.load().select(
        F.col("topic"),
        F.col("tags").alias("tag"),
        F.date_trunc("minute", F.col("store_timestamp")).alias("minute"),
        F.length(F.col("body")).cast("long").alias("bytes"),
        (F.unix_millis(F.col("store_timestamp")) - F.unix_millis(F.col("born_timestamp"))).alias("delay_ms"),
    )
    staging = staging_dir(work_dir, topic)
    started = time.monotonic()

    def write_batch(batch: Any, batch_id: int) -> None:
        batch = batch.persist()
        try:
            count = batch.count()
            if count:
                batch.write.mode("overwrite").parquet(os.path.join(staging, f"batch={batch_id}"))
            log(f"topic_stats: {topic} batch {batch_id}: {count} messages ({time.monotonic() - started:.1f} s)")
        finally:
            batch.unpersist()

    query = (
        rows.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", os.path.join(work_dir, "checkpoints", topic.encode("utf-8").hex()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def summarize(spark: Any, work_dir: str, topics: list[str], out: str) -> int:
    """Aggregate the staged rows of `topics` into `out`; the number of output rows."""
    from pyspark.sql import functions as F

    paths = [p for p in (staging_dir(work_dir, t) for t in topics) if os.path.isdir(p)]
    if not paths:
        empty = "topic string, tag string, minute timestamp, messages bigint, bytes bigint, delay_p50_ms double, delay_p99_ms double"
        spark.createDataFrame([], empty).write.mode("overwrite").parquet(out)
        return 0
    staged = spark.read.option("recursiveFileLookup", "true").parquet(*paths)
    stats = staged.groupBy("topic", "tag", "minute").agg(
        F.count(F.lit(1)).alias("messages"),
        F.sum("bytes").alias("bytes"),
        F.percentile(F.col("delay_ms"), F.lit(0.5)).alias("delay_p50_ms"),
        F.percentile(F.col("delay_ms"), F.lit(0.99)).alias("delay_p99_ms"),
    )
    stats = stats.select(*OUTPUT_COLUMNS).orderBy("topic", "tag", "minute")
    stats.write.mode("overwrite").parquet(out)
    rows: int = spark.read.parquet(out).count()
    return rows


def run(spark: Any, args: argparse.Namespace, log: Callable[[str], None] = print) -> int:
    """Run the job on a session where the tidemq source is registered; the number of output rows."""
    work_dir = args.checkpoint or tempfile.mkdtemp(prefix="topic-stats-")
    try:
        for topic in args.topic:
            stage_topic(spark, args, topic, work_dir, log)
        count = summarize(spark, work_dir, args.topic, args.out)
        log(f"topic_stats: wrote {count} rows to {args.out}")
        return count
    finally:
        if not args.checkpoint:
            shutil.rmtree(work_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pyspark.sql import SparkSession

    from pipeline import register

    spark = SparkSession.builder.appName("tidemq-topic-stats").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    register(spark)
    try:
        run(spark, args, lambda line: print(line, flush=True))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
