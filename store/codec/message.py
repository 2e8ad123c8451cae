"""Messages as the store sees them: the put-side record, properties, tag hash and ids.

- Properties use RocketMQ's encoding: `name \\x01 value \\x02` for each pair, UTF-8.
- The tags code is Java's `String.hashCode` of the tag (UTF-16 code units, int32).
- The offset message id is the store host, IPv4 (4 B) or IPv6 (16 B), + port (4 B) +
  commitlog offset (8 B), as 32 or 56 upper-case hex characters (RocketMQ's
  MessageDecoder.createMessageId / decodeMessageId); it decodes back to the offset.
- The UNIQ_KEY (client message id) is 16 bytes as 32 upper-case hex characters, in
  MessageClientIDSetter's layout: IPv4 + pid (2 B) + 4 bytes fixed per process (the
  class loader's hash there, random here) + ms since the start of the current month in
  local time (4 B) + counter (2 B). The time base moves to the next month's start once
  the clock reaches it (MessageClientIDSetter.createUniqIDBuffer).
"""

from __future__ import annotations

import collections
import functools
import ipaddress
import itertools
import operator
import os
import re
import time
from collections.abc import Callable
from typing import Any

from store._kernels import decode_properties as _decode_properties
from store._kernels import encode_properties as _encode_properties

# Property names (RocketMQ's MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_WAIT = "WAIT"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
# "i/n" on a store-own message (topic rmq_sys_*) that is message i (0-based) of the n of one put a
# crash must keep whole or not at all (StateLog.write_all; recovery cuts a put whose tail is missing).
PROPERTY_PUT_PART = "TIDEMQ_PUT_PART"
PROPERTY_REAL_QID = "REAL_QID"
KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# RocketMQ's TopicValidator.SYSTEM_TOPIC_PREFIX: topics the broker makes for itself (the revive topic, ...).
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
# PopAckConstants.REVIVE_TOPIC; a cluster's revive topic is this and the cluster's name (store.metadata.topic_names).
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ 5's TimerMessageStore.TIMER_TOPIC (store.timer.timer_message)
# BORNHOST of a message whose producer gave none (127.0.0.1, port 0). A born host is 8 bytes
# (IPv4 + port) or 20 (IPv6 + port); the put sets SYSFLAG's BORNHOST_V6_FLAG from its length.
DEFAULT_BORN_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
SYSTEM_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TIMER_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "OFFSET_MOVED_EVENT", "rmq_sys_TIDEMQ_STATE"}
)  # the transaction topics are store.transaction.transaction_message's HALF_TOPIC and OP_TOPIC; the last is store.state.state_log's STATE_TOPIC
# Topics no client reads: the broker's own state (offsets, secrets, progress marks; store.state.state_log).
INTERNAL_TOPICS = frozenset({"rmq_sys_TIDEMQ_STATE"})

# The topic naming rule (RocketMQ's TopicValidator: letters, digits, %, |, _ and -), used for group names too.
TOPIC_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
TOPIC_PATTERN = re.compile(TOPIC_NAME_PATTERN)
# Longest topic name, in bytes (RocketMQ's TopicValidator.TOPIC_MAX_LENGTH); the names are ASCII.
TOPIC_MAX_BYTES = 127
# Longest consumer group name, in bytes: a topic's, because a group names topics of its own (%DLQ%, %RETRY%).
GROUP_MAX_BYTES = TOPIC_MAX_BYTES
# Names whose verdict topic_problem keeps.
TOPIC_CHECK_CACHE_SIZE = 100_000


