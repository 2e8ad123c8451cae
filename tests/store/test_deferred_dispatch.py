"""A put with `defer_dispatch` is owed to `dispatch_owed` (the front end's one pass per loop turn); one with
`lazy_dispatch` (the store's own records) to whichever pass comes next.

The service thread, which would dispatch anything left behind within 10 ms, is stopped where a
test looks at what is not dispatched yet, so what it sees is what the put and `dispatch_owed` did.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from store import AckOutcome, DefaultMessageStore, PutBatch, build_message
from tests.store.conftest import open_store, run_until_killed, small_config, wait_dispatched
from tests.waiting import wait_for


def deferred(topic: str, queue_id: int, body: bytes = b"x") -> PutBatch:
    batch = PutBatch.of([build_message(topic, body, queue_id)])
    batch.defer_dispatch = True
    return batch


def test_deferred_puts_are_stored_at_once_and_readable_after_dispatch_owed(store: DefaultMessageStore) -> None:
    store.reput_service.shutdown()
    notices: list[tuple[str, int, int]] = []
    store.add_message_arriving_listener(lambda t, q, after, _codes: notices.append((t, q, after)))
    results = [store.put(deferred("D", i % 2)).result() for i in range(5)]
    assert all(r.ok for r in results)
    assert [r.items[0].logics_offset for r in results] == [0, 0, 1, 1, 2]  # queue offsets are the put's, at once
    assert store.get_max_offset_in_queue("D", 0) == 0 and store.get_max_offset_in_queue("D", 1) == 0
    assert store.reput_service.reput_from_offset < store.commit_log.get_max_offset()

    assert store.dispatch_owed() == 5  # one pass for the five puts
    assert store.get_max_offset_in_queue("D", 0) == 3 and store.get_max_offset_in_queue("D", 1) == 2
    assert sorted(notices) == [("D", 0, 3), ("D", 1, 2)]  # one notice per queue for the pass
    assert store.reput_service.reput_from_offset == store.commit_log.get_max_offset()
    assert store.dispatch_owed() == 0  # nothing owed any more


def test_a_put_without_defer_dispatch_is_dispatched_before_it_returns(store: DefaultMessageStore) -> None:
    store.reput_service.shutdown()
    assert store.put(deferred("D", 0)).result().ok
    assert store.put(PutBatch.of([build_message("P", b"p", 0)])).result().ok
    # The plain put dispatched everything readable, the deferred message before it included.
    assert store.get_max_offset_in_queue("P", 0) == 1 and store.get_max_offset_in_queue("D", 0) == 1
    assert store.dispatch_owed() == 0


def test_a_put_is_dispatched_at_once_when_dispatch_trails_it_by_more_than_the_bound(tmp_path: Path) -> None:
    for bound in (0, 512):
        store = open_store(small_config(str(tmp_path / f"bound-{bound}"), max_deferred_dispatch_bytes=bound))
        try:
            store.reput_service.shutdown()
            assert store.put(deferred("D", 0, b"s" * 100)).result().ok  # ~200 bytes stored: within 512
            assert store.get_max_offset_in_queue("D", 0) == (1 if bound == 0 else 0)
            assert store.put(deferred("D", 0, b"l" * 1024)).result().ok  # past any of the two bounds
            assert store.get_max_offset_in_queue("D", 0) == 2
            assert store.dispatch_owed() == 0
        finally:
            store.shutdown()


def test_dispatch_owed_waits_for_a_thread_dispatching_without_the_owed_bytes(store: DefaultMessageStore) -> None:
    """A pass finding the dispatch lock held by a thread that read the end before the deferred put
    returns only once the put's message is in its queue, as an inline dispatch does."""
    store.reput_service.shutdown()
    release, inside = threading.Event(), threading.Event()

    def listener(topic: str, _qid: int, _after: int, _codes: object) -> None:
        if topic == "First":
            inside.set()
            assert release.wait(10)  # holds the dispatch lock until released

    store.add_message_arriving_listener(listener)
    holder = threading.Thread(target=lambda: store.put_message(build_message("First", b"1")), name="holder")
    holder.start()
    assert inside.wait(10)
    assert store.put(deferred("Owed", 0)).result().ok
    passed: list[int] = []
    runner = threading.Thread(target=lambda: passed.append(store.dispatch_owed() + store.get_max_offset_in_queue("Owed", 0)))
    runner.start()
    runner.join(0.2)
    assert runner.is_alive()  # its message is not dispatched while the holder has the lock
    release.set()
    runner.join(10)
    holder.join(10)
    assert passed and store.get_max_offset_in_queue("Owed", 0) == 1 and passed[0] >= 1


