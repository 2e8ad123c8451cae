"""Retention: CleanCommitLogService and CleanConsumeQueueService on tiny files.

Every pass is run directly (`run_once()`) with a FakeClock (file age, hour of day) and a
probe whose disk ratio the test sets; the services' own threads wait an hour between
passes. One exception: a commitlog pass that deleted files wakes the consume queue service,
whose thread then runs a pass at once (passes never overlap: a test's own pass waits for it).
File ages come from mtimes, set with os.utime.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import FakeClock
from store import DefaultMessageStore, GetMessageStatus, MessageStoreConfig, PutMessageStatus, PutRefusal, build_message
from store.disk.disk_usage import disk_used_ratio
from store.logfile.commit_log import CommitLog
from store.logfile.mapped_file import MappedFile, SelectMappedBufferResult
from store.queue.consume_queue import ConsumeQueue
from tests.store.conftest import small_config, wait_dispatched
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

HOUR_MS = 3_600_000
TOPIC = "Retain"
BODY = b"r" * 400
COMMIT_LOG_FILE_BYTES = 64 * 1024


class Probe:
    """A disk-usage probe whose answer the test sets; it records the paths it was asked about."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio
        self.paths: set[str] = set()

    def __call__(self, path: str) -> float:
        self.paths.add(path)
        return self.ratio


def retention_config(root: str, **overrides: object) -> MessageStoreConfig:
    values: dict[str, object] = {
        "mapped_file_size_commit_log_bytes": COMMIT_LOG_FILE_BYTES,
        "mapped_file_size_consume_queue_bytes": 20 * 10,
        "max_hash_slot_num": 16,
        "max_index_num": 64,
        "clean_resource_interval_ms": HOUR_MS,  # the threads stay idle; tests run the passes
        "delete_commit_log_files_interval_ms": 0,
        "delete_consume_queue_files_interval_ms": 0,
        "file_reserved_time_hours": 72,
        "delete_when": "04",
        "delete_files_batch_max": 10,
        "destroy_mapped_file_interval_forcibly_ms": 120_000,
    }
    values.update(overrides)
    return small_config(root, **values)


class Env:
    """A running store over tiny files, its fake clock and its fake disk probe."""

    def __init__(self, root: str, **overrides: object) -> None:
        self.clock = FakeClock(hour=12)
        self.probe = Probe()
        self.store = DefaultMessageStore(retention_config(root, **overrides), clock=self.clock, disk_usage_probe=self.probe)
        self.store.load()
        self.store.start()
        self.keys: list[tuple[str, int, int]] = []  # (key, queue id, commitlog offset) of every message put

    def fill(self, files: int) -> None:
        """Put messages until the commitlog has `files` files (both queues in the last), then settle dispatch and mtimes."""
        i = len(self.keys)
        extra = 4
        while len(self.commit_log_files()) < files or extra:
            if len(self.commit_log_files()) >= files:
                extra -= 1
            key = f"key-{i}"
            r = self.store.put_message(build_message(TOPIC, BODY, i % 2, keys=[key]))
            assert r.ok, r
            self.keys.append((key, i % 2, r.items[0].wrote_offset))
            i += 1
        assert len(self.commit_log_files()) == files
        wait_dispatched(self.store)
        # A flusher holds a file while it syncs it, and a pass stops at a held file. The background
        # flushers sync one file of a queue per round, so after a fill they go on walking older
        # files for seconds under load: they are stopped, and the test flushes everything itself.
        self.store.flush_service.shutdown()
        assert self.store.flush_consume_queue_service is not None
        self.store.flush_consume_queue_service.shutdown()
        for mf in self.store.commit_log.mapped_file_queue.mapped_files:
            mf.mm.flush()  # no write-back may touch an mtime the test sets afterwards
        parts: list[CommitLog | ConsumeQueue] = [self.store.commit_log, *self.store.all_consume_queues()]
        for part in parts:
            for _ in range(len(part.mapped_file_queue.mapped_files) + 1):
                part.flush(0)
            assert part.mapped_file_queue.flushed_where == part.mapped_file_queue.get_max_offset()

    def commit_log_files(self) -> list[str]:
        """Names of the log's files (not the one the allocation service may have made in advance)."""
        return [mf.file_name for mf in self.store.commit_log.mapped_file_queue.mapped_files]

    def age_files(self, count: int, hours: float) -> None:
        """Make the first `count` commitlog files last modified `hours` before the clock's now."""
        t = (self.clock.now_ms() - hours * HOUR_MS) / 1000
        for mf in self.store.commit_log.mapped_file_queue.mapped_files[:count]:
            os.utime(mf.path, (t, t))

    def cq_files(self, queue_id: int) -> list[str]:
        return sorted(os.listdir(os.path.join(self.store.config.consume_queue_dir(), TOPIC, str(queue_id))))

    def clean(self) -> int:
        """One commitlog pass followed by one consume queue pass; returns the commitlog files deleted."""
        deleted = self.store.clean_commit_log_service.run_once().files_deleted
        self.store.clean_consume_queue_service.run_once()
        return deleted


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(str(tmp_path / "store"))
    try:
        yield e
    finally:
        e.store.shutdown()


