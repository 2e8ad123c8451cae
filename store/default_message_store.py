"""DefaultMessageStore: the store's one entry point (docs/store-api.md is its contract).

Lifecycle: `load()` takes the lock file, maps the files and recovers; `start()` creates
the abort file and starts the services; `shutdown()` stops them in this order, each
for a reason:
  1. refuse new puts (`_running = False`), stop the schedule and cleanup services —
     nothing may append or delete while the rest shuts down;
  2. ReputMessageService — drains dispatch so the queues and index cover the whole log;
  3. CommitRealTimeService, then the commitlog flusher — the final flush of the log,
     after every append and before the checkpoint records it;
  4. FlushConsumeQueueService — the final flush of queues, index and checkpoint, after
     dispatch finished;
  5. AllocateMappedFileService, StoreStatsService — nothing needs them any more;
  6. metadata persisted, files closed, abort file removed, lock released — the abort
     file goes only after everything above succeeded, so a failure means crash recovery.

Lock order (store-wide): CommitLog.put_lock -> MappedFileQueue._lock -> MappedFile._ref_lock.
GroupCommitService._lock, TopicConfigManager._lock and ConsumerOffsetManager._lock are
leaves: nothing else is taken while one is held.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from store.allocate_mapped_file_service import AllocateMappedFileService
from store.clean_commit_log_service import CleanCommitLogService
from store.clean_consume_queue_service import CleanConsumeQueueService
from store.clock import SYSTEM_CLOCK, Clock
from store.commit_log import CommitLog
from store.commit_log_recovery import recover_abnormally, recover_normally
from store.commit_real_time_service import CommitRealTimeService
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.consume_queue import ConsumeQueue
from store.consumer_offset_manager import ConsumerOffsetManager
from store.disk_usage import DiskUsageProbe, disk_used_ratio
from store.errors import StoreLocked, StoreNotRunning
from store.flush_consume_queue_service import FlushConsumeQueueService
from store.flush_real_time_service import FlushRealTimeService
from store.group_commit_service import GroupCommitRequest, GroupCommitService
from store.index_service import IndexService
from store.message import MessageInner, split_keys, topic_problem
from store.message_codec import DispatchRequest
from store.message_getter import MessageGetter
from store.put_validation import PutValidator
from store.reput_message_service import ArrivingListener, ReputMessageService
from store.schedule_message_service import ScheduleMessageService
from store.service_thread import ServiceThread
from store.status import PutMessageResult, PutMessageStatus, PutRefusal
from store.store_checkpoint import StoreCheckpoint
from store.store_stats_service import StoreStatsService
from store.topic_config_manager import TopicConfigManager
from store.transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")

ReplicationWaiter = Callable[[int], "concurrent.futures.Future[PutMessageStatus] | None"]


class DefaultMessageStore:
    def __init__(self, config: MessageStoreConfig, clock: Clock | None = None, disk_usage_probe: DiskUsageProbe | None = None) -> None:
        self.config = config.validate()
        self.transient_store_pool: TransientStorePool | None = None
        if config.transient_store_pool_enable and config.broker_role is not BrokerRole.SLAVE:
            self.transient_store_pool = TransientStorePool(config.transient_store_pool_size, config.mapped_file_size_commit_log_bytes)
        self.allocate_service = AllocateMappedFileService(
            config.allocate_mapped_file_timeout_ms, config.warm_mapped_file_enable, self.transient_store_pool
        )
        self.commit_log = CommitLog(config, self.allocate_service, self.transient_store_pool)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self._cq_lock = threading.Lock()  # guards creation of consume queues (table is copy-on-write)
        self.index_service = IndexService(config)
        self.topic_config_manager = TopicConfigManager(config.config_dir(), config.max_topic_queue_nums)
        self.consumer_offset_manager = ConsumerOffsetManager(config.config_dir())
        self.stats = StoreStatsService()
        self.reput_service = ReputMessageService(self.commit_log, config)
        self.reput_service.dispatchers.append(self._dispatch_consume_queue)
        if config.message_index_enable:
            self.reput_service.dispatchers.append(self.index_service.build_index)
        self.flush_service: GroupCommitService | FlushRealTimeService
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.flush_service = GroupCommitService(self.commit_log, config.max_group_commit_requests, self._on_commit_log_flushed)
        else:
            self.flush_service = FlushRealTimeService(self.commit_log, config, self._on_commit_log_flushed)
        self.commit_service = CommitRealTimeService(self.commit_log, config, self.flush_service) if self.transient_store_pool else None
        self.checkpoint: StoreCheckpoint | None = None
        self.flush_consume_queue_service: FlushConsumeQueueService | None = None
        self.validator = PutValidator(self)
        self.getter = MessageGetter(self)
        self.extra_services: list[ServiceThread] = []  # schedule, cleanup, HA: started after the core
        self.replication_waiter: ReplicationWaiter | None = None  # set by ha/ on a SYNC_MASTER
        self.disk_full = False  # set by the cleanup service past the warning ratio
        self.last_dispatched_timestamp = 0
        self.last_exit_ok = True
        self.loaded = False
        self._running = False
        self._shutdown_done = False
        self._lock_fd: int | None = None
        self._ready_offset = 0
        # Delay levels and retention (store/schedule_message_service.py, store/clean_*_service.py) ---
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.disk_usage_probe: DiskUsageProbe = disk_usage_probe if disk_usage_probe is not None else disk_used_ratio
        self.schedule_service = ScheduleMessageService(self, self.clock)
        self.clean_consume_queue_service = CleanConsumeQueueService(self, self.clock)
        self.clean_commit_log_service = CleanCommitLogService(
            self, self.clock, self.disk_usage_probe, self.clean_consume_queue_service.wakeup
        )
        self.extra_services += [self.schedule_service, self.clean_commit_log_service, self.clean_consume_queue_service]
        # --- end of delay levels and retention

    # Lifecycle -----------------------------------------------------------------------

    def load(self) -> bool:
        cfg = self.config
        self.lock()
        try:
            self.last_exit_ok = not os.path.exists(cfg.abort_path())
            self.checkpoint = StoreCheckpoint(cfg.checkpoint_path())
            if self.transient_store_pool is not None:
                self.transient_store_pool.init()
            ok = self.commit_log.load() and self._load_consume_queues()
            ok = ok and self.index_service.load(self.last_exit_ok, self.checkpoint.index_msg_timestamp)
            if not ok:
                raise StoreNotRunning("the store files could not be loaded (see the log)")
            self.topic_config_manager.load()
            self.consumer_offset_manager.load()
            self._recover()
            self.schedule_service.load()  # after recovery: it reads the delay queues' ends
        except BaseException:
            self._release_lock_file()
            raise
        self.flush_consume_queue_service = FlushConsumeQueueService(
            cfg, self._all_consume_queues, self.index_service, self.checkpoint, lambda: self.last_dispatched_timestamp
        )
        self.loaded = True
        return True

    def lock(self) -> None:
        """Take the store directory's lock file (StoreLocked when another process holds it); load() calls it too."""
        if self._lock_fd is None:
            os.makedirs(self.config.store_path_root_dir, exist_ok=True)
            self._acquire_lock_file()

    def _acquire_lock_file(self) -> None:
        fd = os.open(self.config.lock_path(), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreLocked(f"{self.config.store_path_root_dir} is used by another process (lock file held)") from exc
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _release_lock_file(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load_consume_queues(self) -> bool:
        root = self.config.consume_queue_dir()
        if not os.path.isdir(root):
            return True
        for topic in sorted(os.listdir(root)):
            topic_dir = os.path.join(root, topic)
            if topic_problem(topic) or not os.path.isdir(topic_dir):
                log.warning("ignoring %s: not a valid topic directory", topic_dir)
                continue
            for qid in sorted(os.listdir(topic_dir)):
                if not qid.isdigit():
                    continue
                cq = self._new_consume_queue(topic, int(qid))
                if not cq.load():
                    return False
                self.consume_queue_table.setdefault(topic, {})[int(qid)] = cq
        return True

    def _recover(self) -> None:
        assert self.checkpoint is not None
        for cq in self._all_consume_queues():
            cq.recover()
        if self.last_exit_ok:
            end = recover_normally(self.commit_log, self.config.recover_clean_shutdown_files)
        else:
            log.warning("the store did not shut down cleanly; recovering from the checkpoint")
            end = recover_abnormally(self.commit_log, self.checkpoint, self._dispatch_for_recovery)
        min_offset = max(0, self.commit_log.get_min_offset())
        for cq in self._all_consume_queues():
            if cq.max_physic_offset > end:
                cq.truncate_dirty_logic_files(end)
            cq.correct_min_offset(min_offset)
        # Dispatch what the queues lack (they may trail the log after a crash).
        start = max([cq.max_physic_offset for cq in self._all_consume_queues()] + [min_offset])
        self.reput_service.reput_from_offset = min(start, end)
        caught_up = self.reput_service.do_reput()
        self._recover_topic_queue_table()
        self._ready_offset = end
        log.info("store recovered: commitlog [%d, %d), %d messages re-dispatched", min_offset, end, caught_up)

    def _dispatch_for_recovery(self, request: DispatchRequest) -> None:
        for dispatcher in self.reput_service.dispatchers:
            dispatcher(request)

    def _recover_topic_queue_table(self) -> None:
        table: dict[tuple[str, int], int] = {}
        for cq in self._all_consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.get_max_offset_in_queue()
        self.commit_log.topic_queue_table = table

    def start(self) -> None:
        if not self.loaded:
            raise StoreNotRunning("load() the store before start()")
        with open(self.config.abort_path(), "w"):
            pass
        self.allocate_service.start()
        self.flush_service.start()
        if self.commit_service is not None:
            self.commit_service.start()
        self.reput_service.start()
        assert self.flush_consume_queue_service is not None
        self.flush_consume_queue_service.start()
        self.stats.start()
        for service in self.extra_services:
            service.start()
        self._running = True

    def shutdown(self) -> None:
        """Stop services in the order the module docstring gives; idempotent."""
        if self._shutdown_done:
            return
        self._shutdown_done = True
        was_running = self._running
        self._running = False
        for service in reversed(self.extra_services):
            service.shutdown()
        self.reput_service.shutdown()
        if self.commit_service is not None:
            self.commit_service.shutdown()
        self.flush_service.shutdown()
        if self.flush_consume_queue_service is not None:
            self.flush_consume_queue_service.shutdown()
        self.allocate_service.shutdown()
        self.allocate_service.close_unclaimed()
        self.stats.shutdown()
        if self.loaded:
            self._close_files(clean=was_running)
        self._release_lock_file()

    def _close_files(self, clean: bool) -> None:
        assert self.checkpoint is not None
        self.commit_log.flush(0)
        for cq in self._all_consume_queues():
            cq.flush(0)
        self.index_service.flush()
        self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp, self.commit_log.mapped_file_queue.store_timestamp)
        self.checkpoint.logics_msg_timestamp = max(self.checkpoint.logics_msg_timestamp, self.last_dispatched_timestamp)
        self.consumer_offset_manager.persist()
        self.commit_log.shutdown()
        for cq in self._all_consume_queues():
            cq.shutdown()
        self.index_service.shutdown()
        self.checkpoint.shutdown()
        if self.transient_store_pool is not None:
            self.transient_store_pool.destroy()
        if clean and self.reput_service.behind() == 0:
            try:
                os.unlink(self.config.abort_path())
            except FileNotFoundError:
                pass

    @property
    def _answer_at_once(self) -> bool:
        """True when a put is answered without waiting for a flush or a slave."""
        return self.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH and not (
            self.config.broker_role is BrokerRole.SYNC_MASTER and self.replication_waiter is not None
        )

    def is_running(self) -> bool:
        return self._running

    def is_ready(self) -> bool:
        return self._running and self.reput_service.reput_from_offset >= self._ready_offset

    # Putting -------------------------------------------------------------------------

    def put_message(self, msg: MessageInner) -> PutMessageResult:
        return self.put_messages((msg,))

    def put_messages(self, msgs: list[MessageInner] | tuple[MessageInner, ...]) -> PutMessageResult:
        result, waiter = self._append(msgs)
        if waiter is None:
            return result
        timeout = self.config.sync_flush_timeout_ms / 1000.0 + 1.0
        try:
            return waiter.result(timeout)
        except concurrent.futures.TimeoutError:
            return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, items=result.items, detail="stored, not confirmed durable")

    def put_message_future(self, msg: MessageInner) -> concurrent.futures.Future[PutMessageResult]:
        return self.put_messages_future((msg,))

    def put_messages_future(self, msgs: list[MessageInner] | tuple[MessageInner, ...]) -> concurrent.futures.Future[PutMessageResult]:
        result, waiter = self._append(msgs)
        if waiter is not None:
            return waiter
        done: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()
        done.set_result(result)
        return done

    def _append(
        self, msgs: list[MessageInner] | tuple[MessageInner, ...]
    ) -> tuple[PutMessageResult, concurrent.futures.Future[PutMessageResult] | None]:
        refusal = self.validator.check(msgs)
        if refusal is not None:
            self.stats.put_failures += 1
            return refusal, None
        t0 = time.perf_counter_ns()
        result = self.commit_log.put_messages(msgs)
        items = result.items
        if not items:
            self.stats.put_failures += 1
            return result, None
        size = items[0].wrote_bytes if len(items) == 1 else sum(i.wrote_bytes for i in items)
        self.stats.record_put(len(items), size, (time.perf_counter_ns() - t0) // 1000)
        self.reput_service.wakeup()
        if result.status is not PutMessageStatus.PUT_OK or self._answer_at_once:
            return result, None
        return result, self._durability_waiter(result)

    def _durability_waiter(self, result: PutMessageResult) -> concurrent.futures.Future[PutMessageResult] | None:
        """A future for the flush and slave waits, or None when the put is answered now."""
        need_slave = self.config.broker_role is BrokerRole.SYNC_MASTER and self.replication_waiter is not None
        if self.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            # ASYNC_FLUSH does not wake the flusher per put (RocketMQ does): under the GIL a
            # thread hand-off per put costs more than it gains; the flush interval bounds the delay.
            if not need_slave:
                return None
            return self._chain_slave(result)
        request = GroupCommitRequest(result.end_offset)
        assert isinstance(self.flush_service, GroupCommitService)
        self.flush_service.put_request(request)
        outer: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()

        def flushed(f: concurrent.futures.Future[PutMessageStatus]) -> None:
            status = f.result()
            if status is not PutMessageStatus.PUT_OK:
                outer.set_result(PutMessageResult(status, items=result.items, detail="stored, not confirmed durable"))
            elif need_slave:
                self._chain_slave(result, outer)
            else:
                outer.set_result(result)

        request.future.add_done_callback(flushed)
        return outer

    def _chain_slave(
        self, result: PutMessageResult, outer: concurrent.futures.Future[PutMessageResult] | None = None
    ) -> concurrent.futures.Future[PutMessageResult]:
        out = outer if outer is not None else concurrent.futures.Future()
        assert self.replication_waiter is not None
        waiter = self.replication_waiter(result.end_offset)
        if waiter is None:
            out.set_result(result)
            return out

        def replicated(f: concurrent.futures.Future[PutMessageStatus]) -> None:
            status = f.result()
            if status is PutMessageStatus.PUT_OK:
                out.set_result(result)
            else:
                out.set_result(PutMessageResult(status, items=result.items, detail="stored on the master, not confirmed on a slave"))

        waiter.add_done_callback(replicated)
        return out

    def _on_commit_log_flushed(self, store_timestamp: int) -> None:
        if self.checkpoint is not None and store_timestamp > self.checkpoint.physic_msg_timestamp:
            self.checkpoint.physic_msg_timestamp = store_timestamp

    # Dispatch ------------------------------------------------------------------------

    def _dispatch_consume_queue(self, request: DispatchRequest) -> None:
        cq = self.find_consume_queue(request.topic, request.queue_id, create=True)
        if cq is None:
            log.error("message at %d has an invalid topic %r; not dispatched", request.commitlog_offset, request.topic)
            return
        cq.put_message_position_info(
            request.commitlog_offset, request.msg_size, request.tags_code, request.consume_queue_offset, request.store_timestamp
        )
        self.last_dispatched_timestamp = request.store_timestamp

    def add_message_arriving_listener(self, listener: ArrivingListener) -> None:
        self.reput_service.arriving_listeners.append(listener)

    # Consume queues ------------------------------------------------------------------

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.config.consume_queue_dir(), self.config.mapped_file_size_consume_queue_bytes)

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None or not create:
                return cq
        elif not create:
            return None
        if topic_problem(topic) or not 0 <= queue_id < self.config.max_topic_queue_nums:
            return None  # never a path outside the store directory
        with self._cq_lock:
            queues = dict(self.consume_queue_table.get(topic, {}))
            cq = queues.get(queue_id)
            if cq is None:
                cq = self._new_consume_queue(topic, queue_id)
                queues[queue_id] = cq
                self.consume_queue_table = {**self.consume_queue_table, topic: queues}
            return cq

    def _all_consume_queues(self) -> list[ConsumeQueue]:
        return [cq for queues in self.consume_queue_table.values() for cq in queues.values()]

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else 0

    def queue_ids_of(self, topic: str) -> list[int]:
        return sorted(self.consume_queue_table.get(topic, {}))

    def delete_topic(self, topic: str) -> bool:
        """Drop a topic's consume queues, its config and its consumer offsets (its log bytes age out)."""
        with self.commit_log.put_lock, self._cq_lock:
            queues = self.consume_queue_table.get(topic, {})
            table = dict(self.consume_queue_table)
            table.pop(topic, None)
            self.consume_queue_table = table
            for key in [k for k in self.commit_log.topic_queue_table if k[0] == topic]:
                del self.commit_log.topic_queue_table[key]
        for cq in queues.values():
            cq.destroy()
        if queues and not topic_problem(topic):
            shutil.rmtree(os.path.join(self.config.consume_queue_dir(), topic), ignore_errors=True)
        existed = self.topic_config_manager.delete(topic)
        self.consumer_offset_manager.remove_topic(topic)
        return existed or bool(queues)

    # Reading -------------------------------------------------------------------------

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_count: int, tag_filter: Any = None) -> Any:
        return self.getter.get_message(group, topic, queue_id, offset, max_count, tag_filter)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.getter.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]:
        """Messages of `topic` whose KEYS or UNIQ_KEY is `key`, stored in [begin_ms, end_ms], newest first."""
        found: list[dict[str, Any]] = []
        seen: set[int] = set()
        for offset in self.index_service.query_offsets(topic, key, max_num * 4 + 8, begin_ms, end_ms):
            if offset in seen or offset < self.commit_log.get_min_offset():
                continue
            seen.add(offset)
            msg = self.commit_log.look_message_by_offset(offset)
            # Confirm against the stored message: a hash collision must never return another message.
            if msg is None or msg["topic"] != topic:
                continue
            if key != msg["properties"].get("UNIQ_KEY") and key not in split_keys(msg["properties"].get("KEYS", "")):
                continue
            found.append(msg)
            if len(found) >= max_num:
                break
        return found

    def look_message_by_offset(self, commitlog_offset: int) -> dict[str, Any] | None:
        if commitlog_offset < max(0, self.commit_log.get_min_offset()) or commitlog_offset >= self.commit_log.get_max_offset():
            return None
        return self.commit_log.look_message_by_offset(commitlog_offset)

    def get_commit_log_data(self, offset: int, max_bytes: int) -> bytes:
        res = self.commit_log.get_data(offset)
        if res is None:
            return b""
        try:
            return bytes(res.view[:max_bytes])
        finally:
            res.release()

    # Status --------------------------------------------------------------------------

    def disk_used_ratio(self) -> float:
        return self.disk_usage_probe(self.config.commit_log_dir())

    def runtime_info(self) -> dict[str, Any]:
        cl = self.commit_log
        mfq = cl.mapped_file_queue
        return {
            "commitlog_min_offset": max(0, cl.get_min_offset()),
            "commitlog_max_offset": cl.get_max_offset(),
            "commitlog_committed_offset": mfq.committed_where if self.transient_store_pool else cl.get_max_offset(),
            "commitlog_flushed_offset": mfq.flushed_where,
            "commitlog_files": len(mfq.mapped_files),
            "commitlog_file_size_bytes": self.config.mapped_file_size_commit_log_bytes,
            "reput_offset": self.reput_service.reput_from_offset,
            "dispatch_lag_bytes": self.reput_service.behind(),
            "flush_disk_type": self.config.flush_disk_type.value,
            "broker_role": self.config.broker_role.value,
            "disk_used_ratio": round(self.disk_used_ratio(), 4),
            "disk_full": self.disk_full,
            "cleanup": {**self.clean_commit_log_service.status(), **self.clean_consume_queue_service.status()},
            "index_files": len(self.index_service.index_files),
            "consume_queues": len(self._all_consume_queues()),
            "topics": len(self.topic_config_manager.all()),
            "last_exit_ok": self.last_exit_ok,
            "running": self._running,
            "ready": self.is_ready(),
        }

    # Delay levels and retention -------------------------------------------------------------

    def execute_delete_files_manually(self) -> dict[str, Any]:
        """Delete expired commitlog files at any hour for the next `manual_delete_file_rounds` passes, the first now."""
        return self.clean_commit_log_service.execute_delete_files_manually()

    def schedule_status(self) -> dict[str, Any]:
        """Per delay level: messages waiting, delivered offset, the oldest waiting message's age and due time."""
        return self.schedule_service.status()

    def delay_level_for_ms(self, delay_ms: int) -> int | None:
        """The smallest delay level not shorter than `delay_ms` (0 for none); None when every level is shorter."""
        return self.schedule_service.level_for_delay_ms(delay_ms)

    def refuse(self, refusal: PutRefusal, detail: str, status: PutMessageStatus = PutMessageStatus.MESSAGE_ILLEGAL) -> PutMessageResult:
        return PutMessageResult(status, refusal, detail)
