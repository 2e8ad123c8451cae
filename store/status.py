"""Status enums and result records of puts and gets (RocketMQ's names)."""

from __future__ import annotations

import bisect
import enum
import struct
from array import array
from collections.abc import Callable, Sequence
from typing import overload


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class PutRefusal(enum.Enum):
    """Why a put was refused before anything was written (detail of a non-OK status)."""

    NONE = "NONE"
    TOPIC_INVALID = "TOPIC_INVALID"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    TOPIC_NOT_WRITABLE = "TOPIC_NOT_WRITABLE"
    QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    PROPERTIES_TOO_LARGE = "PROPERTIES_TOO_LARGE"
    BATCH_TOO_LARGE = "BATCH_TOO_LARGE"
    BATCH_EMPTY = "BATCH_EMPTY"
    NOT_MASTER = "NOT_MASTER"
    DISK_FULL = "DISK_FULL"
    DISPATCH_BEHIND = "DISPATCH_BEHIND"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    DELAY_TOO_LONG = "DELAY_TOO_LONG"  # a timer message past timer_max_delay_ms
    TIMER_INVALID = "TIMER_INVALID"  # a TIMER_* property is not an integer
    TIMER_NOT_ENABLED = "TIMER_NOT_ENABLED"  # timer_wheel_enable is off (RocketMQ's WHEEL_TIMER_NOT_ENABLE)
    DEDUP_ID_INVALID = "DEDUP_ID_INVALID"  # a dedup id is malformed, or repeated within one batch
    DEDUP_PARTIAL = "DEDUP_PARTIAL"  # some messages of a batch were stored before under their dedup ids, others not
    DEDUP_PENDING = "DEDUP_PENDING"  # another put of the same dedup id is being appended now
    DEDUP_WINDOW_FULL = "DEDUP_WINDOW_FULL"  # dedup_max_keys ids are remembered already


class AppendMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"  # each appended message; a put that appends nothing answers with PutMessageStatus


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class AppendMessageResult:
    """One appended message; `msg_id` (the offset message id) is derived only when asked for."""

    __slots__ = ("status", "wrote_offset", "wrote_bytes", "store_timestamp", "logics_offset", "queue_id", "store_host")

    def __init__(
        self,
        status: AppendMessageStatus,
        wrote_offset: int = 0,
        wrote_bytes: int = 0,
        store_timestamp: int = 0,
        logics_offset: int = 0,
        queue_id: int = 0,
        store_host: bytes = b"",
    ) -> None:
        self.status = status
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.queue_id = queue_id
        self.store_host = store_host

    @property
    def msg_id(self) -> str:
        return (self.store_host + self.wrote_offset.to_bytes(8, "big")).hex().upper()

    def __repr__(self) -> str:
        return f"AppendMessageResult({self.status.value}, offset={self.wrote_offset}, bytes={self.wrote_bytes}, queue_offset={self.logics_offset})"


# Called under the commitlog's put lock with the items of the messages just appended (store.logfile.commit_log).
AppendedHook = Callable[[Sequence[AppendMessageResult]], None]


class LazyItems(Sequence[AppendMessageResult]):
    """Results of a put the encode kernel wrote, each built only when asked for: `offsets` holds each
    message's commitlog offset and stored size as two host-order int64s (the kernel's out buffer)."""

    __slots__ = ()
    offsets: bytes
    store_timestamp: int
    store_host: bytes

    def __len__(self) -> int:
        return len(self.offsets) // 16

    @overload
    def __getitem__(self, i: int) -> AppendMessageResult: ...

    @overload
    def __getitem__(self, i: slice) -> list[AppendMessageResult]: ...

    def __getitem__(self, i: int | slice) -> AppendMessageResult | list[AppendMessageResult]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("item index out of range")
        offset, size = _OFFSET_AND_SIZE.unpack_from(self.offsets, 16 * i)
        queue_id, queue_offset = self._queue_of(i)
        return AppendMessageResult(AppendMessageStatus.PUT_OK, offset, size, self.store_timestamp, queue_offset, queue_id, self.store_host)

    def _queue_of(self, i: int) -> tuple[int, int]:
        """(queue id, queue offset) of message `i`."""
        raise NotImplementedError

    def commitlog_offsets(self) -> list[int]:
        return array("q", self.offsets)[0::2].tolist()

    def first_offset(self) -> int:
        """The first message's commitlog offset (read from the kernel's buffer, no item built)."""
        return int(_OFFSET_AND_SIZE.unpack_from(self.offsets)[0])

    def spans(self) -> list[tuple[int, int]]:
        """(commitlog offset, stored size) of each message, in order."""
        offsets = self.offsets
        if len(offsets) == 16:  # one message, the common put: no array
            return [_OFFSET_AND_SIZE.unpack(offsets)]
        pairs = array("q", offsets)
        return list(zip(pairs[0::2], pairs[1::2], strict=True))

    def end_offset(self) -> int:
        """Commitlog offset just past the last message (read from the kernel's buffer, no item built)."""
        offset, size = _OFFSET_AND_SIZE.unpack_from(self.offsets, len(self.offsets) - 16)
        return int(offset + size)

    def total_bytes(self) -> int:
        if len(self.offsets) == 16:  # one message, the common put: no array
            return int(_OFFSET_AND_SIZE.unpack_from(self.offsets)[1])
        return sum(array("q", self.offsets)[1::2])

    def span(self) -> tuple[int, int, int]:
        """(messages, the bytes they take, the commitlog offset past the last): len, total_bytes and
        end_offset in one call (a put's bookkeeping asks for all three)."""
        offsets = self.offsets
        if len(offsets) == 16:  # one message, the common put
            offset, size = _OFFSET_AND_SIZE.unpack_from(offsets)
            return 1, int(size), int(offset + size)
        offset, size = _OFFSET_AND_SIZE.unpack_from(offsets, len(offsets) - 16)
        return len(offsets) // 16, sum(array("q", offsets)[1::2]), int(offset + size)


