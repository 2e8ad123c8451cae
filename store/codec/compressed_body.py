"""Compressed bodies: a stored message whose SYSFLAG has RocketMQ's COMPRESSED_FLAG (0x1).

A RocketMQ producer deflates a body longer than `compressMsgBodyOverHowmuch` (4 KiB by default,
DefaultMQProducer) and sets the flag; the broker stores the deflated bytes as they came and the
consumer inflates them (MessageDecoder.decode with deCompressBody, UtilAll.uncompress). RocketMQ
4.9.8 names the algorithm in SYSFLAG bits 8..10 (MessageSysFlag.getCompressionType): 0 (producers
older than the field) and 3 are zlib, 1 is LZ4, 2 is ZSTD.

The store keeps and replicates the stored bytes; only the views that show a body (JSON replies,
the offline reader's rows) inflate it, with `inflate_body`. Inflating is bounded: at most
`limit_bytes` are produced (the views pass `max_message_size_bytes`: a RocketMQ producer refuses
a body over its maxMessageSize before compressing it, Validators.checkMessage), so a small stored
body that inflates without end costs no more memory than the largest message.
"""

from __future__ import annotations

import enum
import zlib

COMPRESSED_FLAG = 0x1  # MessageSysFlag.COMPRESSED_FLAG
COMPRESSION_TYPE_MASK = 0x7 << 8  # MessageSysFlag.COMPRESSION_TYPE_COMPARATOR
_ZLIB_TYPES = frozenset({0, 0x3 << 8})  # CompressionType.findByValue: 0 (older producers) and ZLIB


class BodyStatus(enum.Enum):
    """What `inflate_body` made of a stored body."""

    PLAIN = "PLAIN"  # not flagged compressed: the stored bytes are the body
    INFLATED = "INFLATED"  # flagged compressed and inflated
    CORRUPT = "BODY_CORRUPT"  # flagged compressed, but not a complete zlib stream
    TOO_LARGE = "BODY_TOO_LARGE"  # inflates past the limit
    UNSUPPORTED = "BODY_COMPRESSION_UNSUPPORTED"  # compressed with LZ4 or ZSTD (or an unknown type)

    @property
    def failed(self) -> bool:
        """True when the bytes returned with it are the stored (compressed) ones, not the body."""
        return self not in (BodyStatus.PLAIN, BodyStatus.INFLATED)


def is_compressed(sys_flag: int) -> bool:
    return bool(sys_flag & COMPRESSED_FLAG)


def inflate_body(stored: bytes, sys_flag: int, limit_bytes: int) -> tuple[bytes, BodyStatus]:
    """The body as its producer sent it, and how it was obtained.

    A body that cannot be inflated comes back as stored, with the reason (a failed status); an
    empty body is never inflated (MessageDecoder reads a body only when its length is above 0).
    """
    if not sys_flag & COMPRESSED_FLAG or not stored:
        return stored, BodyStatus.PLAIN
    if sys_flag & COMPRESSION_TYPE_MASK not in _ZLIB_TYPES:
        return stored, BodyStatus.UNSUPPORTED
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(stored, limit_bytes + 1)
    except zlib.error:
        return stored, BodyStatus.CORRUPT
    if len(body) > limit_bytes:
        return stored, BodyStatus.TOO_LARGE
    if not inflater.eof:
        return stored, BodyStatus.CORRUPT  # the stream stops before its end (UtilAll.uncompress throws EOFException)
    return body, BodyStatus.INFLATED
