"""MessageStoreConfig: every setting of the store, with RocketMQ 4.x's defaults.

Names are RocketMQ's in snake_case with the unit last. Every size is a setting so
that tests can use files of a few kilobytes and cross file boundaries constantly.
Each setting declares its type (the annotation) and range (`setting(default, low, high)`,
core.setting); `validate()` checks them and the relations between settings at start-up,
and a broken one is a configuration error (`ConfigInvalid` naming the setting), never a
busy loop or a late surprise.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigInvalid
from core.setting import check_fields, setting
from store.codec.message import TOPIC_MAX_BYTES, topic_problem
from store.codec.message_codec import FIXED_PART_BYTES, V6_EXTRA_BYTES


class FlushDiskType(enum.Enum):
    """When a put is answered relative to its flush to disk."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    """The replication role of this store (see ha/)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


GIB = 1024 * 1024 * 1024
MIB = 1024 * 1024
CQ_UNIT_SIZE_BYTES = 20
INDEX_HEADER_BYTES = 40
TIMER_BLANK_SLOTS = 60  # wheel slots kept between the roll window and the read time (RocketMQ's TIMER_BLANK_SLOTS)
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class MessageStoreConfig:
    # Root directory holding commitlog/, consumequeue/, index/, config/ and the checkpoint.
    store_path_root_dir: str = setting(factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    # Size of one commitlog file; files are named by their start offset.
    mapped_file_size_commit_log_bytes: int = setting(GIB, 4096, 2**31 - 1)
    # Size of one consume queue file: 300,000 entries of 20 bytes.
    mapped_file_size_consume_queue_bytes: int = setting(300_000 * CQ_UNIT_SIZE_BYTES, CQ_UNIT_SIZE_BYTES, 2**31 - 1)
    # Hash slots per index file.
    max_hash_slot_num: int = setting(5_000_000, 1, 100_000_000)
    # Index entries per index file.
    max_index_num: int = setting(5_000_000 * 4, 2, 100_000_000)
    # Largest accepted message body.
    max_message_size_bytes: int = setting(4 * MIB, 1, GIB)
    # Largest accepted encoded properties (the 2-byte length field's signed range).
    max_properties_size_bytes: int = setting(32_767, 1, 32_767)
    # Largest accepted topic name.
    max_topic_length_bytes: int = setting(TOPIC_MAX_BYTES, 1, TOPIC_MAX_BYTES)
    # Largest number of messages one batch put may hold.
    max_batch_messages: int = setting(1_000, 1, 100_000)
    # SYNC_FLUSH waits for a group commit before answering; ASYNC_FLUSH flushes periodically.
    flush_disk_type: FlushDiskType = setting(FlushDiskType.ASYNC_FLUSH)
    # Replication role; SLAVE refuses puts.
    broker_role: BrokerRole = setting(BrokerRole.ASYNC_MASTER)
    # FlushRealTimeService period for the commitlog.
    flush_interval_commit_log_ms: int = setting(500, 1, 60_000)
    # CommitRealTimeService period (transient store pool only).
    commit_interval_commit_log_ms: int = setting(200, 1, 60_000)
    # Use a timed wait instead of a wakeable wait in the flusher (RocketMQ's flushCommitLogTimed).
    flush_commit_log_timed: bool = setting(False)
    # Pages (4 KiB) that must be dirty before a periodic flush writes them.
    flush_commit_log_least_pages: int = setting(4, 0, 1_000_000)
    # Pages that must be pending before a periodic commit copies them.
    commit_commit_log_least_pages: int = setting(4, 0, 1_000_000)
    # A flush of everything at least this often, whatever the page count.
    flush_commit_log_thorough_interval_ms: int = setting(10_000, 1, 3_600_000)
    # A commit of everything at least this often.
    commit_commit_log_thorough_interval_ms: int = setting(200, 1, 3_600_000)
    # FlushConsumeQueueService period.
    flush_interval_consume_queue_ms: int = setting(1_000, 1, 600_000)
    # Pages of consume queue that must be dirty before a periodic flush.
    flush_consume_queue_least_pages: int = setting(2, 0, 1_000_000)
    # A consume queue flush of everything at least this often.
    flush_consume_queue_thorough_interval_ms: int = setting(60_000, 1, 3_600_000)
    # How long a SYNC_FLUSH (or SYNC_MASTER) put waits before FLUSH_*_TIMEOUT.
    sync_flush_timeout_ms: int = setting(5_000, 1, 600_000)
    # Waits with a callback the group commit holds at once; past it one is answered FLUSH_DISK_TIMEOUT, put stored (0: every wait).
    max_group_commit_requests: int = setting(100_000, 0, 10_000_000)
    # Write into pooled buffers and commit them to the file channel (RocketMQ's TransientStorePool).
    transient_store_pool_enable: bool = setting(False)
    # Buffers in the transient store pool.
    transient_store_pool_size: int = setting(5, 1, 1_024)
    # Disk blocks reserved ahead of a file's write position at most, in steps that double from 64 KiB
    # (store/disk/space_reservation.py); 0 reserves every file whole at its creation. Not a RocketMQ setting.
    reserve_ahead_bytes: int = setting(64 * MIB, 0, GIB)
    # A batch whose stored form may take at least this many bytes (up to 4 MiB) is encoded into a buffer and written to
    # the commitlog with one pwrite, not through the file's mapping (no page fault per page); 0: never. Not a RocketMQ setting.
    write_through_min_bytes: int = setting(64 * 1024, 0, GIB)
    # Touch every page of a new file and lock it in memory.
    warm_mapped_file_enable: bool = setting(False)
    # Fault a new commitlog file's pages in for writing in the allocation service, off the put path.
    # The pages become dirty: the kernel writes back what the writer has not overwritten by then.
    prefault_mapped_file_enable: bool = setting(True)
    # Flushed commitlog bytes behind the flush position left in the OS page cache; older flushed pages are
    # dropped (store/logfile/page_cache_window.py). 0 leaves them to the OS. Not a RocketMQ setting.
    page_cache_window_bytes: int = setting(GIB, 0, 2**50)
    # Most messages one key query returns (RocketMQ's maxMsgsNumBatch; IndexService.queryOffset caps at it).
    max_msgs_num_batch: int = setting(64, 1, 100_000)
    # Build IndexFile entries for KEYS and UNIQ_KEY (a new master's and a restart's duplicate checks need them).
    message_index_enable: bool = setting(True)
    # Index entries also for the UNIQ_KEY (RocketMQ's messageIndexSafe off keeps this on).
    message_index_uniq_key_enable: bool = setting(True)
    # At start, an index that ends this far or more before where dispatch resumes (a store copied
    # without index/, or with an older one) is rebuilt in the background while the store serves
    # (/readyz 503 meanwhile); a smaller gap, or any after a crash, is dispatched again with recovery.
    # Not a RocketMQ setting.
    index_rebuild_background_min_bytes: int = setting(64 * MIB, 0, 2**62)
    # Slave mode of RocketMQ: the reput offset follows the confirmed offset, not the max offset.
    duplication_enable: bool = setting(False)
    # How long the writer waits for the allocation service to produce the next file.
    allocate_mapped_file_timeout_ms: int = setting(5_000, 1, 600_000)
    # Pull transfer limits: messages per pull.
    max_transfer_count_on_message_in_memory: int = setting(32, 1, 100_000)
    # Pull transfer limits: bytes per pull while the data is in page cache.
    max_transfer_bytes_on_message_in_memory: int = setting(256 * 1024, 1, GIB)
    # Pull transfer limits: messages per pull when reading from disk.
    max_transfer_count_on_message_in_disk: int = setting(8, 1, 100_000)
    # Pull transfer limits: bytes per pull when reading from disk.
    max_transfer_bytes_on_message_in_disk: int = setting(64 * 1024, 1, GIB)
    # Consume-queue bytes one get examines at least (20 per entry; a get for more messages examines
    # 20 per message asked for). RocketMQ's 16,000 (DefaultMessageStore.getMessage's
    # maxFilterMessageCount, RocketMQ 5's maxFilterMessageSize: 800 entries) is raised 20-fold for
    # HTTP pulls, where a round trip costs far more than the scan (docs/benchmarks.md, tag-filter scan window).
    max_filter_message_size_bytes: int = setting(320_000, CQ_UNIT_SIZE_BYTES, 2**31 - 1)
    # Share of memory the page cache may hold of the commitlog before reads count as "on disk".
    access_message_in_memory_max_ratio_percent: int = setting(40, 0, 100)
    # How long a put may hold the put lock before puts answer OS_PAGECACHE_BUSY.
    os_page_cache_busy_timeout_ms: int = setting(1_000, 1, 600_000)
    # Delay levels of SCHEDULE_TOPIC_XXXX.
    message_delay_level: str = setting(DEFAULT_DELAY_LEVELS)
    # Period of the delay scan of a level with an entry not due yet (a level read to its end rests until dispatch wakes it).
    schedule_scan_interval_ms: int = setting(100, 1, 60_000)
    # Period at which delay progress is persisted.
    flush_delay_offset_interval_ms: int = setting(10_000, 1, 3_600_000)
    # Timer messages at any delivery time (RocketMQ 5's timer wheel); off refuses TIMER_* delivery times.
    timer_wheel_enable: bool = setting(True)
    # Precision of delivery times, one wheel slot (RocketMQ's timerPrecisionMs is 1000).
    timer_precision_ms: int = setting(100, 10, 60_000)
    # Longest delay a timer message may ask for (RocketMQ's timerMaxDelaySec: 3 days).
    timer_max_delay_ms: int = setting(3 * 86_400_000, 1, 366 * 86_400_000)
    # Slots of the timing wheel; its file holds twice as many (RocketMQ: 7 days of 1-second slots).
    timer_wheel_slots: int = setting(7 * 86_400, 128, 50_000_000)
    # Slots ahead of now a timer log unit may go to; later deliveries roll round again (RocketMQ's timerRollWindowSlot).
    timer_roll_window_slots: int = setting(2 * 86_400, 2, 50_000_000)
    # Size of one timer log file (RocketMQ's mappedFileSizeTimerLog).
    mapped_file_size_timer_log_bytes: int = setting(100 * MIB, 4096, 2**31 - 1)
    # Period of the timer flush service: timer log, wheel, then the timercheck checkpoint (RocketMQ's timerFlushIntervalMs).
    timer_flush_interval_ms: int = setting(1_000, 1, 600_000)
    # Retention: hours a commitlog file is kept after its last write.
    file_reserved_time_hours: int = setting(72, 0, 87_600)
    # Hours of the day (semicolon separated, "04;05") in which expired files are deleted.
    delete_when: str = setting("04")
    # Period of the cleanup services.
    clean_resource_interval_ms: int = setting(10_000, 1, 3_600_000)
    # Pause between two file deletions of one pass.
    delete_commit_log_files_interval_ms: int = setting(100, 0, 60_000)
    # Pause between two consume queue file deletions of one pass.
    delete_consume_queue_files_interval_ms: int = setting(100, 0, 60_000)
    # After this long a file still referenced by readers is deleted anyway.
    destroy_mapped_file_interval_forcibly_ms: int = setting(120_000, 0, 3_600_000)
    # Files deleted in one pass at most.
    delete_files_batch_max: int = setting(10, 1, 10_000)
    # Disk usage above which expired files are deleted at any hour.
    disk_max_used_space_ratio_percent: int = setting(75, 1, 100)
    # Disk usage above which files are deleted even when not expired, and forcibly.
    disk_clean_forcibly_ratio_percent: int = setting(85, 1, 100)
    # Disk usage above which puts are refused.
    disk_warning_ratio_percent: int = setting(90, 1, 100)
    # Rounds a manual cleanup runs (RocketMQ's executeDeleteFilesManually).
    manual_delete_file_rounds: int = setting(20, 1, 1_000)
    # Default queues of an auto-created topic.
    default_topic_queue_nums: int = setting(4, 1, 65_536)
    # Highest queue count a topic may have.
    max_topic_queue_nums: int = setting(1_024, 1, 65_536)
    # The cluster this broker belongs to; names the revive topic rmq_sys_REVIVE_LOG_{name} (RocketMQ's default).
    broker_cluster_name: str = setting("DefaultCluster")
    # Group consumption: queues of the revive topic that checkpoints and acks spread over (RocketMQ's reviveQueueNum).
    pop_revive_queue_num: int = setting(8, 1, 256)
    # Group consumption: how long past a message's invisible time acks are still collected before it is redelivered.
    pop_ack_margin_ms: int = setting(1_000, 0, 60_000)
    # Group consumption: period of the revive service's pass while it holds checkpoints (idle, it rests until dispatch wakes it).
    pop_revive_interval_ms: int = setting(100, 10, 60_000)
    # Group consumption: checkpoints the revive service holds at most; past it, reading the revive queue waits.
    pop_revive_max_pending: int = setting(100_000, 1, 10_000_000)
    # Group consumption: acked (or superseded) receipt handles remembered, each until its invisible time ends, so
    # that a repeated ack answers ALREADY_ACKED; past it the soonest to expire are forgotten (store/pop/acked_handles.py).
    pop_acked_handles_max: int = setting(100_000, 1, 10_000_000)
    # Idempotent produce: how long a producer's dedup id is remembered per topic; a put with an id seen within it is
    # answered with the first message's ids and stores nothing (store/put/dedup_window.py).
    dedup_window_s: int = setting(120, 1, 86_400)
    # Idempotent produce: dedup ids remembered at most; past it a put with a new id is refused (DEDUP_WINDOW_FULL)
    # until ids expire, so the guarantee is never dropped silently.
    dedup_max_keys: int = setting(100_000, 1, 10_000_000)
    # Transactions: a half message unresolved this long is checked back (RocketMQ's transactionTimeOut).
    transaction_timeout_ms: int = setting(6_000, 1, 86_400_000)
    # Transactions: checks of an unresolved half before it is rolled back (RocketMQ's transactionCheckMax).
    transaction_check_max: int = setting(15, 1, 1_000)
    # Transactions: period of the check pass; RocketMQ's transactionCheckInterval is 60 s (see docs/http-api.md).
    transaction_check_interval_ms: int = setting(30_000, 10, 3_600_000)
    # Recovery after a clean shutdown starts this many files from the end.
    recover_clean_shutdown_files: int = setting(3, 1, 1_000_000)
    # The IPv4 address and port stamped into STOREHOST and the offset message id.
    store_host: str = setting("127.0.0.1")
    # Port half of STOREHOST.
    store_port: int = setting(10911, 0, 65_535)
    # Consume-queue files mapped at once at most; colder ones are unmapped. Lowered to half the soft
    # descriptor limit at start (store/logfile/lazy_mapped_file.py budget_for_descriptors).
    max_mapped_consume_queue_files: int = setting(1_024, 1, 10_000_000)
    # Puts are refused (DISPATCH_BEHIND) while dispatch trails the commitlog by more than this.
    max_dispatch_lag_bytes: int = setting(256 * MIB, MIB, 2**62)
    # A put that defers its dispatch (the front end's produces, dispatched once per event-loop turn) is
    # dispatched at once instead while dispatch trails its end by more than this; 0: never deferred.
    max_deferred_dispatch_bytes: int = setting(4 * MIB, 0, 2**62)
    # Master-slave: longest a slave may be behind for SYNC_MASTER puts to wait for it.
    ha_slave_fall_behind_max_bytes: int = setting(256 * MIB, 0, 2**62)
    # Master-slave: a slave reports at least this often.
    ha_send_heartbeat_interval_ms: int = setting(5_000, 1, 3_600_000)
    # Period at which committed consumer offsets are compacted from their log into consumerOffset.json.
    flush_consumer_offset_interval_ms: int = setting(5_000, 100, 3_600_000)
    # Master-slave: a connection silent for this long is closed.
    ha_housekeeping_interval_ms: int = setting(20_000, 1, 3_600_000)
    # Master-slave: largest frame body the master sends.
    ha_transfer_batch_size_bytes: int = setting(32 * 1024, 1, 256 * MIB)

    def validate(self) -> MessageStoreConfig:
        """Check every setting's type and range, then the relations between settings; ConfigInvalid names the first broken one."""
        check_fields(self, "store")
        index_file_bytes = INDEX_HEADER_BYTES + 4 * self.max_hash_slot_num + 20 * self.max_index_num
        largest_fixed = FIXED_PART_BYTES + 2 * V6_EXTRA_BYTES  # with IPv6 born and store hosts
        largest_message = self.max_message_size_bytes + self.max_properties_size_bytes + self.max_topic_length_bytes + largest_fixed
        checks: list[tuple[bool, str]] = [
            (
                self.mapped_file_size_commit_log_bytes >= largest_message + 8,
                "mapped_file_size_commit_log_bytes must hold the largest message plus its end marker",
            ),
            (
                self.mapped_file_size_consume_queue_bytes % CQ_UNIT_SIZE_BYTES == 0,
                "mapped_file_size_consume_queue_bytes must be a multiple of 20",
            ),
            (
                self.reserve_ahead_bytes == 0 or self.reserve_ahead_bytes >= 64 * 1024,
                "reserve_ahead_bytes must be 0 (whole files) or at least 65536",
            ),
            (index_file_bytes <= 2**31 - 1, "max_hash_slot_num and max_index_num make an index file past 2 GiB"),
            (
                self.disk_max_used_space_ratio_percent <= self.disk_clean_forcibly_ratio_percent <= self.disk_warning_ratio_percent,
                "disk ratios must satisfy disk_max_used_space <= disk_clean_forcibly <= disk_warning",
            ),
            (self.default_topic_queue_nums <= self.max_topic_queue_nums, "default_topic_queue_nums must be <= max_topic_queue_nums"),
            (
                self.timer_roll_window_slots <= self.timer_wheel_slots - TIMER_BLANK_SLOTS,
                f"timer_roll_window_slots must be <= timer_wheel_slots - {TIMER_BLANK_SLOTS}",
            ),
            (
                self.timer_roll_window_slots * self.timer_precision_ms < 2**31,
                "timer_roll_window_slots x timer_precision_ms must stay below 2^31 ms (the timer log's delay field)",
            ),
            (
                not (self.transient_store_pool_enable and self.flush_disk_type is FlushDiskType.SYNC_FLUSH),
                "transient_store_pool_enable needs ASYNC_FLUSH (as in RocketMQ)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigInvalid(message)
        _parse_ipv4(self.store_host)
        if topic_problem("rmq_sys_REVIVE_LOG_" + self.broker_cluster_name):
            raise ConfigInvalid("broker_cluster_name must be letters, digits, _, - (it names the revive topic)")
        if not self.delay_levels_ms():
            raise ConfigInvalid("message_delay_level must name at least one level")
        self.delete_hours()
        return self

    # Derived values ------------------------------------------------------------------

    def commit_log_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    def config_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "config")

    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

    def store_host_bytes(self) -> bytes:
        return _parse_ipv4(self.store_host) + self.store_port.to_bytes(4, "big")

    def delay_levels_ms(self) -> list[int]:
        """The delay levels as milliseconds, level 1 first."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        levels: list[int] = []
        for word in self.message_delay_level.split():
            unit = word[-1]
            if unit not in units or not word[:-1].isdigit():
                raise ConfigInvalid(f"delay level {word!r} is not <number><s|m|h|d>")
            levels.append(int(word[:-1]) * units[unit])
        return levels

    def delete_hours(self) -> set[int]:
        hours: set[int] = set()
        for part in self.delete_when.split(";"):
            part = part.strip()
            if part:
                if not part.isdigit() or not 0 <= int(part) <= 23:
                    raise ConfigInvalid(f"delete_when hour {part!r} is not in 00..23")
                hours.add(int(part))
        return hours

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MessageStoreConfig:
        """Build from a mapping such as a TOML table; unknown names are an error."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigInvalid(f"unknown store setting {name!r}")
            if name in ENUM_SETTINGS and isinstance(value, str):
                kind = ENUM_SETTINGS[name]
                try:
                    value = kind(value.upper())
                except ValueError:
                    choices = ", ".join(member.value for member in kind)
                    raise ConfigInvalid(f"store setting {name} must be one of {choices}, not {value!r}") from None
            kwargs[name] = value
        return cls(**kwargs)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if isinstance(value, enum.Enum) else value
        return out


ENUM_SETTINGS: dict[str, type[enum.Enum]] = {"flush_disk_type": FlushDiskType, "broker_role": BrokerRole}


def _parse_ipv4(text: str) -> bytes:
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise ConfigInvalid(f"store_host {text!r} is not an IPv4 address")
    return bytes(int(p) for p in parts)
