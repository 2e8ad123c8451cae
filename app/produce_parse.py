"""Parsing and checking of produce requests (JSON and raw) into message drafts.

Every field and type is checked here, before anything reaches the store, and each bad form
has its own problem code. The checks mirror the `ProduceMessage` schema in the spec, plus
what a schema cannot say (base64 validity, the store's size limits, reserved property names).
No regex and no copies of bodies beyond the one decode the wire format needs.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from app.problems import ProblemError
from store.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    properties_are_encodable,
)

FIELDS = frozenset({"body", "encoding", "tags", "keys", "properties", "msg_id", "queue_id", "sharding_key", "delay_level"})
RAW_PARAMS = frozenset({"tags", "keys", "msg_id", "queue_id", "sharding_key", "delay_level"})
RESERVED_PROPERTIES = frozenset(
    {PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY, PROPERTY_WAIT, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID}
)
# Longest tag (matches the spec's maxLength).
MAX_TAG_CHARS = 255
# Longest client message id (matches the spec's maxLength).
MAX_MSG_ID_CHARS = 128
_FORBIDDEN = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


@dataclass(slots=True)
class Limits:
    max_message_size_bytes: int
    max_batch_messages: int
    max_delay_level: int


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


def parse_json(data: bytes, limits: Limits) -> tuple[list[Draft], bool]:
    """Drafts of a JSON produce body and whether it was a batch."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProblemError("BODY_INVALID", f"the body is not valid JSON: {e}") from None
    if type(doc) is not dict:
        raise ProblemError("BODY_INVALID", 'the body must be a JSON object: a message or {"messages": [...]}')
    if "messages" in doc:
        if len(doc) != 1:
            raise ProblemError("BODY_INVALID", 'a batch object holds only "messages"')
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
    draft = Draft(_check_body(raw, limits))
    if len(obj) > 1:
        for name, value in obj.items():
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
    if type(value) is not list or any(type(k) is not str for k in value):
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


def _set_queue_id(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not int or value < 0:
        raise ProblemError("REQUEST_INVALID", "queue_id must be an integer >= 0")
    draft.queue_id = value


def _set_sharding_key(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not str:
        raise ProblemError("REQUEST_INVALID", "sharding_key must be a string")
    draft.sharding_key = value


def _set_delay_level(draft: Draft, value: Any, limits: Limits) -> None:
    if type(value) is not int:
        raise ProblemError("DELAY_LEVEL_INVALID", "delay_level must be an integer")
    draft.delay_level = check_delay_level(value, limits)


# Optional JSON fields -> their check; only the fields present in a message are visited.
_SETTERS: dict[str, Callable[[Draft, Any, Limits], None]] = {
    "tags": _set_tags,
    "keys": _set_keys,
    "properties": _set_properties,
    "msg_id": _set_msg_id,
    "queue_id": _set_queue_id,
    "sharding_key": _set_sharding_key,
    "delay_level": _set_delay_level,
}
assert FIELDS == {"body", "encoding", *_SETTERS}


def parse_raw(body: bytes, params: Any, limits: Limits) -> Draft:
    """The draft of a raw (octet-stream) produce: the body as is, fields from query parameters."""
    unknown = set(params.keys()) - RAW_PARAMS
    if unknown:
        raise ProblemError("REQUEST_INVALID", f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    draft = Draft(_check_body(body, limits))
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
    delay_level = params.get("delay_level")
    if delay_level is not None:
        draft.delay_level = check_delay_level(_int_param("delay_level", delay_level, "DELAY_LEVEL_INVALID"), limits)
    return draft


def _int_param(name: str, text: str, code: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ProblemError(code, f"{name} must be an integer >= 0, not {text[:40]!r}")
    return int(text)


def _check_body(raw: bytes, limits: Limits) -> bytes:
    if len(raw) > limits.max_message_size_bytes:
        raise ProblemError("MESSAGE_TOO_LARGE", f"body has {len(raw)} bytes; the store accepts at most {limits.max_message_size_bytes}")
    return raw


def check_tag(tag: str) -> str | None:
    if not tag:
        return None
    if len(tag) > MAX_TAG_CHARS or "||" in tag or tag == "*" or any(c in tag for c in _FORBIDDEN):
        raise ProblemError("TAG_INVALID", f"tags must be at most {MAX_TAG_CHARS} characters, not '*', without '||', \\x01 or \\x02")
    return tag


def check_keys(keys: list[str]) -> list[str] | None:
    for key in keys:
        if not key or " " in key or any(c in key for c in _FORBIDDEN):
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
        raise ProblemError("DELAY_LEVEL_INVALID", f"delay_level must be in 0..{limits.max_delay_level}")
    return level
