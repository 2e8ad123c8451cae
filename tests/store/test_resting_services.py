"""Background services that have nothing to do do not poll: the dispatch thread rests once it has caught up,
the timer's enqueue and dequeue and the delay scan sleep until dispatch (or each other) wakes them, and whatever
needs them wakes them.

Each wake-up of an idle thread costs the event loop's requests under load (docs/concurrency.md, "Background
threads under load"). The wakes are counted (ServiceThread.waits); the waits that would hide a missing
wake-up are made a minute long, so a test passes only when the wake-up came.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from core import FakeClock
from store import DefaultMessageStore, MessageInner, Popped, TimerStatus, build_message, deliver_at
from store.dispatch.reput_message_service import IDLE_WAIT_MS
from tests.store.conftest import small_config
from tests.waiting import wait_for

MINUTE_MS = 60_000


def rested(store: DefaultMessageStore) -> None:
    wait_for(lambda: store.reput_service.resting, 10.0, "the dispatch thread never rested")


def test_an_idle_dispatch_thread_rests_instead_of_looking_every_idle_wait(store: DefaultMessageStore) -> None:
    store.create_or_update_topic("R", 1)
    assert store.put_message(build_message("R", b"m", 0)).ok  # dispatched inline, before it returns
    rested(store)
    before = store.reput_service.waits
    time.sleep(0.5)
    woke = store.reput_service.waits - before
    assert woke <= 2, f"an idle dispatch thread woke {woke} times in 0.5 s (every {IDLE_WAIT_MS} ms would be 50)"


def test_a_lazily_dispatched_record_wakes_a_resting_dispatch_thread(store: DefaultMessageStore) -> None:
    store.create_or_update_topic("L", 1)
    store.reput_service.rest_wait_ms = MINUTE_MS
    store.reput_service.wakeup()  # ends the rest begun with the old length
    wait_for(lambda: not store.reput_service._has_notified, 10.0, "the dispatch thread never took the wake-up")
    rested(store)
    result = store.put_messages([build_message("L", b"lazy", 0)], lazy_dispatch=True)
    assert result.ok
    assert store.get_max_offset_in_queue("L", 0) == 0  # left to the next pass: nothing dispatched it inline
    wait_for(lambda: store.get_max_offset_in_queue("L", 0) == 1, 10.0, "the lazy record waited for the rest to end")
    assert store.reput_service.reput_from_offset == store.commit_log.get_max_offset()
    # Lazy records keep the thread looking every IDLE_WAIT_MS for a while (more are likely to follow).
    assert not store.reput_service.resting


def test_a_thread_that_failed_does_not_rest(store: DefaultMessageStore) -> None:
    store.reput_service.failure = "a failure under way"
    try:
        assert store.reput_service._wait_ms() == store.reput_service._retry_ms
        assert not store.reput_service.resting
    finally:
        store.reput_service.failure = ""
    assert store.reput_service._wait_ms() == store.reput_service.rest_wait_ms  # caught up, nothing owed
    assert store.reput_service.resting


def test_the_timer_enqueue_is_woken_by_dispatch_and_the_dequeue_not_by_its_poll(tmp_path: Path) -> None:
    """Its idle wait is a minute: the message reaches the wheel because dispatch woke the enqueue, and the
    slot is delivered because the dequeue woke it to move the write time past the slot."""
    clock = FakeClock()
    config = small_config(str(tmp_path / "s"), timer_wheel_slots=1024, timer_roll_window_slots=30)
    store = DefaultMessageStore(config, clock=clock)
    store.load()
    store.start()
    try:
        timer = store.timer
        assert timer is not None
        enqueue = timer.enqueue_service
        wait_for(lambda: enqueue.waits > 0, 10.0, "the enqueue service never waited")
        enqueue.idle_wait_ms = MINUTE_MS
        enqueue.wakeup()  # ends the wait begun with the old length
        wait_for(lambda: not enqueue._has_notified, 10.0, "the enqueue service never took the wake-up")
        due = clock.now_ms() + 1_500
        assert store.put_message(deliver_at(build_message("T", b"soon", 0), due)).ok
        wait_for(
            lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] == 1,
            10.0,
            "dispatch did not wake the enqueue",
        )
        clock.set_ms(due + config.timer_precision_ms)
        wait_for(lambda: store.get_max_offset_in_queue("T", 0) == 1, 10.0, "the dequeue did not get the write time moved")
        wait_for(lambda: cast("TimerStatus", store.timer_status())["delivered"] == 1, 10.0, "the delivery was never counted")
    finally:
        store.shutdown()


def test_idle_timer_services_rest_while_the_wheel_is_empty(store: DefaultMessageStore) -> None:
    """With no timer message, neither timer thread wakes at the precision (every 100 ms here) nor at 10 ms."""
    timer = store.timer
    assert timer is not None
    services = (timer.enqueue_service, timer.dequeue_service)
    wait_for(lambda: all(service.waits > 0 for service in services), 10.0, "the timer services never waited")
    time.sleep(1.2)  # past the waits begun before the store ran
    before = [service.waits for service in services]
    time.sleep(1.0)
    woke = [service.waits - b for service, b in zip(services, before, strict=True)]
    assert max(woke) <= 3, f"idle timer services woke {woke} times in 1 s (the enqueue, the dequeue)"


def test_an_idle_delay_scan_rests_and_a_delayed_put_wakes_it(tmp_path: Path) -> None:
    """With no delayed message the scan wakes about once a second, not every schedule_scan_interval_ms (100 ms);
    with its rest a minute long, a delayed message is still delivered when due: dispatch woke the scan."""
    clock = FakeClock()
    store = DefaultMessageStore(small_config(str(tmp_path / "s")), clock=clock)
    store.load()
    store.start()
    try:
        service = store.schedule_service
        wait_for(lambda: service.waits > 0, 10.0, "the delay scan never waited")
        time.sleep(1.2)  # past the waits begun before the store ran
        before = service.waits
        time.sleep(1.0)
        assert service.waits - before <= 3, f"an idle delay scan woke {service.waits - before} times in 1 s"
        service.rest_scan_ms = MINUTE_MS
        clock.advance_ms(1_001)  # every level due: each is scanned and rests a minute now
        service.wakeup()
        wait_for(lambda: not service._has_notified, 10.0, "the delay scan never took the wake-up")
        assert store.put_message(build_message("D", b"later", 0, delay_level=1)).ok  # level 1: 1 s
        clock.set_ms(int(time.time() * 1000) + 2_000)  # past the due time (the store time is the wall clock's, plus 1 s)
        wait_for(lambda: store.get_max_offset_in_queue("D", 0) == 1, 10.0, "the delayed message waited for the rest to end")
    finally:
        store.shutdown()


def test_an_idle_revive_rests_and_a_checkpoint_coming_due_wakes_it(tmp_path: Path) -> None:
    """With nothing held the revive service wakes about once a second, not every pop_revive_interval_ms (10 ms
    here); with its rest a minute long, an unacked message still comes back: the checkpoint's arrival woke it."""
    config = small_config(str(tmp_path / "s"), pop_ack_margin_ms=50, pop_revive_interval_ms=10, pop_revive_queue_num=1)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    try:
        revive = store.group_consumption.revive_service
        assert revive is not None
        wait_for(lambda: revive.waits > 0, 10.0, "the revive service never waited")
        time.sleep(1.2)
        before = revive.waits
        time.sleep(1.0)
        assert revive.waits - before <= 3, f"an idle revive service woke {revive.waits - before} times in 1 s"
        revive.rest_wait_ms = MINUTE_MS
        revive.wakeup()
        wait_for(lambda: not revive._has_notified, 10.0, "the revive service never took the wake-up")
        store.create_or_update_topic("P", 1)
        assert store.put_message(build_message("P", b"unacked", 0)).ok
        (first,) = store.group_consumption.receive("g", "P", 1, 300)
        again: list[Popped] = []

        def revived() -> bool:
            again.extend(store.group_consumption.receive("g", "P", 1, 300))
            return bool(again)

        wait_for(revived, 15.0, "never revived")
        assert again[0].reconsume_times == 1 and again[0].queue_offset >= 0
    finally:
        store.shutdown()


