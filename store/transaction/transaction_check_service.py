"""TransactionCheckService: checks back the transactions left pending (RocketMQ's
TransactionalMessageCheckService and the check half of TransactionalMessageServiceImpl).

Every `transaction_check_interval_ms` it walks the pending halves oldest first. A half stored
less than `transaction_timeout_ms` ago ends the walk (later ones are younger). For an older one:
- a copy already committed before a crash (its op record missing) is recorded as committed;
- after `transaction_check_max` checks it is rolled back, with a warning line (RocketMQ's
  resolveDiscardMsg discards it too);
- otherwise it counts one check and, when its producer group has a check URL and a transport is
  set, a CheckRequest goes to the transport, whose answer (commit, rollback, unknown) is applied
  by `Transactions.resolve` from the transport's thread. Halves of a group without a URL are
  listed for their producer (`Transactions.unresolved`): that listing is their check.
Nothing is checked on a slave (its master checks and resolves; the results arrive by replication).
A half is checked again `transaction_check_interval_ms` after its last check at the earliest,
and never while a check of it is under way. The transport runs the network I/O on threads of
its own and never while a store lock is held; `submit` must not block.

Then the progress (the first half still pending) is recorded, and the check counts persisted.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol

from core.service_thread import ServiceThread
from store.config import BrokerRole
from store.transaction.transaction_message import TransactionAction
from store.transaction.transaction_store import CheckAnswer, CheckRequest, PendingHalf, ResolveStatus

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.transaction.transaction_store import Transactions

log = logging.getLogger("tidemq.store")


class CheckedStore(Protocol):
    """What the check-back service needs of the store: its state, its clock and the half messages."""

    config: MessageStoreConfig

    def is_running(self) -> bool: ...
    def now_ms(self) -> int: ...
    def look_message_by_offset(self, commitlog_offset: int) -> dict[str, Any] | None: ...


class TransactionCheckService(ServiceThread):
    def __init__(self, store: CheckedStore, transactions: Transactions) -> None:
        super().__init__("TransactionCheckService")
        self.store = store
        self.transactions = transactions

    def run(self) -> None:
        txn = self.transactions
        self.wait_until(self.store.is_running, 100)
        while not self.is_stopped():
            try:
                self.check_pass()
            except Exception:
                log.exception("transaction check pass failed")
            self.wait_for_running(txn.check_interval_ms)
        txn.persist_checks()

    def check_pass(self) -> int:
        """Check every half due; returns how many were checked or resolved."""
        txn = self.transactions
        if self.store.config.broker_role is BrokerRole.SLAVE:
            return 0  # a slave's halves are its master's to check; it puts nothing
        now = self.store.now_ms()
        done = 0
        for half in txn.unresolved(None, 0):
            if half.store_timestamp + txn.timeout_ms > now:
                break
            if half.in_check or half.next_check_ms > now:
                continue
            done += self._check_one(half, now)
        if done:
            txn.persist_checks()
        txn.advance_progress()
        return done

    def _check_one(self, half: PendingHalf, now: int) -> int:
        txn = self.transactions
        if txn.recover_committed(half):
            return 1  # committed before a crash: its op record is written now, no check needed
        if half.checks >= txn.check_max:
            outcome = txn.resolve(half.transaction_id, TransactionAction.ROLLBACK)
            if outcome.status is ResolveStatus.RESOLVED:
                txn.counters.check_rollbacks += 1
                log.warning(
                    "transaction %s of producer group %s (%s/%d, msg id %s) rolled back after %d checks without an answer",
                    half.transaction_id, half.producer_group, half.topic, half.queue_id, half.msg_id, half.checks,
                )  # fmt: skip
            return 1
        group = txn.producer_group(half.producer_group)
        transport = txn.check_transport
        request = self._request(half, group.check_url) if group is not None and group.check_url and transport is not None else None
        if request is not None:
            assert transport is not None
            half.in_check = True
            if not transport.submit(request, lambda answer: self._apply(half, answer)):
                half.in_check = False
                return 0  # every slot is busy: checked at the next pass, not counted
        half.checks += 1
        half.next_check_ms = now + txn.check_interval_ms
        txn.counters.checks += 1
        return 1

    def _request(self, half: PendingHalf, check_url: str) -> CheckRequest | None:
        stored = self.store.look_message_by_offset(half.commitlog_offset)
        if stored is None:
            return None
        snapshot = dataclasses.replace(half)  # a copy: the table's entry may change while the check is under way
        return CheckRequest(check_url, snapshot, stored["body"], dict(stored["properties"]))

    def _apply(self, half: PendingHalf, answer: CheckAnswer) -> None:
        """The transport's answer, from its thread."""
        self.transactions.check_answers[answer] += 1
        try:
            if answer is CheckAnswer.COMMIT or answer is CheckAnswer.ROLLBACK:
                outcome = self.transactions.resolve(half.transaction_id, TransactionAction(answer.value))
                if outcome.status is ResolveStatus.PUT_FAILED:
                    log.warning("transaction %s: the check answered %s, but the put was refused", half.transaction_id, answer.value)
        finally:
            half.in_check = False
