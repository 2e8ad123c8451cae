"""CommitFuture: the group commit's future behaves as a concurrent.futures.Future to the callers it has."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from pathlib import Path

import pytest

from store.logfile.commit_future import CommitFuture
from store.logfile.group_commit_service import GroupCommitRequest
from store.status import PutMessageStatus

pytestmark = pytest.mark.timeout(30)


def test_a_thread_blocked_on_the_result_gets_it_and_callbacks_run_once_each() -> None:
    future = CommitFuture()
    seen: list[object] = []
    future.add_done_callback(lambda f: seen.append(("early", f.result())))
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(future.result(timeout=20)))
    waiter.start()
    assert not future.done() and not future.cancel() and not future.cancelled()
    future.set_result("flushed")
    waiter.join(20)
    assert got == ["flushed"] and future.done() and future.exception() is None
    future.add_done_callback(lambda f: seen.append(("late", f.result())))  # after completion: called at once
    assert seen == [("early", "flushed"), ("late", "flushed")]
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result("again")
    assert future.result() == "flushed"


def test_a_timed_wait_ends_with_timeout_error_and_a_later_completion_still_counts() -> None:
    future = CommitFuture()
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.exception(timeout=0)
    future.set_exception(OSError("disk gone"))
    assert isinstance(future.exception(), OSError)
    with pytest.raises(OSError, match="disk gone"):
        future.result()


def test_a_failing_callback_does_not_keep_the_others_from_running() -> None:
    future = CommitFuture()
    calls: list[str] = []

    def failing(_: object) -> None:
        calls.append("failing")
        raise RuntimeError("a callback's own bug")

    future.add_done_callback(failing)
    future.add_done_callback(lambda _: calls.append("next"))
    future.set_result(1)
    assert calls == ["failing", "next"]


def test_many_threads_waiting_on_requests_completed_from_another_thread_all_get_their_answer() -> None:
    requests = [GroupCommitRequest(i) for i in range(64)]
    answers: dict[int, object] = {}

    def wait(request: GroupCommitRequest) -> None:
        answers[request.next_offset] = request.future.result(timeout=20)

    waiters = [threading.Thread(target=wait, args=(r,)) for r in requests]
    for w in waiters:
        w.start()
    completer = threading.Thread(
        target=lambda: [
            r.wakeup_customer(r.next_offset % 2 == 0)  # type: ignore[func-returns-value]  # called for its effect only
            for r in requests
        ]
    )
    completer.start()
    completer.join(20)
    for w in waiters:
        w.join(20)
    assert answers == {i: PutMessageStatus.PUT_OK if i % 2 == 0 else PutMessageStatus.FLUSH_DISK_TIMEOUT for i in range(64)}


@dataclasses.dataclass
class Fields:
    """One parsed message of a FIELDS batch (store.put.put_batch.MessageFields)."""

    body: bytes
    tags: str | None = None
    keys: list[str] | None = None
    properties: dict[str, str] | None = None
    msg_id: str | None = None
    dedup_id: str | None = None


def test_a_put_answered_at_once_is_a_done_future_that_asyncio_and_callers_read(tmp_path: Path) -> None:
    """An ASYNC_FLUSH put waits for nothing: its future is done when made, runs callbacks at once, is
    never completed again, and asyncio awaits it like any concurrent future."""
    import asyncio

    from store import build_message
    from store.logfile.put_durability import DoneFuture
    from store.put.put_batch import PutBatch
    from store.status import LazyItems, total_bytes
    from tests.store.conftest import open_store, small_config

    store = open_store(small_config(str(tmp_path / "store")))
    try:
        future = store.put(PutBatch.of((build_message("T", b"now", 0),)))
        assert isinstance(future, DoneFuture)
        assert future.done() and not future.cancel() and not future.cancelled() and not future.running()
        result = future.result(timeout=0)
        assert result.ok and future.exception() is None and result.end_offset == result.items[0].wrote_offset + result.items[0].wrote_bytes
        seen: list[object] = []
        future.add_done_callback(lambda f: seen.append(f.result()))
        future.add_done_callback(lambda _f: 1 / 0)  # logged, as Future does; the next callback still runs
        future.add_done_callback(lambda f: seen.append(f.done()))
        assert seen == [result, True]
        with pytest.raises(concurrent.futures.InvalidStateError):
            future.set_result(result)
        with pytest.raises(concurrent.futures.InvalidStateError):
            future.set_exception(OSError("late"))

        async def awaited() -> object:
            return await asyncio.wrap_future(future)

        assert asyncio.run(awaited()) is result
        for count in (1, 3):  # the end and the size read from the kernel's buffer equal the items'
            fields = [Fields(b"x" * (i + 1)) for i in range(count)]
            items = store.put(PutBatch.of_fields("T", 0, fields)).result().items
            assert isinstance(items, LazyItems)
            assert items.end_offset() == items[-1].wrote_offset + items[-1].wrote_bytes
            assert total_bytes(items) == sum(i.wrote_bytes for i in items)
    finally:
        store.shutdown()
