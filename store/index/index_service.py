"""IndexService: the IndexFiles under index/, written by dispatch, queried by key and time.

Keys are `topic#key` for every KEYS entry and for the UNIQ_KEY. A full file rolls to
a new one named by the current time (yyyyMMddHHmmssSSS). A message below the last
file's end offset is already indexed (re-dispatch after recovery) and is skipped.
After a crash, files whose entries are past the checkpoint are dropped and recovery
re-dispatches from the end offset of the last file kept (`end_phy_offset`).
Queries walk files newest first; the store confirms each hit against the stored
message, so a hash collision never returns a wrong message.

Files ahead of need: once the last file holds ORDER_NEXT_FILE_AT_PERCENT of its entries, the next
one is ordered from the allocate service (store/logfile/file_ahead.py, checked once per dispatched chunk,
not per message); a roll takes it when it is ready, and its header is then set to begin where the
last file ends, as a file created at the roll would. Otherwise the roll creates the file itself.
A made file never taken is removed at shutdown; after a kill it lies on disk with no entry, and
`load` removes trailing files without entries (their headers may begin before the last file ends).

Prefault: a key's hash picks any of a file's slots, so until most of a fresh file's slot pages were
touched (tens of thousands of keys) nearly every key faulted a new page in on the dispatching thread
(the event loop for an HTTP put). So every file made (ahead or at a roll) and the last file at the
store's start have their header and slots (reserved whole with the header) faulted in by the
allocate service's thread, in steps with the GIL released, when prefault_mapped_file_enable is on
(AllocateMappedFileService.prefault_reserved). A slot page cleaned since its last write (a flush,
the kernel's writeback) still faults once at its next write, as any page of a mapped file does.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from store import native
from store.codec.message_codec import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, DispatchRequest
from store.config import MessageStoreConfig
from store.disk.space_reservation import DEFAULT_RESERVATION, SpaceReservation
from store.errors import DispatchFailed
from store.index.index_file import IndexFile, index_file_size
from store.logfile.file_ahead import FileAhead

if TYPE_CHECKING:
    from store.logfile.allocate_mapped_file_service import AllocateMappedFileService

log = logging.getLogger("tidemq.store")

# How full the last file is (in entries) when the next one is ordered (see the module docstring).
ORDER_NEXT_FILE_AT_PERCENT = 50


def index_file_name(now_ms: int) -> str:
    t = time.localtime(now_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{now_ms % 1000:03d}"


class IndexService:
    def __init__(
        self, config: MessageStoreConfig, allocate_service: AllocateMappedFileService | None = None,
        reservation: SpaceReservation = DEFAULT_RESERVATION,
    ) -> None:  # fmt: skip
        self.config = config
        self.reservation = reservation
        self.store_path = config.index_dir()
        self.slot_num = config.max_hash_slot_num
        self.index_num = config.max_index_num
        self.index_files: list[IndexFile] = []
        self._lock = threading.Lock()  # guards the lists; entries are written only by dispatch
        self._rolled: list[IndexFile] = []  # full files not flushed whole yet (flush() takes them)
        self.last_store_timestamp = 0
        self.dropped_files = 0  # files load() destroyed after a crash: their entries must be rebuilt
        # After files were dropped: the offset of the last kept file's last message, whose keys a
        # roll may have split over a dropped file (re-dispatch writes only the rest); None otherwise.
        self._split_resume_at: int | None = None
        # True while IndexRebuildService (store/dispatch/index_rebuild_service.py) writes the index: dispatch
        # then adds no keys, so the index is written in commitlog order by one writer.
        self.rebuilding = False
        self.ahead: FileAhead[IndexFile] = FileAhead(allocate_service, _remove_file)
        self._allocate_service = allocate_service  # prefaults the files' slots (module docstring)
        self._order_at = max(2, self.index_num * ORDER_NEXT_FILE_AT_PERCENT // 100)  # index_count of the last file
        self._ordered_after: IndexFile | None = None  # the last file whose next one was ordered (or refused)

    def load(self, last_exit_ok: bool, checkpoint_index_ts: int) -> bool:
        if not os.path.isdir(self.store_path):
            return True
        expected = index_file_size(self.slot_num, self.index_num)
        for name in sorted(os.listdir(self.store_path)):
            path = os.path.join(self.store_path, name)
            size = os.path.getsize(path)
            if name.isdigit() and size < expected:
                # A file whose creation a crash cut short (made ahead of need, before it had its size): no entry in it.
                log.warning("removing index file %s: %d bytes of %d, its creation was cut short", path, size, expected)
                os.unlink(path)
                continue
            if not name.isdigit() or size != expected:
                log.warning("ignoring index file %s (unexpected name or size)", path)
                continue
            f = IndexFile(path, self.slot_num, self.index_num, reservation=self.reservation)
            if not last_exit_ok and f.end_timestamp > checkpoint_index_ts:
                # Entries past the checkpoint may be torn; recovery re-dispatches from end_phy_offset().
                f.destroy(0)
                self.dropped_files += 1
                continue
            self.index_files.append(f)
        while len(self.index_files) > 1 and self.index_files[-1].index_count <= 1:
            empty = self.index_files.pop()  # made ahead, or rolled to, and never written
            log.info("removing index file %s: it holds no entry", empty.path)
            empty.destroy(0)
        if self.dropped_files and self.index_files:
            self._split_resume_at = self.index_files[-1].end_phy_offset
        return True

    def end_phy_offset(self) -> int | None:
        """Commitlog offset of the last message indexed, None when no index file holds an entry."""
        for f in reversed(self.index_files):
            if f.index_count > 1:
                return f.end_phy_offset
        return None

    def truncate_to(self, offset: int) -> None:
        """The commitlog was cut at `offset`: lower every end offset at or past it, so the
        messages written there next are indexed. Entries past the cut stay in the files;
        queries confirm each hit against the stored message, so they never answer wrongly."""
        for f in self.index_files:
            if f.end_phy_offset >= offset:
                # No message starts at offset - 1 (a message is longer than a byte), and every
                # message below the cut is indexed: build_index skips offsets below this one only.
                f.end_phy_offset = offset - 1
                f.begin_phy_offset = min(f.begin_phy_offset, f.end_phy_offset)
                f.write_header()

    def put_hashed_keys_locked(self, keys: bytearray, n_keys: int, n_records: int, last_offset: int, last_timestamp: int) -> None:
        """Index the keys one dispatch_scan found in `n_records` messages (the last at `last_offset`,
        stored at `last_timestamp`), as build_index would message by message; the caller holds the
        dispatch lock. A message at or below the index's end offset is skipped (indexed before), so
        applying the same scan again after a failure adds nothing twice. DispatchFailed when no
        index file can be created. Nothing while the index is being rebuilt (the rebuild indexes
        these messages when it reaches them)."""
        if not self.rebuilding:
            self.add_hashed_keys_locked(keys, n_keys, n_records, last_offset, last_timestamp)

    def add_hashed_keys_locked(self, keys: bytearray, n_keys: int, n_records: int, last_offset: int, last_timestamp: int) -> None:
        """put_hashed_keys_locked's work, also while rebuilding; the caller is the index's one writer."""
        if n_records == 0:
            return
        files = self.index_files
        f = files[-1] if files and files[-1].index_count < self.index_num else self._writable_file()
        pos, current, last_put = 0, -1, -1
        resume = self._split_message_resume(f, keys, n_keys) if self._split_resume_at is not None else None
        if resume is not None:
            pos, current = resume  # the keys before it are of messages indexed before (below the end offset)
        while pos < n_keys:
            stop, pos, current, put = f.put_hashed_locked(keys, pos, n_keys, current)
            last_put = max(last_put, put)
            if stop != native.Stop.FILE_FULL:
                break
            log.info("index file %s is full; rolling", f.file_name)
            f = self._writable_file()
        if last_put < n_records - 1 and f.index_count >= f.index_num:  # f.is_write_full()
            f = self._writable_file()  # build_index rolls at the next message, with keys or without
        if last_offset >= f.end_phy_offset:
            self.last_store_timestamp = last_timestamp
        if f.index_count >= self._order_at and self._ordered_after is not f:
            self._order_next_file(f)

    def order_ahead_again(self) -> None:
        """Order the next file again (the store's start: an order made during recovery was refused), and prefault
        the last file's slots (the allocate service runs now)."""
        self._ordered_after = None
        if self.index_files and self.index_files[-1].reserve_slots_quietly():  # a loaded file is reserved at its first write
            self._prefault_slots(self.index_files[-1])

    def _prefault_slots(self, f: IndexFile) -> None:
        """Have the allocate service fault in `f`'s header, slots and the entries reserved so far (no byte changes)."""
        if self._allocate_service is not None:
            self._allocate_service.prefault_reserved(f.mapped_file, 0)

    def _order_next_file(self, last: IndexFile) -> None:
        """Order the file after `last` (one order per file, taken or refused); the caller is the writer."""
        self._ordered_after = last
        self.ahead.order(last.file_name, functools.partial(self._create_ahead, last.file_name))

    def _create_ahead(self, after: str) -> IndexFile:
        """A new empty file named after `after` (the allocate service's thread); its header is set when a roll takes it."""
        name = self._next_name(after)
        f = IndexFile(os.path.join(self.store_path, name), self.slot_num, self.index_num, reservation=self.reservation)
        self._prefault_slots(f)
        return f

    @staticmethod
    def _next_name(after: str | None) -> str:
        """The current time's name, or one past `after` when that is not later (two files in one millisecond)."""
        name = index_file_name(int(time.time() * 1000))
        if after is not None and name <= after:
            name = str(int(after) + 1)
        return name

    def _split_message_resume(self, f: IndexFile, keys: bytearray, n_keys: int) -> tuple[int, int] | None:
        """(key position, record) to resume at when a crash dropped the file holding the rest of a
        message's keys.

        A file can fill between the keys of one message. When the file after it was dropped at
        load, re-dispatch reaches that message (the last kept file's end offset) with a new file:
        the keys the kept files hold are skipped and only the rest are written, as they were the
        first time (re-indexing the whole message would repeat those keys and shift every later
        roll). Only the first re-dispatch after such a load looks for it.
        """
        split_at = self._split_resume_at
        if split_at is None or f.index_count != 1 or f.end_phy_offset != split_at:
            return None
        positions = [i for i in range(n_keys) if native.KEY.unpack_from(keys, i * native.KEY.size)[2] == split_at]
        if not positions:
            return None
        self._split_resume_at = None
        written = 0
        for kept in reversed(self.index_files[:-1]):  # the message's keys may span several full files
            here = kept.trailing_entries_at(split_at)
            written += here
            if here < kept.index_count - 1 or kept.begin_phy_offset != split_at:
                break
        record = native.KEY.unpack_from(keys, positions[0] * native.KEY.size)[1]
        return positions[0] + min(written, len(positions)), record

    def _writable_file(self) -> IndexFile:
        f = self._retry_get_writable_file()
        if f is None:
            raise DispatchFailed("no writable index file")
        return f

    def build_index(self, request: DispatchRequest) -> None:
        """Index one decoded message (the Python reference of put_hashed_keys_locked)."""
        if self.rebuilding:
            return
        f = self._retry_get_writable_file()
        if f is None:
            raise DispatchFailed(f"no writable index file for the message at {request.commitlog_offset}")
        offset = request.commitlog_offset
        if offset < f.end_phy_offset or (f.index_count > 1 and offset == f.end_phy_offset):
            return  # already indexed (re-dispatch after recovery)
        if request.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
            return  # IndexService.buildIndex indexes no rolled-back message (prepared ones it does)
        topic = request.topic
        keys = request.keys
        if request.uniq_key and self.config.message_index_uniq_key_enable:
            f = self._put_key(f, f"{topic}#{request.uniq_key}", request)
        if keys:
            for key in keys.split(" "):
                if key and f is not None:
                    f = self._put_key(f, f"{topic}#{key}", request)
        if f is not None:
            f.write_header()  # once per message, after all its entries
        self.last_store_timestamp = request.store_timestamp

    def _put_key(self, f: IndexFile | None, key: str, request: DispatchRequest) -> IndexFile | None:
        for _ in range(3):
            if f is None:
                return None
            if f.put_key(key, request.commitlog_offset, request.store_timestamp, write_header=False):
                return f
            log.info("index file %s is full; rolling", f.file_name)
            f.write_header()
            f = self._retry_get_writable_file()
        return f

    def _retry_get_writable_file(self) -> IndexFile | None:
        files = self.index_files
        if files and not files[-1].is_write_full():
            return files[-1]
        last = files[-1] if files else None
        f = self.ahead.take(last.file_name) if last is not None else None
        if f is not None and last is not None:
            f.begin_timestamp = f.end_timestamp = last.end_timestamp
            f.begin_phy_offset = f.end_phy_offset = last.end_phy_offset
            f.write_header()  # as the constructor writes it for a file made at the roll
        else:
            f = self._create_now(last)
        with self._lock:
            self.index_files = [*self.index_files, f]
        if last is not None:
            with self._lock:
                self._rolled.append(last)  # flushed whole by the next flush(), on FlushConsumeQueueService's thread
        return f

    def _create_now(self, last: IndexFile | None) -> IndexFile:
        name = self._next_name(last.file_name if last is not None else None)
        try:
            os.makedirs(self.store_path, exist_ok=True)
            f = IndexFile(
                os.path.join(self.store_path, name),
                self.slot_num,
                self.index_num,
                last.end_phy_offset if last else 0,
                last.end_timestamp if last else 0,
                self.reservation,
            )
        except OSError as exc:
            raise DispatchFailed(f"cannot create an index file: {exc}") from exc  # dispatch retries the message
        self._prefault_slots(f)
        return f

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Candidate commitlog offsets for `topic#key` in [begin, end], newest first.

        As RocketMQ's IndexService.queryOffset, files are read newest first and the walk stops
        after the first file that began before `begin`: every older file ended before it did.
        """
        out: list[int] = []
        full_key = f"{topic}#{key}"
        for f in reversed(self.index_files):
            if len(out) >= max_num:
                break
            if f.index_count > 1 and f.is_time_matched(begin, end):
                out.extend(f.select_phy_offsets(full_key, max_num - len(out), begin, end))
            if f.begin_timestamp < begin:
                break
        return out

    def delete_expired_files(self, min_commit_log_offset: int, interval_forcibly_ms: int, now_ms: int | None = None) -> int:
        """Delete leading files (never the last) whose every entry points below the commitlog's minimum.

        Stops at the first file still held by readers, so the files left stay a contiguous span.
        """
        deleted: list[IndexFile] = []
        for f in self.index_files[:-1]:
            if f.end_phy_offset >= min_commit_log_offset or not f.mapped_file.destroy(interval_forcibly_ms, now_ms):
                break
            deleted.append(f)
        if deleted:
            gone = {id(f) for f in deleted}
            with self._lock:
                self.index_files = [f for f in self.index_files if id(f) not in gone]
        return len(deleted)

    def flush(self) -> None:
        """Flush the files rolled since the last call, then the one being written. Runs on
        FlushConsumeQueueService's thread, before it records the checkpoint's index time, so the
        checkpoint never covers a rolled file that is not on disk."""
        with self._lock:
            rolled, self._rolled = self._rolled, []
        for f in rolled:
            f.flush()
        files = self.index_files
        if files:
            files[-1].flush()

    def shutdown(self) -> None:
        self.ahead.discard()  # a file made and not taken is removed: a clean shutdown leaves none
        for f in self.index_files:
            f.flush()
            f.close()

    def destroy(self) -> None:
        self.ahead.discard()
        for f in self.index_files:
            f.destroy(0)
        self.index_files = []


def _remove_file(f: IndexFile) -> None:
    f.destroy(0)
