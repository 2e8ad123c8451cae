"""GroupConsumption: the store's group (POP) consumption, as one object the store builds and other packages call.

It owns the groups' settings (config/subscriptionGroup.json), the FIFO order book, the
receipt-handle secret (config/popSecret), the push subscriptions (config/pushSubscription.json)
and the dead-letter redrives (config/dlqRedrive.json) — five state tables the log carries to
slaves — the PopConsumer that serves receives, acks and invisible-time changes, the
PopReviveService that redelivers what was not acked, and the DlqRedriveService that moves dead
letters back. The store calls `load_files()` before recovery, `load()` after the state records are
applied, and registers the two services with its other services (docs/store-api.md, "Group
consumption").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from core.service_thread import ServiceThread
from store.codec.message import MessageInner
from store.config import BrokerRole
from store.errors import StoreError
from store.metadata.topic_names import dlq_topic, retry_topic
from store.pop.acked_handles import AckedHandles
from store.pop.dead_letter_resend import Resent, resend_dead_letters
from store.pop.dlq_redrive import DlqRedriveService, DlqRedriveTable, Redrive, RedriveState
from store.pop.fifo_order_book import FifoOrderBook
from store.pop.pop_consumer import AckOutcome, PopConsumer, Popped, PopSettings, dead_letter
from store.pop.pop_counters import PopCounts
from store.pop.pop_records import REVIVE_GROUP
from store.pop.pop_revive_service import PopReviveService
from store.pop.push_subscription_table import PushSubscription, PushSubscriptionTable
from store.pop.receipt_handle import PopSecret, ReceiptHandles
from store.pop.subscription_group_manager import SubscriptionGroup, SubscriptionGroupManager
from store.state.state_log import StateChange
from store.state.state_table import StateTable
from store.status import PutMessageResult

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.metadata.consumer_offset_manager import ConsumerOffsetManager
    from store.metadata.topic_config_manager import TopicConfig
    from store.queue.get_message_result import Filter, GetMessageResult
    from store.state.state_log import StateLog

__all__ = [
    "AckOutcome", "GroupConsumption", "PopCounts", "Popped", "PushSubscription", "Redrive", "RedriveState", "SubscriptionGroup",
]  # fmt: skip


class ConsumedStore(Protocol):
    """What group consumption needs of the store: reads, puts, topics, offsets and the state log."""

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def consumer_offset_manager(self) -> ConsumerOffsetManager: ...
    @property
    def state_log(self) -> StateLog: ...
    def now_ms(self) -> int: ...
    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_count: int, message_filter: Filter | None = None
    ) -> GetMessageResult: ...
    def put_messages(self, msgs: list[MessageInner] | tuple[MessageInner, ...], lazy_dispatch: bool = False) -> PutMessageResult: ...
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def topic_config(self, topic: str) -> TopicConfig | None: ...
    def create_or_update_topic(self, topic: str, queues: int, perm: str = "rw") -> TopicConfig: ...
    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...
    def commit_offsets(self, group: str, commits: list[tuple[str, int, int]]) -> None: ...


class _PopStoreAdapter:
    """The store as PopConsumer and PopReviveService use it (store.pop.pop_consumer.PopStore)."""

    def __init__(self, store: ConsumedStore) -> None:
        self._store = store

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_count: int, message_filter: Any = None) -> Any:
        return self._store.get_message(group, topic, queue_id, offset, max_count, message_filter)

    def put_messages(self, msgs: list[MessageInner]) -> PutMessageResult:
        return self._store.put_messages(msgs)

    def put_records(self, msgs: list[MessageInner]) -> PutMessageResult:
        """Put revive-topic records: only the store's own services read them, so their dispatch waits for the next pass."""
        return self._store.put_messages(msgs, lazy_dispatch=True)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._store.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._store.get_max_offset_in_queue(topic, queue_id)

    def queue_ids_of(self, topic: str) -> list[int]:
        config = self._store.topic_config(topic)
        return list(range(config.read_queue_nums)) if config is not None and "r" in config.perm else []

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self._store.query_offset(group, topic, queue_id)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._store.commit_offsets(group, [(topic, queue_id, offset)])

    def put_and_commit(self, msgs: list[MessageInner], group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Put `msgs` and commit the group's offset in one put (StateLog.write); False when not confirmed."""
        offsets = self._store.consumer_offset_manager
        try:
            self._store.state_log.write(offsets, offsets.commit_payload(group, [(topic, queue_id, offset)]), msgs, internal=True)
        except StoreError:
            return False
        return True

    def ensure_topic(self, topic: str, queues: int) -> None:
        if self._store.topic_config(topic) is None:
            self._store.create_or_update_topic(topic, queues)


class GroupConsumption:
    def __init__(self, store: ConsumedStore) -> None:
        cfg = store.config
        self._store = store
        self.groups = SubscriptionGroupManager(cfg.config_dir())
        self.fifo = FifoOrderBook(cfg.config_dir())
        self.secret = PopSecret(cfg.config_dir())
        self.push = PushSubscriptionTable(cfg.config_dir())
        self.redrives = DlqRedriveTable(cfg.config_dir())
        self.settings = PopSettings(cfg.broker_cluster_name, cfg.pop_revive_queue_num, cfg.pop_ack_margin_ms)
        self._adapter = _PopStoreAdapter(store)
        self.consumer: PopConsumer | None = None
        self.revive_service: PopReviveService | None = None
        self.redrive_service: DlqRedriveService | None = None

    def state_tables(self) -> list[StateTable]:
        """The tables of group consumption kept in the state log (store/state/state_log.py)."""
        return [self.groups, self.fifo, self.secret, self.push, self.redrives]

    def load_files(self) -> None:
        """Read the local files of the groups, the FIFO order book and the handle secret (before recovery)."""
        self.groups.load()
        self.fifo.load()
        self.secret.load()
        self.push.load()
        self.redrives.load()

    def load(self, horizon: Callable[[], int | None]) -> list[ServiceThread]:
        """After the state records are applied: returns the revive and redrive services for the store to start."""
        cfg = self._store.config
        handles = ReceiptHandles(self.secret)
        acked = AckedHandles(cfg.pop_acked_handles_max)
        self.consumer = PopConsumer(self._adapter, self.groups, handles, self.settings, self._store.now_ms, self.fifo, acked)
        self.revive_service = PopReviveService(
            self._adapter, self.consumer, cfg.pop_revive_interval_ms, cfg.pop_revive_max_pending, self._store.now_ms, horizon
        )
        self.redrive_service = DlqRedriveService(self._adapter, self.redrives, cfg.pop_revive_interval_ms, self._store.now_ms)
        self.set_slave(cfg.broker_role is BrokerRole.SLAVE)
        return [self.revive_service, self.redrive_service]

    def set_slave(self, slave: bool) -> None:
        """A slave replicates its master's redeliveries and moves and makes none itself."""
        for service in (self.revive_service, self.redrive_service):
            if service is not None:
                service.is_slave = slave

    def take_over(self) -> None:
        """A slave becomes master: the revive service reads its queues again from the replicated offsets."""
        if self.revive_service is not None:
            self.revive_service.take_over()

    def _loaded(self) -> PopConsumer:
        assert self.consumer is not None, "the store is not loaded"
        return self.consumer

    # Groups ---------------------------------------------------------------------------

    def group(self, name: str) -> SubscriptionGroup:
        """The group's settings (RocketMQ's defaults when it was never configured)."""
        return self._loaded().group(name)

    def is_configured(self, name: str) -> bool:
        return self.groups.get(name) is not None

    def configured_groups(self) -> list[SubscriptionGroup]:
        return self.groups.all()

    def put_group(self, name: str, max_reconsume_times: int, fifo: bool, filter_sql: str | None = None) -> bool:
        """Create or update a group's settings (blocking: persisted at once); True when created.
        `filter_sql` is an SQL92 expression SqlFilter.parse accepts (FilterInvalid otherwise, nothing changed)."""
        return self.groups.put(SubscriptionGroup(name, max_reconsume_times, fifo, filter_sql=filter_sql))

    def delete_group(self, name: str) -> bool:
        """Remove a group's settings, its push subscription and every offset it committed (its topics' and retry
        topics'), in one write (blocking: recorded durably; StateWriteFailed when not confirmed) and its counts;
        False when the store knew nothing of it. Its retry and dead-letter topics stay (their messages may still be
        wanted); a group of that name consuming again starts at each queue's first message."""
        offsets = self._store.consumer_offset_manager
        configured = self.is_configured(name)
        pushed = self.push.get(name) is not None
        if not configured and not pushed and name not in offsets.groups():
            return False
        changes = [StateChange(offsets, offsets.remove_group_payload(name))]
        if configured:
            changes.append(StateChange(self.groups, {"del": name}))
        if pushed:
            changes.append(StateChange(self.push, {"del": name}))
        self._store.state_log.write_all(changes)
        self._loaded().counters.forget(name)
        return True

    def resend_dead_letters(self, group: str, offsets: list[int]) -> tuple[list[Resent], PutMessageResult | None]:
        """Copy dead letters of the group back into its retry topics (store/pop/dead_letter_resend.py; blocking:
        one put)."""
        return resend_dead_letters(self._adapter, group, offsets)

    # Receive, ack, invisible time (blocking: they store records) ------------------------

    def receive(self, group: str, topic: str, max_count: int, invisible_ms: int, message_filter: Any = None) -> list[Popped]:
        """A receive of messages that pass `message_filter` and the group's own filter."""
        return self._loaded().receive(group, topic, max_count, invisible_ms, message_filter)

    def ack(self, group: str, topic: str, handles: list[str]) -> list[AckOutcome]:
        return self._loaded().ack(group, topic, handles)

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> tuple[AckOutcome, str | None, int]:
        return self._loaded().change_invisible(group, topic, handle, invisible_ms)

    def dead_letter(self, group: str, topic: str, popped: Popped) -> AckOutcome:
        """Put a received message into the group's dead-letter topic at once, then ack it (a crash between
        the two leaves it to be delivered again: at least once). NOT_STORED when the copy was refused."""
        self._adapter.ensure_topic(self.dead_letter_topic(group), 1)
        if not self._adapter.put_messages([dead_letter(popped.data, group, popped.reconsume_times)]).ok:
            return AckOutcome.NOT_STORED
        outcome = self.ack(group, topic, [popped.handle])[0]
        if outcome is AckOutcome.OK:
            self._loaded().counters.add(group, topic, dead_lettered=1)
        return outcome

    # Push subscriptions and dead-letter redrives (blocking when they record) -----------

    def push_subscriptions(self) -> list[PushSubscription]:
        return self.push.all()

    def push_subscription(self, group: str) -> PushSubscription | None:
        return self.push.get(group)

    def put_push_subscription(self, sub: PushSubscription) -> bool:
        """Create or replace the group's push subscription; True when created."""
        return self.push.put(sub)

    def delete_push_subscription(self, group: str) -> bool:
        return self.push.delete(group)

    def start_redrive(self, group: str, max_messages: int | None) -> tuple[Redrive, bool]:
        """Begin moving the group's dead letters back ((the row, True)), or (the running one, False)."""
        assert self.redrive_service is not None, "the store is not loaded"
        return self.redrive_service.start_redrive(group, max_messages)

    def redrive(self, group: str) -> Redrive | None:
        """The group's latest redrive (running or done)."""
        return self.redrives.get(group)

    # Status ---------------------------------------------------------------------------

    def topics_of(self, group: str, topic: str) -> list[str]:
        """The topics a group's receives of `topic` read: the topic and the group's retry topic."""
        return [topic, retry_topic(group, topic)]

    def topics_by_group(self) -> dict[str, list[str]]:
        """Every group that committed offsets (a receive commits them too) with those topics; retry topics
        are folded into the topic they retry, the revive group is left out."""
        out: dict[str, list[str]] = {}
        for group, topics in self._store.consumer_offset_manager.topics_by_group().items():
            if group == REVIVE_GROUP:
                continue
            prefix = retry_topic(group, "")
            names = {t[len(prefix) :] if t.startswith(prefix) else t for t in topics}
            out[group] = sorted(names)
        return out

    def dead_letter_topic(self, group: str) -> str:
        return dlq_topic(group)

    def counts(self) -> dict[tuple[str, str], PopCounts]:
        """Received, acked, redelivered and dead-lettered messages per (group, topic) since the start."""
        return self._loaded().counters.snapshot()

    def stats(self) -> dict[str, int]:
        revive = self.revive_service
        consumer = self._loaded()
        out = dataclasses.asdict(revive.stats) if revive is not None else {}
        out["revive_in_memory"] = revive.in_memory() if revive is not None else 0
        out["fifo_in_flight"] = consumer.fifo.in_flight()
        out["acked_handles_held"] = len(consumer.acked)
        out["acked_handles_forgotten"] = consumer.acked.forgotten
        return out
