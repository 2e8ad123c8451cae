"""Timer messages on a real store over real files: precision (on a FakeClock), past times, DELAY_TOO_LONG, delay
levels unchanged, rolls beyond a small wheel, properties kept, restarts, a torn timer log tail."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, cast

from core import FakeClock
from store import SCHEDULE_TOPIC, DefaultMessageStore, MessageStoreConfig, PutRefusal, TimerStatus, build_message, deliver_at
from store.timer.timer_log import UNIT_SIZE
from tests.store.conftest import open_store, small_config, wait_dispatched
from tests.waiting import wait_for

PRECISION_MS = 100


def timer_config(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {
        "timer_wheel_slots": 1024,
        "timer_roll_window_slots": 30,  # 3 s: a longer delay rolls
        "mapped_file_size_timer_log_bytes": 4096,  # 78 units a file: tests cross files
        "timer_flush_interval_ms": 50,
    }
    values.update(overrides)
    return small_config(root, **values)


def wait_delivered(
    store: DefaultMessageStore,
    topic: str,
    n: int,
    timeout_s: float = 15.0,
    queue_id: int = 0,
) -> list[dict[str, Any]]:
    wait_for(lambda: store.get_max_offset_in_queue(topic, queue_id) >= n, timeout_s, f"{n} messages delivered to {topic}/{queue_id}")
    cq = store.find_consume_queue(topic, queue_id)
    assert cq is not None
    out: list[dict[str, Any]] = []
    for i in range(cq.get_max_offset_in_queue()):
        entry = cq.read_entry(i)
        assert entry is not None
        msg = store.look_message_by_offset(entry[0])
        assert msg is not None
        out.append(msg)
    return out


def started_on(clock: FakeClock, root: str) -> DefaultMessageStore:
    store = DefaultMessageStore(timer_config(root), clock=clock)
    store.load()
    store.start()
    return store


def slot_of(due: int) -> int:
    """The wheel slot a delivery time falls in: its end is the first multiple of the precision at or after it."""
    return due - due % PRECISION_MS - (PRECISION_MS if due % PRECISION_MS == 0 else 0)


def test_a_message_is_delivered_within_the_precision_not_a_level(tmp_path: Path) -> None:
    """On a FakeClock, so that the timing is the store's decision, not the scheduler's: the slot is
    left while the clock is before its end and delivered once the clock reaches it."""
    clock = FakeClock()
    store = started_on(clock, str(tmp_path / "s"))
    try:
        due = clock.now_ms() + 1500
        msg = deliver_at(build_message("T", b"soon", 0, properties={"user": "kept"}), due)
        result = store.put_message(msg)
        assert result.ok and msg.topic == "rmq_sys_wheel_timer"
        slot = slot_of(due)
        slot_end = slot + PRECISION_MS
        assert due <= slot_end < due + PRECISION_MS
        clock.set_ms(slot_end - 1)
        wait_for(
            lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] == 1,
            what="the message never reached the wheel",
        )
        wait_for(
            lambda: cast("TimerStatus", store.timer_status())["read_time_ms"] == slot,
            what="the dequeue service never reached the slot",
        )
        assert store.get_max_offset_in_queue("T", 0) == 0  # 1 ms before the slot's end: still waiting
        clock.set_ms(slot_end)
        [got] = wait_delivered(store, "T", 1)
        props = got["properties"]
        assert props["user"] == "kept" and props["TIMER_DELIVER_MS"] == str(due) and props["UNIQ_KEY"] == msg.properties["UNIQ_KEY"]
        assert int(props["TIMER_OUT_MS"]) == slot and int(props["TIMER_DEQUEUE_MS"]) == slot_end
        # Kept, as RocketMQ 5's TimerMessageStore.convertMessage stores the delivered copy.
        assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("T", "0")
        assert {"TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"} <= set(props)
        # The copy is readable before the dequeue service counts it: the counters follow.
        wait_for(lambda: cast("TimerStatus", store.timer_status())["delivered"] == 1, what="the delivery was never counted")
        status = store.timer_status()
        assert status is not None
        assert status["pending"] == 0 and status["lateness"]["count"] == 1 and status["lateness"]["max_ms"] == slot_end - due
        # The delivered copy went to its topic as it was: not to the timer topic again.
        assert store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0) == 1 and store.get_max_offset_in_queue("T", 0) == 1
    finally:
        store.shutdown()


def test_past_times_deliver_at_once_and_too_long_is_refused(tmp_path: Path) -> None:
    store = open_store(timer_config(str(tmp_path / "s")))
    try:
        past = deliver_at(build_message("T", b"p", 0), int(time.time() * 1000) - 5_000)
        assert store.put_message(past).items[0].logics_offset == 0 and past.topic == "T"
        too_long = build_message("T", b"x", 0, properties={"TIMER_DELAY_MS": str(3 * 86_400_000 + 1)})
        refused = store.put_message(too_long)
        assert not refused.ok and refused.refusal is PutRefusal.DELAY_TOO_LONG
        bad = store.put_message(build_message("T", b"x", 0, properties={"TIMER_DELAY_SEC": "soon"}))
        assert bad.refusal is PutRefusal.TIMER_INVALID
        assert store.get_max_offset_in_queue("T", 0) == 1
    finally:
        store.shutdown()


def test_delay_levels_are_unchanged_and_win_over_timer_properties(tmp_path: Path) -> None:
    """On a FakeClock (the schedule service's time; store times stay the wall clock's): a level-1 message
    asking for a 60 s timer as well is a level-1 delay, due 1 s after its store time, and not a timer."""
    clock = FakeClock()
    store = started_on(clock, str(tmp_path / "s"))
    try:
        msg = build_message("T", b"lvl", 0, delay_level=1, properties={"TIMER_DELAY_MS": "60000"})
        assert store.put_message(msg).ok and msg.topic == SCHEDULE_TOPIC
        assert store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0) == 0
        status = store.timer_status()
        assert status is not None and status["pending"] == 0
        wait_for(lambda: store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1, what="the delayed message was never dispatched")
        cq = store.find_consume_queue(SCHEDULE_TOPIC, 0)
        entry = cq.read_entry(0) if cq is not None else None
        stored = store.look_message_by_offset(entry[0]) if entry is not None else None
        assert entry is not None and stored is not None
        due = entry[2]  # the entry's tags code: the level's due time
        assert due == stored["store_timestamp"] + 1_000 and due < clock.now_ms() + 60_000
        clock.set_ms(due - 1)
        store.schedule_service.scan_once()  # a scan 1 ms before the due time: it waits
        assert store.get_max_offset_in_queue("T", 0) == 0 and store.schedule_status()["delivered"] == 0
        clock.set_ms(due)
        store.schedule_service.scan_once()
        [got] = wait_delivered(store, "T", 1)
        assert got["body"] == b"lvl" and "TIMER_DELAY_MS" not in got["properties"]
        assert store.schedule_status()["delivered"] == 1
        assert store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0) == 0
        status = store.timer_status()
        assert status is not None and status["pending"] == 0
    finally:
        store.shutdown()


def test_delays_beyond_the_wheel_window_roll_and_arrive_on_time(tmp_path: Path) -> None:
    """On a FakeClock: a delivery 5 s ahead, past the 3 s roll window, rolls once at the window's end
    (its unit goes round the timer topic again) and is delivered at its slot's end, not 1 ms before."""
    clock = FakeClock()
    store = started_on(clock, str(tmp_path / "s"))
    try:
        now = clock.now_ms()
        due = now + 5_000
        assert store.put_message(deliver_at(build_message("T", b"far", 0), due)).ok
        wait_for(
            lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] == 1,
            what="the message never reached the wheel",
        )
        # 2 s or more past the window: the roll unit goes to the window's end (timer_message_store.enqueue).
        roll_slot = now - now % PRECISION_MS + 30 * PRECISION_MS
        status = store.timer_status()
        assert status is not None and status["next_due_ms"] == roll_slot + PRECISION_MS
        clock.set_ms(roll_slot + PRECISION_MS - 1)
        wait_for(
            lambda: cast("TimerStatus", store.timer_status())["read_time_ms"] == roll_slot,
            what="the dequeue service never reached the roll slot",
        )
        status = store.timer_status()
        assert status is not None and status["rolled"] == 0
        clock.set_ms(roll_slot + PRECISION_MS)
        wait_for(
            lambda: (s := cast("TimerStatus", store.timer_status()))["rolled"] == 1 and s["pending_in_wheel"] == 1,
            what="the roll never came back",
        )
        slot = slot_of(due)
        slot_end = slot + PRECISION_MS
        clock.set_ms(slot_end - 1)
        wait_for(
            lambda: cast("TimerStatus", store.timer_status())["read_time_ms"] == slot,
            what="the dequeue service never reached the slot",
        )
        assert store.get_max_offset_in_queue("T", 0) == 0  # 1 ms before the slot's end: still waiting
        clock.set_ms(slot_end)
        [got] = wait_delivered(store, "T", 1)
        props = got["properties"]
        assert props["TIMER_ROLL_TIMES"] == "1" and int(props["TIMER_OUT_MS"]) == slot and int(props["TIMER_DEQUEUE_MS"]) == slot_end
        wait_for(lambda: cast("TimerStatus", store.timer_status())["delivered"] == 1, what="the delivery was never counted")
        status = store.timer_status()
        assert status is not None
        assert status["rolled"] == 1 and status["pending"] == 0
        assert status["lateness"]["count"] == 1 and status["lateness"]["max_ms"] == slot_end - due
    finally:
        store.shutdown()


