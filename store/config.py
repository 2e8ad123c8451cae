"""MessageStoreConfig: every setting of the store, with RocketMQ 4.x's defaults.

Names are RocketMQ's in snake_case with the unit last. Every size is a setting so
that tests can use files of a few kilobytes and cross file boundaries constantly.
`validate()` asserts the relations between settings at start-up; a broken relation
is a configuration error (`ConfigInvalid`), never a late surprise.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from dataclasses import dataclass, field
from typing import Any

from store.errors import ConfigInvalid


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
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class MessageStoreConfig:
    # Root directory holding commitlog/, consumequeue/, index/, config/ and the checkpoint.
    store_path_root_dir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    # Size of one commitlog file; files are named by their start offset.
    mapped_file_size_commit_log_bytes: int = GIB
    # Size of one consume queue file: 300,000 entries of 20 bytes.
    mapped_file_size_consume_queue_bytes: int = 300_000 * CQ_UNIT_SIZE_BYTES
    # Hash slots per index file.
    max_hash_slot_num: int = 5_000_000
    # Index entries per index file.
    max_index_num: int = 5_000_000 * 4
    # Largest accepted message body.
    max_message_size_bytes: int = 4 * MIB
    # Largest accepted encoded properties (the 2-byte length field's signed range).
    max_properties_size_bytes: int = 32_767
    # Largest accepted topic name.
    max_topic_length_bytes: int = 127
    # Largest number of messages one batch put may hold.
    max_batch_messages: int = 1_000
    # SYNC_FLUSH waits for a group commit before answering; ASYNC_FLUSH flushes periodically.
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    # Replication role; SLAVE refuses puts.
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    # FlushRealTimeService period for the commitlog.
    flush_interval_commit_log_ms: int = 500
    # CommitRealTimeService period (transient store pool only).
    commit_interval_commit_log_ms: int = 200
    # Use a timed wait instead of a wakeable wait in the flusher (RocketMQ's flushCommitLogTimed).
    flush_commit_log_timed: bool = False
    # Pages (4 KiB) that must be dirty before a periodic flush writes them.
    flush_commit_log_least_pages: int = 4
    # Pages that must be pending before a periodic commit copies them.
    commit_commit_log_least_pages: int = 4
    # A flush of everything at least this often, whatever the page count.
    flush_commit_log_thorough_interval_ms: int = 10_000
    # A commit of everything at least this often.
    commit_commit_log_thorough_interval_ms: int = 200
    # FlushConsumeQueueService period.
    flush_interval_consume_queue_ms: int = 1_000
    # Pages of consume queue that must be dirty before a periodic flush.
    flush_consume_queue_least_pages: int = 2
    # A consume queue flush of everything at least this often.
    flush_consume_queue_thorough_interval_ms: int = 60_000
    # How long a SYNC_FLUSH (or SYNC_MASTER) put waits before FLUSH_*_TIMEOUT.
    sync_flush_timeout_ms: int = 5_000
    # Requests the group commit service holds at once before refusing (OS_PAGECACHE_BUSY).
    max_group_commit_requests: int = 100_000
    # Write into pooled buffers and commit them to the file channel (RocketMQ's TransientStorePool).
    transient_store_pool_enable: bool = False
    # Buffers in the transient store pool.
    transient_store_pool_size: int = 5
    # Touch every page of a new file and lock it in memory.
    warm_mapped_file_enable: bool = False
    # Fault a new commitlog file's pages in for writing in the allocation service, off the put path.
    # The pages become dirty: the kernel writes back what the writer has not overwritten by then.
    prefault_mapped_file_enable: bool = True
    # Build IndexFile entries for KEYS and UNIQ_KEY.
    message_index_enable: bool = True
    # Index entries also for the UNIQ_KEY (RocketMQ's messageIndexSafe off keeps this on).
    message_index_uniq_key_enable: bool = True
    # Slave mode of RocketMQ: the reput offset follows the confirmed offset, not the max offset.
    duplication_enable: bool = False
    # How long the writer waits for the allocation service to produce the next file.
    allocate_mapped_file_timeout_ms: int = 5_000
    # Pull transfer limits: messages per pull.
    max_transfer_count_on_message_in_memory: int = 32
    # Pull transfer limits: bytes per pull while the data is in page cache.
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    # Pull transfer limits: messages per pull when reading from disk.
    max_transfer_count_on_message_in_disk: int = 8
    # Pull transfer limits: bytes per pull when reading from disk.
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    # Share of memory the page cache may hold of the commitlog before reads count as "on disk".
    access_message_in_memory_max_ratio_percent: int = 40
    # How long a put may hold the put lock before puts answer OS_PAGECACHE_BUSY.
    os_page_cache_busy_timeout_ms: int = 1_000
    # Delay levels of SCHEDULE_TOPIC_XXXX.
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # Period of the delay scan per level.
    schedule_scan_interval_ms: int = 100
    # Period at which delay progress is persisted.
    flush_delay_offset_interval_ms: int = 10_000
    # Retention: hours a commitlog file is kept after its last write.
    file_reserved_time_hours: int = 72
    # Hours of the day (semicolon separated, "04;05") in which expired files are deleted.
    delete_when: str = "04"
    # Period of the cleanup services.
    clean_resource_interval_ms: int = 10_000
    # Pause between two file deletions of one pass.
    delete_commit_log_files_interval_ms: int = 100
    # Pause between two consume queue file deletions of one pass.
    delete_consume_queue_files_interval_ms: int = 100
    # After this long a file still referenced by readers is deleted anyway.
    destroy_mapped_file_interval_forcibly_ms: int = 120_000
    # Files deleted in one pass at most.
    delete_files_batch_max: int = 10
    # Disk usage above which expired files are deleted at any hour.
    disk_max_used_space_ratio_percent: int = 75
    # Disk usage above which files are deleted even when not expired, and forcibly.
    disk_clean_forcibly_ratio_percent: int = 85
    # Disk usage above which puts are refused.
    disk_warning_ratio_percent: int = 90
    # Rounds a manual cleanup runs (RocketMQ's executeDeleteFilesManually).
    manual_delete_file_rounds: int = 20
    # Default queues of an auto-created topic.
    default_topic_queue_nums: int = 4
    # Highest queue count a topic may have.
    max_topic_queue_nums: int = 1_024
    # Recovery after a clean shutdown starts this many files from the end.
    recover_clean_shutdown_files: int = 3
    # The IPv4 address and port stamped into STOREHOST and the offset message id.
    store_host: str = "127.0.0.1"
    # Port half of STOREHOST.
    store_port: int = 10911
    # Bounded wait of a service's final flush at shutdown.
    shutdown_flush_timeout_ms: int = 5_000
    # Consume-queue files mapped at once at most; colder ones are unmapped (each mapping holds a file descriptor).
    max_mapped_consume_queue_files: int = 1_024
    # Puts are refused (DISPATCH_BEHIND) while dispatch trails the commitlog by more than this.
    max_dispatch_lag_bytes: int = 256 * MIB
    # Largest number of bytes the reput service dispatches before releasing its slice.
    reput_batch_bytes: int = 4 * MIB
    # Master-slave: longest a slave may be behind for SYNC_MASTER puts to wait for it.
    ha_slave_fall_behind_max_bytes: int = 256 * MIB
    # Master-slave: a slave reports at least this often.
    ha_send_heartbeat_interval_ms: int = 5_000
    # Period at which committed consumer offsets are compacted from their log into consumerOffset.json.
    flush_consumer_offset_interval_ms: int = 5_000
    # Master-slave: a connection silent for this long is closed.
    ha_housekeeping_interval_ms: int = 20_000
    # Master-slave: largest frame body the master sends.
    ha_transfer_batch_size_bytes: int = 32 * 1024

    def validate(self) -> MessageStoreConfig:
        """Assert the relations between settings; raise ConfigInvalid when one breaks."""
        checks: list[tuple[bool, str]] = [
            (self.mapped_file_size_commit_log_bytes >= 4096, "commitlog file size must be >= 4096 bytes"),
            (
                self.mapped_file_size_commit_log_bytes
                >= self.max_message_size_bytes + self.max_properties_size_bytes + self.max_topic_length_bytes + 91 + 8,
                "commitlog file size must hold the largest message plus its end marker",
            ),
            (self.mapped_file_size_consume_queue_bytes % CQ_UNIT_SIZE_BYTES == 0, "consume queue file size must be a multiple of 20"),
            (self.mapped_file_size_consume_queue_bytes >= CQ_UNIT_SIZE_BYTES, "consume queue file must hold one entry"),
            (self.max_hash_slot_num > 0 and self.max_index_num > 1, "index file needs slots and entries"),
            (self.max_message_size_bytes > 0, "max_message_size_bytes must be positive"),
            (0 < self.max_properties_size_bytes <= 32_767, "max_properties_size_bytes must be in 1..32767"),
            (0 < self.max_topic_length_bytes <= 127, "max_topic_length_bytes must be in 1..127"),
            (self.flush_interval_commit_log_ms > 0, "flush_interval_commit_log_ms must be positive"),
            (self.sync_flush_timeout_ms > 0, "sync_flush_timeout_ms must be positive"),
            (self.transient_store_pool_size > 0, "transient_store_pool_size must be positive"),
            (
                self.disk_max_used_space_ratio_percent <= self.disk_clean_forcibly_ratio_percent <= self.disk_warning_ratio_percent <= 100,
                "disk ratios must satisfy max_used <= clean_forcibly <= warning <= 100",
            ),
            (0 < self.default_topic_queue_nums <= self.max_topic_queue_nums, "default queue count must be in 1..max_topic_queue_nums"),
            (self.max_batch_messages > 0, "max_batch_messages must be positive"),
            (self.recover_clean_shutdown_files > 0, "recover_clean_shutdown_files must be positive"),
            (self.max_mapped_consume_queue_files >= 1, "max_mapped_consume_queue_files must be >= 1"),
            (self.max_dispatch_lag_bytes >= MIB, "max_dispatch_lag_bytes must be >= 1 MiB"),
            (
                100 <= self.flush_consumer_offset_interval_ms <= 3_600_000,
                "flush_consumer_offset_interval_ms must be in 100..3600000",
            ),
            (0 <= self.store_port <= 65535, "store_port must be a port number"),
            (
                not (self.transient_store_pool_enable and self.flush_disk_type is FlushDiskType.SYNC_FLUSH),
                "transient_store_pool_enable needs ASYNC_FLUSH (as in RocketMQ)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigInvalid(message)
        _parse_ipv4(self.store_host)
        if not self.delay_levels_ms():
            raise ConfigInvalid("message_delay_level must name at least one level")
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
            if name == "flush_disk_type":
                value = FlushDiskType(str(value).upper())
            elif name == "broker_role":
                value = BrokerRole(str(value).upper())
            kwargs[name] = value
        return cls(**kwargs)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if isinstance(value, enum.Enum) else value
        return out


def _parse_ipv4(text: str) -> bytes:
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise ConfigInvalid(f"store_host {text!r} is not an IPv4 address")
    return bytes(int(p) for p in parts)
