"""Transactions on a real store on real files: the half's layout as RocketMQ stores it, the
commit's copy and op record, and a crash between the commit's two puts (a real process killed
with SIGKILL), after which the commit is recorded without a second copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from store import HALF_TOPIC, OP_TOPIC, DefaultMessageStore, PutBatch, ResolveStatus, TransactionAction, TransactionState, build_message
from store.codec.message_codec import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE
from store.transaction.transaction_message import op_offsets
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def messages(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[dict[str, Any]]:
    """Every message of the queue, decoded (through its consume queue entries)."""
    cq = store.find_consume_queue(topic, queue_id)
    found = []
    for offset in range(store.get_min_offset_in_queue(topic, queue_id), store.get_max_offset_in_queue(topic, queue_id)):
        entry = cq.read_entry(offset) if cq is not None else None
        assert entry is not None
        stored = store.look_message_by_offset(entry[0])
        assert stored is not None
        found.append(stored)
    return found


def test_half_commit_and_op_are_stored_as_rocketmq_stores_them(store: DefaultMessageStore) -> None:
    result = store.put(PutBatch.of([build_message("Txn", b"body", 2, tags="t")], producer_group="pg-a")).result()
    item = result.items[0]
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("Txn", 2) == 0
    (half,) = messages(store, HALF_TOPIC)
    assert half["queue_id"] == 0 and half["sys_flag"] & 0xC == TRANSACTION_NOT_TYPE
    props = half["properties"]
    assert (props["REAL_TOPIC"], props["REAL_QID"], props["TRAN_MSG"], props["PGROUP"]) == ("Txn", "2", "true", "pg-a")
    outcome = store.transactions.resolve(item.msg_id, TransactionAction.COMMIT)
    assert outcome.status is ResolveStatus.RESOLVED and outcome.state is TransactionState.COMMITTED
    wait_dispatched(store)
    (copy,) = messages(store, "Txn", 2)
    assert copy["sys_flag"] & 0xC == TRANSACTION_COMMIT_TYPE and copy["prepared_transaction_offset"] == item.wrote_offset
    assert "REAL_TOPIC" not in copy["properties"] and "TRAN_MSG" not in copy["properties"]
    assert copy["properties"]["UNIQ_KEY"] == props["UNIQ_KEY"] and copy["tags"] == "t"
    (op,) = messages(store, OP_TOPIC)
    assert op["tags"] == "d" and op["body"] == str(half["queue_offset"]).encode()


def test_crash_between_the_commits_two_puts_records_it_without_a_second_copy(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    out = subprocess.run([sys.executable, "-m", "tests.store.txn_crash_writer", root], cwd=ROOT, capture_output=True, timeout=60)
    assert out.returncode == -9, out.stderr.decode()
    committed, waiting = [line.split()[1] for line in out.stdout.decode().splitlines() if line.startswith("TXN")]
    store = open_store(small_config(root))
    try:
        txn = store.transactions
        assert {h.transaction_id for h in txn.unresolved("pg", 0)} == {committed, waiting}  # no op record: both pending
        assert len(messages(store, "TxnCrash", 1)) == 1
        # A rollback now is a conflict: the commit's copy is there, so it is committed (op recorded now).
        outcome = txn.resolve(committed, TransactionAction.ROLLBACK)
        assert outcome.status is ResolveStatus.CONFLICT and outcome.state is TransactionState.COMMITTED
        assert txn.resolve(committed, TransactionAction.COMMIT).status is ResolveStatus.ALREADY
        assert txn.counters.deduplicated == 1
        wait_dispatched(store)
        assert [m["body"] for m in messages(store, "TxnCrash", 1)] == [b"committed-before-crash"]
        assert [h.transaction_id for h in txn.unresolved("pg", 0)] == [waiting]
    finally:
        store.shutdown()


def test_the_check_service_records_a_commit_a_crash_interrupted(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    out = subprocess.run([sys.executable, "-m", "tests.store.txn_crash_writer", root], cwd=ROOT, capture_output=True, timeout=60)
    committed, waiting = [line.split()[1] for line in out.stdout.decode().splitlines() if line.startswith("TXN")]
    store = open_store(small_config(root, transaction_timeout_ms=1, transaction_check_max=1, transaction_check_interval_ms=10))
    try:
        txn = store.transactions
        # The service's passes: the first commits the first half (its copy is found) and counts a check of the
        # second, a later one rolls the second back (transaction_check_max = 1).
        wait_for(lambda: txn.unresolved(None, 0) == [], 10, what=lambda: f"the check service to resolve {txn.unresolved(None, 0)}")
        assert txn.counters.deduplicated == 1 and txn.counters.check_rollbacks == 1
        assert txn.resolve(committed, TransactionAction.COMMIT).status is ResolveStatus.ALREADY
        assert txn.resolve(waiting, TransactionAction.ROLLBACK).status is ResolveStatus.ALREADY
        wait_dispatched(store)
        assert [m["body"] for m in messages(store, "TxnCrash", 1)] == [b"committed-before-crash"]
        # The progress, kept as RocketMQ keeps it.
        wait_for(lambda: store.query_offset("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 2, 10, what="the half topic's progress to be committed")
    finally:
        store.shutdown()
    reopened = open_store(small_config(root))
    try:
        assert reopened.transactions.unresolved(None, 0) == []
        assert reopened.transactions.resolve(waiting, TransactionAction.COMMIT).status is ResolveStatus.CONFLICT
    finally:
        reopened.shutdown()


def test_op_bodies_are_read_as_rocketmqs_reader_splits_them() -> None:
    """TransactionalMessageServiceImpl: String.split(",") (trailing empty pieces dropped), Long.parseLong per piece, failures skipped."""
    assert op_offsets(b"7") == (7,)  # RocketMQ 4's and tidemq's form
    assert op_offsets(b"7,") == (7,) and op_offsets(b"2,3,") == (2, 3)  # RocketMQ 5's
    assert op_offsets(b"1,,x,-4, 5,6") == (1, 6)  # pieces Long.parseLong refuses (or a negative one, below any progress) are skipped
    assert op_offsets(b"") == op_offsets(b",") == op_offsets(b"9" * 19) == ()
