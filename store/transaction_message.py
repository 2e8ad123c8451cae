"""Transactional messages as RocketMQ stores them: the half, the committed copy and the op record.

RocketMQ's TransactionalMessageUtil, TransactionalMessageBridge and EndTransactionProcessor:
- a half message goes to RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC / REAL_QID naming
  where it belongs, TRAN_MSG "true" and PGROUP (its producer group). Its sys flag's transaction
  bits are reset to TRANSACTION_NOT_TYPE, as parseHalfMessageInner does: the half must get an
  entry in the half topic's queue (dispatch gives prepared and rollback messages none);
- a commit puts a copy to the real topic and queue with TRANSACTION_COMMIT_TYPE and
  prepared_transaction_offset = the half's commitlog offset, REAL_TOPIC, REAL_QID and TRAN_MSG
  cleared, UNIQ_KEY kept (that is how a copy is found again after a crash);
- commit and rollback then write an op record to RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0 (the half's
  queue id), tag "d", body = the half's queue offset as decimal text. tidemq adds one property to
  the op record, TIDEMQ_TRAN_ACTION ("commit" / "rollback"), so that a second, different
  resolution can be answered as a conflict after a restart too; RocketMQ's readers ignore it.

The transaction id is the half's offset message id (store host + commitlog offset): the store
finds the half from it without an index.
"""

from __future__ import annotations

import enum
from typing import Any

from store.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageInner,
    decode_offset_msg_id,
    new_uniq_key,
    topic_problem,
)
from store.message_codec import (  # noqa: F401 (re-exported: the transaction modules name them from here)
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.timer_message import TIMER_PROPERTIES

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
# The group whose consumer offset of the half topic is the check service's progress (RocketMQ's buildConsumerGroup).
CHECK_GROUP = "CID_SYS_RMQ_TRANS"
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_ACTION = "TIDEMQ_TRAN_ACTION"  # tidemq's, on op records only (see the module docstring)
# Properties a producer may not set on a transactional message (the store sets them).
TRANSACTION_PROPERTIES = frozenset(
    {PROPERTY_TRANSACTION_PREPARED, PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_CHECK_TIMES, PROPERTY_TRANSACTION_ACTION}
)

MAX_PRODUCER_GROUP_CHARS = 255  # RocketMQ's group name limit (Validators.CHARACTER_MAX_LENGTH)


class TransactionState(enum.Enum):
    """Where a transaction stands; the action names of commit and rollback are its lower-case values."""

    PENDING = "pending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


class TransactionAction(enum.Enum):
    COMMIT = "commit"
    ROLLBACK = "rollback"

    @property
    def state(self) -> TransactionState:
        return TransactionState.COMMITTED if self is TransactionAction.COMMIT else TransactionState.ROLLED_BACK


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def reset_transaction_type(sys_flag: int, kind: int) -> int:
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | kind


def producer_group_problem(name: str) -> str | None:
    """Why `name` cannot be a producer group (a topic's character rules); None when it can."""
    return (
        topic_problem(name, MAX_PRODUCER_GROUP_CHARS)
        if len(name) <= MAX_PRODUCER_GROUP_CHARS
        else f"is longer than {MAX_PRODUCER_GROUP_CHARS} characters"
    )


def is_delayed(properties: dict[str, str]) -> bool:
    """A delay level or a timer property: a transactional message takes neither (RocketMQ's producer clears them)."""
    return PROPERTY_DELAY in properties or not TIMER_PROPERTIES.isdisjoint(properties)


def make_half(msg: MessageInner, producer_group: str) -> None:
    """Turn `msg` (to its real topic and queue) into its half message, in place."""
    props = msg.properties
    if PROPERTY_UNIQ_KEY not in props:
        props[PROPERTY_UNIQ_KEY] = new_uniq_key()
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QID] = str(msg.queue_id)
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PROPERTY_PRODUCER_GROUP] = producer_group
    msg.sys_flag = reset_transaction_type(msg.sys_flag, TRANSACTION_NOT_TYPE)
    msg.topic = HALF_TOPIC
    msg.queue_id = 0
    msg.refresh()


def committed_message(half: dict[str, Any], born_host: bytes) -> MessageInner | None:
    """The copy a commit puts to the real topic (EndTransactionProcessor.endMessageTransaction); None
    when the half names no valid real topic and queue."""
    props = dict(half["properties"])
    real_topic = props.pop(PROPERTY_REAL_TOPIC, None)
    real_qid = props.pop(PROPERTY_REAL_QID, None)
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    props.pop(PROPERTY_TRANSACTION_CHECK_TIMES, None)
    if real_topic is None or topic_problem(real_topic) or real_qid is None or not real_qid.isdigit():
        return None
    return MessageInner(
        real_topic,
        half["body"],
        int(real_qid),
        props,
        flag=half["flag"],
        born_timestamp=half["born_timestamp"],
        born_host=born_host,
        sys_flag=reset_transaction_type(half["sys_flag"], TRANSACTION_COMMIT_TYPE),
        reconsume_times=half["reconsume_times"],
        prepared_transaction_offset=half["commitlog_offset"],
    )


def op_message(half_queue_offset: int, action: TransactionAction) -> MessageInner:
    """The op record of a resolved half (TransactionalMessageBridge.addRemoveTagInTransactionOp)."""
    props = {PROPERTY_TAGS: REMOVE_TAG, PROPERTY_UNIQ_KEY: new_uniq_key(), PROPERTY_TRANSACTION_ACTION: action.value}
    return MessageInner(OP_TOPIC, str(half_queue_offset).encode("ascii"), 0, props)


def op_record(stored: dict[str, Any]) -> tuple[int, TransactionAction | None] | None:
    """(half queue offset, action or None when not recorded) of a stored op record; None when it is not one."""
    if stored["properties"].get(PROPERTY_TAGS) != REMOVE_TAG:
        return None
    text = stored["body"].decode("ascii", errors="replace")
    if not text.isdigit():
        return None
    action = stored["properties"].get(PROPERTY_TRANSACTION_ACTION)
    return int(text), TransactionAction(action) if action in ("commit", "rollback") else None


def half_offset_of(transaction_id: str) -> int | None:
    """The half's commitlog offset named by a transaction id (an offset message id); None when malformed."""
    try:
        return decode_offset_msg_id(transaction_id)[2]
    except ValueError:
        return None