def test_many_timers_cross_timer_log_files_and_survive_a_clean_restart(tmp_path: Path) -> None:
    config = timer_config(str(tmp_path / "s"))
    store = open_store(config)
    due = int(time.time() * 1000) + 2_500
    keys = []
    for i in range(200):
        msg = deliver_at(build_message("T", b"m%d" % i, i % 2), due + (i % 7) * 50)
        assert store.put_message(msg).ok
        keys.append(msg.properties["UNIQ_KEY"])
    wait_for(lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] >= 200, 5, "the messages to reach the wheel")
    status = store.timer_status()
    assert status is not None and status["pending_in_wheel"] == 200
    store.shutdown()
    assert len([n for n in os.listdir(tmp_path / "s" / "timerlog")]) >= 2
    store = open_store(config)
    try:
        status = store.timer_status()
        assert status is not None and status["pending"] == 200
        got = wait_delivered(store, "T", 100, queue_id=0) + wait_delivered(store, "T", 100, queue_id=1)
        wait_for(lambda: cast("TimerStatus", store.timer_status())["pending"] == 0, what="nothing left to deliver")
        wait_dispatched(store)  # a duplicate delivery would be in the queues now
        got = wait_delivered(store, "T", 100, queue_id=0) + wait_delivered(store, "T", 100, queue_id=1)
        assert sorted(m["properties"]["UNIQ_KEY"] for m in got) == sorted(keys)
    finally:
        store.shutdown()


