"""DedupWindow: the producers' dedup ids (Idempotency-Key) seen per topic within `dedup_window_s`.

A producer that retries after a timeout or a failover sends the same dedup id again; a put whose
every message's id was seen within the window stores nothing and is answered with the first
messages' ids (NATS JetStream's Nats-Msg-Id, SQS FIFO's MessageDeduplicationId). The id travels
in the message as the property TIDEMQ_DEDUP_ID, and is also one of its KEYS, so the index finds
it (store/put/dedup_hook.py writes both).

State lives in the log: the window in memory holds every id this store appended since
`complete_since_ms` (its start, or the moment it became master). Before that moment the ids are
in the log and the index dispatch built from it (a slave indexes what it replicates), so while an
id stored before then may still be in the window (`lookup_until_ms`: the last store time known at
that moment, plus LOOKUP_MARGIN_MS, plus the window; none for a log without messages) an id not in
memory is looked up in the index (`IndexLookup`): after a SIGKILL and recovery, or on a promoted
slave, a resent id is found.

Concurrency: `reserve` checks and inserts under `_lock` in one step, marking new ids PENDING; the
put's appended-hook (`appended_locked`, under the commitlog's put lock) records the stored messages
under them (the put's items and an index: a DuplicateItem is built only when a duplicate is
answered), and a put that stores nothing releases them (`release`); both notify `_pending_ended`. A put meeting another's
PENDING id waits at most PENDING_WAIT_S for it, then answers DEDUP_PENDING. The memory is bounded
by `dedup_max_keys`: a put that would pass it is refused DEDUP_WINDOW_FULL, never admitted unchecked.
"""

from __future__ import annotations

import collections
import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from store.codec.message import PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY, SCHEDULE_TOPIC, TIMER_TOPIC
from store.put.put_batch import DEDUP_PROPERTY
from store.status import AppendMessageResult, AppendMessageStatus

__all__ = ["DEDUP_PROPERTY", "DedupWindow", "DuplicateItem", "Verdict", "dedup_id_problem", "first_in_index"]
# Messages a dedup id lookup reads from the index per topic (a producer's id names one message; a
# delayed one has a second, delivered copy).
DEDUP_LOOKUP_MAX = 8
MAX_DEDUP_ID_CHARS = 128
# Longest a put waits for another put of the same id to be appended before it answers DEDUP_PENDING.
PENDING_WAIT_S = 1.0
# How far the last store time a restart knows of (the checkpoint's, flushed about every second) may trail
# the last message stored before it: ids are looked up in the index this much longer.
LOOKUP_MARGIN_MS = 60_000


def dedup_id_problem(dedup_id: str) -> str | None:
    """Why `dedup_id` cannot be a dedup id (1..128 printable ASCII characters, no space); None when it can."""
    if not 0 < len(dedup_id) <= MAX_DEDUP_ID_CHARS:
        return f"a dedup id has 1..{MAX_DEDUP_ID_CHARS} characters, not {len(dedup_id)}"
    if not (dedup_id.isascii() and dedup_id.isprintable()) or " " in dedup_id:
        return "a dedup id holds printable ASCII characters only (no space, no control character)"
    return None


class DuplicateItem(AppendMessageResult):
    """The ids of the first message stored under a dedup id: an AppendMessageResult plus its UNIQ_KEY;
    `queue_id` is the queue it was sent to, `moved` True when it was stored elsewhere first (a delay
    level or timer topic: its `logics_offset` is not a place in that queue)."""

    __slots__ = ("uniq_key", "moved", "offset_msg_id")

    def __init__(self, item: AppendMessageResult, queue_id: int, uniq_key: str, moved: bool, offset_msg_id: str = "") -> None:
        super().__init__(
            AppendMessageStatus.PUT_OK, item.wrote_offset, item.wrote_bytes, item.store_timestamp, item.logics_offset, queue_id,
            item.store_host,
        )  # fmt: skip
        self.uniq_key = uniq_key
        self.moved = moved
        self.offset_msg_id = offset_msg_id or item.msg_id

    @property
    def msg_id(self) -> str:
        return self.offset_msg_id


