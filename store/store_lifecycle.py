"""The store's lifecycle: what `DefaultMessageStore.load()`, `start()` and `shutdown()` run, in order.

`load_parts` maps the files and recovers (store/store_recovery.py), then loads what reads the
recovered queues; `start_services` starts the services; `stop_services` stops them in this order,
each for a reason:
  1. refuse new puts (the store's `_running` is False before this runs), stop the
     TransactionCheckService (registered last at load, so stopped first: it puts commits and op
     records; its final pass persists the check counts), then the group consumption's dead-letter
     redrive and revive services (they put moved messages and redeliveries), then the timer services
     (TimerDequeueService, which appends, then TimerEnqueueService, then TimerFlushService, whose
     final pass records their progress in timercheck), then the cleanup and schedule services —
     nothing may append or delete while the rest shuts down;
  2. IndexRebuildService when one runs (it stops writing the index; the next start goes on
     where it stopped), then ReputMessageService — drains dispatch so the queues and index
     cover the whole log;
  3. CommitRealTimeService, then the commitlog flusher — the final flush of the log,
     after every append and before the checkpoint records it;
  4. FlushConsumeQueueService — the final flush of queues, index and checkpoint, after
     dispatch finished;
  5. AllocateMappedFileService, StoreStatsService, StateSnapshotService — nothing
     needs them any more (the state tables' files are written once more in step 6);
then `close_files`: the state tables persisted, files closed (the timer's files after its final
checkpoint), the abort file removed — only after everything above succeeded, so a failure means
crash recovery — and the store releases its lock file last.

They order every part of the store, which they see as `LifecycleStore` (DefaultMessageStore is one).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

from store.codec.message import SYSTEM_TOPICS
from store.dispatch.flush_consume_queue_service import FlushConsumeQueueService
from store.dispatch.index_rebuild_service import IndexRebuildService
from store.errors import StoreNotRunning
from store.logfile.commit_log_recovery import RecoveryProgress
from store.logfile.store_checkpoint import StoreCheckpoint
from store.pop.revive_horizon import ReviveHorizon
from store.store_recovery import recover_store

if TYPE_CHECKING:
    from core.service_thread import ServiceThread
    from store.config import MessageStoreConfig
    from store.dispatch.bulk_dispatch import BulkDispatch
    from store.dispatch.reput_message_service import ReputMessageService
    from store.index.index_service import IndexService
    from store.logfile.allocate_mapped_file_service import AllocateMappedFileService
    from store.logfile.commit_log import CommitLog
    from store.logfile.commit_real_time_service import CommitRealTimeService
    from store.logfile.flush_real_time_service import FlushRealTimeService
    from store.logfile.group_commit_service import GroupCommitService
    from store.logfile.transient_store_pool import TransientStorePool
    from store.metadata.consumer_offset_manager import ConsumerOffsetManager
    from store.metadata.deleted_topic_table import DeletedTopicTable
    from store.metadata.topic_config_manager import TopicConfigManager
    from store.metadata.topic_deletion import TopicRemovals
    from store.pop.group_consumption import GroupConsumption
    from store.put_validation import PutValidator
    from store.queue.consume_queue import ConsumeQueue
    from store.queue.consume_queue_table import ConsumeQueueTable
    from store.schedule.schedule_message_service import ScheduleMessageService
    from store.state.state_log import StateLog
    from store.state.state_snapshot_service import StateSnapshotService
    from store.stats.store_stats_service import StoreStatsService
    from store.timer.timer_message_store import TimerMessageStore
    from store.transaction.transaction_check_service import TransactionCheckService
    from store.transaction.transaction_store import Transactions


class LifecycleStore(Protocol):
    """The store's parts its lifecycle orders (and what recovery reads: store.store_recovery.RecoveredStore)."""

    # Set here: at load (the first three and the services' list) and at start (an index rebuild).
    last_exit_ok: bool
    checkpoint: StoreCheckpoint | None
    flush_consume_queue_service: FlushConsumeQueueService | None
    extra_services: list[ServiceThread]
    index_rebuild_from: int | None
    index_rebuild_service: IndexRebuildService | None
    # The parts, made by the store's constructor.
    config: MessageStoreConfig
    transient_store_pool: TransientStorePool | None
    allocate_service: AllocateMappedFileService
    commit_log: CommitLog
    consume_queues: ConsumeQueueTable
    index_service: IndexService
    bulk_dispatch: BulkDispatch
    reput_service: ReputMessageService
    flush_service: GroupCommitService | FlushRealTimeService
    commit_service: CommitRealTimeService | None
    topic_config_manager: TopicConfigManager
    deleted_topics: DeletedTopicTable
    topic_removals: TopicRemovals
    consumer_offset_manager: ConsumerOffsetManager
    schedule_service: ScheduleMessageService
    group_consumption: GroupConsumption
    transactions: Transactions
    transaction_check_service: TransactionCheckService
    timer: TimerMessageStore | None
    state_log: StateLog
    state_snapshot_service: StateSnapshotService
    stats: StoreStatsService
    validator: PutValidator
    recovery_limit: int | None

    def now_ms(self) -> int: ...
    def all_consume_queues(self) -> list[ConsumeQueue]: ...
    def trim_mappings(self) -> None: ...


