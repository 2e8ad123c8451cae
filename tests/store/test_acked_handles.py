"""A receipt handle answers OK once: acked again it is ALREADY_ACKED, replaced by a change of the invisible
time it is HANDLE_SUPERSEDED, and neither stores or counts anything; the table remembering this is bounded.

Real store on real files, as tests/store/test_pop_consumer.py; invisible times of a few hundred ms.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import DefaultMessageStore
from store.pop.acked_handles import AckedHandles, HandleState
from store.pop.group_consumption import AckOutcome
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.store.test_pop_consumer import GROUP, INVISIBLE_MS, bodies, produce

OK, ACKED, SUPERSEDED = AckOutcome.OK, AckOutcome.ALREADY_ACKED, AckOutcome.HANDLE_SUPERSEDED


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    cfg = small_config(str(tmp_path / "store"), pop_ack_margin_ms=50, pop_revive_interval_ms=10, pop_revive_queue_num=2)
    s = open_store(cfg)
    try:
        yield s
    finally:
        s.shutdown()


def acked_count(store: DefaultMessageStore, topic: str) -> int:
    return store.group_consumption.counts()[(GROUP, topic)].acked


def test_a_handle_acked_three_times_is_ok_once_and_counted_once(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["a", "b"], queues=1)
    a, b = store.group_consumption.receive(GROUP, "orders", 2, INVISIBLE_MS)
    wait_dispatched(store)  # the store's own records are dispatched by the next pass
    revive_end = store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0)
    assert store.group_consumption.ack(GROUP, "orders", [a.handle]) == [OK]
    assert store.group_consumption.ack(GROUP, "orders", [a.handle]) == [ACKED]
    assert store.group_consumption.ack(GROUP, "orders", [a.handle, b.handle, b.handle]) == [ACKED, OK, ACKED]
    assert acked_count(store, "orders") == 2
    # Two ack records (one per first ack), none for the repeats.
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0) - revive_end == 2
    time.sleep((INVISIBLE_MS + 200) / 1000)  # the invisible time must pass
    assert store.group_consumption.receive(GROUP, "orders", 2, INVISIBLE_MS) == []
    assert store.group_consumption.ack(GROUP, "orders", [a.handle]) == [AckOutcome.HANDLE_EXPIRED]  # past its time


def test_a_superseded_handle_says_so_and_the_new_one_acks(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["slow"], queues=1)
    (p,) = store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS)
    outcome, new, _ = store.group_consumption.change_invisible(GROUP, "orders", p.handle, 3_000)
    assert outcome is OK and new is not None
    assert store.group_consumption.ack(GROUP, "orders", [p.handle]) == [SUPERSEDED]
    assert store.group_consumption.change_invisible(GROUP, "orders", p.handle, 3_000)[0] is SUPERSEDED
    assert acked_count(store, "orders") == 0
    assert store.group_consumption.ack(GROUP, "orders", [new]) == [OK]
    assert store.group_consumption.change_invisible(GROUP, "orders", new, 3_000)[0] is ACKED
    assert acked_count(store, "orders") == 1


def test_changing_the_invisible_time_of_an_acked_handle_does_not_deliver_it_again(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["done"], queues=1)
    (p,) = store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS)
    assert store.group_consumption.ack(GROUP, "orders", [p.handle]) == [OK]
    assert store.group_consumption.change_invisible(GROUP, "orders", p.handle, 200)[0] is ACKED
    time.sleep((INVISIBLE_MS + 300) / 1000)  # a checkpoint the change had written would be due now
    assert store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS) == []
    assert store.group_consumption.stats()["revived"] == 0


def test_a_fifo_group_s_repeated_ack_is_told_apart(store: DefaultMessageStore) -> None:
    store.group_consumption.put_group(GROUP, max_reconsume_times=16, fifo=True)
    produce(store, "orders", ["1", "2"], queues=1)
    one, two = store.group_consumption.receive(GROUP, "orders", 2, INVISIBLE_MS * 10)
    assert store.group_consumption.ack(GROUP, "orders", [two.handle]) == [OK]
    assert store.group_consumption.ack(GROUP, "orders", [two.handle]) == [ACKED]
    # Its invisible-time change keeps the delivery: the old handle still acks, once.
    outcome, new, _ = store.group_consumption.change_invisible(GROUP, "orders", one.handle, 5_000)
    assert outcome is OK and new is not None
    assert store.group_consumption.ack(GROUP, "orders", [new, one.handle]) == [OK, ACKED]
    assert acked_count(store, "orders") == 2 and store.query_offset(GROUP, "orders", 0) == 2
    assert bodies(store.group_consumption.receive(GROUP, "orders", 2, INVISIBLE_MS)) == []


def test_racing_acks_of_one_handle_store_one_record_and_answer_ok_once(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["x"], queues=1)
    (p,) = store.group_consumption.receive(GROUP, "orders", 1, 10_000)
    outcomes: list[AckOutcome] = []
    start = threading.Barrier(8)

    def ack() -> None:
        start.wait()
        outcomes.extend(store.group_consumption.ack(GROUP, "orders", [p.handle]))

    threads = [threading.Thread(target=ack) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(o.value for o in outcomes) == ["ALREADY_ACKED"] * 7 + ["OK"]
    assert acked_count(store, "orders") == 1


def test_past_its_bound_the_table_forgets_the_handle_that_expires_first(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "store"), pop_acked_handles_max=2, pop_ack_margin_ms=50, pop_revive_interval_ms=10)
    store = open_store(cfg)
    try:
        produce(store, "orders", ["a", "b", "c"], queues=1)
        (a,) = store.group_consumption.receive(GROUP, "orders", 1, 2_000)
        later = store.group_consumption.receive(GROUP, "orders", 2, 5_000)
        assert store.group_consumption.ack(GROUP, "orders", [a.handle, *(p.handle for p in later)]) == [OK] * 3
        stats = store.group_consumption.stats()
        assert stats["acked_handles_held"] == 2 and stats["acked_handles_forgotten"] == 1
        # a expires first, so it went: the others are told apart; a acked again is answered as a first ack (the documented limit).
        assert store.group_consumption.ack(GROUP, "orders", [p.handle for p in later]) == [ACKED, ACKED]
        assert store.group_consumption.ack(GROUP, "orders", [a.handle]) == [OK]
        assert store.group_consumption.stats()["acked_handles_forgotten"] == 2
    finally:
        store.shutdown()


def test_the_table_drops_entries_once_their_handles_expired() -> None:
    table = AckedHandles(10)
    key = ("g", "t", False, 0, 5, 1_000, 30_000)
    assert table.claim(key, HandleState.ACKED, 2_000, now=1_000) is None
    assert table.claim(key, HandleState.SUPERSEDED, 2_000, now=1_500) is HandleState.ACKED
    assert table.claim(("g", "t", False, 0, 6, 1_000, 30_000), HandleState.ACKED, 9_000, now=1_500) is None
    assert len(table) == 2
    assert table.claim(("g", "t", False, 0, 7, 1_000, 30_000), HandleState.ACKED, 9_000, now=2_000) is None
    assert len(table) == 2  # the first one's handle expired at 2,000: gone without being forgotten early
    assert table.forgotten == 0
    table.release(key)
    assert table.claim(key, HandleState.ACKED, 3_000, now=2_500) is None  # released: usable again


def test_a_full_table_leaves_the_cyclic_collector_nothing_to_track() -> None:
    # A minute of acks is tens of thousands of entries: had they stayed tracked, each would count towards the
    # collector's older generations and bring full collections (milliseconds each) under an acking load.
    table = AckedHandles(20_000)
    gc.collect()
    before = len(gc.get_objects())
    for offset in range(20_000):
        state = HandleState.ACKED if offset % 2 else HandleState.SUPERSEDED
        assert table.claim(("g", "t", False, 0, offset, 1_000, 30_000), state, 60_000 + offset, now=1_000) is None
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 100, f"{grown} objects of the table stayed tracked by the cyclic collector"
    assert table.claim(("g", "t", False, 0, 7, 1_000, 30_000), HandleState.ACKED, 70_000, now=2_000) is HandleState.ACKED
    assert table.claim(("g", "t", False, 0, 8, 1_000, 30_000), HandleState.ACKED, 70_000, now=2_000) is HandleState.SUPERSEDED