def paced_puts(store: DefaultMessageStore, make: Callable[[int], MessageInner], n: int) -> None:
    """`n` puts about a millisecond apart, as a stream of requests puts them."""
    for i in range(n):
        assert store.put_message(make(i)).ok
        time.sleep(0.001)


def test_a_stream_of_timer_puts_wakes_the_enqueue_at_its_pace_not_once_a_put(store: DefaultMessageStore) -> None:
    """A group's checkpoints and acks are timer messages, one or two a receive: dispatch wakes only a resting
    enqueue, so under a stream it looks every ENQUEUE_BUSY_WAIT_MS (10 ms) and takes what came meanwhile.
    Every message still reaches the wheel."""
    timer = store.timer
    assert timer is not None
    enqueue = timer.enqueue_service
    due = int(time.time() * 1000) + 60_000
    assert store.put_message(deliver_at(build_message("T", b"first", 0), due)).ok
    wait_for(
        lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] == 1,
        10.0,
        "the first timer message never reached the wheel",
    )
    n = 400
    before = enqueue.waits
    paced_puts(store, lambda i: deliver_at(build_message("T", f"t{i}".encode(), 0), due), n)
    woke = enqueue.waits - before
    wait_for(
        lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] == n + 1,
        10.0,
        "the stream's messages never reached the wheel",
    )
    assert woke <= n // 3, f"the enqueue woke {woke} times for {n} timer puts"


def test_a_stream_of_delayed_puts_to_a_waiting_level_does_not_wake_the_scan_once_a_put(store: DefaultMessageStore) -> None:
    """A level whose first entry is not due yet is scanned when it is: a later entry of the level is due later.
    Puts to it do not wake the scan; the level's messages are still delivered in order when due."""
    service = store.schedule_service
    assert store.put_message(build_message("D", b"first", 0, delay_level=2)).ok  # level 2: 5 s
    wait_for(lambda: service._waiting[1], 10.0, "the level never waited for its first entry")
    n = 300
    before = service.waits
    paced_puts(store, lambda i: build_message("D", f"d{i}".encode(), 0, delay_level=2), n)
    woke = service.waits - before
    assert woke <= n // 10, f"the delay scan woke {woke} times for {n} delayed puts to a waiting level"
    wait_for(lambda: store.get_max_offset_in_queue("D", 0) == n + 1, 20.0, "the level's messages were never delivered")
