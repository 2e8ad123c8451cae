"""POP consumption's stored pieces: checkpoint and ack records, receipt handles, group settings."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ConfigInvalid
from store.metadata.topic_names import dlq_topic, retry_topic, revive_topic
from store.pop.pop_records import AckMsg, PopCheckPoint, RecordInvalid
from store.pop.receipt_handle import SECRET_FILE, HandleInvalid, ReceiptHandle, ReceiptHandles
from store.pop.subscription_group_manager import FILE_NAME, SubscriptionGroup, SubscriptionGroupManager


def test_checkpoint_is_stored_with_rocketmq_field_names_and_reads_back() -> None:
    ck = PopCheckPoint("orders", "billing", 3, start_offset=100, num=4, pop_time=1_700_000_000_000, invisible_time=30_000,
                       revive_offset=7, offset_diffs=[0, 1, 5, 9])  # fmt: skip
    doc = json.loads(ck.to_json())
    assert doc == {"so": 100, "pt": 1_700_000_000_000, "it": 30_000, "bm": 0, "n": 4, "q": 3, "t": "orders", "c": "billing",
                   "ro": 7, "rt": 1_700_000_030_000, "d": [0, 1, 5, 9]}  # fmt: skip
    assert PopCheckPoint.from_json(ck.to_json()) == ck
    assert [ck.offset_at(i) for i in range(4)] == [100, 101, 105, 109]
    assert [ck.index_of(o) for o in (99, 100, 105, 106, 109)] == [-1, 0, 2, -1, 3]
    dense = PopCheckPoint("t", "g", 0, start_offset=10, num=3, pop_time=1, invisible_time=2)
    assert "d" not in json.loads(dense.to_json())
    assert [dense.index_of(o) for o in (9, 10, 12, 13)] == [-1, 0, 2, -1]


def test_ack_is_stored_with_rocketmq_field_names_and_names_its_checkpoint() -> None:
    ack = AckMsg("orders", "billing", 3, start_offset=100, ack_offset=105, pop_time=5)
    assert json.loads(ack.to_json()) == {"ao": 105, "so": 100, "c": "billing", "t": "orders", "q": 3, "pt": 5}
    assert AckMsg.from_json(ack.to_json()) == ack
    ck = PopCheckPoint("orders", "billing", 3, start_offset=100, num=8, pop_time=5, invisible_time=1)
    assert ack.merge_key() == ck.merge_key()


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b"{", b'{"so": 1}', b'{"so":1,"pt":1,"it":1,"n":0,"q":0,"t":"t","c":"g"}',
     b'{"so":1,"pt":1,"it":1,"n":33,"q":0,"t":"t","c":"g"}', b'{"so":"1","pt":1,"it":1,"n":1,"q":0,"t":"t","c":"g"}',
     b'{"so":1,"pt":1,"it":1,"n":2,"q":0,"t":"t","c":"g","d":[0]}', b'{"so":1,"pt":1,"it":1,"n":1,"q":0,"t":"","c":"g"}'],
)  # fmt: skip
def test_unreadable_checkpoints_are_refused(body: bytes) -> None:
    with pytest.raises(RecordInvalid):
        PopCheckPoint.from_json(body)


def test_system_topic_names_follow_rocketmq() -> None:
    assert revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert retry_topic("billing", "orders") == "%RETRY%billing_orders"
    assert dlq_topic("billing") == "%DLQ%billing"


HANDLE = ReceiptHandle(start_offset=100, pop_time=1_700_000_000_000, invisible_time=30_000, revive_queue_id=2, queue_id=3,
                       offset=105, retry=False, reconsume_times=0)  # fmt: skip


def test_a_handle_reads_back_for_its_group_and_topic_only(tmp_path: Path) -> None:
    handles = ReceiptHandles.load_or_create(str(tmp_path))
    text = handles.encode("billing", "orders", HANDLE)
    assert handles.decode("billing", "orders", text) == HANDLE
    assert HANDLE.invisible_until_ms == 1_700_000_030_000
    for group, topic in (("other", "orders"), ("billing", "other"), ("billingorders", ""), ("", "billingorders")):
        with pytest.raises(HandleInvalid):
            handles.decode(group, topic, text)


def test_every_one_character_change_of_a_handle_is_refused() -> None:
    """Exhaustive over positions and the base64url alphabet, including the last character of each
    part, whose spare bits a lenient decoder would ignore."""
    handles = ReceiptHandles(b"k" * 32)
    text = handles.encode("g", "t", HANDLE)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.="
    for i in range(len(text)):
        for char in alphabet:
            altered = text[:i] + char + text[i + 1 :]
            if altered != text:
                with pytest.raises(HandleInvalid):
                    handles.decode("g", "t", altered)


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0, max_value=200), char=st.sampled_from("AZaz09-_.=+/ é"))
def test_an_altered_handle_is_refused(position: int, char: str) -> None:
    handles = ReceiptHandles(b"k" * 32)
    text = handles.encode("g", "t", HANDLE)
    i = position % len(text)
    altered = text[:i] + char + text[i + 1 :]
    if altered == text:
        return
    with pytest.raises(HandleInvalid):
        handles.decode("g", "t", altered)


def test_a_forged_handle_with_another_secret_is_refused(tmp_path: Path) -> None:
    forged = ReceiptHandles(b"x" * 32).encode("g", "t", HANDLE)
    with pytest.raises(HandleInvalid):
        ReceiptHandles.load_or_create(str(tmp_path)).decode("g", "t", forged)
    for junk in ("", ".", "abc", "a.b.c", "é.é", "x" * 300):
        with pytest.raises(HandleInvalid):
            ReceiptHandles.load_or_create(str(tmp_path)).decode("g", "t", junk)


def test_the_secret_survives_a_reopen_and_only_the_owner_reads_it(tmp_path: Path) -> None:
    text = ReceiptHandles.load_or_create(str(tmp_path)).encode("g", "t", HANDLE)
    assert ReceiptHandles.load_or_create(str(tmp_path)).decode("g", "t", text) == HANDLE
    mode = stat.S_IMODE(os.stat(tmp_path / SECRET_FILE).st_mode)
    assert mode == 0o600


def test_groups_persist_in_rocketmq_shape(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(str(tmp_path))
    assert groups.put(SubscriptionGroup("billing", max_reconsume_times=3, fifo=True)) is True
    assert groups.put(SubscriptionGroup("audit")) is True
    assert groups.put(SubscriptionGroup("audit", max_reconsume_times=5)) is False
    groups.persist()  # the local snapshot (the store's StateSnapshotService writes it in the background)
    groups.persist()
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    table = doc["subscriptionGroupTable"]
    assert table["billing"]["retryMaxTimes"] == 3 and table["billing"]["consumeMessageOrderly"] is True
    assert table["audit"]["groupName"] == "audit" and table["audit"]["retryMaxTimes"] == 5
    assert doc["dataVersion"]["counter"] == 2  # one new dataVersion per write, as RocketMQ's ConfigManager
    again = SubscriptionGroupManager(str(tmp_path))
    again.load()
    assert again.all() == [SubscriptionGroup("audit", 5, False), SubscriptionGroup("billing", 3, True)]
    assert again.delete("audit") and not again.delete("audit")
    assert [g.name for g in again.all()] == ["billing"]


def test_rocketmq_5_group_attributes_are_kept_across_an_update(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(
        '{"subscriptionGroupTable":{"g":{"groupName":"g","retryMaxTimes":4,"attributes":{"lite.bind.topic":"t"}}},'
        '"dataVersion":{"counter":9,"stateVersion":0,"timestamp":1700000000000}}'
    )
    groups = SubscriptionGroupManager(str(tmp_path))
    groups.load()
    assert groups.put(SubscriptionGroup("g", max_reconsume_times=6)) is False
    assert groups.put(SubscriptionGroup("new")) is True
    groups.persist()  # the local snapshot (the store's StateSnapshotService writes it in the background)
    table = json.loads((tmp_path / FILE_NAME).read_text())["subscriptionGroupTable"]
    assert table["g"]["attributes"] == {"lite.bind.topic": "t"} and table["g"]["retryMaxTimes"] == 6
    assert table["new"]["attributes"] == {}


def test_a_bad_groups_file_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(json.dumps({"subscriptionGroupTable": {"g": {"retryMaxTimes": -1}}}))
    with pytest.raises(ConfigInvalid):
        SubscriptionGroupManager(str(tmp_path)).load()


def test_batch_ack_is_stored_with_rocketmq_field_names() -> None:
    from store.pop.pop_records import BatchAckMsg

    ack = BatchAckMsg("orders", "billing", 3, start_offset=100, ack_offsets=(100, 103), pop_time=5)
    assert json.loads(ack.to_json()) == {"aol": [100, 103], "so": 100, "c": "billing", "t": "orders", "q": 3, "pt": 5}
    assert BatchAckMsg.from_json(ack.to_json()) == ack
    with pytest.raises(RecordInvalid):
        BatchAckMsg.from_json(b'{"aol": [], "so": 1, "c": "g", "t": "t", "q": 0, "pt": 1}')
