"""TimerPutHook: the put hook that moves messages asking for a later delivery to the timer topic.

RocketMQ 5's HookUtils.handleScheduleMessage (transformTimerMessage), as store/timer/timer_message.py
describes: a message with a TIMER_* property still ahead goes to `rmq_sys_wheel_timer`; with the
timer off (timer_wheel_enable) such a put is refused TIMER_NOT_ENABLED. An ENCODED batch with
`deliver_at_ms` becomes MESSAGES first, each due then with its own REAL_TOPIC and UNIQ_KEY.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.put.put_batch import BatchForm, PutBatch
from store.status import PutMessageResult, PutMessageStatus, PutRefusal
from store.timer.timer_message import deliver_at, is_timer_request, timer_batch_messages

if TYPE_CHECKING:
    from store.timer.timer_message_store import TimerMessageStore


class TimerPutHook:
    hook_name = "timer message"
    sees_plain = False  # a plain batch has no due time and is not MESSAGES

    def __init__(self, timer: TimerMessageStore | None) -> None:
        self.timer = timer  # None: timer messages are off

    def before_put(self, batch: PutBatch) -> PutMessageResult | None:
        if batch.deliver_at_ms is not None and batch.form is BatchForm.ENCODED:
            assert batch.encoded is not None
            batch.set_messages(timer_batch_messages(batch.topic, batch.queue_id, batch.encoded.data, batch.deliver_at_ms, batch.born_host))
        elif batch.deliver_at_ms is not None:  # an encoded batch an earlier hook made messages of
            for msg in batch.messages:
                deliver_at(msg, batch.deliver_at_ms)
        if batch.form is not BatchForm.MESSAGES:
            return None
        if self.timer is not None:
            return self.timer.prepare_put(batch.messages)
        if any(is_timer_request(m.properties) for m in batch.messages):
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                PutRefusal.TIMER_NOT_ENABLED,
                "timer messages are off (timer_wheel_enable); nothing was stored",
            )
        return None
