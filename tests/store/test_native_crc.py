"""The kernels' CRC-32 (store/_native/crc32.c) against zlib.crc32, both of its methods, every alignment."""

from __future__ import annotations

import os
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from store import _kernels

SOURCE = os.urandom(70_000 + 64)


def test_a_method_was_chosen() -> None:
    assert _kernels.crc32_method() in (1, 2)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 70_000), st.integers(0, 63), st.integers(0, 2**32 - 1), st.booleans())
def test_crc32_is_zlibs_at_any_length_and_alignment(length: int, align: int, start: int, portable: bool) -> None:
    data = memoryview(SOURCE)[align : align + length]
    assert _kernels.crc32(data, start, portable) == zlib.crc32(data, start)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 15))
def test_crc32_of_short_inputs_around_the_folding_threshold(data: bytes, align: int) -> None:
    padded = memoryview(bytes(align) + data)[align:]
    assert _kernels.crc32(padded) == _kernels.crc32(padded, 0, True) == zlib.crc32(data)


def test_crc32_of_every_length_to_300_and_every_alignment() -> None:
    for length in range(300):
        for align in range(16):
            data = memoryview(SOURCE)[align : align + length]
            assert _kernels.crc32(data) == zlib.crc32(data), (length, align)


def test_crc32_continues_a_running_value() -> None:
    data = SOURCE[:5000]
    running = 0
    for i in range(0, len(data), 777):
        running = _kernels.crc32(data[i : i + 777], running)
    assert running == zlib.crc32(data)


def test_crc32_of_inputs_past_the_gil_threshold() -> None:
    big = SOURCE * (_kernels.GIL_RELEASE_MIN_BYTES // len(SOURCE) + 1)
    before = _kernels.gil_releases()
    assert _kernels.crc32(big) == zlib.crc32(big)
    assert _kernels.gil_releases() == before + 1
    assert _kernels.crc32(SOURCE) == zlib.crc32(SOURCE)
    assert _kernels.gil_releases() == before + 1, "a small input keeps the GIL"
