"""The store's status report: `runtime_info()` and `degraded_reasons()` of a store (ReportedStore).

Both only read: counters, offsets and flags other threads update without a lock, so a report
is a set of recent values, not one consistent snapshot. `degraded_reasons()` is what readiness
(/readyz) follows; `runtime_info()` is the `runtime` part of /v1/store and the source of most
gauges of /metrics (app/metrics.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from store.logfile.group_commit_service import GroupCommitService
from store.report_types import RecoveryReport, RuntimeInfo

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.disk.disk_usage import DiskUsageProbe
    from store.dispatch.reput_message_service import ReputMessageService
    from store.index.index_service import IndexService
    from store.logfile.commit_log import CommitLog
    from store.logfile.flush_real_time_service import FlushRealTimeService
    from store.logfile.lazy_mapped_file import MappingBudget
    from store.logfile.transient_store_pool import TransientStorePool
    from store.metadata.topic_config_manager import TopicConfigManager
    from store.queue.consume_queue import ConsumeQueue
    from store.retention.clean_commit_log_service import CleanCommitLogService
    from store.retention.clean_consume_queue_service import CleanConsumeQueueService
    from store.stats.store_stats_service import StoreStatsService


class ReportedStore(Protocol):
    """What the report reads of the store: the state of each of its parts (read only)."""

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def transient_store_pool(self) -> TransientStorePool | None: ...
    @property
    def flush_service(self) -> GroupCommitService | FlushRealTimeService: ...
    @property
    def reput_service(self) -> ReputMessageService: ...
    @property
    def index_service(self) -> IndexService: ...
    @property
    def topic_config_manager(self) -> TopicConfigManager: ...
    @property
    def mapping_budget(self) -> MappingBudget: ...
    @property
    def stats(self) -> StoreStatsService: ...
    @property
    def clean_commit_log_service(self) -> CleanCommitLogService: ...
    @property
    def clean_consume_queue_service(self) -> CleanConsumeQueueService: ...
    @property
    def disk_usage_probe(self) -> DiskUsageProbe: ...
    @property
    def disk_full(self) -> bool: ...
    @property
    def space_exhausted(self) -> bool: ...
    @property
    def space_shortage(self) -> str: ...
    @property
    def last_exit_ok(self) -> bool: ...
    def is_running(self) -> bool: ...
    def is_ready(self) -> bool: ...
    def recovery_progress(self) -> RecoveryReport: ...
    def all_consume_queues(self) -> list[ConsumeQueue]: ...


def degraded_reasons(store: ReportedStore) -> list[str]:
    """What keeps the store from serving normally now; empty when healthy."""
    reasons: list[str] = []
    if store.space_exhausted:
        reasons.append(f"disk full: {store.space_shortage or 'no space for a new file'}")
    elif store.disk_full:
        reasons.append(f"disk full: usage past disk_warning_ratio_percent ({store.config.disk_warning_ratio_percent} %)")
    failure = store.reput_service.failure
    if failure:
        reasons.append(f"dispatch failing: {failure}")
    else:
        lag = store.reput_service.behind()
        if lag > store.config.max_dispatch_lag_bytes:
            reasons.append(f"dispatch behind by {lag} bytes")
    return reasons


def group_commit_counts(service: GroupCommitService | FlushRealTimeService) -> tuple[int, int]:
    """SYNC_FLUSH's flushes that answered waits and the waits asked; zeros under ASYNC_FLUSH."""
    if isinstance(service, GroupCommitService):
        return service.group_commits, service.requests_served
    return 0, 0


def runtime_info(store: ReportedStore) -> RuntimeInfo:
    """Commitlog offsets and damage, recovery, dispatch, flush mode, role, disk, cleanup and file counts."""
    cl = store.commit_log
    mfq = cl.mapped_file_queue
    config = store.config
    flushes, waits = group_commit_counts(store.flush_service)
    return {
        "commitlog_min_offset": max(0, cl.get_min_offset()),
        "commitlog_max_offset": cl.get_max_offset(),
        "commitlog_committed_offset": mfq.committed_where if store.transient_store_pool else cl.get_max_offset(),
        "commitlog_flushed_offset": cl.flushed_where(),
        "commitlog_group_flushes": flushes,
        "commitlog_flush_waits": waits,
        "commitlog_damaged_ranges": [list(r) for r in cl.damaged_ranges],
        "commitlog_damaged_bytes": cl.damaged_bytes(),
        "commitlog_damaged_range_count": len(cl.damaged_ranges),
        "damaged_queue_entries": store.stats.damaged_queue_entries,
        "recovery": store.recovery_progress(),
        "commitlog_files": len(mfq.mapped_files),
        "commitlog_file_size_bytes": config.mapped_file_size_commit_log_bytes,
        "reput_offset": store.reput_service.reput_from_offset,
        "dispatch_lag_bytes": store.reput_service.behind(),
        "flush_disk_type": config.flush_disk_type.value,
        "broker_role": config.broker_role.value,
        "disk_used_ratio": round(store.disk_usage_probe(config.commit_log_dir()), 4),
        "disk_full": store.disk_full or store.space_exhausted,
        "dispatch_failure": store.reput_service.failure or None,
        "mapped_consume_queue_files": len(store.mapping_budget),
        "degraded_reasons": degraded_reasons(store),
        "cleanup": {**store.clean_commit_log_service.status(), **store.clean_consume_queue_service.status()},
        "index_files": len(store.index_service.index_files),
        "consume_queues": len(store.all_consume_queues()),
        "topics": len(store.topic_config_manager.all()),
        "last_exit_ok": store.last_exit_ok,
        "running": store.is_running(),
        "ready": store.is_ready(),
    }
