"""Groups of two and of three under SYNC replication, their masters SIGKILLed and SIGSTOPped in turn while
producers, readers, an offset committer and a receive/ack consumer go through any broker; the history
checker (tests/cluster/history.py) then finds no acknowledged put lost or misplaced, no epoch with two
writers, no read of an invented message, no committed offset taken back, no delivery after an ack that
answered OK, every unacked message delivered again, and a new master accepting puts within
lease_ttl_s + 2 s of each fault; and the final log holds no timer message (a checkpoint, an ack)
delivered twice.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.etcd import EtcdServer
from tests.cluster.helpers import cluster_status, is_master, wait_in_sync, wait_master
from tests.cluster.history import (
    QUEUES,
    TOPIC,
    Fault,
    History,
    Monitor,
    Workload,
    check,
    commit_records,
    drain,
    failover_windows,
    read_final,
    read_queue,
    timer_deliveries_twice,
)
from tests.ha.cluster import Node
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]
LEASE_TTL_S = 2.0  # tests/cluster/conftest.py's lease_ttl_s
ROUNDS = 10
# Acknowledged puts each round needs before its fault, so every round has something to lose.
PUTS_PER_ROUND = 20


def fault_round(history: History, nodes: list[Node], round_no: int) -> None:
    master = wait_master(nodes)
    wait_in_sync(master, *[n for n in nodes if n is not master], timeout_s=30)
    before = len(history.acked_produces())
    wait_for(lambda: len(history.acked_produces()) >= before + PUTS_PER_ROUND, what="acknowledged puts before the fault")
    # Again just before the fault: a slave that lagged meanwhile (a loaded machine) left the in-sync set, and a group
    # whose set is its master alone elects nobody while that master is gone (docs/cluster.md, "Limits").
    wait_in_sync(master, *[n for n in nodes if n is not master], timeout_s=30)
    assert master.proc is not None
    kind = "kill" if round_no % 2 == 0 else "stop"
    history.faults.append(Fault(kind, master.url, time.monotonic()))
    os.kill(master.proc.pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    others = [n for n in nodes if n is not master]
    wait_for(lambda: any(is_master(n) for n in others), timeout_s=LEASE_TTL_S + 5, what=f"round {round_no}: a new master")
    if kind == "kill":
        master.proc.wait(10)
        master.start()  # as a supervisor would; it cuts any tail the group never had and follows the new master
    else:
        os.kill(master.proc.pid, signal.SIGCONT)  # fenced; it restarts itself in place and follows the new master
    wait_for(lambda: (s := cluster_status(master)) and s["role"] == "slave", timeout_s=30, what=f"round {round_no}: the old master back")


@pytest.mark.parametrize("size", [2, 3])
def test_a_group_under_kills_and_stops_keeps_every_acknowledged_put_and_one_writer_per_epoch(
    brokers: Callable[..., Node], etcd: EtcdServer, size: int, tmp_path: Path
) -> None:
    nodes = [brokers(f"a{i}", "a") for i in range(1, size + 1)]
    master = wait_master(nodes)
    wait_in_sync(master, *[n for n in nodes if n is not master])
    assert master.client.put(f"/v1/topics/{TOPIC}", json={"queues": QUEUES}).status_code == 201
    history = History()
    urls = [n.url for n in nodes]
    with Monitor(history, urls), Workload(history, lambda: urls, consumers=1, committers=1):
        for round_no in range(ROUNDS):
            fault_round(history, nodes, round_no)
        master = wait_master(nodes)
        wait_in_sync(master, *[n for n in nodes if n is not master], timeout_s=30)
    drain(history, master.url, deadline_s=60)
    final = read_final(master.url, etcd.url, "test", "a")
    final.offset_commits = [(r["queue"], r["offset"]) for r in commit_records(master.store_dir)]
    for node in nodes:  # every replica holds exactly the master's log
        wait_for(
            lambda node=node: node.max_offset() == master.max_offset(),  # type: ignore[misc]  # mypy: lambda with a default
            what=f"{node.url} to catch up",
        )
        assert {q: read_queue(node.client, node.url, q) for q in range(QUEUES)} == final.queues
    problems = check(history, final, window_s=LEASE_TTL_S + 2) + timer_deliveries_twice(master.store_dir)
    faults = ", ".join(f"{f.kind} {f.node}@{f.at:.2f}" for f in history.faults)
    if problems:  # the whole history beside the brokers' logs, with the final log's offset commits in their order
        history.dump(tmp_path / "history.jsonl", commit_records(master.store_dir))
    assert not problems, "\n".join(problems[:20]) + f"\nfaults: {faults}\nhistory: {tmp_path / 'history.jsonl'}"
    acked = history.acked_produces()
    assert len(acked) >= ROUNDS * PUTS_PER_ROUND and len(final.epochs) >= ROUNDS + 1
    assert any(op.ok and op.value["messages"] for op in history.of("read")), "the readers read"
    assert sum(1 for op in history.of("commit") if op.ok) >= ROUNDS and history.of("receive"), "the consumers consumed"
    windows = sorted(failover_windows(history))
    print(
        f"group of {size}: {len(acked)} acknowledged puts, failover windows p50 {windows[len(windows) // 2]:.2f} s max {windows[-1]:.2f} s"
    )
