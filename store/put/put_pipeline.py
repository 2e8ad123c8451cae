"""PutPipeline: what a batch goes through to be stored, in order.

A FIELDS batch is packed into RocketMQ's batch encoding and checked (it becomes ENCODED); the put
hooks run in order (dedup ids, half messages, timer messages, validation, delay levels:
store/put/put_hook.py; a plain batch, ENCODED with no dedup id, producer group or due time, only through those
that can act on one), the first refusal answering; the commitlog appends the batch (MESSAGES with
their runs, ENCODED as it came); the put is counted; then its dispatch runs, or is owed to the
caller's pass (`defer_dispatch`) or to the next pass (`lazy_dispatch`), after the flush request is
queued so that the flush overlaps the dispatch, and never under the put lock; and the answer is the
result with its durability waiter (none when answered at once), or with `defer_durability` the
result marked `durability_owed`. With nothing stored, the batch's `on_refused` callbacks run.

A packed batch (`PutBatch.of_packed`) the validator admits first takes the put lane (`_put_packed`): its check and
append are the commitlog's one kernel call (CommitLog.put_packed), then it is counted and answered as above; when the
kernel declines, nothing has changed and the batch goes the way above.

It is given the objects it uses (the commitlog, the hooks, the stats, the durability waits, the
dispatch) and a way to read whether the disk refused a file's space; the store owns them all.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence

from store import _kernels, native
from store.config import MessageStoreConfig
from store.dispatch.reput_message_service import ReputMessageService
from store.logfile.commit_log import BatchHead, CommitLog
from store.logfile.put_durability import PutDurability
from store.native import CheckedBatch
from store.put.put_batch import BatchForm, PackedProduce, PutBatch, packed_fields
from store.put.put_hook import PutHook
from store.stats.store_stats_service import StoreStatsService
from store.status import EncodedItems, PutMessageResult, PutMessageStatus, PutRefusal, total_bytes

# Why the check of a packed FIELDS batch refused it -> the refusal the put answers.
_BATCH_REFUSALS = {
    native.BatchErrorCode.BODY_TOO_LARGE: PutRefusal.MESSAGE_TOO_LARGE,
    native.BatchErrorCode.PROPERTIES_TOO_LARGE: PutRefusal.PROPERTIES_TOO_LARGE,
    native.BatchErrorCode.BAD_PROPERTIES: PutRefusal.PROPERTIES_TOO_LARGE,
    native.BatchErrorCode.TOO_MANY: PutRefusal.BATCH_TOO_LARGE,
}
# A put's answer and its durability waiter (None: answered at once).
PutAnswer = tuple[PutMessageResult, "concurrent.futures.Future[PutMessageResult] | None"]
# A packed put's answer without a result object (`PutPipeline.put_packed`): its items, its commitlog end offset and
# whether its durability wait is owed (DefaultMessageStore.durable_through).
PackedPut = tuple[EncodedItems, int, bool]


class PutPipeline:
    def __init__(
        self, config: MessageStoreConfig, commit_log: CommitLog, hooks: Sequence[PutHook], stats: StoreStatsService,
        durability: PutDurability, reput_service: ReputMessageService, space_exhausted: Callable[[], bool],
    ) -> None:  # fmt: skip
        self.config = config
        self.commit_log = commit_log
        self.hooks = hooks
        self.plain_hooks = [hook for hook in hooks if hook.sees_plain]  # in order: what a plain batch goes through
        self.stats = stats
        self.durability = durability
        self.reput_service = reput_service
        self.space_exhausted = space_exhausted  # a file's space could not be reserved (the store's flag)
        # The validator's admits_plain (store/put_validation.py), when the validator is the only hook a plain batch
        # goes through: a packed batch then takes the put lane (`_put_packed`).
        # With the transient store pool every file has a write buffer, which the lane declines: no lane at all.
        only = self.plain_hooks[0] if len(self.plain_hooks) == 1 and not config.transient_store_pool_enable else None
        self.lane_admits: Callable[[str, int, int], bool] | None = getattr(only, "admits_plain", None)

    def check_batch(self, batch: bytes | bytearray | memoryview) -> CheckedBatch:
        """A batch in RocketMQ's encoding checked against the store's limits (store.native.check_batch
        with check_properties), for an ENCODED PutBatch; BatchError when it is refused."""
        cfg = self.config
        data = bytes(batch)
        # native.check_batch_crcs, its kernel called directly (a put's fixed cost).
        count, stored, crcs, has_dedup_id = _kernels.check_batch(
            data, cfg.max_message_size_bytes, cfg.max_batch_messages, cfg.max_properties_size_bytes, True, True
        )
        return CheckedBatch(data, count, stored, crcs, has_dedup_id)

    def put(self, batch: PutBatch) -> PutAnswer:
        """Store `batch` (the module's docstring says in what order)."""
        if batch.packed is not None and self.lane_admits is not None:
            answer = self._put_packed(batch)
            if answer is not None:
                return answer
        refusal = self._pack_fields(batch) if batch.form is BatchForm.FIELDS else None
        if refusal is None:
            for hook in self.plain_hooks if _is_plain(batch) else self.hooks:
                refusal = hook.before_put(batch)
                if refusal is not None:
                    break
        if refusal is not None:
            if not refusal.duplicate:  # a duplicate is answered with the first ids: not a failure
                self.stats.put_failures += 1
            batch.refused()
            return refusal, None
        t0 = time.perf_counter_ns()
        cl = self.commit_log
        if batch.form is BatchForm.MESSAGES:
            result = cl.put_messages(batch.messages, batch.on_appended_locked)
        else:
            assert batch.encoded is not None
            now = int(time.time() * 1000) if cl.clock is None else cl.clock.now_ms()  # cl.now_ms(), written out (every put)
            head = BatchHead(batch.topic, batch.topic.encode("utf-8"), batch.queue_id, now, batch.born_host)
            result = cl.put_batch(batch.encoded, head, batch.on_appended_locked)
        # A PUT_OK result holds the batch's messages (the validator refuses an empty batch): only a failure is counted.
        if result.status is not PutMessageStatus.PUT_OK and not result.items:
            batch.refused()
        return self._after_put(result, t0, batch)

    def put_lane(self, batch: PutBatch) -> PutAnswer | None:
        """The put lane alone (`_put_packed`): None, nothing changed, when there is no lane or it declines; the caller
        then puts the batch its own way (a binary batch: checked first, so that a refusal names the message)."""
        if batch.packed is None or self.lane_admits is None:
            return None
        return self._put_packed(batch)

    def _put_packed(self, batch: PutBatch) -> PutAnswer | None:
        """The put lane: a packed batch (`PutBatch.of_packed`) the validator admits, checked and appended by the commitlog's
        one kernel call (`_append_packed`), counted, then answered as `_after_put` answers; None when the validator
        would refuse it or the kernel declines, having changed nothing: the general path then stores or refuses it."""
        packed = batch.packed
        assert packed is not None and self.lane_admits is not None
        if batch.producer_group is not None or batch.deliver_at_ms is not None or batch.on_appended_locked or batch.state_records:
            return None  # of_packed makes none of these; a caller that sets one takes the hooks that act on it
        appended = self._append_packed(batch.topic, batch.queue_id, packed, batch.born_host)
        if appended is None:
            return None
        items, end = appended
        return self._answer(PutMessageResult(PutMessageStatus.PUT_OK, items=items), end, batch)

    def put_packed(self, topic: str, queue_id: int, packed: PackedProduce, born_host: bytes, defer_dispatch: bool) -> PackedPut | None:
        """`_put_packed` of `PutBatch.of_packed(topic, queue_id, packed, born_host)` with `defer_durability` (and
        `defer_dispatch` as given), answered without the batch and result objects: (items, end offset, whether the
        durability wait is owed). None, nothing changed, where `put_lane` would answer None."""
        if self.lane_admits is None:
            return None
        appended = self._append_packed(topic, queue_id, packed, born_host)
        if appended is None:
            return None
        items, end = appended
        reput = self.reput_service
        owed = not self.durability.answers_at_once()  # before the dispatch: the flush request overlaps it
        if not (defer_dispatch and reput.owe(end, False)):
            reput.dispatch_through(end)
        return items, end, owed

    def _append_packed(self, topic: str, queue_id: int, packed: PackedProduce, born_host: bytes) -> tuple[EncodedItems, int] | None:
        """A packed batch the validator admits appended by the commitlog's one kernel call (CommitLog.put_packed) and
        counted: its items and end offset; None, nothing changed, when it is large enough to be written through
        (store/logfile/write_through.py), the validator would refuse it or the kernel declines."""
        assert self.lane_admits is not None
        cl = self.commit_log
        through = cl.write_through.min_bytes
        if through and len(packed.data) >= through:
            return None  # a large batch is written through by put_batch (store/logfile/write_through.py): no page faulted
        if not self.lane_admits(topic, queue_id, packed.messages):
            return None
        cfg = self.config
        t0 = time.perf_counter_ns()
        stored = cl.put_packed(
            packed.data, topic, topic.encode(), queue_id, born_host, cfg.max_message_size_bytes, cfg.max_batch_messages,
            cfg.max_properties_size_bytes,
        )  # fmt: skip
        if stored is None:
            return None
        offsets, first, now, end, messages, size = stored
        self.stats.record_put(messages, size, (time.perf_counter_ns() - t0) // 1000)
        return EncodedItems(offsets, first, queue_id, now, cl.store_host), end

    def _pack_fields(self, batch: PutBatch) -> PutMessageResult | None:
        """Pack a FIELDS batch into RocketMQ's encoding and check it (it becomes ENCODED); a refusal when the check fails."""
        if batch.packed is not None:
            data = batch.packed.data
        else:
            try:
                data, batch.uniq_keys = packed_fields(batch.fields)
            except OverflowError:  # a message's properties past the 2-byte length of a batch item (pack_one)
                detail = "a message's properties are longer than 65,535 bytes; nothing was stored"
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.PROPERTIES_TOO_LARGE, detail)
        cfg, data = self.config, bytes(data)
        try:  # check_batch, its kernel called directly (every packed produce)
            count, stored, crcs, has_dedup_id = _kernels.check_batch(
                data, cfg.max_message_size_bytes, cfg.max_batch_messages, cfg.max_properties_size_bytes, True, True
            )
        except native.BatchError as e:
            reason = native.BatchErrorCode(e.args[1])
            detail = f"message {e.index}: refused by the batch check ({reason.name}); nothing was stored"
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, _BATCH_REFUSALS.get(reason, PutRefusal.NONE), detail)
        batch.form, batch.encoded = BatchForm.ENCODED, CheckedBatch(data, count, stored, crcs, has_dedup_id)
        return None

    def _after_put(self, result: PutMessageResult, t0: int, batch: PutBatch) -> PutAnswer:
        """Stats, the dispatch (or the dispatch owed) and the durability wait (or the result marked `durability_owed`)
        of a put the commit log answered."""
        state_records = batch.state_records
        items = result.items
        if type(items) is EncodedItems and items.offsets and not state_records:  # a batch as it came: one call for all three
            messages, size, end = items.span()
        else:
            stored = len(items)
            if not stored:
                self.stats.put_failures += 1
                if self.space_exhausted():
                    detail = "the disk has no space for a new file; nothing was stored"
                    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DISK_FULL, detail), None
                return result, None
            messages = stored - min(state_records, stored)
            size = total_bytes(items[:messages] if state_records else items) if messages else 0
            end = result.end_offset
        if messages:
            self.stats.record_put(messages, size, (time.perf_counter_ns() - t0) // 1000)
        return self._answer(result, end, batch)

    def _answer(self, result: PutMessageResult, end: int, batch: PutBatch) -> PutAnswer:
        """`result` with its durability waiter (or marked `durability_owed`), its dispatch through `end` run or owed."""
        ok = result.status is PutMessageStatus.PUT_OK
        if batch.defer_durability:
            waiter = None
            result.durability_owed = ok and not self.durability.answers_at_once()
        else:
            waiter = self.durability.waiter(result)
        # After the flush request is queued, so the flush overlaps dispatch; never under the put lock.
        if not ((batch.defer_dispatch or batch.lazy_dispatch) and self.reput_service.owe(end, batch.lazy_dispatch)):
            self.reput_service.dispatch_through(end)
        return result, waiter


def _is_plain(batch: PutBatch) -> bool:
    """An ENCODED batch with no dedup id (check_batch looked at every item's properties), producer group or due time,
    and not packed from parsed fields (whose dedup ids the dedup hook reads from the fields)."""
    encoded = batch.encoded
    return (
        batch.form is BatchForm.ENCODED and encoded is not None and not encoded.has_dedup_id and batch.producer_group is None
        and batch.deliver_at_ms is None and not batch.fields
    )  # fmt: skip
