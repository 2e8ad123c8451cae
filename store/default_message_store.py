"""DefaultMessageStore: the store's one implementation of MessageStore (store/message_store.py,
docs/store-api.md). Parts live in their own modules: the lock file (store/disk/lock_file.py), recovery
at load (store/store_recovery.py), the put pipeline (store/put/put_pipeline.py), the flush and slave
waits of a put (store/logfile/put_durability.py), key queries (store/index/key_query.py), the move
between master and slave (store/role_change.py), loading the consume queues (store/queue/consume_queue_table.py)
and the status report (store/store_report.py).

Lifecycle (store/store_lifecycle.py, where the shutdown order is written with its reasons): `load()`
takes the lock file, maps the files and recovers; `start()` creates the abort file and starts the
services; `shutdown()` refuses puts, stops the services, closes the files and releases the lock.

Puts: `put(PutBatch)` is the one way in (store/put/put_batch.py), through the put pipeline
(store/put/put_pipeline.py): a FIELDS batch is packed, the put hooks run in order (dedup ids, half
messages, timer messages, validation, delay levels: store/put/put_hook.py), the commitlog appends,
then the dispatch and the durability wait; put_message and put_messages wait for it.

Locks, their order and the threads: docs/concurrency.md.

Faults: a file whose space cannot be reserved (a full disk) sets `space_exhausted` at once
and wakes the cleanup service, whose next pass clears it when a commitlog file and a queue
file fit again; meanwhile puts answer DISK_FULL. A failing or lagging dispatch refuses puts
(DISPATCH_BEHIND) and is retried (store/dispatch/reput_message_service.py). `degraded_reasons()`
lists what is wrong now.

Dispatch is inline: after the commitlog's put returned (the put lock released), the putting
thread dispatches what is readable, with the native kernels, and wakes the held pulls of the
touched queues (store/dispatch/reput_message_service.py, store/dispatch/bulk_dispatch.py).

Deleting a topic (store/metadata/topic_deletion.py) records the commitlog end at that moment; dispatch,
crash re-dispatch and key queries drop messages of that topic below that cutoff. Transactions
(half messages, commit, rollback, check-back) are store/transaction/transaction_store.py.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core import SYSTEM_CLOCK, Clock
from core.service_thread import ServiceThread
from store.codec.message import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    MessageInner,
)
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.disk.disk_usage import DiskUsageProbe, disk_free_bytes, disk_used_ratio
from store.disk.lock_file import StoreLockFile
from store.disk.space_check import check_space
from store.disk.space_reservation import SpaceReservation, file_kind
from store.dispatch.bulk_dispatch import ArrivingListener, BulkDispatch
from store.dispatch.flush_consume_queue_service import FlushConsumeQueueService
from store.dispatch.index_rebuild_service import IndexRebuildService
from store.dispatch.reput_message_service import ReputMessageService
from store.errors import StoreNotRunning
from store.index.index_service import IndexService
from store.index.key_query import query_message
from store.logfile.allocate_mapped_file_service import AllocateMappedFileService
from store.logfile.commit_log import CommitLog
from store.logfile.commit_log_recovery import RecoveryProgress
from store.logfile.commit_real_time_service import CommitRealTimeService
from store.logfile.flush_real_time_service import FlushRealTimeService
from store.logfile.group_commit_service import GroupCommitService
from store.logfile.lazy_mapped_file import MappingBudget, budget_for_descriptors
from store.logfile.put_durability import PutDurability, as_future
from store.logfile.store_checkpoint import StoreCheckpoint
from store.logfile.store_files import list_store_files
from store.logfile.transient_store_pool import TransientStorePool
from store.message_store import CommitLogView, MessageStore, ReplicationWaiter
from store.metadata.consumer_offset_manager import ConsumerOffsetManager
from store.metadata.deleted_topic_table import DeletedTopicTable
from store.metadata.rocketmq_system_topics import system_topics
from store.metadata.topic_config_manager import TopicConfig, TopicConfigManager
from store.metadata.topic_deletion import TopicRemovals, delete_topic
from store.native import CheckedBatch
from store.pop.group_consumption import GroupConsumption
from store.put.dedup_hook import DedupHook
from store.put.dedup_window import DedupWindow, DuplicateItem, first_in_index
from store.put.put_batch import PackedProduce, PutBatch
from store.put.put_hook import PutHook
from store.put.put_pipeline import PackedPut, PutAnswer, PutPipeline
from store.put_validation import PutValidator
from store.queue.consume_queue import ConsumeQueue
from store.queue.consume_queue_table import ConsumeQueueTable
from store.queue.get_message_result import Filter, GetMessageResult
from store.queue.message_getter import MessageGetter
from store.report_types import ManualCleanup, RecoveryReport, RuntimeInfo, ScheduleStatus, StatsSnapshot, StoreFiles, TimerStatus
from store.retention.clean_commit_log_service import CleanCommitLogService
from store.retention.clean_consume_queue_service import CleanConsumeQueueService
from store.role_change import RoleChange
from store.schedule.delay_level_hook import DelayLevelHook
from store.schedule.schedule_message_service import ScheduleMessageService
from store.state.state_log import STATE_TOPIC, StateLog, StateStore
from store.state.state_snapshot_service import StateSnapshotService
from store.state.state_table import StateTable
from store.stats.store_stats_service import StoreStatsService
from store.status import (
    AppendedHook,
    PutMessageResult,
    PutMessageStatus,
)
from store.store_lifecycle import close_files, load_parts, start_services, stop_services
from store.store_report import degraded_reasons, runtime_info
from store.timer.timer_message_store import TimerMessageStore
from store.timer.timer_put_hook import TimerPutHook
from store.transaction.half_message_hook import HalfMessageHook
from store.transaction.transaction_check_service import TransactionCheckService
from store.transaction.transaction_store import Transactions

log = logging.getLogger("tidemq.store")


class _StateStoreView:
    """The store as the state log uses it (store.state.state_log.StateStore)."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store

    def append_with_hook(
        self, msgs: list[MessageInner], hook: AppendedHook, state_records: int, lazy_dispatch: bool = False
    ) -> PutMessageResult:
        return self._store.append_with_hook(msgs, hook, state_records, lazy_dispatch)

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        return self._store.find_consume_queue(topic, queue_id, create)

    def read_stored(self, offset: int, size: int) -> bytes | None:
        return self._store.read_stored(offset, size)


