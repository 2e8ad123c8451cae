"""Dispatch through the native kernels, inline after each put, against the message-by-message reference.

The property test puts random messages (single and batched, several topics and queues, tags,
keys, UNIQ_KEYs or none, delayed ones, schedule-topic ones whose DELAY only Python reads,
topics deleted and re-created, sometimes while dispatch lags) into a real store, stops it, and compares its consume queues
and index files with those the reference dispatch (tests/store/reference_dispatch.py) builds
from the same commitlog, byte for byte.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import SCHEDULE_TOPIC, DefaultMessageStore, MessageInner, MessageStoreConfig, build_message
from store.codec.message import tags_hash
from tests.store.conftest import open_store, run_until_killed, small_config, wait_dispatched
from tests.store.reference_dispatch import assert_matches_reference
from tests.waiting import wait_for

TOPICS = ["A", "B", "C"]
TAGS = [None, "a", "b", "c", "d", "e", "f", "g", "h", "i"]


def dispatch_config(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {
        "mapped_file_size_commit_log_bytes": 16 * 1024,
        "mapped_file_size_consume_queue_bytes": 20 * 8,  # 8 entries a file: runs cross files
        "max_hash_slot_num": 8,
        "max_index_num": 16,  # index files roll often, sometimes between the keys of one message
        "message_delay_level": "1h 2h 3h",  # nothing falls due while a test runs
        "max_message_size_bytes": 2048,
        "max_properties_size_bytes": 1024,
    }
    values.update(overrides)
    return small_config(root, **values)


@st.composite
def messages(draw: st.DrawFn) -> MessageInner:
    kind = draw(st.integers(0, 9))
    body = draw(st.binary(max_size=700))
    if kind == 0:  # straight to the schedule topic, queues the schedule service does not read
        delay = draw(st.sampled_from(["2", " 2", "+1", "1_0", "-1", "x", ""]))
        return MessageInner(SCHEDULE_TOPIC, body, draw(st.integers(3, 4)), {"DELAY": delay, "TAGS": "s"})
    topic, queue_id = draw(st.sampled_from(TOPICS)), draw(st.integers(0, 2))
    tags = draw(st.sampled_from(TAGS))
    keys = draw(st.lists(st.sampled_from(["k1", "k2", "order-7", "user-3"]), max_size=3))
    if kind == 1:
        props = {"TAGS": tags} if tags else {}
        return MessageInner(topic, body, queue_id, props)  # no UNIQ_KEY at all
    return build_message(topic, body, queue_id, tags=tags, keys=keys, delay_level=draw(st.integers(0, 3)) if kind == 2 else 0)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), messages()),
        st.tuples(st.just("batch"), st.lists(messages(), min_size=1, max_size=24)),
        st.tuples(st.just("delete"), st.sampled_from(TOPICS)),
        st.tuples(st.just("lag"), st.booleans()),  # hold the dispatch lock (dispatch lags) or let it go
        st.tuples(st.just("touch"), st.tuples(st.sampled_from(TOPICS), st.integers(0, 2))),  # a queue made before its messages
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.booleans())
def test_bulk_dispatch_builds_the_queues_and_index_the_reference_builds(ops: list[tuple[str, Any]], uniq: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = dispatch_config(os.path.join(tmp, "store"), message_index_uniq_key_enable=uniq)
        store = open_store(config)
        lock, held = store.reput_service.dispatch_lock, False
        try:
            for op, arg in ops:
                if op == "put":
                    assert store.put_message(arg).ok
                elif op == "batch":
                    assert store.put_messages(arg).ok
                elif op == "delete":
                    store.delete_topic(arg)
                elif op == "touch":
                    topic_queue: tuple[str, int] = arg
                    store.find_consume_queue(*topic_queue, create=True)
                elif arg != held:
                    held = (
                        lock.acquire() if arg else lock.release() is not None  # type: ignore[func-returns-value]  # release: False
                    )
            if held:
                lock.release()
            wait_dispatched(store)
        finally:
            store.shutdown()
        assert_matches_reference(config, store.deleted_topics.cutoffs, os.path.join(tmp, "reference"))


def test_concurrent_putters_keep_each_queue_in_commitlog_order(tmp_path: Path) -> None:
    """Threads putting singles and batches into shared queues: whoever dispatches, every entry is
    where the reference puts it (queue offset order is commitlog order, no gap, no duplicate)."""
    config = dispatch_config(str(tmp_path / "store"), mapped_file_size_consume_queue_bytes=20 * 64, max_index_num=512)
    store = open_store(config)
    dispatchers: set[str] = set()
    store.add_message_arriving_listener(lambda *_: dispatchers.add(threading.current_thread().name))

    def producer(n: int) -> None:
        for i in range(60):
            if i % 3:
                assert store.put_message(build_message(TOPICS[i % 2], b"x" * (n + i), i % 3, tags=TAGS[i % 10], keys=[f"k{n}"])).ok
            else:
                batch = [build_message(TOPICS[j % 3], b"y" * j, j % 3, keys=[f"b{n}-{j}"]) for j in range(7)]
                assert store.put_messages(batch).ok

    threads = [threading.Thread(target=producer, args=(n,), name=f"producer-{n}") for n in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_dispatched(store)
    finally:
        store.shutdown()
    assert any(name.startswith("producer-") for name in dispatchers)  # the putting threads dispatched
    assert_matches_reference(config, {}, str(tmp_path / "reference"))


def test_a_batch_notifies_once_per_queue_from_the_putting_thread(store: DefaultMessageStore) -> None:
    calls: list[tuple[str, int, int, tuple[int, ...] | None, str]] = []
    store.add_message_arriving_listener(lambda t, q, after, codes: calls.append((t, q, after, codes, threading.current_thread().name)))
    batch = [build_message("N", b"x", i % 2, tags=["a", "b"][i // 2 % 2]) for i in range(8)]
    batch += [build_message("M", b"x", 0, tags=f"t{i}") for i in range(9)]  # more distinct tags codes than a notice lists
    me = threading.current_thread().name
    for _ in range(50):  # the service thread may hold the dispatch lock at a put; then that batch is its
        calls.clear()
        assert store.put_messages(batch).ok
        wait_dispatched(store)
        if calls and calls[0][4] == me:
            break
    assert sorted(c[:2] for c in calls) == [("M", 0), ("N", 0), ("N", 1)]
    assert all(c[2] == store.get_max_offset_in_queue(c[0], c[1]) and c[4] == me for c in calls)
    assert {c[3] for c in calls} == {tuple(sorted({tags_hash("a"), tags_hash("b")})), None}
    assert [sorted(c[3] or ()) for c in calls if c[0] == "N"] == [sorted({tags_hash("a"), tags_hash("b")})] * 2


def wait_for_failure(store: DefaultMessageStore, timeout_s: float = 15.0) -> None:
    wait_for(lambda: store.reput_service.failure, timeout_s, what="dispatch to report the failure", poll_s=0.005)


def test_a_queue_failing_in_the_middle_of_a_batch_resumes_at_the_first_message_not_dispatched(tmp_path: Path) -> None:
    """Queue A's entries of the batch are written, then B's directory cannot be made (a real OSError):
    once it can, dispatch goes on from there: nothing is missing, nothing is written twice."""
    config = dispatch_config(str(tmp_path / "store"))
    store = open_store(config)
    arrivals: list[tuple[str, int, int]] = []
    store.add_message_arriving_listener(lambda t, q, after, _codes: arrivals.append((t, q, after)))
    try:
        blocker = tmp_path / "store" / "consumequeue" / "B"
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("in the way")
        batch = [build_message(t, b"x" * i, 0, keys=[f"k{i}"]) for i, t in enumerate("ABABA")]
        # A mixed batch is appended run by run (CommitLog.put_messages), so a dispatch between two runs
        # would take its first messages as a chunk of their own. Held, dispatch finds the batch whole.
        with store.reput_service.dispatch_lock:
            assert store.put_messages(batch).ok
        wait_for_failure(store)
        assert store.get_max_offset_in_queue("A", 0) == 3 and store.index_service.index_files == []
        assert arrivals == []  # notices follow the whole chunk
        blocker.unlink()
        wait_dispatched(store)
        assert store.reput_service.failure == ""
        assert sorted(arrivals) == [("A", 0, 3), ("B", 0, 2)]
        assert [m["body"] for m in store.query_message("A", "k2", 8, 0, 2**62)] == [b"xx"]
    finally:
        store.shutdown()
    assert_matches_reference(config, {}, str(tmp_path / "reference"))


def test_an_index_failing_after_the_queues_were_written_resumes_without_duplicates(tmp_path: Path) -> None:
    config = dispatch_config(str(tmp_path / "store"))
    store = open_store(config)
    try:
        blocker = tmp_path / "store" / "index"
        blocker.write_text("in the way")  # no index file can be created
        assert store.put_messages([build_message("A", b"x", i % 2, keys=["k"]) for i in range(6)]).ok
        wait_for_failure(store)
        assert store.get_max_offset_in_queue("A", 0) == 3 and store.get_max_offset_in_queue("A", 1) == 3
        blocker.unlink()
        wait_dispatched(store)
        assert len(store.query_message("A", "k", 64, 0, 2**62)) == 6
    finally:
        store.shutdown()
    assert_matches_reference(config, {}, str(tmp_path / "reference"))


def pooled_config(tmp_path: Path, **overrides: object) -> MessageStoreConfig:
    """A store writing through a transient store pool of two buffers, whose commit service commits once at its start
    and then only when woken (or by the test's own commits) within a test."""
    values: dict[str, object] = {
        "transient_store_pool_enable": True,
        "transient_store_pool_size": 2,
        "commit_interval_commit_log_ms": 60_000,
        "commit_commit_log_thorough_interval_ms": 60_000,
    }
    return dispatch_config(str(tmp_path / "store"), **{**values, **overrides})


def test_with_the_transient_store_pool_only_committed_bytes_are_dispatched(tmp_path: Path) -> None:
    store = open_store(pooled_config(tmp_path))
    mfq = store.commit_log.mapped_file_queue
    arrivals: list[int] = []
    store.add_message_arriving_listener(lambda _t, _q, after, _codes: arrivals.append(after))
    try:
        put = 0
        while mfq.committed_where == mfq.get_max_wrote_position():  # the service's first commit may take the first put
            assert put < 100
            assert store.put_message(build_message("P", b"pending", 0)).ok
            put += 1
        committed = mfq.committed_where
        # What the first commit made readable is dispatched by the thread it woke, or a put.
        wait_for(lambda: store.reput_service.reput_from_offset == committed, 5, what="the first commit's bytes dispatched", poll_s=0.005)
        assert store.reput_service.reput_from_offset == committed and store.get_max_offset_in_queue("P", 0) == put - 1
        assert store.put_message(build_message("P", b"pending too", 0)).ok  # its inline dispatch finds nothing readable
        assert store.reput_service.reput_from_offset == committed and arrivals == ([put - 1] if put > 1 else [])
        store.commit_log.commit(0)
        wait_dispatched(store)
        assert store.get_max_offset_in_queue("P", 0) == put + 1 and arrivals[-1] == put + 1
    finally:
        store.shutdown()


def commit_all(store: DefaultMessageStore) -> None:
    """Commit every write buffer's bytes (a commit takes one file at a time: True once nothing was left)."""
    for _ in range(8):
        if store.commit_log.commit(0):
            return
    raise AssertionError("the write buffers were not committed in 8 commits")


def test_with_the_transient_store_pool_dispatch_stops_where_a_files_uncommitted_tail_starts(tmp_path: Path) -> None:
    """A put that rolls into the next file leaves the previous file's tail in its write buffer: dispatch stops where
    that tail starts (the commit that makes it readable wakes the dispatch thread) rather than reading the file's end
    again and again, holding the put (and the event loop that made it) until a commit comes."""
    store = open_store(pooled_config(tmp_path))
    mfq = store.commit_log.mapped_file_queue
    puts: list[int] = []
    done = threading.Event()

    def put_into_the_second_file() -> None:
        while len(mfq.mapped_files) < 2 or len(puts) < 2:
            assert store.put_message(build_message("P", b"x" * 1000, 0)).ok
            puts.append(len(mfq.mapped_files))
        done.set()

    thread = threading.Thread(target=put_into_the_second_file, daemon=True)
    try:
        thread.start()
        answered = done.wait(10)
        if not answered:
            commit_all(store)  # what the puts were held for: the test then fails, not hangs
        thread.join(10)
        assert answered, "a put was held until a commit made the first file's tail readable"
        assert puts[-1] == 2, "the puts reached the second file"
        commit_all(store)
        wait_dispatched(store)
        assert store.get_max_offset_in_queue("P", 0) == len(puts)
    finally:
        store.shutdown()


def test_with_the_transient_store_pool_one_commit_round_commits_every_file_the_writer_left(tmp_path: Path) -> None:
    """A writer that fills files faster than `commit_interval_commit_log_ms` passes: one wake-up of the commit service
    commits them all, up to the file being written, and dispatch reads them (one file an interval would leave the
    commit, and dispatch with it, further behind at each file)."""
    # A round commits what is pending however little.
    store = open_store(pooled_config(tmp_path, commit_commit_log_least_pages=0))
    mfq = store.commit_log.mapped_file_queue
    try:
        count = 0
        while len(mfq.mapped_files) < 6:  # pooled files and, the pool lent out, files written through their mapping
            assert store.put_message(build_message("P", b"x" * 1000, 0)).ok
            count += 1
        service = store.commit_service
        assert service is not None
        service.wakeup()
        wait_for(lambda: mfq.committed_where == mfq.get_max_wrote_position(), 5, what="one round to commit every file")
        wait_dispatched(store)
        assert store.get_max_offset_in_queue("P", 0) == count
    finally:
        store.shutdown()


def test_a_put_answers_only_once_its_message_is_dispatched_while_another_thread_dispatches(store: DefaultMessageStore) -> None:
    """The second put finds the dispatch lock held by a thread that read the end before it: it returns
    only once its message is in its queue (dispatched by the holder, which reads the end again, or
    by itself). The service thread is stopped: nothing else dispatches."""
    store.reput_service.shutdown()
    release, inside, returned = threading.Event(), threading.Event(), threading.Event()
    seen: list[str] = []
    readable_at_return: list[int] = []

    def listener(topic: str, _qid: int, _after: int, _codes: object) -> None:
        seen.append(topic)
        if topic == "First":
            inside.set()
            assert release.wait(10)  # holds the dispatch lock until released

    def second() -> None:
        assert store.put_message(build_message("Second", b"2")).ok
        readable_at_return.append(store.get_max_offset_in_queue("Second", 0))
        returned.set()

    store.add_message_arriving_listener(listener)
    holder = threading.Thread(target=lambda: store.put_message(build_message("First", b"1")), name="holder")
    holder.start()
    assert inside.wait(10)
    putter = threading.Thread(target=second, name="second")
    putter.start()
    assert not returned.wait(0.2)  # cannot have returned: its message is not dispatched while the lock is held
    release.set()
    putter.join(10)
    holder.join(10)
    assert readable_at_return == [1] and seen == ["First", "Second"]


def test_a_thread_holding_dispatch_back_itself_is_not_made_to_wait_by_its_own_puts(store: DefaultMessageStore) -> None:
    with store.reput_service.dispatch_lock:
        assert store.put_message(build_message("Held", b"1")).ok  # returns: waiting for itself would never end
        assert store.get_max_offset_in_queue("Held", 0) == 0
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("Held", 0) == 1


KILL_WHILE_DISPATCH_LAGS = """
import os, signal, sys
from store import DefaultMessageStore, build_message
from tests.store.test_bulk_dispatch import dispatch_config
store = DefaultMessageStore(dispatch_config(sys.argv[1]))
store.load()
store.start()
for i in range(120):
    if i == 60:
        store.reput_service.dispatch_lock.acquire()  # held to the end: the rest is stored, not dispatched
    batch = [build_message("ABC"[(i + j) % 3], bytes(i % 50), (i + j) % 3, keys=[f"k{i}", f"m{j}"]) for j in range(i % 4 + 1)]
    assert store.put_messages(batch).ok
print("STORED", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_crash_recovery_re_dispatches_what_the_reference_builds(tmp_path: Path) -> None:
    """SIGKILL with half the log dispatched, and topic B's queues lost as well (a machine crash can lose
    unflushed queue pages): load() re-dispatches from the checkpoint's file with the kernels, skipping
    what the queues hold, and the queues and index equal the reference's."""
    root = str(tmp_path / "store")
    run_until_killed(KILL_WHILE_DISPATCH_LAGS, root, "STORED")
    shutil.rmtree(os.path.join(root, "consumequeue", "B"))
    config = dispatch_config(root)
    store = open_store(config)
    try:
        assert not store.last_exit_ok
        wait_dispatched(store)
        assert sum(store.get_max_offset_in_queue(t, q) for t in "ABC" for q in range(3)) == sum(i % 4 + 1 for i in range(120))
    finally:
        store.shutdown()
    assert_matches_reference(config, {}, str(tmp_path / "reference"))
