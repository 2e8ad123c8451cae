"""AllocateMappedFileService: creates the next and the next-next commitlog file ahead of need.

The writer asks for file N and pre-orders N+1; it waits only for N, for at most
`allocate_mapped_file_timeout_ms`, then gets None (CREATE_MAPPED_FILE_FAILED).
Requests are bounded (at most two pending per call, deduplicated by path).
A failed creation (a full disk: the file's space could not be reserved) is logged and
raised to the writer waiting for it as the OSError it was; a failed pre-order is logged
and forgotten, so the writer's own request for that file later tries again.

With `prefault`, every file it created ahead of need (a pre-order) has its first PREFAULT_LEAD_BYTES reserved
(quietly: no room leaves that to its writer, which reports it) and faulted in for writing afterwards, and so has
each further step a writer reserves (`prefault_reserved`), PREFAULT_CHUNK_BYTES at a time with the GIL
released (store.native.prefault), so a put's first write to a page does not fault. A pending
request is always served before the next chunk, so no writer waits for a prefault; a file handed
out meanwhile is still prefaulted ahead of its writer (no byte changes, so both may run at once).
A file a writer asked for itself (the first one, or when the writer outran the service) is not.

`order` asks for a commitlog file no writer waits for yet (the next one, at the store's start).
`submit` runs a job on this thread after the pending requests: the consume queues and the index
order their next files through it (store/logfile/file_ahead.py). At most MAX_PENDING_JOBS wait; past it
an order is refused and that file is created by its writer when needed.
"""

from __future__ import annotations

import collections
import heapq
import logging
import os
import threading
from collections.abc import Callable

from core.service_thread import ServiceThread
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.logfile.mapped_file import MappedFile
from store.logfile.transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")

MAX_PENDING_REQUESTS = 16  # more than the writer can ever have outstanding (it asks for two)
# Jobs waiting at most (one per consume queue or index whose next file is ordered and not made yet).
MAX_PENDING_JOBS = 4_096
# Bytes prefaulted per step: small enough that a request waits at most one step, large enough that
# the per-call cost does not matter.
PREFAULT_CHUNK_BYTES = 8 * 1024 * 1024
# Bytes of a file made ahead of need reserved (quietly) and prefaulted from its start: its writer's own steps
# start small and each is prefaulted only from where the writer already writes, so without this lead the writer
# faulted most pages of a new file's first megabytes itself (the commitlog's hottest faults).
PREFAULT_LEAD_BYTES = 8 * 1024 * 1024


class AllocateRequest:
    __slots__ = ("path", "file_size", "done", "mapped_file", "error", "os_error", "awaited")

    def __init__(self, path: str, file_size: int) -> None:
        self.path = path
        self.file_size = file_size
        self.awaited = False  # a writer asked for this file itself (not only ordered it ahead)
        self.done = threading.Event()
        self.mapped_file: MappedFile | None = None
        self.error: str = ""
        self.os_error: OSError | None = None