def first_offset_in(env: Env, queue_id: int) -> int:
    """Queue offset of the first message of `queue_id` still in the commitlog."""
    min_phy = env.store.commit_log.get_min_offset()
    return sum(1 for _, q, phy in env.keys if q == queue_id and phy < min_phy)


# By age and by hour ------------------------------------------------------------------------


def test_nothing_is_deleted_outside_the_delete_hour(env: Env) -> None:
    env.fill(5)
    env.age_files(5, 100)
    before = env.commit_log_files()
    result = env.store.clean_commit_log_service.run_once()
    assert (result.time_up, result.space_full, result.files_deleted) == (False, False, 0)
    assert env.commit_log_files() == before


def test_expired_files_go_at_the_delete_hour_and_the_consumer_view_follows(env: Env) -> None:
    env.fill(5)
    env.age_files(5, 100)
    files = env.commit_log_files()
    cq0_before = env.cq_files(0)
    index_before = len(env.store.index_service.index_files)
    env.clock.pin_hour(4)

    assert env.clean() == 4, "every file but the last (the one being written)"
    assert env.commit_log_files() == files[-1:]
    min_phy = env.store.commit_log.get_min_offset()
    assert min_phy == 4 * COMMIT_LOG_FILE_BYTES

    # Consume queues: files fully below the log's minimum are gone, minimum offsets corrected.
    for qid in (0, 1):
        new_min = first_offset_in(env, qid)
        assert new_min > 0
        assert env.store.get_min_offset_in_queue(TOPIC, qid) == new_min
        with env.store.get_message("g", TOPIC, qid, 0, 10) as res:
            assert res.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert res.next_begin_offset == new_min
        with env.store.get_message("g", TOPIC, qid, new_min, 1) as res:
            assert res.status is GetMessageStatus.FOUND
            assert res.decode()[0]["commitlog_offset"] >= min_phy
    assert len(env.cq_files(0)) < len(cq0_before)
    assert int(env.cq_files(0)[0]) <= env.store.get_min_offset_in_queue(TOPIC, 0) * 20

    # Index: files wholly below the minimum are gone; deleted messages are no longer found by key.
    assert len(env.store.index_service.index_files) < index_before
    gone = [k for k, _, phy in env.keys if phy < min_phy]
    kept = [k for k, _, phy in env.keys if phy >= min_phy]
    assert gone and kept
    assert env.store.query_message(TOPIC, gone[0], 10, 0, 1 << 62) == []
    assert env.store.query_message(TOPIC, gone[-1], 10, 0, 1 << 62) == []
    assert [m["keys"] for m in env.store.query_message(TOPIC, kept[0], 10, 0, 1 << 62)] == [[kept[0]]]
    assert env.store.look_message_by_offset(0) is None

    info = env.store.runtime_info()
    assert info["cleanup"]["commitlog_files_deleted"] == 4
    assert info["cleanup"]["consume_queue_files_deleted"] > 0
    assert info["cleanup"]["index_files_deleted"] > 0
    assert info["commitlog_min_offset"] == min_phy


