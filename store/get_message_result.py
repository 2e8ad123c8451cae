"""GetMessageResult and TagFilter: what a pull returns and how it filters by tag.

A result holds the mapped-file slices its buffers point into; `release()` (or a
`with` block) lets go of them. Buffers are memoryviews of the stored bytes: a front
end can forward them as they are or decode them.
"""

from __future__ import annotations

from typing import Any

from store.mapped_file import SelectMappedBufferResult
from store.message import decode_properties, tags_hash
from store.message_codec import HEADER_BYTES, POS_BODY_LENGTH, PROPERTIES_LENGTH, decode_message, read_int
from store.status import GetMessageStatus

TAG_SEPARATOR = "||"


class TagFilter:
    """A subscription expression `TagA||TagB` (or `*`): hash codes first, then the exact tag."""

    __slots__ = ("tags", "codes")

    def __init__(self, tags: frozenset[str]) -> None:
        self.tags = tags
        self.codes = frozenset(tags_hash(t) for t in tags)

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

    def matches_code(self, tags_code: int) -> bool:
        return tags_code in self.codes

    def matches_message(self, buf: Any) -> bool:
        """Exact check of the TAGS property of a stored message (after the hash matched)."""
        return tag_of_stored(buf) in self.tags


def tag_of_stored(buf: Any) -> str:
    body_len = read_int(buf, POS_BODY_LENGTH)
    topic_pos = HEADER_BYTES + body_len
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    (props_len,) = PROPERTIES_LENGTH.unpack_from(buf, props_pos)
    return decode_properties(buf[props_pos + 2 : props_pos + 2 + props_len]).get("TAGS", "")


class GetMessageResult:
    __slots__ = (
        "status",
        "next_begin_offset",
        "min_offset",
        "max_offset",
        "buffers",
        "queue_offsets",
        "commitlog_offsets",
        "buffer_total_size",
        "suggest_pulling_from_slave",
        "_selections",
    )

    def __init__(self, status: GetMessageStatus = GetMessageStatus.NO_MESSAGE_IN_QUEUE) -> None:
        self.status = status
        self.next_begin_offset = 0
        self.min_offset = 0
        self.max_offset = 0
        self.buffers: list[memoryview] = []
        self.queue_offsets: list[int] = []
        self.commitlog_offsets: list[int] = []
        self.buffer_total_size = 0
        self.suggest_pulling_from_slave = False
        self._selections: list[SelectMappedBufferResult] = []

    def add_message(self, selection: SelectMappedBufferResult, queue_offset: int) -> None:
        self._selections.append(selection)
        self.buffers.append(selection.view)
        self.queue_offsets.append(queue_offset)
        self.commitlog_offsets.append(selection.start_offset)
        self.buffer_total_size += selection.size

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    def to_bytes(self) -> bytes:
        """The stored bytes of every message, concatenated (the batch wire format)."""
        return b"".join(self.buffers)

    def decode(self) -> list[dict[str, Any]]:
        return [decode_message(buf, 0) for buf in self.buffers]

    def release(self) -> None:
        for selection in self._selections:
            selection.release()
        self._selections = []
        self.buffers = []

    def __enter__(self) -> GetMessageResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"GetMessageResult({self.status.value}, next={self.next_begin_offset}, min={self.min_offset}, "
            f"max={self.max_offset}, messages={self.message_count})"
        )
