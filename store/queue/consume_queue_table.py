"""ConsumeQueueTable: the store's consume queues by topic and queue id (RocketMQ's consumeQueueTable).

Readers (dispatch, pulls, the HTTP front end) look queues up without a lock: the table is
copy-on-write, each change publishes a new dict, so a reader sees one table or the next, never
one half-changed. Creation and a topic's removal take `_lock`, which also orders a creation
against the deletion cutoff a removal records (a deleted topic's message is never given a queue
again). A queue's files are made on its first write, not under the lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from store.codec.message import topic_problem
from store.queue.consume_queue import ConsumeQueue

log = logging.getLogger("tidemq.store")
# Queue directories of a deleted topic are renamed to this prefix (no topic name starts with a dot) before removal.
DELETED_DIR_PREFIX = ".deleted."

QueueFactory = Callable[[str, int], ConsumeQueue]


class ConsumeQueueTable:
    def __init__(self, make_queue: QueueFactory, max_queue_nums: int, cutoff: Callable[[str], int]) -> None:
        """`make_queue(topic, queue_id)`: a new queue's object; `cutoff(topic)`: the commitlog offset
        below which the topic's messages were deleted (0: none)."""
        self.queues: dict[str, dict[int, ConsumeQueue]] = {}
        self._make_queue = make_queue
        self._max_queue_nums = max_queue_nums
        self._cutoff = cutoff
        self._lock = threading.Lock()  # creation and removal of queues; see the module's docstring

    def find(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        """The queue, or None (made when absent with `create`, unless the topic or queue id is invalid)."""
        queues = self.queues.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None or not create:
                return cq
        elif not create:
            return None
        if not self.valid(topic, queue_id):
            return None  # never a path outside the store directory
        with self._lock:
            return self._find_or_create_locked(topic, queue_id)

    def for_dispatch(self, topic: str, queue_id: int, offset: int) -> ConsumeQueue | None:
        """The queue of a message at commitlog `offset`, made when absent; None for an invalid topic or
        queue id, or for a deleted topic's message (checked under the lock a removal holds)."""
        queues = self.queues.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is not None:
            return cq
        if not self.valid(topic, queue_id):
            return None
        with self._lock:
            if offset < self._cutoff(topic):
                return None
            return self._find_or_create_locked(topic, queue_id)

    def valid(self, topic: str, queue_id: int) -> bool:
        return not topic_problem(topic) and 0 <= queue_id < self._max_queue_nums

    def _find_or_create_locked(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = dict(self.queues.get(topic, {}))
        cq = queues.get(queue_id)
        if cq is None:
            cq = self._make_queue(topic, queue_id)
            queues[queue_id] = cq
            self.queues = {**self.queues, topic: queues}
        return cq

    def add_loaded(self, cq: ConsumeQueue) -> None:
        """A queue loaded from its files at start (before any reader runs)."""
        self.queues.setdefault(cq.topic, {})[cq.queue_id] = cq

    def load(self, root: str) -> bool:
        """Load every queue under `root` (a topic directory of queue-id directories) at start; False when a queue's
        files could not be loaded. A topic directory a crash left mid-deletion is removed; a name that is not a
        topic's is logged and left alone."""
        if not os.path.isdir(root):
            return True
        for topic in sorted(os.listdir(root)):
            topic_dir = os.path.join(root, topic)
            if topic.startswith(DELETED_DIR_PREFIX):
                shutil.rmtree(topic_dir, ignore_errors=True)  # a deletion a crash interrupted
                continue
            if topic_problem(topic) or not os.path.isdir(topic_dir):
                log.warning("ignoring %s: not a valid topic directory", topic_dir)
                continue
            for qid in sorted(os.listdir(topic_dir)):
                if not qid.isdigit():
                    continue
                cq = self._make_queue(topic, int(qid))
                if not cq.load():
                    return False
                self.add_loaded(cq)
        return True

    def all(self) -> list[ConsumeQueue]:
        return [cq for queues in self.queues.values() for cq in queues.values()]

    def queue_ids_of(self, topic: str) -> list[int]:
        return sorted(self.queues.get(topic, {}))

    def has_topic(self, topic: str) -> bool:
        return topic in self.queues

    @contextmanager
    def removing(self) -> Iterator[None]:
        """Hold the table's lock while a topic's removal records its cutoff and drops it (`drop_topic_locked`)."""
        with self._lock:
            yield

    def drop_topic_locked(self, topic: str) -> list[ConsumeQueue]:
        """Drop a topic's queues from the table (the caller is inside `removing`); its queues, for removal."""
        queues = self.queues.get(topic, {})
        table = dict(self.queues)
        table.pop(topic, None)
        self.queues = table
        return list(queues.values())
