"""State in the log: every table a consumer or a scheduler depends on is rebuilt from the commitlog.

Real stores on real files. A slave is a second store fed the master's log bytes as the HA stream
feeds them (`append_replicated_data`); its dispatch applies the state records. Crashes are real
SIGKILLs of a writer process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from store import BrokerRole, DefaultMessageStore, MessageStoreConfig, build_message
from store.state.state_log import MIN_DELTAS_BETWEEN_SNAPSHOTS, STATE_TOPIC
from store.state.state_table import StateKind
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 20.0


def config_of(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {"max_message_size_bytes": 64 * 1024, "mapped_file_size_commit_log_bytes": 256 * 1024}
    return small_config(root, **{**values, **overrides})


def replicate(master: DefaultMessageStore, slave: DefaultMessageStore) -> None:
    """Copy the master's log bytes the slave lacks, then wait until the slave has applied them."""
    offset = slave.commit_log_max_offset()
    while offset < master.commit_log_max_offset():
        data = master.get_commit_log_data(offset, 64 * 1024)
        assert data and slave.append_replicated_data(offset, data)
        offset += len(data)
    wait_dispatched(slave)
    wait_for(
        lambda: all(t.covered >= queue_end(slave, t.kind) for t in slave.state_log.tables.values()),
        DEADLINE_S,
        what="the slave to apply the state records",
        poll_s=0.005,
    )


def queue_end(store: DefaultMessageStore, kind: StateKind) -> int:
    cq = store.find_consume_queue(STATE_TOPIC, int(kind))
    return cq.get_max_offset_in_queue() if cq is not None else 0


def test_every_table_reaches_a_slave_and_a_promoted_slave_serves_it(tmp_path: Path) -> None:
    master = open_store(config_of(str(tmp_path / "m")))
    slave = open_store(config_of(str(tmp_path / "s"), broker_role=BrokerRole.SLAVE))
    try:
        master.set_replicated(True)
        slave.set_replicated(True)
        master.create_or_update_topic("orders", 2, "rw")
        master.create_or_update_topic("gone", 1, "rw")
        for i in range(6):
            assert master.put_message(build_message("orders", f"o{i}".encode(), i % 2)).ok
            assert master.put_message(build_message("gone", b"x", 0)).ok
        master.commit_offsets("billing", [("orders", 0, 2), ("orders", 1, 1)])
        master.group_consumption.put_group("fifo-g", max_reconsume_times=5, fifo=True)
        master.transactions.put_producer_group("payments", "http://127.0.0.1:9/check")
        wait_dispatched(master)  # a receive reads the consume queues dispatch builds after the put's answer
        (taken,) = master.group_consumption.receive("fifo-g", "orders", 1, 60_000)
        plain = master.group_consumption.receive("plain-g", "orders", 2, 60_000)
        assert master.delete_topic("gone")
        master.commit_offsets("doomed", [("orders", 0, 1)])
        master.group_consumption.put_group("doomed", max_reconsume_times=2, fifo=False)
        assert master.group_consumption.delete_group("doomed") and not master.group_consumption.delete_group("doomed")
        master.state_snapshot_service.snapshot_pass()  # the pop secret and every other table, whole, for slaves
        replicate(master, slave)

        assert slave.topic_config("orders") is not None and slave.topic_config("gone") is None
        assert slave.find_consume_queue("gone", 0) is None, "a deletion drops the slave's queues too"
        assert slave.query_offset("billing", "orders", 0) == 2 and slave.query_offset("billing", "orders", 1) == 1
        assert slave.group_consumption.group("fifo-g").fifo is True
        assert slave.query_offset("doomed", "orders", 0) == -1 and not slave.group_consumption.is_configured("doomed")
        assert slave.transactions.producer_groups.get("payments") is not None
        assert slave.group_consumption.fifo.in_flight() == 1
        assert slave.group_consumption.secret.secret == master.group_consumption.secret.secret
        queue = 0 if taken.queue_offset == plain[0].queue_offset and plain[0].queue_id != taken.queue_id else taken.queue_id
        assert slave.query_offset("plain-g", "orders", queue) == master.query_offset("plain-g", "orders", queue)

        slave.set_broker_role(BrokerRole.SYNC_MASTER)  # no replication waiter: answered once stored
        # Handles the old master gave out ack on the new one: same secret, same FIFO batch, same offsets.
        assert [o.value for o in slave.group_consumption.ack("fifo-g", "orders", [taken.handle])] == ["OK"]
        assert [o.value for o in slave.group_consumption.ack("plain-g", "orders", [p.handle for p in plain])] == ["OK", "OK"]
        assert slave.query_offset("fifo-g", "orders", taken.queue_id) == taken.queue_offset + 1
    finally:
        master.shutdown()
        slave.shutdown()


