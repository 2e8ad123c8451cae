"""GroupTransferService: the SYNC_MASTER wait, with a fake clock so deadlines are deterministic."""

from __future__ import annotations

import pytest

from ha.group_transfer_service import GroupTransferService
from store import PutMessageStatus

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def service(slave_ok: bool = True, max_pending: int = 10) -> tuple[GroupTransferService, Clock, list[int]]:
    clock = Clock()
    woken: list[int] = []
    gts = GroupTransferService(1_000, max_pending, lambda end: slave_ok, lambda: woken.append(1), clock)
    return gts, clock, woken


def test_put_waits_until_an_ack_passes_its_end() -> None:
    gts, _, woken = service()
    f = gts.waiter(500)
    assert f is not None and not f.done() and woken == [1]
    gts.notify_acked(499)
    assert not f.done()
    gts.notify_acked(500)
    assert f.result(0) is PutMessageStatus.PUT_OK and gts.pending() == 0


def test_already_acknowledged_put_is_answered_at_once() -> None:
    gts, _, _ = service()
    gts.notify_acked(1_000)
    assert gts.waiter(900) is None


def test_no_slave_answers_slave_not_available() -> None:
    gts, _, _ = service(slave_ok=False)
    f = gts.waiter(10)
    assert f is not None and f.result(0) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert gts.not_available_total == 1 and gts.pending() == 0


def test_deadline_answers_flush_slave_timeout_and_a_late_ack_changes_nothing() -> None:
    gts, clock, _ = service()
    f = gts.waiter(100)
    assert f is not None
    clock.now += 0.999
    gts.expire()
    assert not f.done()
    clock.now += 0.002
    gts.expire()
    assert f.result(0) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    gts.notify_acked(200)
    assert f.result(0) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and gts.timeouts_total == 1


def test_bound_on_waiting_puts_answers_flush_slave_timeout_at_once() -> None:
    gts, _, _ = service(max_pending=2)
    a, b = gts.waiter(10), gts.waiter(20)
    c = gts.waiter(30)
    assert a is not None and b is not None
    assert c is not None and c.result(0) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert not a.done() and not b.done() and gts.overflow_total == 1


def test_ack_completes_only_the_covered_prefix_in_arrival_order() -> None:
    gts, _, _ = service()
    a, b, c = gts.waiter(100), gts.waiter(300), gts.waiter(200)
    assert a is not None and b is not None and c is not None
    gts.notify_acked(250)
    assert a.done() and not b.done() and not c.done()
    gts.notify_acked(300)
    assert b.result(0) is PutMessageStatus.PUT_OK and c.result(0) is PutMessageStatus.PUT_OK


def test_shutdown_answers_every_waiting_put() -> None:
    gts, _, _ = service()
    gts.start()
    f = gts.waiter(100)
    assert f is not None
    gts.shutdown()
    assert f.result(1) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    late = gts.waiter(200)
    assert late is not None and late.result(0) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT


def in_sync_service(min_acks: int = 0) -> GroupTransferService:
    return GroupTransferService(1_000, 10, lambda end: False, lambda: None, Clock(), min_acks=min_acks)


def test_every_required_member_must_acknowledge_and_nobody_required_acknowledges_at_once() -> None:
    gts = in_sync_service()
    assert gts.waiter(100) is None, "a master alone in its set acknowledges what it stored"
    assert gts.require("b") == 100 and gts.require("c") == 100
    gts.connected("b", 100)
    gts.connected("c", 100)
    f = gts.waiter(300)
    assert f is not None and not f.done(), "no SLAVE_NOT_AVAILABLE: it waits for the set"
    gts.notify_acked(300, "b")
    gts.notify_acked(300, "stranger")  # not in the set: counts for nothing
    assert not f.done()
    gts.notify_acked(300, "c")
    assert f.result(0) is PutMessageStatus.PUT_OK and gts.acked == 300


def test_releasing_a_member_answers_the_puts_only_it_lacked() -> None:
    gts = in_sync_service()
    gts.require("b")
    gts.require("c")
    gts.notify_acked(500, "b")
    a, b = gts.waiter(400), gts.waiter(600)
    assert a is not None and b is not None
    gts.release({"c"})
    assert a.result(0) is PutMessageStatus.PUT_OK and not b.done()
    gts.release({"b"})
    assert b.result(0) is PutMessageStatus.PUT_OK, "nobody left to wait for"


def test_below_min_acks_nothing_is_acknowledged_by_a_shrink() -> None:
    gts = in_sync_service(min_acks=1)
    gts.require("b")
    f = gts.waiter(100)
    assert f is not None
    gts.release({"b"})
    assert not f.done(), "min_in_sync_replicas 2 with the master alone: the put is not acknowledged"
    late = gts.waiter(200)
    assert late is not None and not late.done()


def test_a_new_connection_restarts_a_members_count_lower() -> None:
    gts = in_sync_service()
    gts.require("b")
    gts.require("c")
    gts.notify_acked(200, "b")
    gts.notify_acked(100, "c")
    f = gts.waiter(150)
    gts.connected("b", 120)  # b reconnected with a log that ends lower: its old count no longer holds
    gts.notify_acked(150, "c")
    assert f is not None and not f.done()
    gts.notify_acked(150, "b")
    assert f.result(0) is PutMessageStatus.PUT_OK
