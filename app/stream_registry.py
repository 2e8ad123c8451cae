"""The open event streams (group consumption's /stream): their bounds, who is woken by an arrival, and
which stream holds which receipt handle.

Invariants (all on the event loop, so no lock):
- At most `max_streams` streams are open, and at most `max_streams_per_account` of one ACL account;
  `open` refuses past them (TOO_MANY_STREAMS) before the stream's 200 is sent. Streams hold no
  pull in `HeldPulls`: they never use up the long-poll budget.
- Streams of one group reading one topic form a `StreamPool`; a message goes to one of them, so an
  arrival in the topic (or the group's retry topic) wakes one idle stream of each pool whose tag
  filter takes it, not all of them. When none is idle the pool notes it (`missed`) and the next
  stream about to wait reads again instead. A stream that took a full batch and has no room left
  wakes the next one. A pool with idle streams also wakes one every `recheck_ms` (a FIFO group's
  queue frees up on an ack or an invisible time ending, which no arrival announces).
- At most `max_stream_reads` stream reads (receives) run at once (`reads`): the other streams wait
  their turn instead of filling the read pool's queue (READS_BUSY) or its threads.
- A handle is in `_owner` exactly while its stream counts it as unacked: acked, expired (its
  invisible time ended) or its stream closed, it is dropped, so a never-acking stream holds at
  most `max_in_flight` handles.
- `end` makes a stream finish with a final event saying why (the topic was deleted, the access
  was revoked, the broker stops); `close` (always called once its response ends) frees its slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from app.long_poll import HeldPulls
from app.problems import ProblemError
from store import Popped, retry_topic


@dataclass(eq=False, slots=True)
class Stream:
    """One open stream: its receive's identity, its unacked messages (handle -> invisible until, ms)
    and its wake-up."""

    group: str
    topic: str
    codes: frozenset[int] | None  # the tag filter's codes; None takes every message
    max_in_flight: int
    account: str | None  # the ACL account's name; None without an ACL
    pool: StreamPool
    unacked: dict[str, int] = field(default_factory=dict)
    look: bool = True  # messages may be visible to it: read before waiting
    ending: tuple[str, str] | None = None  # (code, detail) the stream ends with
    closed: bool = False
    woken: asyncio.Future[None] | None = None

    def wake(self) -> None:
        if self.woken is not None and not self.woken.done():
            self.woken.set_result(None)

    def takes(self, codes: set[int] | None) -> bool:
        return self.codes is None or codes is None or not self.codes.isdisjoint(codes)


@dataclass(eq=False, slots=True)
class StreamPool:
    """The streams of one group reading one topic; `idle` are those waiting with room, oldest first."""

    group: str
    topic: str
    streams: int = 0
    idle: dict[Stream, None] = field(default_factory=dict)
    missed: bool = False
    recheck: asyncio.TimerHandle | None = None

    def wake_one(self, codes: set[int] | None) -> None:
        """Wake the longest-idle stream that takes `codes`; with none, note the miss."""
        for stream in self.idle:
            if stream.takes(codes):
                del self.idle[stream]
                stream.look = True
                stream.wake()
                return
        self.missed = True


class StreamRegistry:
    def __init__(self, held: HeldPulls, max_streams: int, max_per_account: int, max_reads: int, recheck_ms: Callable[[str], int]) -> None:
        self.held = held
        self.max_streams = max_streams
        self.max_per_account = max_per_account
        self.reads = asyncio.Semaphore(max_reads)
        self.recheck_ms = recheck_ms  # group -> how often a pool of it wakes an idle stream unprompted
        self._streams: set[Stream] = set()
        self._per_account: dict[str, int] = {}
        self._pools: dict[tuple[str, str], StreamPool] = {}
        self._by_topic: dict[str, set[StreamPool]] = {}  # the topic and the retry topic -> pools reading them
        self._owner: dict[str, Stream] = {}
        self.opened_total = 0
        self.refused_total = 0
        held.on_topic_arrival = self.arrived

    @property
    def open_count(self) -> int:
        return len(self._streams)

    @property
    def handles(self) -> int:
        return len(self._owner)

    def open(self, group: str, topic: str, codes: frozenset[int] | None, max_in_flight: int, account: str | None) -> Stream:
        """A new stream; TOO_MANY_STREAMS past `max_streams`, or past `max_streams_per_account` for its account."""
        if len(self._streams) >= self.max_streams:
            self.refused_total += 1
            raise ProblemError("TOO_MANY_STREAMS", f"{len(self._streams)} event streams are open, the most this broker holds")
        if account is not None and self._per_account.get(account, 0) >= self.max_per_account:
            self.refused_total += 1
            raise ProblemError("TOO_MANY_STREAMS", f"account {account!r} has {self.max_per_account} event streams open already")
        pool = self._pools.get((group, topic))
        if pool is None:
            pool = self._pools[(group, topic)] = StreamPool(group, topic)
            for name in (topic, retry_topic(group, topic)):
                self._by_topic.setdefault(name, set()).add(pool)
                self.held.watch(name)
        pool.streams += 1
        stream = Stream(group, topic, codes, max_in_flight, account, pool)
        self._streams.add(stream)
        if account is not None:
            self._per_account[account] = self._per_account.get(account, 0) + 1
        self.opened_total += 1
        return stream

    def close(self, stream: Stream) -> None:
        """Free the stream's slot and forget its handles (once; its unacked messages come back after their invisible time)."""
        if stream.closed:
            return
        stream.closed = True
        self._streams.discard(stream)
        if stream.account is not None:
            left = self._per_account[stream.account] - 1
            if left:
                self._per_account[stream.account] = left
            else:
                del self._per_account[stream.account]
        for handle in stream.unacked:
            self._owner.pop(handle, None)
        stream.unacked.clear()
        pool = stream.pool
        pool.idle.pop(stream, None)
        pool.streams -= 1
        if pool.streams == 0:
            del self._pools[(pool.group, pool.topic)]
            if pool.recheck is not None:
                pool.recheck.cancel()
            for name in (pool.topic, retry_topic(pool.group, pool.topic)):
                pools = self._by_topic[name]
                pools.discard(pool)
                if not pools:
                    del self._by_topic[name]
                self.held.unwatch(name)

    # Messages -----------------------------------------------------------------------

    def arrived(self, topic: str, codes: set[int] | None) -> None:
        """Messages arrived in `topic` (HeldPulls, on the loop): one idle stream of each pool reading it looks."""
        for pool in self._by_topic.get(topic, ()):
            pool.wake_one(codes)

    def delivered(self, stream: Stream, popped: list[Popped], full: bool) -> None:
        """`popped` went out on `stream`; `full`: the read filled its batch, so more may be visible."""
        for p in popped:
            stream.unacked[p.handle] = p.invisible_until_ms
            self._owner[p.handle] = stream
        if full:
            if len(stream.unacked) < stream.max_in_flight:
                stream.look = True
            else:
                stream.pool.wake_one(None)  # no room here: the next stream reads on

    def acked(self, handles: list[str]) -> None:
        for handle in handles:
            stream = self._owner.pop(handle, None)
            if stream is not None and stream.unacked.pop(handle, None) is not None:
                stream.look = True  # room again
                stream.wake()

    def expire(self, stream: Stream, now_ms: int) -> int | None:
        """Forget the stream's messages whose invisible time ended (they will be delivered again); the next such time, or None."""
        expired = [h for h, until in stream.unacked.items() if until <= now_ms]
        for handle in expired:
            del stream.unacked[handle]
            self._owner.pop(handle, None)
        if expired:
            stream.look = True
        return min(stream.unacked.values(), default=None)

    async def wait(self, stream: Stream, timeout_s: float) -> None:
        """Until the stream is woken (an arrival while it has room, an ack, its end) or `timeout_s` passes."""
        loop = asyncio.get_running_loop()
        pool = stream.pool
        woken = stream.woken = loop.create_future()
        has_room = len(stream.unacked) < stream.max_in_flight
        if has_room:
            pool.idle[stream] = None
            if pool.recheck is None:
                pool.recheck = loop.call_later(self.recheck_ms(pool.group) / 1000.0, self._recheck, pool)
        timer = loop.call_later(timeout_s, _settle, woken)
        try:
            await woken
        finally:
            timer.cancel()
            stream.woken = None
            pool.idle.pop(stream, None)

    def _recheck(self, pool: StreamPool) -> None:
        pool.recheck = None
        if pool.idle:
            pool.wake_one(None)

    # Endings ------------------------------------------------------------------------

    def end(self, stream: Stream, code: str, detail: str) -> None:
        """Make the stream finish with a final event (code, detail); the first reason stays."""
        if stream.ending is None and not stream.closed:
            stream.ending = (code, detail)
            stream.wake()

    def end_topic(self, topic: str, code: str, detail: str) -> None:
        for stream in [s for s in self._streams if s.topic == topic]:
            self.end(stream, code, detail)

    def end_all(self, code: str, detail: str) -> None:
        for stream in list(self._streams):
            self.end(stream, code, detail)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
