"""Lock file, abort file, path safety, metadata files, arrival notices and topic deletion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from store import (
    DefaultMessageStore,
    GetMessageResult,
    GetMessageStatus,
    MessageStoreConfig,
    MetadataCorrupt,
    PutMessageResult,
    StoreLocked,
    TopicInvalid,
    build_message,
)
from store.logfile.store_checkpoint import StoreCheckpoint
from tests.store.conftest import open_store, wait_dispatched


def test_second_store_on_the_same_directory_fails_at_once(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    with pytest.raises(StoreLocked, match="used by another process"):
        DefaultMessageStore(config).load()
    code = (
        "import sys\nfrom store import DefaultMessageStore, StoreLocked\nfrom tests.store.conftest import small_config\n"
        "try:\n    DefaultMessageStore(small_config(sys.argv[1])).load()\nexcept StoreLocked:\n    sys.exit(3)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code, config.store_path_root_dir], cwd=root, timeout=60)
    assert proc.returncode == 3


def test_abort_file_marks_a_running_store(config: MessageStoreConfig) -> None:
    s = open_store(config)
    assert os.path.exists(config.abort_path())
    s.shutdown()
    assert not os.path.exists(config.abort_path())
    s.shutdown()  # idempotent


@pytest.mark.parametrize("topic", ["../x", "..", "a/../../b", "/etc/passwd", "x\x00y", "."])
def test_topics_never_reach_outside_the_store(
    store: DefaultMessageStore,
    config: MessageStoreConfig,
    tmp_path: Path,
    topic: str,
) -> None:
    before = set(os.listdir(tmp_path))
    assert not store.put_message(build_message(topic, b"x")).stored
    with store.get_message("g", topic, 0, 0, 1) as r:
        assert r.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.find_consume_queue(topic, 0, create=True) is None
    with pytest.raises(TopicInvalid):
        store.topic_config_manager.create_or_update(topic, 4)
    assert store.query_message(topic, "k", 1, 0, 2**62) == []
    store.delete_topic(topic)
    assert set(os.listdir(tmp_path)) == before
    assert not os.path.exists(os.path.join(config.store_path_root_dir, "x"))


def test_topic_config_and_offsets_persist_atomically(config: MessageStoreConfig) -> None:
    s = open_store(config)
    s.topic_config_manager.create_or_update("Orders", 8, "rw")
    s.consumer_offset_manager.commit_offset("g1", "Orders", 3, 42)
    s.shutdown()
    with open(os.path.join(config.config_dir(), "topics.json")) as fh:
        assert json.load(fh)["topicConfigTable"]["Orders"]["readQueueNums"] == 8
    s = open_store(config)
    try:
        topic = s.topic_config_manager.get("Orders")
        assert topic is not None
        assert topic.write_queue_nums == 8
        assert s.consumer_offset_manager.query_offset("g1", "Orders", 3) == 42
        assert s.consumer_offset_manager.query_offset("g1", "Orders", 4) == -1
    finally:
        s.shutdown()


def test_a_torn_metadata_file_falls_back_to_its_backup_then_to_the_log(config: MessageStoreConfig) -> None:
    s = open_store(config)
    s.topic_config_manager.create_or_update("A", 2)
    s.state_snapshot_service.persist_all()
    s.topic_config_manager.create_or_update("B", 2)
    s.shutdown()
    path = os.path.join(config.config_dir(), "topics.json")
    with open(path, "w") as fh:
        fh.write('{"topicConfigTable": {"A"')
    s = open_store(config)
    try:
        # The .bak holds A only (the write before the last); B comes from the state records after it.
        assert s.topic_config_manager.get("A") is not None and s.topic_config_manager.get("B") is not None
    finally:
        s.shutdown()
    with open(path, "w") as fh:
        fh.write("garbage")
    with open(path + ".bak", "w") as fh:
        fh.write("garbage")
    s = open_store(config)
    try:  # neither file: the topics are rebuilt from the state records in the log
        assert [t.topic_name for t in s.topic_configs()] == ["A", "B"]
        topic = s.topic_config_manager.get("B")
        assert topic is not None
        assert topic.read_queue_nums == 2
    finally:
        s.shutdown()


def test_an_unreadable_topics_file_with_nothing_to_rebuild_from_refuses_the_start(config: MessageStoreConfig) -> None:
    os.makedirs(config.config_dir(), exist_ok=True)
    path = os.path.join(config.config_dir(), "topics.json")
    for name in (path, path + ".bak"):
        with open(name, "w") as fh:
            fh.write("garbage")
    with pytest.raises(MetadataCorrupt):  # no state records and no consume queues: never start empty
        DefaultMessageStore(config).load()


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 10_000, 20_000, 15_000
    cp.shutdown()
    assert os.path.getsize(path) == 4096
    again = StoreCheckpoint(path)
    assert (again.physic_msg_timestamp, again.logics_msg_timestamp, again.index_msg_timestamp) == (10_000, 20_000, 15_000)
    assert again.get_min_timestamp() == 7_000  # the smallest, less RocketMQ's 3 s margin
    again.shutdown()


def test_arriving_listener_sees_each_message_after_its_queue_entry(store: DefaultMessageStore) -> None:
    seen: list[tuple[str, int, int, tuple[int, ...] | None]] = []
    done = threading.Event()

    def listener(topic: str, qid: int, after: int, tags_codes: tuple[int, ...] | None) -> None:
        # The consume queue already holds the entry when the listener runs.
        assert store.get_max_offset_in_queue(topic, qid) >= after
        seen.append((topic, qid, after, tags_codes))
        if len(seen) == 3:
            done.set()

    store.add_message_arriving_listener(listener)
    for i in range(3):
        store.put_message(build_message("L", b"x", queue_id=1, tags="TagA" if i else None))
    assert done.wait(5)
    assert seen == [("L", 1, 1, (0,)), ("L", 1, 2, (2598919,)), ("L", 1, 3, (2598919,))]


def test_delete_topic_drops_queues_config_and_offsets(store: DefaultMessageStore, config: MessageStoreConfig) -> None:
    store.topic_config_manager.create_or_update("Gone", 2)
    store.consumer_offset_manager.commit_offset("g", "Gone", 0, 1)
    store.put_message(build_message("Gone", b"x"))
    wait_dispatched(store)
    assert store.delete_topic("Gone")
    assert store.topic_config_manager.get("Gone") is None
    assert store.consumer_offset_manager.query_offset("g", "Gone", 0) == -1
    assert not os.path.exists(os.path.join(config.consume_queue_dir(), "Gone"))
    r: GetMessageResult | PutMessageResult
    with store.get_message("g", "Gone", 0, 0, 1) as r:
        assert r.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    r = store.put_message(build_message("Gone", b"y"))
    assert r.items[0].logics_offset == 0, "a re-created topic starts its queues again"


def test_runtime_info_and_stats(store: DefaultMessageStore) -> None:
    for _ in range(10):
        store.put_message(build_message("S", b"12345"))
    wait_dispatched(store)
    with store.get_message("g", "S", 0, 0, 4):
        pass
    with store.get_message("g", "S", 0, 10, 4):
        pass
    info = store.runtime_info()
    assert info["commitlog_max_offset"] > 0 and info["dispatch_lag_bytes"] == 0 and info["ready"]
    snap = store.stats.snapshot()
    assert snap["put_messages"] == 10 and snap["put_bytes"] == info["commitlog_max_offset"]
    assert snap["get_found"] == 1 and snap["get_miss"] == 1 and snap["get_transferred_messages"] == 4
    assert sum(snap["put_latency_buckets"]) == 10
    from store.stats.store_stats_service import StoreStatsService

    stats = StoreStatsService()
    stats.sample(now=1.0)
    stats.record_put(50, 5000, 250)
    stats.sample(now=11.0)
    stats.record_get(True, 20, 2000)
    stats.sample(now=21.0)
    assert stats.tps(10)["put_messages"] == pytest.approx(0.0)
    assert stats.tps(10)["get_transferred_messages"] == pytest.approx(2.0)
    assert stats.tps(60)["put_messages"] == pytest.approx(2.5)
    assert stats.put_latency_buckets[1] == 1  # 250 us falls in the (100, 500] bucket
