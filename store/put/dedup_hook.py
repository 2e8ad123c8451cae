"""DedupHook: the first put hook, idempotent produce (store/put/dedup_window.py has the window).

It acts on a producer's batch (`PutBatch.dedup`) whose messages carry dedup ids: FIELDS in each
message's `dedup_id` (the store's packing wrote the TIDEMQ_DEDUP_ID property and the KEYS entry),
MESSAGES and ENCODED in the TIDEMQ_DEDUP_ID property (an ENCODED batch holding the property becomes
MESSAGES, so each message gets the id in its KEYS). The rule for a batch, exactly:
- no message has an id: the hook does nothing;
- an id is malformed or given twice in the batch, or the batch is transactional: refused
  DEDUP_ID_INVALID, nothing stored;
- every message has an id and every id was seen within the window (per topic): answered PUT_OK with
  `duplicate` and the first messages' ids, nothing stored;
- some messages' ids were seen and others were not (or some messages have none): refused
  DEDUP_PARTIAL, nothing stored;
- no id was seen: the ids are reserved and the batch goes on; when it is appended the ids record
  the stored messages, when it is refused or fails they are released.
"""

from __future__ import annotations

from store.codec.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, MessageInner
from store.put.dedup_window import DedupWindow, DuplicateItem, Verdict, dedup_id_problem
from store.put.put_batch import DEDUP_PROPERTY, BatchForm, PutBatch, batch_messages
from store.status import PutMessageResult, PutMessageStatus, PutRefusal


class DedupHook:
    hook_name = "dedup"
    sees_plain = False  # a plain batch has no dedup id

    def __init__(self, window: DedupWindow) -> None:
        self.window = window

    def before_put(self, batch: PutBatch) -> PutMessageResult | None:
        if not batch.dedup:
            return None
        ids = self._ids(batch)
        if ids is None:
            return None
        problem = _problem(ids, batch)
        if problem is not None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.DEDUP_ID_INVALID, problem + "; nothing was stored")
        topic = batch.messages[0].topic if batch.form is BatchForm.MESSAGES else batch.topic
        verdict, items = self.window.reserve(topic, ids)
        if verdict is Verdict.DUPLICATE:
            return PutMessageResult(PutMessageStatus.PUT_OK, items=items, duplicate=True)
        if verdict is not Verdict.NEW:
            return _refusal(verdict, ids, items)
        self._follow(batch, topic, ids)
        return None

    def _ids(self, batch: PutBatch) -> list[str | None] | None:
        """Each message's dedup id (None: none); None when no message has one."""
        if batch.fields:  # a FIELDS batch (packed by now): the packing wrote the ids' properties and KEYS
            ids = [f.dedup_id for f in batch.fields]
        else:
            if batch.form is BatchForm.ENCODED:
                assert batch.encoded is not None
                if not batch.encoded.has_dedup_id:  # check_batch looked at every item's properties
                    return None
                batch.set_messages(batch_messages(batch.topic, batch.queue_id, batch.encoded.data, batch.born_host))
            ids = [m.properties.get(DEDUP_PROPERTY) for m in batch.messages]
            if any(ids):
                for msg, dedup_id in zip(batch.messages, ids, strict=True):
                    if dedup_id:
                        _add_key(msg, dedup_id)
        return ids if any(i is not None for i in ids) else None

    def _follow(self, batch: PutBatch, topic: str, ids: list[str | None]) -> None:
        """Record the appended messages under their dedup ids, or release the ids when nothing is stored."""
        window = self.window
        batch.on_refused.append(lambda: window.release(topic, ids))
        if batch.form is BatchForm.MESSAGES:
            messages = list(batch.messages)
            queue_ids = [m.queue_id for m in messages]  # before a delay or timer moves them

            def described(i: int) -> tuple[int, str, bool]:
                msg = messages[i]
                return queue_ids[i], msg.properties.get(PROPERTY_UNIQ_KEY, ""), msg.topic != topic

        else:
            queue_id, uniq_keys = batch.queue_id, batch.uniq_keys

            def described(i: int) -> tuple[int, str, bool]:
                return queue_id, uniq_keys[i] if uniq_keys else "", False

        assert batch.on_appended_locked is None, "a producer's batch carries no other appended-hook"
        batch.on_appended_locked = lambda items: window.appended_locked(topic, ids, items, described)


def _problem(ids: list[str | None], batch: PutBatch) -> str | None:
    if batch.producer_group is not None:
        return "a transactional message takes no dedup id (its transaction id identifies it)"
    seen: set[str] = set()
    for i, dedup_id in enumerate(ids):
        if dedup_id is None:
            continue
        problem = dedup_id_problem(dedup_id)
        if problem is not None:
            return f"message {i}: {problem}"
        if dedup_id in seen:
            return f"message {i}: the dedup id {dedup_id!r} is given twice in one batch"
        seen.add(dedup_id)
    return None


def _refusal(verdict: Verdict, ids: list[str | None], items: list[DuplicateItem]) -> PutMessageResult:
    if verdict is Verdict.PARTIAL:
        detail = (
            f"{len(items)} of the batch's {len(ids)} messages were stored before under their dedup ids and the others were not; "
            "nothing was stored: resend the batch as it was, or the new messages alone"
        )
        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.DEDUP_PARTIAL, detail)
    if verdict is Verdict.PENDING:
        detail = "another put with the same dedup id is being stored now; nothing was stored, retry shortly to learn its ids"
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DEDUP_PENDING, detail)
    assert verdict is Verdict.FULL
    detail = "the broker remembers dedup_max_keys dedup ids already; nothing was stored, retry once older ids expire (dedup_window_s)"
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DEDUP_WINDOW_FULL, detail)


def _add_key(msg: MessageInner, dedup_id: str) -> None:
    """Make `dedup_id` one of the message's KEYS (the index finds it by them)."""
    props = msg.properties
    keys = props.get(PROPERTY_KEYS)
    if keys is None:
        props[PROPERTY_KEYS] = dedup_id
    elif dedup_id not in keys.split(KEY_SEPARATOR):
        props[PROPERTY_KEYS] = keys + KEY_SEPARATOR + dedup_id
    msg.refresh()