def test_only_files_older_than_the_reserved_time_go_and_never_past_a_young_one(env: Env) -> None:
    env.fill(6)
    files = env.commit_log_files()
    env.age_files(4, 100)
    os.utime(env.store.commit_log.mapped_file_queue.mapped_files[2].path, None)  # file 2 is young again
    env.clock.pin_hour(4)
    assert env.clean() == 2
    assert env.commit_log_files() == files[2:]
    env.age_files(1, 71)  # file 2: younger than the 72 h kept
    assert env.clean() == 0


def test_a_pass_deletes_at_most_the_batch_bound(tmp_path: Path) -> None:
    e = Env(str(tmp_path / "s"), delete_files_batch_max=2)
    try:
        e.fill(6)
        e.age_files(6, 100)
        e.clock.pin_hour(4)
        assert e.clean() == 2
        assert e.clean() == 2
        assert e.clean() == 1
        assert len(e.commit_log_files()) == 1
    finally:
        e.store.shutdown()


# By disk ratio -------------------------------------------------------------------------------


def test_above_the_max_used_ratio_expired_files_go_at_any_hour(env: Env) -> None:
    env.fill(4)
    env.probe.ratio = 0.80
    result = env.store.clean_commit_log_service.run_once()
    assert (result.space_full, result.clean_immediately, result.files_deleted) == (True, False, 0), "young files stay"
    env.age_files(2, 100)
    assert env.clean() == 2
    assert not env.store.disk_full
    assert env.probe.paths == {env.store.config.commit_log_dir(), env.store.config.consume_queue_dir()}


def test_above_the_clean_forcibly_ratio_files_go_whatever_their_age(env: Env) -> None:
    env.fill(4)
    env.probe.ratio = 0.87
    result = env.store.clean_commit_log_service.run_once()
    assert (result.clean_immediately, result.files_deleted) == (True, 3)
    assert not env.store.disk_full
    assert env.store.put_message(build_message(TOPIC, b"still accepted", 0)).ok


def test_past_the_warning_ratio_puts_are_refused_until_space_comes_back(env: Env) -> None:
    env.fill(3)
    env.probe.ratio = 0.95
    assert env.clean() == 2
    assert env.store.disk_full
    max_before = env.store.commit_log.get_max_offset()
    r = env.store.put_message(build_message(TOPIC, b"no room", 0))
    assert (r.status, r.refusal, r.items) == (PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DISK_FULL, [])
    assert env.store.commit_log.get_max_offset() == max_before, "nothing stored"

    env.probe.ratio = 0.88  # between clean-forcibly and warning: the flag holds (no flapping)
    env.clean()
    assert env.store.put_message(build_message(TOPIC, b"no room", 0)).refusal is PutRefusal.DISK_FULL

    env.probe.ratio = 0.60
    env.clean()
    assert not env.store.disk_full
    assert env.store.put_message(build_message(TOPIC, b"room again", 0)).ok
    assert env.store.runtime_info()["cleanup"]["disk_full"] is False


def test_an_unknown_disk_ratio_changes_nothing(env: Env) -> None:
    env.fill(3)
    env.probe.ratio = 0.95
    env.clean()
    env.probe.ratio = -1.0
    result = env.store.clean_commit_log_service.run_once()
    assert (result.space_full, result.clean_immediately, result.files_deleted) == (False, False, 0)
    assert env.store.disk_full, "an unreadable probe does not clear the flag"


# Readers holding a file ----------------------------------------------------------------------


