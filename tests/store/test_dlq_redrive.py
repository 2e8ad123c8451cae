"""Dead-letter redrive and push subscriptions in the store: real stores on real files, dead letters
made by group consumption's own dead-lettering, a SIGKILLed writer for the crash, a slave fed the
master's log bytes for replication."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from store import (
    BrokerRole,
    DefaultMessageStore,
    Popped,
    PushSubscription,
    RedriveState,
    build_message,
    decode_message,
    dlq_topic,
    retry_topic,
)
from tests.store.conftest import open_store, wait_dispatched
from tests.store.test_state_log import config_of, replicate
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 20.0


def dead_letters(store: DefaultMessageStore, group: str, topic: str, count: int) -> None:
    """`count` messages of `topic` received by `group` and dead-lettered (the path a push delivery of a too-large body takes)."""
    store.create_or_update_topic(topic, 1, "rw")
    for i in range(count):
        assert store.put_message(build_message(topic, f"m{i}".encode(), 0)).ok
    taken: list[Popped] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(taken) < count:
        assert time.monotonic() < deadline
        taken += store.group_consumption.receive(group, topic, 32, 60_000)
    for popped in taken:
        assert store.group_consumption.dead_letter(group, topic, popped).value == "OK"


def wait_done(store: DefaultMessageStore, group: str) -> None:

    def done() -> bool:
        redrive = store.group_consumption.redrive(group)
        return redrive is not None and redrive.state is RedriveState.DONE

    wait_for(done, DEADLINE_S, what=lambda: f"the redrive to finish: {store.group_consumption.redrive(group)}")
    wait_dispatched(store)  # the row is applied with the put; the copies reach their queue by dispatch


def bodies(store: DefaultMessageStore, topic: str) -> list[tuple[bytes, int]]:
    """Every message of queue 0 of `topic`: (body, reconsume times)."""
    out: list[tuple[bytes, int]] = []
    offset = 0
    while True:
        result = store.get_message("test", topic, 0, offset, 32)
        if not result.queue_offsets:
            return out
        for pos, size in result.positions():
            m = decode_message(bytes(memoryview(result.data)[pos : pos + size]), 0)
            out.append((m["body"], m["reconsume_times"]))
        offset = result.next_begin_offset


def test_a_redrive_moves_dead_letters_back_and_the_group_receives_them_again(tmp_path: Path) -> None:
    s = open_store(config_of(str(tmp_path / "s")))
    try:
        dead_letters(s, "g", "T", 5)
        assert len(bodies(s, dlq_topic("g"))) == 5
        redrive, started = s.group_consumption.start_redrive("g", None)
        assert started and (redrive.start, redrive.end, redrive.state) == (0, 5, RedriveState.RUNNING)
        wait_done(s, "g")
        done = s.group_consumption.redrive("g")
        assert done is not None and (done.position, done.moved, done.skipped) == (5, 5, 0) and done.finished_ms > 0
        # Into the group's retry topic of T with reconsume times 0; the dead letters themselves stay.
        assert sorted(bodies(s, retry_topic("g", "T"))) == [(f"m{i}".encode(), 0) for i in range(5)]
        got = s.group_consumption.receive("g", "T", 32, 60_000)
        assert sorted(p.data and decode_message(p.data, 0)["body"] for p in got) == [f"m{i}".encode() for i in range(5)]
        assert all(p.reconsume_times == 0 for p in got)
        assert s.group_consumption.receive("other", "T", 32, 60_000) != []  # other groups were never concerned
        # A second redrive starts where the first ended: nothing new has been dead-lettered, so it is done at once.
        again, started = s.group_consumption.start_redrive("g", None)
        assert started and (again.start, again.end, again.state) == (5, 5, RedriveState.DONE)
    finally:
        s.shutdown()


def test_one_redrive_per_group_at_a_time_and_max_messages_bounds_it(tmp_path: Path) -> None:
    s = open_store(config_of(str(tmp_path / "s")))
    try:
        dead_letters(s, "g", "T", 6)
        service = s.group_consumption.redrive_service
        assert service is not None
        service.shutdown()  # held still, so the redrive stays running while a second one is asked for
        first, started = s.group_consumption.start_redrive("g", 4)
        assert started and (first.start, first.end) == (0, 4)
        second, started = s.group_consumption.start_redrive("g", None)
        assert not started and second == first
        service.start()
        wait_done(s, "g")
        assert sorted(bodies(s, retry_topic("g", "T"))) == [(f"m{i}".encode(), 0) for i in range(4)]
        rest, started = s.group_consumption.start_redrive("g", None)
        assert started and (rest.start, rest.end) == (4, 6)
        wait_done(s, "g")
        assert sorted(bodies(s, retry_topic("g", "T"))) == [(f"m{i}".encode(), 0) for i in range(6)]
    finally:
        s.shutdown()


CRASH_WRITER = """
import os, signal, sys
from store import FlushDiskType
from tests.store.conftest import open_store, wait_dispatched
from tests.store.test_dlq_redrive import dead_letters
from tests.store.test_state_log import config_of
store = open_store(config_of(sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH))
dead_letters(store, "g", "T", 40)
service = store.group_consumption.redrive_service
service.shutdown()
redrive, _ = store.group_consumption.start_redrive("g", None)
step = service._move_batch(redrive)
print("POSITION", step.position, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_redrive_killed_midway_goes_on_from_its_recorded_position(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CRASH_WRITER, root], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.split() == ["POSITION", "32"]
    s = open_store(config_of(root))
    try:
        assert not s.last_exit_ok
        wait_done(s, "g")
        redrive = s.group_consumption.redrive("g")
        assert redrive is not None and (redrive.moved, redrive.position) == (40, 40)
        # Every dead letter moved exactly once: the 32 before the kill and the 8 after it.
        assert sorted(bodies(s, retry_topic("g", "T"))) == sorted((f"m{i}".encode(), 0) for i in range(40))
    finally:
        s.shutdown()


def test_push_subscriptions_and_redrives_reach_a_slave_and_survive_a_restart(tmp_path: Path) -> None:
    master = open_store(config_of(str(tmp_path / "m")))
    slave = open_store(config_of(str(tmp_path / "s"), broker_role=BrokerRole.SLAVE))
    sub = PushSubscription("pg", "T", "http://127.0.0.1:9/hook", 4, 2_000, "s3cret", 1)
    try:
        master.set_replicated(True)
        slave.set_replicated(True)
        dead_letters(master, "g", "T", 3)
        assert master.group_consumption.put_push_subscription(sub) is True
        assert master.group_consumption.put_push_subscription(PushSubscription("gone", "T", "http://127.0.0.1:9/", 1, 1, "x", 1))
        assert master.group_consumption.delete_push_subscription("gone")
        master.group_consumption.start_redrive("g", None)
        wait_done(master, "g")
        replicate(master, slave)
        assert slave.group_consumption.push_subscriptions() == [sub]
        redrive = slave.group_consumption.redrive("g")
        assert redrive is not None and redrive.moved == 3
        assert slave.group_consumption.redrive_service is not None and slave.group_consumption.redrive_service.is_slave
    finally:
        master.shutdown()
        slave.shutdown()
    master = open_store(config_of(str(tmp_path / "m")))
    try:
        assert master.group_consumption.push_subscription("pg") == sub
        redrive = master.group_consumption.redrive("g")
        assert redrive is not None and redrive.state is RedriveState.DONE
        assert oct(os.stat(master.group_consumption.push.path).st_mode & 0o777) == "0o600"
    finally:
        master.shutdown()
