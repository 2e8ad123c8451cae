"""UNIQ_KEY in MessageClientIDSetter's layout: IPv4, pid, 4 fixed bytes, ms since the start of the
current month in local time, a counter; the time base moves on when a month begins."""

from __future__ import annotations

import os
from datetime import datetime

from store.codec.message import UniqKeyGenerator, month_bounds_ms


def local_ms(*args: int) -> int:
    return int(datetime(*args).timestamp() * 1000)  # a naive datetime is local time


class FixedClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def parts(key: str) -> tuple[str, int, str, int, int]:
    assert len(key) == 32 and key == key.upper()
    return key[:8], int(key[8:12], 16), key[12:20], int(key[20:28], 16), int(key[28:], 16)


def test_the_key_is_ip_pid_fixed_bytes_time_since_the_month_start_and_a_counter() -> None:
    clock = FixedClock(local_ms(2026, 2, 14, 10, 30, 0) + 250)
    gen = UniqKeyGenerator(bytes([10, 1, 2, 3]), clock_ms=clock)
    a, b = parts(gen.next()), parts(gen.next())
    assert a[0] == "0A010203" and a[1] == os.getpid() & 0xFFFF
    assert a[3] == clock.ms - local_ms(2026, 2, 1) and a[4] + 1 == b[4]
    assert a[:4] == b[:4]


def test_the_time_base_moves_to_the_new_month_when_it_begins() -> None:
    clock = FixedClock(local_ms(2026, 2, 28, 23, 59, 59) + 999)
    gen = UniqKeyGenerator(clock_ms=clock)
    before = parts(gen.next())
    assert before[3] == clock.ms - local_ms(2026, 2, 1)
    clock.ms = local_ms(2026, 3, 1) + 500
    after = parts(gen.next())
    assert after[3] == 500  # counted from 1 March, not from 1 February
    batch = [parts(k) for k in gen.next_batch(3)]
    assert [p[3] for p in batch] == [500] * 3 and [p[4] for p in batch] == [after[4] + 1, after[4] + 2, after[4] + 3]
    clock.ms = local_ms(2027, 1, 1) + 7  # December to January crosses a year
    assert parts(gen.next())[3] == 7


def test_month_bounds_are_local_midnights_of_the_first() -> None:
    assert month_bounds_ms(local_ms(2026, 12, 31, 23, 0, 0)) == (local_ms(2026, 12, 1), local_ms(2027, 1, 1))
    assert month_bounds_ms(local_ms(2026, 3, 1)) == (local_ms(2026, 3, 1), local_ms(2026, 4, 1))
