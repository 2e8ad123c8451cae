"""Idempotent produce in the store (store/put/dedup_hook.py, store/put/dedup_window.py): a producer's batch
whose dedup ids were seen within dedup_window_s stores nothing and is answered with the first ids."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from core import FakeClock
from store import (
    DEDUP_PROPERTY,
    DefaultMessageStore,
    DuplicateItem,
    PutBatch,
    PutMessageResult,
    PutMessageStatus,
    PutRefusal,
    build_message,
    pack_batch,
)
from store.codec.message import encode_properties
from tests.store.conftest import small_config, wait_dispatched

TOPIC = "Orders"


def keyed(body: bytes, dedup_id: str | None, queue_id: int = 0, **fields: Any) -> PutBatch:
    props = {DEDUP_PROPERTY: dedup_id} if dedup_id is not None else None
    return PutBatch.of([build_message(TOPIC, body, queue_id, properties=props, **fields)], dedup=True)


def open_at(root: str, clock: FakeClock | None = None, **overrides: object) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(root, **overrides), clock=clock)
    store.load()
    store.start()
    return store


def first_duplicate(result: PutMessageResult) -> DuplicateItem:
    """The first item of a put answered as a duplicate: the first ids, and where they went."""
    item = result.items[0]
    assert isinstance(item, DuplicateItem), item
    return item


def test_a_seen_id_is_answered_with_the_first_ids_and_stores_nothing(tmp_path: Path) -> None:
    store = open_at(str(tmp_path / "s"))
    try:
        first = store.put(keyed(b"one", "order-1", queue_id=1)).result()
        assert first.ok and not first.duplicate
        end = store.commit_log_max_offset()
        again = store.put(keyed(b"one again", "order-1", queue_id=2)).result()
        assert again.ok and again.duplicate and store.commit_log_max_offset() == end
        (item,) = again.items
        assert isinstance(item, DuplicateItem)
        assert (item.wrote_offset, item.logics_offset, item.queue_id) == (first.items[0].wrote_offset, 0, 1)
        assert item.msg_id == first.items[0].msg_id and not item.moved
        stored = store.look_message_by_offset(item.wrote_offset)
        assert stored is not None and item.uniq_key == stored["properties"]["UNIQ_KEY"]
        assert stored["properties"][DEDUP_PROPERTY] == "order-1" and "order-1" in stored["properties"]["KEYS"].split()
        # Per topic: the same id on another topic is a new message; a put without dedup is never checked.
        other = PutBatch.of([build_message("Other", b"x", 0, properties={DEDUP_PROPERTY: "order-1"})], dedup=True)
        assert not store.put(other).result().duplicate
        assert not store.put(PutBatch.of([build_message(TOPIC, b"x", 0, properties={DEDUP_PROPERTY: "order-1"})])).result().duplicate
    finally:
        store.shutdown()


def test_an_id_expires_after_the_window(tmp_path: Path) -> None:
    clock = FakeClock(now_ms=1_800_000_000_000)
    store = open_at(str(tmp_path / "s"), clock, dedup_window_s=5)
    try:
        assert not store.put(keyed(b"a", "k")).result().duplicate
        clock.advance_ms(4_999)
        assert store.put(keyed(b"a", "k")).result().duplicate
        clock.advance_ms(2)
        later = store.put(keyed(b"a", "k")).result()
        assert later.ok and not later.duplicate  # stored again: the window passed
        assert store.put(keyed(b"a", "k")).result().duplicate  # and remembered from now on
    finally:
        store.shutdown()


def test_concurrent_puts_of_one_id_store_it_once(tmp_path: Path) -> None:
    store = open_at(str(tmp_path / "s"))
    results = []
    start = threading.Barrier(8)

    def put(i: int) -> None:
        start.wait()
        for round_ in range(20):
            results.append(store.put(keyed(f"{i}".encode(), f"race-{round_}")).result())

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = [r for r in results if r.ok and not r.duplicate]
        assert len(stored) == 20, "each id is stored exactly once"
        assert all(r.ok or r.refusal is PutRefusal.DEDUP_PENDING for r in results)
        wait_dispatched(store)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 20
    finally:
        store.shutdown()


def test_a_refused_put_releases_its_ids(tmp_path: Path) -> None:
    store = open_at(str(tmp_path / "s"))
    try:
        refused = store.put(keyed(b"x" * (9 * 1024), "big")).result()  # over max_message_size_bytes
        assert refused.refusal is PutRefusal.MESSAGE_TOO_LARGE
        stored = store.put(keyed(b"small", "big")).result()
        assert stored.ok and not stored.duplicate
    finally:
        store.shutdown()


def test_batches_all_seen_partial_repeated_and_transactional(tmp_path: Path) -> None:
    store = open_at(str(tmp_path / "s"))
    try:

        def batch(*ids: str | None, group: str | None = None) -> PutBatch:
            msgs = [build_message(TOPIC, b"m", 0, properties={DEDUP_PROPERTY: i} if i else None) for i in ids]
            return PutBatch.of(msgs, producer_group=group, dedup=True)

        first = store.put(batch("a", "b", "c")).result()
        assert first.ok and not first.duplicate and len(first.items) == 3
        end = store.commit_log_max_offset()
        again = store.put(batch("c", "a", "b")).result()
        assert again.duplicate and [i.wrote_offset for i in again.items] == [first.items[k].wrote_offset for k in (2, 0, 1)]
        assert store.put(batch("a", "new")).result().refusal is PutRefusal.DEDUP_PARTIAL
        assert store.put(batch("a", None)).result().refusal is PutRefusal.DEDUP_PARTIAL
        assert store.put(batch("x", "x")).result().refusal is PutRefusal.DEDUP_ID_INVALID
        assert store.put(batch("has space")).result().refusal is PutRefusal.DEDUP_ID_INVALID
        assert store.put(batch("t1", group="pg")).result().refusal is PutRefusal.DEDUP_ID_INVALID
        assert store.commit_log_max_offset() == end
        assert not store.put(batch("new")).result().duplicate  # the partial put reserved nothing
    finally:
        store.shutdown()


def test_the_bound_refuses_new_ids_and_never_forgets_unexpired_ones(tmp_path: Path) -> None:
    clock = FakeClock(now_ms=1_800_000_000_000)
    store = open_at(str(tmp_path / "s"), clock, dedup_max_keys=3, dedup_window_s=10)
    try:
        for i in range(3):
            assert store.put(keyed(b"x", f"k{i}")).result().ok
        full = store.put(keyed(b"x", "k3")).result()
        assert (full.status, full.refusal) == (PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DEDUP_WINDOW_FULL)
        assert store.put(keyed(b"x", "k0")).result().duplicate  # still guarded
        assert store.put(PutBatch.of([build_message(TOPIC, b"no id", 0)], dedup=True)).result().ok  # puts without ids go on
        clock.advance_ms(10_001)
        assert store.put(keyed(b"x", "k3")).result().ok
    finally:
        store.shutdown()


def test_encoded_and_fields_batches_carry_the_id(tmp_path: Path) -> None:
    store = open_at(str(tmp_path / "s"))
    try:
        data = pack_batch(
            [(b"b0", encode_properties({DEDUP_PROPERTY: "e0", "KEYS": "mine"}), 0), (b"b1", encode_properties({DEDUP_PROPERTY: "e1"}), 0)]
        )
        first = store.put(PutBatch.of_encoded(TOPIC, 1, store.check_batch(data), dedup=True)).result()
        assert first.ok and not first.duplicate and [i.logics_offset for i in first.items] == [0, 1]
        stored = store.look_message_by_offset(first.items[0].wrote_offset)
        assert stored is not None and stored["properties"]["KEYS"] == "mine e0"
        again = store.put(PutBatch.of_encoded(TOPIC, 1, store.check_batch(data), dedup=True)).result()
        assert again.duplicate and [i.wrote_offset for i in again.items] == [i.wrote_offset for i in first.items]

        class Fields:
            def __init__(self, dedup_id: str) -> None:
                self.body, self.tags, self.keys, self.properties, self.msg_id, self.dedup_id = b"f", None, None, None, None, dedup_id

        fields = PutBatch.of_fields(TOPIC, 2, [Fields("f0")], dedup=True)
        assert store.put(fields).result().ok and fields.uniq_keys
        dup = store.put(PutBatch.of_fields(TOPIC, 2, [Fields("f0")], dedup=True)).result()
        assert dup.duplicate and first_duplicate(dup).uniq_key == fields.uniq_keys[0]
    finally:
        store.shutdown()


def test_a_delayed_message_is_found_moved_and_after_a_restart_through_the_index(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    store = open_at(root)
    try:
        assert store.dedup_window.lookup_until_ms == 0  # a log without messages: no index lookups
        delayed = store.put(keyed(b"later", "d1", queue_id=1, delay_level=3)).result()
        plain = store.put(keyed(b"now", "p1", queue_id=2)).result()
        dup = store.put(keyed(b"later", "d1", queue_id=1)).result()
        assert dup.duplicate and first_duplicate(dup).moved and first_duplicate(dup).queue_id == 1
        wait_dispatched(store)
    finally:
        store.shutdown()
    store = open_at(root)  # a new process's memory: the ids come from the index
    try:
        assert store.dedup_window.lookup_until_ms > store.now_ms()
        again = store.put(keyed(b"now", "p1", queue_id=2)).result()
        assert again.duplicate and again.items[0].wrote_offset == plain.items[0].wrote_offset
        assert again.items[0].logics_offset == 0 and again.items[0].msg_id == plain.items[0].msg_id
        moved = store.put(keyed(b"later", "d1", queue_id=1)).result()
        assert moved.duplicate and moved.items[0].wrote_offset == delayed.items[0].wrote_offset
        assert first_duplicate(moved).moved and first_duplicate(moved).queue_id == 1
    finally:
        store.shutdown()
