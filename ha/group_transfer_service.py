"""GroupTransferService: holds SYNC_MASTER puts until their bytes are acknowledged.

Two ways of counting acknowledgements:
- any slave (RocketMQ 4, a hand-configured master): a put is acknowledged once one slave
  acknowledged past its end;
- every in-sync member (a cluster's master, RocketMQ 5's allAckInSyncStateSet): a put is
  acknowledged once every broker of `required` (the in-sync set less the master, and the slaves
  joining it) acknowledged past its end, and only while `required` has at least `min_acks`
  members; with nobody required (and `min_acks` 0) a put is acknowledged as it is stored. The
  cluster node changes `required` (`require`, `release`): cluster/in_sync_replicas.py.

The store calls `waiter(end_offset)` for each stored put (MessageStore.set_replication_waiter). The
answer is, in this order:
- None (answer now) when the put is already acknowledged (above);
- any-slave counting only: a done future SLAVE_NOT_AVAILABLE when no slave is streaming or the
  best slave is more than `ha_slave_fall_behind_max_bytes` behind the master's log;
- a done future FLUSH_SLAVE_TIMEOUT when `max_pending_transfers` puts already wait;
- otherwise a future completed PUT_OK once acknowledged (`notify_acked`, `release`), or
  FLUSH_SLAVE_TIMEOUT by this thread after `sync_flush_timeout_ms`.

Invariants: `acked` (the highest end offset acknowledged) only grows; a request is completed
exactly once (the first of the ack path and the deadline path wins, the other sees a done future);
no future is completed while `_lock` is held, so callbacks (which reach the event loop) never run
under it. Requests are kept in arrival order: deadlines are then in order too, and an
acknowledgement completes the prefix it covers (a request queued behind a larger offset waits at
most until that offset is acknowledged, which is when the slave moves on anyway). A broker added to
`required` is counted for every put not acknowledged yet: `require` returns `acked` at that moment,
and once the broker acknowledged it too, it holds every acknowledged put.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

from core import ServiceThread
from store import PutMessageStatus

log = logging.getLogger("tidemq.ha")

# Longest sleep of the deadline loop when nothing waits (a new request never needs an earlier wake).
IDLE_WAIT_MS = 100
# Shortest sleep, so a burst of deadlines is handled in rounds rather than in a spin.
MIN_WAIT_MS = 1


class _Request:
    __slots__ = ("end_offset", "deadline", "future")

    def __init__(self, end_offset: int, deadline: float) -> None:
        self.end_offset = end_offset
        self.deadline = deadline
        self.future: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()


def _done(status: PutMessageStatus) -> concurrent.futures.Future[PutMessageStatus]:
    f: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()
    f.set_result(status)
    return f


def _complete(request: _Request, status: PutMessageStatus) -> None:
    try:
        request.future.set_result(status)
    except concurrent.futures.InvalidStateError:
        pass  # the other path answered first


class GroupTransferService(ServiceThread):
    def __init__(
        self,
        timeout_ms: int,
        max_pending: int,
        slave_ok: Callable[[int], bool],
        on_request: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        min_acks: int | None = None,
    ) -> None:
        super().__init__("GroupTransferService")
        self.timeout_ms = timeout_ms
        self.max_pending = max_pending
        self.slave_ok = slave_ok  # (end_offset) -> a slave streams and is close enough
        self.on_request = on_request  # wakes the connection writers: new bytes wait to be sent
        self.clock = clock
        self.acked = -1
        # Every-in-sync-member counting (`min_acks` None: any slave): the brokers whose acknowledgement each
        # put needs, at least `min_acks` of them, and the offset each acknowledged on its latest connection.
        self.required: frozenset[str] | None = frozenset() if min_acks is not None else None
        self.min_acks = min_acks or 0
        self._acks: dict[str, int] = {}
        self._pending: collections.deque[_Request] = collections.deque()
        self._lock = threading.Lock()
        self.timeouts_total = 0
        self.not_available_total = 0
        self.overflow_total = 0
        self.acked_total = 0

    # Called by the store on the put path -----------------------------------------------

    def waiter(self, end_offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        with self._lock:
            if end_offset <= self.acked:
                return None
            if self.required is not None:
                if not self.required and self.min_acks == 0:
                    self.acked = end_offset  # nobody else is in sync: stored here is acknowledged
                    return None
            elif not self.slave_ok(end_offset):
                self.not_available_total += 1
                return _done(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            if len(self._pending) >= self.max_pending or self.is_stopped():
                self.overflow_total += 1
                return _done(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            request = _Request(end_offset, self.clock() + self.timeout_ms / 1000.0)
            self._pending.append(request)
        self.on_request()
        return request.future

    # Called by connection readers ------------------------------------------------------

    def notify_acked(self, offset: int, member: str = "") -> None:
        """Slave `member` acknowledged everything below `offset`: answer the puts that are now acknowledged."""
        with self._lock:
            if self.required is not None:
                self._acks[member] = offset
                if member not in self.required:
                    return
                offset = self._covered_locked()
            ready = self._advance_locked(offset)
        self._answer(ready)

    def connected(self, member: str, offset: int) -> None:
        """A new connection of `member` whose log ends at `offset`: its acknowledgements start there (even lower)."""
        with self._lock:
            if self.required is not None:
                self._acks[member] = offset

    def require(self, member: str) -> int:
        """Count `member` for every put not acknowledged yet; returns the highest offset acknowledged without it."""
        with self._lock:
            assert self.required is not None, "every-in-sync-member counting only"
            self.required = self.required | {member}
            return self.acked

    def release(self, members: set[str]) -> None:
        """Stop counting `members` (the in-sync set shrank, or a joining broker fell behind)."""
        with self._lock:
            assert self.required is not None, "every-in-sync-member counting only"
            self.required = self.required - members
            if not self.required and self.min_acks == 0:
                ready = list(self._pending)
                self._pending.clear()
                if ready:
                    self.acked = max(self.acked, max(r.end_offset for r in ready))
            else:
                ready = self._advance_locked(self._covered_locked())
        self._answer(ready)

    def _covered_locked(self) -> int:
        """The highest offset every required member acknowledged; -1 while fewer than `min_acks` are required."""
        required = self.required
        assert required is not None
        if not required or len(required) < self.min_acks:
            return -1
        return min(self._acks.get(m, -1) for m in required)

    def _advance_locked(self, offset: int) -> list[_Request]:
        """Everything up to `offset` is acknowledged: the waiting puts it covers, taken off the queue."""
        if offset <= self.acked:
            return []
        self.acked = offset
        ready: list[_Request] = []
        pending = self._pending
        while pending and pending[0].end_offset <= offset:
            ready.append(pending.popleft())
        return ready

    def _answer(self, ready: list[_Request]) -> None:
        for request in ready:
            _complete(request, PutMessageStatus.PUT_OK)
        self.acked_total += len(ready)

    def pending(self) -> int:
        return len(self._pending)

    # The deadline loop -----------------------------------------------------------------

    def expire(self) -> float:
        """Answer FLUSH_SLAVE_TIMEOUT to every request past its deadline; return ms until the next deadline."""
        now = self.clock()
        expired: list[_Request] = []
        with self._lock:
            pending = self._pending
            while pending and pending[0].deadline <= now:
                expired.append(pending.popleft())
            next_ms = (pending[0].deadline - now) * 1000 if pending else IDLE_WAIT_MS
        for request in expired:
            _complete(request, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        if expired:
            self.timeouts_total += len(expired)
            log.warning("%d put(s) not acknowledged by a slave within %d ms", len(expired), self.timeout_ms)
        return next_ms

    def run(self) -> None:
        while not self.is_stopped():
            wait_ms = min(IDLE_WAIT_MS, max(MIN_WAIT_MS, self.expire()))
            self.wait_for_running(wait_ms)
        # Stopping: nothing will acknowledge the rest; they are stored but not confirmed.
        with self._lock:
            left = list(self._pending)
            self._pending.clear()
        for request in left:
            _complete(request, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
