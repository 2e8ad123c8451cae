"""PutDurability: what a stored put waits for before it is answered, as futures.

Under SYNC_FLUSH a put waits for the group commit that flushes its bytes; on a SYNC_MASTER with
a replication waiter (MessageStore.set_replication_waiter) it then waits for a slave to hold
them. Under ASYNC_FLUSH with no slave to wait for a put is answered at once: the flush thread is
not woken per put (RocketMQ wakes it; under the GIL a thread hand-off per put costs more than it
gains, and the flush interval bounds the delay).

A wait that fails does not unstore the put: its result keeps the items, with the flush or slave
status and a detail saying what was not confirmed.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.logfile.flush_real_time_service import FlushRealTimeService
from store.logfile.group_commit_service import GroupCommitService
from store.logfile.uncancellable_future import UncancellableFuture
from store.status import PutMessageResult, PutMessageStatus

Waiter = concurrent.futures.Future[PutMessageResult]

# Called with a stored put's commitlog end offset on a SYNC_MASTER; returns a future the put's
# answer waits for (PUT_OK, or the status to answer instead), or None to answer at once.
ReplicationWaiter = Callable[[int], "concurrent.futures.Future[PutMessageStatus] | None"]


class PutDurability:
    def __init__(self, config: MessageStoreConfig, flush_service: GroupCommitService | FlushRealTimeService) -> None:
        self.config = config
        self.flush_service = flush_service
        self.replication_waiter: ReplicationWaiter | None = None  # set by ha/ on a SYNC_MASTER

    def answers_at_once(self) -> bool:
        """True when a put is answered without waiting for a flush or a slave."""
        config = self.config  # `_needs_slave` written out: asked by every put
        needs_slave = config.broker_role is BrokerRole.SYNC_MASTER and self.replication_waiter is not None
        return config.flush_disk_type is FlushDiskType.ASYNC_FLUSH and not needs_slave

    def _needs_slave(self) -> bool:
        return self.config.broker_role is BrokerRole.SYNC_MASTER and self.replication_waiter is not None

    def waiter(self, result: PutMessageResult) -> Waiter | None:
        """A future for the flush and slave waits of a stored put, or None when it is answered now."""
        if result.status is not PutMessageStatus.PUT_OK or self.answers_at_once():
            return None
        need_slave = self._needs_slave()
        if self.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            return self._chain_slave(result)  # ASYNC_FLUSH on a SYNC_MASTER: only the slave is waited for
        assert isinstance(self.flush_service, GroupCommitService)
        not_durable = PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, items=result.items, detail="stored, not confirmed durable")
        if not need_slave:  # the flushed offset answers the put itself: one future per put, whose `result` flushes itself
            return self.flush_service.wait_for(result.end_offset, result, not_durable, lead=True)
        request = self.flush_service.wait_for(result.end_offset)
        outer: Waiter = concurrent.futures.Future()

        def flushed(f: concurrent.futures.Future[PutMessageStatus]) -> None:
            status = f.result()
            if status is not PutMessageStatus.PUT_OK:
                outer.set_result(PutMessageResult(status, items=result.items, detail="stored, not confirmed durable"))
            elif need_slave:
                self._chain_slave(result, outer)
            else:
                outer.set_result(result)

        request.add_done_callback(flushed)
        return outer

    def through(self, offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        """The flush and slave waits of the log up to `offset` as one future: PUT_OK, or the status of the
        wait not confirmed (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE). One future serves
        every put ending at or before `offset` (the puts of one event-loop turn); None when puts are
        answered at once."""
        if self.answers_at_once():
            return None
        if self.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            return self._slave_status(offset, concurrent.futures.Future())  # ASYNC_FLUSH on a SYNC_MASTER
        assert isinstance(self.flush_service, GroupCommitService)
        request = self.flush_service.wait_for(offset)
        if not self._needs_slave():
            return request
        outer: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()

        def flushed(f: concurrent.futures.Future[PutMessageStatus]) -> None:
            status = f.result()
            if status is PutMessageStatus.PUT_OK:
                self._slave_status(offset, outer)
            else:
                outer.set_result(status)

        request.add_done_callback(flushed)
        return outer

    def _slave_status(self, offset: int, out: concurrent.futures.Future[PutMessageStatus]) -> concurrent.futures.Future[PutMessageStatus]:
        """`out`, completed with the slave wait's status for the log up to `offset` (PUT_OK when none is needed)."""
        waiter = self.replication_waiter(offset) if self.replication_waiter is not None else None
        if waiter is None:
            out.set_result(PutMessageStatus.PUT_OK)
        else:
            waiter.add_done_callback(lambda f: out.set_result(f.result()))
        return out

    def _chain_slave(self, result: PutMessageResult, outer: Waiter | None = None) -> Waiter:
        out = outer if outer is not None else concurrent.futures.Future()
        assert self.replication_waiter is not None
        waiter = self.replication_waiter(result.end_offset)
        if waiter is None:
            out.set_result(result)
            return out

        def replicated(f: concurrent.futures.Future[PutMessageStatus]) -> None:
            status = f.result()
            if status is PutMessageStatus.PUT_OK:
                out.set_result(result)
            else:
                out.set_result(PutMessageResult(status, items=result.items, detail="stored on the master, not confirmed on a slave"))

        waiter.add_done_callback(replicated)
        return out

    def wait(self, result: PutMessageResult, waiter: Waiter | None) -> PutMessageResult:
        """The put's answer, blocking for its waiter; FLUSH_DISK_TIMEOUT past sync_flush_timeout_ms plus 1 s."""
        if waiter is None:
            return result
        timeout = self.config.sync_flush_timeout_ms / 1000.0 + 1.0
        try:
            return waiter.result(timeout)
        except concurrent.futures.TimeoutError:
            return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, items=result.items, detail="stored, not confirmed durable")


def as_future(result: PutMessageResult, waiter: Waiter | None) -> Waiter:
    """The waiter, or a future already done with `result` when there is none."""
    return waiter if waiter is not None else DoneFuture(result)


class DoneFuture(UncancellableFuture[PutMessageResult]):
    """The answer of a put that waits for nothing: a `concurrent.futures.Future` completed when made.

    A Future builds a `threading.Condition` (a Python object around an RLock) and takes it in
    `set_result`, `done` and `result`: more than the rest of an ASYNC_FLUSH put's bookkeeping on the
    event loop. This one holds its result only. Invariants: done from the start, never cancelled,
    never completed again (`set_result`/`set_exception` raise InvalidStateError); a callback runs at
    once, on the adding thread. Not for `concurrent.futures.wait`/`as_completed`, which read a
    Future's condition."""

    def __init__(self, result: PutMessageResult) -> None:  # not Future.__init__: no Condition
        self._answer = result

    def __repr__(self) -> str:
        return f"<{type(self).__name__} finished>"

    def done(self) -> bool:
        return True

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[PutMessageResult]], object]) -> None:
        self._call(fn)

    def result(self, timeout: float | None = None) -> PutMessageResult:
        return self._answer

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return None

    def set_result(self, result: PutMessageResult) -> None:
        raise concurrent.futures.InvalidStateError(f"{self!r} is completed already")

    def set_exception(self, exception: BaseException | None) -> None:
        raise concurrent.futures.InvalidStateError(f"{self!r} is completed already")
