"""HalfMessageHook: the put hook that stores a batch with a producer group as half messages.

RocketMQ's TransactionalMessageBridge.parseHalfMessageInner, run on the put path: every message
of a batch whose `producer_group` is set goes to RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real
topic and queue in REAL_TOPIC / REAL_QID (store/transaction/transaction_message.py, `make_half`).
A delayed message (DELAY or a TIMER_* property, or an encoded batch with a delivery time) and an
invalid group name are refused (MESSAGE_ILLEGAL) with nothing stored. An ENCODED batch becomes
MESSAGES first, each with its own UNIQ_KEY (each message is its own transaction).

The hook adds an appended-hook that registers the halves as pending (Transactions.register_halves_locked)
under the put lock, so a half is pending before dispatch makes it visible.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from store.codec.message import PROPERTY_UNIQ_KEY, new_uniq_key
from store.put.put_batch import BatchForm, PutBatch, batch_messages
from store.status import PutMessageResult, PutMessageStatus, PutRefusal
from store.transaction.transaction_message import is_delayed, make_half, producer_group_problem

if TYPE_CHECKING:
    from store.transaction.transaction_store import Transactions


class HalfMessageHook:
    hook_name = "half message"
    sees_plain = False  # a plain batch has no producer group

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    def before_put(self, batch: PutBatch) -> PutMessageResult | None:
        group = batch.producer_group
        if group is None:
            return None
        problem = producer_group_problem(group)
        if problem is not None or batch.deliver_at_ms is not None:
            detail = f"producer group {problem}" if problem else "a transactional message cannot be delayed"
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.NONE, detail + "; nothing was stored")
        if batch.form is BatchForm.ENCODED:
            assert batch.encoded is not None
            msgs = batch_messages(batch.topic, batch.queue_id, batch.encoded.data, batch.born_host)
            for msg in msgs:
                if PROPERTY_UNIQ_KEY not in msg.properties:
                    msg.properties[PROPERTY_UNIQ_KEY] = new_uniq_key()
            batch.set_messages(msgs)
        assert batch.form is BatchForm.MESSAGES, "a half batch is given as messages or encoded"
        msgs = list(batch.messages)
        if any(is_delayed(m.properties) for m in msgs):
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.NONE, "a transactional message cannot be delayed; nothing was stored"
            )
        targets = [(m.topic, m.queue_id) for m in msgs]
        for msg in msgs:
            make_half(msg, group)
        assert batch.on_appended_locked is None, "a half batch carries no other appended-hook"
        batch.on_appended_locked = functools.partial(self.transactions.register_halves_locked, group, targets, msgs)
        return None
