"""The durable produces of one loop turn wait on one flush future (app/durable_turns.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.completion_relay import CompletionRelay
from app.durable_turns import DurableTurns
from app.server import create_app
from app.settings import BrokerSettings
from store import FlushDiskType, MessageStoreConfig, PutMessageStatus

pytestmark = pytest.mark.timeout(60)


class Through:
    """The store's side of a group's wait: records the offsets asked for, and the futures it gave."""

    def __init__(self, answer_at_once: bool = False) -> None:
        self.asked: list[int] = []
        self.futures: list[concurrent.futures.Future[PutMessageStatus]] = []
        self.answer_at_once = answer_at_once

    def __call__(self, offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        self.asked.append(offset)
        if self.answer_at_once:
            return None
        future: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()
        self.futures.append(future)
        return future


def offset_of(reply: dict[str, object], name: str) -> int:
    """An offset field of a produce's reply (a JSON number)."""
    offset = reply[name]
    assert isinstance(offset, int), reply
    return offset


def test_members_of_a_turn_share_one_wait_through_their_highest_end() -> None:
    async def run() -> tuple[list[int], list[object], bool]:
        through = Through()
        turns = DurableTurns(through, CompletionRelay(asyncio.get_running_loop()), 10.0)
        members = [turns.wait(end) for end in (300, 900, 600)]
        cancelled = members[1]
        await asyncio.sleep(0)  # the turn ends: one request, through 900
        later = turns.wait(1200)  # the next turn's group
        await asyncio.sleep(0)
        cancelled.cancel()  # its request went away: the others still get the outcome
        threading.Thread(target=through.futures[0].set_result, args=(PutMessageStatus.PUT_OK,)).start()  # the flush thread
        done = await asyncio.gather(members[0], members[2])
        assert not later.done()
        through.futures[1].set_result(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return through.asked, [*done, await later], turns.groups == 2 and turns.members == 4

    asked, outcomes, counted = asyncio.run(run())
    assert asked == [900, 1200]
    assert outcomes == [PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT]
    assert counted


class Recorded:
    """A held reply (app.durable_turns.Settled) that records the outcomes it is told."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[PutMessageStatus | None, BaseException | None]] = []

    def settle(self, status: PutMessageStatus | None, exc: BaseException | None) -> None:
        self.outcomes.append((status, exc))


def test_reach_joins_the_open_group_only() -> None:
    """A held member joined by `hold` is told its group's outcome once; `reach` raises that group's end while it is
    the turn's open group, and refuses (joining nothing) once it has closed."""

    Outcomes = list[tuple[PutMessageStatus | None, BaseException | None]]

    async def run() -> tuple[list[int], Outcomes, Outcomes, list[bool], int]:
        through = Through()
        turns = DurableTurns(through, CompletionRelay(asyncio.get_running_loop()), 10.0)
        first, second = Recorded(), Recorded()
        group = turns.hold(100, first)
        joined = [turns.reach(700, group), turns.reach(400, group)]
        await asyncio.sleep(0)  # the turn ends: its group asks through 700
        joined.append(turns.reach(900, group))  # closed: not joined
        later = turns.hold(900, second)
        joined.append(turns.reach(950, later))
        await asyncio.sleep(0)
        for future in through.futures:
            future.set_result(PutMessageStatus.PUT_OK)
        for _ in range(20):
            await asyncio.sleep(0.01)
            if first.outcomes and second.outcomes:
                break
        return through.asked, first.outcomes, second.outcomes, joined, turns.members

    asked, first, second, joined, members = asyncio.run(run())
    assert asked == [700, 950]
    assert first == [(PutMessageStatus.PUT_OK, None)] and second == [(PutMessageStatus.PUT_OK, None)]
    assert joined == [True, True, False, True]
    assert members == 5  # two holds and three reaches joined


def test_a_group_past_its_deadline_gets_none_and_one_answered_at_once_gets_put_ok() -> None:
    async def run() -> tuple[object, object]:
        late = DurableTurns(Through(), CompletionRelay(asyncio.get_running_loop()), 0.05)
        at_once = DurableTurns(Through(answer_at_once=True), CompletionRelay(asyncio.get_running_loop()), 10.0)
        return await late.wait(10), await at_once.wait(10)

    assert asyncio.run(run()) == (None, PutMessageStatus.PUT_OK)


def test_the_loop_waits_for_a_group_itself_within_its_wait() -> None:
    # The flush (10 ms on another thread) ends within the loop's own wait: the members have the outcome as soon as
    # the turn's close returned, with no relay's hand-off; an error of the wait is every member's.
    async def run() -> tuple[list[object], list[object], bool]:
        loop = asyncio.get_running_loop()
        through = FlushedBy(lambda future: future.set_result(PutMessageStatus.PUT_OK))
        turns = DurableTurns(through, CompletionRelay(loop), 10.0, loop_wait_s=5.0)
        members = [turns.wait(end) for end in (100, 200)]
        await asyncio.sleep(0)  # the turn's close: the flush asked for and waited for a hop later
        asked = list(through.asked)
        await asyncio.sleep(0)  # the hop: the flush asked for, the loop's wait
        states = [asked == [] and through.asked == [200], *(m.done() for m in members)]
        failing = DurableTurns(FlushedBy(lambda future: future.set_exception(OSError("EIO"))), CompletionRelay(loop), 10.0, 5.0)
        failed = failing.wait(300)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        error = failed.exception()
        return [*states, *(m.result() for m in members)], [type(error), through.asked], turns.waited_in_loop == 1 and turns.passed_on == 0

    states, error, counted = asyncio.run(run())
    assert states == [True, True, True, PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK]
    assert error == [OSError, [200]]
    assert counted


def test_a_flush_past_the_loops_wait_is_answered_through_the_relay() -> None:
    # The flush outlasts the loop's own wait: the loop goes on (the member still pending), the flush thread's
    # outcome arrives through the relay; a group whose flush never ends gets None at its deadline, shortened by
    # the loop's wait.
    async def run() -> tuple[list[object], float, bool]:
        loop = asyncio.get_running_loop()
        through = Through()
        turns = DurableTurns(through, CompletionRelay(loop), 10.0, loop_wait_s=0.02)
        member = turns.wait(100)
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the loop's wait, past its 20 ms
        pending = not member.done()
        threading.Thread(target=through.futures[0].set_result, args=(PutMessageStatus.PUT_OK,)).start()
        outcome = await member
        stalled = DurableTurns(Through(), CompletionRelay(loop), 0.5, loop_wait_s=0.4)
        started = time.monotonic()
        late = await stalled.wait(200)
        return [pending, outcome, late], time.monotonic() - started, turns.passed_on == 1 and turns.waited_in_loop == 0

    outcomes, took_s, counted = asyncio.run(run())
    assert outcomes == [True, PutMessageStatus.PUT_OK, None]
    assert 0.45 <= took_s < 0.85  # the deadline (0.5 s) from the group's close, not 0.4 + 0.5
    assert counted


class FlushedBy(Through):
    """The store's side of a group's wait whose flush thread completes each future with `complete`, shortly after."""

    def __init__(self, complete: Callable[[concurrent.futures.Future[PutMessageStatus]], None]) -> None:
        super().__init__()
        self.complete = complete

    def __call__(self, offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        future = super().__call__(offset)
        assert future is not None
        threading.Timer(0.01, self.complete, args=(future,)).start()
        return future


def flushed_ok() -> FlushedBy:
    """A store side whose flushes all succeed, each 10 ms after it is asked."""
    return FlushedBy(lambda future: future.set_result(PutMessageStatus.PUT_OK))


async def turn_ends() -> None:
    """The turn ends (its group closes or starts to linger), then the hop after it (the flush asked and waited for)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def test_a_group_smaller_than_the_last_lingers_until_it_is_as_large() -> None:
    # Three puts answered within the loop's wait make the next group's siblings: a group of one at its turn's end
    # stays open (nothing asked), a later turn's held replies (a lane's batch: one hold, one reach) bring it to
    # three, and it closes at that turn's end, one flush through the highest end for all of them.
    async def run() -> tuple[list[int], list[int], list[object], list[int]]:
        loop = asyncio.get_running_loop()
        through = flushed_ok()
        turns = DurableTurns(through, CompletionRelay(loop), 10.0, loop_wait_s=5.0, linger_s=5.0)
        first = [turns.wait(end) for end in (100, 300, 200)]
        await turn_ends()
        asked_first = list(through.asked)
        alone = turns.wait(400)
        await turn_ends()
        await asyncio.sleep(0.05)  # later turns, with nothing joining: still open, nothing asked
        lingering = list(through.asked)
        batch = Recorded()
        token = turns.hold(600, batch)
        reached = turns.reach(500, token)
        await turn_ends()
        outcomes: list[object] = [m.result() for m in first]
        outcomes += [alone.result(), batch.outcomes, reached]
        return asked_first, lingering + through.asked, outcomes, [turns.groups, turns.lingered, turns.lingered_short]

    asked_first, asked, outcomes, counts = asyncio.run(run())
    assert asked_first == [300]
    assert asked == [300, 300, 600]  # nothing asked while the group lingered; then one flush through 600
    ok = PutMessageStatus.PUT_OK
    assert outcomes == [ok, ok, ok, ok, [(ok, None)], True]
    assert counts == [2, 1, 0]


def test_a_lingering_group_closes_at_the_linger_end_and_the_next_one_follows_it() -> None:
    # Two puts answered together, then one alone: it waits the linger (50 ms) for a sibling that never comes, is
    # answered, and becomes the siblings of the next group, which is as large at once and does not linger.
    async def run() -> tuple[float, float, list[int]]:
        turns = DurableTurns(flushed_ok(), CompletionRelay(asyncio.get_running_loop()), 10.0, loop_wait_s=5.0, linger_s=0.05)
        await asyncio.gather(turns.wait(100), turns.wait(200))
        started = time.monotonic()
        assert await turns.wait(300) is PutMessageStatus.PUT_OK
        alone_s = time.monotonic() - started
        started = time.monotonic()
        assert await turns.wait(400) is PutMessageStatus.PUT_OK
        return alone_s, time.monotonic() - started, [turns.groups, turns.lingered, turns.lingered_short]

    alone_s, next_s, counts = asyncio.run(run())
    assert alone_s >= 0.049  # a timer may end the linger a clock tick early
    assert counts == [3, 1, 1]
    assert next_s < alone_s  # no linger: the flush's 10 ms, not the linger's 50 as well


def test_only_a_group_answered_within_the_loops_wait_makes_siblings() -> None:
    # A group passed on to the relay (its flush outlasted the loop's wait) was still waiting while the next group
    # formed: the next group does not linger for it. Without the loop's wait no group ever lingers.
    async def run() -> list[int]:
        loop = asyncio.get_running_loop()
        slow = FlushedBy(lambda future: future.set_result(PutMessageStatus.PUT_OK))
        passed = DurableTurns(slow, CompletionRelay(loop), 10.0, loop_wait_s=0.001, linger_s=5.0)
        await asyncio.gather(*(passed.wait(end) for end in (100, 200, 300)))  # the flush's 10 ms: past the 1 ms wait
        await passed.wait(400)
        handed = DurableTurns(flushed_ok(), CompletionRelay(loop), 10.0, loop_wait_s=0.0, linger_s=5.0)
        await asyncio.gather(*(handed.wait(end) for end in (100, 200, 300)))
        await handed.wait(400)
        return [passed.groups, passed.passed_on, passed.lingered, handed.groups, handed.lingered]

    assert asyncio.run(run()) == [2, 2, 0, 2, 0]


@pytest.mark.parametrize("wait_in_loop_ms", [0, 20])
def test_concurrent_durable_produces_share_a_group_commit(tmp_path: Path, wait_in_loop_ms: int) -> None:
    """A real store under SYNC_FLUSH: twenty produces started in one turn are answered 201 after one wait,
    each with its own offsets, and the flushed offset passes all of them; with the loop's own wait on, the
    group is answered within it."""
    config = MessageStoreConfig(
        mapped_file_size_commit_log_bytes=1 << 20, max_message_size_bytes=1 << 16, flush_disk_type=FlushDiskType.SYNC_FLUSH
    )
    settings = BrokerSettings(store_dir=str(tmp_path / "store"), store=config, durable_wait_in_loop_ms=wait_in_loop_ms)
    app = create_app(settings.validate())
    broker, entry = app.state.broker, app.state.entry

    async def produce(i: int) -> dict[str, object]:
        body = json.dumps({"body": f"durable-{i}", "queue_id": 0}).encode()
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {
            "type": "http", "method": "POST", "path": "/v1/topics/d/messages", "raw_path": b"/v1/topics/d/messages",
            "query_string": b"", "headers": [(b"host", b"app"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "scheme": "http", "http_version": "1.1", "root_path": "",
        }  # fmt: skip
        await entry(scope, receive, send)
        assert sent[0]["status"] == 201, sent
        reply_body = sent[1]["body"]
        assert isinstance(reply_body, bytes), sent
        reply: dict[str, object] = json.loads(reply_body)
        return reply

    async def walk() -> None:
        await broker.start()
        try:
            broker.store.create_or_update_topic("d", 1)
            producer = entry.produce.__self__  # the handler's Producer
            replies = await asyncio.gather(*(produce(i) for i in range(20)))
            assert sorted(offset_of(r, "queue_offset") for r in replies) == list(range(20))
            assert producer.turns.members == 20 and producer.turns.groups == 1
            # A test machine's flush can outlast 20 ms: then the relay answered (passed_on), never both.
            assert producer.turns.waited_in_loop + producer.turns.passed_on == (1 if wait_in_loop_ms else 0)
            flushed = broker.store.commit_log.flushed_where()
            assert all(flushed > offset_of(r, "commitlog_offset") for r in replies)
        finally:
            await broker.stop()

    asyncio.run(walk())