def test_a_torn_timer_log_tail_is_cut_and_its_messages_enqueued_again(tmp_path: Path) -> None:
    config = timer_config(str(tmp_path / "s"))
    store = open_store(config)
    due = int(time.time() * 1000) + 3_000
    keys = []
    for i in range(20):
        msg = deliver_at(build_message("T", b"m%d" % i, 0), due)
        store.put_message(msg)
        keys.append(msg.properties["UNIQ_KEY"])
    wait_for(lambda: cast("TimerStatus", store.timer_status())["pending_in_wheel"] >= 20, 5, "the messages to reach the wheel")
    store.shutdown()
    # Tear the last three units: a half-written unit and garbage after it.
    log_dir = tmp_path / "s" / "timerlog"
    last = sorted(os.listdir(log_dir))[-1]
    path = log_dir / last
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        end = 20 * UNIT_SIZE
        data[end - 3 * UNIT_SIZE + 10 : end] = b"\xff" * (3 * UNIT_SIZE - 10)
        f.seek(0)
        f.write(data)
    os.unlink(tmp_path / "s" / "abort") if (tmp_path / "s" / "abort").exists() else None
    store = open_store(config)
    try:
        got = wait_delivered(store, "T", 20)
        wait_for(lambda: cast("TimerStatus", store.timer_status())["pending"] == 0, what="nothing left to deliver")
        wait_dispatched(store)  # a duplicate delivery would be in the queues now
        got = wait_delivered(store, "T", 20)
        assert sorted(m["properties"]["UNIQ_KEY"] for m in got) == sorted(keys)
    finally:
        store.shutdown()
