"""The binary formats of docs/http-api.md, without the broker's code:

- `encode_batch` / `decode_batch`: `application/x-tidemq-batch` produce bodies (RocketMQ's
  `MessageDecoder.encodeMessages`: TOTALSIZE, MAGICCODE 0, BODYCRC, FLAG, BODY, PROPERTIES).
- `decode_stored`: a pull reply in the stored-bytes format (the 17-field commitlog layout).

Invariants: `decode_batch(encode_batch(m))` gives `m` back; both decoders check every length
against the bytes there are and raise `BatchFormatError` rather than read past the end.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tidemq.compressed_body import COMPRESSED_FLAG, DEFAULT_BODY_LIMIT_BYTES, inflate
from tidemq.errors import TidemqClientError
from tidemq.models import Message

BATCH_MEDIA_TYPE = "application/x-tidemq-batch"
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, body length
_BATCH_FIXED_BYTES = _BATCH_HEAD.size + 2  # + the properties length
_PROPS_LENGTH = struct.Struct(">H")
# The stored layout's fields 1..14 and the body length (store/codec/message_codec.py HEADERS), for each
# combination of host forms: SYSFLAG 0x10 (born host) and 0x20 (store host) mark a 20-byte IPv6
# host in place of an 8-byte IPv4 one, indexed by (sys flag & 0x30) >> 4.
_STORED_HEADS: tuple[struct.Struct, ...] = tuple(struct.Struct(f">iIiiiqqiq{b}sq{s}siqi") for s in (8, 20) for b in (8, 20))
_STORED_FIXED_BYTES = 91  # with IPv4 hosts; the head's size - 88 more with others
_SYS_FLAG_AT = 36
STORED_MAGIC = 0xDAA320A7
NAME_VALUE, PROPERTY_END = "\x01", "\x02"


class BatchFormatError(TidemqClientError, ValueError):
    """Raised when bytes are not the batch or stored-message format they claim to be (a ValueError too)."""

    def __init__(self, detail: str) -> None:
        super().__init__("BAD_BATCH_FORMAT", None, detail)


@dataclass(slots=True)
class BatchMessage:
    """One message of a binary batch: its body, tag, keys, client id and user properties."""

    body: bytes
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    msg_id: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0

    def encoded_properties(self) -> bytes:
        props = dict(self.properties)
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = " ".join(self.keys)
        if self.msg_id:
            props["UNIQ_KEY"] = self.msg_id
        return "".join(f"{k}{NAME_VALUE}{v}{PROPERTY_END}" for k, v in props.items()).encode("utf-8")


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_batch(messages: Iterable[BatchMessage | bytes], with_crc: bool = False) -> bytes:
    """A produce body; plain `bytes` items are bodies without properties."""
    out: list[bytes] = []
    for m in messages:
        if isinstance(m, bytes | bytearray | memoryview):
            m = BatchMessage(bytes(m))
        props = m.encoded_properties()
        crc = body_crc(m.body) if with_crc else 0
        out.append(_BATCH_HEAD.pack(_BATCH_FIXED_BYTES + len(m.body) + len(props), 0, crc, m.flag, len(m.body)))
        out.append(m.body)
        out.append(_PROPS_LENGTH.pack(len(props)))
        out.append(props)
    return b"".join(out)


def decode_properties(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw.decode("utf-8", errors="replace").split(PROPERTY_END):
        name, sep, value = item.partition(NAME_VALUE)
        if sep:
            out[name] = value
    return out


def decode_batch(data: bytes) -> list[BatchMessage]:
    """The messages of a produce body (the inverse of `encode_batch`)."""
    out: list[BatchMessage] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _BATCH_FIXED_BYTES:
            raise BatchFormatError(f"{len(data) - pos} bytes left at {pos}, fewer than a message's fixed part")
        total, magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, pos)
        if magic != 0 or body_len < 0 or total < _BATCH_FIXED_BYTES or pos + total > len(data):
            raise BatchFormatError(f"bad message head at {pos}")
        body_end = pos + _BATCH_HEAD.size + body_len
        if body_end + 2 > pos + total:
            raise BatchFormatError(f"body length past the message at {pos}")
        (props_len,) = _PROPS_LENGTH.unpack_from(data, body_end)
        if _BATCH_FIXED_BYTES + body_len + props_len != total:
            raise BatchFormatError(f"TOTALSIZE disagrees with its parts at {pos}")
        props = decode_properties(data[body_end + 2 : body_end + 2 + props_len])
        tags, keys, msg_id = props.pop("TAGS", None), props.pop("KEYS", ""), props.pop("UNIQ_KEY", None)
        out.append(BatchMessage(data[pos + _BATCH_HEAD.size : body_end], tags, keys.split(), msg_id, props, flag))
        pos += total
    return out


def iter_stored(data: bytes) -> Iterator[tuple[int, int]]:
    """(position, size) of each stored message in a pull reply in the stored-bytes format."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < _STORED_FIXED_BYTES:
            raise BatchFormatError(f"{len(data) - pos} bytes left at {pos}, fewer than a stored message")
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic != STORED_MAGIC or total < _STORED_FIXED_BYTES or pos + total > len(data):
            raise BatchFormatError(f"bad stored message head at {pos}")
        yield pos, total
        pos += total


