"""GetMessageResult and TagFilter: what a pull returns and how it filters by tag; `Filter`, what
a get filters with (a TagFilter, or a store.filter.message_filter.MessageFilter for tags and SQL92).

A result owns its bytes: `data` holds the stored messages copied out of the commitlog and
concatenated (the batch wire format), `meta` one `store.native.META` record per message
(commitlog offset, entry index counted from `start_offset`, size). It holds no mapped file,
so a front end can send `data` as it is, or decode it, after the read; `release()` only
drops the buffers (a `with` block does it).
"""

from __future__ import annotations

from typing import Any, Protocol

from store.codec.message import decode_properties, tags_hash
from store.codec.message_codec import PROPERTIES_LENGTH, decode_message, header_bytes, read_int
from store.native import META, tag_codes_array
from store.status import GetMessageStatus

TAG_SEPARATOR = "||"

# What the gather kernel takes of a filter: sorted tags codes, exact tags, an SQL92 program.
KernelArgs = tuple[bytes | None, tuple[bytes, ...] | None, bytes | None]


class Filter(Protocol):
    """What a get keeps: the kernel's arguments, and the reference checks (a consume-queue entry's
    tags code first, then the stored message) that store.queue.reference_getter and a deferred message use."""

    def kernel_args(self) -> KernelArgs: ...
    def matches_code(self, tags_code: int) -> bool: ...
    def matches_message(self, buf: Any) -> bool: ...


class TagFilter:
    """A subscription expression `TagA||TagB` (or `*`): hash codes first, then the exact tag."""

    __slots__ = ("tags", "codes", "code_array", "tag_bytes")

    def __init__(self, tags: frozenset[str]) -> None:
        self.tags = tags
        self.codes = frozenset(tags_hash(t) for t in tags)
        # The filter as the gather kernel takes it: sorted int64 codes and the tags' UTF-8 bytes.
        self.code_array = tag_codes_array(self.codes)
        self.tag_bytes = tuple(t.encode("utf-8", "surrogatepass") for t in tags)

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter | None:
        """None for no filter (None, empty or `*`); ValueError when a tag is empty or blank."""
        if expression is None:
            return None
        expression = expression.strip()
        if expression in ("", "*"):
            return None
        tags = [t.strip() for t in expression.split(TAG_SEPARATOR)]
        if any(not t for t in tags):
            raise ValueError("a tag expression is tags separated by ||, none of them empty")
        return cls(frozenset(tags))

    def kernel_args(self) -> KernelArgs:
        return self.code_array, self.tag_bytes, None

    def matches_code(self, tags_code: int) -> bool:
        return tags_code in self.codes

    def matches_message(self, buf: Any) -> bool:
        """Exact check of the TAGS property of a stored message (after the hash matched)."""
        return tag_of_stored(buf) in self.tags


def properties_of_stored(buf: Any) -> dict[str, str]:
    """The properties of the stored message at the start of `buf`."""
    header = header_bytes(buf, 0)
    body_len = read_int(buf, header - 4)
    topic_pos = header + body_len
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)
    return decode_properties(buf[props_pos + 2 : props_pos + 2 + props_len])


def tag_of_stored(buf: Any) -> str:
    return properties_of_stored(buf).get("TAGS", "")


class GetMessageResult:
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "start_offset", "data", "meta", "suggest_pulling_from_slave")

    def __init__(self, status: GetMessageStatus = GetMessageStatus.NO_MESSAGE_IN_QUEUE) -> None:
        self.status = status
        self.next_begin_offset = 0
        self.min_offset = 0
        self.max_offset = 0
        self.start_offset = 0  # the queue offset of entry index 0 in `meta`
        self.data: bytes | bytearray = b""  # the messages' stored bytes, concatenated
        self.meta: bytes | bytearray = b""  # META per message, in `data` order
        self.suggest_pulling_from_slave = False

    @property
    def message_count(self) -> int:
        return len(self.meta) // META.size

    @property
    def buffer_total_size(self) -> int:
        return len(self.data)

    @property
    def queue_offsets(self) -> list[int]:
        start = self.start_offset
        return [start + index for _, index, _ in META.iter_unpack(self.meta)]

    @property
    def commitlog_offsets(self) -> list[int]:
        return [offset for offset, _, _ in META.iter_unpack(self.meta)]

    def positions(self) -> list[tuple[int, int]]:
        """(position in `data`, size) of each message."""
        out = []
        pos = 0
        for _, _, size in META.iter_unpack(self.meta):
            out.append((pos, size))
            pos += size
        return out

    def message(self, i: int) -> memoryview:
        """The stored bytes of message `i` (a view of `data`)."""
        pos, size = self.positions()[i]
        return memoryview(self.data)[pos : pos + size]

    def to_bytes(self) -> bytes:
        """The stored bytes of every message, concatenated (the batch wire format), as bytes."""
        return bytes(self.data)

    def decode(self, hosts: bool = True) -> list[dict[str, Any]]:
        """The messages as decode_message's dicts (`hosts`: with the born and store host texts)."""
        data = self.data
        return [decode_message(data, pos, None, hosts) for pos, _ in self.positions()]

    def release(self) -> None:
        """Drop the buffers (views of `data` taken before keep it alive)."""
        self.data = b""
        self.meta = b""

    def __enter__(self) -> GetMessageResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"GetMessageResult({self.status.value}, next={self.next_begin_offset}, min={self.min_offset}, "
            f"max={self.max_offset}, messages={self.message_count})"
        )
