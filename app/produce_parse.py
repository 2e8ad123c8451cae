"""Parsing and checking of produce requests (JSON and raw) into message drafts; a binary batch's query.

Every field and type is checked here, before anything reaches the store, and each bad form
has its own problem code. The checks mirror the `ProduceMessage` schema in the spec, plus
what a schema cannot say (base64 validity, the store's size limits, reserved property names).
No regex and no copies of bodies beyond the one decode the wire format needs.

A delay is given by at most one of `delay_level`, `delay_ms` and `deliver_at_ms`. A level keeps
RocketMQ 4's delay levels; `delay_ms` and `deliver_at_ms` become RocketMQ 5's timer properties
(TIMER_DELAY_MS, TIMER_DELIVER_MS), honoured by the store to within `timer_precision_ms`
(store/timer/timer_message.py). A delay past `timer_max_delay_ms` is DELAY_TOO_LONG; a time already
past (or a zero delay) delivers at once.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from app.problems import ProblemError
from app.strict_json import duplicate_name
from store import (
    DEDUP_PROPERTY,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    TIMER_PROPERTIES,
    TRANSACTION_PROPERTIES,
    dedup_id_problem,
    producer_group_problem,
    properties_are_encodable,
)
from store.layouts import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

DELAY_FIELDS = ("delay_level", "delay_ms", "deliver_at_ms")
FIELDS = frozenset(
    {"body", "encoding", "tags", "keys", "properties", "msg_id", "queue_id", "sharding_key", "transaction", "dedup_id", *DELAY_FIELDS}
)
RAW_PARAMS = frozenset({"tags", "keys", "msg_id", "queue_id", "sharding_key", *DELAY_FIELDS})
RESERVED_PROPERTIES = (
    frozenset({PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY, PROPERTY_WAIT, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID})
    | TIMER_PROPERTIES
    | TRANSACTION_PROPERTIES
    | {DEDUP_PROPERTY}
)
# The header carrying a single produce's dedup id (a batch gives one per message: dedup_id).
IDEMPOTENCY_HEADER = "idempotency-key"
# The header naming the producer group of a transactional raw or binary batch produce.
TRANSACTION_HEADER = "x-tidemq-transaction"
# Longest tag (matches the spec's maxLength).
MAX_TAG_CHARS = 255
# Longest client message id (matches the spec's maxLength).
MAX_MSG_ID_CHARS = 128
_FORBIDDEN = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


@dataclass(slots=True)
class Limits:
    max_message_size_bytes: int
    max_batch_messages: int
    # The configured delay levels' delays, level 1 first (MessageStoreConfig.delay_levels_ms()).
    delay_levels_ms: list[int]
    # Longest delay a timer message may ask for (MessageStoreConfig.timer_max_delay_ms).
    timer_max_delay_ms: int = 3 * 86_400_000

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_levels_ms)


@dataclass(slots=True)
class Draft:
    """A checked message, before its queue is chosen."""

    body: bytes
    tags: str | None = None
    keys: list[str] | None = None
    properties: dict[str, str] | None = None
    msg_id: str | None = None
    queue_id: int | None = None
    sharding_key: str | None = None
    delay_level: int = 0
    # Which of DELAY_FIELDS was given (at most one may be).
    delay_from: str | None = None
    # The timer property delay_ms / deliver_at_ms asked for: (name, value), None for none.
    timer: tuple[str, str] | None = None
    # The producer group of a transactional message (stored as a half message); None: not transactional.
    transaction: str | None = None
    # Idempotent produce: the message's dedup id (dedup_id, or the Idempotency-Key header); None: none.
    dedup_id: str | None = None

    def all_properties(self) -> dict[str, str] | None:
        """The user properties plus the timer property and the dedup id, as the store gets them."""
        if self.timer is None and self.dedup_id is None:
            return self.properties
        props = dict(self.properties or {})
        if self.timer is not None:
            props[self.timer[0]] = self.timer[1]
        if self.dedup_id is not None:
            props[DEDUP_PROPERTY] = self.dedup_id
        return props


def parse_json(data: bytes, limits: Limits) -> tuple[list[Draft], bool]:
    """Drafts of a JSON produce body and whether it was a batch."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProblemError("BODY_INVALID", f"the body is not valid JSON: {e}") from None
    if type(doc) is not dict:
        raise ProblemError("BODY_INVALID", 'the body must be a JSON object: a message or {"messages": [...]}')
    repeated = duplicate_name(data, doc)
    if repeated is not None:
        raise ProblemError("BODY_INVALID", f"the name {repeated[:60]!r} appears twice in one object")
    if "messages" in doc:
        if len(doc) != 1:
            raise ProblemError("BODY_INVALID", batch_fields_detail(doc))
        items = doc["messages"]
        if type(items) is not list:
            raise ProblemError("BODY_INVALID", "messages must be an array")
        if not items:
            raise ProblemError("BATCH_EMPTY", "messages is empty")
        if len(items) > limits.max_batch_messages:
            raise ProblemError("BATCH_TOO_LARGE", f"a batch holds at most {limits.max_batch_messages} messages, not {len(items)}")
        drafts = []
        for i, item in enumerate(items):
            try:
                drafts.append(_draft(item, limits))
            except ProblemError as e:  # say which message; the prefix is only built on this path
                raise ProblemError(e.code, f"messages[{i}]: {e.detail}", e.extra) from None
        return drafts, True
    return [_draft(doc, limits)], False