class MessageInner:
    """A message to put (RocketMQ's MessageExtBrokerInner, the fields the store needs).

    `properties_bytes` and `tags_code` are derived once when the message is made,
    not on the put path.
    """

    __slots__ = (
        "topic",
        "topic_bytes",
        "queue_id",
        "body",
        "flag",
        "properties",
        "properties_bytes",
        "tags_code",
        "born_timestamp",
        "born_host",
        "sys_flag",
        "reconsume_times",
        "prepared_transaction_offset",
        "tail",
    )

    def __init__(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        born_timestamp: int | None = None,
        born_host: bytes = DEFAULT_BORN_HOST,
        sys_flag: int = 0,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.flag = flag
        self.properties = properties if properties is not None else {}
        self.born_timestamp = born_timestamp if born_timestamp is not None else int(time.time() * 1000)
        self.born_host = born_host
        self.sys_flag = sys_flag
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.refresh()

    def refresh(self) -> None:
        """Recompute the derived fields after the topic or the properties change.

        `tail` is the end of the message's item in RocketMQ's batch encoding (properties
        length + properties, store.native.pack_batch); it is built here so the put path only
        joins item head, body and tail.
        """
        self.topic_bytes = self.topic.encode("utf-8")
        props = _encode_properties(self.properties)  # encode_properties's kernel, called directly (every message made)
        if props is None:
            props = format_properties(self.properties)
        self.properties_bytes = props
        self.tags_code = tags_hash(self.properties.get(PROPERTY_TAGS, ""))
        if len(self.topic_bytes) <= 255 and len(props) <= 0x7FFF:
            self.tail = len(props).to_bytes(2, "big") + props
        else:
            self.tail = b""  # refused by validation before it is ever written

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS, ""))


def build_message(
    topic: str,
    body: bytes,
    queue_id: int = 0,
    tags: str | None = None,
    keys: list[str] | None = None,
    properties: dict[str, str] | None = None,
    uniq_key: str | None = None,
    delay_level: int = 0,
    born_timestamp: int | None = None,
    born_host: bytes = DEFAULT_BORN_HOST,
) -> MessageInner:
    """Make a MessageInner with the usual properties filled in (UNIQ_KEY generated when absent).

    `born_host` is 8 bytes (IPv4 + port) or 20 (IPv6 + port); the put sets SYSFLAG's v6 bit from it.
    """
    props: dict[str, str] = dict(properties) if properties else {}
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
    props[PROPERTY_UNIQ_KEY] = uniq_key or new_uniq_key()
    if delay_level > 0:
        props[PROPERTY_DELAY] = str(delay_level)
    return MessageInner(topic, body, queue_id, props, born_timestamp=born_timestamp, born_host=born_host)


def delay_requested(properties: dict[str, str]) -> bool:
    """True when a put is to move the message to SCHEDULE_TOPIC_XXXX: it carries DELAY and not REAL_TOPIC.

    A message the store moved carries REAL_TOPIC from then on, and keeps DELAY on the copy delivered
    to its topic (RocketMQ's ScheduleMessageService.messageTimeup clears DELAY from the copy's
    property map after writing its property string, so CommitLog.putMessage, which reads the map,
    does not delay it again). Producers cannot set REAL_TOPIC, so this tells a delivered copy, and
    a retry of one, from a message asking for a delay.
    """
    return PROPERTY_DELAY in properties and PROPERTY_REAL_TOPIC not in properties


def split_keys(value: str) -> list[str]:
    return [k for k in value.split(KEY_SEPARATOR) if k]


def encode_properties(properties: dict[str, str]) -> bytes:
    """The property string of `properties` (the module's docstring says how), by store._kernels.encode_properties;
    `format_properties` is its reference, and writes what the kernel declines (a mapping that is not a dict, a name
    or value that is not a str, formatted as an f-string formats it)."""
    encoded = _encode_properties(properties)
    return encoded if encoded is not None else format_properties(properties)


def format_properties(properties: dict[str, str]) -> bytes:
    """The property string, one item at a time: encode_properties's reference."""
    if not properties:
        return b""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode("utf-8")


def decode_properties(data: bytes | memoryview) -> dict[str, str]:
    """The properties of a property string, by store._kernels.decode_properties; `parse_properties` is its reference."""
    return _decode_properties(data)


def parse_properties(data: bytes | memoryview) -> dict[str, str]:
    """The properties of a property string, the text decoded first (U+FFFD for what is not UTF-8), split on the
    separators (an item without a name-value separator skipped, a name met again taking the last value): the
    reference decode_properties's kernel is tested against."""
    out: dict[str, str] = {}
    if not data:
        return out
    text = bytes(data).decode("utf-8", errors="replace")
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[name] = value
    return out


def properties_are_encodable(properties: dict[str, Any]) -> str | None:
    """Return why the properties cannot be encoded, or None when they can."""
    for k, v in properties.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return "property names and values must be strings"
        if not k:
            return "property names must not be empty"
        for text in (k, v):
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                return "property names and values must not contain \\x01 or \\x02"
    return None


