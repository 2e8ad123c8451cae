"""LazyMappedFile and MappingBudget: consume-queue files mapped on demand, a bounded number at once.

A mapping holds no file descriptor (store._kernels.Mapping), but each one is a region of the
process's address space (bounded by vm.max_map_count) whose touched pages count in its resident
set, so a broker with many queues keeps only the files in use mapped. A LazyMappedFile is created and reserved on disk like any MappedFile
but mapped only when its bytes are first touched; the store's MappingBudget unmaps the
coldest ones when more than `max_mapped_consume_queue_files` are mapped.

Invariants:
- Any thread may map a file; the thread that maps one past the budget trims the budget
  first, so at most `max_mapped_consume_queue_files` (plus the files readers hold at that
  moment) are mapped at once, whichever threads read.
- A file is unmapped only when no reader holds it (its reference count is the file's own
  one) and no view of the mapping is exported. Writes (`append_bytes`, `write_at`) run
  under the file's `_map_lock`, which `try_unmap` takes too, so a write never meets a
  closed mapping. Unmapping does not flush (an msync per eviction would stall dispatch):
  the written pages stay in the page cache, and the flusher makes an unmapped file
  durable with fdatasync on a short-lived descriptor instead of mapping it again.
- Coldness is approximated by a second-chance bit (`used`, set on each access of `mm`), so
  an access costs an attribute store, not a reordering of the budget.
"""

from __future__ import annotations

import logging
import os
import resource
import threading

from store._kernels import Mapping
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.logfile.mapped_file import MappedFile, map_file

log = logging.getLogger("tidemq.store")