class Verdict(enum.Enum):
    NEW = "NEW"  # every id reserved: put the batch
    DUPLICATE = "DUPLICATE"  # every message's id was seen: answer the first ids
    PARTIAL = "PARTIAL"  # some seen, some not (or a message without an id): refused
    PENDING = "PENDING"  # another put of an id is being appended: refused after the wait
    FULL = "FULL"  # dedup_max_keys reached: refused


@dataclass(slots=True)
class Entry:
    expires_ms: int
    # While PENDING None; once appended, the put's items and this message's index in them, with what the
    # DuplicateItem adds (built only when a duplicate is answered, so a put pays no object per message).
    items: Sequence[AppendMessageResult] | None = None
    index: int = 0
    queue_id: int = 0
    uniq_key: str = ""
    moved: bool = False

    def item(self) -> DuplicateItem | None:
        if self.items is None:
            return None
        return DuplicateItem(self.items[self.index], self.queue_id, self.uniq_key, self.moved)


# Message i of an appended put -> (the queue it was sent to, its UNIQ_KEY, whether a hook moved it).
Described = Callable[[int], tuple[int, str, bool]]
# (topic, dedup id, since_ms) -> the first message stored under the id since then, from the index; None when none.
IndexLookup = Callable[[str, str, int], DuplicateItem | None]


class DedupWindow:
    def __init__(self, window_ms: int, max_keys: int, now_ms: Callable[[], int], lookup: IndexLookup) -> None:
        self.window_ms = window_ms
        self.max_keys = max_keys
        self.now_ms = now_ms
        self.lookup = lookup
        self.complete_since_ms = now_ms()  # memory holds every id appended since then
        self.lookup_until_ms = 0  # before it, an id not in memory is looked up in the index
        self._entries: collections.OrderedDict[tuple[str, str], Entry] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pending_ended = threading.Condition(self._lock)  # notified when PENDING ids end (appended or released)
        self.duplicates = 0  # puts answered as duplicates
        self.refused_full = 0  # puts refused DEDUP_WINDOW_FULL

    def __len__(self) -> int:
        return len(self._entries)

    def restart(self, last_stored_ms: int | None) -> None:
        """Forget the memory and rely on the log (the store started, became master, or a slave): ids stored
        before now are looked up in the index while they may be in the window. `last_stored_ms` is the latest
        store time known of the log (0: unknown; None: the log holds no message), so a new or idle store
        makes no lookup."""
        now = self.now_ms()
        if last_stored_ms is None:
            until = 0
        elif last_stored_ms <= 0:
            until = now + self.window_ms
        else:
            until = min(now, last_stored_ms + LOOKUP_MARGIN_MS) + self.window_ms
        with self._lock:
            self._entries.clear()
            self.complete_since_ms = now
            self.lookup_until_ms = until

    def reserve(self, topic: str, ids: Sequence[str | None]) -> tuple[Verdict, list[DuplicateItem]]:
        """Check `ids` (one per message; None: no id) and reserve the new ones as PENDING, in one step.

        NEW: reserved (the caller must `appended_locked` or `release`); DUPLICATE: with the first ids,
        one per message; the others with no items and nothing reserved.
        """
        waited = False
        while True:
            now = self.now_ms()
            found = self._in_log(topic, ids, now) if now < self.lookup_until_ms else {}
            with self._lock:
                self._expire_locked(now)
                verdict, items = self._check_locked(topic, ids, found)
                if verdict is Verdict.NEW:
                    if len(self._entries) + sum(1 for i in ids if i is not None) > self.max_keys:
                        self.refused_full += 1
                        return Verdict.FULL, []
                    entries = self._entries
                    expires = now + self.window_ms
                    for dedup_id in ids:
                        if dedup_id is not None:
                            entries[(topic, dedup_id)] = Entry(expires)
                    return verdict, []
                if verdict is Verdict.PENDING and not waited:
                    waited = True  # a PENDING id is waited for once
                    self._pending_ended.wait(PENDING_WAIT_S)
                    continue
            if verdict is Verdict.DUPLICATE:
                self.duplicates += 1
            return verdict, items

    def _check_locked(self, topic: str, ids: Sequence[str | None], found: dict[str, DuplicateItem]) -> tuple[Verdict, list[DuplicateItem]]:
        items: list[DuplicateItem] = []
        unseen = 0
        for dedup_id in ids:
            entry = self._entries.get((topic, dedup_id)) if dedup_id is not None else None
            if entry is not None and entry.items is None:
                return Verdict.PENDING, []
            item = entry.item() if entry is not None else found.get(dedup_id) if dedup_id is not None else None
            if item is None:
                unseen += 1
            else:
                items.append(item)
        if not items:
            return Verdict.NEW, []
        return (Verdict.DUPLICATE if not unseen else Verdict.PARTIAL), items

    def _in_log(self, topic: str, ids: Sequence[str | None], now: int) -> dict[str, DuplicateItem]:
        """The ids of `ids` not in memory that the index holds, stored within the window before memory began."""
        with self._lock:
            missing = [i for i in ids if i is not None and (topic, i) not in self._entries]
        out: dict[str, DuplicateItem] = {}
        for dedup_id in missing:
            item = self.lookup(topic, dedup_id, now - self.window_ms)
            if item is not None:
                out[dedup_id] = item
        return out

    def _expire_locked(self, now: int) -> None:
        entries = self._entries
        while entries:
            key, entry = next(iter(entries.items()))
            if entry.expires_ms > now or entry.items is None:
                break  # a PENDING entry ends when its put does; the ones behind it wait (they expire later)
            del entries[key]

    def appended_locked(self, topic: str, ids: Sequence[str | None], items: Sequence[AppendMessageResult], described: Described) -> None:
        """A reserving put appended (under the commitlog's put lock): message i of `items` is recorded under `ids[i]`
        (`described(i)` gives its queue id, UNIQ_KEY and whether it was moved); ids past `len(items)` (a prefix was
        appended) are released."""
        n = len(items)
        with self._lock:
            entries = self._entries
            for i, dedup_id in enumerate(ids):
                if dedup_id is None:
                    continue
                entry = entries.get((topic, dedup_id))
                if entry is None:
                    continue
                if i < n:
                    entry.items, entry.index = items, i
                    entry.queue_id, entry.uniq_key, entry.moved = described(i)
                else:
                    del entries[(topic, dedup_id)]
            self._pending_ended.notify_all()

    def release(self, topic: str, ids: Sequence[str | None]) -> None:
        """A reserving put stored nothing: its PENDING ids are forgotten (a retry is a new put)."""
        with self._lock:
            for dedup_id in ids:
                if dedup_id is None:
                    continue
                entry = self._entries.get((topic, dedup_id))
                if entry is not None and entry.items is None:
                    del self._entries[(topic, dedup_id)]
            self._pending_ended.notify_all()

    def status(self) -> dict[str, int]:
        return {"keys": len(self._entries), "max_keys": self.max_keys, "duplicates": self.duplicates, "refused_full": self.refused_full}