class DefaultMessageStore:
    def __init__(self, config: MessageStoreConfig, clock: Clock | None = None, disk_usage_probe: DiskUsageProbe | None = None) -> None:
        self.config = config.validate()
        # Disk blocks are reserved in steps ahead of each file's writes; a step that finds no space
        # refuses puts with DISK_FULL (store/disk/space_reservation.py, `_on_short`).
        self.reservation = SpaceReservation(config.reserve_ahead_bytes, self._on_short)
        self.space_shortage = ""  # what could not be reserved, for /readyz; "" while space_exhausted is False
        self.transient_store_pool: TransientStorePool | None = None
        if config.transient_store_pool_enable and config.broker_role is not BrokerRole.SLAVE:
            self.transient_store_pool = TransientStorePool(config.transient_store_pool_size, config.mapped_file_size_commit_log_bytes)
        self.allocate_service = AllocateMappedFileService(
            config.allocate_mapped_file_timeout_ms, config.warm_mapped_file_enable, self.transient_store_pool,
            config.prefault_mapped_file_enable, self.reservation,
        )  # fmt: skip
        self.commit_log = CommitLog(config, self.allocate_service, self.transient_store_pool, reservation=self.reservation)
        self.commit_log.mapped_file_queue.no_space_listener = self._on_no_space
        self.mapping_budget = MappingBudget(budget_for_descriptors(config.max_mapped_consume_queue_files))
        self.space_exhausted = False  # a file's space could not be reserved; cleared by a cleanup pass
        self.deleted_topics = DeletedTopicTable(config.config_dir())
        self.consume_queues = ConsumeQueueTable(self._new_consume_queue, config.max_topic_queue_nums, self.deleted_topics.cutoff)
        self.index_service = IndexService(config, self.allocate_service, self.reservation)
        rocketmq_topics = system_topics(
            config.broker_cluster_name, config.default_topic_queue_nums, config.pop_revive_queue_num, config.timer_wheel_enable
        )
        self.topic_config_manager = TopicConfigManager(config.config_dir(), config.max_topic_queue_nums, rocketmq_topics)
        self.topic_config = self.topic_config_manager.get  # type: ignore[method-assign]  # the same answer, one call (every produce)
        self.consumer_offset_manager = ConsumerOffsetManager(config.config_dir())
        self.topic_removals = TopicRemovals()  # queues of deleted topics, removed once the deletion is applied
        self.stats = StoreStatsService()
        self.bulk_dispatch = BulkDispatch(
            self.consume_queues.for_dispatch,
            self.index_service if config.message_index_enable else None,
            self.deleted_topics,
            self.mapping_budget,
            self.commit_log.delay_levels_ms,
            config.message_index_uniq_key_enable,
        )
        self._build_flushing()
        self.checkpoint: StoreCheckpoint | None = None
        self.flush_consume_queue_service: FlushConsumeQueueService | None = None
        self.validator = PutValidator(self)
        self.getter = MessageGetter(config, self.commit_log, self.stats, self.consume_queues.find)
        self.extra_services: list[ServiceThread] = []  # schedule, cleanup, HA: started after the core
        self.disk_full = False  # set by the cleanup service past the warning ratio
        self.last_exit_ok = True
        self.loaded = False
        self.recovery_limit: int | None = None  # set_recovery_limit(): where recovery cuts the commitlog at most
        self._running = False
        self._shutdown_done = False
        self._lock_file = StoreLockFile(config.store_path_root_dir, config.lock_path())
        self._ready_offset = 0
        self.index_rebuild_from: int | None = None  # set by recovery when the index must be rebuilt after start
        self.index_rebuild_service: IndexRebuildService | None = None
        self._recovery_progress = RecoveryProgress()
        self._build_scheduling(clock, disk_usage_probe)
        # The put hooks, in order (store/put/put_hook.py): each may rewrite the batch or refuse it.
        self.dedup_window = DedupWindow(config.dedup_window_s * 1000, config.dedup_max_keys, self.now_ms, self._dedup_lookup)
        self.put_hooks: list[PutHook] = [
            DedupHook(self.dedup_window), HalfMessageHook(self.transactions), TimerPutHook(self.timer), self.validator,
            DelayLevelHook(config.delay_levels_ms()),
        ]  # fmt: skip
        self.pipeline = PutPipeline(
            config, self.commit_log, self.put_hooks, self.stats, self.durability, self.reput_service, lambda: self.space_exhausted
        )
        # The instance's put_answer is the pipeline's own method: a produce of the front end runs no call around it.
        self.put_answer = self.pipeline.put  # type: ignore[method-assign]  # the same signature, bound one level down
        self.put_packed = self.pipeline.put_packed  # type: ignore[method-assign]  # likewise (every produce of the lane)
        self._build_state_log()
        self.role_change = self._build_role_change()

    def _build_flushing(self) -> None:
        """Dispatch, the flush service the flush type asks for, the durability waits and the transient pool's commit."""
        config = self.config
        self.reput_service = ReputMessageService(self.commit_log, config, self.bulk_dispatch)
        self.reput_service.trim = self.trim_mappings
        self.reput_service.release_mappings = self.mapping_budget.release_all
        self.reput_service.on_no_space = self._on_no_space
        self.flush_service: GroupCommitService | FlushRealTimeService
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.flush_service = GroupCommitService(self.commit_log, config.max_group_commit_requests, self._on_commit_log_flushed)
            self.commit_log.native_flushes = self.flush_service.group_flush  # read by the log's flushed_where()
        else:
            self.flush_service = FlushRealTimeService(self.commit_log, config, self._on_commit_log_flushed)
        self.durability = PutDurability(config, self.flush_service)
        self.commit_service = CommitRealTimeService(self.commit_log, config, self.flush_service) if self.transient_store_pool else None
        if self.commit_service is not None:
            self.commit_service.on_committed = self.reput_service.wakeup  # committed bytes become dispatchable

    def _build_scheduling(self, clock: Clock | None, disk_usage_probe: DiskUsageProbe | None) -> None:
        """The services that deliver later or remove: delay levels, retention, POP, timers, transactions."""
        config = self.config
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.disk_usage_probe: DiskUsageProbe = disk_usage_probe if disk_usage_probe is not None else disk_used_ratio
        self.schedule_service = ScheduleMessageService(self, self.clock)
        self.clean_consume_queue_service = CleanConsumeQueueService(
            config, self.commit_log, self.index_service, self.consume_queues.all, self.clock
        )
        self.clean_commit_log_service = CleanCommitLogService(
            self, self.clock, self.disk_usage_probe, self.clean_consume_queue_service.wakeup
        )
        self.extra_services += [self.schedule_service, self.clean_commit_log_service, self.clean_consume_queue_service]
        self.bulk_dispatch.topic_wakers[SCHEDULE_TOPIC] = self.schedule_service.on_entries  # a level's entries wake it
        self.group_consumption = GroupConsumption(self)  # its revive service is registered at load
        # Timer messages (store/timer/timer_message_store.py): stopped first, being last in the list.
        self.timer: TimerMessageStore | None = TimerMessageStore(self) if config.timer_wheel_enable else None
        if self.timer is not None:
            self.extra_services += self.timer.services()
            self.bulk_dispatch.topic_wakers[TIMER_TOPIC] = self.timer.on_entries  # its entries wake the enqueue service
        # Its check service is registered at load (store/transaction/transaction_store.py).
        self.transactions: Transactions = Transactions(self)
        self.transaction_check_service = TransactionCheckService(self, self.transactions)

    def _build_state_log(self) -> None:
        """The state log over every state table, wired to the tables, dispatch and the snapshot service."""
        config = self.config
        # State in the log (store/state/state_log.py): every table a consumer or a scheduler depends on.
        tables: list[StateTable] = [
            self.consumer_offset_manager, self.topic_config_manager, self.schedule_service.offsets,
            *self.group_consumption.state_tables(), self.transactions.producer_groups,
        ]  # fmt: skip
        if self.timer is not None:
            tables.append(self.timer.progress)
        self.state_log = StateLog(self._state_store(), tables, config.max_message_size_bytes, config.max_batch_messages)
        for table in tables:
            table.state_log = self.state_log
        self.topic_config_manager.on_deleted_locked = self._topic_deleted_locked
        self.state_log.after_apply = lambda: self.topic_removals.finish(self.deleted_topics)
        self.bulk_dispatch.listeners.append(self.state_log.on_dispatched)
        self.state_snapshot_service = StateSnapshotService(
            self.state_log, config.flush_consumer_offset_interval_ms, lambda: not self.validator.is_slave, self.is_running
        )

    def _build_role_change(self) -> RoleChange:
        return RoleChange(
            self.config, self.validator, self.commit_log, self.reput_service, self.consume_queues, self.state_log,
            self.state_snapshot_service, self.topic_removals, self.deleted_topics, self.dedup_window,
            (self.schedule_service, self.timer, self.group_consumption, self.transactions), self.is_running,
            self._last_stored_ms,
        )  # fmt: skip

    # Lifecycle -----------------------------------------------------------------------

    def load(self) -> bool:
        """Take the lock file, map the files and recover (store/store_lifecycle.py: `load_parts`)."""
        check_space(self.config)  # a file size no volume can hold refuses the start (store/disk/space_check.py)
        self.lock()
        try:
            self._ready_offset = load_parts(self, self._recovery_progress)
        except BaseException:
            self._lock_file.release()
            raise
        self.loaded = True
        return True

    def lock(self) -> None:
        """Take the store directory's lock file (StoreLocked when another process holds it); load() calls it too."""
        self._lock_file.acquire()

    def recovery_progress(self) -> RecoveryReport:
        """What load() is doing: {"phase", "scanned_bytes", "total_bytes"}; safe from any thread."""
        return self._recovery_progress.snapshot()

    def start(self) -> None:
        if not self.loaded:
            raise StoreNotRunning("load() the store before start()")
        with open(self.config.abort_path(), "w"):
            pass
        start_services(self, self._recovery_progress)
        self.dedup_window.restart(self._last_stored_ms())  # ids put before this start are read from the index
        self._running = True

    def shutdown(self) -> None:
        """Stop services in the order store/store_lifecycle.py gives, close the files, release the lock; idempotent."""
        if self._shutdown_done:
            return
        self._shutdown_done = True
        was_running = self._running
        self._running = False
        stop_services(self)
        if self.loaded:
            close_files(self, clean=was_running)
        self._lock_file.release()

    def is_running(self) -> bool:
        return self._running

    def is_ready(self) -> bool:
        caught_up = self.reput_service.reput_from_offset >= self._ready_offset
        return self._running and caught_up and not self.index_service.rebuilding

    def now_ms(self) -> int:
        return self.clock.now_ms()

    # Putting -------------------------------------------------------------------------

    def put(self, batch: PutBatch) -> concurrent.futures.Future[PutMessageResult]:
        """The one way in: run the put hooks, append, and answer a future (done at once, or when the
        flush and slave waits end). See store/put/put_pipeline.py."""
        return as_future(*self.pipeline.put(batch))

    def put_answer(self, batch: PutBatch) -> PutAnswer:
        """`put` without the future (MessageStore.put_answer). Stands in the class for what __init__ binds on the
        instance, the pipeline's `put` itself; the same answer."""
        return self.pipeline.put(batch)

    def put_lane(self, batch: PutBatch) -> PutAnswer | None:
        """The put lane alone (MessageStore.put_lane)."""
        return self.pipeline.put_lane(batch)

    def put_packed(self, topic: str, queue_id: int, packed: PackedProduce, born_host: bytes, defer_dispatch: bool) -> PackedPut | None:
        """The put lane of a packed produce without a batch (MessageStore.put_packed); bound on the instance as put_answer."""
        return self.pipeline.put_packed(topic, queue_id, packed, born_host, defer_dispatch)

    def put_message(self, msg: MessageInner) -> PutMessageResult:
        """Blocking helper: `put` of a batch of one, waited for."""
        return self.durability.wait(*self.pipeline.put(PutBatch.of((msg,))))

    def put_messages(self, msgs: Sequence[MessageInner], lazy_dispatch: bool = False) -> PutMessageResult:
        """Blocking helper: `put` of a MESSAGES batch, waited for (`lazy_dispatch`: PutBatch's)."""
        return self.durability.wait(*self.pipeline.put(PutBatch.of(msgs, lazy_dispatch=lazy_dispatch)))

    def check_batch(self, batch: bytes | bytearray | memoryview) -> CheckedBatch:
        """A batch in RocketMQ's encoding checked against the store's limits, for an ENCODED PutBatch (PutPipeline's)."""
        return self.pipeline.check_batch(batch)

    def _last_stored_ms(self) -> int | None:
        """The latest store time known of the log (flushed, checkpointed or dispatched; 0: none known), None for a log
        without messages (the dedup window's lookups: store/put/dedup_window.py)."""
        if self.commit_log.get_max_offset() <= max(0, self.commit_log.get_min_offset()):
            return None
        checkpointed = self.checkpoint.physic_msg_timestamp if self.checkpoint is not None else 0
        return max(checkpointed, self.commit_log.mapped_file_queue.store_timestamp, self.bulk_dispatch.last_dispatched_timestamp)

    def _dedup_lookup(self, topic: str, dedup_id: str, since_ms: int) -> DuplicateItem | None:
        """The first message of `topic` stored since `since_ms` under `dedup_id`, through the index; None when none."""
        if not self.config.message_index_enable:
            return None
        return first_in_index(self.query_message, topic, dedup_id, since_ms)

    # The state log's view of the store (store/state/state_log.py) ---------------------------------

    def _state_store(self) -> StateStore:
        return _StateStoreView(self)

    def append_with_hook(
        self, msgs: list[MessageInner], hook: AppendedHook, state_records: int, lazy_dispatch: bool = False
    ) -> PutMessageResult:
        """Put `msgs` (the last `state_records` of them the broker's own state, not counted as messages
        stored) with `hook` run under the put lock after the append, then wait for durability
        (`lazy_dispatch`: PutBatch's)."""
        batch = PutBatch.of(msgs, on_appended_locked=hook, state_records=state_records, lazy_dispatch=lazy_dispatch)
        return self.durability.wait(*self.pipeline.put(batch))

    def read_stored(self, offset: int, size: int) -> bytes | None:
        """The stored bytes of the message at commitlog `offset`; None when they are gone."""
        res = self.commit_log.get_message(offset, size)
        if res is None:
            return None
        try:
            return bytes(res.view[:size])
        finally:
            res.release()

    def dispatch_owed(self) -> int:
        """Dispatch the puts made with `defer_dispatch` (ReputMessageService.dispatch_owed); the messages dispatched."""
        return self.reput_service.dispatch_owed()

    def durable_through(self, offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        """The flush and slave waits of the log up to commitlog `offset`, as one future (PutDurability.through)
        for every put owing durability that ends there or before; None when puts are answered at once. ValueError
        for an offset past the log's end: no put ends there, and a flush asked that far would claim bytes not yet
        written."""
        if offset > self.commit_log.get_max_offset():
            raise ValueError(f"offset {offset} is past the log's end ({self.commit_log.get_max_offset()})")
        return self.durability.through(offset)

    def _on_commit_log_flushed(self, store_timestamp: int) -> None:
        if self.checkpoint is not None and store_timestamp > self.checkpoint.physic_msg_timestamp:
            self.checkpoint.physic_msg_timestamp = store_timestamp

    # Dispatch ------------------------------------------------------------------------

    def trim_mappings(self) -> None:
        """Unmap cold consume-queue files past the budget (dispatch thread, or the loader before start)."""
        if self.mapping_budget.over():
            self.mapping_budget.trim()

    def _on_no_space(self, path: str) -> None:
        """A file's space could not be reserved: refuse puts now and let cleanup check the disk at once."""
        self._on_short(file_kind(path), path, disk_free_bytes(path))

    def _on_short(self, kind: str, path: str, free_bytes: int) -> None:
        """A reservation of `path` (a `kind` file) failed for space: refuse puts (DISK_FULL) now, name
        the file kind and the free space for /readyz, and let cleanup check the disk at once."""
        self.space_shortage = f"no space to reserve a {kind} file ({free_bytes} bytes free)"
        if not self.space_exhausted:
            self.space_exhausted = True
            log.error("no disk space for %s (%d bytes free): refusing puts (DISK_FULL) until space is freed", path, free_bytes)
        self.clean_commit_log_service.wakeup()

    def add_message_arriving_listener(self, listener: ArrivingListener) -> None:
        """`listener(topic, queue_id, logic_offset_after, tags_codes)` once per queue a dispatch pass extended."""
        self.bulk_dispatch.listeners.append(listener)

    def register_service(self, service: ServiceThread) -> None:
        if self._running:
            raise RuntimeError(f"register {service.name} before the store starts")
        self.extra_services.append(service)

    # Consume queues ------------------------------------------------------------------

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            topic, queue_id, self.config.consume_queue_dir(), self.config.mapped_file_size_consume_queue_bytes, self.mapping_budget,
            self.allocate_service, self.reservation,
        )  # fmt: skip
        cq.mapped_file_queue.no_space_listener = self._on_no_space
        return cq

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        return self.consume_queues.find(topic, queue_id, create)

    def all_consume_queues(self) -> list[ConsumeQueue]:
        return self.consume_queues.all()

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else 0

    def queue_ids_of(self, topic: str) -> list[int]:
        return self.consume_queues.queue_ids_of(topic)

    def delete_topic(self, topic: str) -> bool:
        """Drop a topic's consume queues, its config and its consumer offsets (its log bytes age out)."""
        return delete_topic(
            self.state_log, self.topic_config_manager, self.consumer_offset_manager, self.topic_removals, self.deleted_topics, topic,
            self.consume_queues.has_topic(topic),
        )  # fmt: skip

    def _topic_deleted_locked(self, topic: str, cutoff: int) -> None:
        """A deletion record applied (under the put lock on a master, in dispatch on a slave): drop the
        topic's queues from the table and remember the cutoff; the files go in `topic_removals.finish`.
        A deletion whose cutoff the table already holds was applied before (a record read again after a
        restart): the queues hold a later incarnation now, and stay."""
        if self.deleted_topics.cutoff(topic) >= cutoff:
            return
        with self.consume_queues.removing():
            self.deleted_topics.record_locked(topic, cutoff, max(0, self.commit_log.get_min_offset()))
            queues = self.consume_queues.drop_topic_locked(topic)
            for key in [k for k in self.commit_log.topic_queue_table if k[0] == topic]:
                del self.commit_log.topic_queue_table[key]
            self.topic_removals.add_locked(self.config.consume_queue_dir(), topic, queues)

    # Topics and consumer offsets ----------------------------------------------------

    def topic_config(self, topic: str) -> TopicConfig | None:
        return self.topic_config_manager.get(topic)

    def topic_configs(self) -> list[TopicConfig]:
        return self.topic_config_manager.all()

    def create_or_update_topic(self, topic: str, queues: int, perm: str = "rw") -> TopicConfig:
        return self.topic_config_manager.create_or_update(topic, queues, perm)

    def commit_offsets(self, group: str, commits: list[tuple[str, int, int]]) -> None:
        self.consumer_offset_manager.commit_offsets(group, commits)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.consumer_offset_manager.query_offset(group, topic, queue_id)

    # Reading -------------------------------------------------------------------------

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_count: int, message_filter: Filter | None = None
    ) -> GetMessageResult:
        return self.getter.get_message(group, topic, queue_id, offset, max_count, message_filter)

    def get_put_message(
        self, topic: str, queue_id: int, queue_offset: int, spans: Sequence[tuple[int, int]], max_count: int
    ) -> GetMessageResult | None:
        return self.getter.get_put_message(topic, queue_id, queue_offset, spans, max_count)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.getter.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]:
        max_num = min(max_num, self.config.max_msgs_num_batch)
        return query_message(self.commit_log, self.index_service, self.deleted_topics, topic, key, max_num, begin_ms, end_ms)

    def look_message_by_offset(self, commitlog_offset: int) -> dict[str, Any] | None:
        if commitlog_offset < max(0, self.commit_log.get_min_offset()) or commitlog_offset >= self.commit_log.get_max_offset():
            return None
        found = self.commit_log.look_message_by_offset(commitlog_offset)
        return None if found is None or found["topic"] == STATE_TOPIC else found  # the broker's own state is never served

    # Replication hooks ---------------------------------------------------------------

    def set_replicated(self, replicated: bool) -> None:
        """Whether this store may have slaves (ha/ says so): a master then writes every state table whole
        into the log, so a slave holds all of it, not only the changes since it joined."""
        self.state_log.replicated = replicated
        if replicated:
            self.state_snapshot_service.wakeup()
            cfg = self.config
            if not (cfg.message_index_enable and cfg.message_index_uniq_key_enable):
                # A new master checks what its old master may have delivered after its last progress record by UNIQ_KEY.
                log.warning(
                    "message_index_enable or message_index_uniq_key_enable is off on a replicated store: after a "
                    "failover the new master cannot find what its old master delivered last, and may deliver delayed "
                    "messages, timer messages and committed transaction messages again"
                )

    def set_replication_waiter(self, waiter: ReplicationWaiter | None) -> None:
        self.durability.replication_waiter = waiter

    def set_broker_role(self, role: BrokerRole) -> None:
        """Become master or slave (store/role_change.py: a slave becoming master takes over in its order)."""
        self.role_change.set_broker_role(role)

    def set_recovery_limit(self, offset: int | None) -> None:
        if self.loaded:
            raise RuntimeError("set the recovery limit before load()")
        self.recovery_limit = offset

    def commit_log_min_offset(self) -> int:
        return max(0, self.commit_log.get_min_offset())

    def commit_log_max_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_commit_log_data(self, offset: int, max_bytes: int) -> bytes:
        res = self.commit_log.get_data(offset)
        if res is None:
            return b""
        try:
            return bytes(res.view[:max_bytes])
        finally:
            res.release()

    def commit_log_view(self, offset: int) -> CommitLogView | None:
        return self.commit_log.get_data(offset)

    def append_replicated_data(self, offset: int, data: bytes | memoryview) -> bool:
        if not self.commit_log.append_data(offset, data):
            return False
        self.reput_service.wakeup()  # the slave's dispatch follows the appended bytes
        return True

    # Status --------------------------------------------------------------------------

    def runtime_info(self) -> RuntimeInfo:
        return runtime_info(self)

    def degraded_reasons(self) -> list[str]:
        return degraded_reasons(self)

    def stats_snapshot(self) -> StatsSnapshot:
        return self.stats.snapshot()

    def store_files(self) -> StoreFiles:
        """Every file under the store's root with its size and modification time (blocking; bounded walk)."""
        return list_store_files(self.config.store_path_root_dir)

    # Delay levels and retention -------------------------------------------------------------

    def execute_delete_files_manually(self) -> ManualCleanup:
        """Delete expired commitlog files at any hour for the next `manual_delete_file_rounds` passes, the first now."""
        return self.clean_commit_log_service.execute_delete_files_manually()

    def timer_status(self) -> TimerStatus | None:
        """Timer messages: pending count, next due time, lateness of deliveries, counters; None when the timer is off."""
        return self.timer.status() if self.timer is not None else None

    def schedule_status(self) -> ScheduleStatus:
        """Per delay level: messages waiting, delivered offset, the oldest waiting message's age and due time."""
        return self.schedule_service.status()

    def delay_level_for_ms(self, delay_ms: int) -> int | None:
        """The smallest delay level not shorter than `delay_ms` (0 for none); None when every level is shorter."""
        return self.schedule_service.level_for_delay_ms(delay_ms)


if TYPE_CHECKING:

    def _implements(store: DefaultMessageStore) -> MessageStore:
        return store  # mypy checks here that DefaultMessageStore satisfies MessageStore structurally
