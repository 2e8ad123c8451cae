"""Inflating bodies stored compressed, for replies in the stored-bytes format (decode_stored).

The stored-bytes format carries bodies as the commitlog holds them (the reply's
X-Tidemq-Body-Encoding is `stored`): a RocketMQ producer stores a body over 4 KiB deflated, with
SYSFLAG bit 0x1 (MessageSysFlag.COMPRESSED_FLAG) and the algorithm in SYSFLAG bits 8..10 (0 or 3
zlib, 1 LZ4, 2 ZSTD). The broker's JSON views inflate the same way (docs/http-api.md).

Inflating stops at `limit_bytes` (by default 4 MiB, the broker's and RocketMQ's default largest
message), so a small body that inflates without end costs no more memory than that.
"""

from __future__ import annotations

import zlib

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x7 << 8
ZLIB_TYPES = frozenset({0, 0x3 << 8})
DEFAULT_BODY_LIMIT_BYTES = 4 * 1024 * 1024
# Why a body is left as stored (the broker's `body_error` values).
BODY_CORRUPT = "BODY_CORRUPT"
BODY_TOO_LARGE = "BODY_TOO_LARGE"
BODY_COMPRESSION_UNSUPPORTED = "BODY_COMPRESSION_UNSUPPORTED"


def inflate(stored: bytes, sys_flag: int, limit_bytes: int = DEFAULT_BODY_LIMIT_BYTES) -> tuple[bytes, str | None]:
    """The body as produced and None; or, when it cannot be inflated, the stored bytes and why."""
    if not sys_flag & COMPRESSED_FLAG or not stored:
        return stored, None
    if sys_flag & COMPRESSION_TYPE_MASK not in ZLIB_TYPES:
        return stored, BODY_COMPRESSION_UNSUPPORTED
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(stored, limit_bytes + 1)
    except zlib.error:
        return stored, BODY_CORRUPT
    if len(body) > limit_bytes:
        return stored, BODY_TOO_LARGE
    if not inflater.eof:
        return stored, BODY_CORRUPT  # the stream ends early
    return body, None