class EncodedItems(LazyItems):
    """The results of a batch appended to one queue by the encode kernel, each built only when asked for.

    `offsets` holds each message's commitlog offset and stored size as two host-order int64s
    (the kernel's out buffer); queue offsets count up from `first_queue_offset`.
    """

    __slots__ = ("offsets", "first_queue_offset", "queue_id", "store_timestamp", "store_host")

    def __init__(self, offsets: bytes, first_queue_offset: int, queue_id: int, store_timestamp: int, store_host: bytes) -> None:
        assert len(offsets) % 16 == 0
        self.offsets = offsets
        self.first_queue_offset = first_queue_offset
        self.queue_id = queue_id
        self.store_timestamp = store_timestamp
        self.store_host = store_host

    def _queue_of(self, i: int) -> tuple[int, int]:
        return self.queue_id, self.first_queue_offset + i


class RunItems(LazyItems):
    """The results of MessageInner puts the encode kernel wrote in runs (one queue each, consecutive
    messages), each built only when asked for. `offsets` as EncodedItems'; run k starts at message
    `starts[k]` with queue offset `queue_offsets[k]` in queue `queue_ids[k]`."""

    __slots__ = ("offsets", "starts", "queue_offsets", "queue_ids", "store_timestamp", "store_host")

    def __init__(
        self, offsets: bytes, runs: tuple[list[int], list[int], list[int]], store_timestamp: int, store_host: bytes
    ) -> None:  # fmt: skip
        assert len(offsets) % 16 == 0
        self.offsets = offsets
        self.starts, self.queue_offsets, self.queue_ids = runs
        self.store_timestamp = store_timestamp
        self.store_host = store_host

    def _queue_of(self, i: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.starts, i) - 1
        return self.queue_ids[k], self.queue_offsets[k] + i - self.starts[k]


# The LazyItems classes, for a type test without the ABC machinery isinstance runs for a Sequence subclass.
_LAZY_TYPES = frozenset({EncodedItems, RunItems})


def total_bytes(items: Sequence[AppendMessageResult]) -> int:
    """Bytes the items' messages take in the commitlog."""
    if type(items) in _LAZY_TYPES:
        lazy: LazyItems = items  # type: ignore[assignment]  # its type is one of _LAZY_TYPES (no cast call: a put's hot path)
        return lazy.total_bytes()
    return items[0].wrote_bytes if len(items) == 1 else sum(i.wrote_bytes for i in items)


class PutMessageResult:
    """Outcome of one put (or one batch put: `items` has one entry per message).

    A plain slotted class: one is made per put, so its constructor stays minimal.
    """

    __slots__ = ("status", "refusal", "detail", "items", "duplicate", "durability_owed")

    def __init__(
        self,
        status: PutMessageStatus,
        refusal: PutRefusal = PutRefusal.NONE,
        detail: str = "",
        items: Sequence[AppendMessageResult] | None = None,
        duplicate: bool = False,
    ) -> None:
        self.status = status
        self.refusal = refusal
        self.detail = detail
        # One per message stored: a list, or EncodedItems for a batch appended as it came.
        self.items: Sequence[AppendMessageResult] = items if items is not None else []
        # PUT_OK without a write: every message's dedup id was seen in the window; `items` are the first
        # messages' (store/put/dedup_window.py DuplicateItem), nothing was stored.
        self.duplicate = duplicate
        # Stored by a put with `defer_durability` whose flush or slave wait is the caller's to make
        # (DefaultMessageStore.durable_through): PUT_OK here says stored, not yet durable.
        self.durability_owed = False

    def __repr__(self) -> str:
        return f"PutMessageResult({self.status.value}, refusal={self.refusal.value}, items={len(self.items)}, detail={self.detail!r})"

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def stored(self) -> bool:
        """True when the messages are in the commitlog (even if a flush or slave wait timed out)."""
        return bool(self.items) and self.status in _STORED_STATUSES

    @property
    def end_offset(self) -> int:
        """Commitlog offset just past the last message written."""
        items = self.items
        if type(items) in _LAZY_TYPES:
            lazy: LazyItems = items  # type: ignore[assignment]  # its type is one of _LAZY_TYPES (no cast call: a put's hot path)
            return lazy.end_offset()
        last = items[-1]
        return last.wrote_offset + last.wrote_bytes


_OFFSET_AND_SIZE = struct.Struct("=qq")  # store.native.OFFSET_AND_SIZE (this module imports no kernel)
_STORED_STATUSES = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)
