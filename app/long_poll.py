"""The registry of held pulls (long polling), the topics event streams watch, and their bridge from
the store's dispatching threads.

Invariants:
- A held pull is one asyncio future in `_waiters[(topic, queue_id)]`; no thread per pull.
- The arriving listener runs on the thread that dispatched (a putting thread, or the store's
  ReputMessageService thread), once per queue a dispatch pass extended, under the store's
  dispatch lock. On the event loop's own thread (an HTTP put's inline dispatch: the common case)
  it completes the matching waiters' futures at once, so a held request runs in the same loop
  turn as the put that woke it. On any other thread it does no more than a dict look-up under a
  short lock and, at most once per queue until the loop has run it, `loop.call_soon_threadsafe`:
  wake-ups are coalesced per queue.
- A waiter with a tag filter is only woken by messages whose tags codes it accepts; the
  codes seen while a wake-up is pending are collected (up to `MAX_PENDING_CODES`, past
  which every waiter of the queue is woken, which is always safe: waiters re-check). The
  store passes None for the codes when a pass added more distinct codes than it lists: then
  every waiter of the queue is woken too.
- The number of held pulls never exceeds `max_held`; `register` answers None past it.
- After `close()` nothing is held: every waiter is woken and `register` answers None.
- A pull that takes every message is held at its queue offset (`Waiter.offset`), and a produce whose
  put lane stored messages from there on the loop's thread (app.produce_lane, app.routes_produce
  `put_lane`) wakes it with them (`deliver`) before the dispatch pass: the pull reads them by their
  commitlog offsets and answers before the pass runs, which the pass's place in the same loop turn
  keeps safe (app.reply_transport `write_now`).
- A held request waits on one future (`wait_held`): an arrival, the client going away (the
  connection's future under `LOST_KEY`, app.connections), an ACL revocation or the deadline
  completes it with the `Wake` that says which; no task or `asyncio.wait` per held request.
- Event streams do not hold pulls: they watch whole topics (`watch`, counted per topic, never in
  `max_held`), and an arrival in a watched topic calls `on_topic_arrival(topic, codes)` on the
  loop, coalesced per topic as the queues' wake-ups are (app.stream_registry decides whom to wake).
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from starlette.types import Receive, Scope

# Distinct tags codes remembered per queue between two wake-ups before waking everyone.
MAX_PENDING_CODES = 64
# The scope key of a callable the connection (app.connections) offers: it returns a future completed when the client goes away.
LOST_KEY = "tidemq.connection_lost"


class Wake(enum.Enum):
    """Why a held request's future completed."""

    ARRIVED = "arrived"  # a matching message arrived, or the registry closed (the caller checks `closed`)
    GONE = "gone"  # the client went away
    REVOKED = "revoked"  # an ACL reload took the request's access away
    DEADLINE = "deadline"  # its wait ended


def _complete(future: asyncio.Future[Wake], why: Wake, *_source: object) -> None:
    if not future.done():
        future.set_result(why)


async def wait_held(future: asyncio.Future[Wake], timeout_s: float, gone: asyncio.Future[Any], revoked: asyncio.Future[Any] | None) -> Wake:
    """Wait until `future` completes: by an arrival (HeldPulls), `gone`, `revoked` or `timeout_s` passing."""
    loop = future.get_loop()  # the running loop's (the caller awaits it), without get_running_loop()'s getpid()
    timer = loop.call_later(timeout_s, _complete, future, Wake.DEADLINE)
    links: list[tuple[asyncio.Future[Any], Callable[..., None]]] = []
    for source, why in ((gone, Wake.GONE), (revoked, Wake.REVOKED)):
        if source is None:
            continue
        if source.done():
            _complete(future, why)
            break
        relay = partial(_complete, future, why)
        source.add_done_callback(relay)
        links.append((source, relay))
    try:
        return await future
    finally:
        timer.cancel()
        for source, link in links:
            source.remove_done_callback(link)


