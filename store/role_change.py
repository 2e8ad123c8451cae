"""RoleChange: a store's move between master and slave (DefaultMessageStore.set_broker_role).

A slave becoming master (the failover's new master, docs/ha.md) takes over in this order, each step
for a reason:
  1. its next queue offsets come from what it replicated: dispatch is brought to the log's end and the
     queue table rebuilt from the queues (replicated appends do not move it, only puts do);
  2. every state record its old master wrote is applied, and deleted topics' queues removed, before a
     put of its own;
  3. the services that deliver (delay levels, timer, revive) are armed from the progress its old master
     recorded, while the role still reads slave: each runs its next pass as soon as it reads master;
  4. the role changes (the put validator, the state log's following, the group consumption);
  5. the transactions' progress is put and every state table gets a snapshot in this log.
Either way the dedup window restarts: a master's window begins now, before it the index answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from store.config import BrokerRole, MessageStoreConfig
from store.dispatch.reput_message_service import ReputMessageService
from store.errors import StoreNotRunning
from store.logfile.commit_log import CommitLog
from store.metadata.deleted_topic_table import DeletedTopicTable
from store.metadata.topic_deletion import TopicRemovals
from store.pop.group_consumption import GroupConsumption
from store.put.dedup_window import DedupWindow
from store.put_validation import PutValidator
from store.queue.consume_queue_table import ConsumeQueueTable
from store.schedule.schedule_message_service import ScheduleMessageService
from store.state.state_log import StateLog
from store.state.state_snapshot_service import StateSnapshotService
from store.timer.timer_message_store import TimerMessageStore
from store.transaction.transaction_store import Transactions

# Longest a slave becoming master waits for its dispatch to reach the end of what it replicated.
TAKE_OVER_DISPATCH_TIMEOUT_S = 30.0


class RoleChange:
    """The parts of a store a role change moves, and the order it moves them in (the module's docstring)."""

    def __init__(
        self, config: MessageStoreConfig, validator: PutValidator, commit_log: CommitLog, reput_service: ReputMessageService,
        consume_queues: ConsumeQueueTable, state_log: StateLog, state_snapshot_service: StateSnapshotService,
        topic_removals: TopicRemovals, deleted_topics: DeletedTopicTable, dedup_window: DedupWindow,
        delivering: tuple[ScheduleMessageService, TimerMessageStore | None, GroupConsumption, Transactions],
        running: Callable[[], bool], last_stored_ms: Callable[[], int | None],
    ) -> None:  # fmt: skip
        self.config = config
        self.validator = validator
        self.commit_log = commit_log
        self.reput_service = reput_service
        self.consume_queues = consume_queues
        self.state_log = state_log
        self.state_snapshot_service = state_snapshot_service
        self.topic_removals = topic_removals
        self.deleted_topics = deleted_topics
        self.dedup_window = dedup_window
        self.schedule_service, self.timer, self.group_consumption, self.transactions = delivering
        self.running = running  # the store is started: a slave that is not does not take over (its load recovers)
        self.last_stored_ms = last_stored_ms  # where the dedup window's index lookups end

    def set_broker_role(self, role: BrokerRole) -> None:
        slave = role is BrokerRole.SLAVE
        was_slave = self.validator.is_slave
        taking_over = was_slave and not slave and self.running()
        if taking_over:
            self._take_over_queue_offsets()
            self.state_log.catch_up_all()  # everything the old master recorded, before a put of this one
            self.topic_removals.finish(self.deleted_topics)
            self._arm_deliveries()  # while the role still reads slave: no delivery pass runs before its checks
        self.config.broker_role = role
        self.validator.is_slave = slave
        self.state_log.following = slave
        self.group_consumption.set_slave(slave)
        if taking_over:
            self._take_over_services()
        if slave != was_slave:
            self.dedup_window.restart(self.last_stored_ms())  # a master's window begins now; before it, the index

    def _arm_deliveries(self) -> None:
        """A slave about to become master: the services that deliver start from the progress its old master
        recorded and check what it may have delivered after that (the delay levels and the timer against the
        index, the revive from the replicated offsets). Armed before the role changes, because each of them
        runs its next pass as soon as the role reads master: a timer slot the old master delivered after its
        last progress record, put again unchecked in that gap, would revive a checkpoint twice."""
        self.schedule_service.take_over()
        if self.timer is not None:
            self.timer.take_over()
        self.group_consumption.take_over()

    def _take_over_services(self) -> None:
        """A slave became master: what needs the master's role to take over (the transactions' progress is put)."""
        self.transactions.take_over()
        self.state_log.replicated = True  # a group's master: its tables with no snapshot in this log get one
        self.state_snapshot_service.wakeup()

    def _take_over_queue_offsets(self) -> None:
        """A slave becoming master: its next queue offsets come from what it replicated, not from puts it made.

        Replicated appends do not move `topic_queue_table` (only puts do), so dispatch is first brought
        to the log's end (the caller has stopped replication) and the table rebuilt from the queues.
        """
        deadline = time.monotonic() + TAKE_OVER_DISPATCH_TIMEOUT_S
        while self.reput_service.reput_from_offset < self.commit_log.get_max_offset():
            if time.monotonic() > deadline:
                raise StoreNotRunning("dispatch did not reach the log's end; this store cannot become a master now")
            self.reput_service.dispatch_now()
            time.sleep(0.001)
        with self.commit_log.put_lock:
            queues = self.consume_queues.all()
            self.commit_log.topic_queue_table = {(cq.topic, cq.queue_id): cq.get_max_offset_in_queue() for cq in queues}