# (topic, key, max messages, begin ms, end ms) -> decoded messages whose KEYS or UNIQ_KEY is key (MessageStore.query_message).
KeyQuery = Callable[[str, str, int, int, int], list[dict[str, Any]]]


def first_in_index(query: KeyQuery, topic: str, dedup_id: str, since_ms: int) -> DuplicateItem | None:
    """The first message of `topic` stored since `since_ms` under `dedup_id`, found through the index (its KEYS hold
    the id): in the topic itself, or moved to a delay level or the timer topic first; None when none."""
    first: dict[str, Any] | None = None
    for stored_topic in (topic, SCHEDULE_TOPIC, TIMER_TOPIC):
        for found in query(stored_topic, dedup_id, DEDUP_LOOKUP_MAX, since_ms, 1 << 62):
            props = found["properties"]
            if props.get(DEDUP_PROPERTY) != dedup_id or props.get(PROPERTY_REAL_TOPIC, found["topic"]) != topic:
                continue
            if first is None or found["commitlog_offset"] < first["commitlog_offset"]:
                first = found
    if first is None:
        return None
    props = first["properties"]
    item = AppendMessageResult(
        AppendMessageStatus.PUT_OK, first["commitlog_offset"], first["store_size"], first["store_timestamp"], first["queue_offset"]
    )
    queue_id = int(props.get(PROPERTY_REAL_QID, first["queue_id"]))
    return DuplicateItem(item, queue_id, props.get(PROPERTY_UNIQ_KEY, ""), first["topic"] != topic, first["offset_msg_id"])
