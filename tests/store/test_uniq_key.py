"""UNIQ_KEY in MessageClientIDSetter's layout: IPv4, pid, 4 fixed bytes, ms since the start of the
current month in local time, a counter; the time base moves on when a month begins. And the
packing of a single message (the key it gets, the bytes) as a batch of one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

from store.codec.message import UniqKeyGenerator, month_bounds_ms, uniq_keys_of
from store.native import check_batch, pack_batch
from store.put.put_batch import packed_fields, properties_of


@dataclass
class Fields:
    """A parsed message as the front end's draft has it (store.put.put_batch.MessageFields)."""

    body: bytes
    tags: str | None
    keys: list[str] | None
    properties: dict[str, str] | None
    msg_id: str | None
    dedup_id: str | None


def local_ms(*args: int) -> int:
    # A naive datetime is local time.
    return int(datetime(*args).timestamp() * 1000)  # type: ignore[arg-type]  # int fields only (year..second): no tzinfo


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


def test_keys_of_one_millisecond_share_its_time_and_the_next_millisecond_has_its_own() -> None:
    clock = FixedClock(local_ms(2026, 5, 3, 8, 0, 0))
    gen = UniqKeyGenerator(clock_ms=clock)
    first, second = parts(gen.next()), parts(gen.next())
    clock.ms += 1
    third = parts(gen.next())
    assert first[3] == second[3] == clock.ms - 1 - local_ms(2026, 5, 1) and third[3] == first[3] + 1
    assert [first[4] + 1, first[4] + 2] == [second[4], third[4]]  # one counter throughout
    clock.ms -= 1  # a clock stepped back: the time is read again, not the last head kept
    assert parts(gen.next())[3] == first[3]


def test_a_single_message_packs_as_a_batch_of_one() -> None:
    """packed_fields' path for one message writes the bytes the batch path writes for it."""
    drafts = [
        Fields(b"body", "tag", ["k1", "k2"], {"a": "1"}, None, "dedup-1"),
        Fields(b"", None, None, None, "GIVEN0123456789", None),
        Fields(bytes(300), "t", None, {"x": "y" * 50}, None, None),
    ]
    for draft in drafts:
        data, keys = packed_fields([draft])
        assert len(keys) == 1 and (draft.msg_id is None or keys == [draft.msg_id])
        assert data == pack_batch([(draft.body, properties_of(draft, keys[0]), 0)])
        assert check_batch(data, 1 << 20, check_properties=True)[0] == 1
    two, two_keys = packed_fields(drafts[:2])  # the batch path, for comparison
    assert two.startswith(pack_batch([(drafts[0].body, properties_of(drafts[0], two_keys[0]), 0)]))


def test_a_reservation_stands_for_the_keys_next_would_make() -> None:
    """`reserve` (the JSON produce kernel's keys) draws from the counter `next` uses and heads its keys with the
    same time: of this millisecond, of the next one when the clock moves, from the new month's start."""
    clock = FixedClock(local_ms(2026, 4, 30, 23, 59, 59) + 998)
    gen = UniqKeyGenerator(clock_ms=clock)
    made = parts(gen.next())
    head, first = gen.reserve(1)
    (reserved,) = [parts(k) for k in uniq_keys_of(head, first, 1)]
    assert reserved[:4] == made[:4] and reserved[4] == made[4] + 1
    head, first = gen.reserve(3)
    assert [parts(k)[4] for k in uniq_keys_of(head, first, 3)] == [made[4] + 2, made[4] + 3, made[4] + 4]
    clock.ms += 1
    assert parts(uniq_keys_of(*gen.reserve(1), 1)[0])[3] == made[3] + 1  # the next millisecond
    clock.ms = local_ms(2026, 5, 1) + 42
    assert parts(uniq_keys_of(*gen.reserve(1), 1)[0])[3] == 42  # counted from 1 May
    assert parts(gen.next())[3] == 42


def test_reserve_one_is_a_reservation_of_one() -> None:
    """`reserve_one` (every raw produce) answers as `reserve(1)`: the same counter, the same head of this millisecond,
    of the next one when the clock moves, from the new month's start; and `reserve` after it keeps that head."""
    clock = FixedClock(local_ms(2026, 6, 30, 23, 59, 59) + 998)
    gen = UniqKeyGenerator(clock_ms=clock)
    head, first = gen.reserve(1)
    one = gen.reserve_one()
    assert one == (head, first + 1)
    clock.ms += 1
    moved = parts(uniq_keys_of(*gen.reserve_one(), 1)[0])
    assert moved[3] == parts(uniq_keys_of(head, first, 1)[0])[3] + 1 and moved[4] == first + 2
    assert gen.reserve(1)[0] == gen.reserve_one()[0]  # the head reserve_one formatted, kept for the millisecond
    clock.ms = local_ms(2026, 7, 1) + 7
    assert parts(uniq_keys_of(*gen.reserve_one(), 1)[0])[3] == 7  # counted from 1 July
