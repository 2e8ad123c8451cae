"""A running store's role changes (a cluster election) and the recovery limit (a returning old master's cut)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import cast

import pytest

from store import BrokerRole, DefaultMessageStore, MessageStoreConfig, PutRefusal, TimerStatus, build_message, deliver_at
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.store.test_timer import timer_config, wait_delivered
from tests.waiting import wait_for


def test_a_slave_made_master_accepts_puts_and_back(config: MessageStoreConfig) -> None:
    config.broker_role = BrokerRole.SLAVE
    s = open_store(config)
    try:
        assert s.put_message(build_message("R", b"refused", queue_id=0)).refusal is PutRefusal.NOT_MASTER
        s.set_broker_role(BrokerRole.SYNC_MASTER)
        assert s.config.broker_role is BrokerRole.SYNC_MASTER
        assert s.put_message(build_message("R", b"accepted", queue_id=0)).ok
        s.set_broker_role(BrokerRole.SLAVE)
        assert s.put_message(build_message("R", b"refused again", queue_id=0)).refusal is PutRefusal.NOT_MASTER
    finally:
        s.shutdown()


def test_a_promoted_slave_continues_the_queue_offsets_it_replicated(tmp_path: Path) -> None:
    master = open_store(small_config(str(tmp_path / "m")))
    slave = open_store(small_config(str(tmp_path / "s"), broker_role=BrokerRole.SLAVE))
    try:
        for i in range(300):
            assert master.put_message(build_message("R", f"m{i}".encode() * 30, queue_id=i % 2)).ok
        offset = 0
        while offset < master.commit_log_max_offset():
            data = master.get_commit_log_data(offset, 8192)
            assert slave.append_replicated_data(offset, data)
            offset += len(data)
        # The take-over wakes the snapshot service, which writes the promoted store's first snapshot (221 bytes
        # here) when its thread gets there: stopped, so that the put below is the first record after the replica.
        slave.state_snapshot_service.shutdown()
        slave.set_broker_role(BrokerRole.SYNC_MASTER)  # no replication waiter: answered once stored
        r = slave.put_message(build_message("R", b"first of the new master", queue_id=1))
        assert r.ok and r.items[0].logics_offset == 150 and r.items[0].wrote_offset == master.commit_log_max_offset()
        wait_dispatched(slave)
        got = slave.get_message("g", "R", 1, 149, 2, None)
        assert [m["body"] for m in got.decode()] == [b"m299" * 30, b"first of the new master"]
    finally:
        master.shutdown()
        slave.shutdown()


@pytest.mark.parametrize("crashed", [False, True])
def test_the_recovery_limit_cuts_the_log_its_queues_and_its_index(config: MessageStoreConfig, crashed: bool) -> None:
    s = open_store(config)
    kept = [s.put_message(build_message("R", f"kept-{i}".encode() * 50, queue_id=0, keys=[f"k{i}"])) for i in range(200)]
    limit = s.commit_log_max_offset()
    for i in range(100):
        assert s.put_message(build_message("R", f"tail-{i}".encode() * 50, queue_id=i % 2, keys=[f"t{i}"])).ok
    wait_dispatched(s)
    assert all(r.ok for r in kept) and s.commit_log_max_offset() > limit
    s.shutdown()
    if crashed:
        open(config.abort_path(), "w").close()  # what a killed process leaves: the next load recovers as after a crash
    s = DefaultMessageStore(config)
    s.set_recovery_limit(limit)
    s.load()
    s.start()
    try:
        assert s.last_exit_ok is not crashed
        assert s.commit_log_max_offset() == limit
        assert s.get_max_offset_in_queue("R", 0) == 200 and s.get_max_offset_in_queue("R", 1) == 0
        assert s.query_message("R", "t3", 5, 0, 2**62) == [] and len(s.query_message("R", "k3", 5, 0, 2**62)) == 1
        r = s.put_message(build_message("R", b"after", queue_id=0))
        assert r.items[0].wrote_offset == limit and r.items[0].logics_offset == 200
        with pytest.raises(RuntimeError):
            s.set_recovery_limit(0)
    finally:
        s.shutdown()


def test_a_promoted_slave_does_not_deliver_again_a_timer_slot_its_master_delivered(tmp_path: Path) -> None:
    """The old master delivered a slot after its last progress record (here it recorded none), so the
    promoted slave must check the slot's units against the index before putting them. The election is
    held half-way, as a delay-level scan in progress holds it (the scan's lock): a role that read master
    before the timer's checks were armed let its dequeue put the slot again unchecked meanwhile, and in
    a group each checkpoint delivered twice was revived twice."""
    master = open_store(timer_config(str(tmp_path / "m")))
    slave = open_store(timer_config(str(tmp_path / "s"), broker_role=BrokerRole.SLAVE))
    try:
        due = int(time.time() * 1000) + 600
        for i in range(3):
            assert master.put_message(deliver_at(build_message("T", f"t{i}".encode(), 0), due)).ok
        delivered = wait_delivered(master, "T", 3)
        offset = 0
        while offset < master.commit_log_max_offset():
            data = master.get_commit_log_data(offset, 8192)
            assert slave.append_replicated_data(offset, data)
            offset += len(data)
        wait_dispatched(slave)
        wait_for(lambda: slave.get_max_offset_in_queue("T", 0) == 3, what="the slave to hold the master's deliveries")
        status = slave.timer_status()
        assert status is not None
        assert status["read_time_ms"] < due  # nothing told the slave that the slot was delivered

        scan_lock = slave.schedule_service._pass_lock
        with scan_lock:
            election = threading.Thread(target=slave.set_broker_role, args=(BrokerRole.SYNC_MASTER,))
            election.start()
            time.sleep(0.6)  # three passes of the timer's idle wait (200 ms) while the election waits for the scan
        election.join(10)
        assert not election.is_alive() and slave.config.broker_role is BrokerRole.SYNC_MASTER
        wait_for(
            lambda: cast("TimerStatus", slave.timer_status())["read_time_ms"] > due,
            what="the promoted slave's timer to pass the slot",
        )
        wait_dispatched(slave)
        assert slave.get_max_offset_in_queue("T", 0) == 3
        status = slave.timer_status()
        assert status is not None and status["deduplicated"] == 3
        assert [m["body"] for m in wait_delivered(slave, "T", 3)] == [m["body"] for m in delivered]
    finally:
        master.shutdown()
        slave.shutdown()


@pytest.mark.parametrize("index_setting", ["message_index_enable", "message_index_uniq_key_enable"])
def test_a_replicated_store_without_the_key_index_says_what_a_failover_may_deliver_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, index_setting: str
) -> None:
    # A new master finds what its old master delivered after its last progress record by UNIQ_KEY in the index.
    s = open_store(small_config(str(tmp_path / "s"), **{index_setting: False}))
    try:
        with caplog.at_level("WARNING", logger="tidemq.store"):
            s.set_replicated(True)
        assert any("may deliver delayed messages, timer messages and committed transaction" in r.message for r in caplog.records)
    finally:
        s.shutdown()


def test_a_replicated_store_with_the_key_index_warns_of_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = open_store(small_config(str(tmp_path / "s")))
    try:
        with caplog.at_level("WARNING", logger="tidemq.store"):
            s.set_replicated(True)
        assert not [r for r in caplog.records if "message_index" in r.message]
    finally:
        s.shutdown()