def batch_fields_detail(doc: dict[str, Any]) -> str:
    """Why a batch object with more than "messages" is refused, saying where each field belongs."""
    others = sorted(name for name in doc if name != "messages")
    per_message = [name for name in others if name in FIELDS]
    if per_message:
        where = ", ".join(f'"{name}"' for name in per_message)
        return (
            f'a batch object holds only "messages"; {where} belong{"s" if len(per_message) == 1 else ""} on each message '
            f'(e.g. {{"messages": [{{"body": "...", "{per_message[0]}": ...}}]}}); a binary batch takes queue_id as a query parameter'
        )
    return f'a batch object holds only "messages", not {", ".join(repr(n[:40]) for n in others[:5])}'


def _draft(obj: Any, limits: Limits) -> Draft:
    if type(obj) is not dict:
        raise ProblemError("BODY_INVALID", "a message must be an object")
    body = obj.get("body")
    if type(body) is not str:
        raise ProblemError("BODY_INVALID", "body is required and must be a string")
    encoding = obj.get("encoding")
    if encoding is None or encoding == "utf-8":
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError:
            raise ProblemError("BODY_INVALID", "body is not encodable as UTF-8") from None
    elif encoding == "base64":
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ProblemError("BASE64_INVALID", "body is not valid base64") from None
    else:
        raise ProblemError("BODY_INVALID", 'encoding must be "utf-8" or "base64"')
    if len(raw) > limits.max_message_size_bytes:
        _check_body(raw, limits)  # raises MESSAGE_TOO_LARGE
    draft = Draft(raw)
    if len(obj) > 1:
        for name, value in obj.items():
            if name == "queue_id" and type(value) is int and value >= 0:  # the usual field, without the setter's call
                draft.queue_id = value
                continue
            setter = _SETTERS.get(name)
            if setter is not None:
                if value is not None:
                    setter(draft, value, limits)
            elif name != "body" and name != "encoding":
                raise ProblemError("BODY_INVALID", f"unknown field(s): {', '.join(sorted(set(obj) - FIELDS))}")
    return draft


