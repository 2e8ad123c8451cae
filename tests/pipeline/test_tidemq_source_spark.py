"""The `tidemq` source (batch and streaming) and sink against a live tidemq server, on local[2] Spark."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.pipeline_helpers import Server, create_topic, produce, queue_max_offsets

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "orders"
QUEUES = 3
COUNT = 90
# (queue_id, queue_offset) -> the fields of the row read there
Rows = dict[tuple[int, int], tuple[Any, ...]]


def make_messages(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        msg: dict[str, Any] = {"queue_id": i % QUEUES}
        if i % 2:
            msg["body"], msg["encoding"] = base64.b64encode(bytes([i, 0, 255, 10]) + f"{prefix}{i}".encode()).decode(), "base64"
        else:
            msg["body"] = f"{prefix}-{i}-é"
        if i % 3 != 2:
            msg["tags"] = "TagA" if i % 3 == 0 else "TagB"
        if i % 4:
            msg["keys"] = [f"key{i}", f"order-{i // 4}"]
        if i % 5:
            msg["properties"] = {"n": str(i), "src": "test"}
        out.append(msg)
    return out


def body_of(msg: dict[str, Any]) -> bytes:
    return base64.b64decode(msg["body"]) if msg.get("encoding") == "base64" else msg["body"].encode()


def expected_rows(messages: list[dict[str, Any]], results: list[dict[str, Any]]) -> Rows:
    return {
        (r["queue_id"], r["queue_offset"]): (
            r["commitlog_offset"],
            r["msg_id"],
            m.get("keys", []),
            m.get("tags"),
            body_of(m),
            m.get("properties", {}),
            r["store_timestamp"],
        )
        for m, r in zip(messages, results, strict=True)
    }


def rows_by_offset(df: Any) -> Rows:
    out = {}
    for row in df.collect():
        key = (row.queue_id, row.queue_offset)
        assert key not in out, f"{key} read twice"
        stored_ms = int(row.store_timestamp.timestamp() * 1000 + 0.5)
        out[key] = (row.commitlog_offset, row.msg_id, list(row.keys), row.tags, bytes(row.body), dict(row.properties or {}), stored_ms)
    return out


@pytest.fixture(scope="module")
def produced(tidemq_server: Server) -> Rows:
    create_topic(tidemq_server.url, TOPIC, QUEUES)
    messages = make_messages(COUNT)
    return expected_rows(messages, produce(tidemq_server.url, TOPIC, messages))


def read(spark: Any, server: Server, topic: str = TOPIC, **options: str) -> Any:
    reader = spark.read.format("tidemq").option("url", server.url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


# Batch ------------------------------------------------------------------------------------------


def test_batch_read_equals_what_was_produced(spark: Any, tidemq_server: Server, produced: Rows) -> None:
    df = read(spark, tidemq_server)
    assert df.columns == [
        "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "keys", "tags", "body", "properties",
        "born_timestamp", "store_timestamp", "body_error",
    ]  # fmt: skip
    assert df.rdd.getNumPartitions() == QUEUES
    assert rows_by_offset(df) == produced
    row = df.filter("queue_id = 0 AND queue_offset = 0").first()
    assert row.topic == TOPIC and row.born_timestamp <= row.store_timestamp


def test_offset_ranges_per_queue(spark: Any, tidemq_server: Server, produced: Rows) -> None:
    df = read(spark, tidemq_server, startingOffsets='{"0": 5, "1": -2}', endingOffsets='{"0": 10, "2": 3}')
    want = {k: v for k, v in produced.items() if (k[0] == 0 and 5 <= k[1] < 10) or k[0] == 1 or (k[0] == 2 and k[1] < 3)}
    assert rows_by_offset(df) == want
    latest = read(spark, tidemq_server, startingOffsets="latest")
    assert latest.count() == 0
    empty_range = read(spark, tidemq_server, startingOffsets='{"1": 4}', endingOffsets='{"0": 0, "1": 4, "2": 0}')
    assert empty_range.count() == 0


def test_large_queues_split_into_several_partitions_with_the_same_rows(
    spark: Any,
    tidemq_server: Server,
    produced: Rows,
) -> None:
    df = read(spark, tidemq_server, maxMessagesPerPartition="7", pullMessages="4")
    assert df.rdd.getNumPartitions() == QUEUES * 5  # 30 messages per queue in ranges of 7
    assert rows_by_offset(df) == produced


def test_tag_filter(spark: Any, tidemq_server: Server, produced: Rows) -> None:
    only_a = read(spark, tidemq_server, tag="TagA")
    assert rows_by_offset(only_a) == {k: v for k, v in produced.items() if v[3] == "TagA"}
    both = read(spark, tidemq_server, tag="TagA||TagB", startingOffsets='{"0": 3}', endingOffsets='{"0": 20}', pullMessages="3")
    want = {k: v for k, v in produced.items() if v[3] is not None and (k[0] != 0 or 3 <= k[1] < 20)}
    assert rows_by_offset(both) == want
    assert read(spark, tidemq_server, tag="*").count() == COUNT


def test_the_offline_reader_sees_what_the_http_source_sees(spark: Any, tidemq_server: Server, produced: Rows) -> None:
    offline = spark.read.format("tidemq-store").option("topic", TOPIC).load(str(tidemq_server.store_dir))
    assert rows_by_offset(offline) == produced


# Every bad form of every option is covered by test_source_options.py without Spark; these show
# that each kind of failure (option parsing, planning, the broker at planning, the broker in a task)
# reaches the Spark user with its message.
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "first"}, "option startingOffsets: must be earliest, latest or a JSON object"),
        ({"endingOffsets": '{"0": 999}'}, "option endingOffsets: offset 999 of queue 0 is past the queue's max offset 30"),
        ({"topic": "nosuchtopic"}, "TOPIC_NOT_FOUND"),
        ({"tag": "A||"}, "TAG_INVALID"),
    ],
)
def test_bad_read_options_fail_with_a_clear_message(
    spark: Any, tidemq_server: Server, produced: Rows, options: dict[str, str], message: str
) -> None:
    url = options.pop("url", tidemq_server.url)
    topic = options.pop("topic", TOPIC)
    reader = spark.read.format("tidemq").option("url", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as exc:
        reader.load().collect()
    assert message in str(exc.value)


def test_an_unreachable_broker_is_a_clear_failure(spark: Any) -> None:
    from tests.loopback import free_port

    reader = spark.read.format("tidemq").option("url", f"http://127.0.0.1:{free_port()}").option("topic", TOPIC)
    with pytest.raises(Exception) as exc:
        reader.load().collect()
    assert "BrokerUnavailable" in str(exc.value) and "attempts" in str(exc.value)


# Streaming --------------------------------------------------------------------------------------


def stream_to_parquet(spark: Any, server: Server, topic: str, out: Path, checkpoint: Path, **options: str) -> list[int]:
    """Run an availableNow query into Parquet; the input row count of each micro-batch."""
    reader = spark.readStream.format("tidemq").option("url", server.url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert not query.isActive
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_available_now_restarts_from_its_checkpoint_without_loss_or_repeats(
    spark: Any, tidemq_server: Server, tmp_path: Path
) -> None:
    topic = "stream1"
    create_topic(tidemq_server.url, topic, 2)
    first = make_messages(20, "a")
    for m in first:
        m["queue_id"] %= 2
    want = expected_rows(first, produce(tidemq_server.url, topic, first))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    batches = stream_to_parquet(spark, tidemq_server, topic, out, checkpoint, startingOffsets="earliest", maxMessagesPerTrigger="7")
    assert batches == [7, 7, 6]
    assert rows_by_offset(spark.read.parquet(str(out))) == want

    # More messages, and a queue added to the topic while the query was away.
    create_topic(tidemq_server.url, topic, 3)
    second = make_messages(12, "b")
    want.update(expected_rows(second, produce(tidemq_server.url, topic, second)))
    batches = stream_to_parquet(spark, tidemq_server, topic, out, checkpoint, startingOffsets="earliest", maxMessagesPerTrigger="7")
    assert sum(batches) == 12 and max(batches) <= 7
    assert rows_by_offset(spark.read.parquet(str(out))) == want

    # Nothing new: a third run reads nothing.
    assert stream_to_parquet(spark, tidemq_server, topic, out, checkpoint) == []


def test_a_running_stream_picks_up_a_queue_added_to_the_topic(spark: Any, tidemq_server: Server, tmp_path: Path) -> None:
    topic = "growing"
    create_topic(tidemq_server.url, topic, 1)
    first = [{"body": f"q0-{i}", "queue_id": 0} for i in range(3)]
    want = expected_rows(first, produce(tidemq_server.url, topic, first))
    out = tmp_path / "out"
    query = (
        spark.readStream.format("tidemq")
        .option("url", tidemq_server.url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        create_topic(tidemq_server.url, topic, 3)
        more = [{"body": f"q{q}-new", "queue_id": q} for q in (0, 1, 2)]
        want.update(expected_rows(more, produce(tidemq_server.url, topic, more)))
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert rows_by_offset(spark.read.parquet(str(out))) == want


def test_stream_starts_at_latest_by_default(spark: Any, tidemq_server: Server, tmp_path: Path) -> None:
    topic = "stream2"
    create_topic(tidemq_server.url, topic, 2)
    produce(tidemq_server.url, topic, [{"body": "old", "queue_id": q} for q in (0, 1)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert stream_to_parquet(spark, tidemq_server, topic, out, checkpoint) == []
    produce(tidemq_server.url, topic, [{"body": "new", "queue_id": 1}])
    assert stream_to_parquet(spark, tidemq_server, topic, out, checkpoint) == [1]
    assert [bytes(r.body) for r in spark.read.parquet(str(out)).collect()] == [b"new"]


def test_stream_refuses_ending_offsets(spark: Any, tidemq_server: Server, produced: Rows) -> None:
    reader = spark.readStream.format("tidemq").option("url", tidemq_server.url).option("topic", TOPIC).option("endingOffsets", "latest")
    with pytest.raises(Exception) as exc:
        reader.load().writeStream.format("noop").trigger(availableNow=True).start().awaitTermination(60)
    assert "option endingOffsets: is for batch reads" in str(exc.value)


# Sink -------------------------------------------------------------------------------------------


def test_sink_round_trip(spark: Any, tidemq_server: Server) -> None:
    topic = "sunk"
    create_topic(tidemq_server.url, topic, 2)
    rows = [
        (bytearray(b"\x00\x01bin"), ["k1", "k2"], "TagA", {"a": "1"}, 1, None),
        (bytearray(b""), None, None, None, 0, None),
        (bytearray("text é".encode()), ["k3"], "TagB", {}, None, "user-7"),
    ]
    df = spark.createDataFrame(
        rows, "body binary, keys array<string>, tags string, properties map<string,string>, queue_id int, sharding_key string"
    )
    df.write.format("tidemq").option("url", tidemq_server.url).option("topic", topic).option("batchMessages", "2").mode("append").save()
    back = read(spark, tidemq_server, topic).collect()
    got = sorted((bytes(r.body), list(r.keys), r.tags, dict(r.properties)) for r in back)
    assert got == sorted([(b"\x00\x01bin", ["k1", "k2"], "TagA", {"a": "1"}), (b"", [], None, {}), ("text é".encode(), ["k3"], "TagB", {})])
    assert {(bytes(r.body), r.queue_id) for r in back} >= {(b"\x00\x01bin", 1), (b"", 0)}

    strings = spark.createDataFrame([("s1", "x y"), ("s2", None)], "body string, keys string")
    strings.write.format("tidemq").option("url", tidemq_server.url).option("topic", topic).mode("append").save()
    back = {bytes(r.body): list(r.keys) for r in read(spark, tidemq_server, topic).collect()}
    assert back[b"s1"] == ["x", "y"] and back[b"s2"] == []


def test_stream_sink_copies_a_topic(spark: Any, tidemq_server: Server, produced: Rows, tmp_path: Path) -> None:
    create_topic(tidemq_server.url, "copy", 1)
    source = spark.readStream.format("tidemq").option("url", tidemq_server.url).option("topic", TOPIC).option("startingOffsets", "earliest")
    query = (
        source.load()
        .select("body", "keys", "tags", "properties")
        .writeStream.format("tidemq")
        .option("url", tidemq_server.url)
        .option("topic", "copy")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    copied = sorted((bytes(r.body), list(r.keys), r.tags, dict(r.properties)) for r in read(spark, tidemq_server, "copy").collect())
    assert copied == sorted((v[4], v[2], v[3], v[5]) for v in produced.values())


def test_sink_failure_carries_the_broker_problem_code_and_stores_nothing(spark: Any, tidemq_server: Server) -> None:
    topic = "sinkfail"
    create_topic(tidemq_server.url, topic, 1)
    bad = spark.createDataFrame([("ok", None), ("bad", "A||B")], "body string, tags string").coalesce(1)
    with pytest.raises(Exception) as exc:
        bad.write.format("tidemq").option("url", tidemq_server.url).option("topic", topic).mode("append").save()
    assert "TAG_INVALID" in str(exc.value)
    assert queue_max_offsets(tidemq_server.url, topic) == {0: 0}

    create_topic(tidemq_server.url, "readonly", 1, perm="r")
    ok = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception) as exc:
        ok.write.format("tidemq").option("url", tidemq_server.url).option("topic", "readonly").mode("append").save()
    assert "TOPIC_NOT_WRITABLE" in str(exc.value)


@pytest.mark.parametrize(
    ("ddl", "rows", "options", "message"),
    [
        ("value string", [("x",)], {}, "the sink needs a body column"),
        ("body string", [(None,)], {}, "a row has a null body"),
        ("body string", [("x",)], {"batchMessages": "1001"}, "option batchMessages: must be in 1..1000"),
    ],
)
def test_bad_sink_input_fails_with_a_clear_message(
    spark: Any, tidemq_server: Server, ddl: str, rows: list[tuple[Any, ...]], options: dict[str, str], message: str
) -> None:
    create_topic(tidemq_server.url, "sinkbad", 1)
    settings = {"url": tidemq_server.url, "topic": "sinkbad", **options}
    writer = spark.createDataFrame(rows, ddl).write.format("tidemq").mode("append")
    for k, v in settings.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception) as exc:
        writer.save()
    assert message in str(exc.value)
    assert queue_max_offsets(tidemq_server.url, "sinkbad") == {0: 0}


def test_sink_refuses_overwrite(spark: Any, tidemq_server: Server) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception) as exc:
        df.write.format("tidemq").option("url", tidemq_server.url).option("topic", TOPIC).mode("overwrite").save()
    assert "use mode('append')" in str(exc.value)


# The topic_stats job ----------------------------------------------------------------------------


def percentile(values: list[int], p: float) -> float:
    """Spark's exact percentile: linear interpolation between the closest ranks."""
    ordered = sorted(values)
    pos = p * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def expected_stats(spark: Any, server: Server, topic: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    groups: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for r in read(spark, server, topic).collect():
        minute = r.store_timestamp.replace(second=0, microsecond=0)
        delay = round((r.store_timestamp - r.born_timestamp).total_seconds() * 1000)
        groups.setdefault((r.topic, r.tags, minute), []).append((len(r.body), delay))
    return {
        key: (len(v), sum(b for b, _ in v), percentile([d for _, d in v], 0.5), percentile([d for _, d in v], 0.99))
        for key, v in groups.items()
    }


def job_output(spark: Any, out: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    rows = spark.read.parquet(str(out)).collect()
    return {(r.topic, r.tag, r.minute): (r.messages, r.bytes, r.delay_p50_ms, r.delay_p99_ms) for r in rows}


def test_topic_stats_job_writes_exact_counts_and_resumes_from_its_checkpoint(spark: Any, tidemq_server: Server, tmp_path: Path) -> None:
    from pipeline.jobs import topic_stats

    topic = "statsjob"
    create_topic(tidemq_server.url, topic, 2)
    produce(
        tidemq_server.url, topic, [{"body": "x" * (i % 7 + 1), "tags": ["TagA", "TagB", None][i % 3], "queue_id": i % 2} for i in range(40)]
    )
    out, work = tmp_path / "stats.parquet", tmp_path / "work"
    args = topic_stats.build_parser().parse_args(
        ["--url", tidemq_server.url, "--topic", topic, "--out", str(out), "--checkpoint", str(work), "--max-messages-per-trigger", "15"]
    )
    lines: list[str] = []
    assert topic_stats.run(spark, args, lines.append) == len(expected_stats(spark, tidemq_server, topic))
    assert [line.split(":")[2].strip().split(" ")[0] for line in lines if " batch " in line] == ["15", "15", "10"]
    got = job_output(spark, out)
    assert sum(v[0] for v in got.values()) == 40
    assert got.keys() == expected_stats(spark, tidemq_server, topic).keys()
    for key, want in expected_stats(spark, tidemq_server, topic).items():
        assert got[key][:2] == want[:2]
        assert got[key][2:] == pytest.approx(want[2:])

    produce(tidemq_server.url, topic, [{"body": "yy", "tags": "TagC", "queue_id": 0} for _ in range(5)])
    lines.clear()
    topic_stats.run(spark, args, lines.append)
    assert [line.split(": ")[2].split(" (")[0] for line in lines if " batch " in line] == ["5 messages"]
    got = job_output(spark, out)
    assert sum(v[0] for v in got.values()) == 45
    assert {k: v[:2] for k, v in got.items()} == {k: v[:2] for k, v in expected_stats(spark, tidemq_server, topic).items()}


@pytest.mark.slow
def test_topic_stats_job_runs_as_a_program(tidemq_server: Server, tmp_path: Path) -> None:
    import subprocess
    import sys

    create_topic(tidemq_server.url, "statsprog", 1)
    produce(tidemq_server.url, "statsprog", [{"body": "abc", "tags": "TagA"} for _ in range(3)])
    out = tmp_path / "stats.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.jobs.topic_stats", "--url", tidemq_server.url, "--topic", "statsprog", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "topic_stats: statsprog batch 0: 3 messages" in done.stdout
    assert "wrote 1 rows" in done.stdout
    import pyarrow.parquet as pq

    table = pq.read_table(str(out)).to_pylist()
    assert [(r["topic"], r["tag"], r["messages"], r["bytes"]) for r in table] == [("statsprog", "TagA", 3, 9)]
