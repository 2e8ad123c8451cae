"""Dead letters sent back: copies of messages in a group's dead-letter topic put into the group's retry
topic, so that the group (and only that group) receives them again, as rocketmq-dashboard's resend and
SQS's redrive do.

A copy keeps the body, flag, properties (the client message id among them) and the topic it was first
produced to (RETRY_TOPIC); its reconsume times start at 0 again, so it has the group's whole
`max_reconsume_times` before it is dead-lettered anew. The dead letters stay where they are (a topic is
a log): sending one twice makes two copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.codec.message import PROPERTY_UNIQ_KEY, MessageInner
from store.codec.message_codec import decode_message
from store.metadata.topic_names import dlq_topic, retry_topic
from store.pop.pop_consumer import PopStore, requeued
from store.pop.pop_records import PROPERTY_RETRY_TOPIC
from store.status import GetMessageStatus, PutMessageResult

# Dead letters one call sends back at most (one put).
MAX_RESEND = 1_000


@dataclass(slots=True, frozen=True)
class Resent:
    offset: int  # in the dead-letter topic's queue 0
    status: str  # RESENT; NOT_FOUND (no message at that offset); NO_ORIGIN (no RETRY_TOPIC: not put there by the broker)
    topic: str | None = None  # the topic it was first produced to
    msg_id: str | None = None


def resend_dead_letters(store: PopStore, group: str, offsets: list[int]) -> tuple[list[Resent], PutMessageResult | None]:
    """Put copies of the dead letters at `offsets` into the group's retry topics, in one put. Returns what each
    offset held and the put's result (None when no offset held a message: nothing was put)."""
    assert 0 < len(offsets) <= MAX_RESEND
    dlq = dlq_topic(group)
    out: list[Resent] = []
    copies: list[MessageInner] = []
    for offset in offsets:
        result = store.get_message(group, dlq, 0, offset, 1)
        try:
            if result.status is not GetMessageStatus.FOUND or result.queue_offsets[0] != offset:
                out.append(Resent(offset, "NOT_FOUND"))
                continue
            pos, size = result.positions()[0]
            data = bytes(memoryview(result.data)[pos : pos + size])
        finally:
            result.release()
        props = decode_message(data, 0)["properties"]
        origin = props.get(PROPERTY_RETRY_TOPIC)
        if origin is None:
            out.append(Resent(offset, "NO_ORIGIN", None, props.get(PROPERTY_UNIQ_KEY)))
            continue
        copies.append(requeued(data, retry_topic(group, origin), 0))
        out.append(Resent(offset, "RESENT", origin, props.get(PROPERTY_UNIQ_KEY)))
    if not copies:
        return out, None
    for topic in {m.topic for m in copies}:
        store.ensure_topic(topic, 1)
    return out, store.put_messages(copies)