def first_message(env: Env) -> SelectMappedBufferResult:
    """A held selection of the first message (what queries and HA transfers read through)."""
    with env.store.get_message("g", TOPIC, 0, 0, 1) as pulled:
        assert pulled.status is GetMessageStatus.FOUND
        offset, size = pulled.commitlog_offsets[0], pulled.buffer_total_size
    held = env.store.commit_log.get_message(offset, size)
    assert held is not None and offset < COMMIT_LOG_FILE_BYTES
    return held


def hold_first_expired_file(env: Env) -> tuple[SelectMappedBufferResult, MappedFile]:
    """Three expired files at the delete hour, a reader holding the first: (the held bytes, that file)."""
    env.fill(3)
    env.age_files(3, 100)
    env.clock.pin_hour(4)
    return first_message(env), env.store.commit_log.mapped_file_queue.mapped_files[0]


def test_a_held_file_goes_when_its_reader_lets_go(env: Env) -> None:
    held, first = hold_first_expired_file(env)
    try:
        assert env.clean() == 0
        assert os.path.exists(first.path), "kept while read"
        assert not first.is_available(), "no new reader may take it"
        assert env.store.commit_log.get_min_offset() == COMMIT_LOG_FILE_BYTES
        assert bytes(held.view[:4]) != b"\x00\x00\x00\x00", "the reader's bytes are intact"
        env.clock.pin_hour(12)  # outside the delete hour the hanging file is still retried
    finally:
        held.release()
    assert env.clean() == 1
    assert not os.path.exists(first.path)
    assert len(env.commit_log_files()) == 2


def test_a_pull_result_holds_no_file_and_keeps_its_bytes(env: Env) -> None:
    env.fill(3)
    env.age_files(3, 100)
    env.clock.pin_hour(4)
    first = env.store.commit_log.mapped_file_queue.mapped_files[0]
    with env.store.get_message("g", TOPIC, 0, 0, 4) as pulled:
        assert pulled.status is GetMessageStatus.FOUND and pulled.commitlog_offsets[-1] < COMMIT_LOG_FILE_BYTES
        assert first.ref_count == 1, "only the file's own reference: the pull let go when it returned"
        assert env.clean() == 2, "not held by the result"
        assert not os.path.exists(first.path)
        assert [m["body"] for m in pulled.decode()] == [BODY] * 4, "the result's copy outlives the file"


def test_a_held_file_goes_forcibly_after_the_interval(env: Env) -> None:
    held, first = hold_first_expired_file(env)
    try:
        assert env.clean() == 0
        env.clock.advance_ms(119_000)
        assert env.clean() == 0
        assert os.path.exists(first.path)
        env.clock.advance_ms(1_000)
        assert env.clean() == 2, "forced, and the next expired file with it"
        assert not os.path.exists(first.path)
    finally:
        held.release()  # after a forced deletion, letting go is harmless
    assert env.store.get_min_offset_in_queue(TOPIC, 0) == first_offset_in(env, 0)


def test_a_view_kept_past_release_delays_deletion_until_dropped_or_forced(env: Env) -> None:
    env.fill(3)
    env.age_files(3, 100)
    env.clock.pin_hour(4)
    held = first_message(env)
    kept = held.view[:8]  # a slice outliving release() still pins the mapping
    held.release()
    first = env.store.commit_log.mapped_file_queue.mapped_files[0]
    assert env.clean() == 0
    assert os.path.exists(first.path)
    assert len(bytes(kept)) == 8
    del kept
    assert env.clean() == 2, "retried once the mapping could close"
    assert not os.path.exists(first.path)


# Manual cleanup, idle passes and status ----------------------------------------------------------


def test_manual_cleanup_deletes_expired_files_at_any_hour_for_the_configured_rounds(env: Env) -> None:
    env.fill(4)
    env.age_files(4, 100)
    assert env.clean() == 0
    service = env.store.clean_commit_log_service
    passes = service.passes
    answer = env.store.execute_delete_files_manually()
    assert answer == {"rounds": 20, "next_pass_ms": env.clock.now_ms()}
    # The service's own thread runs the first round at once.
    wait_for(lambda: service.passes != passes, 10, what="the manual round's pass")
    assert service.manual_rounds == 19
    assert service.files_deleted == 3
    assert len(env.commit_log_files()) == 1


