"""The `tidemq-store` offline source over a store written by the engine (DefaultMessageStore), on local[2] Spark."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline.commitlog_reader import list_commitlog_files
from store import DefaultMessageStore, MessageStoreConfig, build_message

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

FILE_SIZE = 64 * 1024
COUNT = 600
# One message as the source gives it: commitlog offset, message id, keys, tags, body, properties, store and born time.
Row = tuple[int, str, list[str], str, bytes, dict[str, str], int, int]
Written = tuple[Path, dict[tuple[str, int, int], Row]]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """A store of COUNT messages over several commitlog files, shut down cleanly; what was put, by (topic, queue, offset)."""
    root = tmp_path_factory.mktemp("store")
    config = MessageStoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log_bytes=FILE_SIZE, max_message_size_bytes=8192)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    want: dict[tuple[str, int, int], Row] = {}
    try:
        for start in range(0, COUNT, 50):
            msgs = []
            for i in range(start, start + 50):
                topic = "alpha" if i % 4 else "beta"
                body = bytes([i % 256]) * (200 + i % 150)
                msgs.append(build_message(topic, body, queue_id=i % 2, tags=f"T{i % 3}", keys=[f"k{i}"], properties={"i": str(i)}))
            result = store.put_messages(msgs)
            assert result.ok, result
            for msg, item in zip(msgs, result.items, strict=True):
                want[(msg.topic, msg.queue_id, item.logics_offset)] = (
                    item.wrote_offset, msg.properties["UNIQ_KEY"], [f"k{msg.properties['i']}"], msg.properties["TAGS"],
                    msg.body, {"i": msg.properties["i"]}, item.store_timestamp, msg.born_timestamp,
                )  # fmt: skip
    finally:
        store.shutdown()
    return root, want


def rows(df: Any) -> dict[tuple[str, int, int], Row]:
    out = {}
    for r in df.collect():
        key = (r.topic, r.queue_id, r.queue_offset)
        assert key not in out, f"{key} read twice"
        out[key] = (
            r.commitlog_offset, r.msg_id, list(r.keys), r.tags, bytes(r.body), dict(r.properties),
            round(r.store_timestamp.timestamp() * 1000), round(r.born_timestamp.timestamp() * 1000),
        )  # fmt: skip
    return out


def load(spark: Any, path: Path, **options: str) -> Any:
    reader = spark.read.format("tidemq-store")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(path))


def test_reads_every_message_the_engine_wrote_one_partition_per_file(spark: Any, written: Written) -> None:
    root, want = written
    files = list_commitlog_files(str(root))
    assert len(files) >= 3
    df = load(spark, root)
    assert df.rdd.getNumPartitions() == len(files)
    assert rows(df) == want
    assert rows(load(spark, root / "commitlog")) == want


def test_topic_option_keeps_one_topic(spark: Any, written: Written) -> None:
    root, want = written
    assert rows(load(spark, root, topic="beta")) == {k: v for k, v in want.items() if k[0] == "beta"}


def last_message_offset(want: dict[tuple[str, int, int], Row]) -> int:
    return max(v[0] for v in want.values())


def test_a_torn_tail_is_dropped_as_recovery_would(spark: Any, written: Written, tmp_path: Path) -> None:
    root, want = written
    copy = tmp_path / "copy"
    shutil.copytree(root / "commitlog", copy / "commitlog")
    last = last_message_offset(want)
    files = list_commitlog_files(str(copy))
    (file,) = [f for f in files if f.start_offset <= last < f.start_offset + FILE_SIZE]  # the store may have preallocated the next one
    with open(file.path, "r+b") as f:  # the last message was cut short by a crash: its tail never reached the disk
        f.seek(last - file.start_offset + 100)
        f.write(b"\x00" * 200)
    got = rows(load(spark, copy))
    assert got == {k: v for k, v in want.items() if v[0] != last}


def test_a_corrupt_body_stops_its_file_unless_crc_checks_are_off(spark: Any, written: Written, tmp_path: Path) -> None:
    root, want = written
    copy = tmp_path / "copy"
    shutil.copytree(root / "commitlog", copy / "commitlog")
    first_file = list_commitlog_files(str(copy))[0]
    in_first = sorted(v[0] for v in want.values() if v[0] < FILE_SIZE)
    victim = in_first[len(in_first) // 2]
    with open(first_file.path, "r+b") as f:
        f.seek(victim + 95)  # inside the body
        byte = f.read(1)
        f.seek(victim + 95)
        f.write(bytes([byte[0] ^ 0xFF]))
    checked = rows(load(spark, copy))
    assert checked == {k: v for k, v in want.items() if not (victim <= v[0] < FILE_SIZE)}
    unchecked = rows(load(spark, copy, checkCrc="false"))
    assert len(unchecked) == len(want)


@pytest.mark.parametrize(
    ("path", "options", "message"),
    [
        ("missing", {}, "is not a directory"),
        ("empty", {}, "holds neither a commitlog/ directory nor commitlog files"),
        ("store", {"checkCrc": "maybe"}, "option checkCrc: must be true or false"),
    ],
)
def test_bad_paths_and_options_fail_with_a_clear_message(
    spark: Any, written: Written, tmp_path: Path, path: str, options: dict[str, str], message: str
) -> None:
    (tmp_path / "empty").mkdir()
    target = written[0] if path == "store" else tmp_path / path
    with pytest.raises(Exception) as exc:
        load(spark, target, **options).collect()
    assert message in str(exc.value)


def test_load_without_a_path_fails_with_a_clear_message(spark: Any) -> None:
    with pytest.raises(Exception) as exc:
        spark.read.format("tidemq-store").load().collect()
    assert "option path: load(PATH) needs the store directory" in str(exc.value)


def test_a_store_with_an_empty_commitlog_reads_no_rows(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    assert load(spark, tmp_path).count() == 0