def budget_for_descriptors(configured: int) -> int:
    """`configured`, lowered to half the soft descriptor limit (at least MIN_BUDGET).

    A mapping holds no descriptor, but mapping a file, reserving its next step and flushing an
    unmapped one each open one for a moment, and the mappings' memory grows with the budget: a
    process allowed few descriptors is a small one, so its budget follows its limit. With the
    limit at 256 and 2,000 queues, at most 128 queue files are mapped at once.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or configured <= soft // 2:
        return configured
    fitted = max(MIN_BUDGET, soft // 2)
    log.info("max_mapped_consume_queue_files %d lowered to %d for the descriptor limit %d", configured, fitted, soft)
    return min(configured, fitted)


MIN_BUDGET = 16  # mapped queue files allowed at least, whatever the descriptor limit


class MappingBudget:
    """The lazily mapped files of one store and their bound."""

    def __init__(self, max_mapped: int) -> None:
        assert max_mapped > 0
        self.max_mapped = max_mapped
        self._files: dict[int, LazyMappedFile] = {}  # in mapping order; the clock hand starts at the front
        self._lock = threading.Lock()  # leaf lock
        self.unmapped_total = 0

    def __len__(self) -> int:
        return len(self._files)

    def over(self) -> bool:
        return len(self._files) > self.max_mapped

    def added(self, mf: LazyMappedFile) -> None:
        with self._lock:
            self._files[id(mf)] = mf

    def removed(self, mf: LazyMappedFile) -> None:
        with self._lock:
            self._files.pop(id(mf), None)

    def release_all(self) -> int:
        """Unmap every file no reader holds now; returns how many (a shortage of descriptors or memory)."""
        with self._lock:
            candidates = list(self._files.values())
        released = sum(1 for mf in candidates if mf.try_unmap())
        self.unmapped_total += released
        return released

    def trim(self) -> int:
        """Unmap cold files until at most `max_mapped` are mapped; returns how many. Called by dispatch
        (under the dispatch lock) and by a thread about to map a file past the budget."""
        unmapped = 0
        for second_pass in (False, True):
            with self._lock:
                excess = len(self._files) - self.max_mapped
                candidates = list(self._files.values())
            if excess <= 0:
                break
            for mf in candidates:
                if excess <= 0:
                    break
                if mf.used and not second_pass:
                    mf.used = False
                    with self._lock:  # move to the back: it gets a second chance
                        if self._files.pop(id(mf), None) is not None:
                            self._files[id(mf)] = mf
                    continue
                if mf.try_unmap():
                    excess -= 1
                    unmapped += 1
        self.unmapped_total += unmapped
        return unmapped


class LazyMappedFile(MappedFile):
    """A MappedFile whose mapping exists only while it is used (see the module docstring)."""

    def __init__(self, path: str, file_size: int, budget: MappingBudget, reservation: SpaceReservation = DEFAULT_RESERVATION) -> None:
        self._budget = budget
        self._mm: Mapping | None = None
        self.used = False
        self._map_lock = threading.Lock()  # leaf lock: two readers mapping the same file map it once
        super().__init__(path, file_size, None, map_now=False, reservation=reservation)

    @property  # MappedFile.mm is an attribute; here reading it maps the file on first use
    def mm(self) -> Mapping:
        self.used = True
        mm = self._mm
        return mm if mm is not None else self._map()

    @mm.setter
    def mm(self, value: Mapping) -> None:
        self._mm = value

    def is_mapped(self) -> bool:
        return self._mm is not None

    def plainly_mapped(self) -> bool:
        return False  # the budget may unmap it any time: never lent to an outside flusher

    def _map(self) -> Mapping:
        if len(self._budget) >= self._budget.max_mapped:
            self._budget.trim()  # make room before taking another descriptor
        with self._map_lock:
            mm, created = self._map_locked()
        if created:
            self._budget.added(self)
        return mm

    def _map_locked(self) -> tuple[Mapping, bool]:
        """The mapping, made now if there is none; (mapping, whether it was made now)."""
        mm = self._mm
        if mm is not None:
            return mm, False
        if self.is_cleanup_over():
            raise ValueError(f"{self.path} is closed")
        fd = os.open(self.path, os.O_RDWR)
        try:
            mm = map_file(fd, self.file_size)
        finally:
            os.close(fd)
        self._mm = mm
        return mm, True

    def append_bytes(self, data: bytes | memoryview) -> bool:
        if self._mm is None:
            self._map()
        with self._map_lock:  # try_unmap takes it too: the mapping outlives this write
            self.used = True
            if self._mm is None:
                self._map_locked()  # unmapped since the line above; the budget learns of it below
                remapped = True
            else:
                remapped = False
            ok = super().append_bytes(data)
        if remapped:
            self._budget.added(self)
        return ok

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        if self._mm is None:
            self._map()
        with self._map_lock:
            self.used = True
            mm = self._mm
            remapped = mm is None
            if mm is None:
                mm, _ = self._map_locked()
            assert self.write_buffer is None, "a lazily mapped file has no write buffer"
            self._write_into(mm, pos, data)  # the mapping at hand: not through `write_target` and `mm`
        if remapped:
            self._budget.added(self)

    def try_unmap(self) -> bool:
        """Unmap when no reader holds the file; False otherwise (it stays mapped)."""
        if self._ref_count != 1 or not self.is_available() or self._mm is None:
            return False
        with self._ref_lock:
            if self._ref_count != 1 or not self.is_available():
                return False
            with self._map_lock:
                mm = self._mm
                if mm is None:
                    return False
                try:
                    mm.close()
                except BufferError:
                    return False  # a view outlived its reference; try another time
                self._mm = None
        self._budget.removed(self)
        return True

    def flush(self, flush_least_pages: int, unmap_first: bool = False) -> int:
        """As MappedFile.flush; an unmapped file is flushed through a descriptor, not a new mapping."""
        if self._mm is not None:
            return super().flush(flush_least_pages, unmap_first)
        readable = self.get_read_position()
        start = self.flushed_position
        if readable > start and self._is_able_to(readable, start, flush_least_pages) and self.hold():
            try:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                self.flushed_position = readable
            finally:
                self.release()
        assert self.positions_ordered(start), self.positions()
        return self.flushed_position

    def drop_resident_below(self, end: int) -> None:
        """As MappedFile.drop_resident_below; an unmapped file has nothing resident (and is not mapped for it)."""
        if self._mm is not None:
            super().drop_resident_below(end)

    def _close_mapping(self) -> None:
        with self._map_lock:
            mm = self._mm
            if mm is not None:
                mm.close()
                self._mm = None
        self._budget.removed(self)
