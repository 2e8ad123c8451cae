"""DurableTurns: the durable produces of one event-loop turn wait on one flush (and slave) future.

Under SYNC_FLUSH, or on a SYNC_MASTER, a produce is answered once its bytes are flushed (and held
by a slave). Waited for put by put, that is a group-commit request, a future made and completed
on the flush thread, its hand-off to the loop and a deadline timer for every put, and under load
many produces are served in one loop turn. So a produce puts with `defer_durability` and, when its
result says the wait is owed, joins the turn's group (`wait`): at the end of the turn the group
asks the store for one future through the highest end offset of its puts (`durable_through`),
hands it to the loop through the CompletionRelay, and completes each member's own future with the
status; one deadline timer per group. A produce the connection serves itself joins with its held reply
instead of a future (`hold`, app.held_reply), settled with the same outcome; the produce lane joins its turn's held
replies as one member (`hold` for the first, `reach` for the others while the group is open).

With `loop_wait_s` (the broker's durable_wait_in_loop_ms) the loop then waits for the group's future itself, at
most that long, before it serves anything more, as Redis's `appendfsync always` flushes in its event loop: the
produces that arrive meanwhile form the next group, one group is one flush, and a flush ends without a hand-off to the
loop (no relay, no timer; the flush thread takes the GIL without contending with the loop). The group asks for
its flush one callback hop after the turn, so the requests the turn's dispatch woke are answered first. A
group whose flush takes longer goes on the relay's way, its deadline shortened by the wait.

With `linger_s` as well (the broker's durable_group_linger_us), a group smaller at its turn's end than the last
group the loop answered itself stays open for the produces of the next turns, until it is as large or `linger_s`
has passed (PostgreSQL's commit_delay, its siblings counted by the last group): producers answered together send
their next puts over the following few hundred microseconds, and without it the first turn after an answer finds a
few of them, flushes for those, and the rest form another group. One flush then serves them all, its cost (a disk
request, a wake-up, a turn's fixed work) shared by twice as many; a put waits at most `linger_s` longer. Only a
group answered within the loop's wait counts as siblings: one passed on to the relay was still waiting while the
next group formed, and a group never waits for its own members.

Invariants: every member's future completes (PUT_OK, the status of the wait not confirmed, or None
when the deadline passed first) unless it was cancelled, and a member cancelled (its client went
away, the server stops) cancels only its own; every held reply is settled with that outcome, once;
the group's offset is at least each member's end, so the group's PUT_OK is each put's. Runs on the
event loop only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from functools import partial
from typing import Protocol

from app.completion_relay import CompletionRelay
from store import PutMessageStatus

# The store's one future for the log up to an offset (DefaultMessageStore.durable_through); None: nothing to wait for.
DurableThrough = Callable[[int], "concurrent.futures.Future[PutMessageStatus] | None"]


class Settled(Protocol):
    """A held reply (app.held_reply, app.produce_lane): told its group's outcome once it is known."""

    def settle(self, status: PutMessageStatus | None, exc: BaseException | None) -> None: ...


# A member's outcome: PUT_OK, the status not confirmed, or None when the deadline passed first.
Outcome = asyncio.Future["PutMessageStatus | None"]


class _Group:
    __slots__ = ("end", "members", "held", "size", "deadline")

    def __init__(self) -> None:
        self.end = 0  # the highest end offset of the group's puts
        self.members: list[Outcome] = []
        self.held: list[Settled] = []
        self.size = 0  # the puts joined (a produce lane's batch of held replies is one `held`, each of its puts counted)
        self.deadline: asyncio.TimerHandle | None = None  # while it lingers: its close at the linger's end


