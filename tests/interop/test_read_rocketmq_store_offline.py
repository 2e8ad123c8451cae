"""The offline readers over a store RocketMQ 4.9.8 wrote: `tidemq-store` (pipeline/offline_cli.py,
pipeline/commitlog_reader.py) and the `tidemq-store` Spark source (pipeline/store_source.py).

They read every commitlog record, prepared and rollback transaction messages included (they are
in the commitlog; only consume queues leave them out), with bodies as the producer sent them.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.offline_cli import main as offline_main
from tests.interop.rocketmq_store import Message, RocketMQStoreWriter

Store = tuple[Path, RocketMQStoreWriter]


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = offline_main(list(argv), out)
    return code, out.getvalue()


def _expected_cat(m: Message) -> dict[str, Any]:
    compressed = {"compressed": True} if m.compress else {}  # the body shown is the inflated one
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "msg_id": m.uniq,
        "tags": m.tags,
        "keys": m.keys,
        "store_size": m.size,
        "born_timestamp": m.born_ms,
        "store_timestamp": m.store_ms,
        "properties": m.all_properties(),
        **compressed,
        "body": base64.b64encode(m.body).decode("ascii"),
    }


def test_ls_lists_both_files_and_where_each_ends(rocketmq_store: Store) -> None:
    root, store = rocketmq_store
    code, text = _run("ls", str(root), "--strict")
    assert code == 0, text
    rows = [line.split() for line in text.splitlines()[1:]]
    blank_at, _ = store.blanks[0]
    in_first = sum(1 for m in store.messages if m.commitlog_offset < 131072)
    assert [(r[0], int(r[2]), r[4], int(r[5])) for r in rows] == [
        ("00000000000000065536", in_first, "BLANK", blank_at),
        ("00000000000000131072", len(store.messages) - in_first, "END", store.write_offset),
    ]


def test_cat_prints_every_record_with_its_original_body(rocketmq_store: Store) -> None:
    root, store = rocketmq_store
    code, text = _run("cat", str(root), "--body", "base64", "--strict")
    assert code == 0
    assert [json.loads(line) for line in text.splitlines()] == [_expected_cat(m) for m in store.messages]


def test_stats_counts_each_queue(rocketmq_store: Store) -> None:
    root, store = rocketmq_store
    code, text = _run("stats", str(root), "--json", "--strict")
    assert code == 0, text
    report = json.loads(text)
    assert (report["files"], report["messages"], report["damaged_files"]) == (2, len(store.messages), [])
    want: dict[tuple[str, int], list[Message]] = {}
    for m in store.messages:
        want.setdefault((m.topic, m.queue_id), []).append(m)
    got = {(q["topic"], q["queue_id"]): (q["messages"], q["bytes"], q["min_queue_offset"], q["max_queue_offset"]) for q in report["queues"]}
    assert got == {
        key: (len(ms), sum(m.size for m in ms), min(m.queue_offset for m in ms), max(m.queue_offset for m in ms))
        for key, ms in want.items()
    }


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_store_source_reads_every_record(spark: Any, rocketmq_store: Store) -> None:
    root, store = rocketmq_store
    df = spark.read.format("tidemq-store").load(str(root))
    assert df.rdd.getNumPartitions() == 2  # one per commitlog file
    got = [
        (
            r.topic, r.queue_id, r.queue_offset, r.commitlog_offset, r.msg_id, list(r.keys), r.tags, bytes(r.body),
            dict(r.properties), round(r.born_timestamp.timestamp() * 1000), round(r.store_timestamp.timestamp() * 1000),
        )
        for r in df.orderBy("commitlog_offset").collect()
    ]  # fmt: skip
    assert got == [
        (
            m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.uniq, m.keys, m.tags, m.body,
            m.properties, m.born_ms, m.store_ms,
        )  # TAGS, KEYS and UNIQ_KEY are columns of their own, not repeated in properties
        for m in store.messages
    ]  # fmt: skip
    audit = spark.read.format("tidemq-store").option("topic", "audit").load(str(root))
    assert audit.count() == sum(1 for m in store.messages if m.topic == "audit")
