"""The shapes of the store's reports: status, stats and progress as the store answers them.

Each is a TypedDict, so a report stays the plain JSON-ready dict the front end sends as it is
(/v1/store, /v1/store/files, /v1/schedule, /v1/timers, /metrics) while its keys and value
types are checked where it is built and where it is read. The builders are
`store.store_report.runtime_info`, `StoreStatsService.snapshot`, `list_store_files`,
`RecoveryProgress.snapshot`, the cleanup services' `status`, `ScheduleMessageService.status`,
`TimerMessageStore.status` and `Transactions.status`.
"""

from __future__ import annotations

from typing import TypedDict


class RecoveryReport(TypedDict):
    """What load() is doing, then the index rebuild after start."""

    phase: str
    scanned_bytes: int
    total_bytes: int


class CommitLogCleanupStatus(TypedDict):
    """The commitlog cleanup service: its passes, what it deleted and the disk ratios it acts on."""

    next_pass_ms: int
    last_pass_ms: int
    passes: int
    commitlog_files_deleted: int
    manual_rounds_left: int
    clean_immediately: bool
    disk_ratio: float | None  # None: not measured yet
    disk_max_used_ratio: float
    disk_clean_forcibly_ratio: float
    disk_warning_ratio: float
    disk_full: bool


class ConsumeQueueCleanupStatus(TypedDict):
    """The consume-queue and index cleanup service: what it deleted, below which commitlog offset."""

    consume_queue_files_deleted: int
    index_files_deleted: int
    consume_queue_passes: int
    cleaned_below_offset: int


class CleanupStatus(CommitLogCleanupStatus, ConsumeQueueCleanupStatus):
    """Both cleanup services' status in one object (the `cleanup` part of RuntimeInfo)."""


class ManualCleanup(TypedDict):
    """The answer to a manual cleanup request: the passes granted and when the first runs."""

    rounds: int
    next_pass_ms: int


class RuntimeInfo(TypedDict):
    """Commitlog offsets and damage, recovery, dispatch, flush mode, role, disk, cleanup and file counts."""

    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_committed_offset: int
    commitlog_flushed_offset: int
    commitlog_group_flushes: int  # SYNC_FLUSH: flushes that answered waits (0 under ASYNC_FLUSH)
    commitlog_flush_waits: int  # SYNC_FLUSH: waits for a flush asked (their ratio to the flushes: the mean group)
    commitlog_damaged_ranges: list[list[int]]  # [start, end) pairs
    commitlog_damaged_bytes: int
    commitlog_damaged_range_count: int
    damaged_queue_entries: int
    recovery: RecoveryReport
    commitlog_files: int
    commitlog_file_size_bytes: int
    reput_offset: int
    dispatch_lag_bytes: int
    flush_disk_type: str
    broker_role: str
    disk_used_ratio: float
    disk_full: bool
    dispatch_failure: str | None
    mapped_consume_queue_files: int
    degraded_reasons: list[str]
    cleanup: CleanupStatus
    index_files: int
    consume_queues: int
    topics: int
    last_exit_ok: bool
    running: bool
    ready: bool


class StatsSnapshot(TypedDict):
    """Put and get counters, their rates per TPS window ("10s", "60s", "600s") and the put latency histogram."""

    put_messages: int
    put_bytes: int
    put_failures: int
    get_found: int
    get_miss: int
    get_transferred_messages: int
    get_transferred_bytes: int
    put_latency_bounds_us: list[int]
    put_latency_buckets: list[int]  # one more than the bounds: the last is +Inf
    put_latency_sum_us: int
    put_max_latency_us: int
    tps: dict[str, dict[str, float]]  # window -> counter name -> per second
    uptime_ms: int


class StoreFile(TypedDict):
    """One file of the store, its path relative to the store's root."""

    path: str
    kind: str
    size_bytes: int
    modified_ms: int


class StoreFiles(TypedDict):
    """The store's files, sorted by path; `truncated` when the listing stopped at its bound."""

    root: str
    files: list[StoreFile]
    total_bytes: int
    truncated: bool


class DelayLevelStatus(TypedDict):
    """One delay level: its delivered offset, messages waiting and the oldest waiting message's times."""

    level: int
    delay: str
    delay_ms: int
    offset: int
    max_offset: int
    waiting: int
    oldest_age_ms: int | None
    oldest_due_in_ms: int | None


class ScheduleStatus(TypedDict):
    """Every delay level, and the delivery counters of the schedule service."""

    levels: list[DelayLevelStatus]
    delivered: int
    retries: int
    undeliverable: int
    deduplicated: int


class LatenessBucket(TypedDict):
    """Deliveries at most `le_ms` late (None: the +Inf bucket)."""

    le_ms: int | None
    count: int


class TimerLateness(TypedDict):
    """How late timer messages were delivered (None where nothing was delivered yet)."""

    count: int
    mean_ms: float | None
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None
    buckets: list[LatenessBucket]


class TimerCounters(TypedDict):
    """The timer store's delivery counters."""

    enqueued: int
    delivered: int
    rolled: int
    deduplicated: int
    undeliverable: int
    retries: int


class TimerStatus(TimerCounters):
    """Timer messages: pending count, next due time, progress, bounds and lateness."""

    pending: int
    pending_in_wheel: int
    not_enqueued: int
    next_due_ms: int | None
    read_time_ms: int
    queue_offset: int
    timer_log_bytes: int
    precision_ms: int
    max_delay_ms: int
    lateness: TimerLateness


class TransactionStatus(TypedDict):
    """Half messages pending and unresolved, resolution counters, progress and check-back answers."""

    pending: int
    unknown: int
    committed: int
    rolled_back: int
    checks: int
    check_rollbacks: int
    deduplicated: int
    progress: int
    check_answers: dict[str, int]  # CheckAnswer value -> count