def test_offsets_survive_a_restart_and_the_local_file_holds_only_the_base(tmp_path: Path) -> None:
    config = config_of(str(tmp_path / "s"))
    s = open_store(config)
    s.commit_offsets("g", [("T", 0, 5)])
    s.state_snapshot_service.persist_all()  # the file covers this commit
    s.commit_offsets("g", [("T", 0, 9), ("T", 1, 3)])
    s.shutdown()
    s = open_store(config)
    try:
        assert (s.query_offset("g", "T", 0), s.query_offset("g", "T", 1)) == (9, 3)
    finally:
        s.shutdown()


def test_a_lost_local_file_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    config = config_of(str(tmp_path / "s"))
    s = open_store(config)
    s.create_or_update_topic("A", 3, "r")
    s.commit_offsets("g", [("A", 0, 1), ("A", 2, 7)])
    s.commit_offsets("g", [("A", 0, 4)])
    s.group_consumption.put_group("grp", max_reconsume_times=7, fifo=False)
    s.shutdown()
    for name in ("consumerOffset.json", "subscriptionGroup.json", "topics.json"):
        for path in (os.path.join(config.config_dir(), name), os.path.join(config.config_dir(), name + ".bak")):
            if os.path.exists(path):
                os.unlink(path)
    s = open_store(config)
    try:
        assert s.consumer_offset_manager.offsets_of("g", "A") == {0: 4, 2: 7}
        assert s.group_consumption.group("grp").max_reconsume_times == 7
        tc = s.topic_config("A")
        assert tc is not None and (tc.read_queue_nums, tc.perm) == (3, "r")
    finally:
        s.shutdown()


def test_a_local_file_ahead_of_a_cut_log_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    config = config_of(str(tmp_path / "s"))
    s = open_store(config)
    s.commit_offsets("g", [("A", 0, 1)])
    limit = s.commit_log_max_offset()
    s.commit_offsets("g", [("A", 0, 2)])  # past the cut: a tail no other broker of the group holds
    s.shutdown()  # consumerOffset.json now says 2
    s = DefaultMessageStore(config)
    s.set_recovery_limit(limit)
    s.load()
    s.start()
    try:
        assert s.query_offset("g", "A", 0) == 1
    finally:
        s.shutdown()