def _set_tags(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not str:
        raise ProblemError("TAG_INVALID", "tags must be a string")
    draft.tags = check_tag(value)


def _set_keys(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not list:
        raise ProblemError("KEY_INVALID", "keys must be an array of strings")
    for key in value:  # a loop, not any(): this runs for most messages of a batch
        if type(key) is not str:
            raise ProblemError("KEY_INVALID", "keys must be an array of strings")
    draft.keys = check_keys(value)


def _set_properties(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not dict:
        raise ProblemError("PROPERTIES_INVALID", "properties must be an object of strings")
    draft.properties = check_properties(value)


def _set_msg_id(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not str:
        raise ProblemError("MESSAGE_ID_INVALID", "msg_id must be a string")
    draft.msg_id = check_msg_id(value)


# Past it a JSON parser has rounded an integer to a float.
INT64_LIMIT = 2.0**63


def json_int(value: Any) -> Any:
    """An integral JSON number as an int (JSON Schema's "integer" takes 2.0 too); anything else as it is (a float
    past int64, which a parser rounded, stays a float: refused)."""
    return int(value) if type(value) is float and value.is_integer() and abs(value) < INT64_LIMIT else value


def _set_queue_id(draft: Draft, value: Any, limits: Limits) -> None:
    value = json_int(value)
    if type(value) is not int or value < 0:
        raise ProblemError("REQUEST_INVALID", "queue_id must be an integer >= 0")
    draft.queue_id = value


def _set_sharding_key(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not str:
        raise ProblemError("REQUEST_INVALID", "sharding_key must be a string")
    draft.sharding_key = value


def _set_delay_level(draft: Draft, value: Any, limits: Limits) -> None:
    value = json_int(value)
    if type(value) is not int:
        raise ProblemError("DELAY_LEVEL_INVALID", "delay_level must be an integer")
    set_delay(draft, "delay_level", check_delay_level(value, limits))


def _set_delay_ms(draft: Draft, value: Any, limits: Limits) -> None:
    value = json_int(value)
    if type(value) is not int or value < 0:
        raise ProblemError("DELAY_LEVEL_INVALID", "delay_ms must be an integer >= 0")
    set_delay(draft, "delay_ms", 0)
    check_timer_delay("delay_ms", value, limits)
    if value > 0:
        draft.timer = (PROPERTY_TIMER_DELAY_MS, str(value))


def _set_deliver_at_ms(draft: Draft, value: Any, limits: Limits) -> None:
    value = json_int(value)
    if type(value) is not int or value < 0:
        raise ProblemError("DELAY_LEVEL_INVALID", "deliver_at_ms must be an integer >= 0 (milliseconds since the epoch)")
    set_delay(draft, "deliver_at_ms", 0)
    check_timer_delay("deliver_at_ms", value - int(time.time() * 1000), limits)
    draft.timer = (PROPERTY_TIMER_DELIVER_MS, str(value))  # a past time: the store puts it at once


def _set_transaction(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not dict or set(value) != {"producer_group"} or type(value["producer_group"]) is not str:
        raise ProblemError("BODY_INVALID", 'transaction must be {"producer_group": "<name>"}')
    draft.transaction = check_producer_group(value["producer_group"])


def _set_dedup_id(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not str:
        raise ProblemError("DEDUP_ID_INVALID", "dedup_id must be a string")
    draft.dedup_id = check_dedup_id(value)


def check_dedup_id(dedup_id: str) -> str:
    problem = dedup_id_problem(dedup_id)
    if problem is not None:
        raise ProblemError("DEDUP_ID_INVALID", problem)
    return dedup_id


def apply_idempotency_key(drafts: list[Draft], is_batch: bool, header: str) -> None:
    """The Idempotency-Key header of a single produce becomes its message's dedup id."""
    if is_batch:
        raise ProblemError("DEDUP_ID_INVALID", "a batch gives a dedup_id per message, not the Idempotency-Key header")
    key = check_dedup_id(header)
    if drafts[0].dedup_id is not None and drafts[0].dedup_id != key:
        raise ProblemError("DEDUP_ID_INVALID", "the Idempotency-Key header and the message's dedup_id differ")
    drafts[0].dedup_id = key


def check_producer_group(name: str) -> str:
    problem = producer_group_problem(name)
    if problem is not None:
        raise ProblemError("PRODUCER_GROUP_INVALID", f"{problem}: {name[:200]!r}")
    return name


def check_transactional(drafts: list[Draft]) -> str | None:
    """The producer group of a transactional request (every message names the same one, none is delayed); None: not one."""
    group = drafts[0].transaction
    if any(d.transaction != group for d in drafts):
        raise ProblemError("REQUEST_INVALID", "either every message of a batch names the same transaction producer group, or none does")
    if group is not None and any(d.delay_from is not None for d in drafts):
        raise ProblemError("TRANSACTION_INVALID", "a transactional message cannot be delayed (delay_level, delay_ms, deliver_at_ms)")
    return group


# Optional JSON fields -> their check; only the fields present in a message are visited.
_SETTERS: dict[str, Callable[[Draft, Any, Limits], None]] = {
    "tags": _set_tags,
    "keys": _set_keys,
    "properties": _set_properties,
    "msg_id": _set_msg_id,
    "queue_id": _set_queue_id,
    "sharding_key": _set_sharding_key,
    "delay_level": _set_delay_level,
    "delay_ms": _set_delay_ms,
    "deliver_at_ms": _set_deliver_at_ms,
    "transaction": _set_transaction,
    "dedup_id": _set_dedup_id,
}
assert FIELDS == {"body", "encoding", *_SETTERS}


def parse_raw(body: bytes, params: Any, limits: Limits) -> Draft:
    """The draft of a raw (octet-stream) produce: the body as is, fields from query parameters."""
    return _fields_from_query(Draft(_check_body(body, limits)), params, limits)


def _fields_from_query(draft: Draft, params: Any, limits: Limits) -> Draft:
    unknown = set(params.keys()) - RAW_PARAMS
    if unknown:
        raise ProblemError("REQUEST_INVALID", f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    tags = params.get("tags")
    if tags is not None:
        draft.tags = check_tag(tags)
    keys = params.get("keys")
    if keys is not None:
        draft.keys = check_keys([k for k in keys.split(",") if k])
    msg_id = params.get("msg_id")
    if msg_id is not None:
        draft.msg_id = check_msg_id(msg_id)
    queue_id = params.get("queue_id")
    if queue_id is not None:
        draft.queue_id = _int_param("queue_id", queue_id, "REQUEST_INVALID")
    draft.sharding_key = params.get("sharding_key")
    for name in DELAY_FIELDS:
        text = params.get(name)
        if text is not None:
            _SETTERS[name](draft, _int_param(name, text, "DELAY_LEVEL_INVALID"), limits)
    return draft


def apply_query_defaults(drafts: list[Draft], params: Any, limits: Limits) -> None:
    """Query parameters with a JSON body: defaults for every message that does not give the field itself
    (a message's own field wins; its own delay, of any kind, wins over the query's)."""
    default = _fields_from_query(Draft(b""), params, limits)
    for draft in drafts:
        for name in ("tags", "keys", "msg_id", "queue_id", "sharding_key"):
            if getattr(draft, name) is None and getattr(default, name) is not None:
                setattr(draft, name, getattr(default, name))
        if draft.delay_from is None and default.delay_from is not None:
            draft.delay_from, draft.delay_level, draft.timer = default.delay_from, default.delay_level, default.timer


def parse_batch_query(params: Any, limits: Limits) -> tuple[int | None, int | None]:
    """The queue_id of a binary batch produce and the time its messages are due (from delay_ms or
    deliver_at_ms, ms since the epoch); None for what is not given."""
    unknown = set(params.keys()) - {"queue_id", "delay_ms", "deliver_at_ms"}
    if unknown:
        raise ProblemError(
            "REQUEST_INVALID",
            f"a binary batch takes only queue_id, delay_ms and deliver_at_ms as query parameters, not {', '.join(sorted(unknown))}",
        )
    queue_id = params.get("queue_id")
    delay, deliver_at = params.get("delay_ms"), params.get("deliver_at_ms")
    if delay is not None and deliver_at is not None:
        raise ProblemError("REQUEST_INVALID", "give at most one of delay_ms and deliver_at_ms")
    now = int(time.time() * 1000)
    due: int | None = None
    if delay is not None:
        delay_ms = _int_param("delay_ms", delay, "DELAY_LEVEL_INVALID")
        check_timer_delay("delay_ms", delay_ms, limits)
        due = now + delay_ms if delay_ms > 0 else None
    elif deliver_at is not None:
        due = _int_param("deliver_at_ms", deliver_at, "DELAY_LEVEL_INVALID")
        check_timer_delay("deliver_at_ms", due - now, limits)
    return (None if queue_id is None else _int_param("queue_id", queue_id, "REQUEST_INVALID")), due


def _int_param(name: str, text: str, code: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ProblemError(code, f"{name} must be an integer >= 0, not {text[:40]!r}")
    return int(text)


def _check_body(raw: bytes, limits: Limits) -> bytes:
    if len(raw) > limits.max_message_size_bytes:
        raise ProblemError("MESSAGE_TOO_LARGE", f"body has {len(raw)} bytes; the store accepts at most {limits.max_message_size_bytes}")
    return raw


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0, DEL or C1); printable text is answered without a loop."""
    return not text.isprintable() and any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def check_tag(tag: str) -> str | None:
    if not tag:
        return None
    if len(tag) > MAX_TAG_CHARS or "||" in tag or tag == "*" or has_control(tag):
        raise ProblemError("TAG_INVALID", f"tags must be at most {MAX_TAG_CHARS} characters, not '*', without '||' or control characters")
    return tag


def check_keys(keys: list[str]) -> list[str] | None:
    for key in keys:
        if not key or " " in key or "\x01" in key or "\x02" in key:
            raise ProblemError("KEY_INVALID", f"keys must be non-empty and hold no space, \\x01 or \\x02: {key[:60]!r}")
    return keys or None


def check_properties(properties: dict[str, Any]) -> dict[str, str] | None:
    problem = properties_are_encodable(properties)
    if problem is not None:
        raise ProblemError("PROPERTIES_INVALID", f"properties: {problem}")
    reserved = RESERVED_PROPERTIES.intersection(properties)
    if reserved:
        raise ProblemError("PROPERTIES_INVALID", f"properties may not set the reserved name(s) {', '.join(sorted(reserved))}")
    return properties or None


def check_msg_id(msg_id: str) -> str:
    if not msg_id or len(msg_id) > MAX_MSG_ID_CHARS or " " in msg_id or any(c in msg_id for c in _FORBIDDEN):
        raise ProblemError("MESSAGE_ID_INVALID", f"msg_id must be 1..{MAX_MSG_ID_CHARS} characters without spaces, \\x01 or \\x02")
    return msg_id


def check_delay_level(level: int, limits: Limits) -> int:
    if not 0 <= level <= limits.max_delay_level:
        raise ProblemError("DELAY_LEVEL_INVALID", f"delay_level must be in 0..{limits.max_delay_level} (0: no delay)")
    return level


def check_timer_delay(name: str, delay_ms: int, limits: Limits) -> None:
    """DELAY_TOO_LONG past timer_max_delay_ms (the store checks again at the put)."""
    if delay_ms > limits.timer_max_delay_ms:
        raise ProblemError(
            "DELAY_TOO_LONG", f"{name} asks for a delay of {delay_ms} ms; the longest is timer_max_delay_ms={limits.timer_max_delay_ms} ms"
        )


def set_delay(draft: Draft, name: str, level: int) -> None:
    if draft.delay_from is not None:
        raise ProblemError("REQUEST_INVALID", f"give at most one of {', '.join(DELAY_FIELDS)}, not both {draft.delay_from} and {name}")
    draft.delay_from = name
    draft.delay_level = level
