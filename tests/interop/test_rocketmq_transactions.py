"""Transactions RocketMQ 5 left in a store: its merged op records and its check progress.

The store is laid out by tests/interop/rocketmq_store.py (RocketMQ's published layouts, nothing of
tidemq's codec) as a RocketMQ 5 broker leaves it: half messages as TransactionalMessageBridge
stores them (RMQ_SYS_TRANS_HALF_TOPIC queue 0, REAL_TOPIC, REAL_QID, TRAN_MSG, PGROUP,
__transactionId__), a committed copy as EndTransactionProcessor puts it, op records as
TransactionalMessageServiceImpl batches them (tag `d`, bodies `"N,"` and merged `"N,M,"`), and the
check service's progress as the consumer offset of CID_RMQ_SYS_TRANS. tidemq opens it in this
process and lists what is still pending.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from store import DefaultMessageStore, ResolveStatus, TransactionAction, TransactionState
from tests.interop.rocketmq_store import (
    TRANSACTION_COMMIT_TYPE,
    Host,
    Message,
    RocketMQStoreWriter,
    StoreLayout,
    TopicConfig,
    uniq_key,
)
from tests.store.conftest import open_store, small_config

LAYOUT = StoreLayout(commitlog_file_bytes=65536, cq_file_bytes=200, hash_slots=64, index_entries=512)
STORE = Host("10.0.0.7", 10911)
BORN = Host("192.168.1.20", 53412)
HALF_TOPIC, OP_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
BASE_MS = 1_767_225_600_000
# Half queue offset -> what RocketMQ did with it. Below the progress (1), half 0 was discarded
# after its checks (resolveDiscardMsg: no op record); the op queue holds "1," then "2,3,".
HALVES = {0: "discarded", 1: "rolled back", 2: "committed", 3: "rolled back", 4: "pending"}
OP_BODIES = [b"1,", b"2,3,"]


def build(root: Path, progress_group: str) -> dict[int, Message]:
    """The store under `root`; the half messages by half queue offset."""
    writer = RocketMQStoreWriter(str(root), LAYOUT)
    clock = BASE_MS
    halves: dict[int, Message] = {}
    for offset, fate in HALVES.items():
        clock += 10
        uniq = uniq_key(BORN.ip, 4242, 0x1B6D3586, clock, offset)
        props = {"WAIT": "true", "TRAN_MSG": "true", "PGROUP": "pg-orders", "__transactionId__": uniq}
        props |= {"REAL_TOPIC": "orders", "REAL_QID": "0"}
        body = f"order {offset} {fate}".encode()
        halves[offset] = writer.append(Message(HALF_TOPIC, 0, body, BORN, STORE, clock - 3, clock, "paid", [], uniq, props))
        assert halves[offset].queue_offset == offset
    for body in OP_BODIES:
        clock += 10
        op_uniq = uniq_key(STORE.ip, 4242, 0x1B6D3586, clock, 99)
        writer.append(Message(OP_TOPIC, 0, body, STORE, STORE, clock, clock, "d", [], op_uniq, {"WAIT": "false"}))
    committed = halves[2]
    copy_props = {k: v for k, v in committed.properties.items() if k not in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG")}
    writer.append(
        Message(
            "orders", 0, committed.body, BORN, STORE, committed.born_ms, clock + 5, "paid", [], committed.uniq, copy_props,
            transaction=TRANSACTION_COMMIT_TYPE, prepared_offset=committed.commitlog_offset,
        )
    )  # fmt: skip
    writer.topics = [TopicConfig("orders", 1, 1), TopicConfig(HALF_TOPIC, 1, 1), TopicConfig(OP_TOPIC, 1, 1)]
    writer.consumer_offsets = {f"{HALF_TOPIC}@{progress_group}": {0: 1}, f"{OP_TOPIC}@{progress_group}": {0: 0}}
    writer.write()
    return halves


def open_rocketmq_store(root: Path) -> DefaultMessageStore:
    return open_store(
        small_config(
            str(root),
            mapped_file_size_commit_log_bytes=LAYOUT.commitlog_file_bytes,
            mapped_file_size_consume_queue_bytes=LAYOUT.cq_file_bytes,
            max_hash_slot_num=LAYOUT.hash_slots,
            max_index_num=LAYOUT.index_entries,
        )
    )


@pytest.mark.parametrize("progress_group", ["CID_RMQ_SYS_TRANS", "CID_SYS_RMQ_TRANS"])
def test_rocketmq_5_op_records_and_check_progress_leave_only_the_unresolved_half(tmp_path: Path, progress_group: str) -> None:
    """CID_RMQ_SYS_TRANS: RocketMQ's progress, resumed from. CID_SYS_RMQ_TRANS: where tidemq kept it before, moved once."""
    root = tmp_path / "store"
    halves = build(root, progress_group)
    store = open_rocketmq_store(root)
    try:
        txn = store.transactions
        assert [h.msg_id for h in txn.unresolved(None, 0)] == [halves[4].uniq]
        assert store.query_offset("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 1
        # A check-back answering commit for a half RocketMQ rolled back changes nothing; the committed one stays committed.
        rolled_back = txn.resolve(halves[3].offset_msg_id, TransactionAction.COMMIT)
        assert (rolled_back.status, rolled_back.state) == (ResolveStatus.CONFLICT, TransactionState.ROLLED_BACK)
        committed = txn.resolve(halves[2].offset_msg_id, TransactionAction.ROLLBACK)
        assert (committed.status, committed.state) == (ResolveStatus.CONFLICT, TransactionState.COMMITTED)
        assert store.get_max_offset_in_queue("orders", 0) == 1  # only RocketMQ's committed copy
    finally:
        store.shutdown()
