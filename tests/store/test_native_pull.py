"""The production pull (MessageGetter over the gather kernel) against the Python reference
(store.queue.reference_getter.ReferenceGetter) on random real stores, and what only the production
pull promises: a result holds no mapped file, and no file is unmapped under a pull.

The stores are real: messages put through the store, consume-queue entries overwritten in
their files, damaged commitlog ranges recorded through CommitLog.add_damaged_range, leading
commitlog files deleted and a middle one shut down as the clean service does.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, TagFilter, build_message
from store.codec.message import java_string_hash
from store.native import META
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from store.queue.message_getter import HeldFiles, MessageGetter
from store.queue.reference_getter import ReferenceGetter
from tests.store.conftest import open_store, small_config, wait_dispatched

TOPIC = "P"
TAGS = [None, "a", "b", "Aa", "BB", "\U0001f600"]  # "Aa" and "BB" share a Java hash code
FILTER_TAGS = ["a", "b", "Aa", "BB", "\U0001f600", "none"]
COMMIT_LOG_FILE = 4096
DAMAGE_KINDS = ["random", "past the log", "inside", "wrong size", "negative", "too long", "gap", "another", "across a file end"]


def pull_config(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {
        "mapped_file_size_commit_log_bytes": COMMIT_LOG_FILE,
        "mapped_file_size_consume_queue_bytes": CQ_STORE_UNIT_SIZE * 16,  # pulls end at a queue file's end
        "max_message_size_bytes": 1024,
        "max_properties_size_bytes": 1024,
        "clean_resource_interval_ms": 3_600_000,  # files go only when a test deletes them
        "disk_max_used_space_ratio_percent": 100,
        "disk_clean_forcibly_ratio_percent": 100,
        "disk_warning_ratio_percent": 100,
        # No timer wheel: pulls never read it, and loading a week of slots is most of a store's open.
        "timer_wheel_enable": False,
    }
    values.update(overrides)
    return small_config(root, **values)


@dataclass
class Plan:
    messages: list[tuple[int, str | None, int]]  # queue id, tag, body size
    limits: dict[str, int]
    entry_damage: list[tuple[int, int, str, bytes, int]]  # queue id, entry, kind, random bytes, a number
    range_damage: list[tuple[int, int, int, int]]  # message index and delta of both ends
    deleted_files: int
    shut_file: int | None  # index among the middle files of one that can no longer be read
    window: float  # the memory window as a share of the log


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    messages = draw(
        st.lists(st.tuples(st.integers(0, 1), st.sampled_from(TAGS), st.integers(0, 700) | st.integers(300, 700)), min_size=8, max_size=50)
    )
    limits = {
        "max_transfer_count_on_message_in_memory": draw(st.integers(1, 40)),
        "max_transfer_bytes_on_message_in_memory": draw(st.integers(100, 20_000)),
        "max_transfer_count_on_message_in_disk": draw(st.integers(1, 40)),
        "max_transfer_bytes_on_message_in_disk": draw(st.integers(100, 20_000)),
    }
    damage = st.tuples(
        st.integers(0, 1), st.integers(0, 20), st.sampled_from(DAMAGE_KINDS), st.binary(min_size=20, max_size=20), st.integers(0, 500)
    )
    ranges = st.tuples(st.integers(0, 60), st.integers(-2, 2), st.integers(0, 60), st.integers(-2, 2))
    return Plan(
        messages,
        limits,
        draw(st.lists(damage, min_size=1, max_size=6)),
        draw(st.lists(ranges, max_size=3)),
        draw(st.integers(0, 2)),
        draw(st.none() | st.integers(0, 10)),
        draw(st.floats(0, 1.2)),
    )


def open_pull_store(config: MessageStoreConfig) -> DefaultMessageStore:
    """A store whose get counters move only with the pulls a test makes.

    The pop revive service pulls the revive queues through the same getter every
    `pop_revive_interval_ms`, on its own thread, and its reads count in the store-wide get
    counters; `outcome` tells what one pull added to those counters, so no other thread may
    pull meanwhile. The revive service is stopped; nothing else pulls.
    """
    store = open_store(config)
    assert store.group_consumption.revive_service is not None
    store.group_consumption.revive_service.shutdown()
    return store


def fill(store: DefaultMessageStore, plan: Plan) -> list[tuple[int, int]]:
    """Put the plan's messages; (commitlog offset, size) of each."""
    written = []
    for i, (queue_id, tag, size) in enumerate(plan.messages):
        r = store.put_message(build_message(TOPIC, bytes([i % 256]) * size, queue_id=queue_id, tags=tag))
        assert r.ok, r.status
        written.append((r.items[0].wrote_offset, r.items[0].wrote_bytes))
    wait_dispatched(store)
    return written


