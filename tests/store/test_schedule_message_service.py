"""ScheduleMessageService: delay levels, delivery back to the real topic, persistence across restarts.

Deterministic tests drive scans with `scan_once()` and a FakeClock frozen before the puts
(store times come from the real clock, due times follow them); the one real-time test
asserts order and eventual delivery only, never timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import FakeClock
from store import (
    SCHEDULE_TOPIC,
    DefaultMessageStore,
    GetMessageStatus,
    MessageInner,
    MessageStoreConfig,
    TagFilter,
    build_message,
    tags_hash,
)
from store.codec.stored_copy import born_host_bytes
from store.errors import MetadataCorrupt
from store.schedule.delay_offset_table import DelayOffsetTable
from store.schedule.schedule_message_service import PUT_RETRY_DELAY_MS, level_for_delay_ms
from tests.store.conftest import small_config, wait_dispatched
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOUR_MS = 3_600_000


class Probe:
    """A disk-usage probe whose answer the test sets."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio

    def __call__(self, path: str) -> float:
        return self.ratio


def schedule_config(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {
        "message_delay_level": "1s 2s",
        "clean_resource_interval_ms": HOUR_MS,  # cleanup passes only when a test runs one
        "flush_delay_offset_interval_ms": HOUR_MS,  # offsets persisted at shutdown only, unless a test says otherwise
    }
    values.update(overrides)
    return small_config(root, **values)


class Opened:
    """Stores opened by a test; every one is shut down at the end."""

    def __init__(self) -> None:
        self.stores: list[DefaultMessageStore] = []

    def __call__(self, config: MessageStoreConfig, clock: FakeClock | None = None, probe: Probe | None = None) -> DefaultMessageStore:
        store = DefaultMessageStore(config, clock=clock, disk_usage_probe=probe)
        self.stores.append(store)
        store.load()
        store.start()
        return store


@pytest.fixture
def opened() -> Iterator[Opened]:
    o = Opened()
    try:
        yield o
    finally:
        for store in o.stores:
            store.shutdown()


def queue_messages(store: DefaultMessageStore, topic: str, queue_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        with store.get_message("g", topic, queue_id, offset, 32) as res:
            if res.status is not GetMessageStatus.FOUND:
                return out
            out.extend(res.decode())
            offset = res.next_begin_offset


def put_delayed(store: DefaultMessageStore, topic: str, queue_id: int, level: int, body: bytes, key: str) -> None:
    r = store.put_message(build_message(topic, body, queue_id, tags="TagA", keys=[key], properties={"p": "v"}, delay_level=level))
    assert r.ok, r


# Pure parts ------------------------------------------------------------------------------


def test_level_for_delay_ms_picks_the_smallest_level_not_shorter() -> None:
    levels = [1_000, 5_000, 60_000]
    assert level_for_delay_ms(levels, 0) == 0
    assert level_for_delay_ms(levels, -3) == 0
    assert level_for_delay_ms(levels, 1) == 1
    assert level_for_delay_ms(levels, 1_000) == 1
    assert level_for_delay_ms(levels, 1_001) == 2
    assert level_for_delay_ms(levels, 5_000) == 2
    assert level_for_delay_ms(levels, 59_999) == 3
    assert level_for_delay_ms(levels, 60_001) is None


def test_born_host_round_trips_and_odd_text_falls_back_to_loopback() -> None:
    assert born_host_bytes("10.1.2.3:4567") == bytes([10, 1, 2, 3]) + (4567).to_bytes(4, "big")
    assert born_host_bytes("nonsense") == b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    assert born_host_bytes("1.2.3.999:1") == b"\x7f\x00\x00\x01\x00\x00\x00\x00"


def test_delay_offset_table_refuses_bad_files(tmp_path: Path) -> None:
    table = DelayOffsetTable(str(tmp_path))
    table.load()
    assert table.get(1) == 0
    table.set(1, 7)
    assert table.persist_if_dirty() is True
    assert table.persist_if_dirty() is False  # unchanged: not written again
    doc = json.loads((tmp_path / "delayOffset.json").read_text())
    assert doc["offsetTable"] == {"1": 7} and doc["dataVersion"]["counter"] == 1
    for bad in ({"offsetTable": {"x": 1}}, {"offsetTable": {"1": -1}}, {"offsetTable": {"0": 1}}, {"offsetTable": {"1": "2"}}, [1]):
        (tmp_path / "delayOffset.json").write_text(json.dumps(bad))
        with pytest.raises(MetadataCorrupt):
            DelayOffsetTable(str(tmp_path)).load()


# Delivery --------------------------------------------------------------------------------


def test_delayed_put_waits_in_schedule_topic_until_due_then_reaches_its_queue(tmp_path: Path, opened: Opened) -> None:
    clock = FakeClock()
    store = opened(schedule_config(str(tmp_path / "s")), clock)
    born = int(time.time() * 1000) - 5
    msg = build_message("Orders", b"pay later", 2, tags="TagA", keys=["order-1"], properties={"p": "v"}, delay_level=2, born_timestamp=born)
    uniq = msg.properties["UNIQ_KEY"]
    assert store.put_message(msg).ok
    wait_dispatched(store)

    assert store.get_max_offset_in_queue("Orders", 2) == 0
    [scheduled] = queue_messages(store, SCHEDULE_TOPIC, 1)
    assert scheduled["properties"]["REAL_TOPIC"] == "Orders"
    assert scheduled["properties"]["REAL_QID"] == "2"
    assert scheduled["properties"]["DELAY"] == "2"
    due = scheduled["store_timestamp"] + 2_000
    cq = store.find_consume_queue(SCHEDULE_TOPIC, 1)
    assert cq is not None
    entry = cq.read_entry(0)
    assert entry is not None and entry[2] == due

    store.schedule_service.scan_once()
    assert store.get_max_offset_in_queue("Orders", 2) == 0, "delivered before its due time"
    [level1, level2] = store.schedule_status()["levels"]
    assert level1["waiting"] == 0
    assert (level2["level"], level2["delay"], level2["delay_ms"], level2["waiting"]) == (2, "2s", 2_000, 1)
    assert level2["oldest_due_in_ms"] == due - clock.now_ms()

    clock.set_ms(due)
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Orders", 2) == 1, 10, "the delayed messages delivered")
    [delivered] = queue_messages(store, "Orders", 2)
    assert delivered["body"] == b"pay later"
    # ScheduleMessageService.messageTimeup stores the copy with DELAY, REAL_TOPIC and REAL_QID.
    assert delivered["properties"] == {
        "TAGS": "TagA",
        "KEYS": "order-1",
        "UNIQ_KEY": uniq,
        "p": "v",
        "DELAY": "2",
        "REAL_TOPIC": "Orders",
        "REAL_QID": "2",
    }
    assert delivered["born_timestamp"] == born
    assert delivered["msg_id"] == uniq
    assert [m["body"] for m in store.query_message("Orders", "order-1", 10, 0, 1 << 62)] == [b"pay later"]
    status = store.schedule_status()
    assert status["levels"][1]["waiting"] == 0 and status["levels"][1]["offset"] == 1
    assert status["delivered"] == 1


def test_a_delivered_copy_keeps_its_delay_properties_and_is_delivered_exactly_once(tmp_path: Path, opened: Opened) -> None:
    """The copy carries DELAY, but a put moves only messages without REAL_TOPIC: it is stored in its
    topic once, with its tag's hash as tags code, and the schedule queues get nothing new."""
    clock = FakeClock()
    store = opened(schedule_config(str(tmp_path / "s")), clock)
    put_delayed(store, "Once", 1, 1, b"once", "o1")
    wait_dispatched(store)
    [scheduled] = queue_messages(store, SCHEDULE_TOPIC, 0)
    clock.set_ms(scheduled["store_timestamp"] + 1_000)
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Once", 1) == 1, 10, "the delayed messages delivered")
    for _ in range(3):  # later scans, long after every due time: nothing moves again
        clock.set_ms(clock.now_ms() + 3_600_000)
        store.schedule_service.scan_once()
    wait_dispatched(store)
    assert [store.get_max_offset_in_queue(SCHEDULE_TOPIC, q) for q in (0, 1)] == [1, 0]
    assert store.get_max_offset_in_queue("Once", 1) == 1 and store.schedule_status()["delivered"] == 1
    with store.get_message("g", "Once", 1, 0, 32, TagFilter.parse("TagA")) as res:
        [delivered] = res.decode()
    assert (delivered["properties"]["DELAY"], delivered["properties"]["REAL_TOPIC"], delivered["properties"]["REAL_QID"]) == (
        "1",
        "Once",
        "1",
    )
    cq = store.find_consume_queue("Once", 1)
    assert cq is not None
    entry = cq.read_entry(0)
    assert entry is not None and entry[2] == tags_hash("TagA")  # a tag's code, not a due time

    # Put again as it is stored (what a retry or dead-letter copy does), it is not delayed again.
    again = MessageInner("Once", delivered["body"], 0, dict(delivered["properties"]))
    assert store.put_message(again).ok and again.topic == "Once"
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("Once", 0) == 1 and store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1


def test_level_above_the_highest_is_capped(tmp_path: Path, opened: Opened) -> None:
    store = opened(schedule_config(str(tmp_path / "s")), FakeClock())
    put_delayed(store, "Capped", 0, 99, b"x", "k")
    wait_dispatched(store)
    [scheduled] = queue_messages(store, SCHEDULE_TOPIC, 1)
    assert scheduled["properties"]["DELAY"] == "2"
    assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 0


def test_real_time_delivery_keeps_order_and_wakes_listeners(tmp_path: Path, opened: Opened) -> None:
    store = opened(schedule_config(str(tmp_path / "s")))
    arrivals: list[tuple[str, int, int]] = []
    store.add_message_arriving_listener(lambda topic, qid, after, *_: arrivals.append((topic, qid, after)))
    for i in range(6):
        put_delayed(store, "Later", 0, 2, f"slow-{i}".encode(), f"s{i}")
        put_delayed(store, "Later", 0, 1, f"fast-{i}".encode(), f"f{i}")
    wait_for(lambda: store.get_max_offset_in_queue("Later", 0) == 12, 20, "the delayed messages delivered")
    bodies = [m["body"].decode() for m in queue_messages(store, "Later", 0)]
    # Level 1 (1 s) messages all come before level 2 (2 s) ones, each level in put order.
    assert bodies == [f"fast-{i}" for i in range(6)] + [f"slow-{i}" for i in range(6)]
    assert [a for a in arrivals if a[0] == "Later"] == [("Later", 0, n) for n in range(1, 13)]
    time.sleep(0.3)  # a few more scans: nothing is delivered twice
    assert store.get_max_offset_in_queue("Later", 0) == 12
    assert store.schedule_status()["delivered"] == 12


def test_undeliverable_entry_is_skipped_and_the_level_moves_on(tmp_path: Path, opened: Opened) -> None:
    clock = FakeClock()
    store = opened(schedule_config(str(tmp_path / "s")), clock)
    # Written straight to the schedule topic: no REAL_TOPIC, so it can never be delivered.
    assert store.put_message(build_message(SCHEDULE_TOPIC, b"orphan", 0, properties={"DELAY": "1"})).ok
    put_delayed(store, "Fine", 0, 1, b"good", "g")
    wait_dispatched(store)
    clock.advance_ms(5_000)
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Fine", 0) == 1, 10, "the delayed messages delivered")
    status = store.schedule_status()
    assert status["undeliverable"] == 1 and status["delivered"] == 1
    assert status["levels"][0]["offset"] == 2


def test_refused_delivery_is_retried_without_moving_past_it(tmp_path: Path, opened: Opened) -> None:
    clock = FakeClock()
    probe = Probe(0.10)
    store = opened(schedule_config(str(tmp_path / "s")), clock, probe)
    put_delayed(store, "Held", 1, 1, b"first", "a")
    put_delayed(store, "Held", 1, 1, b"second", "b")
    wait_dispatched(store)
    probe.ratio = 0.95
    store.clean_commit_log_service.run_once()
    assert store.disk_full
    clock.advance_ms(5_000)
    store.schedule_service.scan_once()
    status = store.schedule_status()
    assert status["retries"] == 1 and status["delivered"] == 0
    assert status["levels"][0]["offset"] == 0 and status["levels"][0]["waiting"] == 2
    store.schedule_service.scan_once()  # the level waits PUT_RETRY_DELAY_MS before trying again
    assert store.schedule_status()["retries"] == 1

    probe.ratio = 0.10
    store.clean_commit_log_service.run_once()
    assert not store.disk_full
    clock.advance_ms(PUT_RETRY_DELAY_MS)
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Held", 1) == 2, 10, "the delayed messages delivered")
    assert [m["body"] for m in queue_messages(store, "Held", 1)] == [b"first", b"second"]


def test_scan_bound_stops_one_level_starving_the_others(tmp_path: Path, opened: Opened, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("store.schedule.schedule_message_service.MAX_DELIVERIES_PER_SCAN", 3)
    clock = FakeClock()
    store = opened(schedule_config(str(tmp_path / "s")), clock)
    for i in range(5):
        put_delayed(store, "Many", 0, 1, f"m{i}".encode(), f"k{i}")
    put_delayed(store, "Other", 0, 2, b"o", "o")
    wait_dispatched(store)
    store.schedule_service.shutdown()  # this test drives every scan itself
    clock.advance_ms(10_000)
    wait_ms = store.schedule_service.scan_once()
    assert store.schedule_status()["levels"][0]["offset"] == 3
    assert store.schedule_status()["levels"][1]["offset"] == 1  # level 2 was served in the same scan
    assert wait_ms == 1  # the rest of level 1 is scanned at once
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Many", 0) == 5, 10, "the delayed messages delivered")


# Restarts --------------------------------------------------------------------------------


def test_restart_during_a_delay_delivers_each_message_once(tmp_path: Path, opened: Opened) -> None:
    root = str(tmp_path / "s")
    clock = FakeClock()
    store = opened(schedule_config(root), clock)
    for i in range(3):
        put_delayed(store, "Restart", 0, 1, f"r{i}".encode(), f"k{i}")
    wait_dispatched(store)
    store.schedule_service.scan_once()
    store.shutdown()
    assert not os.path.exists(os.path.join(root, "config", "delayOffset.json")), "nothing was delivered, nothing to persist"

    clock.advance_ms(60_000)  # they fell due while the store was down
    store = opened(schedule_config(root), clock)
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Restart", 0) == 3, 10, "the delayed messages delivered")
    store.shutdown()
    with open(os.path.join(root, "config", "delayOffset.json")) as f:
        assert json.load(f)["offsetTable"] == {"1": 3}

    store = opened(schedule_config(root), clock)
    store.schedule_service.scan_once()
    wait_dispatched(store)
    assert [m["body"] for m in queue_messages(store, "Restart", 0)] == [b"r0", b"r1", b"r2"]
    assert store.schedule_status()["delivered"] == 0


def test_restart_before_the_due_time_still_waits_for_it(tmp_path: Path, opened: Opened) -> None:
    root = str(tmp_path / "s")
    clock = FakeClock()
    store = opened(schedule_config(root, message_delay_level="1s 1h"), clock)
    put_delayed(store, "Hourly", 0, 2, b"in an hour", "h")
    wait_dispatched(store)
    store.shutdown()

    clock.advance_ms(30 * 60_000)
    store = opened(schedule_config(root, message_delay_level="1s 1h"), clock)
    store.schedule_service.scan_once()
    [scheduled] = queue_messages(store, SCHEDULE_TOPIC, 1)
    level = store.schedule_status()["levels"][1]
    assert level["waiting"] == 1
    assert level["oldest_due_in_ms"] == scheduled["store_timestamp"] + HOUR_MS - clock.now_ms()
    assert level["oldest_age_ms"] == clock.now_ms() - scheduled["store_timestamp"]
    assert store.get_max_offset_in_queue("Hourly", 0) == 0

    assert level["oldest_due_in_ms"] is not None
    clock.advance_ms(level["oldest_due_in_ms"])
    store.schedule_service.scan_once()
    wait_for(lambda: store.get_max_offset_in_queue("Hourly", 0) == 1, 10, "the delayed messages delivered")


CRASHING_DELIVERER = textwrap.dedent(
    """
    import os, sys, time
    from store import DefaultMessageStore, build_message
    from core.clock import FakeClock
    from tests.store.test_schedule_message_service import schedule_config
    from tests.store.conftest import wait_dispatched

    clock = FakeClock()
    store = DefaultMessageStore(schedule_config(sys.argv[1]), clock=clock)
    store.load()
    store.start()
    for i in range(3):
        assert store.put_message(build_message("Crash", f"c{i}".encode(), 0, keys=[f"k{i}"], delay_level=1)).ok
    wait_dispatched(store)
    clock.advance_ms(5_000)
    store.schedule_service.scan_once()
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("Crash", 0) == 3
    store.commit_log.flush(0)
    os._exit(0)  # no shutdown: the delivered offsets were never persisted
    """
)


def test_crash_after_delivery_does_not_deliver_again(tmp_path: Path, opened: Opened) -> None:
    root = str(tmp_path / "s")
    proc = subprocess.run([sys.executable, "-c", CRASHING_DELIVERER, root], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not os.path.exists(os.path.join(root, "config", "delayOffset.json"))

    store = opened(schedule_config(root), FakeClock(int(time.time() * 1000) + 60_000))
    assert not store.last_exit_ok
    store.schedule_service.scan_once()
    wait_dispatched(store)
    assert [m["body"] for m in queue_messages(store, "Crash", 0)] == [b"c0", b"c1", b"c2"]
    status = store.schedule_status()
    assert status["deduplicated"] == 3 and status["delivered"] == 0
    assert status["levels"][0]["offset"] == 3
