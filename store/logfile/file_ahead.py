"""FileAhead: the next file of a log that dispatch writes (a consume queue, the index), created ahead of need.

The commitlog's files come from AllocateMappedFileService's requests, which a roll waits for.
A consume queue and the index are written by dispatch, which runs on the putting thread (the
event loop for an HTTP put) under the dispatch lock, so it must not create files: while the
current file still has room the writer orders the next one (`order`), the allocate service's
thread creates it, and the roll takes it (`take`) when it is ready. When it is not (never
ordered, or still waiting for the service) the roll creates the file itself, as RocketMQ always
does (ConsumeQueue.putMessagePositionInfo -> MappedFileQueue.getLastMappedFile without an
allocation service; IndexService.getAndCreateLastIndexFile).

States: NONE -> ORDERED (a job waits on the service) -> CREATING (the service creates the file)
-> READY (the file waits for its roll) -> NONE (taken). A roll that finds the slot ORDERED
cancels the job and creates the file itself; one that finds it CREATING waits for that creation
rather than create the same file beside it (a failed creation removes its file, which could be
the one the roll writes). `discard` (the log deleted or shut down) removes a file made and never
taken and closes the slot: nothing is created for it afterwards.

A file is named by what its roll asks for (a consume queue's offset, the index's last file name),
so a roll that asks for another one (the log was cut meanwhile) removes the stale file.

Only the log's writer (the holder of the dispatch lock, or the index rebuild while it writes the
index) calls `order` and `take`; the service thread runs the job; `discard` may come from any thread.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from store.logfile.allocate_mapped_file_service import AllocateMappedFileService

log = logging.getLogger("tidemq.store")

F = TypeVar("F")


class AheadStatus(enum.Enum):
    NONE = "NONE"
    ORDERED = "ORDERED"
    CREATING = "CREATING"
    READY = "READY"
    CLOSED = "CLOSED"


class FileAhead(Generic[F]):
    def __init__(self, service: AllocateMappedFileService | None, dispose: Callable[[F], object]) -> None:
        self.service = service  # None: never ordered (every roll creates its file)
        self._dispose = dispose  # removes a file made and never taken
        self._cond = threading.Condition()  # guards the slot; never held across I/O
        self._status = AheadStatus.NONE
        self._key: Hashable = None
        self._create: Callable[[], F] | None = None
        self._file: F | None = None
        self.created = 0  # files created ahead of need
        self.taken = 0  # files a roll found ready

    @property
    def status(self) -> AheadStatus:
        return self._status

    def order(self, key: Hashable, create: Callable[[], F]) -> bool:
        """Have the service create file `key` with `create`; False when it will not (no service or
        not running, a file already ordered or made, the slot closed)."""
        if self.service is None:
            return False
        with self._cond:
            if self._status is not AheadStatus.NONE:
                return False
            self._status, self._key, self._create = AheadStatus.ORDERED, key, create
        if self.service.submit(self._run):
            return True
        with self._cond:
            if self._status is AheadStatus.ORDERED:
                self._status, self._create = AheadStatus.NONE, None
        return False

    def _run(self) -> None:
        """The job, on the service thread: create the ordered file unless the order was cancelled."""
        with self._cond:
            if self._status is not AheadStatus.ORDERED or self._create is None:
                return
            self._status, create = AheadStatus.CREATING, self._create
        made: F | None = None
        try:
            made = create()
        except OSError as exc:
            log.warning("could not create a file ahead of need (%s); it is created when needed", exc)
        finally:
            with self._cond:
                self._file, self._create = made, None
                self._status = AheadStatus.READY if made is not None else AheadStatus.NONE
                self._cond.notify_all()
        if made is not None:
            self.created += 1

    def take(self, key: Hashable) -> F | None:
        """File `key` when it was made ahead; None when the caller must create it. Waits only while
        the service is creating the slot's file at this moment."""
        with self._cond:
            self._cond.wait_for(lambda: self._status is not AheadStatus.CREATING)
            if self._status is AheadStatus.ORDERED:
                self._status, self._create = AheadStatus.NONE, None  # the job finds it cancelled
                return None
            if self._status is not AheadStatus.READY:
                return None
            made, made_key = self._file, self._key
            self._status, self._file = AheadStatus.NONE, None
        assert made is not None
        if made_key != key:
            self._dispose(made)  # made for a roll that never came (the log was cut since)
            return None
        self.taken += 1
        return made

    def discard(self) -> None:
        """Remove a file made and never taken, and close the slot (the log is deleted or shut down)."""
        with self._cond:
            self._cond.wait_for(lambda: self._status is not AheadStatus.CREATING)
            made = self._file if self._status is AheadStatus.READY else None
            self._status, self._file, self._create = AheadStatus.CLOSED, None, None
        if made is not None:
            self._dispose(made)