def damaged_entry(kind: str, raw: bytes, k: int, entry: tuple[int, int, int], other: tuple[int, int], log_end: int) -> bytes:
    phy, size, code = entry
    size = max(size, 1)  # the entry may be a gap already (damaged twice)
    return {
        "random": raw,
        "past the log": ENTRY.pack(log_end + k, size, code),
        "inside": ENTRY.pack(phy + 1 + k % size, size, code),
        "wrong size": ENTRY.pack(phy, size + 1 + k % 3, code),
        "negative": ENTRY.pack(-1 - k, size, code),
        "too long": ENTRY.pack(phy, 1 << 21, code),
        "gap": bytes(CQ_STORE_UNIT_SIZE),
        "another": ENTRY.pack(other[0], other[1], code),  # a sound entry, of another message
        "across a file end": ENTRY.pack(phy - phy % COMMIT_LOG_FILE + COMMIT_LOG_FILE - 8, size, code),
    }[kind]


def damage(store: DefaultMessageStore, plan: Plan, written: list[tuple[int, int]]) -> None:
    cl = store.commit_log
    log_end = cl.get_max_offset()
    for queue_id, index, kind, raw, k in plan.entry_damage:
        cq = store.find_consume_queue(TOPIC, queue_id)
        if cq is None or index >= cq.get_max_offset_in_queue():
            continue
        entry = cq.read_entry(index)
        assert entry is not None
        mf = cq.mapped_file_queue.find_mapped_file_by_offset(index * CQ_STORE_UNIT_SIZE)
        assert mf is not None
        new = damaged_entry(kind, raw, k, entry, written[k % len(written)], log_end)
        mf.write_at(index * CQ_STORE_UNIT_SIZE - mf.file_from_offset, new)
        event(f"entry damage: {kind}")
    starts = [phy for phy, _ in written] + [log_end]
    for i, da, j, db in plan.range_damage:
        a, b = starts[i % len(starts)] + da, starts[j % len(starts)] + db
        if 0 <= a < b:
            cl.add_damaged_range(a, b)
            event("damaged commitlog range")
    mfq = cl.mapped_file_queue
    if plan.deleted_files and mfq.delete_expired_files_by_time(0, 0, 0, True, plan.deleted_files, int(time.time() * 1000)):
        event("leading commitlog files deleted")
    middle = mfq.mapped_files[1:-1]
    if plan.shut_file is not None and middle:
        middle[plan.shut_file % len(middle)].shutdown(3_600_000)  # refuses readers from now on
        event("a middle commitlog file shut down")


# What a pull answers: status, next begin offset, min and max offsets, the bytes, the queue and commitlog offsets.
Answer = tuple[GetMessageStatus, int, int, int, bytes, list[int], list[int]]
# A drawn pull: queue id, offset, max count, tags.
Pull = tuple[int, int, int, set[str]]


def outcome(
    getter: MessageGetter,
    queue_id: int,
    offset: int,
    max_count: int,
    tag_filter: TagFilter | None,
) -> tuple[Answer, list[int]]:
    """Everything a pull answers, and what it added to the store's counters."""
    stats = getter.stats
    names = ("damaged_queue_entries", "get_found", "get_miss", "get_transferred_messages", "get_transferred_bytes")
    before = [getattr(stats, n) for n in names]
    with getter.get_message("g", TOPIC, queue_id, offset, max_count, tag_filter) as r:
        answer = (r.status, r.next_begin_offset, r.min_offset, r.max_offset, bytes(r.data), r.queue_offsets, r.commitlog_offsets)
    return answer, [getattr(stats, n) - b for n, b in zip(names, before, strict=True)]


def assert_same_pull(
    store: DefaultMessageStore, reference: ReferenceGetter, queue_id: int, offset: int, max_count: int, tags: Collection[str]
) -> int:
    """Compare one pull of both; the next offset."""
    return same_pull(store, reference, queue_id, offset, max_count, tags)[1]


def same_pull(
    store: DefaultMessageStore, reference: ReferenceGetter, queue_id: int, offset: int, max_count: int, tags: Collection[str]
) -> tuple[GetMessageStatus, int]:
    """Compare one pull of both; its status and next offset."""
    tag_filter = TagFilter(frozenset(tags)) if tags else None
    assert store.group_consumption.revive_service is not None
    assert not store.group_consumption.revive_service.is_alive(), "a background pull would count in the compared counters"
    got = outcome(store.getter, queue_id, offset, max_count, tag_filter)
    want = outcome(reference, queue_id, offset, max_count, tag_filter)
    assert got == want, (queue_id, offset, max_count, tags)
    return got[0][:2]


