"""inflate_body (the broker's views, store/codec/compressed_body.py) and the Python client's inflate
(tidemq/compressed_body.py) read SYSFLAG's COMPRESSED_FLAG and compression type alike."""

from __future__ import annotations

import zlib

import pytest

from store import COMPRESSED_FLAG, BodyStatus, inflate_body
from tidemq.compressed_body import inflate

TEXT = b"a body a RocketMQ producer deflated " * 200


def both(stored: bytes, sys_flag: int, limit: int) -> tuple[bytes, str | None]:
    """What both implementations make of it, checked to agree."""
    body, status = inflate_body(stored, sys_flag, limit)
    client_body, client_error = inflate(stored, sys_flag, limit)
    error = status.value if status.failed else None
    assert (client_body, client_error) == (body, error)
    return body, error


def test_an_unflagged_body_is_the_stored_bytes_even_when_they_are_zlib() -> None:
    stored = zlib.compress(TEXT)
    assert both(stored, 0, 1 << 20) == (stored, None)
    assert inflate_body(stored, 0x4, 1 << 20) == (stored, BodyStatus.PLAIN)  # other flags (a prepared message) change nothing


@pytest.mark.parametrize("type_bits", [0, 0x3 << 8], ids=["untyped", "zlib-typed"])
def test_a_flagged_zlib_body_is_inflated(type_bits: int) -> None:
    assert both(zlib.compress(TEXT), COMPRESSED_FLAG | type_bits, 1 << 20) == (TEXT, None)
    assert inflate_body(zlib.compress(TEXT), COMPRESSED_FLAG | type_bits, 1 << 20)[1] is BodyStatus.INFLATED


def test_inflating_stops_at_the_limit() -> None:
    stored = zlib.compress(TEXT)
    assert both(stored, COMPRESSED_FLAG, len(TEXT)) == (TEXT, None)  # exactly the limit is allowed
    assert both(stored, COMPRESSED_FLAG, len(TEXT) - 1) == (stored, "BODY_TOO_LARGE")
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 KiB stored, 64 MiB inflated
    assert both(bomb, COMPRESSED_FLAG, 4 << 20) == (bomb, "BODY_TOO_LARGE")


@pytest.mark.parametrize(
    "stored",
    [b"\x78\x9cnot deflate data", zlib.compress(TEXT)[:-1], zlib.compress(TEXT)[: len(zlib.compress(TEXT)) // 2], b"\x00"],
    ids=["garbage", "no-checksum", "half", "one-byte"],
)
def test_a_body_that_is_no_complete_zlib_stream_is_corrupt(stored: bytes) -> None:
    assert both(stored, COMPRESSED_FLAG, 1 << 20) == (stored, "BODY_CORRUPT")


def test_bytes_after_the_stream_are_ignored_as_by_an_inflater_stream() -> None:
    assert both(zlib.compress(TEXT) + b"trailing", COMPRESSED_FLAG, 1 << 20) == (TEXT, None)


@pytest.mark.parametrize("type_bits", [0x1 << 8, 0x2 << 8, 0x4 << 8], ids=["lz4", "zstd", "unknown"])
def test_other_compression_types_are_unsupported(type_bits: int) -> None:
    assert both(b"\x04\x22\x4d\x18frame", COMPRESSED_FLAG | type_bits, 1 << 20) == (
        b"\x04\x22\x4d\x18frame",
        "BODY_COMPRESSION_UNSUPPORTED",
    )


def test_an_empty_flagged_body_stays_empty() -> None:
    assert both(b"", COMPRESSED_FLAG, 1 << 20) == (b"", None)
