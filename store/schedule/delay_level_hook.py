"""DelayLevelHook: the put hook that sends a message asking for a delay level to SCHEDULE_TOPIC_XXXX.

RocketMQ's HookUtils.handleScheduleMessage (transformDelayLevelMessage): a message with DELAY
> 0 (and no REAL_TOPIC yet: a delivered copy keeps its DELAY) goes to queue level-1 of
SCHEDULE_TOPIC_XXXX, its level capped at the last configured one, REAL_TOPIC and REAL_QID saying
where it belongs; DELAY <= 0 or not a number is dropped and the message stays a normal one.
ScheduleMessageService delivers it when due. Only MESSAGES batches can ask (check_batch refuses
DELAY on an encoded batch's items; a FIELDS batch has no delay).
"""

from __future__ import annotations

from store.codec.message import PROPERTY_DELAY, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC, MessageInner, delay_requested
from store.put.put_batch import BatchForm, PutBatch
from store.status import PutMessageResult


class DelayLevelHook:
    hook_name = "delay level"
    sees_plain = False  # it rewrites MESSAGES batches only

    def __init__(self, delay_levels_ms: list[int]) -> None:
        self.levels = len(delay_levels_ms)

    def before_put(self, batch: PutBatch) -> PutMessageResult | None:
        if batch.form is not BatchForm.MESSAGES:
            return None
        for msg in batch.messages:
            # The membership test first keeps the call off the put of a message without DELAY.
            if PROPERTY_DELAY in msg.properties and msg.topic != SCHEDULE_TOPIC and delay_requested(msg.properties):
                self.rewrite(msg)
        return None

    def rewrite(self, msg: MessageInner) -> None:
        try:
            level = int(msg.properties[PROPERTY_DELAY])
        except ValueError:
            level = 0
        if level <= 0:
            del msg.properties[PROPERTY_DELAY]
            msg.refresh()
            return
        level = min(level, self.levels)
        msg.properties[PROPERTY_DELAY] = str(level)
        msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
        msg.properties[PROPERTY_REAL_QID] = str(msg.queue_id)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        msg.refresh()