pulls = st.tuples(st.integers(0, 1), st.integers(0, 28), st.integers(1, 40), st.sets(st.sampled_from(FILTER_TAGS), max_size=2))


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # explaining a failure here takes minutes
)
@given(plans(), st.lists(pulls, min_size=1, max_size=8), pulls)
def test_get_message_matches_the_reference(plan: Plan, queries: list[Pull], follow: Pull) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = open_pull_store(pull_config(root, **plan.limits))
        try:
            damage(store, plan, fill(store, plan))
            reference = ReferenceGetter(store.config, store.commit_log, store.stats, store.find_consume_queue)
            # Where "on disk" starts: a share of the log, so both kinds of limits apply in one pull.
            store.getter.memory_window = reference.memory_window = int(plan.window * store.commit_log.get_max_offset())
            for queue_id, offset, max_count, tags in queries:
                event(f"status {same_pull(store, reference, queue_id, offset, max_count, tags)[0].name}")
            queue_id, _, max_count, tags = follow
            offset, end = 0, store.get_max_offset_in_queue(TOPIC, queue_id)
            while offset < end:  # as a consumer does, from the start
                status, next_offset = same_pull(store, reference, queue_id, offset, max_count, tags)
                event(f"status {status.name}")
                assert next_offset > offset
                offset = next_offset
        finally:
            store.shutdown()


def test_a_message_whose_tags_cannot_be_read_is_skipped_alone_and_counted(tmp_path: Path) -> None:
    store = open_store(pull_config(str(tmp_path / "s")))
    try:
        offsets = [store.put_message(build_message(TOPIC, b"m%d" % i, 0, tags="a")).items[0].wrote_offset for i in range(3)]
        wait_dispatched(store)
        mf = store.commit_log.mapped_file_queue.find_mapped_file_by_offset(offsets[1])
        assert mf is not None
        pos = offsets[1] - mf.file_from_offset
        mf.mm[pos + 84 : pos + 88] = (10**6).to_bytes(4, "big")  # BODY length past the message: no TAGS to read
        with store.get_message("g", TOPIC, 0, 0, 32, TagFilter.parse("a")) as r:
            assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == 3
            assert r.queue_offsets == [0, 2] and [m["body"] for m in r.decode()] == [b"m0", b"m2"]
        assert store.stats.damaged_queue_entries == 1
        with store.get_message("g", TOPIC, 0, 0, 32) as r:
            assert r.queue_offsets == [0, 1, 2], "without a tag filter its bytes are served as stored"
    finally:
        store.shutdown()


def test_a_result_owns_its_bytes_in_the_batch_format(tmp_path: Path) -> None:
    store = open_store(pull_config(str(tmp_path / "s")))
    try:
        results = [store.put_message(build_message(TOPIC, b"x" * (100 * i), 0, tags="t")) for i in range(1, 30)]
        wait_dispatched(store)
        with store.get_message("g", TOPIC, 0, 2, 32) as r:
            items = [res.items[0] for res in results[2 : 2 + r.message_count]]
            assert r.message_count > 3, "more than the first message's size guessed: the buffer grew"
            assert r.commitlog_offsets == [i.wrote_offset for i in items] and r.queue_offsets == [i.logics_offset for i in items]
            assert r.data == b"".join(store.get_commit_log_data(i.wrote_offset, i.wrote_bytes) for i in items)
            assert (
                r.to_bytes() == r.data and bytes(r.message(1)) == r.data[items[0].wrote_bytes : items[0].wrote_bytes + items[1].wrote_bytes]
            )
            assert len(r.meta) == META.size * r.message_count and r.buffer_total_size == len(r.data)
        assert (r.message_count, r.data) == (0, b""), "release drops the buffers"
    finally:
        store.shutdown()


def test_a_file_held_by_a_pull_is_not_unmapped_under_it_even_when_forced(tmp_path: Path) -> None:
    store = open_store(pull_config(str(tmp_path / "s")))
    try:
        items = [store.put_message(build_message(TOPIC, b"%04d" % i * 100, 0)).items[0] for i in range(20)]
        wait_dispatched(store)
        first = store.commit_log.mapped_file_queue.mapped_files[0]
        files = HeldFiles(store.commit_log.mapped_file_queue)
        assert files.add(items[0].wrote_offset, items[0].wrote_bytes)
        assert not first.destroy(0), "held: shut down, not deleted"
        assert not files.add(items[1].wrote_offset, items[1].wrote_bytes), "a shut-down file takes no new reader"
        assert first.destroy(0), "forced: unlinked, the mapping left to the pull that reads it"
        ((base, view),) = files.segments
        assert bytes(view[: items[0].wrote_bytes])[88:92] == b"0000" and base == 0
        files.release()
        assert files.segments == []
    finally:
        store.shutdown()