def test_young_files_survive_a_manual_cleanup(env: Env) -> None:
    env.fill(3)
    env.store.clean_commit_log_service.manual_rounds = 1
    assert env.clean() == 0
    assert env.store.clean_commit_log_service.manual_rounds == 0
    assert len(env.commit_log_files()) == 3


def test_consume_queue_pass_is_idle_until_the_log_minimum_moves(env: Env) -> None:
    env.fill(3)
    service = env.store.clean_consume_queue_service
    assert service.run_once() == 0
    assert service.passes == 0
    env.age_files(3, 100)
    env.clock.pin_hour(4)
    assert env.store.clean_commit_log_service.run_once().files_deleted == 2
    # Having deleted files, the commitlog pass wakes this service: its thread runs the pass.
    wait_for(lambda: service.passes != 0, 10, what="the woken consume queue pass to run")
    assert service.passes == 1 and service.consume_queue_files_deleted + service.index_files_deleted > 0
    assert service.last_physical_min_offset == env.store.commit_log.get_min_offset() == 2 * COMMIT_LOG_FILE_BYTES
    assert service.run_once() == 0 and service.passes == 1


def test_status_reports_the_next_pass_and_the_ratios(env: Env) -> None:
    env.probe.ratio = 0.42
    env.store.clean_commit_log_service.run_once()
    status = env.store.runtime_info()["cleanup"]
    assert status["next_pass_ms"] == env.clock.now_ms() + HOUR_MS
    assert status["last_pass_ms"] == env.clock.now_ms()
    assert status["disk_ratio"] == 0.42
    assert (status["disk_max_used_ratio"], status["disk_clean_forcibly_ratio"], status["disk_warning_ratio"]) == (0.75, 0.85, 0.90)
    assert env.store.runtime_info()["disk_used_ratio"] == 0.42


def test_delay_queue_below_the_new_minimum_is_skipped_not_stuck(tmp_path: Path) -> None:
    e = Env(str(tmp_path / "s"), message_delay_level="1h")
    try:
        for i in range(3):
            assert e.store.put_message(build_message("Late", BODY, 0, keys=[f"late-{i}"], delay_level=1)).ok
        e.fill(4)
        e.age_files(4, 100)
        e.clock.pin_hour(4)
        assert e.clean() == 3
        assert e.store.schedule_status()["levels"][0]["waiting"] == 0, "their entries went with the log"
        e.clock.advance_ms(2 * HOUR_MS)
        e.store.schedule_service.scan_once()
        assert e.store.get_max_offset_in_queue("Late", 0) == 0
        assert e.store.schedule_status()["undeliverable"] == 0
    finally:
        e.store.shutdown()


def test_real_probe_measures_the_partition(tmp_path: Path) -> None:
    ratio = disk_used_ratio(str(tmp_path))
    assert 0.0 < ratio < 1.0
    assert disk_used_ratio(str(tmp_path / "not" / "yet")) == pytest.approx(ratio, abs=0.01)


def test_real_probe_counts_only_the_space_the_broker_may_use(tmp_path: Path) -> None:
    """The ratio is df's Use% (used / (used + available to unprivileged writers)): root's reserved blocks
    are no room for the broker, so a disk it cannot write to any more reads full, not 95 %."""
    df = subprocess.run(["df", "--output=pcent", str(tmp_path)], capture_output=True, text=True, check=True)
    percent = int(df.stdout.splitlines()[1].strip().rstrip("%"))
    ratio = disk_used_ratio(str(tmp_path))
    assert abs(100 * ratio - percent) <= 1.5, (ratio, percent)  # df rounds up; files may come and go between the two
