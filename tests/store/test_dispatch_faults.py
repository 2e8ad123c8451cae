"""Dispatch under faults: a topic deleted while dispatch lags stays deleted; a failing dispatch is retried, never skipped."""

from __future__ import annotations

import threading
from pathlib import Path

from store import DefaultMessageStore, GetMessageStatus, PutRefusal, build_message
from tests.store.conftest import open_store, run_until_killed, small_config, wait_dispatched


class DispatchGate:
    """Holds the store's dispatch lock, so nothing is dispatched (puts leave it to the holder); set() lets dispatch go."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.lock = store.reput_service.dispatch_lock
        assert self.lock.acquire(timeout=10)

    def set(self) -> None:
        self.lock.release()


def hold_dispatch(store: DefaultMessageStore) -> DispatchGate:
    return DispatchGate(store)


def bodies(store: DefaultMessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    r = store.get_message("g", topic, queue_id, 0, 64)
    try:
        assert r.status is GetMessageStatus.FOUND, r.status
        return [m["body"] for m in r.decode()]
    finally:
        r.release()


def test_a_topic_deleted_while_dispatch_lags_is_not_resurrected(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        gate = hold_dispatch(store)
        store.topic_config_manager.create_or_update("T", 1, "rw")
        for i in range(20):
            assert store.put_message(build_message("T", f"old-{i}".encode(), 0)).ok
        assert store.reput_service.behind() > 0  # the old messages are stored, not dispatched
        assert store.delete_topic("T")
        store.topic_config_manager.create_or_update("T", 1, "rw")
        new = [f"new-{i}".encode() for i in range(5)]
        for body in new:
            r = store.put_message(build_message("T", body, 0))
            assert r.ok and r.items[0].logics_offset == new.index(body)
        gate.set()
        wait_dispatched(store)
        assert bodies(store, "T") == new
        assert store.get_max_offset_in_queue("T", 0) == len(new)
    finally:
        store.shutdown()


def test_a_queue_made_while_dispatch_lags_gets_no_message_of_the_deleted_topic(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        gate = hold_dispatch(store)
        store.topic_config_manager.create_or_update("T", 1, "rw")
        for i in range(6):
            assert store.put_message(build_message("T", f"old-{i}".encode(), 0)).ok
        assert store.delete_topic("T")
        assert store.put_message(build_message("T", b"new", 0)).ok
        assert store.find_consume_queue("T", 0, create=True) is not None  # in the table before dispatch reaches the old ones
        gate.set()
        wait_dispatched(store)
        assert bodies(store, "T") == [b"new"]
    finally:
        store.shutdown()


def test_a_failing_dispatch_is_retried_not_skipped_and_puts_are_refused_meanwhile(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "store")))
    try:
        store.topic_config_manager.create_or_update("T", 1, "rw")
        # The queue's directory cannot be made: a file stands where it goes (a real OSError on a real path).
        queue_dir = tmp_path / "store" / "consumequeue" / "T"
        queue_dir.parent.mkdir(parents=True, exist_ok=True)
        queue_dir.write_text("in the way")
        first = store.put_message(build_message("T", b"acknowledged", 0))
        assert first.ok
        deadline = threading.Event()
        while not store.reput_service.failure:
            assert not deadline.wait(0.01) and store.reput_service.failures_total < 10_000
        assert any(r.startswith("dispatch failing") for r in store.degraded_reasons())
        refused = store.put_message(build_message("T", b"refused", 0))
        assert (refused.refusal, refused.items) == (PutRefusal.DISPATCH_BEHIND, [])
        # Whoever sees the cursor move past the failed chunk sees the failure over (puts taken again).
        moves: list[tuple[int, str]] = []
        store.reput_service.on_progress = lambda offset: moves.append((offset, store.reput_service.failure))
        queue_dir.unlink()  # the fault goes away: the same message is dispatched, nothing was skipped
        wait_dispatched(store)
        assert moves == [(first.end_offset, "")]
        assert store.reput_service.failure == "" and store.degraded_reasons() == []
        assert bodies(store, "T") == [b"acknowledged"]
        assert store.put_message(build_message("T", b"accepted again", 0)).ok
        wait_dispatched(store)
        assert bodies(store, "T") == [b"acknowledged", b"accepted again"]
    finally:
        store.shutdown()


DELETE_THEN_KILL = """
import os, signal, sys
from store import DefaultMessageStore, FlushDiskType, build_message
from tests.store.conftest import small_config
store = DefaultMessageStore(small_config(sys.argv[1], flush_disk_type=FlushDiskType.SYNC_FLUSH))
store.load()
store.start()
store.reput_service.dispatch_lock.acquire()  # held to the end: dispatch never passes the old messages
store.topic_config_manager.create_or_update("T", 1, "rw")
for i in range(20):
    assert store.put_message(build_message("T", f"old-{i}".encode(), 0, keys=["k"])).ok
assert store.delete_topic("T")
store.topic_config_manager.create_or_update("T", 1, "rw")
for i in range(5):
    assert store.put_message(build_message("T", f"new-{i}".encode(), 0, keys=["k"])).ok
print("DELETED", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_deleted_topic_stays_deleted_across_a_crash_recovery(tmp_path: Path) -> None:
    """SIGKILL after an answered deletion, before dispatch passed the old messages: recovery re-dispatch drops them."""
    root = str(tmp_path / "store")
    run_until_killed(DELETE_THEN_KILL, root, "DELETED")
    store = open_store(small_config(root))
    try:
        wait_dispatched(store)
        assert not store.last_exit_ok
        new = [f"new-{i}".encode() for i in range(5)]
        assert bodies(store, "T") == new
        assert sorted(m["body"] for m in store.query_message("T", "k", 64, 0, 2**62)) == new
    finally:
        store.shutdown()
