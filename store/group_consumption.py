"""GroupConsumption: the store's group (POP) consumption, as one object the store builds and other packages call.

It owns the groups' settings (config/subscriptionGroup.json), the FIFO order book, the
receipt-handle secret (config/popSecret) — three state tables the log carries to slaves — the
PopConsumer that serves receives, acks and invisible-time changes, and the PopReviveService that
redelivers what was not acked. The store calls `load_files()` before recovery, `load()` after
the state records are applied, and registers the revive service with its other services
(docs/store-api.md, "Group consumption").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from store.acked_handles import AckedHandles
from store.config import BrokerRole
from store.dead_letters import Resent, resend_dead_letters
from store.errors import StoreError
from store.fifo_order_book import FifoOrderBook
from store.message import MessageInner
from store.pop_consumer import AckOutcome, PopConsumer, Popped, PopSettings
from store.pop_counters import PopCounts
from store.pop_records import REVIVE_GROUP, dlq_topic, retry_topic
from store.pop_revive_service import PopReviveService
from store.receipt_handle import PopSecret, ReceiptHandles
from store.state_log import StateChange
from store.state_table import StateTable
from store.status import PutMessageResult
from store.subscription_group_manager import SubscriptionGroup, SubscriptionGroupManager

if TYPE_CHECKING:
    from store.default_message_store import DefaultMessageStore

__all__ = ["AckOutcome", "GroupConsumption", "PopCounts", "Popped", "SubscriptionGroup"]


class _PopStoreAdapter:
    """The store as PopConsumer and PopReviveService use it (store.pop_consumer.PopStore)."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_count: int, tag_filter: Any = None) -> Any:
        return self._store.get_message(group, topic, queue_id, offset, max_count, tag_filter)

    def put_messages(self, msgs: list[MessageInner]) -> PutMessageResult:
        return self._store.put_messages(msgs)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._store.get_min_offset_in_queue(topic, queue_id)

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
            self._store.state_log.write(offsets, offsets.commit_payload(group, [(topic, queue_id, offset)]), msgs)
        except StoreError:
            return False
        return True

    def ensure_topic(self, topic: str, queues: int) -> None:
        if self._store.topic_config(topic) is None:
            self._store.create_or_update_topic(topic, queues)


class GroupConsumption:
    def __init__(self, store: DefaultMessageStore) -> None:
        cfg = store.config
        self._store = store
        self.groups = SubscriptionGroupManager(cfg.config_dir())
        self.fifo = FifoOrderBook(cfg.config_dir())
        self.secret = PopSecret(cfg.config_dir())
        self.settings = PopSettings(cfg.broker_cluster_name, cfg.pop_revive_queue_num, cfg.pop_ack_margin_ms)
        self._adapter = _PopStoreAdapter(store)
        self.consumer: PopConsumer | None = None
        self.revive_service: PopReviveService | None = None

    def state_tables(self) -> list[StateTable]:
        """The tables of group consumption kept in the state log (store/state_log.py)."""
        return [self.groups, self.fifo, self.secret]

    def load_files(self) -> None:
        """Read the local files of the groups, the FIFO order book and the handle secret (before recovery)."""
        self.groups.load()
        self.fifo.load()
        self.secret.load()

    def load(self, horizon: Callable[[], int | None]) -> PopReviveService:
        """After the state records are applied: returns the revive service for the store to start."""
        cfg = self._store.config
        handles = ReceiptHandles(self.secret)
        acked = AckedHandles(cfg.pop_acked_handles_max)
        self.consumer = PopConsumer(self._adapter, self.groups, handles, self.settings, self._store.now_ms, self.fifo, acked)
        self.revive_service = PopReviveService(
            self._adapter, self.consumer, cfg.pop_revive_interval_ms, cfg.pop_revive_max_pending, self._store.now_ms, horizon
        )
        self.revive_service.is_slave = cfg.broker_role is BrokerRole.SLAVE
        return self.revive_service

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

    def put_group(self, name: str, max_reconsume_times: int, fifo: bool) -> bool:
        """Create or update a group's settings (blocking: persisted at once); True when created."""
        return self.groups.put(SubscriptionGroup(name, max_reconsume_times, fifo))

    def delete_group(self, name: str) -> bool:
        """Remove a group's settings and every offset it committed (its topics' and retry topics'), in one put
        (blocking: recorded durably; StateWriteFailed when not confirmed) and its counts; False when the store
        knew nothing of it. Its retry and dead-letter topics stay (their messages may still be wanted); a group
        of that name consuming again starts at each queue's first message."""
        offsets = self._store.consumer_offset_manager
        configured = self.is_configured(name)
        if not configured and name not in offsets.groups():
            return False
        changes = [StateChange(offsets, offsets.remove_group_payload(name))]
        if configured:
            changes.append(StateChange(self.groups, {"del": name}))
        self._store.state_log.write_all(changes)
        self._loaded().counters.forget(name)
        return True

    def resend_dead_letters(self, group: str, offsets: list[int]) -> tuple[list[Resent], PutMessageResult | None]:
        """Copy dead letters of the group back into its retry topics (store/dead_letters.py; blocking: one put)."""
        return resend_dead_letters(self._adapter, group, offsets)

    # Receive, ack, invisible time (blocking: they store records) ------------------------

    def receive(self, group: str, topic: str, max_count: int, invisible_ms: int, tag_filter: Any = None) -> list[Popped]:
        return self._loaded().receive(group, topic, max_count, invisible_ms, tag_filter)

    def ack(self, group: str, topic: str, handles: list[str]) -> list[AckOutcome]:
        return self._loaded().ack(group, topic, handles)

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> tuple[AckOutcome, str | None, int]:
        return self._loaded().change_invisible(group, topic, handle, invisible_ms)

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