class Departure:
    """A future completed when a request's client goes away: the connection's (LOST_KEY), else a task
    reading the request's ASGI messages until `http.disconnect` (an app served without app.connections)."""

    __slots__ = ("future", "_task")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        offer = scope.get(LOST_KEY)
        self._task: asyncio.Task[None] | None = None
        if offer is not None:
            self.future: asyncio.Future[Any] = offer()
        else:
            self._task = asyncio.ensure_future(_disconnected(receive))
            self.future = self._task

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def _disconnected(receive: Receive) -> None:
    """Return when the client has gone away (an ASGI http.disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class Waiter:
    """One held pull: its future, the tags codes it accepts (None = every message) and, for a pull that takes every
    message, the queue offset it waits at (`offset`, -1 otherwise), where the put that stores that offset's message
    may answer it (`delivery`: the put's messages' commitlog offsets and sizes, set with its future's result)."""

    __slots__ = ("key", "codes", "future", "offset", "delivery")

    def __init__(self, key: tuple[str, int], codes: frozenset[int] | None, future: asyncio.Future[Wake], offset: int = -1) -> None:
        self.key = key
        self.codes = codes
        self.future = future
        self.offset = offset
        self.delivery: list[tuple[int, int]] | None = None


class HeldPulls:
    def __init__(self, max_held: int) -> None:
        self.max_held = max_held
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0  # the thread running the loop (set by bind, which runs on it)
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, int], set[Waiter]] = {}
        # Queues with a wake-up scheduled on the loop -> tags codes seen (None = wake all).
        self._pending: dict[tuple[str, int], set[int] | None] = {}
        self._count = 0
        self._closed = False
        self.woken_total = 0
        self.delivered_total = 0  # of them, woken by the put of their message (`deliver`)
        self.refused_total = 0
        # Topics event streams watch -> their watches; read without the lock by the dispatching threads.
        self._watched: dict[str, int] = {}
        # Watched topics with an arrival scheduled on the loop -> tags codes seen (None = any).
        self._pending_topics: dict[str, set[int] | None] = {}
        # Told on the loop of arrivals in watched topics (set by app.stream_registry).
        self.on_topic_arrival: Callable[[str, set[int] | None], None] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop whose waiters this serves (`bind`); the running one before it is bound. Read by the held
        requests instead of asyncio.get_running_loop(), which makes a getpid() system call each time."""
        return self._loop if self._loop is not None else asyncio.get_running_loop()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve waiters of `loop`; called on the loop's thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._closed = False

    @property
    def held(self) -> int:
        return self._count

    @property
    def closed(self) -> bool:
        return self._closed

    # Loop side -------------------------------------------------------------------

    def register(
        self, topic: str, queue_id: int, codes: frozenset[int] | None, future: asyncio.Future[Wake] | None = None, offset: int = -1
    ) -> Waiter | None:
        """Hold a pull (on `future`, which several registrations of one request may share; a new one
        when None); None when closed or at the bound (the caller answers at once). `offset`: the queue offset a pull
        that takes every message waits at, for `deliver` (-1: woken by the dispatch pass only)."""
        assert self._loop is not None, "bind() first"
        if self._closed or self._count >= self.max_held:
            self.refused_total += 1
            return None
        key = (topic, queue_id)
        waiter = Waiter(key, codes, future if future is not None else self._loop.create_future(), offset)
        with self._lock:
            self._waiters.setdefault(key, set()).add(waiter)
            self._count += 1
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._waiters.get(waiter.key)
            if waiters is not None and waiter in waiters:
                waiters.discard(waiter)
                self._count -= 1
                if not waiters:
                    del self._waiters[waiter.key]

    def watch(self, topic: str) -> None:
        """Report arrivals in `topic` to `on_topic_arrival` (until as many `unwatch` calls)."""
        with self._lock:
            self._watched[topic] = self._watched.get(topic, 0) + 1

    def unwatch(self, topic: str) -> None:
        with self._lock:
            left = self._watched.get(topic, 0) - 1
            if left > 0:
                self._watched[topic] = left
            else:
                self._watched.pop(topic, None)

    def close(self) -> None:
        """Wake every held pull and hold no more (shutdown)."""
        self._closed = True
        with self._lock:
            everyone = [w for ws in self._waiters.values() for w in ws]
        for waiter in everyone:
            if not waiter.future.done():
                waiter.future.set_result(Wake.ARRIVED)

    def waits_on(self, key: tuple[str, int]) -> bool:
        """Whether a pull is held on the queue `key` (a dict look-up, no lock: read on the loop, where it changes)."""
        return key in self._waiters

    def deliver(self, key: tuple[str, int], queue_offset: int, delivery: list[tuple[int, int]]) -> int:
        """A put on the loop's thread has just stored messages from `queue_offset` of the queue `key` (`delivery`: their
        commitlog offsets and sizes) and its dispatch pass is still to run: the pulls held there at that offset that
        take every message are woken with them (`Waiter.delivery`: each reads them by their commitlog offsets, not
        through the consume queue, and answers before the pass). The others wait for the pass. Answers how many were
        woken."""
        assert threading.get_ident() == self._loop_thread, "on the loop: the waiters change there"
        delivered = 0
        for waiter in self._waiters.get(key, ()):
            if waiter.offset == queue_offset and not waiter.future.done():
                waiter.delivery = delivery
                waiter.future.set_result(Wake.ARRIVED)
                delivered += 1
        self.woken_total += delivered
        self.delivered_total += delivered
        return delivered

    def _wake(self, key: tuple[str, int]) -> None:
        with self._lock:
            codes = self._pending.pop(key, None)
            waiters = list(self._waiters.get(key, ()))
        self._wake_waiters(waiters, codes)

    def _wake_waiters(self, waiters: list[Waiter], codes: set[int] | tuple[int, ...] | None) -> None:
        """Complete the futures of `waiters` that accept one of `codes` (None: every one); on the loop."""
        for waiter in waiters:
            if waiter.future.done():
                continue
            if waiter.codes is None or codes is None or not waiter.codes.isdisjoint(codes):
                waiter.future.set_result(Wake.ARRIVED)
                self.woken_total += 1

    def _arrived_in_topic(self, topic: str) -> None:
        with self._lock:
            codes = self._pending_topics.pop(topic, None)
        listener = self.on_topic_arrival
        if listener is not None and not self._closed:
            listener(topic, codes)

    # Dispatching-thread side -------------------------------------------------------------

    def on_message_arriving(self, topic: str, queue_id: int, logic_offset_after: int, tags_codes: tuple[int, ...] | None) -> None:
        """The store's arriving listener: runs on the dispatching thread, never blocks."""
        key = (topic, queue_id)
        if topic in self._watched:  # an event stream reads the topic
            self._note_topic(topic, tags_codes)
        if key not in self._waiters:  # the common case with no held pull: no lock taken
            return
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:  # an HTTP put's inline dispatch: wake now, in this loop turn
            with self._lock:
                woken = list(self._waiters.get(key, ()))
            many = tags_codes is None or len(tags_codes) > MAX_PENDING_CODES
            self._wake_waiters(woken, None if many else tags_codes)
            return
        with self._lock:
            waiters = self._waiters.get(key)
            if not waiters:
                return
            if key in self._pending:
                codes = self._pending[key]
                if codes is not None:
                    if tags_codes is None:
                        self._pending[key] = None
                    else:
                        codes.update(tags_codes)
                        if len(codes) > MAX_PENDING_CODES:
                            self._pending[key] = None
                return
            self._pending[key] = None if tags_codes is None or len(tags_codes) > MAX_PENDING_CODES else set(tags_codes)
        try:
            loop.call_soon_threadsafe(self._wake, key)
        except RuntimeError:  # the loop is closed: shutting down, nobody left to wake
            with self._lock:
                self._pending.pop(key, None)

    def _note_topic(self, topic: str, tags_codes: tuple[int, ...] | None) -> None:
        """Schedule `_arrived_in_topic` on the loop once per topic until it runs, collecting the codes seen."""
        loop = self._loop
        if loop is None:
            return
        with self._lock:
            if topic in self._pending_topics:
                codes = self._pending_topics[topic]
                if codes is not None:
                    if tags_codes is None or len(codes) + len(tags_codes) > MAX_PENDING_CODES:
                        self._pending_topics[topic] = None
                    else:
                        codes.update(tags_codes)
                return
            many = tags_codes is None or len(tags_codes) > MAX_PENDING_CODES
            self._pending_topics[topic] = None if many else set(tags_codes or ())
        try:
            if threading.get_ident() == self._loop_thread:
                loop.call_soon(self._arrived_in_topic, topic)  # on the loop: no wake-up of the loop needed
            else:
                loop.call_soon_threadsafe(self._arrived_in_topic, topic)
        except RuntimeError:  # the loop is closed: shutting down, nobody left to wake
            with self._lock:
                self._pending_topics.pop(topic, None)
