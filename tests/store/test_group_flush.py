"""store._kernels.GroupFlush on a real mapped file, and the group commit that drives it on a real store."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import FlushDiskType, PutMessageStatus, build_message
from store._kernels import (
    SERVE_BUDGET,
    SERVE_CALLED,
    SERVE_CLOSED,
    SERVE_FAILED,
    SERVE_IDLE,
    SERVE_WINDOW,
    GroupFlush,
    Mapping,
)
from store.logfile.group_commit_service import GroupCommitService, ServeEnd
from tests.store.conftest import open_store, small_config
from tests.waiting import wait_for

PAGE = os.sysconf("SC_PAGE_SIZE")
FILE_BYTES = 16 * PAGE
FILE_FROM = 10 * FILE_BYTES  # the log offset of the file's first byte: not the first file of the log


@pytest.fixture
def mapping(tmp_path: Path) -> Iterator[Mapping]:
    path = tmp_path / "00000000000000000000"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, FILE_BYTES)
        mm = Mapping(fd, FILE_BYTES)
    finally:
        os.close(fd)
    yield mm
    mm.close()


class Server:
    """serve() on a thread of its own; `end` holds what it answered."""

    def __init__(self, flush: GroupFlush, mm: Mapping | None, max_flushes: int = 64, idle_s: float = 5.0, unmap: bool = False) -> None:
        self.answer: tuple[int, int] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(flush, mm, max_flushes, idle_s, unmap))
        self._thread.start()

    def _run(self, flush: GroupFlush, mm: Mapping | None, max_flushes: int, idle_s: float, unmap: bool) -> None:
        try:
            self.answer = flush.serve(mm, FILE_FROM, 0, unmap, max_flushes, idle_s)
        except BaseException as exc:  # handed to the test's thread
            self.error = exc

    def join(self) -> tuple[int, int]:
        self._thread.join(10)
        assert not self._thread.is_alive(), "serve() did not come back"
        assert self.error is None, self.error
        assert self.answer is not None
        return self.answer


def test_a_flush_covers_the_highest_offset_asked_and_wakes_its_waiters(mapping: Mapping) -> None:
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    mapping[0:3000] = b"m" * 3000
    flush.ask(FILE_FROM + 1000)
    flush.ask(FILE_FROM + 3000)  # asked before the flusher runs: one flush serves both (the group's highest offset)
    server = Server(flush, mapping, max_flushes=2)
    assert flush.wait(FILE_FROM + 1000, 10) == 1
    assert flush.wait(FILE_FROM + 3000, 10) == 1
    assert flush.flushed >= FILE_FROM + 3000 and flush.asks == 2
    mapping[3000:5000] = b"n" * 2000
    flush.ask(FILE_FROM + 5000)
    assert flush.wait(FILE_FROM + 5000, 10) == 1
    end, dropped_to = server.join()
    assert end == SERVE_BUDGET and flush.flushed == FILE_FROM + 5000 and flush.flushes == 2
    assert dropped_to == 0  # unmap_first off: nothing left the mapping


def test_a_wait_answers_0_on_timeout_and_minus_1_on_a_failure_or_close(mapping: Mapping) -> None:
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    assert flush.wait(FILE_FROM, 0) == 1  # already flushed: at once
    assert flush.wait(FILE_FROM + 1, 0.01) == 0
    outcome: list[int] = []
    waiter = threading.Thread(target=lambda: outcome.append(flush.wait(FILE_FROM + 1, 10)))
    waiter.start()
    wait_for(lambda: flush.waiters == 1, what="the waiter to block")
    flush.fail()  # a failure after the wait began: it answers -1
    waiter.join(10)
    assert outcome == [-1]
    flush.close()
    assert flush.closed and flush.wait(FILE_FROM + 1, 10) == -1 and flush.wait(FILE_FROM, 10) == 1
    flush.reset(FILE_FROM + 7)
    assert not flush.closed and flush.flushed == flush.requested == FILE_FROM + 7


def test_serve_comes_back_for_a_file_it_does_not_hold_and_flushes_none_of_it(mapping: Mapping) -> None:
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    flush.ask(FILE_FROM + FILE_BYTES + 1)  # the next file's: this mapping cannot serve it
    assert flush.serve(mapping, FILE_FROM, 0, False, 64, 5.0) == (SERVE_WINDOW, 0)
    assert flush.flushed == FILE_FROM and flush.flushes == 0
    assert flush.serve(None, 0, 0, False, 64, 5.0)[0] == SERVE_WINDOW  # no file lent: asked is past it
    flush.advance(FILE_FROM + FILE_BYTES + 1)  # Python flushed it
    assert flush.wait(FILE_FROM + FILE_BYTES + 1, 0) == 1
    flush.reset(FILE_FROM - 1)
    flush.ask(FILE_FROM + 10)
    assert flush.serve(mapping, FILE_FROM, 0, False, 64, 5.0)[0] == SERVE_WINDOW  # flushed below the file's start


def test_serve_comes_back_idle_called_and_closed(mapping: Mapping) -> None:
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    assert flush.serve(mapping, FILE_FROM, 0, False, 64, 0.02) == (SERVE_IDLE, 0)
    server = Server(flush, mapping)
    flush.call()
    assert server.join()[0] == SERVE_CALLED
    server = Server(flush, mapping)
    mapping[0:100] = b"p" * 100
    flush.ask(FILE_FROM + 100, True)  # a request waits in Python: flushed, then back
    assert server.join()[0] == SERVE_CALLED and flush.flushed == FILE_FROM + 100
    server = Server(flush, mapping)
    flush.close()
    assert server.join()[0] == SERVE_CLOSED


def test_unmap_first_drops_the_whole_pages_below_the_flush(mapping: Mapping) -> None:
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    mapping[0 : 3 * PAGE + 5] = b"u" * (3 * PAGE + 5)
    flush.ask(FILE_FROM + 3 * PAGE + 5)
    server = Server(flush, mapping, max_flushes=1, unmap=True)
    assert server.join() == (SERVE_BUDGET, 3 * PAGE)  # the page the writer is in stays mapped
    assert mapping[0 : 3 * PAGE + 5] == b"u" * (3 * PAGE + 5)  # dropped pages read back from the page cache


def test_bad_arguments_are_refused_and_a_lent_mapping_cannot_close(mapping: Mapping, tmp_path: Path) -> None:
    flush = GroupFlush()
    with pytest.raises(ValueError, match="negative"):
        flush.ask(-1)
    with pytest.raises(ValueError, match="negative"):
        flush.wait(-5, 0)
    with pytest.raises(ValueError, match="page boundary"):
        flush.serve(mapping, FILE_FROM, 100, True, 64, 0.01)
    with pytest.raises(ValueError, match="page boundary"):
        flush.serve(mapping, FILE_FROM, FILE_BYTES + PAGE, True, 64, 0.01)
    with pytest.raises(ValueError, match="max_flushes"):
        flush.serve(mapping, FILE_FROM, 0, True, 0, 0.01)
    with pytest.raises(ValueError, match="idle_s"):
        flush.serve(mapping, FILE_FROM, 0, True, 1, -1.0)
    with pytest.raises(TypeError, match="Mapping"):
        flush.serve(bytearray(FILE_BYTES), FILE_FROM, 0, True, 1, 0.01)  # type: ignore[arg-type]  # the wrong type on purpose: refused
    with pytest.raises(TypeError):
        flush.ask()  # type: ignore[call-arg]  # no offset on purpose: refused
    flush.reset(FILE_FROM)
    server = Server(flush, mapping)
    wait_for(lambda: flush.serving, what="serve() to begin")  # the mapping is lent
    with pytest.raises(BufferError):
        mapping.close()
    with pytest.raises(RuntimeError, match="under way"):
        flush.serve(mapping, FILE_FROM, 0, False, 1, 0.01)
    with pytest.raises(RuntimeError, match="under way"):
        flush.reset(FILE_FROM)
    flush.call()
    assert server.join()[0] == SERVE_CALLED
    closed_path = tmp_path / "closed"
    fd = os.open(closed_path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, PAGE)
    closed = Mapping(fd, PAGE)
    os.close(fd)
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        flush.serve(closed, 0, 0, False, 1, 0.01)


def test_sync_puts_across_many_files_are_confirmed_flushed_and_read_back(tmp_path: Path) -> None:
    # 64 KiB commitlog files, 1 KiB bodies from four threads: the log moves on to a new file about every
    # 60 puts, so the native flusher comes back for the next file (WINDOW) many times.
    config = small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = open_store(config)
    threads, per_thread = 4, 120
    results: list[list[tuple[PutMessageStatus, int]]] = [[] for _ in range(threads)]
    try:

        def put(i: int) -> None:
            for n in range(per_thread):
                r = store.put_message(build_message("W", b"%d-%04d" % (i, n) + b"x" * 1017, i))
                results[i].append((r.status, r.end_offset))

        workers = [threading.Thread(target=put, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        service = store.flush_service
        assert isinstance(service, GroupCommitService)
        assert all(status is PutMessageStatus.PUT_OK for rows in results for status, _ in rows)
        assert store.commit_log.flushed_where() >= max(end for rows in results for _, end in rows)
        assert service.serve_ends[ServeEnd.WINDOW] > 0 and service.group_flush.flushes > 0
        assert len(store.commit_log.mapped_file_queue.mapped_files) > 5
    finally:
        store.shutdown()
    reopened = open_store(config)
    try:
        for i in range(threads):
            bodies: list[bytes] = []
            while len(bodies) < per_thread + 1:
                with reopened.get_message("G", "W", i, len(bodies), per_thread) as got:
                    batch = [m["body"][:6] for m in got.decode()]
                if not batch:
                    break
                bodies += batch
            assert bodies == [b"%d-%04d" % (i, n) for n in range(per_thread)]  # each once, in order
    finally:
        reopened.shutdown()


def test_a_put_after_the_service_stopped_is_answered_not_confirmed_at_once(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        store.flush_service.shutdown()  # the flusher gone: a wait may not hang until its timeout
        r = store.put_message(build_message("Z", b"late"))
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.stored
        store.flush_service.start()  # and back: the flusher resets to the log's flushed offset
        r = store.put_message(build_message("Z", b"again"))
        assert r.status is PutMessageStatus.PUT_OK
    finally:
        store.shutdown()


def test_waits_with_a_callback_take_places_in_the_bounded_list(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        end = store.put_message(build_message("B", b"x")).end_offset
        # A service of the same log that is not running: its flusher has flushed nothing, so its waits stay pending.
        idle = GroupCommitService(store.commit_log, 1, lambda _ts: None)
        first, second, blocking = idle.wait_for(end), idle.wait_for(end), idle.wait_for(end)
        answers: list[tuple[str, object]] = []
        first.add_done_callback(lambda f: answers.append(("first", f.result())))
        second.add_done_callback(lambda f: answers.append(("second", f.result())))
        assert answers == [("second", PutMessageStatus.FLUSH_DISK_TIMEOUT)]  # the list's one place is taken
        assert not first.done() and not blocking.done()
        with pytest.raises(TimeoutError):
            blocking.result(0.01)  # a wait without a callback needs no place: it times out as a Future's does
        idle.group_flush.advance(end)  # the log flushed up to the end: every wait reads it
        assert blocking.result(0) is PutMessageStatus.PUT_OK and first.done()
        assert answers[-1] == ("first", PutMessageStatus.PUT_OK)  # its callback ran as it completed
    finally:
        store.shutdown()


def test_each_waiter_is_answered_when_the_flush_reaches_its_own_offset() -> None:
    flush = GroupFlush()
    flush.reset(0)
    answers: dict[int, int] = {}
    threads = [threading.Thread(target=lambda o=o: answers.__setitem__(o, flush.wait(o, 10))) for o in (100, 200, 300)]
    for t in threads:
        t.start()
    wait_for(lambda: flush.waiters == 3, what="three waiters")
    flush.advance(200)  # reaches the first two: the third stays linked and asleep
    wait_for(lambda: len(answers) == 2, what="the two reached waits")
    assert answers == {100: 1, 200: 1} and flush.waiters == 1
    flush.advance(300)
    for t in threads:
        t.join(10)
    assert answers == {100: 1, 200: 1, 300: 1} and flush.waiters == 0


def test_a_wait_past_the_logs_end_is_refused_and_asks_nothing(tmp_path: Path) -> None:
    store = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        end = store.put_message(build_message("E", b"x")).end_offset
        service = store.flush_service
        assert isinstance(service, GroupCommitService)
        asked = service.group_flush.asks
        with pytest.raises(ValueError, match="past the log's end"):
            store.durable_through(end + 1)  # a flush asked there would claim bytes not yet written
        assert service.group_flush.asks == asked and service.group_flush.requested <= store.commit_log.get_max_offset()
        durable = store.durable_through(end)
        assert durable is not None and durable.result(10) is PutMessageStatus.PUT_OK
    finally:
        store.shutdown()


def test_a_wait_alone_flushes_itself_through_the_file_serve_holds(mapping: Mapping) -> None:
    # A leading wait asks for the log up to its lead_to and, alone and with serve() holding the file, makes the
    # flush on its own thread: serve() was not woken for it and still serves. Leaders' flushes count against
    # serve()'s budget, so Python's bookkeeping still comes every max_flushes flushes.
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    server = Server(flush, mapping, max_flushes=2)
    wait_for(lambda: flush.lending, what="serve() to lend its file")
    mapping[0:2000] = b"l" * 2000
    assert flush.wait(FILE_FROM + 1000, 10, FILE_FROM + 2000) == 1
    assert (flush.flushed, flush.requested, flush.led, flush.flushes, flush.asks) == (FILE_FROM + 2000, FILE_FROM + 2000, 1, 1, 1)
    assert flush.serving  # serve() sleeps on: nothing woke it
    mapping[2000:2500] = b"m" * 500
    assert flush.wait(FILE_FROM + 2500, 10, FILE_FROM + 2500) == 1
    assert server.join()[0] == SERVE_BUDGET and flush.led == 2 and flush.flushes == 2


def test_a_leading_wait_without_a_file_to_flush_leaves_the_flush_to_serve(mapping: Mapping) -> None:
    # No serve() under way: the wait asks and times out, serve() then flushes what it asked. A wait asking past
    # the file serve() holds rings serve(), which comes back for the next file (WINDOW), flushing none of it.
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    mapping[0:300] = b"s" * 300
    assert flush.wait(FILE_FROM + 100, 0.05, FILE_FROM + 300) == 0
    assert flush.requested == FILE_FROM + 300 and flush.flushed == FILE_FROM
    server = Server(flush, mapping, max_flushes=1)
    assert server.join()[0] == SERVE_BUDGET and flush.flushed == FILE_FROM + 300 and flush.led == 0
    server = Server(flush, mapping)
    wait_for(lambda: flush.serving, what="serve() to begin")
    assert flush.wait(FILE_FROM + FILE_BYTES + 10, 0.05, FILE_FROM + FILE_BYTES + 10) == 0
    assert server.join()[0] == SERVE_WINDOW and flush.flushed == FILE_FROM + 300
    with pytest.raises(ValueError, match="at least its own offset"):
        flush.wait(FILE_FROM + 500, 1, FILE_FROM + 400)
    with pytest.raises(ValueError, match="negative"):
        flush.wait(FILE_FROM, 1, -1)


def test_serve_is_not_idle_while_leaders_flush(mapping: Mapping) -> None:
    # serve()'s idle pass is for a log nobody flushes: leaders flushing every 10 ms keep it serving past its
    # idle_s (0.5 s); once they stop it comes back IDLE.
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    server = Server(flush, mapping, max_flushes=10_000, idle_s=0.5)
    wait_for(lambda: flush.lending, what="serve() to lend its file")
    for n in range(1, 101):
        mapping[n * 10 : n * 10 + 10] = b"i" * 10
        assert flush.wait(FILE_FROM + n * 10 + 10, 10, FILE_FROM + n * 10 + 10) == 1
        threading.Event().wait(0.01)
    assert flush.serving and flush.led == 100
    assert server.join()[0] == SERVE_IDLE


def test_leaders_and_serve_flush_one_at_a_time_and_answer_every_wait(mapping: Mapping) -> None:
    # Eight threads of leading waits while serve() comes back every 7 flushes and is called again (its file lent
    # and taken back all the time): every wait is answered flushed, the flushed offset covers the last one, and
    # every flush is counted once (by a leader or by serve()).
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    stop = threading.Event()
    ends: list[int] = []

    def serving() -> None:
        while not stop.is_set():
            ends.append(flush.serve(mapping, FILE_FROM, 0, True, 7, 0.005)[0])

    lock = threading.Lock()
    position = [0]
    answers: list[int] = []

    def leader() -> None:
        for _ in range(150):
            with lock:
                start = position[0]
                position[0] += 24
                mapping[start : start + 24] = b"c" * 24
            answers.append(flush.wait(FILE_FROM + start + 24, 10, FILE_FROM + start + 24))

    server = threading.Thread(target=serving)
    server.start()
    leaders = [threading.Thread(target=leader) for _ in range(8)]
    for t in leaders:
        t.start()
    for t in leaders:
        t.join(60)
    stop.set()
    flush.call()
    server.join(10)
    assert not server.is_alive()
    assert answers == [1] * 1200
    assert flush.flushed == FILE_FROM + position[0] == FILE_FROM + 1200 * 24
    assert 0 < flush.led <= flush.flushes and SERVE_BUDGET in ends
    assert mapping[0 : 1200 * 24] == b"c" * (1200 * 24)  # pages dropped by either flusher read back


def test_a_sync_put_alone_is_flushed_by_its_own_thread(tmp_path: Path) -> None:
    # In process, one producer: its put's wait leads, so most flushes are the putting thread's, and every put is
    # confirmed flushed (tests/store/test_crash.py kills such a writer and checks what it was told).
    store = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        service = store.flush_service
        assert isinstance(service, GroupCommitService)
        flush = service.group_flush
        assert store.put_message(build_message("A", b"first")).status is PutMessageStatus.PUT_OK  # the log's first file
        wait_for(lambda: flush.lending, what="the group commit to lend its file")
        led = flush.led
        for n in range(50):
            r = store.put_message(build_message("A", b"alone-%d" % n))
            assert r.status is PutMessageStatus.PUT_OK
            assert store.commit_log.flushed_where() >= r.end_offset
        assert flush.led - led >= 25
    finally:
        store.shutdown()


def test_lone_says_whether_puts_come_one_at_a_time(mapping: Mapping) -> None:
    # A put's wait leads only while puts come one at a time: no thread waits and the last flush answered at most
    # one sleeping wait. A flush that answered two makes it False until a flush answers one again.
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    assert flush.lone
    answers: list[int] = []
    waits = [threading.Thread(target=lambda o=o: answers.append(flush.wait(FILE_FROM + o, 10))) for o in (100, 200)]
    for t in waits:
        t.start()
    wait_for(lambda: flush.waiters == 2, what="two waiters")
    assert not flush.lone  # threads wait
    mapping[0:200] = b"o" * 200
    flush.ask(FILE_FROM + 200)
    assert Server(flush, mapping, max_flushes=1).join()[0] == SERVE_BUDGET
    for t in waits:
        t.join(10)
    assert answers == [1, 1] and not flush.lone  # that flush answered two
    waiter = threading.Thread(target=lambda: answers.append(flush.wait(FILE_FROM + 300, 10)))
    waiter.start()
    wait_for(lambda: flush.waiters == 1, what="one waiter")
    mapping[200:300] = b"o" * 100
    flush.ask(FILE_FROM + 300)
    assert Server(flush, mapping, max_flushes=1).join()[0] == SERVE_BUDGET
    waiter.join(10)
    assert answers == [1, 1, 1] and flush.lone


def test_a_failed_flush_answers_its_waits_minus_1_and_serve_comes_back_failed(mapping: Mapping) -> None:
    # serve()'s own flush fails (an injected EIO): the wait under way answers -1, serve() answers SERVE_FAILED with
    # the errno, the flushed offset stays. A leader's flush fails the same way: its wait answers -1 and serve(),
    # which did not flush, comes back SERVE_FAILED at once (Python logs it and pauses). Then a leader flushes again.
    flush = GroupFlush()
    flush.reset(FILE_FROM)
    mapping[0:300] = b"f" * 300
    outcome: list[int] = []
    waiter = threading.Thread(target=lambda: outcome.append(flush.wait(FILE_FROM + 100, 10)))
    waiter.start()
    wait_for(lambda: flush.waiters == 1, what="the waiter to block")
    flush.inject_failure(errno.EIO)
    flush.ask(FILE_FROM + 100)
    assert Server(flush, mapping).join()[0] == SERVE_FAILED
    waiter.join(10)
    assert outcome == [-1] and flush.failures == 1 and flush.last_errno == errno.EIO and flush.flushed == FILE_FROM
    flush.reset(FILE_FROM)  # nothing asked: the next serve() sleeps until a leader comes
    server = Server(flush, mapping)
    wait_for(lambda: flush.lending, what="serve() to lend its file")
    flush.inject_failure(errno.ENOSPC)
    assert flush.wait(FILE_FROM + 200, 10, FILE_FROM + 200) == -1
    assert server.join()[0] == SERVE_FAILED and flush.failures == 2 and flush.last_errno == errno.ENOSPC
    assert flush.led == 0 and flush.flushes == 0 and flush.flushed == FILE_FROM
    flush.reset(FILE_FROM)
    server = Server(flush, mapping, max_flushes=1)
    wait_for(lambda: flush.lending, what="serve() to lend its file")
    assert flush.wait(FILE_FROM + 300, 10, FILE_FROM + 300) == 1
    assert server.join()[0] == SERVE_BUDGET and flush.led == 1 and flush.flushed == FILE_FROM + 300
    with pytest.raises(ValueError, match="errno"):
        flush.inject_failure(0)


def test_a_failed_flush_is_logged_and_its_put_answered_not_confirmed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # On a real store: the flush of a SYNC put fails (an injected EIO, whichever thread makes it): the put is
    # stored and answered FLUSH_DISK_TIMEOUT, the group commit logs the failure (SERVE_FAILED's branch) and
    # pauses, and the next put is flushed and answered PUT_OK.
    store = open_store(small_config(str(tmp_path / "s"), flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        service = store.flush_service
        assert isinstance(service, GroupCommitService)
        assert store.put_message(build_message("F", b"first")).status is PutMessageStatus.PUT_OK
        wait_for(lambda: service.group_flush.lending, what="the group commit to lend its file")
        service.group_flush.inject_failure(errno.EIO)
        with caplog.at_level("ERROR", logger="tidemq.store"):
            failed = store.put_message(build_message("F", b"second"))
            wait_for(lambda: service.serve_ends[ServeEnd.FAILED] == 1, what="the group commit to come back FAILED")
        assert failed.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and failed.stored
        assert any("flush failed (errno 5), 1 time(s)" in r.getMessage() for r in caplog.records)
        again = store.put_message(build_message("F", b"third"))
        assert again.status is PutMessageStatus.PUT_OK
        assert store.commit_log.flushed_where() >= again.end_offset
    finally:
        store.shutdown()
