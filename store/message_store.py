"""MessageStore: the store as other packages see it (app/, ha/ and pipeline/ hold a store only as this).

The Protocol lists what the front end, replication and the pipeline call on a store instance;
DefaultMessageStore satisfies it structurally (mypy checks that at the end of store/default_message_store.py,
tests/store/test_public_api.py at run time). docs/store-api.md describes every member. Nothing
outside store/ reads or assigns a store's attributes: what it needs is a member here.

A member marked "blocking" waits for file I/O (or a flush); callers on an event loop run it in
a thread.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from store.dispatch.bulk_dispatch import ArrivingListener
from store.logfile.put_durability import ReplicationWaiter

if TYPE_CHECKING:
    from core.service_thread import ServiceThread
    from store.codec.message import MessageInner
    from store.config import BrokerRole, MessageStoreConfig
    from store.metadata.topic_config_manager import TopicConfig
    from store.native import CheckedBatch
    from store.pop.group_consumption import GroupConsumption
    from store.put.put_batch import PackedProduce, PutBatch
    from store.queue.get_message_result import Filter, GetMessageResult
    from store.report_types import ManualCleanup, RecoveryReport, RuntimeInfo, ScheduleStatus, StatsSnapshot, StoreFiles, TimerStatus
    from store.status import EncodedItems, PutMessageResult, PutMessageStatus
    from store.transaction.transaction_store import Transactions

__all__ = ["ArrivingListener", "CommitLogView", "MessageStore", "ReplicationWaiter"]


class CommitLogView(Protocol):
    """A held, read-only view of commitlog bytes; `release()` (or leaving a `with` block) drops it."""

    @property
    def start_offset(self) -> int:
        """The commitlog offset of `view[0]`."""
        ...

    @property
    def view(self) -> memoryview:
        """The bytes, mapped (no copy)."""
        ...

    @property
    def size(self) -> int:
        """How many bytes of `view` are readable."""
        ...

    def release(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class MessageStore(Protocol):
    # Lifecycle ---------------------------------------------------------------------------

    @property
    def config(self) -> MessageStoreConfig:
        """The validated configuration the store was built with; read it, never assign to it."""
        ...

    def lock(self) -> None:
        """Take the store directory's lock file now (load() takes it too); StoreLocked when another process holds it."""
        ...

    def load(self) -> bool:
        """Take the lock, load the files and recover (blocking; True when done).

        Raises StoreLocked, StoreNotRunning (files that cannot be loaded) or MetadataCorrupt.
        """
        ...

    def start(self) -> None:
        """Start the store's services, then the registered ones; StoreNotRunning before load()."""
        ...

    def shutdown(self) -> None:
        """Stop the registered services (last registered first), then the store's; flush and close. Idempotent."""
        ...

    def is_ready(self) -> bool:
        """Started, dispatch has reached the commitlog's end as it was at start, and no index rebuild runs."""
        ...

    def recovery_progress(self) -> RecoveryReport:
        """What load() is doing, then the index rebuild after start (phase INDEX_REBUILD_PHASE):
        {"phase", "scanned_bytes", "total_bytes"}; callable while load() runs."""
        ...

    def now_ms(self) -> int:
        """The store's clock (the time source of delayed delivery and cleanup), in ms since the epoch."""
        ...

    # Put ---------------------------------------------------------------------------------

    def put(self, batch: PutBatch) -> concurrent.futures.Future[PutMessageResult]:
        """The one way in: store a batch (MESSAGES, FIELDS or ENCODED: store/put/put_batch.py) after the put
        hooks (half messages, timers, validation, delay levels) took or refused it.

        Appends now, in the calling thread; the future is done at once, or when the flush (and slave)
        wait ends. A refused batch answers a result with a refusal and stores nothing. The stored
        messages are dispatched (readable, held pulls woken) before it returns, unless the batch has
        `defer_dispatch` (then the caller runs `dispatch_owed` before it answers the put) or
        `lazy_dispatch` (the store's own records: the next pass dispatches them).
        """
        ...

    def put_answer(self, batch: PutBatch) -> tuple[PutMessageResult, concurrent.futures.Future[PutMessageResult] | None]:
        """`put` without the future: the result and its durability waiter (None: answered at once, always so for a
        batch with `defer_durability`, whose result says `durability_owed` instead). What `put` answers, for a
        caller that answers many puts (the front end's produces)."""
        ...

    def put_lane(self, batch: PutBatch) -> tuple[PutMessageResult, concurrent.futures.Future[PutMessageResult] | None] | None:
        """`put_answer` of a packed batch (`PutBatch.of_packed`) when the put lane takes it: checked and appended in one
        kernel call. None, with nothing stored or changed, when the lane declines it (a check it fails, a dedup id,
        the put lock held, a file to roll, no lane with the transient store pool)."""
        ...

    def put_packed(
        self, topic: str, queue_id: int, packed: PackedProduce, born_host: bytes, defer_dispatch: bool
    ) -> tuple[EncodedItems, int, bool] | None:
        """`put_lane` of `PutBatch.of_packed(topic, queue_id, packed, born_host)` with `defer_durability` (and
        `defer_dispatch` as given), answered as (its items, its commitlog end offset, whether its durability wait is
        owed: `durable_through`) without a batch or result object; None, nothing stored, where `put_lane` answers None."""
        ...

    def dispatch_owed(self) -> int:
        """Dispatch what puts with `defer_dispatch` appended (at once when nothing is owed); the messages dispatched."""
        ...

    def durable_through(self, offset: int) -> concurrent.futures.Future[PutMessageStatus] | None:
        """One future for the flush and slave waits of the log up to `offset` (PUT_OK or the status not confirmed),
        for the puts made with `defer_durability` whose results say `durability_owed`; None when none is needed.
        ValueError for an offset past the log's end."""
        ...

    def put_message(self, msg: MessageInner) -> PutMessageResult:
        """Blocking helper: `put` of one message, waited for (a flush or slave wait bounded by sync_flush_timeout_ms)."""
        ...

    def put_messages(self, msgs: Sequence[MessageInner]) -> PutMessageResult:
        """Blocking helper: `put` of a MESSAGES batch (one put lock acquisition), waited for as put_message."""
        ...

    def check_batch(self, batch: bytes | bytearray | memoryview) -> CheckedBatch:
        """A batch in RocketMQ's encoding checked against the store's limits, for an ENCODED PutBatch; BatchError when refused."""
        ...

    # Get (one queue; the result holds the messages as one batch of stored bytes) -----------

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_count: int, message_filter: Filter | None = None
    ) -> GetMessageResult:
        """Up to `max_count` messages of a queue from `offset` that pass the filter (a TagFilter or a
        MessageFilter), copied out of the commitlog (blocking)."""
        ...

    def get_put_message(
        self, topic: str, queue_id: int, queue_offset: int, spans: Sequence[tuple[int, int]], max_count: int
    ) -> GetMessageResult | None:
        """The messages a put on this thread has just stored (`spans`: each one's commitlog offset and size, the put's
        items' `spans()`; the first at `queue_offset`), as `get_message(.., queue_offset, max_count)` answers once they
        are dispatched, read before their dispatch (a held pull answered by the put itself); None when they do not lie
        one after another or a message of its size does not start where its span says."""
        ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's first offset still stored; 0 for a queue that does not exist."""
        ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The offset the queue's next message gets; 0 for a queue that does not exist."""
        ...

    # Queries -----------------------------------------------------------------------------

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after `timestamp_ms` (blocking).

        The max offset when every message is older; 0 for a queue that does not exist.
        """
        ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[dict[str, Any]]:
        """Messages of `topic` whose KEYS or UNIQ_KEY is `key`, stored in [begin_ms, end_ms], newest first (blocking)."""
        ...

    def look_message_by_offset(self, commitlog_offset: int) -> dict[str, Any] | None:
        """The decoded message at a commitlog offset; None outside the stored range or when no valid message is there."""
        ...

    # Offsets -----------------------------------------------------------------------------

    def commit_offsets(self, group: str, commits: list[tuple[str, int, int]]) -> None:
        """Record a group's (topic, queue id, offset) commits in one offset log record, then return.

        Blocking file I/O, fsynced before returning under SYNC_FLUSH; OSError when the record cannot
        be written, StoreNotRunning once the offset log is closed (shutdown).
        """
        ...

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset of the queue; -1 when it committed none."""
        ...

    # Listeners ---------------------------------------------------------------------------

    @property
    def group_consumption(self) -> GroupConsumption:
        """Group (POP) consumption: groups' settings, receive, ack, invisible time (store/pop/group_consumption.py)."""
        ...

    @property
    def transactions(self) -> Transactions:
        """Transactional messages: half puts, commit and rollback, the pending ones, producer groups (store/transaction/transaction_store.py)."""
        ...

    def add_message_arriving_listener(self, listener: ArrivingListener) -> None:
        """`listener(topic, queue_id, logic_offset_after, tags_codes)` once per queue a dispatch pass extended.

        It runs on the dispatching thread under the dispatch lock: it must not block and must not put.
        """
        ...

    # Service registration ----------------------------------------------------------------

    def register_service(self, service: ServiceThread) -> None:
        """Have start() start `service` after the store's own services and shutdown() stop it before them.

        RuntimeError while the store is running (between start() and shutdown()).
        """
        ...

    # Replication hooks -------------------------------------------------------------------

    def set_replicated(self, replicated: bool) -> None:
        """Tell the store it may have slaves (a master's replication is on): its state tables are then written whole into the log."""
        ...

    def set_replication_waiter(self, waiter: ReplicationWaiter | None) -> None:
        """On a SYNC_MASTER, make every put appended from now on also wait for `waiter(end_offset)` (None: no wait)."""
        ...

    def set_broker_role(self, role: BrokerRole) -> None:
        """Change the role of a running store (a cluster's election): a SLAVE refuses puts and puts no redeliveries."""
        ...

    def set_recovery_limit(self, offset: int | None) -> None:
        """Before load(): recovery cuts the commitlog at `offset` (a message boundary) when it holds more, and the
        consume queues and the index with it (a returning old master's divergent tail); None: no limit."""
        ...

    def commit_log_min_offset(self) -> int:
        """The commitlog's first stored offset (0 while it has no file)."""
        ...

    def commit_log_max_offset(self) -> int:
        """The commitlog's end: the offset of the next byte appended."""
        ...

    def get_commit_log_data(self, offset: int, max_bytes: int) -> bytes:
        """A copy of at most `max_bytes` commitlog bytes from `offset`, never past the end of its file; b"" when none."""
        ...

    def commit_log_view(self, offset: int) -> CommitLogView | None:
        """A held view from `offset` to the end of what is readable in its file; None when nothing is readable there."""
        ...

    def append_replicated_data(self, offset: int, data: bytes | memoryview) -> bool:
        """Append bytes a master sent and wake dispatch (a slave's replication).

        `offset` must be the log's end (or, on an empty log, a file boundary); False, with nothing
        appended, when it is not; False also when a file for the bytes cannot be created.
        """
        ...

    # Topics ------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's queue counts and permission; None for a topic that is not configured."""
        ...

    def topic_configs(self) -> list[TopicConfig]:
        """Every configured topic, sorted by name."""
        ...

    def create_or_update_topic(self, topic: str, queues: int, perm: str = "rw") -> TopicConfig:
        """Configure a topic (blocking: persisted before it returns); TopicInvalid or ValueError for a bad name, count or perm."""
        ...

    def delete_topic(self, topic: str) -> bool:
        """Drop the topic's consume queues, configuration and consumer offsets (blocking); False when it had none."""
        ...

    # Status ------------------------------------------------------------------------------

    def runtime_info(self) -> RuntimeInfo:
        """Commitlog offsets, dispatch lag, flush mode, role, disk usage, cleanup and file counts; JSON-ready."""
        ...

    def stats_snapshot(self) -> StatsSnapshot:
        """Put and get counters, TPS windows and the put latency histogram; JSON-ready."""
        ...

    def store_files(self) -> StoreFiles:
        """Every file under the store's root: path, kind, size and modification time (blocking; at most 10 000 listed)."""
        ...

    def degraded_reasons(self) -> list[str]:
        """What keeps the store from serving normally now; empty when healthy."""
        ...

    def schedule_status(self) -> ScheduleStatus:
        """Per delay level: messages waiting, delivered offset, the oldest waiting message's age and due time (blocking)."""
        ...

    def timer_status(self) -> TimerStatus | None:
        """Timer messages: pending count, next due time, lateness of deliveries, counters; None when the timer is off."""
        ...

    def execute_delete_files_manually(self) -> ManualCleanup:
        """Let the next `manual_delete_file_rounds` cleanup passes delete expired files at any hour, the first now."""
        ...