CRASH_WRITER = """
import sys, os, signal
from store import DefaultMessageStore, FlushDiskType
from tests.store.test_state_log import config_of
store = DefaultMessageStore(config_of(sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH))
store.load()
store.start()
store.group_consumption.put_group("fifo-g", max_reconsume_times=3, fifo=True)
for i in range(int(sys.argv[2])):
    store.commit_offsets("g", [("T", i % 4, i)])
    print("COMMITTED", i % 4, i, flush=True)
    if i == int(sys.argv[2]) // 2:
        store.state_snapshot_service.persist_all()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_every_answered_commit_survives_a_sigkill(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CRASH_WRITER, root, "200"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    last: dict[int, int] = {}
    for line in proc.stdout.splitlines():
        _, queue, offset = line.split()
        last[int(queue)] = int(offset)
    assert len(last) == 4
    s = open_store(config_of(root))
    try:
        assert not s.last_exit_ok
        assert s.consumer_offset_manager.offsets_of("g", "T") == last
        assert s.group_consumption.group("fifo-g").fifo is True
    finally:
        s.shutdown()


def test_compaction_keeps_a_base_in_the_log_when_old_files_go(tmp_path: Path) -> None:
    config = config_of(
        str(tmp_path / "s"), mapped_file_size_commit_log_bytes=64 * 1024, max_message_size_bytes=16 * 1024, file_reserved_time_hours=0
    )
    s = open_store(config)
    try:
        s.set_replicated(True)
        for i in range(MIN_DELTAS_BETWEEN_SNAPSHOTS + 50):
            s.commit_offsets("g", [(f"T{i % 7}", 0, i)])
        table = s.consumer_offset_manager
        s.state_snapshot_service.snapshot_pass()
        assert table.snapshot_covers > 0, "more deltas than rows: the table is written whole"
        for _ in range(300):  # more log, so the files holding the snapshot and the early deltas can go
            assert s.put_message(build_message("filler", b"f" * 900, 0)).ok
        s.commit_offsets("g", [("T0", 0, 99_999)])
        wait_dispatched(s)
        first_before = s.commit_log_min_offset()
        s.execute_delete_files_manually()

        def deleted() -> bool:
            if s.commit_log_min_offset() != first_before:
                return True
            s.clean_commit_log_service.run_once()
            return False

        wait_for(deleted, DEADLINE_S, what="a commitlog file to be deleted", poll_s=0.05)
        expected = {f"T{k}": s.query_offset("g", f"T{k}", 0) for k in range(7)}
        assert s.state_log.needs_log_below(s.commit_log_min_offset()) == [], "the base lies in the files kept"
    finally:
        s.shutdown()
    os.unlink(os.path.join(config.config_dir(), "consumerOffset.json"))
    s = open_store(config)
    try:
        assert {f"T{k}": s.query_offset("g", f"T{k}", 0) for k in range(7)} == expected
        assert expected["T0"] == 99_999
    finally:
        s.shutdown()


def test_an_offset_log_of_an_older_version_is_applied_once(tmp_path: Path) -> None:
    import json
    import struct
    import zlib

    config = config_of(str(tmp_path / "s"))
    os.makedirs(config.config_dir(), exist_ok=True)
    with open(os.path.join(config.config_dir(), "consumerOffset.json"), "w") as fh:
        json.dump({"offsetTable": {"T@g": {"0": 1}}}, fh)
    body = json.dumps({"c": [["T@g", 0, 5], ["T@g", 1, 2]]}).encode()
    record = struct.pack(">III", 0x0FF5E7C0, len(body), zlib.crc32(body)) + body
    with open(os.path.join(config.config_dir(), "consumerOffset.log"), "wb") as fh:
        fh.write(record + record[:7])  # and a torn tail
    s = open_store(config)
    try:
        assert s.consumer_offset_manager.offsets_of("g", "T") == {0: 5, 1: 2}
        s.state_snapshot_service.persist_all()
        assert not os.path.exists(os.path.join(config.config_dir(), "consumerOffset.log"))
    finally:
        s.shutdown()
    s = open_store(config)
    try:
        assert s.consumer_offset_manager.offsets_of("g", "T") == {0: 5, 1: 2}
    finally:
        s.shutdown()


def test_clients_never_read_the_state_topic(store: DefaultMessageStore) -> None:
    store.commit_offsets("g", [("T", 0, 1)])
    wait_dispatched(store)
    cq = store.find_consume_queue(STATE_TOPIC, int(StateKind.CONSUMER_OFFSETS))
    assert cq is not None and cq.get_max_offset_in_queue() == 1
    entry = cq.read_entry(0)
    assert entry is not None
    phy = entry[0]
    assert store.look_message_by_offset(phy) is None


@pytest.mark.parametrize("replicated", [False, True])
def test_a_standalone_store_writes_no_state_record_it_was_not_asked_for(tmp_path: Path, replicated: bool) -> None:
    s = open_store(config_of(str(tmp_path / "s")))
    try:
        s.set_replicated(replicated)
        s.state_snapshot_service.snapshot_pass()
        wait_dispatched(s)
        written = s.find_consume_queue(STATE_TOPIC, int(StateKind.POP_SECRET)) is not None
        assert written is replicated  # the secret goes into the log only for slaves
    finally:
        s.shutdown()


def test_a_store_without_topic_records_rebuilds_lost_topics_from_its_queues(tmp_path: Path) -> None:
    """A store written before topics were state records (or by RocketMQ): its queues on disk are the only witness."""
    config = config_of(str(tmp_path / "s"))
    s = open_store(config)
    for i in range(6):
        assert s.put_message(build_message("old", b"x", i % 3)).ok  # no topic record: the put needs none
    s.shutdown()
    s = open_store(config)
    try:
        tc = s.topic_config("old")
        assert tc is not None and tc.read_queue_nums == 3  # highest queue id + 1
    finally:
        s.shutdown()
