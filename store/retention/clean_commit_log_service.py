"""CleanCommitLogService: deletes expired commitlog files and guards the disk (RocketMQ's CleanCommitLogService).

Every `clean_resource_interval_ms` one pass:
1. measures disk usage with the probe and sets the store's disk flags:
   - above `disk_warning_ratio_percent`: `store.disk_full` (puts answer SERVICE_NOT_AVAILABLE /
     DISK_FULL) and clean-immediately;
   - above `disk_clean_forcibly_ratio_percent`: clean-immediately;
   - at or below it: `store.disk_full` cleared (between the two ratios the flag keeps its
     value, so it does not flap around the warning ratio);
   - an unknown usage (negative ratio) changes nothing;
   - `store.space_exhausted` (set at once when a reservation of any file failed for space, which
     also wakes this service) is cleared when a reservation step of the commitlog and of a queue
     fit again;
     while it is set, passes run at least every SPACE_RECHECK_MS;
2. deletes when the hour is in `delete_when`, or usage is above `disk_max_used_space_ratio_percent`,
   or a manual round is pending: leading files (never the last) last modified more than
   `file_reserved_time_hours` ago — any age when cleaning immediately — at most
   `delete_files_batch_max` per pass, `delete_commit_log_files_interval_ms` apart;
3. retries a leading file an earlier pass shut down while readers still held it; it is
   deleted when they let go, or forcibly `destroy_mapped_file_interval_forcibly_ms` after
   the first attempt.

Invariants: passes never overlap (the thread and a direct caller share `_pass_lock`); a file
is deleted only from the front, so the log stays contiguous; after a pass that deleted files
the consume queue cleaner is woken so queues and index follow the new minimum offset.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from core import SYSTEM_CLOCK, Clock
from store.config import BrokerRole
from store.disk.disk_usage import DiskUsageProbe, disk_free_bytes, disk_used_ratio
from store.logfile.mapped_file import MappedFile
from store.report_types import CommitLogCleanupStatus, ManualCleanup
from store.retention.periodic_pass_service import PeriodicPassService

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.disk.space_reservation import SpaceReservation
    from store.logfile.commit_log import CommitLog
    from store.state.state_log import StateLog


class CleanedStore(Protocol):
    """What the commitlog cleaner needs of the store: its files and the disk flags it sets."""

    disk_full: bool  # set past the warning ratio, cleared at or below it
    space_exhausted: bool  # set when a reservation failed, cleared when a new file fits again
    space_shortage: str

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def reservation(self) -> SpaceReservation: ...
    @property
    def state_log(self) -> StateLog: ...


log = logging.getLogger("tidemq.store")

HOUR_MS = 3_600_000
SPACE_RECHECK_MS = 1_000  # pass period while the disk has no room for a new file


@dataclass(slots=True)
class CleanPass:
    """What one pass saw and did."""

    disk_ratio: float
    time_up: bool
    space_full: bool
    manual: bool
    clean_immediately: bool
    files_deleted: int


class CleanCommitLogService(PeriodicPassService):
    def __init__(
        self,
        store: CleanedStore,
        clock: Clock = SYSTEM_CLOCK,
        disk_usage_probe: DiskUsageProbe = disk_used_ratio,
        on_files_deleted: Callable[[], None] | None = None,
    ) -> None:
        super().__init__("CleanCommitLogService", store.config.clean_resource_interval_ms)
        self.store = store
        self.clock = clock
        self.probe = disk_usage_probe
        self.on_files_deleted = on_files_deleted
        cfg = store.config
        self.reserved_ms = cfg.file_reserved_time_hours * HOUR_MS
        self.delete_hours = cfg.delete_hours()
        self.max_used_ratio = cfg.disk_max_used_space_ratio_percent / 100.0
        self.clean_forcibly_ratio = cfg.disk_clean_forcibly_ratio_percent / 100.0
        self.warning_ratio = cfg.disk_warning_ratio_percent / 100.0
        self._pass_lock = threading.Lock()
        self.manual_rounds = 0  # passes left that delete expired files at any hour
        self.clean_immediately = False
        self.disk_ratio = -1.0
        self.files_deleted = 0
        self.passes = 0
        self.last_pass_ms = 0
        self.next_pass_ms = clock.now_ms() + self.interval_ms

    # One pass ----------------------------------------------------------------------------

    def run_once(self) -> CleanPass:
        with self._pass_lock:
            now = self.clock.now_ms()
            self.next_pass_ms = now + self.interval_ms
            ratio = self._check_disk_locked()
            time_up = self.clock.hour() in self.delete_hours
            space_full = ratio > self.max_used_ratio
            manual = self.manual_rounds > 0
            deleted = 0
            if time_up or space_full or manual:
                if manual:
                    self.manual_rounds -= 1
                deleted = self.store.commit_log.mapped_file_queue.delete_expired_files_by_time(
                    self.reserved_ms,
                    self.store.config.delete_commit_log_files_interval_ms,
                    self.store.config.destroy_mapped_file_interval_forcibly_ms,
                    self.clean_immediately,
                    self.store.config.delete_files_batch_max,
                    now,
                    self.pause,
                    self._state_allows_deleting,
                )
                if deleted == 0 and space_full:
                    log.warning(
                        "disk usage %.1f%% is above %.0f%% but no commitlog file could be deleted", ratio * 100, self.max_used_ratio * 100
                    )
            deleted += self._redelete_hanged_file_locked(now)
            self.files_deleted += deleted
            self.passes += 1
            self.last_pass_ms = now
        if deleted and self.on_files_deleted is not None:
            self.on_files_deleted()
        return CleanPass(ratio, time_up, space_full, manual, self.clean_immediately, deleted)

    def _state_allows_deleting(self, mf: MappedFile) -> bool:
        """Whether deleting `mf` leaves every state table a base in the log (StateLog.needs_log_below).
        A master first writes a snapshot of each table that needs the file; a slave waits for its
        master's. On a disk full past the force-clean ratio the file goes regardless, with an error."""
        state_log = self.store.state_log
        end = mf.file_from_offset + mf.file_size
        tables = state_log.needs_log_below(end)
        if tables and self.store.config.broker_role is not BrokerRole.SLAVE:
            for table in tables:
                state_log.write_snapshot(table)
            tables = state_log.needs_log_below(end)
        if not tables:
            return True
        if self.clean_immediately:
            log.error(
                "deleting commitlog file %s although state %s still needs it (the disk is full): a new slave may miss that state",
                mf.path, ", ".join(t.kind.name for t in tables),
            )  # fmt: skip
            return True
        return False

    def _check_disk_locked(self) -> float:
        """Measure usage and set `store.disk_full` and `clean_immediately` (RocketMQ's isSpaceToDelete);
        the caller holds `_pass_lock`."""
        store = self.store
        ratio = max(self.probe(store.config.commit_log_dir()), self.probe(store.config.consume_queue_dir()))
        self.disk_ratio = ratio
        if ratio < 0:
            self.clean_immediately = False
            return ratio
        if ratio > self.warning_ratio:
            if not store.disk_full:
                log.error("disk usage %.1f%% is above the warning ratio %.0f%%: refusing puts", ratio * 100, self.warning_ratio * 100)
            store.disk_full = True
            self.clean_immediately = True
        elif ratio > self.clean_forcibly_ratio:
            self.clean_immediately = True
        else:
            if store.disk_full:
                log.info("disk usage %.1f%% is back at or below %.0f%%: accepting puts", ratio * 100, self.clean_forcibly_ratio * 100)
            store.disk_full = False
            self.clean_immediately = False
        if store.space_exhausted and self._space_for_new_files():
            log.info("the disk has room for new files again: accepting puts")
            store.space_exhausted = False
            store.space_shortage = ""
        return ratio

    def _space_for_new_files(self) -> bool:
        """True when the commitlog's next reservation step and a consume queue's first one fit on their
        partitions (whole files when reserve_ahead_bytes is 0): the next put then reserves what it
        needs, and puts do not flap between accepted and refused."""
        cfg = self.store.config
        reservation = self.store.reservation
        cl_size, cq_size = cfg.mapped_file_size_commit_log_bytes, cfg.mapped_file_size_consume_queue_bytes
        last = self.store.commit_log.mapped_file_queue.get_last_mapped_file()
        if last is not None and not last.is_full():
            cl_need = reservation.target(cl_size, last.reserved_to, last.wrote_position + 1) - last.reserved_to
        else:
            cl_need = reservation.target(cl_size, 0, 1)
        need = cl_need + reservation.target(cq_size, 0, 1)
        free = min(disk_free_bytes(cfg.commit_log_dir()), disk_free_bytes(cfg.consume_queue_dir()))
        return free >= need

    def wait_ms(self) -> int:
        return min(self.interval_ms, SPACE_RECHECK_MS) if self.store.space_exhausted else self.interval_ms

    def _redelete_hanged_file_locked(self, now: int) -> int:
        """Retry leading files shut down earlier but still held by readers (RocketMQ's redeleteHangedFile);
        the caller holds `_pass_lock`."""
        mfq = self.store.commit_log.mapped_file_queue
        forcibly_ms = self.store.config.destroy_mapped_file_interval_forcibly_ms
        return mfq.delete_files_below(0, lambda mf: not mf.is_available(), forcibly_ms, now)

    # Manual cleanup and status --------------------------------------------------------------

    def execute_delete_files_manually(self) -> ManualCleanup:
        """Delete expired files at any hour for the next `manual_delete_file_rounds` passes, the first now."""
        rounds = self.store.config.manual_delete_file_rounds
        now = self.clock.now_ms()
        # The reply is built before the wake-up: the pass may run (and count a round) at once.
        reply: ManualCleanup = {"rounds": rounds, "next_pass_ms": now}
        self.manual_rounds = rounds
        self.next_pass_ms = now
        self.wakeup()
        log.info("manual cleanup requested: %d rounds", rounds)
        return reply

    def status(self) -> CommitLogCleanupStatus:
        return {
            "next_pass_ms": self.next_pass_ms,
            "last_pass_ms": self.last_pass_ms,
            "passes": self.passes,
            "commitlog_files_deleted": self.files_deleted,
            "manual_rounds_left": self.manual_rounds,
            "clean_immediately": self.clean_immediately,
            "disk_ratio": round(self.disk_ratio, 4) if self.disk_ratio >= 0 else None,  # None: not measured (yet)
            "disk_max_used_ratio": self.max_used_ratio,
            "disk_clean_forcibly_ratio": self.clean_forcibly_ratio,
            "disk_warning_ratio": self.warning_ratio,
            "disk_full": self.store.disk_full,
        }
