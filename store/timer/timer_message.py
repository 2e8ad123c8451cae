"""Timer messages: what a put at an arbitrary delivery time looks like (RocketMQ 5's names).

A message asks for a delivery time with one of three properties, as RocketMQ 5's clients set
them: TIMER_DELIVER_MS (ms since the epoch), TIMER_DELAY_MS or TIMER_DELAY_SEC (from now).
`transform()` (RocketMQ's HookUtils.transformTimerMessage) runs on the put path before
validation: a time still ahead moves the message to the timer topic `rmq_sys_wheel_timer`,
queue 0, with REAL_TOPIC / REAL_QID saying where it belongs and TIMER_OUT_MS its slot time;
a time already past leaves it a normal message (delivered at once); a delay past
`timer_max_delay_ms` is refused (DELAY_TOO_LONG). A DELAY level wins over the TIMER_*
properties, which are then dropped, as in RocketMQ.

TIMER_OUT_MS is the delivery time rounded down to the precision, minus one precision when
it is an exact multiple (RocketMQ's rounding): the slot at time t is read once the clock
passes t + precision, so a message is never delivered before the time it asked for.

`deliver_at()` is the store-internal way to put a message due at an absolute time (the
revive checkpoints of POP consumption will use it): it sets TIMER_DELIVER_MS and the put
path does the rest.
"""

from __future__ import annotations

import enum
from typing import Any

from store.codec.message import (
    PROPERTY_PUT_PART,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    TIMER_TOPIC,
    MessageInner,
    delay_requested,
    new_uniq_key,
)
from store.codec.stored_copy import copy_of, real_target
from store.put.put_batch import batch_messages

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
REQUEST_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC)
# Set by the store only: a producer may not give them.
RESERVED_PROPERTIES = frozenset({PROPERTY_TIMER_OUT_MS, PROPERTY_TIMER_ENQUEUE_MS, PROPERTY_TIMER_DEQUEUE_MS, PROPERTY_TIMER_ROLL_TIMES})
# Every TIMER_* name: a producer sets them through delay_ms / deliver_at_ms, never as user properties.
TIMER_PROPERTIES = frozenset(REQUEST_PROPERTIES) | RESERVED_PROPERTIES


class TimerTransform(enum.Enum):
    """What the put path did with a message's TIMER_* properties."""

    NONE = "NONE"  # not a timer message (or a DELAY level won)
    TIMER = "TIMER"  # moved to the timer topic
    DUE_NOW = "DUE_NOW"  # the time is past: stored as a normal message
    ILLEGAL = "ILLEGAL"  # a TIMER_* value is not an integer
    TOO_LONG = "TOO_LONG"  # past timer_max_delay_ms


def is_timer_request(props: dict[str, str]) -> bool:
    return PROPERTY_TIMER_DELIVER_MS in props or PROPERTY_TIMER_DELAY_MS in props or PROPERTY_TIMER_DELAY_SEC in props


def requested_deliver_ms(props: dict[str, str], now_ms: int) -> int | None:
    """The delivery time a message asks for (RocketMQ's order: DELAY_SEC, DELAY_MS, DELIVER_MS); None when malformed."""
    try:
        if PROPERTY_TIMER_DELAY_SEC in props:
            return now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
        if PROPERTY_TIMER_DELAY_MS in props:
            return now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
        return int(props[PROPERTY_TIMER_DELIVER_MS])
    except (KeyError, ValueError):
        return None


def slot_time_ms(deliver_ms: int, precision_ms: int) -> int:
    """TIMER_OUT_MS of a delivery time: the slot whose reading delivers it no earlier than asked."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms - deliver_ms % precision_ms


def transform(msg: MessageInner, now_ms: int, precision_ms: int, max_delay_ms: int) -> TimerTransform:
    """Move a message asking for a later delivery to the timer topic (the caller checked is_timer_request)."""
    props = msg.properties
    if msg.topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in props:
        return TimerTransform.NONE  # a rolled copy going round again, or a delivered copy (it keeps TIMER_DELAY_MS)
    if delay_requested(props):
        for name in REQUEST_PROPERTIES:
            props.pop(name, None)
        msg.refresh()
        return TimerTransform.NONE
    deliver_ms = requested_deliver_ms(props, now_ms)
    if deliver_ms is None:
        return TimerTransform.ILLEGAL
    if deliver_ms <= now_ms:
        return TimerTransform.DUE_NOW
    if deliver_ms - now_ms > max_delay_ms:
        return TimerTransform.TOO_LONG
    if PROPERTY_UNIQ_KEY not in props:
        props[PROPERTY_UNIQ_KEY] = new_uniq_key()  # the key crash recovery checks deliveries by
    props[PROPERTY_TIMER_OUT_MS] = str(slot_time_ms(deliver_ms, precision_ms))
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QID] = str(msg.queue_id)
    msg.topic = TIMER_TOPIC
    msg.queue_id = 0
    msg.refresh()
    return TimerTransform.TIMER


def deliver_at(msg: MessageInner, deliver_ms: int) -> MessageInner:
    """Ask for `msg` to be delivered to its topic and queue at `deliver_ms` (ms since the epoch) once put."""
    for name in REQUEST_PROPERTIES:
        msg.properties.pop(name, None)
    msg.properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    msg.refresh()
    return msg


def due_copy(stored: dict[str, Any], roll: bool, enqueue_ms: int, dequeue_ms: int) -> MessageInner | None:
    """The message a due record puts: to its real topic and queue, or (a roll) to the timer topic again.

    None when the stored message names no valid real topic/queue (it is skipped with an error).
    """
    props = dict(stored["properties"])
    props.pop(PROPERTY_PUT_PART, None)  # the timer message's place in its put, not the copy's in the timer's put
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
    if roll:
        topic, queue_id = TIMER_TOPIC, 0
        props[PROPERTY_TIMER_ROLL_TIMES] = str(int(props.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0) + 1)
    else:
        # REAL_TOPIC and REAL_QID stay: RocketMQ 5's TimerMessageStore.convertMessage writes the
        # property string before clearing them from the property map.
        target = real_target(props)
        if target is None:
            return None
        topic, queue_id = target
    return copy_of(stored, topic, queue_id, props)


def target_deliver_ms(props: dict[str, str], precision_ms: int) -> int | None:
    """The time a delivered copy was due, lateness is measured against it; None when unknown.

    TIMER_DELIVER_MS when given; for a delay (TIMER_DELAY_MS / _SEC, relative to a put time no
    longer known after a roll) the end of its slot, the delivery time rounded up to the precision.
    """
    try:
        if PROPERTY_TIMER_DELIVER_MS in props:
            return int(props[PROPERTY_TIMER_DELIVER_MS])
        if PROPERTY_TIMER_OUT_MS in props:
            return int(props[PROPERTY_TIMER_OUT_MS]) + precision_ms
    except ValueError:
        return None
    return None


def timer_batch_messages(topic: str, queue_id: int, data: bytes, deliver_ms: int, born_host: bytes) -> list[MessageInner]:
    """The messages of a checked batch (RocketMQ's batch encoding), each asking for delivery at `deliver_ms`.

    A timer batch cannot be appended as it came: each message gets its own REAL_TOPIC and
    UNIQ_KEY (the key crash recovery checks deliveries by), so it goes the MessageInner way.
    """
    return [deliver_at(msg, deliver_ms) for msg in batch_messages(topic, queue_id, data, born_host)]
