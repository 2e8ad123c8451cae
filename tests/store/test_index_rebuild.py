"""A store whose index is missing or older than its commitlog (a copied store) gets it rebuilt
at start: in the background for a large gap (IndexRebuildService; the store is not ready
meanwhile), with recovery's dispatch for a small one; then every key is found."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

from store import INDEX_REBUILD_PHASE, DefaultMessageStore, MessageStoreConfig, build_message
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.waiting import wait_for

TOPIC = "T"
COUNT = 600  # two index entries each (KEYS and UNIQ_KEY): several index files of small_config's 256


def rebuild_config(root: str, **overrides: object) -> MessageStoreConfig:
    return small_config(root, index_rebuild_background_min_bytes=0, **overrides)


def write_keyed_messages(config: MessageStoreConfig, count: int = COUNT) -> None:
    s = open_store(config)
    s.topic_config_manager.create_or_update(TOPIC, 2)
    for i in range(count):
        assert s.put_message(build_message(TOPIC, b"body-%d" % i, i % 2, keys=[f"k-{i}"], uniq_key=uniq(i))).ok
    wait_dispatched(s)
    s.shutdown()


def uniq(i: int) -> str:
    return f"{i:032X}"


def missing_keys(s: DefaultMessageStore, count: int = COUNT) -> list[str]:
    """The keys (KEYS and UNIQ_KEY) of the messages written that a key query does not find."""
    keys = [(f"k-{i}", i) for i in range(count)] + [(uniq(i), i) for i in range(count)]
    return [key for key, i in keys if [m["body"] for m in s.query_message(TOPIC, key, 4, 0, 2**62)] != [b"body-%d" % i]]


def block_index_dir(config: MessageStoreConfig) -> None:
    """Delete index/ and put a plain file in its place: no index file can be created until it goes."""
    shutil.rmtree(config.index_dir())
    with open(config.index_dir(), "w"):
        pass


def test_a_missing_index_is_rebuilt_in_the_background(tmp_path: Path) -> None:
    config = rebuild_config(str(tmp_path / "store"))
    write_keyed_messages(config)
    block_index_dir(config)  # the rebuild fails (and retries) until the path is freed: it is seen running
    s = open_store(config)
    try:
        assert s.index_rebuild_from == 0
        assert not s.is_ready() and s.recovery_progress()["phase"] == INDEX_REBUILD_PHASE
        assert s.put_message(build_message(TOPIC, b"late", 0, keys=["late"])).ok  # dispatch adds no keys meanwhile
        wait_dispatched(s)
        assert s.query_message(TOPIC, "k-1", 4, 0, 2**62) == []
        os.unlink(config.index_dir())
        wait_for(s.is_ready, 60, what="the index rebuild to finish")
        assert s.recovery_progress()["phase"] == "recovered"
        assert missing_keys(s) == []
        assert [m["body"] for m in s.query_message(TOPIC, "late", 4, 0, 2**62)] == [b"late"]
        assert s.put_message(build_message(TOPIC, b"after", 1, keys=["after"])).ok  # dispatch indexes again
        wait_dispatched(s)
        assert [m["body"] for m in s.query_message(TOPIC, "after", 4, 0, 2**62)] == [b"after"]
    finally:
        s.shutdown()
    s = open_store(config)  # the rebuilt index is whole: nothing to rebuild
    try:
        assert s.index_rebuild_from is None and s.is_ready()
        assert missing_keys(s) == []
    finally:
        s.shutdown()


def test_an_older_index_rebuilds_only_the_tail(tmp_path: Path) -> None:
    config = rebuild_config(str(tmp_path / "store"))
    write_keyed_messages(config)
    names = sorted(os.listdir(config.index_dir()))
    assert len(names) >= 3
    os.unlink(os.path.join(config.index_dir(), names[-1]))
    with open(os.path.join(config.index_dir(), names[-2]), "rb") as fh:
        kept_end = struct.unpack_from(">q", fh.read(32), 24)[0]  # the IndexFile header's endPhyOffset
    assert kept_end > 0
    s = DefaultMessageStore(config)
    s.load()
    kept_message = s.commit_log.look_message_by_offset(kept_end)
    assert kept_message is not None
    # From the end of the last message the kept index holds, not from the log's start.
    assert s.index_rebuild_from == kept_end + kept_message["store_size"]
    s.start()
    try:
        wait_for(s.is_ready, 60, what="the index rebuild to finish")
        assert s.index_rebuild_service is not None and s.index_rebuild_service.start_offset == s.index_rebuild_from
        assert missing_keys(s) == []
        assert sorted(os.listdir(config.index_dir()))[: len(names) - 1] == names[:-1]  # the kept files stay
    finally:
        s.shutdown()


def test_a_rebuild_stopped_by_shutdown_goes_on_at_the_next_start(tmp_path: Path) -> None:
    config = rebuild_config(str(tmp_path / "store"))
    write_keyed_messages(config)
    block_index_dir(config)
    s = open_store(config)
    assert not s.is_ready()
    s.shutdown()
    os.unlink(config.index_dir())
    s = open_store(config)
    try:
        assert s.index_rebuild_from == 0
        wait_for(s.is_ready, 60, what="the index rebuild to finish")
        assert missing_keys(s) == []
    finally:
        s.shutdown()


def test_a_small_gap_is_dispatched_again_with_recovery(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "store"))  # index_rebuild_background_min_bytes: 64 MiB
    write_keyed_messages(config)
    shutil.rmtree(config.index_dir())
    s = DefaultMessageStore(config)
    s.load()
    try:
        assert s.index_rebuild_from is None
        assert missing_keys(s) == []  # indexed during load
        s.start()
        assert s.is_ready()
    finally:
        s.shutdown()


def test_after_a_crash_the_gap_is_dispatched_with_recovery(tmp_path: Path) -> None:
    config = rebuild_config(str(tmp_path / "store"))  # would go to the background after a clean shutdown
    write_keyed_messages(config)
    shutil.rmtree(config.index_dir())
    with open(config.abort_path(), "w"):
        pass
    s = DefaultMessageStore(config)
    s.load()
    try:
        assert s.index_rebuild_from is None
        assert missing_keys(s) == []  # the timer's and transactions' checks may read it at once
    finally:
        s.shutdown()