KILL_WITH_DISPATCH_OWED = """
import os, signal, sys
from store import DefaultMessageStore, PutBatch, build_message
from tests.store.conftest import small_config
store = DefaultMessageStore(small_config(sys.argv[1]))
store.load()
store.start()
store.reput_service.shutdown()  # nothing dispatches what the puts owe
for i in range(40):
    batch = PutBatch.of([build_message("K", b"m%d" % i, i % 2, keys=[f"k{i}"])])
    batch.defer_dispatch = True
    assert store.put(batch).result().ok
assert store.get_max_offset_in_queue("K", 0) == 0
print("STORED", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_messages_whose_dispatch_was_owed_at_a_crash_are_dispatched_by_recovery(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    run_until_killed(KILL_WITH_DISPATCH_OWED, root, "STORED")
    store = open_store(small_config(root))
    try:
        assert not store.last_exit_ok
        wait_dispatched(store)
        assert store.get_max_offset_in_queue("K", 0) == 20 and store.get_max_offset_in_queue("K", 1) == 20
        with store.get_message("g", "K", 1, 0, 32) as got:
            assert [m["body"] for m in got.decode()] == [b"m%d" % i for i in range(1, 40, 2)]
        assert len(store.query_message("K", "k7", 10, 0, 2**62)) == 1  # the index has the keys too
    finally:
        store.shutdown()
    shutil.rmtree(root)


# The store's own records (POP checkpoints and acks, state records) are dispatched lazily ------------

LAZY_GROUP = "lazy"
TIMER_QUEUE = ("rmq_sys_wheel_timer", 0)  # where a checkpoint or an ack (a timer message) gets its entry


def produced(store: DefaultMessageStore, topic: str, count: int) -> None:
    store.create_or_update_topic(topic, 1)
    for i in range(count):
        assert store.put_message(build_message(topic, b"m%d" % i, 0)).ok  # a plain put: dispatched before it returns


def test_a_receive_and_an_ack_leave_their_records_to_the_next_pass_and_apply_their_state_at_once(
    store: DefaultMessageStore,
) -> None:
    produced(store, "L", 2)
    store.reput_service.shutdown()
    timer_entries = store.get_max_offset_in_queue(*TIMER_QUEUE)
    (got,) = store.group_consumption.receive(LAZY_GROUP, "L", 1, 60_000)
    # The checkpoint and the committed offset are in the log, the offset applied, nothing dispatched.
    assert store.query_offset(LAZY_GROUP, "L", 0) == 1
    assert store.reput_service.reput_from_offset < store.commit_log.get_max_offset()
    assert store.get_max_offset_in_queue(*TIMER_QUEUE) == timer_entries
    assert store.group_consumption.ack(LAZY_GROUP, "L", [got.handle]) == [AckOutcome.OK]
    assert store.get_max_offset_in_queue(*TIMER_QUEUE) == timer_entries
    # The next put's dispatch takes them with its own message.
    assert store.put_message(build_message("L", b"after", 0)).ok
    assert store.reput_service.reput_from_offset == store.commit_log.get_max_offset()
    assert store.get_max_offset_in_queue(*TIMER_QUEUE) == timer_entries + 2  # the checkpoint and the ack
    assert store.get_max_offset_in_queue("L", 0) == 3


def test_records_left_to_the_next_pass_are_dispatched_by_the_dispatch_thread_without_a_put(store: DefaultMessageStore) -> None:
    produced(store, "L", 1)
    timer_entries = store.get_max_offset_in_queue(*TIMER_QUEUE)
    (got,) = store.group_consumption.receive(LAZY_GROUP, "L", 1, 60_000)
    assert store.group_consumption.ack(LAZY_GROUP, "L", [got.handle]) == [AckOutcome.OK]
    wait_dispatched(store)  # the thread's pass, within its IDLE_WAIT_MS
    assert store.get_max_offset_in_queue(*TIMER_QUEUE) == timer_entries + 2


KILL_WITH_RECORDS_UNDISPATCHED = """
import os, signal, sys
from store import DefaultMessageStore, build_message
from tests.store.conftest import small_config
store = DefaultMessageStore(small_config(sys.argv[1], pop_ack_margin_ms=50, pop_revive_interval_ms=10))
store.load()
store.start()
store.create_or_update_topic("L", 1)
for i in range(3):
    assert store.put_message(build_message("L", b"m%d" % i, 0)).ok
store.reput_service.shutdown()  # nothing dispatches the records the receive leaves to the next pass
got = store.group_consumption.receive("lazy", "L", 2, 400)
assert [p.queue_offset for p in got] == [0, 1]
assert store.group_consumption.ack("lazy", "L", [got[0].handle])[0].value == "OK"
assert store.reput_service.reput_from_offset < store.commit_log.get_max_offset()
print("RECEIVED", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_records_undispatched_at_a_crash_are_dispatched_by_recovery_and_redeliver(tmp_path: Path) -> None:
    """A checkpoint and an ack that were in the log but not dispatched when the broker was killed: recovery
    dispatches them, so the offset stays committed, the acked message never comes back and the other
    one is delivered again after its invisible time."""
    root = str(tmp_path / "store")
    run_until_killed(KILL_WITH_RECORDS_UNDISPATCHED, root, "RECEIVED")
    store = open_store(small_config(root, pop_ack_margin_ms=50, pop_revive_interval_ms=10))
    try:
        assert not store.last_exit_ok
        wait_dispatched(store)
        assert store.query_offset(LAZY_GROUP, "L", 0) == 2
        seen: list[tuple[int, int]] = []

        def redelivered() -> bool:
            got = store.group_consumption.receive(LAZY_GROUP, "L", 2, 60_000)
            seen.extend((p.queue_offset if p.queue_topic == "L" else -1, p.reconsume_times) for p in got)
            return len(seen) >= 2

        wait_for(redelivered, 15, what=lambda: f"the unacked message again and the third one: got {seen}")
        # The third message (never received) and a copy of the second (unacked) from the retry topic.
        assert sorted(seen) == [(-1, 1), (2, 0)]
        assert store.group_consumption.receive(LAZY_GROUP, "L", 2, 60_000) == []  # the acked first message: never again
    finally:
        store.shutdown()
    shutil.rmtree(root)