def _stored_head(data: bytes, pos: int) -> struct.Struct:
    sys_flag: int
    (sys_flag,) = struct.unpack_from(">i", data, pos + _SYS_FLAG_AT)
    return _STORED_HEADS[(sys_flag & 0x30) >> 4]


def stored_body(data: bytes, pos: int) -> bytes:
    """Only the body of the stored message at `pos` (for readers that need nothing else)."""
    head = _stored_head(data, pos)
    (body_len,) = struct.unpack_from(">i", data, pos + head.size - 4)
    start = pos + head.size
    return data[start : start + body_len]


def decode_stored(data: bytes, body_limit_bytes: int = DEFAULT_BODY_LIMIT_BYTES) -> list[Message]:
    """The messages of a pull reply in the stored-bytes format, bodies stored compressed inflated
    (at most to `body_limit_bytes`; one that cannot be is kept as stored, with `body_error`)."""
    out: list[Message] = []
    for pos, total in iter_stored(data):
        head = _stored_head(data, pos)
        if head.size + 3 > total:
            raise BatchFormatError(f"bad stored message head at {pos}")
        (_, _, _crc, queue_id, _flag, queue_offset, phys, sys_flag, born_ts, _bh, store_ts, store_host, reconsume, _pto, body_len) = (
            head.unpack_from(data, pos)
        )
        body_start = pos + head.size
        topic_at = body_start + body_len
        if body_len < 0 or topic_at + 3 > pos + total:
            raise BatchFormatError(f"bad body length at {pos}")
        topic_len = data[topic_at]
        props_at = topic_at + 1 + topic_len
        if props_at + 2 > pos + total:
            raise BatchFormatError(f"bad topic length at {pos}")
        (props_len,) = struct.unpack_from(">h", data, props_at)
        if props_len < 0 or _STORED_FIXED_BYTES + head.size - 88 + body_len + topic_len + props_len != total:
            raise BatchFormatError(f"TOTALSIZE disagrees with its parts at {pos}")
        props = decode_properties(data[props_at + 2 : props_at + 2 + props_len])
        offset_id = (store_host + phys.to_bytes(8, "big")).hex().upper()
        tags = props.pop("TAGS", None)
        keys = props.pop("KEYS", "").split()
        msg_id = props.pop("UNIQ_KEY", offset_id)
        topic = data[topic_at + 1 : props_at].decode("utf-8", errors="replace")
        body, body_error = inflate(data[body_start:topic_at], sys_flag, body_limit_bytes)
        message = Message(msg_id, offset_id, topic, queue_id, queue_offset, phys, body, tags, keys, props, born_ts, store_ts, reconsume)
        message.compressed, message.body_error = bool(sys_flag & COMPRESSED_FLAG), body_error
        out.append(message)
    return out