class AllocateMappedFileService(ServiceThread):
    def __init__(
        self,
        timeout_ms: int,
        warm_up: bool = False,
        transient_store_pool: TransientStorePool | None = None,
        prefault: bool = False,
        reservation: SpaceReservation = DEFAULT_RESERVATION,
    ) -> None:
        super().__init__("AllocateMappedFileService")
        self.reservation = reservation
        self.timeout_ms = timeout_ms
        self.warm_up = warm_up
        self.transient_store_pool = transient_store_pool
        self.prefault = prefault
        # Ranges of reserved bytes still to be faulted in, (file, from, to), each once: a file's later steps are
        # ranges of their own (one that ran on to the file's latest reservation faulted those steps again).
        self._to_prefault: collections.deque[tuple[MappedFile, int, int]] = collections.deque()
        self.prefaulted_bytes = 0
        self.ready_on_request = 0  # files a writer asked for that were already made (ordered ahead)
        self._requests: dict[str, AllocateRequest] = {}
        self._heap: list[tuple[str, AllocateRequest]] = []
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._working = False  # a request or job taken off its queue and not yet finished (under _lock)
        self._lock = threading.Lock()

    def put_request_and_return_mapped_file(self, path: str, next_path: str, file_size: int) -> MappedFile | None:
        """File `path` (pre-ordering `next_path`); None on a timeout; raises the OSError its creation met."""
        if not self.is_alive():
            # Not started (loading, tests): create in the caller's thread.
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return self._create(path, file_size)
        request = self._enqueue(path, file_size, awaited=True)
        if request.done.is_set() and request.mapped_file is not None:
            self.ready_on_request += 1
        self._enqueue(next_path, file_size)
        self.wakeup()
        if not request.done.wait(self.timeout_ms / 1000.0):
            log.warning("allocation of %s timed out after %d ms", path, self.timeout_ms)
            return None
        with self._lock:
            self._requests.pop(path, None)
        if request.os_error is not None:
            raise request.os_error
        if request.mapped_file is None:
            log.error("allocation of %s failed: %s", path, request.error)
        return request.mapped_file

    def order(self, path: str, file_size: int) -> None:
        """Create file `path` ahead of need (a writer asks for it later); nothing when not running."""
        if self.is_alive() and not self.is_stopped():
            self._enqueue(path, file_size)
            self.wakeup()

    def submit(self, job: Callable[[], None]) -> bool:
        """Run `job` on this thread after the pending requests; False when the service is not
        running or MAX_PENDING_JOBS wait (the job is then never run)."""
        with self._lock:
            if not self.is_alive() or self.is_stopped() or len(self._jobs) >= MAX_PENDING_JOBS:
                return False
            self._jobs.append(job)
        self.wakeup()
        return True

    def is_idle(self) -> bool:
        """True when no file creation or job waits or runs: every file ordered so far exists at its size."""
        with self._lock:
            return not self._heap and not self._jobs and not self._working

    def _enqueue(self, path: str, file_size: int, awaited: bool = False) -> AllocateRequest:
        with self._lock:
            request = self._requests.get(path)
            if request is not None and request.done.is_set() and request.mapped_file is None:
                request = None  # an earlier attempt failed: try again
            if request is None:
                if len(self._requests) >= MAX_PENDING_REQUESTS:
                    # Never grows without bound; the stale pre-orders are dropped.
                    self._drop_oldest_locked()
                request = AllocateRequest(path, file_size)
                self._requests[path] = request
                heapq.heappush(self._heap, (path, request))
            # Under the lock the service pops with, so it sees the flag before it creates the file.
            request.awaited = request.awaited or awaited
            return request

    def _drop_oldest_locked(self) -> None:
        """Caller holds `_lock`."""
        if self._heap:
            _, request = heapq.heappop(self._heap)
            self._requests.pop(request.path, None)
            request.error = "dropped"
            request.done.set()

    def run(self) -> None:
        while not self.is_stopped():
            if not self._serve_one() and not self._run_job() and not self._prefault_step():
                self.wait_for_running(100)
        self._to_prefault.clear()
        with self._lock:
            self._jobs.clear()  # their files are created by their writers when needed
        # Files pre-created but never handed out are closed; they are reused by name on load.
        with self._lock:
            pending = list(self._requests.values())
            self._requests.clear()
            self._heap.clear()
        for request in pending:
            if request.mapped_file is not None and not request.done.is_set():
                request.mapped_file.close()
            request.done.set()

    def _serve_one(self) -> bool:
        with self._lock:
            if not self._heap:
                return False
            _, request = heapq.heappop(self._heap)
            self._working = True
        try:
            self._serve(request)
        finally:
            with self._lock:
                self._working = False
        return True

    def _serve(self, request: AllocateRequest) -> None:
        if request.done.is_set():
            return
        try:
            os.makedirs(os.path.dirname(request.path), exist_ok=True)
            request.mapped_file = self._create(request.path, request.file_size)
            # Only a file ordered ahead: one a writer waits for is written at once, and prefaulting it
            # beside the writer costs the writer more than its faults. A pooled file is written in its
            # pool buffer (already touched), a warmed one was touched.
            mf = request.mapped_file
            if self.prefault and not request.awaited and not self.warm_up and mf.write_buffer is None:
                mf.reserve_quietly(min(mf.file_size, PREFAULT_LEAD_BYTES))  # no room: its writer reserves as it writes
                self._to_prefault.append((mf, 0, mf.reserved_to))
        except OSError as exc:
            request.error = str(exc)
            request.os_error = exc
            log.warning("could not create %s ahead of need (%s); retried when it is needed", request.path, exc)
        request.done.set()

    def prefault_reserved(self, mf: MappedFile, start: int) -> None:
        """Prefault the bytes of `mf` reserved from `start` on (its writer reserved another step ahead of
        itself); nothing when prefaulting is off or the service is not running. Any thread."""
        if self.prefault and not self.warm_up and mf.write_buffer is None and self.is_alive() and not self.is_stopped():
            self._to_prefault.append((mf, start, mf.reserved_to))  # deque.append is atomic; the service pops from the left
            self.wakeup()

    def _run_job(self) -> bool:
        """Run the oldest job; False when none waits."""
        with self._lock:
            if not self._jobs:
                return False
            job = self._jobs.popleft()
            self._working = True
        try:
            job()
        except Exception:
            log.exception("a file creation ahead of need failed")
        finally:
            with self._lock:
                self._working = False
        return True

    def _prefault_step(self) -> bool:
        """Fault in the next chunk of the oldest file waiting for it; False when none waits."""
        if not self._to_prefault:
            return False
        mf, pos, end = self._to_prefault.popleft()
        n = min(PREFAULT_CHUNK_BYTES, end - pos, mf.reserved_to - pos)  # never past the blocks reserved (no SIGBUS)
        if n <= 0:
            return True
        try:
            if not mf.prefault(pos, n):
                return True  # closed meanwhile (shutdown, deleted): nothing more to do for it
        except OSError as exc:
            log.warning("cannot prefault %s (%s); its pages fault in as it is written", mf.path, exc)
            return True
        self.prefaulted_bytes += n
        if pos + n < end:
            self._to_prefault.appendleft((mf, pos + n, end))
        return True

    def _create(self, path: str, file_size: int) -> MappedFile:
        mf = MappedFile(path, file_size, self.transient_store_pool, reservation=self.reservation)
        if self.warm_up:
            mf.warm_up()
        return mf

    def close_unclaimed(self) -> None:
        """Close files created ahead that no writer took (at shutdown)."""
        with self._lock:
            pending = list(self._requests.values())
            self._requests.clear()
        for request in pending:
            if request.mapped_file is not None:
                request.mapped_file.close()
