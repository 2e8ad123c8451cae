"""Group (POP) consumption in the store: receive, ack, invisible time, redelivery, dead letters, FIFO.

Real store on real files; invisible times of a few hundred milliseconds and a short ack margin so
redelivery happens within a test. Waits poll with a deadline; nothing asserts a duration.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import DefaultMessageStore, TopicInvalid, build_message, decode_message
from store.metadata.topic_names import dlq_topic, retry_topic, revive_topic
from store.pop.group_consumption import AckOutcome, Popped
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.waiting import wait_for

INVISIBLE_MS = 300
GROUP = "billing"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    cfg = small_config(str(tmp_path / "store"), pop_ack_margin_ms=50, pop_revive_interval_ms=10, pop_revive_queue_num=2)
    s = open_store(cfg)
    try:
        yield s
    finally:
        s.shutdown()


def produce(store: DefaultMessageStore, topic: str, bodies: list[str], queues: int = 2, tags: str | None = None) -> None:
    if store.topic_config(topic) is None:
        store.create_or_update_topic(topic, queues)
    for i, body in enumerate(bodies):
        assert store.put_message(build_message(topic, body.encode(), i % queues, tags=tags)).ok


def bodies(popped: list[Popped]) -> list[str]:
    return [decode_message(p.data, 0)["body"].decode() for p in popped]


def receive_until(
    store: DefaultMessageStore, topic: str, want: int, invisible_ms: int = INVISIBLE_MS, timeout_s: float = 10.0
) -> list[Popped]:
    got: list[Popped] = []

    def received_all() -> bool:
        got.extend(store.group_consumption.receive(GROUP, topic, want - len(got), invisible_ms))
        return len(got) >= want

    wait_for(received_all, timeout_s, what=lambda: f"{want} messages: received {bodies(got)}")
    return got


def test_each_message_is_received_once_across_queues_and_an_acked_one_never_again(store: DefaultMessageStore) -> None:
    produce(store, "orders", [f"m{i}" for i in range(6)])
    first = store.group_consumption.receive(GROUP, "orders", 4, INVISIBLE_MS)
    rest = store.group_consumption.receive(GROUP, "orders", 10, INVISIBLE_MS)
    assert sorted(bodies(first + rest)) == [f"m{i}" for i in range(6)]
    assert {p.queue_id for p in first} == {0, 1}  # spread over both queues
    assert all(p.reconsume_times == 0 and p.invisible_until_ms > 0 for p in first + rest)
    outcomes = store.group_consumption.ack(GROUP, "orders", [p.handle for p in first + rest])
    assert outcomes == [AckOutcome.OK] * 6
    time.sleep((INVISIBLE_MS + 200) / 1000)  # the invisible time must pass
    assert store.group_consumption.receive(GROUP, "orders", 10, INVISIBLE_MS) == []
    assert store.group_consumption.stats()["revived"] == 0


def test_an_unacked_message_comes_back_with_reconsume_times_plus_one(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["a", "b"], queues=1)
    first = store.group_consumption.receive(GROUP, "orders", 2, INVISIBLE_MS)
    assert bodies(first) == ["a", "b"]
    assert store.group_consumption.ack(GROUP, "orders", [first[0].handle]) == [AckOutcome.OK]
    again = receive_until(store, "orders", 1)
    assert bodies(again) == ["b"] and again[0].reconsume_times == 1
    assert again[0].queue_topic == retry_topic(GROUP, "orders")
    stored = decode_message(again[0].data, 0)
    assert stored["properties"]["RETRY_TOPIC"] == "orders"
    assert stored["properties"]["UNIQ_KEY"] == decode_message(first[1].data, 0)["properties"]["UNIQ_KEY"]
    assert store.group_consumption.ack(GROUP, "orders", [again[0].handle]) == [AckOutcome.OK]
    time.sleep((INVISIBLE_MS + 200) / 1000)  # the invisible time must pass
    assert store.group_consumption.receive(GROUP, "orders", 10, INVISIBLE_MS) == []


def test_after_max_reconsume_times_a_message_goes_to_the_dead_letter_topic(store: DefaultMessageStore) -> None:
    store.group_consumption.put_group(GROUP, max_reconsume_times=2, fifo=False)
    produce(store, "orders", ["poison"], queues=1)
    times = []
    for _ in range(3):  # the first delivery and exactly two redeliveries
        got = receive_until(store, "orders", 1)
        times.append(got[0].reconsume_times)
    assert times == [0, 1, 2]
    wait_for(lambda: store.get_max_offset_in_queue(dlq_topic(GROUP), 0) >= 1, 10, what="the dead-letter topic to receive it")
    time.sleep((INVISIBLE_MS + 200) / 1000)  # the invisible time must pass
    assert store.group_consumption.receive(GROUP, "orders", 10, INVISIBLE_MS) == []
    dead = store.get_message("reader", dlq_topic(GROUP), 0, 0, 10)
    assert dead.message_count == 1
    stored = decode_message(dead.data, 0)
    assert stored["body"] == b"poison" and stored["reconsume_times"] == 3 and stored["properties"]["RETRY_TOPIC"] == "orders"
    assert store.group_consumption.stats()["dead_lettered"] == 1


def test_a_receive_whose_retry_topic_would_be_too_long_takes_nothing(store: DefaultMessageStore) -> None:
    """Before the check a receive took the message and the revive pass failed for good on the retry topic's name
    (over 127 bytes): the message never came back and every later revive pass failed."""
    topic = "t" * 100
    produce(store, topic, ["kept"], queues=1)
    with pytest.raises(TopicInvalid, match="retry topic"):
        store.group_consumption.receive("g" * 30, topic, 1, INVISIBLE_MS)
    with pytest.raises(TopicInvalid, match="248 bytes"):
        store.group_consumption.receive("g" * 120, "t" * 120, 1, INVISIBLE_MS)
    assert bodies(receive_until(store, topic, 1)) == ["kept"]  # GROUP (short) still takes it: nothing was taken


def test_handles_expire_and_cannot_be_used_for_another_group(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["x"], queues=1)
    (p,) = store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS)
    assert store.group_consumption.ack("other", "orders", [p.handle]) == [AckOutcome.HANDLE_INVALID]
    assert store.group_consumption.ack(GROUP, "other", [p.handle]) == [AckOutcome.HANDLE_INVALID]
    assert store.group_consumption.ack(GROUP, "orders", ["junk"]) == [AckOutcome.HANDLE_INVALID]
    time.sleep(INVISIBLE_MS / 1000)  # the invisible time must pass
    assert store.group_consumption.ack(GROUP, "orders", [p.handle]) == [AckOutcome.HANDLE_EXPIRED]


def test_a_longer_invisible_time_keeps_a_message_away_and_the_new_handle_acks_it(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["slow"], queues=1)
    (p,) = store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS)
    outcome, handle, until = store.group_consumption.change_invisible(GROUP, "orders", p.handle, 3_000)
    assert outcome is AckOutcome.OK and handle is not None and until >= p.invisible_until_ms
    time.sleep((INVISIBLE_MS + 300) / 1000)  # past the first invisible time and its margin
    assert store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS) == []
    assert store.group_consumption.ack(GROUP, "orders", [p.handle]) == [AckOutcome.HANDLE_EXPIRED]  # its old time passed
    assert store.group_consumption.ack(GROUP, "orders", [handle]) == [AckOutcome.OK]
    assert store.group_consumption.stats()["revived"] == 0


def test_a_shorter_invisible_time_redelivers_sooner(store: DefaultMessageStore) -> None:
    produce(store, "orders", ["soon"], queues=1)
    (p,) = store.group_consumption.receive(GROUP, "orders", 1, 60_000)
    outcome, _, _ = store.group_consumption.change_invisible(GROUP, "orders", p.handle, 100)
    assert outcome is AckOutcome.OK
    again = receive_until(store, "orders", 1)
    assert bodies(again) == ["soon"] and again[0].reconsume_times == 1


def test_fifo_group_gives_a_queue_s_next_message_only_after_the_previous_is_acked(store: DefaultMessageStore) -> None:
    store.group_consumption.put_group(GROUP, max_reconsume_times=16, fifo=True)
    produce(store, "orders", ["1", "2", "3"], queues=1)
    first = store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS)
    assert bodies(first) == ["1"]
    assert store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS) == []  # queue locked by "1"
    time.sleep(INVISIBLE_MS / 1000)  # the invisible time must pass
    again = receive_until(store, "orders", 1)  # "1" again, not "2": order holds
    assert bodies(again) == ["1"] and again[0].reconsume_times == 1
    assert store.group_consumption.ack(GROUP, "orders", [first[0].handle]) == [AckOutcome.HANDLE_EXPIRED]
    assert store.group_consumption.ack(GROUP, "orders", [again[0].handle]) == [AckOutcome.OK]
    nxt = store.group_consumption.receive(GROUP, "orders", 2, INVISIBLE_MS)
    assert bodies(nxt) == ["2", "3"]
    assert store.group_consumption.ack(GROUP, "orders", [nxt[1].handle]) == [AckOutcome.OK]
    assert store.query_offset(GROUP, "orders", 0) == 1  # "3" acked, "2" not: the offset waits at "2"
    assert store.group_consumption.ack(GROUP, "orders", [nxt[0].handle]) == [AckOutcome.OK]
    assert store.query_offset(GROUP, "orders", 0) == 3


def test_fifo_message_dead_lettered_after_its_attempts(store: DefaultMessageStore) -> None:
    store.group_consumption.put_group(GROUP, max_reconsume_times=1, fifo=True)
    produce(store, "orders", ["bad", "good"], queues=1)
    assert bodies(store.group_consumption.receive(GROUP, "orders", 1, INVISIBLE_MS)) == ["bad"]
    time.sleep(INVISIBLE_MS / 1000)  # the invisible time must pass
    assert bodies(receive_until(store, "orders", 1)) == ["bad"]
    time.sleep(INVISIBLE_MS / 1000)  # the invisible time must pass
    got = receive_until(store, "orders", 1)
    assert bodies(got) == ["good"]
    assert store.get_max_offset_in_queue(dlq_topic(GROUP), 0) == 1


def test_records_go_to_the_revive_topic_and_survive_a_reopen(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "store"), pop_ack_margin_ms=50, pop_revive_interval_ms=10, pop_revive_queue_num=2)
    s = open_store(cfg)
    produce(s, "orders", ["a", "b"], queues=1)
    got = s.group_consumption.receive(GROUP, "orders", 2, 1_500)
    assert s.group_consumption.ack(GROUP, "orders", [got[0].handle]) == [AckOutcome.OK]
    revive = revive_topic("DefaultCluster")
    # One checkpoint, one ack: timer messages due at their revive time (in the timer until then), in the
    # timer's queue once the next dispatch pass reached them (the store's own records are dispatched lazily).
    wait_dispatched(s)
    in_queues = sum(s.get_max_offset_in_queue(revive, q) for q in range(2))
    status = s.timer_status()
    assert status is not None
    assert in_queues + status["pending"] == 2
    s.shutdown()
    s = open_store(cfg)
    try:
        again = receive_until(s, "orders", 1)  # "b" after its invisible time; "a" was acked before the restart
        assert bodies(again) == ["b"] and again[0].reconsume_times == 1
        assert s.group_consumption.ack(GROUP, "orders", [again[0].handle]) == [AckOutcome.OK]
    finally:
        s.shutdown()


def test_messages_in_flight_are_held_in_files_not_in_the_revive_service(store: DefaultMessageStore) -> None:
    """Checkpoints are timer messages due at their revive time: until then the revive service holds
    none of them, however many messages are in flight."""
    store.create_or_update_topic("bulk", 4)
    for first in range(0, 4_000, 100):
        batch = [build_message("bulk", b"x", q) for q in range(4) for _ in range(25)]
        assert store.put_messages(batch).ok, first
    taken = 0
    deadline = time.monotonic() + 30
    while taken < 4_000:
        assert time.monotonic() < deadline
        taken += len(store.group_consumption.receive(GROUP, "bulk", 32, 600_000))
    time.sleep(0.2)  # several revive passes
    stats = store.group_consumption.stats()
    assert stats["revive_in_memory"] == 0 and stats["revived"] == 0
    status = store.timer_status()
    assert status is not None and status["pending"] >= 4_000 // 32


def test_a_fifo_batch_stays_invisible_across_a_reopen(tmp_path: Path) -> None:
    cfg = small_config(str(tmp_path / "store"), pop_ack_margin_ms=50, pop_revive_interval_ms=10)
    s = open_store(cfg)
    try:
        s.group_consumption.put_group(GROUP, max_reconsume_times=16, fifo=True)
        produce(s, "orders", ["1", "2"], queues=1)
        (first,) = s.group_consumption.receive(GROUP, "orders", 1, 1_500)
    finally:
        s.shutdown()  # persists the order book
    s = open_store(cfg)
    try:
        assert s.group_consumption.receive(GROUP, "orders", 1, 1_500) == []  # "1" is still invisible, so the queue waits
        assert s.group_consumption.ack(GROUP, "orders", [first.handle]) == [AckOutcome.OK]  # its handle still acks
        assert bodies(s.group_consumption.receive(GROUP, "orders", 1, 1_500)) == ["2"]
    finally:
        s.shutdown()
