"""A FIFO group's ack commits its offset without the order book's lock, in order, and records the ack after it.

Real store on real files, a SYNC_MASTER whose slave is the test (`HeldSlave`, installed as the
store's replication wait, what ha/ installs on a master): while it holds, a put stands in its
durability wait, so an ack stands in its offset commit for as long as the test wants. Waits poll
with a deadline and nothing asserts a duration.
"""

from __future__ import annotations

import concurrent.futures
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from store import BrokerRole, DefaultMessageStore, PutMessageStatus, build_message
from store.pop.group_consumption import AckOutcome, Popped
from store.pop.pop_consumer import PopConsumer
from tests.store.conftest import open_store, small_config
from tests.waiting import wait_for

TOPIC = "ledger"
INVISIBLE_MS = 60_000
DEADLINE_S = 20.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    s = open_store(small_config(str(tmp_path / "store"), broker_role=BrokerRole.SYNC_MASTER))
    try:
        yield s
    finally:
        s.shutdown()


class HeldSlave:
    """The store's replication wait (MessageStore.set_replication_waiter): while holding, every put
    waits for it; `pass_through()` lets later puts go at once; `release()` answers the held ones."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.holding = False
        self.held: list[concurrent.futures.Future[PutMessageStatus]] = []
        store.set_replication_waiter(self.waiter)

    def waiter(self, end_offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        if not self.holding:
            return None
        future: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()
        self.held.append(future)
        return future

    def hold(self) -> None:
        self.holding = True

    def pass_through(self) -> None:
        self.holding = False

    def release(self) -> None:
        self.holding = False
        for future in self.held:
            future.set_result(PutMessageStatus.PUT_OK)


def consumer(store: DefaultMessageStore) -> PopConsumer:
    pop = store.group_consumption._loaded()
    assert isinstance(pop, PopConsumer)
    return pop


def fifo_groups(store: DefaultMessageStore, names: list[str]) -> None:
    for name in names:
        store.group_consumption.put_group(name, max_reconsume_times=16, fifo=True)


def produce(store: DefaultMessageStore, count: int) -> None:
    store.create_or_update_topic(TOPIC, 1)
    for i in range(count):
        assert store.put_message(build_message(TOPIC, f"m{i}".encode(), 0)).ok


def other_stripe_group(pop: PopConsumer, group: str) -> str:
    """A group name whose queue lock is not `group`'s (stripes are chosen by a hash)."""
    for i in range(100):
        name = f"audit{i}"
        if pop._queue_lock(name, TOPIC, 0) is not pop._queue_lock(group, TOPIC, 0):
            return name
    raise AssertionError("no group name on another stripe")


def in_background(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(work()), daemon=True)
    t.start()
    return t, out


def frame_of(t: threading.Thread) -> FrameType | None:
    """Thread `t`'s current frame. `sys._current_frames` holds the interpreter's lock on its thread list while it
    builds its dict; under CPython 3.11 a collection that allocation starts can wait for that same lock, for ever
    (python/cpython#106883: a run of this test hung so), so the collector is off meanwhile."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames().get(t.ident or -1)
    finally:
        if collecting:
            gc.enable()


def wait_in_offset_commit(t: threading.Thread) -> None:
    """Poll until thread `t` stands in an offset commit's durability wait (the slave the test holds)."""

    def in_commit() -> bool:
        frame = frame_of(t)
        names = set()
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        if {"commit_offsets", "wait"} <= names:
            return True
        assert t.is_alive(), "the ack ended before reaching its offset commit's wait"
        return False

    wait_for(in_commit, DEADLINE_S, what="the ack to reach its offset commit", poll_s=0.005)


def test_another_group_s_fifo_receive_completes_while_an_ack_waits_in_its_commit(store: DefaultMessageStore) -> None:
    pop = consumer(store)
    other = other_stripe_group(pop, "billing")
    fifo_groups(store, ["billing", other])
    produce(store, 2)
    (first,) = store.group_consumption.receive("billing", TOPIC, 1, INVISIBLE_MS)
    slave = HeldSlave(store)
    slave.hold()  # the ack's commit waits for the slave until release()
    acker, acked = in_background(lambda: store.group_consumption.ack("billing", TOPIC, [first.handle]))
    wait_in_offset_commit(acker)
    slave.pass_through()
    receiver, received = in_background(lambda: store.group_consumption.receive(other, TOPIC, 2, INVISIBLE_MS))
    receiver.join(DEADLINE_S)
    assert not receiver.is_alive(), "a FIFO receive of another group waited for an ack's offset commit"
    assert isinstance(received[0], list)  # the receive's list of Popped
    assert [p.queue_offset for p in received[0]] == [0, 1]
    # The book does not show the ack before its commit is confirmed (a crash now must not skip message 0).
    assert pop.fifo.in_flight() == 3
    slave.release()
    acker.join(DEADLINE_S)
    assert acked == [[AckOutcome.OK]]
    assert store.query_offset("billing", TOPIC, 0) == 1
    assert pop.fifo.in_flight() == 2
    (second,) = store.group_consumption.receive("billing", TOPIC, 1, INVISIBLE_MS)
    assert second.queue_offset == 1 and second.reconsume_times == 0


def test_two_acks_of_one_queue_commit_in_order_and_the_offset_never_goes_back(store: DefaultMessageStore) -> None:
    fifo_groups(store, ["billing"])
    produce(store, 4)
    batch: list[Popped] = store.group_consumption.receive("billing", TOPIC, 4, INVISIBLE_MS)
    assert [p.queue_offset for p in batch] == [0, 1, 2, 3]
    slave = HeldSlave(store)
    slave.hold()
    first, first_out = in_background(lambda: store.group_consumption.ack("billing", TOPIC, [batch[0].handle]))
    wait_in_offset_commit(first)  # its commit of offset 1 is written and waits for the slave
    second, second_out = in_background(lambda: store.group_consumption.ack("billing", TOPIC, [batch[1].handle]))
    slave.release()
    first.join(DEADLINE_S)
    second.join(DEADLINE_S)
    assert first_out == second_out == [[AckOutcome.OK]]
    assert store.query_offset("billing", TOPIC, 0) == 2
    # An ack of a later message while an earlier one is unacked leaves the offset where it is.
    assert store.group_consumption.ack("billing", TOPIC, [batch[3].handle]) == [AckOutcome.OK]
    assert store.query_offset("billing", TOPIC, 0) == 2
    assert store.group_consumption.ack("billing", TOPIC, [batch[2].handle]) == [AckOutcome.OK]
    assert store.query_offset("billing", TOPIC, 0) == 4
    assert store.group_consumption.receive("billing", TOPIC, 4, INVISIBLE_MS) == []


def test_an_ack_never_commits_below_an_offset_already_committed(store: DefaultMessageStore) -> None:
    """The state a crash can leave: the offset committed past a message the persisted book shows unacked."""
    fifo_groups(store, ["billing"])
    produce(store, 3)
    batch = store.group_consumption.receive("billing", TOPIC, 3, INVISIBLE_MS)
    store.commit_offsets("billing", [(TOPIC, 0, 2)])  # as an ack of messages 0 and 1 whose record the book lost
    assert store.group_consumption.ack("billing", TOPIC, [batch[1].handle]) == [AckOutcome.OK]
    assert store.query_offset("billing", TOPIC, 0) == 2  # the ack's own target (0) is below: not committed
    assert store.group_consumption.ack("billing", TOPIC, [batch[0].handle, batch[2].handle]) == [AckOutcome.OK] * 2
    assert store.query_offset("billing", TOPIC, 0) == 3
