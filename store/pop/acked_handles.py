"""AckedHandles: the receipt handles a group already acked, or whose message a change of the invisible
time moved to a new handle, so that using one again gets a distinct answer instead of OK.

Why a bounded table in memory, and what it answers past its bound:
- An ack of a plain (not FIFO) group writes an ack record into the revive topic, a timer message due at
  the handle's invisible time: the revive service reads it only then, so the log cannot answer "was this
  handle acked?" while the handle is still usable. This table can: an entry is kept until the handle's
  own invisible time ends, after which the handle answers HANDLE_EXPIRED whatever happened to it, so
  nothing is remembered longer than a handle lives (at most MAX_INVISIBLE_MS, 12 h).
- It holds at most `pop_acked_handles_max` entries: when full, the entry whose handle expires first is
  forgotten (counted in `forgotten`), and a repeated ack of a forgotten handle is answered as a first one
  is (OK: another ack record, which the revive service matches harmlessly) and counted again. So is one
  after a restart or a failover, which start with an empty table. A FIFO group's acks are also in its
  order book (a state table in the log), which answers for them after a restart too.
- A handle is claimed before its ack record is written and released when the write fails, so two acks
  of one handle racing each other store one record and answer OK once.

Invariant: `len(entries) <= max_entries`; every entry has one heap item with its expiry time (stale
heap items, left when an entry is released or replaced, are skipped as they surface).

An entry holds its state as an index into `_STATES`, not the enum member, so that an entry, its key and its heap
item are made of strings and numbers only: the cyclic collector stops tracking such tuples at its first look, and
a table of a minute of acks (tens of thousands of entries) then never grows the older generations into a full
collection under load.
"""

from __future__ import annotations

import enum
import heapq
import threading

# (group, topic, from the retry topic, queue id, offset, pop time, invisible time or -1 for a FIFO group)
HandleKey = tuple[str, str, bool, int, int, int, int]


class HandleState(enum.Enum):
    ACKED = "ACKED"  # acked (its ack record is stored, or being stored by the claiming call)
    SUPERSEDED = "SUPERSEDED"  # a change of the invisible time gave the message a new handle


# A recorded state's index in an entry (see the module's docstring).
_STATES = (HandleState.ACKED, HandleState.SUPERSEDED)


class AckedHandles:
    def __init__(self, max_entries: int) -> None:
        assert max_entries > 0
        self.max_entries = max_entries
        self._entries: dict[HandleKey, tuple[int, int]] = {}  # key -> (index in _STATES, until ms)
        self._expiry: list[tuple[int, HandleKey]] = []
        self._lock = threading.Lock()  # a leaf: nothing else is taken while it is held, no I/O under it
        self.forgotten = 0  # entries dropped before their handle expired, to stay within max_entries

    def claim(self, key: HandleKey, state: HandleState, until_ms: int, now: int) -> HandleState | None:
        """Record `key` as `state` until `until_ms` unless it is already recorded; returns the recorded state
        (the handle was used already) or None (claimed now: the caller writes its record, or calls `release`)."""
        with self._lock:
            self._expire_locked(now)
            held = self._entries.get(key)
            if held is not None:
                return _STATES[held[0]]
            while len(self._entries) >= self.max_entries:
                self._drop_first_locked()
            self._entries[key] = (_STATES.index(state), until_ms)
            heapq.heappush(self._expiry, (until_ms, key))
            return None

    def release(self, key: HandleKey) -> None:
        """Forget a claim whose record could not be stored: the handle may be used again."""
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _expire_locked(self, now: int) -> None:
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            until, key = heapq.heappop(expiry)
            held = self._entries.get(key)
            if held is not None and held[1] == until:
                del self._entries[key]
        if len(expiry) > 2 * self.max_entries:  # stale items of released claims: rebuild from the entries
            self._expiry = [(until, key) for key, (_, until) in self._entries.items()]
            heapq.heapify(self._expiry)

    def _drop_first_locked(self) -> None:
        while self._expiry:
            until, key = heapq.heappop(self._expiry)
            held = self._entries.get(key)
            if held is not None and held[1] == until:
                del self._entries[key]
                self.forgotten += 1
                return
        raise AssertionError("an entry without its expiry item")
