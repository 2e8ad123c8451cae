"""PullPrefetcher: order, bounded read-ahead, errors handed over, and the thread always ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator

import pytest

from pipeline.pull_prefetcher import PullPrefetcher

pytestmark = pytest.mark.timeout(30)


def test_items_come_out_in_order() -> None:
    assert list(PullPrefetcher(iter(range(100)), 2, "t").results()) == list(range(100))
    assert list(PullPrefetcher(iter([]), 1, "t").results()) == []


def test_an_error_follows_the_items_before_it() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("broker said no")

    got = []
    with pytest.raises(ValueError, match="broker said no"):
        for item in PullPrefetcher(source(), 4, "t").results():
            got.append(item)
    assert got == [1, 2]


def test_read_ahead_is_bounded_by_the_depth() -> None:
    produced: list[int] = []

    def source() -> Iterator[int]:
        for i in range(50):
            produced.append(i)
            yield i

    results = PullPrefetcher(source(), 3, "t").results()
    assert next(results) == 0
    time.sleep(0.3)  # let the thread run as far ahead as it may
    assert len(produced) <= 1 + 3 + 1  # the one taken, a full queue, and one waiting to be queued
    assert list(results) == list(range(1, 50))


def test_stopping_early_ends_the_thread() -> None:
    prefetcher = PullPrefetcher(iter(range(10_000)), 2, "t")
    results = prefetcher.results()
    assert isinstance(results, Generator)  # results() is a generator function
    assert next(results) == 0
    results.close()  # the consumer stops (e.g. a LIMIT was reached)
    assert not prefetcher.is_alive()
    assert "t" not in [t.name for t in threading.enumerate()]