_POWERS_OF_31 = 256
# _POW31_DESC[j] = 31 ** (_POWERS_OF_31 - 1 - j) mod 2^32: the coefficients of a string's code units.
_POW31_DESC = [pow(31, _POWERS_OF_31 - 1 - j, 1 << 32) for j in range(_POWERS_OF_31)]


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, wrapped to int32.

    Evaluated as one dot product with precomputed powers (keys and tags are short),
    which keeps the per-character work in C.
    """
    try:
        units: bytes | list[int] = text.encode("ascii")
    except UnicodeEncodeError:
        raw = text.encode("utf-16-be")
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)]
    n = len(units)
    h: int
    if n <= _POWERS_OF_31:
        h = sum(map(operator.mul, units, _POW31_DESC[_POWERS_OF_31 - n :])) & 0xFFFFFFFF
    else:
        h = 0
        for unit in units:
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


_TAG_HASH_CACHE: dict[str, int] = {}


def tags_hash(tag: str) -> int:
    """The tags code of a tag (0 for no tag); cached since tags repeat."""
    if not tag:
        return 0
    code = _TAG_HASH_CACHE.get(tag)
    if code is None:
        code = java_string_hash(tag)
        if len(_TAG_HASH_CACHE) < 65_536:
            _TAG_HASH_CACHE[tag] = code
    return code


def offset_msg_id(store_host: bytes, commitlog_offset: int) -> str:
    """RocketMQ's offset message id: host (8 or 20 B) + offset (8 B) as 32 or 56 upper-case hex characters."""
    return (store_host + commitlog_offset.to_bytes(8, "big")).hex().upper()


