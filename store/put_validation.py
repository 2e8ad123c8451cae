"""PutValidator: every check a put must pass before a byte is written (a put hook: store/put/put_hook.py).

A refused put answers a PutMessageResult with a status and a PutRefusal saying why;
nothing is appended. Topic names are checked once and remembered (bounded), so the
regular expression stays off the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from store.codec.message import MessageInner, topic_problem
from store.config import BrokerRole
from store.put.put_batch import BatchForm, PutBatch
from store.status import PutMessageResult, PutMessageStatus, PutRefusal

if TYPE_CHECKING:
    from store.config import MessageStoreConfig
    from store.dispatch.reput_message_service import ReputMessageService
    from store.logfile.commit_log import CommitLog


class ValidatedStore(Protocol):
    """What the validator reads of the store: its settings and whether it takes puts now."""

    @property
    def config(self) -> MessageStoreConfig: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def reput_service(self) -> ReputMessageService: ...
    @property
    def disk_full(self) -> bool: ...
    @property
    def space_exhausted(self) -> bool: ...
    def is_running(self) -> bool: ...


class PutValidator:
    hook_name = "validation"
    sees_plain = True  # every batch is validated

    def __init__(self, store: ValidatedStore) -> None:
        self.store = store
        cfg = store.config
        self.max_body = cfg.max_message_size_bytes
        self.max_props = cfg.max_properties_size_bytes
        self.max_topic = cfg.max_topic_length_bytes
        self.max_queues = cfg.max_topic_queue_nums
        self.max_batch = cfg.max_batch_messages
        self.busy_timeout_ms = cfg.os_page_cache_busy_timeout_ms
        self.is_slave = cfg.broker_role is BrokerRole.SLAVE
        self.max_dispatch_lag = cfg.max_dispatch_lag_bytes

    def before_put(self, batch: PutBatch) -> PutMessageResult | None:
        """The checks of a MESSAGES batch (`check`) or of an ENCODED one appended as it came (check_batch, the kernel,
        has checked its items: the store's state, the count, the queue and the topic are left)."""
        if batch.form is BatchForm.MESSAGES:
            return self.check(batch.messages)
        assert batch.form is BatchForm.ENCODED and batch.encoded is not None, "a FIELDS batch is packed before the hooks"
        refusal = self.check_state()
        if refusal is not None:
            return refusal
        topic, queue_id, messages = batch.topic, batch.queue_id, batch.encoded.messages
        if 0 < messages <= self.max_batch and 0 <= queue_id < self.max_queues and topic_problem(topic, self.max_topic) is None:
            return None  # the common batch: the detailed checks below only say why one is refused
        return self._check_count(messages) or self._check_target(topic, queue_id)

    def admits_plain(self, topic: str, queue_id: int, messages: int) -> bool:
        """Whether `before_put` would let a plain batch of `messages` to `topic`'s `queue_id` through (the put lane asks
        before its one call; a refusal is left to `before_put`, which says why)."""
        if not (0 < messages <= self.max_batch and 0 <= queue_id < self.max_queues and topic_problem(topic, self.max_topic) is None):
            return False
        # `check_state() is None`, its conditions written out in its order (every put of the lane; tests hold the two to
        # the same verdict).
        store = self.store
        if not store.is_running() or self.is_slave or store.disk_full or store.space_exhausted:
            return False
        reput, commit_log = store.reput_service, store.commit_log
        if reput.failure or commit_log.mapped_file_queue.get_max_offset() - reput.reput_from_offset > self.max_dispatch_lag:
            return False
        begin = commit_log.begin_time_in_lock_ms
        return not begin or int(time.time() * 1000) - begin <= self.busy_timeout_ms

    def check(self, msgs: Sequence[MessageInner]) -> PutMessageResult | None:
        refusal = self.check_state()
        if refusal is not None:
            return refusal
        if not 0 < len(msgs) <= self.max_batch:
            return self._check_count(len(msgs))
        max_topic, max_queues, max_body, max_props = self.max_topic, self.max_queues, self.max_body, self.max_props
        for msg in msgs:
            # One expression for the common case; the detailed checks run only when it fails.
            if not (
                topic_problem(msg.topic, max_topic) is None
                and 0 <= msg.queue_id < max_queues
                and len(msg.body) <= max_body
                and len(msg.properties_bytes) <= max_props
                and msg.tail
            ):
                refusal = self._check_one(msg)
                if refusal is not None:
                    return refusal
        return None

    def check_state(self) -> PutMessageResult | None:
        """Whether the store takes puts now (running, master, disk, dispatch, lock)."""
        store = self.store
        if not store.is_running():
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.SHUTTING_DOWN, "the store is not running")
        if self.is_slave:
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.NOT_MASTER, "this store is a slave")
        if store.disk_full:
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DISK_FULL, "disk usage is past the warning ratio")
        if store.space_exhausted:
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DISK_FULL, "the disk has no space for a new file")
        reput = store.reput_service
        if reput.failure or store.commit_log.mapped_file_queue.get_max_offset() - reput.reput_from_offset > self.max_dispatch_lag:
            # Acknowledged messages must become readable: none is taken while dispatch cannot keep up.
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, PutRefusal.DISPATCH_BEHIND, self._dispatch_detail())
        begin = store.commit_log.begin_time_in_lock_ms
        if begin and int(time.time() * 1000) - begin > self.busy_timeout_ms:
            return _refused(PutMessageStatus.OS_PAGECACHE_BUSY, PutRefusal.NONE, "a put has held the lock too long")
        return None

    def _check_count(self, messages: int) -> PutMessageResult | None:
        if not messages:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.BATCH_EMPTY, "a batch needs at least one message")
        if messages > self.max_batch:
            return _refused(
                PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.BATCH_TOO_LARGE, f"a batch holds at most {self.max_batch} messages"
            )
        return None

    def _dispatch_detail(self) -> str:
        reput = self.store.reput_service
        if reput.failure:
            return f"dispatch to the consume queues is failing ({reput.failure}); nothing was stored, retry later"
        return f"dispatch is more than {self.max_dispatch_lag} bytes behind the commitlog; nothing was stored, retry shortly"

    def _check_target(self, topic: str, queue_id: int) -> PutMessageResult | None:
        problem = topic_problem(topic, self.max_topic)
        if problem:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.TOPIC_INVALID, problem)
        if not 0 <= queue_id < self.max_queues:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.QUEUE_NOT_FOUND, f"queue id must be in 0..{self.max_queues - 1}")
        return None

    def _check_one(self, msg: MessageInner) -> PutMessageResult | None:
        refusal = self._check_target(msg.topic, msg.queue_id)
        if refusal is not None:
            return refusal
        if not isinstance(msg.body, (bytes, bytearray, memoryview)):
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.NONE, "the body must be bytes")
        if len(msg.body) > self.max_body:
            return _refused(
                PutMessageStatus.MESSAGE_ILLEGAL, PutRefusal.MESSAGE_TOO_LARGE, f"the body is larger than {self.max_body} bytes"
            )
        if len(msg.properties_bytes) > self.max_props:
            return _refused(
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                PutRefusal.PROPERTIES_TOO_LARGE,
                f"properties are larger than {self.max_props} bytes",
            )
        return None


def _refused(status: PutMessageStatus, refusal: PutRefusal, detail: str) -> PutMessageResult:
    return PutMessageResult(status, refusal, detail)
