"""ConsumerOffsetLog: the append-only log of offset commits beside config/consumerOffset.json.

A commit is answered only after its record is in the log: written with os.write (so it
survives a kill of the process: the bytes are in the page cache) and, when `sync` is
set (SYNC_FLUSH stores), fdatasync'd (so it survives a machine crash). Concurrent
committers share one fdatasync: whoever syncs covers every record written before it.

Record layout (big-endian): magic 4 | payload length 4 | CRC32 of the payload 4 | payload,
the payload being UTF-8 JSON: {"c": [[key, queue_id, offset], ...]} for commits or
{"rt": topic} for the removal of a topic's offsets. Replay stops at the first record
whose magic, length or CRC is wrong (a torn tail) and cuts the file there.

Compaction (`rotate`) renames the log to `<log>.old` and starts an empty one; the
caller then writes the JSON snapshot and calls `drop_old()`. Replaying `.old` over a
snapshot that already holds it is harmless: every record sets or removes values, so
replaying a prefix twice ends in the same table.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from store.errors import StoreNotRunning

log = logging.getLogger("tidemq.store")

RECORD_MAGIC = 0x0FF5E7C0
_HEADER = struct.Struct(">III")
# A payload longer than this is taken as a torn length field, not a record.
MAX_RECORD_PAYLOAD_BYTES = 64 * 1024 * 1024


def encode_record(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(RECORD_MAGIC, len(body), zlib.crc32(body)) + body


def decode_records(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The whole records at the head of `data` and the byte length they cover."""
    out: list[dict[str, Any]] = []
    pos = 0
    while pos + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if magic != RECORD_MAGIC or length > MAX_RECORD_PAYLOAD_BYTES or end > len(data):
            break
        body = data[pos + _HEADER.size : end]
        if zlib.crc32(body) != crc:
            break
        try:
            record = json.loads(body)
        except ValueError:
            break
        if not isinstance(record, dict):
            break
        out.append(record)
        pos = end
    return out, pos


class ConsumerOffsetLog:
    def __init__(self, path: str, sync: bool) -> None:
        self.path = path
        self.old_path = path + ".old"
        self.sync = sync
        self._fd: int | None = None
        self._write_lock = threading.Lock()  # one appender at a time, so records never interleave
        self._sync_lock = threading.Lock()  # one fdatasync at a time; taken before _write_lock
        self._written = 0  # records written to the current file
        self._synced = 0  # records known durable

    def replay(self) -> Iterator[dict[str, Any]]:
        """Yield the records of `.old` then of the log, cutting a torn tail off the log."""
        for path in (self.old_path, self.path):
            if not os.path.exists(path):
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            records, good = decode_records(data)
            if good < len(data):
                log.warning("%s: dropped a torn tail of %d bytes at %d (records after the last whole one)", path, len(data) - good, good)
                if path == self.path:
                    os.truncate(path, good)
            yield from records

    def open(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        created = not os.path.exists(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if created and self.sync:
            _fsync_dir(self.path)

    def append(self, payload: dict[str, Any], applied: Callable[[], None]) -> None:
        """Write one record, then call `applied` (both under the write lock, so the caller's
        table changes in log order); durable against a machine crash on return when `sync` is set."""
        data = encode_record(payload)
        with self._write_lock:
            if self._fd is None:
                raise StoreNotRunning("the consumer offset log is closed (the store is not running)")
            _write_all(self._fd, data)
            applied()
            self._written += 1
            mine = self._written
        if self.sync:
            self._sync_up_to(mine)

    def _sync_up_to(self, seq: int) -> None:
        with self._sync_lock:
            if self._synced >= seq:
                return  # another committer's fdatasync covered this record
            with self._write_lock:
                target = self._written
                fd = self._fd
            assert fd is not None
            os.fdatasync(fd)
            self._synced = target

    def rotate(self, snapshot: Callable[[], None]) -> None:
        """Call `snapshot`, move the log aside as `.old` and start an empty one, with no append
        in between (the caller then writes the snapshot and calls `drop_old`)."""
        with self._sync_lock, self._write_lock:
            snapshot()
            if self._fd is not None:
                if self.sync:
                    os.fdatasync(self._fd)
                os.close(self._fd)
                self._fd = None
            if os.path.exists(self.path):
                if os.path.exists(self.old_path):
                    # A snapshot attempt failed after the last rotation: keep both logs' records.
                    _append_file(self.old_path, self.path)
                    os.unlink(self.path)
                else:
                    os.replace(self.path, self.old_path)
            self._written = self._synced = 0
            self.open()

    def drop_old(self) -> None:
        """Remove `.old` once a snapshot holding its records is durable."""
        try:
            os.unlink(self.old_path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        with self._sync_lock, self._write_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _append_file(dest: str, src: str) -> None:
    """Append src's whole records to dest, after cutting any torn tail of dest."""
    with open(dest, "rb") as fh:
        _, dest_good = decode_records(fh.read())
    os.truncate(dest, dest_good)
    with open(src, "rb") as fh:
        data = fh.read()
    _, good = decode_records(data)
    fd = os.open(dest, os.O_WRONLY | os.O_APPEND)
    try:
        _write_all(fd, data[:good])
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
