"""Metadata files in RocketMQ's shapes: topics.json (TopicConfigManager), consumerOffset.json
(ConsumerOffsetManager) and delayOffset.json (ScheduleMessageService), as fastjson writes them
(integer map keys unquoted) and as tidemq writes them (valid JSON)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from store import MessageStoreConfig, MetadataCorrupt
from store.disk.json_file import loads_metadata, quote_integer_keys
from store.schedule.delay_offset_table import DelayOffsetTable
from tests.store.conftest import open_store

# A RocketMQ 4.9 broker's files, byte for byte as fastjson writes them (pretty-printed by ConfigManager.persist).
ROCKETMQ_TOPICS = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"timestamp":1700000000000
\t},
\t"topicConfigTable":{
\t\t"Orders":{
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"Orders",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":2
\t\t},
\t\t"ReadOnly":{"attributes":{"message.type":"FIFO"},"order":true,"perm":5,"readQueueNums":1,"topicFilterType":"MULTI_TAG","topicName":"ReadOnly","topicSysFlag":3,"writeQueueNums":1}
\t}
}"""
ROCKETMQ_OFFSETS = '{"offsetTable":{"Orders@g1":{0:7,1:3},"%RETRY%g1@g1":{0:0}}}'
ROCKETMQ_DELAY_OFFSETS = '{"offsetTable":{1:5,2:0,18:12}}'


def test_quote_integer_keys_touches_only_member_names() -> None:
    assert quote_integer_keys('{"a":{0:7, -1 :3},"b":[1,2,{3:4}]}') == '{"a":{"0":7, "-1" :3},"b":[1,2,{"3":4}]}'
    tricky = '{"x{0:1}\\"{2:": {5: "{6:7}"}}'  # braces and digits inside strings, an escaped quote
    assert json.loads(quote_integer_keys(tricky)) == {'x{0:1}"{2:': {"5": "{6:7}"}}
    assert quote_integer_keys("[0:1]") == "[0:1]"  # not an object: left for the parser to refuse


@pytest.mark.parametrize("text", ["{a:1}", "{1.5:1}", "{0x1:1}", "{1 2:3}", "{-:1}", "{'1':1}", "{1:}"])
def test_anything_but_unquoted_integer_keys_is_still_refused(text: str) -> None:
    with pytest.raises(ValueError):
        loads_metadata(text.encode())


def test_rocketmq_topics_json_is_loaded_and_written_back_in_its_shape(config: MessageStoreConfig) -> None:
    path = _write_config_file(config, "topics.json", ROCKETMQ_TOPICS)
    s = open_store(config)
    try:
        orders, read_only = s.topic_config_manager.get("Orders"), s.topic_config_manager.get("ReadOnly")
        assert orders is not None and (orders.read_queue_nums, orders.write_queue_nums, orders.perm) == (4, 2, "rw")
        assert read_only is not None and read_only.perm == "r"  # 5 = read | inherit
        s.topic_config_manager.create_or_update("New", 3, "w")
    finally:
        s.shutdown()
    with open(path) as fh:
        doc = json.load(fh)
    assert doc["dataVersion"]["counter"] == 8
    table = doc["topicConfigTable"]
    assert table["ReadOnly"] == {
        "topicName": "ReadOnly", "readQueueNums": 1, "writeQueueNums": 1, "perm": 5,
        "topicFilterType": "MULTI_TAG", "topicSysFlag": 3, "order": True, "attributes": {"message.type": "FIFO"},
    }  # fmt: skip
    assert table["Orders"]["perm"] == 6 and (table["Orders"]["readQueueNums"], table["Orders"]["writeQueueNums"]) == (4, 2)
    assert table["New"] == {
        "topicName": "New", "readQueueNums": 3, "writeQueueNums": 3, "perm": 2,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {},
    }  # fmt: skip
    assert table["Orders"]["attributes"] == {}  # a RocketMQ 4 entry has none


# RocketMQ 5.3's TopicConfigManager.init with a default broker (tidemq's queue counts for TBW102 and the revive topic).
STARTUP_TOPICS = {
    "SELF_TEST_TOPIC": (1, 6), "TBW102": (4, 7), "BenchmarkTest": (1024, 6), "DefaultCluster": (16, 7),
    "OFFSET_MOVED_EVENT": (1, 6), "SCHEDULE_TOPIC_XXXX": (18, 6), "DefaultCluster_REPLY_TOPIC": (1, 6),
    "rmq_sys_REVIVE_LOG_DefaultCluster": (8, 6), "RMQ_SYS_TRANS_HALF_TOPIC": (1, 6), "RMQ_SYS_TRANS_OP_HALF_TOPIC": (1, 6),
    "rmq_sys_wheel_timer": (1, 6),
}  # fmt: skip