def load_parts(store: LifecycleStore, progress: RecoveryProgress) -> int:
    """Map the files, recover and load what reads the recovered queues; the commitlog offset the store is
    ready at (dispatch caught up to it). The caller holds the lock file and releases it when this raises."""
    cfg = store.config
    progress.begin("loading files", 0)
    store.last_exit_ok = not os.path.exists(cfg.abort_path())
    store.checkpoint = StoreCheckpoint(cfg.checkpoint_path())
    if store.transient_store_pool is not None:
        store.transient_store_pool.init()
    ok = store.commit_log.load() and store.consume_queues.load(cfg.consume_queue_dir())
    ok = ok and store.index_service.load(store.last_exit_ok, store.checkpoint.index_msg_timestamp)
    if not ok:
        raise StoreNotRunning("the store files could not be loaded (see the log)")
    queue_ids = {topic: list(queues) for topic, queues in store.consume_queues.queues.items() if topic not in SYSTEM_TOPICS}
    store.topic_config_manager.load_or_rebuild(queue_ids)
    store.deleted_topics.load()  # before recovery: re-dispatch must drop deleted topics' messages
    # The state tables' local files before recovery; the records after them are applied after it.
    store.consumer_offset_manager.load()
    store.schedule_service.offsets.load()
    store.group_consumption.load_files()
    store.transactions.producer_groups.load()
    ready_offset = recover_store(store, progress)
    store.state_log.load()  # after recovery: the records past each local file, from the dispatched state queues
    store.topic_config_manager.settle()
    store.topic_removals.finish(store.deleted_topics)
    store.schedule_service.load()  # after recovery: it reads the delay queues' ends
    _load_consumption(store)
    store.flush_consume_queue_service = FlushConsumeQueueService(
        cfg, store.consume_queues.all, store.index_service, store.checkpoint, lambda: store.bulk_dispatch.last_dispatched_timestamp
    )
    return ready_offset


def _load_consumption(store: LifecycleStore) -> None:
    """After recovery and the state records: the timer, POP's revive service and the transactions."""
    timer = store.timer
    if timer is not None:
        timer.load(store.last_exit_ok)  # it reads the timer topic's queue and the index
    timer_read_ms = (lambda: timer.read_time_ms) if timer is not None else None
    horizon = ReviveHorizon(store.now_ms, timer_read_ms, store.commit_log.get_max_offset, lambda: store.reput_service.reput_from_offset)
    store.extra_services += store.group_consumption.load(horizon)  # the revive service reads the revive group's offsets
    revive = store.group_consumption.revive_service
    assert revive is not None
    store.bulk_dispatch.topic_wakers[revive.topic] = revive.on_entries  # checkpoints and acks come due there
    store.transactions.load()  # it reads the half and op queues and its progress
    store.extra_services.append(store.transaction_check_service)


def start_services(store: LifecycleStore, progress: RecoveryProgress) -> None:
    """Start the services of a loaded store (the abort file was made first)."""
    store.allocate_service.start()
    # Next files ahead of need (docs/concurrency.md): refused while the service was not running.
    store.commit_log.order_next_file()
    for cq in store.consume_queues.all():
        cq.order_ahead_again()
    store.index_service.order_ahead_again()
    store.flush_service.start()
    if store.commit_service is not None:
        store.commit_service.start()
    store.reput_service.start()
    if store.index_rebuild_from is not None:
        cfg = store.config
        store.index_rebuild_service = IndexRebuildService(
            store.commit_log, store.index_service, store.reput_service, progress,
            store.index_rebuild_from, cfg.message_index_uniq_key_enable, store.bulk_dispatch.delay_levels_ms,
        )  # fmt: skip
        store.index_rebuild_service.start()
    assert store.flush_consume_queue_service is not None
    store.flush_consume_queue_service.start()
    store.stats.start()
    store.state_log.writable = True
    store.state_log.following = store.validator.is_slave
    store.state_snapshot_service.start()
    for service in store.extra_services:
        service.start()


def stop_services(store: LifecycleStore) -> None:
    """Steps 1 to 5 of the module docstring (the store refuses puts already)."""
    for service in reversed(store.extra_services):
        service.shutdown()
    if store.index_rebuild_service is not None:
        store.index_rebuild_service.shutdown()
    store.reput_service.shutdown()
    if store.commit_service is not None:
        store.commit_service.shutdown()
    store.flush_service.shutdown()
    if store.flush_consume_queue_service is not None:
        store.flush_consume_queue_service.shutdown()
    store.allocate_service.shutdown()
    store.allocate_service.close_unclaimed()
    store.stats.shutdown()
    store.state_snapshot_service.shutdown()


def close_files(store: LifecycleStore, clean: bool) -> None:
    """Flush and close every file; remove the abort file when the store ran and stopped `clean`ly with
    dispatch caught up (else the next load recovers as after a crash)."""
    checkpoint = store.checkpoint
    assert checkpoint is not None
    store.commit_log.flush(0)
    for cq in store.consume_queues.all():
        cq.flush(0)
    store.index_service.flush()
    checkpoint.physic_msg_timestamp = max(checkpoint.physic_msg_timestamp, store.commit_log.mapped_file_queue.store_timestamp)
    checkpoint.logics_msg_timestamp = max(checkpoint.logics_msg_timestamp, store.bulk_dispatch.last_dispatched_timestamp)
    store.state_snapshot_service.persist_all()
    if store.timer is not None:
        store.timer.close()
    store.commit_log.shutdown()
    for cq in store.consume_queues.all():
        cq.shutdown()
    store.index_service.shutdown()
    checkpoint.shutdown()
    if store.transient_store_pool is not None:
        store.transient_store_pool.destroy()
    if clean and store.reput_service.behind() == 0:
        try:
            os.unlink(store.config.abort_path())
        except FileNotFoundError:
            pass
