"""The consumer offset log of older versions (`config/consumerOffset.log` and its `.old`), read once.

Older versions recorded offset commits in an append-only file beside consumerOffset.json:
records of magic 4 | payload length 4 | CRC32 of the payload 4 | payload (big-endian), the
payload UTF-8 JSON `{"c": [[key, queue_id, offset], ...]}` or `{"rt": topic}`: the same payloads
as today's consumer offset state records. A store written by such a version is read by applying
these records over the JSON snapshot at load; the next snapshot then holds them, and the file goes.
Reading stops at the first record whose magic, length or CRC is wrong (a torn tail).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("tidemq.store")

RECORD_MAGIC = 0x0FF5E7C0
_HEADER = struct.Struct(">III")
# A payload longer than this is taken as a torn length field, not a record.
MAX_RECORD_PAYLOAD_BYTES = 64 * 1024 * 1024


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


def read_legacy_offset_log(path: str) -> Iterator[dict[str, Any]]:
    """The records of `<path>.old`, then of `path` (absent files hold none)."""
    for name in (path + ".old", path):
        if not os.path.exists(name):
            continue
        with open(name, "rb") as fh:
            data = fh.read()
        records, good = decode_records(data)
        if good < len(data):
            log.warning("%s: ignoring a torn tail of %d bytes at %d", name, len(data) - good, good)
        yield from records


def remove_legacy_offset_log(path: str) -> bool:
    """Remove the files once a snapshot holds their records; True when there was one."""
    removed = False
    for name in (path + ".old", path):
        try:
            os.unlink(name)
            removed = True
        except FileNotFoundError:
            pass
    return removed