def test_rocketmqs_system_topics_are_written_as_its_broker_writes_them_and_kept_apart(config: MessageStoreConfig) -> None:
    # A RocketMQ broker's own entries: its cluster topic without clusterTopicEnable (perm 1), its broker's sync topic.
    path = _write_config_file(
        config, "topics.json",
        '{"topicConfigTable":{"DefaultCluster":{"topicName":"DefaultCluster","readQueueNums":16,"writeQueueNums":16,"perm":1},'
        '"rmq_sys_SYNC_BROKER_MEMBER_broker-a":{"topicName":"rmq_sys_SYNC_BROKER_MEMBER_broker-a","readQueueNums":1,'
        '"writeQueueNums":1,"perm":1},"Orders":{"topicName":"Orders","readQueueNums":2,"writeQueueNums":2,"perm":6}}}',
    )  # fmt: skip
    for _ in range(2):  # written, then read back and written again
        s = open_store(config)
        try:
            assert [t.topic_name for t in s.topic_configs()] == ["Orders"]  # the API serves none of RocketMQ's
            s.topic_config_manager.create_or_update("Orders", 3)
        finally:
            s.shutdown()
        with open(path) as fh:
            table = json.load(fh)["topicConfigTable"]
        for name, (queues, perm) in STARTUP_TOPICS.items():
            if name != "DefaultCluster":
                entry = table[name]
                assert (entry["topicName"], entry["readQueueNums"], entry["writeQueueNums"], entry["perm"]) == (name, queues, queues, perm)
                assert (entry["topicFilterType"], entry["topicSysFlag"], entry["order"], entry["attributes"]) == (
                    "SINGLE_TAG",
                    0,
                    False,
                    {},
                )
        assert table["DefaultCluster"]["perm"] == 1 and table["rmq_sys_SYNC_BROKER_MEMBER_broker-a"]["perm"] == 1  # as read
        assert table["Orders"]["readQueueNums"] == 3 and set(table) == {*STARTUP_TOPICS, "rmq_sys_SYNC_BROKER_MEMBER_broker-a", "Orders"}


@pytest.mark.parametrize(("perm", "bits"), [("rw", 6), ("r", 4), ("w", 2), ("", 0)])
def test_each_perm_is_written_as_permname_bits_and_the_counter_grows(config: MessageStoreConfig, perm: str, bits: int) -> None:
    s = open_store(config)
    try:
        s.topic_config_manager.create_or_update("T", 2, perm)
        s.state_snapshot_service.persist_all()  # topics.json is the table's snapshot, written in the background
        first = _topics_doc(config)
        s.topic_config_manager.create_or_update("T", 3, perm)
        s.state_snapshot_service.persist_all()
        second = _topics_doc(config)
    finally:
        s.shutdown()
    assert first["topicConfigTable"]["T"]["perm"] == bits
    assert second["dataVersion"]["counter"] == first["dataVersion"]["counter"] + 1
    s = open_store(config)
    try:
        topic = s.topic_config_manager.get("T")
        assert topic is not None
        assert topic.perm == perm
    finally:
        s.shutdown()


def test_the_former_topics_shape_is_migrated_on_load(config: MessageStoreConfig, caplog: pytest.LogCaptureFixture) -> None:
    former = {"topics": {"Old": {"topic_name": "Old", "read_queue_nums": 2, "write_queue_nums": 2, "perm": "r"}}}
    _write_config_file(config, "topics.json", json.dumps(former))
    with caplog.at_level(logging.INFO, logger="tidemq.store"):
        s = open_store(config)
    try:
        topic = s.topic_config_manager.get("Old")
        assert topic is not None
        assert topic.perm == "r"
    finally:
        s.shutdown()
    assert [r for r in caplog.records if "migrated 1 topic" in r.getMessage()]
    assert _topics_doc(config)["topicConfigTable"]["Old"]["perm"] == 4


def test_a_topic_entry_of_the_wrong_type_is_refused(config: MessageStoreConfig) -> None:
    _write_config_file(config, "topics.json", '{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":"4","perm":6}}}')
    with pytest.raises(MetadataCorrupt):
        open_store(config)


def test_rocketmq_consumer_offsets_with_unquoted_keys_are_read_and_written_as_json(config: MessageStoreConfig) -> None:
    path = _write_config_file(config, "consumerOffset.json", ROCKETMQ_OFFSETS)
    s = open_store(config)
    try:
        assert s.consumer_offset_manager.offsets_of("g1", "Orders") == {0: 7, 1: 3}
        s.consumer_offset_manager.commit_offset("g1", "Orders", 1, 4)
    finally:
        s.shutdown()
    with open(path) as fh:
        assert json.load(fh)["offsetTable"] == {"Orders@g1": {"0": 7, "1": 4}, "%RETRY%g1@g1": {"0": 0}}


def test_rocketmq_delay_offsets_with_unquoted_keys_are_read(tmp_path: Path) -> None:
    (tmp_path / "delayOffset.json").write_text(ROCKETMQ_DELAY_OFFSETS)
    table = DelayOffsetTable(str(tmp_path))
    table.load()
    assert table.levels() == {1: 5, 2: 0, 18: 12}
    table.set(2, 1)
    assert table.persist_if_dirty()
    doc = json.loads((tmp_path / "delayOffset.json").read_text())
    assert doc["offsetTable"] == {"1": 5, "2": 1, "18": 12}
    assert doc["dataVersion"]["counter"] == 1 and doc["dataVersion"]["stateVersion"] == 0  # DelayOffsetSerializeWrapper's


def test_a_rocketmq_5_delay_offset_files_data_version_counts_on(tmp_path: Path) -> None:
    (tmp_path / "delayOffset.json").write_text(
        '{"dataVersion":{"counter":41,"stateVersion":0,"timestamp":1700000000000},"offsetTable":{1:5}}'
    )
    table = DelayOffsetTable(str(tmp_path))
    table.load()
    table.set(1, 6)
    assert table.persist_if_dirty()
    doc = json.loads((tmp_path / "delayOffset.json").read_text())
    assert doc["offsetTable"] == {"1": 6} and doc["dataVersion"]["counter"] == 42


def _write_config_file(config: MessageStoreConfig, name: str, text: str) -> str:
    """`text` as the metadata file `name` of a store not yet opened; its path."""
    os.makedirs(config.config_dir(), exist_ok=True)
    path = os.path.join(config.config_dir(), name)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def _topics_doc(config: MessageStoreConfig) -> dict[str, Any]:
    with open(os.path.join(config.config_dir(), "topics.json")) as fh:
        doc: dict[str, Any] = json.load(fh)
        return doc
