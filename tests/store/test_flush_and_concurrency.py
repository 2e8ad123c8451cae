"""SYNC_FLUSH group commit, the future API under asyncio, concurrent puts and reads, property sequences."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    DefaultMessageStore,
    FlushDiskType,
    GetMessageStatus,
    MessageInner,
    PutBatch,
    PutMessageResult,
    PutMessageStatus,
    build_message,
)
from tests.store.conftest import open_store, small_config, wait_dispatched


def test_sync_flush_answers_after_the_bytes_are_flushed(tmp_path: Path) -> None:
    s = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        for i in range(50):
            r = s.put_message(build_message("F", f"{i}".encode() * 100))
            assert r.status is PutMessageStatus.PUT_OK
            assert s.commit_log.flushed_where() >= r.end_offset
    finally:
        s.shutdown()


def test_one_flush_serves_many_waiters(tmp_path: Path) -> None:
    s = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        results: list[PutMessageResult] = []
        lock = threading.Lock()

        def producer(n: int) -> None:
            for i in range(40):
                r = s.put_message(build_message("F", f"{n}-{i}".encode(), queue_id=n % 4))
                with lock:
                    results.append(r)

        threads = [threading.Thread(target=producer, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 640 and all(r.status is PutMessageStatus.PUT_OK for r in results)
        assert s.commit_log.flushed_where() >= max(r.end_offset for r in results)
    finally:
        s.shutdown()


def test_put_returns_before_its_flush_and_completes_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    # A slow disk: no flush of the commitlog starts until the gate opens (the only way to hold a flush
    # still while a put is under way): the group commit's thread stops before it lends the next file to
    # its native flusher, and before any flush of its own.
    gate, held = threading.Event(), threading.Event()
    real_window = s.commit_log.flush_window

    def held_window() -> object:
        held.set()
        gate.wait(60)
        return real_window()

    monkeypatch.setattr(s.commit_log, "flush_window", held_window)
    s.flush_service.wakeup()  # the serve under way comes back; the next one waits at the gate
    assert held.wait(10)
    try:
        returned: list[concurrent.futures.Future[PutMessageResult]] = []

        def put() -> None:
            returned.extend(s.put(PutBatch.of((build_message("A", b"x" * 200),))) for _ in range(100))

        caller = threading.Thread(target=put)
        caller.start()
        caller.join(30)
        assert len(returned) == 100, "put waited for the flush instead of returning its future"
        assert not any(f.done() for f in returned), "answered before the flush: not durable yet"

        async def gather() -> list[PutMessageResult]:
            waiting = asyncio.gather(*(asyncio.wrap_future(f) for f in returned))
            await asyncio.sleep(0.05)  # nothing may complete while the flush is held
            assert not waiting.done()
            gate.set()  # the disk catches up: every future completes, on the loop, without blocking it
            return await asyncio.wait_for(waiting, 30)

        results = asyncio.run(gather())
        assert all(r.ok for r in results)
        assert s.commit_log.flushed_where() >= max(r.end_offset for r in results)
    finally:
        gate.set()
        s.shutdown()


def test_group_commit_bound_answers_flush_timeout(tmp_path: Path) -> None:
    s = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH, max_group_commit_requests=0))
    try:
        r = s.put_message(build_message("F", b"x"))
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.stored, "stored, durability not confirmed"
    finally:
        s.shutdown()


def test_async_flush_future_is_done_at_once(store: DefaultMessageStore) -> None:
    fut = store.put(PutBatch.of((build_message("A", b"x"),)))
    assert fut.done() and fut.result().ok
    batch = store.put(PutBatch.of([build_message("A", b"y") for _ in range(5)]))
    assert [i.logics_offset for i in batch.result().items] == [1, 2, 3, 4, 5]


def test_concurrent_puts_while_reading(store: DefaultMessageStore) -> None:
    writers, per_writer = 4, 300
    errors: list[str] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        for i in range(per_writer):
            if not store.put_message(build_message("C", f"{n}:{i}".encode(), queue_id=n)).ok:
                errors.append("put failed")

    def reader() -> None:
        offsets = [0] * writers
        while not stop.is_set() or any(offsets[q] < per_writer for q in range(writers)):
            for q in range(writers):
                with store.get_message("g", "C", q, offsets[q], 32) as r:
                    if r.status is GetMessageStatus.FOUND:
                        for msg in r.decode():
                            expected = f"{q}:{offsets[q]}".encode()
                            if msg["body"] != expected:
                                errors.append(f"queue {q}: {msg['body']!r} != {expected!r}")
                            offsets[q] += 1
            if stop.is_set() and time.monotonic() > deadline:
                errors.append(f"reader stuck at {offsets}")
                return

    deadline = time.monotonic() + 60
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    rt = threading.Thread(target=reader)
    rt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    rt.join(60)
    assert not errors, errors[:5]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    puts=st.lists(
        st.tuples(st.sampled_from(["A", "B", "C"]), st.integers(0, 2), st.integers(0, 6000), st.booleans()),
        min_size=1,
        max_size=60,
    )
)
def test_any_put_sequence_reads_back_in_order_per_queue(
    tmp_path_factory: pytest.TempPathFactory, puts: list[tuple[str, int, int, bool]]
) -> None:
    root = str(tmp_path_factory.mktemp("prop"))
    cfg = small_config(root, mapped_file_size_commit_log_bytes=16 * 1024, max_message_size_bytes=6 * 1024, max_properties_size_bytes=1024)
    s = open_store(cfg)
    accepted: dict[tuple[str, int], list[bytes]] = {}
    try:
        pending = []

        def submit(msgs: list[MessageInner]) -> None:
            result = s.put_messages(msgs)
            assert result.ok
            for m, item in zip(msgs, result.items, strict=True):
                seq = accepted.setdefault((m.topic, m.queue_id), [])
                assert item.logics_offset == len(seq)
                seq.append(m.body)

        for n, (topic, qid, size, batched) in enumerate(puts):
            body = f"{n}-".encode().ljust(size, b".")
            msg = build_message(topic, body, queue_id=qid)
            if batched:
                pending.append(msg)
                continue
            if pending:
                submit(pending)
                pending = []
            submit([msg])
        if pending:
            submit(pending)
        wait_dispatched(s)
        for (topic, qid), bodies in accepted.items():
            got: list[bytes] = []
            offset = 0
            while True:
                with s.get_message("g", topic, qid, offset, 32) as r:
                    if r.status is not GetMessageStatus.FOUND:
                        break
                    got += [m["body"] for m in r.decode()]
                    offset = r.next_begin_offset
            assert got == bodies
    finally:
        s.shutdown()