OFFSET_MSG_ID_LENGTHS = (32, 56)  # hex characters with an IPv4 and an IPv6 store host


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Return (ip, port, commitlog offset) of an offset message id; ValueError when malformed."""
    if len(msg_id) not in OFFSET_MSG_ID_LENGTHS:
        raise ValueError("an offset message id has 32 hex characters (56 with an IPv6 store host)")
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(raw) == 16 else 16
    ip = str(ipaddress.ip_address(raw[:ip_len]))
    port = int.from_bytes(raw[ip_len : ip_len + 4], "big")
    offset = int.from_bytes(raw[ip_len + 4 :], "big", signed=True)
    if offset < 0:
        raise ValueError("offset is negative")
    return ip, port, offset


class UniqKeyGenerator:
    """Generates UNIQ_KEY values; a fixed prefix per process and a per-call suffix.

    `clock_ms` reads the wall clock in ms (time.time by default; tests pass a fixed one).
    """

    def __init__(self, ipv4: bytes = b"\x7f\x00\x00\x01", clock_ms: Callable[[], int] | None = None) -> None:
        prefix = ipv4[:4] + (os.getpid() & 0xFFFF).to_bytes(2, "big") + os.urandom(4)
        self._prefix = prefix.hex().upper()
        self._counter = itertools.count()
        self._clock_ms = clock_ms or _wall_clock_ms
        self._set_time_base(self._clock_ms())
        self._head: tuple[int, str] = (-1, "")  # (ms, the prefix and time of keys made in that ms): one tuple, read whole
        self._head_ascii: tuple[int, bytes] = (-1, b"")  # the same for `reserve`, encoded

    def _set_time_base(self, now_ms: int) -> None:
        self._month_start_ms, self._next_month_start_ms = month_bounds_ms(now_ms)

    def _since_month_start(self) -> int:
        now = self._clock_ms()
        if now >= self._next_month_start_ms:  # a new month has begun: its start is the base
            self._set_time_base(now)
        return now - self._month_start_ms

    def next(self) -> str:
        now = self._clock_ms()
        ms, head = self._head
        if ms != now:  # the first key of this millisecond formats the head
            if now >= self._next_month_start_ms:  # a new month has begun: its start is the base
                self._set_time_base(now)
            head = f"{self._prefix}{(now - self._month_start_ms) & 0xFFFFFFFF:08X}"
            self._head = (now, head)
        return f"{head}{next(self._counter) & 0xFFFF:04X}"

    def next_batch(self, n: int) -> list[str]:
        """`n` keys as `next` makes them, sharing one reading of the clock (a batch is put at once)."""
        if n > UNIQ_KEY_CHUNK:  # the 16-bit counter wraps: a huge batch reads the clock again every chunk
            return [k for first in range(0, n, UNIQ_KEY_CHUNK) for k in self.next_batch(min(UNIQ_KEY_CHUNK, n - first))]
        head = f"{self._prefix}{self._since_month_start() & 0xFFFFFFFF:08X}"
        # Drawn from the counter `next` uses, so a key made concurrently by `next` gets another value.
        return [f"{head}{c & 0xFFFF:04X}" for c in itertools.islice(self._counter, n)]

    def reserve(self, n: int) -> tuple[bytes, int]:
        """The head (ASCII) and first counter value of `n` keys (1..UNIQ_KEY_CHUNK) as `next_batch` makes them:
        key i is the head and `(first + i) & 0xFFFF` in four hex digits (store.native.json_produce writes them)."""
        assert 0 < n <= UNIQ_KEY_CHUNK
        now = self._clock_ms()
        ms, head = self._head_ascii
        if ms != now:  # the first reservation of this millisecond formats the head
            head = self._ascii_head(now)
        if n == 1:  # a single produce's: one draw (`reserve_one`)
            return head, next(self._counter)
        # One C call draws the n values (no other thread can draw between them); it keeps the last.
        (last,) = collections.deque(itertools.islice(self._counter, n), maxlen=1)
        return head, last - n + 1

    def reserve_one(self) -> tuple[bytes, int]:
        """`reserve(1)` (every raw produce)."""
        now = self._clock_ms()
        ms, head = self._head_ascii
        if ms != now:
            head = self._ascii_head(now)
        return head, next(self._counter)

    def _ascii_head(self, now: int) -> bytes:
        """The head of the keys reserved in millisecond `now`, formatted and kept for the rest of it."""
        if now >= self._next_month_start_ms:  # a new month has begun: its start is the base
            self._set_time_base(now)
        head = f"{self._prefix}{(now - self._month_start_ms) & 0xFFFFFFFF:08X}".encode("ascii")
        self._head_ascii = (now, head)
        return head


# Keys made per clock reading at most; a clock tick per chunk keeps 2**16 counter values apart.
UNIQ_KEY_CHUNK = 4_096


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """The starts of the month holding `now_ms` and of the next one, in local time (ms since the epoch)."""
    t = time.localtime(now_ms / 1000)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    end = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(end * 1000)


_DEFAULT_GENERATOR = UniqKeyGenerator()


def new_uniq_key() -> str:
    return _DEFAULT_GENERATOR.next()


def new_uniq_keys(n: int) -> list[str]:
    """`n` fresh UNIQ_KEY values for one batch."""
    return _DEFAULT_GENERATOR.next_batch(n)


# reserve_uniq_keys(n) -> (head, first): `n` fresh UNIQ_KEY values for one batch as a head and a first counter value
# (UniqKeyGenerator.reserve); the bound method itself, called by every packed produce.
reserve_uniq_keys = _DEFAULT_GENERATOR.reserve
reserve_uniq_key = _DEFAULT_GENERATOR.reserve_one  # reserve_uniq_keys(1)


def uniq_keys_of(head: bytes, first: int, n: int) -> list[str]:
    """The `n` keys a reservation stands for (UniqKeyGenerator.reserve)."""
    text = head.decode("ascii")
    return [f"{text}{(first + i) & 0xFFFF:04X}" for i in range(n)]


@functools.lru_cache(maxsize=TOPIC_CHECK_CACHE_SIZE)
def topic_problem(topic: str, max_length_bytes: int = TOPIC_MAX_BYTES, kind: str = "topic") -> str | None:
    """Return why a topic name is invalid, or None when it is valid.

    The one check of a name, for the store and the front end alike, topics and the names that follow
    a topic's rule (consumer and producer groups: `kind` names which in the verdict); cached, so the
    pattern runs once per name (the cache is bounded: a flood of new names only evicts the oldest)."""
    if not topic:
        return f"{kind} must not be empty"
    if len(topic.encode("utf-8")) > max_length_bytes:
        return f"{kind} is longer than {max_length_bytes} bytes"
    if not TOPIC_PATTERN.match(topic):
        return f"{kind} must match {TOPIC_NAME_PATTERN}"
    return None


def group_problem(group: str) -> str | None:
    """Why `group` cannot be a consumer group name (a topic's rule, at most GROUP_MAX_BYTES); None when it can."""
    return topic_problem(group, GROUP_MAX_BYTES, "group")