@pytest.mark.timeout(60)
def test_pulls_racing_file_deletion_read_only_whole_messages(tmp_path: Path) -> None:
    store = open_store(pull_config(str(tmp_path / "s"), destroy_mapped_file_interval_forcibly_ms=0))
    try:
        for i in range(400):
            assert store.put_message(build_message(TOPIC, b"%06d" % i * 50, 0)).ok
        wait_dispatched(store)
        mfq = store.commit_log.mapped_file_queue
        stop = threading.Event()

        def delete() -> None:
            while not stop.is_set() and len(mfq.mapped_files) > 1:
                mfq.delete_expired_files_by_time(0, 0, 0, True, 1, int(time.time() * 1000))
                time.sleep(0.001)  # the deleter's pace: the pulls race it

        deleter = threading.Thread(target=delete)
        deleter.start()
        served = 0
        try:
            while deleter.is_alive() or served == 0:
                offset = 0
                while offset < 400:
                    with store.get_message("g", TOPIC, 0, offset, 8) as r:
                        for queue_offset, message in zip(r.queue_offsets, r.decode(), strict=True):
                            assert message["body"] == b"%06d" % queue_offset * 50
                            served += 1
                        assert r.next_begin_offset > offset
                        offset = r.next_begin_offset
        finally:
            stop.set()
            deleter.join()
        assert served and len(mfq.mapped_files) == 1
    finally:
        store.shutdown()


def test_a_pull_meeting_a_file_that_cannot_be_read_skips_the_rest_of_that_file_as_the_reference_does(tmp_path: Path) -> None:
    store = open_pull_store(pull_config(str(tmp_path / "s")))
    try:
        items = [store.put_message(build_message(TOPIC, b"%04d" % i * 100, i % 2, tags=f"t{i}")).items[0] for i in range(60)]
        wait_dispatched(store)
        files = store.commit_log.mapped_file_queue.mapped_files
        assert len(files) >= 4
        files[1].shutdown(3_600_000)
        in_file_1 = [i.logics_offset for i in items if i.queue_id == 0 and i.wrote_offset // COMMIT_LOG_FILE == 1]
        reference = ReferenceGetter(store.config, store.commit_log, store.stats, store.find_consume_queue)
        for max_count in (1, 3, 32):
            offset = 0
            while offset < store.get_max_offset_in_queue(TOPIC, 0):
                offset = assert_same_pull(store, reference, 0, offset, max_count, ())
        with store.get_message("g", TOPIC, 0, in_file_1[0], 32) as r:
            assert r.status is GetMessageStatus.FOUND and r.queue_offsets[0] == in_file_1[-1] + 1
        with store.get_message("g", TOPIC, 0, in_file_1[0], 1) as r:
            assert (r.status, r.next_begin_offset) == (GetMessageStatus.FOUND, in_file_1[-1] + 2)
        only_file_1 = TagFilter(frozenset(f"t{2 * q}" for q in in_file_1))  # queue 0 holds messages 0, 2, 4...
        with store.get_message("g", TOPIC, 0, in_file_1[0], 32, only_file_1) as r:
            assert r.status is GetMessageStatus.MESSAGE_WAS_REMOVING
    finally:
        store.shutdown()


def test_the_reference_pull_counts_damaged_entries_as_the_production_pull_does(tmp_path: Path) -> None:
    store = open_pull_store(pull_config(str(tmp_path / "s")))
    try:
        for i in range(10):
            store.put_message(build_message(TOPIC, b"m%d" % i, 0, tags="a"))
        wait_dispatched(store)
        cq = store.find_consume_queue(TOPIC, 0)
        assert cq is not None
        mf = cq.mapped_file_queue.mapped_files[0]
        mf.write_at(3 * CQ_STORE_UNIT_SIZE, ENTRY.pack(7, 60, java_string_hash("a")))  # inside message 0
        for getter in (store.getter, ReferenceGetter(store.config, store.commit_log, store.stats, store.find_consume_queue)):
            before = store.stats.damaged_queue_entries
            with getter.get_message("g", TOPIC, 0, 0, 32) as r:
                assert r.queue_offsets == [0, 1, 2, 4, 5, 6, 7, 8, 9]
            assert store.stats.damaged_queue_entries - before == 1
    finally:
        store.shutdown()


def test_only_the_compared_pulls_move_the_get_counters_of_a_pull_store(tmp_path: Path) -> None:
    store = open_pull_store(pull_config(str(tmp_path / "s"), pop_revive_interval_ms=10))
    try:
        names = ("get_found", "get_miss", "get_transferred_messages", "get_transferred_bytes")
        revive = store.group_consumption.revive_service
        assert revive is not None
        before = [getattr(store.stats, n) for n in names]
        revive.revive_pass()  # what the service does on its thread every interval
        assert store.stats.get_miss > before[1], "its reads count in the store's get counters"
        assert not revive.is_alive()
        before = [getattr(store.stats, n) for n in names]
        time.sleep(0.2)  # twenty revive intervals
        assert [getattr(store.stats, n) for n in names] == before
    finally:
        store.shutdown()