class DurableTurns:
    __slots__ = (
        "_through", "_relay", "_loop", "_wait_s", "_loop_wait_s", "_linger_s", "_siblings", "_open", "groups", "members",
        "waited_in_loop", "passed_on", "lingered", "lingered_short",
    )  # fmt: skip

    def __init__(
        self, through: DurableThrough, relay: CompletionRelay, wait_s: float, loop_wait_s: float = 0.0, linger_s: float = 0.0
    ) -> None:
        assert 0.0 <= loop_wait_s < wait_s, "the loop waits less than a group's deadline"
        assert 0.0 <= linger_s < wait_s, "a group lingers less than its deadline"
        self._through = through
        self._relay = relay
        # The relay's loop, which runs every call here: kept, because asyncio.get_running_loop() makes a getpid()
        # system call each time (CPython 3.11 checks for a fork), and `hold` runs for every durable produce.
        self._loop = relay.loop
        self._wait_s = wait_s  # a group's deadline: its members get None past it
        self._loop_wait_s = loop_wait_s  # how long the loop waits for a group's future itself; 0: never
        self._linger_s = linger_s  # how long a group smaller than its siblings stays open past its turn; 0: never
        self._siblings = 0  # the size of the last group answered within the loop's wait; 0 after one that was not
        self._open: _Group | None = None  # the group of this turn, closed at its end (or, lingering, later)
        self.groups = 0  # groups closed (tests and benchmarks: members per group)
        self.members = 0  # members joined
        self.waited_in_loop = 0  # groups answered within the loop's own wait
        self.passed_on = 0  # groups whose flush outlasted the loop's wait (answered through the relay)
        self.lingered = 0  # groups kept open past their turn for their siblings
        self.lingered_short = 0  # of them, closed at the linger's end still smaller than their siblings

    def wait(self, end: int) -> Outcome:
        """The outcome of the durability wait of a put ending at commitlog `end`, shared with the turn's other puts."""
        group = self._joined(end)
        member: Outcome = self._loop.create_future()
        group.members.append(member)
        return member

    def hold(self, end: int, held: Settled) -> object:
        """`held` settled with the outcome of the durability wait of a put ending at commitlog `end` (`wait`'s); the
        group joined, for `reach` (an opaque token)."""
        group = self._joined(end)
        group.held.append(held)
        return group

    def reach(self, end: int, group: object) -> bool:
        """Join another put ending at commitlog `end` to `group` (a token `hold` answered) while it is this turn's
        open group: its settled member is told the outcome through `end` too (the produce lane's batch of held
        replies, app.produce_lane). False, nothing joined, when that group has closed."""
        joined = self._open
        if joined is not group or joined is None:
            return False
        if end > joined.end:
            joined.end = end
        self.members += 1
        joined.size += 1
        if joined.deadline is not None and joined.size >= self._siblings:
            self._filled(joined)
        return True

    def _joined(self, end: int) -> _Group:
        group = self._open
        if group is None:
            group = self._open = _Group()
            self._loop.call_soon(self._turn_ended, group)
        if end > group.end:
            group.end = end
        self.members += 1
        group.size += 1
        if group.deadline is not None and group.size >= self._siblings:
            self._filled(group)
        return group

    def _turn_ended(self, group: _Group) -> None:
        """The end of the turn that opened `group`: closed now, or kept open up to `linger_s` while it is smaller
        than its siblings (the last group answered within the loop's wait)."""
        if self._linger_s and group.size < self._siblings:
            self.lingered += 1
            group.deadline = self._loop.call_later(self._linger_s, self._lingered_out, group)
            return
        self._close()

    def _filled(self, group: _Group) -> None:
        """A lingering group as large as its siblings: closed at the end of this turn (its other puts join it)."""
        deadline, group.deadline = group.deadline, None
        assert deadline is not None
        deadline.cancel()
        self._loop.call_soon(self._close)

    def _lingered_out(self, group: _Group) -> None:
        assert group is self._open, "a lingering group is closed by its deadline or when filled, once"
        group.deadline = None
        self.lingered_short += 1
        self._close()

    def _close(self) -> None:
        group, self._open = self._open, None
        assert group is not None and group.deadline is None, "a group is closed once, by its turn's end, its linger or its filling"
        self.groups += 1
        if self._loop_wait_s:
            # One hop later: what this turn's dispatch woke (held pulls and receives answer in those callbacks) is
            # answered before the loop waits, and the flush starts as the loop stops, not contending with it.
            self._loop.call_soon(self._ask, group)
            return
        self._ask(group)

    def _ask(self, group: _Group) -> None:
        """Ask the store for the group's wait; completed at once, within the loop's own wait, or through the relay."""
        self._siblings = 0  # unless the loop answers the group within its wait, below
        try:
            future = self._through(group.end)
        except Exception as exc:  # the store could not queue the wait: every member gets the error
            _complete(group, None, exc)
            return
        if future is None:  # puts are answered at once now (the broker's role changed)
            _complete(group, PutMessageStatus.PUT_OK, None)
            return
        wait_s = self._wait_s
        if self._loop_wait_s:
            outcome = _waited(future, self._loop_wait_s)
            if outcome is not None:
                self.waited_in_loop += 1
                self._siblings = group.size  # answered now: their next puts make the next group
                _complete(group, *outcome)
                return
            self.passed_on += 1
            wait_s -= self._loop_wait_s
        self._relayed(group, future, wait_s)

    def _relayed(self, group: _Group, future: concurrent.futures.Future[PutMessageStatus], wait_s: float) -> None:
        """The group completed through the relay when `future` is done, or with None past `wait_s`."""
        shared = self._relay.watch(future)
        # At the deadline the relay's future is cancelled, not the store's: its flush thread still completes it.
        deadline = self._loop.call_later(wait_s, shared.cancel)
        shared.add_done_callback(partial(_delivered, group, deadline))


def _waited(
    future: concurrent.futures.Future[PutMessageStatus], timeout_s: float
) -> tuple[PutMessageStatus | None, BaseException | None] | None:
    """The future's outcome (status, exception) when it completes within `timeout_s`, the loop blocked meanwhile
    (the GIL released: the flush thread runs); None when it does not."""
    try:
        return future.result(timeout_s), None
    except TimeoutError:  # concurrent.futures.TimeoutError (the same class)
        return None
    except Exception as exc:  # the store's wait failed: every member gets the error, as through the relay
        return None, exc


def _delivered(group: _Group, deadline: asyncio.TimerHandle, shared: asyncio.Future[PutMessageStatus]) -> None:
    deadline.cancel()
    if shared.cancelled():
        _complete(group, None, None)
        return
    exc = shared.exception()
    _complete(group, None if exc is not None else shared.result(), exc)


def _complete(group: _Group, status: PutMessageStatus | None, exc: BaseException | None) -> None:
    for member in group.members:
        if member.done():
            continue  # cancelled with its request
        if exc is not None:
            member.set_exception(exc)
        else:
            member.set_result(status)
    for held in group.held:
        held.settle(status, exc)
