"""store._kernels.Mapping against mmap.mmap (the reference) over the same file, and its descriptor use."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import _kernels

SIZE = 3 * 4096 + 100  # a partial last page

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(-50, SIZE + 50), st.binary(max_size=300)),
        st.tuples(st.just("read"), st.integers(-SIZE - 10, SIZE + 10), st.integers(-SIZE - 10, SIZE + 10)),
        st.tuples(st.just("find"), st.binary(min_size=1, max_size=3), st.integers(-SIZE - 10, SIZE + 10)),
        st.tuples(st.just("byte"), st.integers(-SIZE - 5, SIZE + 5), st.integers(0, 255)),
    ),
    max_size=40,
)


def outcome(fn: Callable[..., object]) -> tuple[str, object]:
    """What a call gives: its value, or the kind of error it raises (the two must raise alike)."""
    try:
        return ("ok", fn())
    except (IndexError, ValueError, TypeError) as exc:
        return ("error", type(exc).__name__ if not isinstance(exc, (IndexError, ValueError)) else "range")


@settings(max_examples=150, deadline=None)
@given(ops)
def test_slices_bytes_and_find_match_mmap(tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]) -> None:
    path = tmp_path_factory.mktemp("m") / "f"
    with open(path, "wb") as f:
        f.truncate(SIZE)
    fd = os.open(path, os.O_RDWR)
    try:
        ours = _kernels.Mapping(fd, SIZE)
        ref = mmap.mmap(fd, SIZE)
    finally:
        os.close(fd)
    try:
        for op in steps:
            if op[0] == "write":
                _, pos, data = op
                for target in (slice(pos, pos + len(data)), slice(pos, pos + len(data) + 1)):  # fitting, and one too long
                    got = outcome(lambda target=target, data=data: ours.__setitem__(target, data))
                    want = outcome(lambda target=target, data=data: ref.__setitem__(target, data))
                    assert got == want, (target, len(data))
            elif op[0] == "read":
                _, a, b = op
                assert ours[a:b] == ref[a:b]
            elif op[0] == "find":
                _, sub, start = op
                assert ours.find(sub, start) == ref.find(sub, start)
            else:
                _, i, v = op
                got, want = outcome(lambda i=i: ours[i]), outcome(lambda i=i: ref[i])
                assert got == want
                if want[0] == "ok":
                    ours[i] = v
                    ref[i] = v
        assert ours[:] == ref[:]
        assert bytes(memoryview(ours)) == ref[:]
    finally:
        ours.close()
        ref.close()


def test_a_mapping_keeps_no_descriptor_and_refuses_to_close_under_a_view(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(8192))
    before = set(os.listdir("/proc/self/fd"))
    fd = os.open(path, os.O_RDWR)
    m = _kernels.Mapping(fd, 8192)
    os.close(fd)
    assert set(os.listdir("/proc/self/fd")) == before
    m[10:13] = b"abc"
    assert path.read_bytes()[10:13] == b"abc"  # the file's pages, shared
    view = memoryview(m)
    with pytest.raises(BufferError):
        m.close()
    view.release()
    m.flush(10, 3)
    m.madvise(_kernels.MADV_DONTNEED)
    assert m[10:13] == b"abc"  # read back from the page cache
    m.close()
    assert m.closed
    with pytest.raises(ValueError):
        m[0]
    with pytest.raises(ValueError):
        _kernels.Mapping(-1, 0)
