"""PullPrefetcher: runs an iterator of pulls in a background thread, a bounded number ahead.

The HTTP source spends its time in two places: waiting for the broker to answer a pull,
and decoding the answer. The broker is another process, so fetching pull N+1 while pull N
is decoded overlaps the two. The iterator runs in a ServiceThread; its items pass through a
queue of at most `depth` entries.

Invariants: items come out in the iterator's order, each once; an exception the iterator
raises is re-raised in the consumer after the items before it; at most `depth` items are
held; when the consumer stops early (or fails) the thread is told to stop, and it ends
within one `PUT_POLL_MS` wait plus the request under way (bounded by the client's timeout).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

from core import ServiceThread

PUT_POLL_MS = 100  # how often a thread blocked on a full queue checks whether it should stop
_END = object()  # marks the end of the iterator in the queue


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class PullPrefetcher(ServiceThread):
    def __init__(self, source: Iterator[Any], depth: int, name: str) -> None:
        super().__init__(name)
        assert depth >= 1
        self._source = source
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)

    def run(self) -> None:
        try:
            for item in self._source:
                if not self._offer(item):
                    return
            self._offer(_END)
        except BaseException as e:  # handed to the consumer, which raises it
            self._offer(_Failure(e))

    def _offer(self, item: Any) -> bool:
        """Queue `item`, waiting while the queue is full; False when told to stop first."""
        while not self.is_stopped():
            try:
                self._queue.put(item, timeout=PUT_POLL_MS / 1000.0)
                return True
            except queue.Full:
                continue
        return False

    def results(self) -> Iterator[Any]:
        """The iterator's items, in order; starts the thread and always stops it."""
        self.start()
        try:
            while True:
                item = self._queue.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            self.shutdown()
