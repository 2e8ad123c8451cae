"""Offline walk over a commitlog directory, without a broker and without Spark.

A commitlog directory holds files named by the 20-digit commitlog offset of their
first byte. Each file is walked from its start with `store.check_message`,
the same check recovery uses, and stops where recovery would stop reading it:

- at a blank end marker (BLANK_MAGIC_CODE): the rest of the file is padding;
- at zero bytes or the end of the file: nothing more was written there;
- at the first record that fails its checks (bad magic, bad size, CRC mismatch):
  a torn tail. Recovery truncates the log there; nothing after it is trusted.

Invariants: a yielded record passed `check_message` (with the CRC check unless the
caller turned it off), lies wholly inside its file, and the walk never reads past
the first failing record of a file. Files are walked independently, so one damaged
file does not hide the records of the next (a forensic reader wants both; the
per-file `FileScan` says where and why each walk stopped).
"""

from __future__ import annotations

import enum
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.errors import PipelineError
from store import INTERNAL_TOPICS
from store.layouts import DecodeOutcome, body_length_at, check_message, header_bytes

# The broker's own state records (store.state.state_log): not messages, and never rows.
_INTERNAL_TOPIC_BYTES = frozenset(t.encode("utf-8") for t in INTERNAL_TOPICS)

COMMITLOG_DIR_NAME = "commitlog"
FILE_NAME_DIGITS = 20  # commitlog files are named by a zero-padded 20-digit start offset


class CommitLogReadError(PipelineError):
    """Raised when a path cannot be read as a store or commitlog directory."""


class NotACommitLog(CommitLogReadError):
    """Raised when a path is neither a store root with a commitlog/ directory nor a commitlog directory."""


class StopReason(enum.Enum):
    """Why the walk of one file ended."""

    BLANK = "BLANK"  # the end marker: the writer moved on to the next file
    END = "END"  # zero bytes or the physical end of the file: nothing more was written
    TORN = "TORN"  # a record failed its checks: a torn or corrupt tail


@dataclass(frozen=True, slots=True)
class CommitLogFile:
    path: str
    start_offset: int  # commitlog offset of the file's first byte (its name)
    size_bytes: int


@dataclass(slots=True)
class FileScan:
    """What the walk of one file found; complete once its iterator is exhausted."""

    file: CommitLogFile
    messages: int = 0
    message_bytes: int = 0
    stop: StopReason = StopReason.END
    stop_position: int = 0  # file-relative position where the walk ended
    detail: str = ""

    @property
    def end_offset(self) -> int:
        """Commitlog offset just past the last good record of the file."""
        return self.file.start_offset + self.stop_position


def commitlog_dir_of(path: str) -> str:
    """The commitlog directory for `path`: a store root holding commitlog/, or the commitlog directory itself."""
    if not os.path.isdir(path):
        raise NotACommitLog(f"{path!r} is not a directory")
    nested = os.path.join(path, COMMITLOG_DIR_NAME)
    if os.path.isdir(nested):
        return nested
    if any(_is_commitlog_name(name) for name in os.listdir(path)):
        return path
    raise NotACommitLog(f"{path!r} holds neither a {COMMITLOG_DIR_NAME}/ directory nor commitlog files")


def list_commitlog_files(path: str) -> list[CommitLogFile]:
    """The commitlog files under `path` in offset order; names that are not 20 digits are ignored."""
    directory = commitlog_dir_of(path)
    files = []
    for name in os.listdir(directory):
        full = os.path.join(directory, name)
        if _is_commitlog_name(name) and os.path.isfile(full):
            files.append(CommitLogFile(full, int(name), os.path.getsize(full)))
    files.sort(key=lambda f: f.start_offset)
    return files


def _is_commitlog_name(name: str) -> bool:
    return len(name) == FILE_NAME_DIGITS and name.isdigit()


def topic_at(buf: Any, pos: int) -> bytes:
    """The topic bytes of the checked message at `pos` (a filter test without decoding the rest)."""
    topic_pos = pos + header_bytes(buf, pos) + body_length_at(buf, pos)
    return bytes(buf[topic_pos + 1 : topic_pos + 1 + buf[topic_pos]])


class FileWalk:
    """Iterates the good records of one commitlog file as (buffer, position, size); the broker's own
    state records (INTERNAL_TOPICS) are counted in `scan` and skipped.

    The buffer is a read-only map of the file, open only while the iteration runs: decode
    each record before asking for the next. `scan` is complete once the iteration ends.
    """

    def __init__(self, file: CommitLogFile, check_crc: bool = True) -> None:
        self.file = file
        self.check_crc = check_crc
        self.scan = FileScan(file)

    def __iter__(self) -> Iterator[tuple[mmap.mmap, int, int]]:
        with open(self.file.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                self.scan.detail = "empty file"
                return
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                yield from self._walk(buf, size)

    def _walk(self, buf: mmap.mmap, limit: int) -> Iterator[tuple[mmap.mmap, int, int]]:
        scan = self.scan
        check_crc = self.check_crc
        pos = 0
        while True:
            result = check_message(buf, pos, limit, check_crc=check_crc, decode=False)
            outcome = result.outcome
            if outcome is DecodeOutcome.MESSAGE:
                if topic_at(buf, pos) not in _INTERNAL_TOPIC_BYTES:
                    yield buf, pos, result.size
                scan.messages += 1
                scan.message_bytes += result.size
                pos += result.size
                continue
            scan.stop_position = pos
            scan.detail = result.reason
            if outcome is DecodeOutcome.BLANK:
                scan.stop = StopReason.BLANK
            elif outcome is DecodeOutcome.END:
                scan.stop = StopReason.END
            else:
                scan.stop = StopReason.TORN
            return


def scan_file(file: CommitLogFile, check_crc: bool = True) -> FileScan:
    """Walk one file to its end and return what it found."""
    walk = FileWalk(file, check_crc)
    for _ in walk:
        pass
    return walk.scan
